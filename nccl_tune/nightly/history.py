"""A series over time: each night's best throughput, its change from the night before next to
what changed in its fingerprint, the baseline and verdict, and the steps in the level."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nccl_tune.nightly.changepoint import MIN_NIGHTS, MIN_STEP_FRAC, Step, detect_steps, pending_shift
from nccl_tune.nightly.fingerprint import changes
from nccl_tune.nightly.night import Night


@dataclass(frozen=True)
class HistoryRow:
    night: Night
    change_frac: float | None
    """Best throughput against the previous night that had one."""
    fingerprint_changes: tuple[str, ...]
    """What differs from the previous night's fingerprint."""
    step: Step | None
    """The step that starts on this night, if any."""
    pending: bool
    """A shift may be starting on this night (too recent to call a step)."""


@dataclass(frozen=True)
class History:
    series: str
    rows: tuple[HistoryRow, ...]
    steps: tuple[Step, ...]
    pending: Step | None

    @property
    def unit(self) -> str:
        """The unit of the latest night's throughput."""
        return self.rows[-1].night.unit if self.rows else "samples/s"


def build_history(series: str, nights: Sequence[Night]) -> History:
    """``nights`` oldest first."""
    values = [n.best_per_s for n in nights]
    steps = detect_steps(values)
    pending = pending_shift(values)
    by_start = {s.index: s for s in steps}
    rows = []
    last_value: float | None = None
    for i, night in enumerate(nights):
        value = night.best_per_s
        change = (value - last_value) / last_value if value is not None and last_value else None
        before = nights[i - 1].fingerprint if i else None
        rows.append(
            HistoryRow(
                night,
                change,
                changes(before, night.fingerprint),
                by_start.get(i),
                pending is not None and i >= pending.index,
            )
        )
        last_value = value if value is not None else last_value
    return History(series, tuple(rows), steps, pending)


def _changes_since(history: History, index: int) -> tuple[str, ...]:
    """Fingerprint changes on the night a step starts (where an upgrade would show)."""
    return history.rows[index].fingerprint_changes


def step_lines(history: History) -> list[str]:
    """One line per step (and for a pending shift): when it started, how big, and what changed then."""
    lines = []
    for s in history.steps:
        night = history.rows[s.index].night
        why = _changes_since(history, s.index)
        lines.append(
            f"step {s.change_frac:+.1%} starting {night.started_at[:16]} (study {night.study})"
            + (f"; changed that night: {', '.join(why)}" if why else "; no fingerprint change that night")
        )
    p = history.pending
    if p is not None:
        night = history.rows[p.index].night
        why = _changes_since(history, p.index)
        lines.append(
            f"possible shift {p.change_frac:+.1%} since {night.started_at[:16]} (study {night.study}), "
            f"not yet {MIN_NIGHTS} nights long" + (f"; changed that night: {', '.join(why)}" if why else "")
        )
    return lines


def history_json(history: History) -> dict[str, Any]:
    return {
        "series": history.series,
        "rule": {"min_step_frac": MIN_STEP_FRAC, "min_nights": MIN_NIGHTS},
        "unit": history.unit,
        "nights": [
            {
                **r.night.to_json(),
                "change_frac": r.change_frac,
                "fingerprint_changes": list(r.fingerprint_changes),
                "step_starts": r.step is not None,
                "pending_shift": r.pending,
            }
            for r in history.rows
        ],
        "steps": [
            {
                "index": s.index,
                "study": history.rows[s.index].night.study,
                "before_per_s": s.before_median,
                "after_per_s": s.after_median,
                "change_frac": s.change_frac,
            }
            for s in history.steps
        ],
        "pending_shift": None
        if history.pending is None
        else {
            "index": history.pending.index,
            "study": history.rows[history.pending.index].night.study,
            "change_frac": history.pending.change_frac,
        },
        "summary": step_lines(history),
    }


def _verdict_cell(night: Night) -> str:
    if not night.finished:
        return "[magenta]unfinished[/]"
    v = night.verdict
    if v is None:
        return "[dim]not compared[/]"
    text = escape(v.kind.value.replace("_", " "))
    return f"[red]{text}[/]" if v.regression else f"[green]{text}[/]"


def print_history(history: History, console: Console) -> None:
    table = Table(title=f"series {escape(history.series)}")
    for col in (
        "night (UTC)",
        "study",
        f"best {history.unit}",
        "change",
        "fingerprint changes",
        "baseline",
        "verdict",
        "step",
    ):
        table.add_column(col, overflow="fold")
    for r in history.rows:
        n = r.night
        best = "-" if n.best_per_s is None else f"{n.best_per_s:.4g}"
        base = n.baseline.throughput_per_s if n.baseline else None
        step = (
            f"[bold yellow]step {r.step.change_frac:+.1%}[/]" if r.step else ("[yellow]shift?[/]" if r.pending else "")
        )
        table.add_row(
            escape(n.started_at[:16].replace("T", " ")),
            escape(n.study),
            best,
            "" if r.change_frac is None else f"{r.change_frac:+.1%}",
            escape("; ".join(r.fingerprint_changes)),
            "-" if base is None else f"{base:.4g}",
            _verdict_cell(n),
            step,
        )
    console.print(table)
    for line in step_lines(history) or [f"no step of {MIN_STEP_FRAC:.0%} or more over {len(history.rows)} nights"]:
        console.print(escape(line), highlight=False, soft_wrap=True)
