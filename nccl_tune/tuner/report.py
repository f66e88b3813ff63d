"""``nccl-tune report``: what was tried, what failed and why, the winner against the baseline,
as a table, as JSON, and as plots."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import FailureClass
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.tuner.display import Display, describe, shorten
from nccl_tune.tuner.early_stops import early_stops
from nccl_tune.tuner.semantics import semantic_changes
from nccl_tune.tuner.stability import Candidate, faster_passed_over
from nccl_tune.tuner.study_records import Outcome, TrialRecord
from nccl_tune.tuner.study_view import open_study


def trial_row(r: TrialRecord) -> dict[str, Any]:
    """One trial as JSON (the ``--json`` row)."""
    res = r.result
    return {
        "number": r.number,
        "kind": r.kind.value,
        "outcome": r.outcome.value,
        "status": r.status.value if r.status else None,
        "throughput_per_s": r.throughput,
        "throughput_unit": r.throughput_unit,
        "peak_mem_gib": r.peak_mem_gib,
        "peak_phase": r.peak_phase,
        "phase_peak_frac": dict(res.memory.phase_peak_frac) if res and res.memory else {},
        "near_wall": r.near_wall,
        "params": dict(r.values),
        "rank": res.verdict.rank if res else None,
        "evidence": [e.text for e in res.verdict.evidence[:3]] if res else [],
        "advice": res.verdict.advice if res else None,
        "violations": list(r.violations),
        "predicted_from": r.predicted_from,
        "trial_dir": r.trial_dir,
        "why": r.why,
    }


def candidate_json(
    c: Candidate | None, space: SearchSpace | None = None, base: Candidate | None = None
) -> dict[str, Any] | None:
    """A candidate as JSON; with ``space``, the semantic changes it makes from ``base``."""
    if c is None:
        return None
    changes = semantic_changes(space, c.values, base.values if base else None) if space is not None else []
    return {
        "trial": c.first.number,
        "trials": [r.number for r in c.runs],
        "params": dict(c.values),
        "throughput_per_s": c.throughput,
        "throughput_unit": c.throughput_unit,
        "throughput_spread": c.throughput_spread,
        "peak_mem_gib": c.peak_mem_gib,
        "min_headroom_gib": c.min_headroom_gib,
        "confirmed": c.confirmed,
        "semantic_changes": [str(x) for x in changes],
    }


def summary_json(
    study: str,
    storage: str,
    recs: list[TrialRecord],
    winner: Candidate | None,
    base: Candidate | None,
    exit_code: int,
    space: SearchSpace | None = None,
    passed_over: Sequence[tuple[Candidate, str]] = (),
) -> dict[str, Any]:
    """The study as JSON; ``passed_over``: configs left out as flaky (``study_view.passed_over``),
    listed under ``not_stable`` when faster than the winner."""
    launched = [r for r in recs if r.outcome is Outcome.LAUNCHED]
    return {
        "study": study,
        "storage": storage,
        "exit_code": exit_code,
        "best": candidate_json(winner, space, base),
        "baseline": candidate_json(base),
        "counts": {
            "trials": len(recs),
            "launched": len(launched),
            "by_status": dict(Counter(r.status.value for r in launched if r.status)),
            "rejected_by_rules": sum(r.outcome is Outcome.REJECTED for r in recs),
            "predicted_oom": sum(r.outcome is Outcome.PREDICTED for r in recs),
            "duplicates": sum(r.outcome is Outcome.DUPLICATE for r in recs),
        },
        "trials": [trial_row(r) for r in recs],
        "early_stops": _early_stops_json(recs),
        "not_stable": [
            {"trial": c.first.number, "params": dict(c.values), "throughput_per_s": c.throughput, "why": why}
            for c, why in faster_passed_over(passed_over, winner)
        ],
    }


def _early_stops_json(recs: list[TrialRecord]) -> dict[str, Any] | None:
    """``EarlyStops`` as JSON (its saved share included); None when no trial was stopped early."""
    stops = early_stops(recs)
    return None if stops is None else {**asdict(stops), "saved_share": stops.saved_share}


def print_failure_lines(console: Console, space: SearchSpace, recs: list[TrialRecord], base: Candidate | None) -> None:
    """The failures as one unbroken line each (piped, in CI): nothing cut inside a word or number."""
    console.print("failures:", highlight=False)
    for r in recs:
        if r.failed:
            v = r.result.verdict
            rank = "" if v.rank is None else f" rank {v.rank}"
            values = describe(space, r.values, base.values if base else None)
            evidence = shorten(v.evidence[0].text) if v.evidence else ""
            line = f"  trial {r.number} {r.status.value if r.status else '?'}{rank}: {values} | {evidence} | advice: {v.advice}"
            console.print(escape(line), highlight=False, soft_wrap=True)


def failures_table(space: SearchSpace, recs: list[TrialRecord], base: Candidate | None) -> Table:
    table = Table(title="failures")
    for col in ("#", "class", "rank", "values (changes from the baseline)", "evidence", "advice"):
        table.add_column(col, overflow="fold")
    for r in recs:
        if r.failed:
            v = r.result.verdict
            table.add_row(
                str(r.number),
                r.status.value if r.status else "?",
                "-" if v.rank is None else str(v.rank),
                escape(describe(space, r.values, base.values if base else None)),
                escape(v.evidence[0].text[:200]) if v.evidence else "",
                escape(v.advice),
            )
    return table


def plot(space: SearchSpace, recs: list[TrialRecord], out_dir: Path) -> list[Path]:
    """Throughput per trial and throughput against peak memory, as PNG files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    launched = [r for r in recs if r.outcome is Outcome.LAUNCHED]
    paths = []
    fig, ax = plt.subplots(figsize=(8, 4))
    ok = [r for r in launched if r.ok]
    slow = [r for r in launched if r.status is FailureClass.BUDGET]
    bad = [r for r in launched if r.failed]
    ax.scatter([r.number for r in ok], [r.throughput or 0 for r in ok], c="tab:green", label="ok")
    if slow:
        ax.scatter([r.number for r in slow], [0 for _ in slow], c="tab:orange", marker="v", label="stopped: too slow")
    ax.scatter([r.number for r in bad], [0 for _ in bad], c="tab:red", marker="x", label="failed")
    best = 0.0
    xs, ys = [], []
    for r in launched:
        if r.ok and r.throughput and not r.near_wall:
            best = max(best, r.throughput)
        xs.append(r.number)
        ys.append(best)
    ax.step(xs, ys, where="post", c="tab:blue", label="best so far")
    unit = next((r.throughput_unit for r in ok if r.throughput), "throughput")
    ax.set_xlabel("trial")
    ax.set_ylabel(unit)
    ax.legend()
    fig.tight_layout()
    paths.append(out_dir / "throughput.png")
    fig.savefig(paths[-1])
    plt.close(fig)

    with_mem = [r for r in launched if r.peak_mem_gib is not None]
    if with_mem:
        fig, ax = plt.subplots(figsize=(6, 4))
        for r in with_mem:
            ax.scatter(
                r.peak_mem_gib, r.throughput or 0, c="tab:green" if r.ok else "tab:red", marker="o" if r.ok else "x"
            )
        ax.set_xlabel("peak memory per GPU (GiB)")
        ax.set_ylabel(unit)
        fig.tight_layout()
        paths.append(out_dir / "memory.png")
        fig.savefig(paths[-1])
        plt.close(fig)
    return paths


