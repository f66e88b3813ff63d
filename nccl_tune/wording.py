"""Figures and texts as every view writes them: a throughput with its unit, a trial's peak memory,
a duration, a text cut between words. The live display and every report format share them."""

from __future__ import annotations

from nccl_tune.trial import TrialResult


def fmt_mem(result: TrialResult | None) -> str:
    """A trial's peak GPU memory with its share of the GPU and the phase it peaked in (``-`` when unknown)."""
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


def shorten(text: str, limit: int = 240) -> str:
    """``text`` up to ``limit`` characters, cut between words (never inside a number or a name)."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit)
    return (text[:cut] if cut > limit // 2 else text[:limit]).rstrip() + " ..."
