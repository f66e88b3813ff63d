"""Reading progress from a trial's log lines with the search space's ``ProgressRules``.

``ProgressTracker`` keeps the open-phase stack (``Started: 'generate'`` pushes, ``Finished:
'generate', ...`` pops), the duration of every finished step, the longest duration per phase,
the trainer's memory lines per rank, and when the last progress line arrived. It is fed from the
log reader thread and read from the supervising thread.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from nccl_tune.errors import NcclTuneError
from nccl_tune.trial import ProgressRules

try:  # the regular-expression parser, used only to find a rule's required literal text
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
    from re import _constants as _sre_const  # type: ignore[attr-defined]
except ImportError:  # Python 3.10
    import sre_constants as _sre_const  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

MIN_LITERAL_CHARS = 3
RULE_NAMES = ("step_end", "phase_start", "phase_end", "memory", "training_done")


def required_literal(pattern: str) -> str | None:
    """The longest run of plain text every match of ``pattern`` must contain (so a cheap
    substring test can skip lines that cannot match), or None when there is no such run of at
    least ``MIN_LITERAL_CHARS`` characters (case-insensitive patterns, alternations)."""
    parsed = _sre_parse.parse(pattern)
    if parsed.state.flags & re.IGNORECASE:
        return None
    runs: list[str] = []

    def walk(sub) -> None:  # noqa: ANN001 - a parser SubPattern
        run: list[str] = []
        for op, av in sub:
            if op is _sre_const.LITERAL:
                run.append(chr(av))
                continue
            if op is _sre_const.AT:  # zero-width: does not break the run
                continue
            runs.append("".join(run))
            run = []
            if op is _sre_const.SUBPATTERN:
                walk(av[-1])
            elif op in (_sre_const.MAX_REPEAT, _sre_const.MIN_REPEAT) and av[0] >= 1:
                walk(av[2])
        runs.append("".join(run))

    walk(parsed)
    best = max(runs, key=len, default="")
    return best if len(best) >= MIN_LITERAL_CHARS else None


def compile_rules(rules: ProgressRules) -> dict[str, re.Pattern[str]]:
    """The rules' regular expressions, compiled; ``NcclTuneError`` names a rule that does not compile."""
    compiled = {}
    for name in RULE_NAMES:
        pattern = getattr(rules, name)
        if pattern is None:
            continue
        try:
            compiled[name] = re.compile(pattern)
        except re.error as exc:
            raise NcclTuneError(
                f"progress rule {name}={pattern!r} is not a valid regular expression ({exc}): fix it in the search space"
            ) from None
    return compiled


def required_literals(rules: ProgressRules) -> tuple[bytes, ...] | None:
    """Prefilter for the log reader: one literal per rule, or None if some rule has none (then
    every line must be parsed)."""
    out = []
    for name, pattern in compile_rules(rules).items():
        lit = required_literal(pattern.pattern)
        if lit is None:
            return None
        out.append(lit.encode())
    # a line holding "Finished: 'step', time cost: " also holds "', time cost: ": one search is enough
    unique = list(dict.fromkeys(out))
    return tuple(lit for lit in unique if not any(other != lit and other in lit for other in unique))


@dataclass(frozen=True)
class ProgressEvent:
    """One thing a progress line said."""

    kind: str
    """``step``, ``phase_start``, ``phase_end``, ``memory`` or ``done``."""
    line_no: int
    t: float
    """Arrival time (``time.monotonic()``)."""
    phase: str | None = None
    seconds: float | None = None
    step_index: int | None = None
    gib: float | None = None
    total_gib: float | None = None
    rank: int | None = None


@dataclass(frozen=True)
class ProgressState:
    """A snapshot of what the log said so far."""

    step_times_s: tuple[float, ...] = ()
    phase_max_s: Mapping[str, float] = field(default_factory=dict)
    open_phases: tuple[str, ...] = ()
    first_progress_t: float | None = None
    last_progress_t: float | None = None
    training_done: bool = False
    memory_peak_gib: Mapping[int | None, float] = field(default_factory=dict)
    """Largest memory figure printed per rank (None: lines without a rank)."""
    memory_total_gib: Mapping[int | None, float] = field(default_factory=dict)
    """Total memory per rank, when lines gave a percentage."""

    @property
    def open_phase(self) -> str | None:
        """The innermost phase that started and has not finished."""
        return self.open_phases[-1] if self.open_phases else None


