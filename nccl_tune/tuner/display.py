"""What a person sees while a study runs: one line per trial start and end, a live status line
for the running trial on a terminal, the incumbent, and a summary table at the end."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.status import Status
from rich.table import Table

from nccl_tune.failure import FailureClass
from nccl_tune.search_spaces.space import UNSET, SearchSpace
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.trial import TrialResult
from nccl_tune.tuner.early_stops import EarlyStops, early_stops
from nccl_tune.tuner.semantics import semantic_changes
from nccl_tune.tuner.stability import Candidate, faster_passed_over
from nccl_tune.tuner.steps import coarse_reading_note
from nccl_tune.tuner.study_records import Outcome, TrialRecord

_STYLE = {
    FailureClass.OK: "green",
    FailureClass.BUDGET: "yellow",
    FailureClass.INTERRUPTED: "magenta",
}


def short_names(space: SearchSpace) -> dict[str, str]:
    """Shortest unambiguous dotted suffix of each parameter name."""
    out: dict[str, str] = {}
    for p in space.parameters:
        parts = p.name.split(".")
        for k in range(1, len(parts) + 1):
            cand = ".".join(parts[-k:])
            clash = [q for q in space.parameters if q.name != p.name and q.name.endswith(cand)]
            if not clash:
                out[p.name] = cand
                break
        else:
            out[p.name] = p.name
    return out


def describe(space: SearchSpace, values: Mapping[str, Any], baseline: Mapping[str, Any] | None = None) -> str:
    """``name=value`` pairs, leaving out env variables left unset (and, given a baseline, unchanged values)."""
    names = short_names(space)
    parts = []
    for p in space.parameters:
        if p.name not in values:
            continue
        v = values[p.name]
        if baseline is not None and baseline.get(p.name) == v:
            continue
        if v == UNSET:
            continue
        parts.append(f"{names[p.name]}={format_value(v)}")
    return " ".join(parts) if parts else "(baseline values)"


def fmt_mem(result: TrialResult | None) -> str:
    if result is None or result.memory is None or not result.memory.peak_gib:
        return "-"
    m = result.memory
    frac = m.max_peak_frac
    where = f" in {m.peak_phase}" if m.peak_phase else ""
    tail = f" ({frac:.0%}{where})" if frac is not None else f" {m.source}"
    return f"{m.peak_gib:.1f} GiB{tail}"


def fmt_tput(v: float | None, unit: str | None = None) -> str:
    """A throughput with its unit (``1,234.5 samples/s``)."""
    return f"{v:,.1f} {unit or '/s'}" if v else "-"


def duration(seconds: float) -> str:
    """``45 s``, ``12.5 min`` or ``3.2 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def early_stop_sentence(stops: EarlyStops) -> str:
    """What stopping early saved, in one sentence."""
    n = len(stops.trials)
    text = (
        f"stopping early: {n} trial{'s' if n != 1 else ''} stopped as slower than the incumbent "
        f"(screening, the early stop) ran {duration(stops.spent_s)} and saved about {duration(stops.saved_s)}, "
        f"{stops.saved_share:.0%} of what the launched trials would have taken"
    )
    if stops.unknown:
        text += f" ({stops.unknown} recorded without their planned steps, not counted)"
    return text