def report_study(
    storage_url: str, study_name: str | None, console: Console, *, as_json: bool, plots_dir: Path | None
) -> dict[str, Any]:
    """Print the report (or return its JSON) for a stored study."""
    stored = open_study(storage_url, study_name)
    space, recs, winner, base = stored.space, list(stored.records), stored.winner, stored.baseline
    data = summary_json(stored.name, storage_url, recs, winner, base, 0 if winner else 2, space, stored.passed_over)
    data["command"] = list(stored.command) or None
    data["hardware"] = stored.hardware
    data["night"] = stored.night.to_json() if stored.night else None
    data["dropped"] = dict(stored.dropped)
    if plots_dir is not None:
        if plots_dir.exists() and not plots_dir.is_dir():
            raise NcclTuneError(f"--plots {plots_dir}: it is a file, not a folder; give a folder for the PNG plots")
        try:
            data["plots"] = [str(p) for p in plot(space, recs, plots_dir)]
        except OSError as exc:
            raise NcclTuneError(
                f"--plots {plots_dir}: cannot write {exc.filename or plots_dir} ({exc.strerror or exc}); "
                "choose a folder you can write"
            ) from None
    if as_json:
        return data
    display = Display(console, space)
    console.print(f"[bold]study[/] {escape(stored.name)}  [dim]{escape(storage_url)}[/]", highlight=False)
    display.summary(recs, winner, base, show_why=True, passed_over=stored.passed_over)
    for reason in stored.dropped.values():
        console.print(f"[yellow]dropped from the search:[/] {escape(reason)}", highlight=False)
    if any(r.failed for r in recs) and display.plain:
        print_failure_lines(console, space, recs, base)
    elif any(r.failed for r in recs):
        console.print(failures_table(space, recs, base))
    verdict = stored.night.verdict if stored.night else None
    if verdict is not None:
        console.print(
            f"[{'bold red' if verdict.regression else 'green'}]{escape(verdict.summary)}[/]",
            highlight=False,
            soft_wrap=True,
        )
    for p in data.get("plots", []):
        console.print(f"plot: {escape(p)}", highlight=False)
    return data