def _float(m: re.Match[str], name: str) -> float | None:
    try:
        value = m.group(name)
    except IndexError:
        return None
    return float(value) if value is not None else None


class ProgressTracker:
    """Applies ``ProgressRules`` to cleaned log lines."""

    def __init__(self, rules: ProgressRules) -> None:
        self._rx = compile_rules(rules)
        self.literals = required_literals(rules)
        self._lock = threading.Lock()
        self._steps: list[float] = []
        self._phase_max: dict[str, float] = {}
        self._open: list[str] = []
        self._first: float | None = None
        self._last: float | None = None
        self._done = False
        self._mem_peak: dict[int | None, float] = {}
        self._mem_total: dict[int | None, float] = {}
        self._events: list[ProgressEvent] = []

    def feed(self, line_no: int, text: str, t: float) -> list[ProgressEvent]:
        """Parse one line; return (and queue for ``drain_events``) what it said."""
        rx = self._rx
        events: list[ProgressEvent] = []
        step = rx["step_end"].search(text) if "step_end" in rx else None
        end = rx["phase_end"].search(text) if "phase_end" in rx else None
        start = rx["phase_start"].search(text) if "phase_start" in rx else None
        mem = rx["memory"].search(text) if "memory" in rx else None
        done = rx["training_done"].search(text) if "training_done" in rx else None
        if not (step or end or start or mem or done):
            return events
        with self._lock:
            if step:
                seconds = _float(step, "seconds") or 0.0
                self._steps.append(seconds)
                self._close("step", seconds)
                events.append(ProgressEvent("step", line_no, t, "step", seconds, len(self._steps) - 1))
            elif end:
                phase = end.group("phase")
                seconds = _float(end, "seconds") or 0.0
                self._close(phase, seconds)
                events.append(ProgressEvent("phase_end", line_no, t, phase, seconds))
            if start:
                phase = start.group("phase")
                self._open.append(phase)
                events.append(ProgressEvent("phase_start", line_no, t, phase))
            if step or end or start:
                self._first = t if self._first is None else self._first
                self._last = t
            if mem:
                gib = _float(mem, "gib")
                if gib is not None:
                    rank_text = mem.groupdict().get("rank") or mem.groupdict().get("gpu")
                    rank = int(rank_text) if rank_text is not None else None
                    pct = _float(mem, "pct") if "pct" in mem.groupdict() else None
                    total = gib * 100.0 / pct if pct else None
                    if gib > self._mem_peak.get(rank, -1.0):
                        self._mem_peak[rank] = gib
                    if total is not None:
                        self._mem_total[rank] = total
                    events.append(ProgressEvent("memory", line_no, t, gib=gib, total_gib=total, rank=rank))
            if done:
                self._done = True
                events.append(ProgressEvent("done", line_no, t))
            self._events.extend(events)
        return events

    def _close(self, phase: str, seconds: float) -> None:
        if seconds > self._phase_max.get(phase, -1.0):
            self._phase_max[phase] = seconds
        if phase in self._open:  # close it and anything opened inside it that never finished
            idx = len(self._open) - 1 - self._open[::-1].index(phase)
            del self._open[idx:]

    def drain_events(self) -> list[ProgressEvent]:
        """Events since the last call, in the order the lines arrived."""
        with self._lock:
            events, self._events = self._events, []
        return events

    def snapshot(self) -> ProgressState:
        """What the log said so far."""
        with self._lock:
            return ProgressState(
                step_times_s=tuple(self._steps),
                phase_max_s=MappingProxyType(dict(self._phase_max)),
                open_phases=tuple(self._open),
                first_progress_t=self._first,
                last_progress_t=self._last,
                training_done=self._done,
                memory_peak_gib=MappingProxyType(dict(self._mem_peak)),
                memory_total_gib=MappingProxyType(dict(self._mem_total)),
            )