def shorten(text: str, limit: int = 240) -> str:
    """``text`` up to ``limit`` characters, cut between words (never inside a number or a name)."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return (text[:cut] if cut > limit // 2 else text[:limit]).rstrip() + " ..."


class Display:
    """Prints study progress on ``console`` (stderr when stdout carries JSON)."""

    def __init__(self, console: Console, space: SearchSpace) -> None:
        self.console = console
        self.space = space
        self._status: Status | None = None
        self._trial_start = 0.0
        self._label = ""
        self.plain = not console.is_terminal
        """Piped or in CI (``| tee``, 80 columns): one unbroken line per trial, no table."""

    def header(self, study: str, storage: str, resumed: bool, n_done: int, n_more: int, command: str) -> None:
        """``n_done``: trials the study had launched before this run; ``n_more``: this run's ``--trials``."""
        if resumed:
            line = f"resuming study [cyan]{escape(study)}[/]: {n_done} trials done, running up to {n_more} more"
        else:
            line = f"new study [cyan]{escape(study)}[/]: running up to {n_more} trials"
        self.console.print(f"[bold]nccl-tune[/] {line}", highlight=False)
        self.console.print(f"  space {escape(self.space.name)}  storage {escape(storage)}", highlight=False)
        self.console.print(f"  command: {escape(command)}", highlight=False, soft_wrap=True)

    def note(self, text: str) -> None:
        self.console.print(escape(text), highlight=False, soft_wrap=True)

    def trial_started(self, number: int, kind: str, values: Mapping[str, Any], why: str | None = None) -> None:
        """The trial's line; ``why``: the sampler's reason for it, on a line of its own."""
        self._trial_start = time.monotonic()
        self._label = f"trial {number}"
        if self.plain:
            text = f"trial {number} started ({kind}): {describe(self.space, values)}"
            self.console.print(escape(text), highlight=False, soft_wrap=True)
        else:
            self.console.print(
                f"[bold]▶ trial {number}[/] [dim]{escape(kind)}[/] {escape(describe(self.space, values))}",
                highlight=False,
                soft_wrap=True,
            )
        if why:
            self.console.print(
                f"  [dim]why: {escape(why)}[/]" if not self.plain else escape(f"  why: {why}"),
                highlight=False,
                soft_wrap=True,
            )
        if self.console.is_terminal:
            self._status = self.console.status(f"{self._label}: starting")
            self._status.start()

    def progress(self, text: str) -> None:
        if self._status is not None:
            elapsed = time.monotonic() - self._trial_start
            self._status.update(f"{self._label}: {text}  [dim]{elapsed:.0f}s[/]")

    def _stop_status(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def trial_finished(self, number: int, result: TrialResult, near_wall: bool, incumbent: Candidate | None) -> None:
        self._stop_status()
        style = _STYLE.get(result.status, "red")
        status = result.status.value + (" (near memory wall)" if near_wall else "")
        metrics = (
            f"{fmt_tput(result.throughput_per_s, result.throughput_unit)}  mem {fmt_mem(result)}"
            f"  steps {len(result.step_times_s)}  {result.wall_s:.1f}s"
        )
        failed = result.status is not FailureClass.OK
        evidence = shorten(result.verdict.evidence[0].text) if failed and result.verdict.evidence else ""
        advice = result.verdict.advice if failed else ""
        best = (
            f"incumbent: trial {incumbent.first.number} {fmt_tput(incumbent.throughput, incumbent.throughput_unit)}"
            if incumbent
            else ""
        )
        if self.plain:
            parts = [f"trial {number} {status}  {metrics}"] + [
                x for x in (evidence, advice and f"advice: {advice}", best) if x
            ]
            self.console.print(escape(" | ".join(parts)), highlight=False, soft_wrap=True)
            return
        self.console.print(f"  [{style}]{status}[/] {metrics}", highlight=False, soft_wrap=True)
        if evidence:
            self.console.print(f"    [dim]{escape(evidence)}[/]", highlight=False, soft_wrap=True)
        if advice:
            self.console.print(f"    advice: {escape(advice)}", highlight=False, soft_wrap=True)
        if best:
            self.console.print(f"  {best}", highlight=False)

    def skipped(self, number: int, why: str) -> None:
        self.console.print(f"  [dim]trial {number} not launched: {escape(why)}[/]", highlight=False, soft_wrap=True)

    def close(self) -> None:
        self._stop_status()

    def summary(
        self,
        records: list[TrialRecord],
        winner: Candidate | None,
        base: Candidate | None,
        confirmation_required: bool = False,
        show_why: bool = False,
        passed_over: Sequence[tuple[Candidate, str]] = (),
    ) -> None:
        """The trials, what was not launched, and the winner (``confirmation_required``: a winner not
        confirmed by a re-run is not called stable; ``show_why``: why the sampler proposed each trial,
        under it, for the report: the run printed it when the trial started), and the configs faster
        than it that ``passed_over`` says are not stable, with why."""
        if self.plain:
            self._summary_lines(records, winner, base, show_why)
        else:
            self._summary_table(records, winner, base, show_why)
        self._closing(records)
        self.winner(winner, base, confirmation_required)
        for c, why in faster_passed_over(passed_over, winner):
            self.console.print(
                f"[yellow]not stable, though its runs finished:[/] trial {c.first.number} "
                f"{fmt_tput(c.throughput, c.throughput_unit)}: {escape(why)}",
                highlight=False,
                soft_wrap=True,
            )
        note = coarse_reading_note(records, self.space.stop.measured_steps)
        if note:
            self.console.print(f"[yellow]coarse measurement:[/] {escape(note)}", highlight=False, soft_wrap=True)

    def _summary_lines(
        self, records: list[TrialRecord], winner: Candidate | None, base: Candidate | None, show_why: bool
    ) -> None:
        self.console.print("trials:", highlight=False)
        for r in records:
            if r.outcome is not Outcome.LAUNCHED:
                continue
            mark = "  <- best" if winner is not None and r in winner.runs else ""
            status = (r.status.value if r.status else "?") + (" (near memory wall)" if r.near_wall else "")
            values = describe(self.space, r.values, base.values if base else None)
            line = (
                f"  trial {r.number} {r.kind.value} {status}  {fmt_tput(r.throughput, r.throughput_unit)}"
                f"  mem {fmt_mem(r.result)}  {values}{mark}"
            )
            self.console.print(escape(line), highlight=False, soft_wrap=True)
            if show_why and r.why:
                self.console.print(escape(f"    why: {r.why}"), highlight=False, soft_wrap=True)

    def _summary_table(
        self, records: list[TrialRecord], winner: Candidate | None, base: Candidate | None, show_why: bool
    ) -> None:
        table = Table(title="trials", show_lines=False)
        units = {r.throughput_unit for r in records if r.ok and r.throughput}
        for col in ("#", "kind", "status", units.pop() if len(units) == 1 else "throughput", "peak mem"):
            table.add_column(col, no_wrap=True)
        table.add_column("values (changes from the baseline)", overflow="fold")
        for r in records:
            if r.outcome is not Outcome.LAUNCHED:
                continue
            style = _STYLE.get(r.status, "red") if r.status else "dim"
            mark = " ★" if winner is not None and r in winner.runs else ""
            table.add_row(
                f"{r.number}{mark}",
                r.kind.value,
                f"[{style}]{r.status.value if r.status else '?'}[/]" + (" wall" if r.near_wall else ""),
                fmt_tput(r.throughput, None if len(units) == 1 else r.throughput_unit).removesuffix(" /s"),
                fmt_mem(r.result),
                escape(describe(self.space, r.values, base.values if base else None))
                + (f"\n[dim]why: {escape(r.why)}[/]" if show_why and r.why else ""),
            )
        self.console.print(table)

    def _closing(self, records: list[TrialRecord]) -> None:
        stops = early_stops(records)
        if stops is not None:
            self.console.print(escape(early_stop_sentence(stops)), highlight=False, soft_wrap=True)
        swept = sum(r.outcome is Outcome.REJECTED and r.sweep_refused for r in records)
        rej = sum(r.outcome is Outcome.REJECTED for r in records) - swept
        pred = sum(r.outcome is Outcome.PREDICTED for r in records)
        dup = sum(r.outcome is Outcome.DUPLICATE for r in records)
        if rej or pred or dup or swept:
            self.console.print(
                f"not launched: {rej} broke the space's rules, {pred} predicted to run out of memory, "
                f"{dup} already measured" + (f", {swept} with NCCL values that failed the NCCL sweep" if swept else ""),
                highlight=False,
                soft_wrap=True,
            )

    def winner(self, winner: Candidate | None, base: Candidate | None, confirmation_required: bool) -> None:
        """The winner, its gain over the baseline, and what it changes in the training itself."""
        if winner is None:
            self.console.print("[bold red]no stable config found[/]", highlight=False)
            return
        gain = ""
        if base is not None and base.throughput and winner is not base:
            gain = f" ({winner.throughput / base.throughput:.2f}x the baseline's {fmt_tput(base.throughput, base.throughput_unit)})"
        if winner.confirmed:
            head, tail = "[bold green]best stable:[/]", "confirmed by a re-run"
        elif confirmation_required:
            head, tail = (
                "[bold yellow]no confirmed config; best unconfirmed:[/]",
                "[yellow]not confirmed by a re-run[/]",
            )
        else:
            head, tail = "[bold green]best stable:[/]", "[yellow]not confirmed by a re-run[/]"
        tput = fmt_tput(winner.throughput, winner.throughput_unit)
        self.console.print(f"{head} trial {winner.first.number} {tput}{gain}, {tail}", highlight=False, soft_wrap=True)
        self.console.print(f"  {escape(describe(self.space, winner.values))}", highlight=False, soft_wrap=True)
        changes = semantic_changes(self.space, winner.values, base.values if base else None)
        if changes:
            self.console.print("[yellow]it changes the training itself, not only its speed:[/]", highlight=False)
            for change in changes:
                self.console.print(f"  {escape(str(change))}", highlight=False, soft_wrap=True)
            self.console.print("  pin them with --set KEY=VALUE to tune speed only", highlight=False)
