"""What a finished trial's log files say beyond its live output: the memory lines a trainer's
workers wrote to their own logs (SkyRL's ``infra-*.log``), and what each rank's NCCL reported
reading from its environment (in any of the files).

The live output (``output.log``) is parsed as it streams, for the clocks and the display; these
files are read once, after teardown, by :func:`scan_trial_logs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Sequence

from nccl_tune.diagnose.nccl_seen import parse_seen
from nccl_tune.launchers.logstream import clean_line
from nccl_tune.launchers.progress import ProgressState, ProgressTracker, required_literals
from nccl_tune.trial import ProgressRules


@dataclass(frozen=True)
class LogFacts:
    memory_peak_gib: Mapping[int | None, float] = field(default_factory=dict)
    """Largest memory figure per rank printed in the files other than the live output."""
    memory_total_gib: Mapping[int | None, float] = field(default_factory=dict)
    nccl_seen: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Per rank, the NCCL variables NCCL reported reading (``diagnose.nccl_seen.parse_seen``)."""


def _lines(path: Path):
    try:
        with open(path, encoding="utf-8", errors="replace", buffering=1 << 20) as fh:
            yield from fh
    except OSError:
        return


def scan_trial_logs(paths: Sequence[Path], live: Path, rules: ProgressRules) -> LogFacts:
    """Read every file of ``paths``: NCCL's environment report from all of them, memory lines
    from those other than ``live`` (whose memory lines the live parser already has)."""
    seen: dict[str, dict[str, str]] = {}
    memory_only = ProgressRules(step_end=None, phase_start=None, phase_end=None, memory=rules.memory, training_done=None)  # type: ignore[arg-type]
    tracker = ProgressTracker(memory_only) if rules.memory else None
    literals = tuple(x.decode() for x in required_literals(memory_only) or ()) if tracker else ()
    for path in paths:
        extra = Path(path) != Path(live)
        for n, raw in enumerate(_lines(path), 1):
            if "set by environment" in raw:
                parse_seen((raw,), seen)
            elif extra and tracker is not None and (not literals or any(lit in raw for lit in literals)):
                tracker.feed(n, clean_line(raw), 0.0)
    state = tracker.snapshot() if tracker is not None else None
    return LogFacts(
        memory_peak_gib=MappingProxyType(dict(state.memory_peak_gib)) if state else MappingProxyType({}),
        memory_total_gib=MappingProxyType(dict(state.memory_total_gib)) if state else MappingProxyType({}),
        nccl_seen=MappingProxyType({k: dict(v) for k, v in seen.items()}),
    )


def with_log_memory(state: ProgressState, facts: LogFacts) -> ProgressState:
    """``state`` with the memory lines of the other files added (the higher peak per rank wins)."""
    if not facts.memory_peak_gib:
        return state
    peaks = dict(state.memory_peak_gib)
    for rank, gib in facts.memory_peak_gib.items():
        peaks[rank] = max(gib, peaks.get(rank, gib))
    totals = {**facts.memory_total_gib, **state.memory_total_gib}
    return replace(state, memory_peak_gib=MappingProxyType(peaks), memory_total_gib=MappingProxyType(totals))
