"""Figures and texts as every view writes them: a throughput with its unit, a trial's peak memory,
a duration, a text cut between words. The live display and every report format share them."""

from __future__ import annotations

from nccl_tune.failure import FailureClass
from nccl_tune.oom_demand import OomDemand, oom_demand
from nccl_tune.stragglers import worst_stall
from nccl_tune.trial import TrialResult


def over_the_wall(result: TrialResult | None) -> OomDemand | None:
    """What an out-of-memory trial's PyTorch message shows it needed (None for any other trial, or
    when no message gives the figures)."""
    if result is None or result.status is not FailureClass.OOM:
        return None
    return oom_demand(e.text for e in result.verdict.evidence)


def _mem_text(result: TrialResult | None, gib: str) -> str:
    """A trial's peak GPU memory, each figure followed by ``gib`` (its unit or nothing)."""
    if result is None:
        return "-"
    demand = over_the_wall(result)
    if demand is not None:
        return f"> {demand.capacity_gib:.1f}{gib}, +{demand.tried_gib:.1f}{gib} asked"
    m = result.memory
    if result.status is FailureClass.OOM:
        totals = [g.total_gib for g in m.gpus if g.total_gib > 0] if m else []
        return f"> {max(totals):.1f}{gib}" if totals else "-"
    return f"{m.peak_gib:.1f}{gib}" if m and m.peak_gib else "-"


def mem_gib(result: TrialResult | None) -> str:
    """A trial's peak GPU memory in GiB for a table cell (``63.2``): an out-of-memory trial is over
    the wall, with what PyTorch asked for (``> 79.2, +15.4 asked``); ``-`` when no GPU figure exists
    (the host RSS of the trial's processes is never its GPU memory)."""
    return _mem_text(result, "")


def fmt_mem(result: TrialResult | None) -> str:
    """A trial's peak GPU memory with its share of the GPU and the phase it peaked in; an
    out-of-memory trial over the wall (``> 79.2 GiB, +15.4 GiB asked``); ``-`` when unknown."""
    text = _mem_text(result, " GiB")
    if text == "-" or text.startswith(">") or result is None or result.memory is None:
        return text
    m = result.memory
    where = f" in {m.peak_phase}" if m.peak_phase else ""
    return text + (f" ({m.max_peak_frac:.0%}{where})" if m.max_peak_frac is not None else f" {m.source}")


def fmt_steps(result: TrialResult) -> str:
    """A trial's measured steps, with the stragglers left out of its throughput
    (``16 (1 straggler, 2.1x the median, left out)``)."""
    times, slow = result.measured_step_times_s, result.straggler_steps
    if not slow:
        return str(len(times))
    what = "straggler" if len(slow) == 1 else "stragglers"
    if min(times) <= 0:  # told from the printed rates: a step no clock timed
        return f"{len(times)} ({len(slow)} {what} left out)"
    worst = worst_stall(times, slow)
    return f"{len(times)} ({len(slow)} {what}, {'up to ' if len(slow) > 1 else ''}{worst:.1f}x the median, left out)"


def fmt_rate(v: float | None) -> str:
    """A throughput's figure, as every view rounds it (``1,234.5``; ``-`` when unknown)."""
    return f"{v:,.1f}" if v else "-"


def fmt_tput(v: float | None, unit: str | None = None) -> str:
    """A throughput with its unit (``1,234.5 samples/s``)."""
    return f"{fmt_rate(v)} {unit or '/s'}" if v else "-"


def duration(seconds: float) -> str:
    """``45 s``, ``12.5 min`` or ``3.2 h``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def shorten(text: str, limit: int = 240) -> str:
    """``text`` up to ``limit`` characters, cut between words (never inside a number or a name)."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return (text[:cut] if cut > limit // 2 else text[:limit]).rstrip() + " ..."
