"""Host-memory pressure a log shows: what turns a silent SIGKILL into ``host_oom``.

A process that the kernel's or a container's OOM killer ends prints nothing; its launcher reports
the SIGKILL (``exitcode: -9``, ``return code = -9``, a shell's ``Killed``, exit status 137). The
log can still say that host memory ran out, in three ways:

- readouts of host memory (``HostMemory``): a share of RAM at ``PEAK_FRAC`` or above, or readouts
  that climb: the last ``CLIMB_READOUTS`` never falling, the last at least ``CLIMB_FACTOR`` times
  the first of the run (rollouts, offloaded state or a leak piling up in host RAM);
- a memory limit the run lives under (``rules.MEMORY_LIMIT``: a cgroup's ``memory.max``, a
  container's, pod's or job's limit), whose OOM killer ends what crosses it without a word;
- a memory-heavy phase right before the kill (``heavy_phase``): the run's last lines before the
  kill, at most ``HEAVY_PHASE_LINES`` of them (launchers' teardown lines not counted) and no
  training step after it, announce a checkpoint save, data or weights being loaded or tokenised,
  or weights gathered to one rank (``rules.MEMORY_HEAVY``).

The reader feeds ``HostMemory`` its readouts and limits and asks ``heavy_phase`` about the lines
before each SIGKILL it reads; the root-cause decision (``classify``) weighs them, in that order.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from nccl_tune.diagnose import text as T
from nccl_tune.diagnose.rules import HOST_MEMORY, MEMORY_HEAVY, MEMORY_LIMIT, MEMORY_LIMIT_NOT
from nccl_tune.failure import Evidence

PEAK_FRAC = 0.90
"""A share of host RAM at or above which a SIGKILL is host memory."""
CLIMB_READOUTS = 3
"""Readouts in a row that must never fall for memory to be climbing."""
CLIMB_FACTOR = 1.25
"""How much higher than the run's first readout the last one must be for memory to be climbing."""
CLIMB_MIN_FRAC = 0.75
"""A climb in shares of RAM must also end this high."""
HEAVY_PHASE_LINES = 12
"""Lines before a kill (not counting launchers' teardown) searched for a memory-heavy phase."""
HEAVY_PHASE_WORDS = {"save": "saving a checkpoint", "load": "loading data", "gather": "gathering or merging weights"}
"""What each kind of memory-heavy phase is called in a verdict."""
_TEARDOWN = re.compile(
    r"^\s*$|closing signal SIG|Sending process \d+|Killing subprocess|sigkill_handler|NCCL INFO|\bwandb:"
    r"|Signals\.SIG|death signal|[Ss]hutting down|Terminating|^\s*[-=]{8,}\s*$"
)
"""Lines a launcher or library prints while it takes the other processes down after a kill."""


class HostMemory:
    """Host-memory readouts and memory limits seen in a log, in bounded memory."""

    def __init__(self) -> None:
        self.peak: tuple[float, Evidence] | None = None
        """The highest share of RAM read, and its line."""
        self.limit: Evidence | None = None
        """The first line that names a memory limit the run lives under."""
        self._first: dict[str, float] = {}
        self._recent: dict[str, deque[tuple[float, Evidence]]] = {}

    def readout(self, msg: str, evidence: Evidence) -> bool:
        """Read a host-memory figure from ``msg`` (a share of RAM or GB used); True if it held one."""
        if "GPU" in msg or "cuda" in msg:
            return False
        m = HOST_MEMORY.search(msg)
        if m is None:
            return False
        if m.group("pct") is not None:
            value, unit = float(m.group("pct")) / 100.0, "frac"
            if self.peak is None or value >= self.peak[0]:
                self.peak = (value, evidence)
        else:
            value, unit = float(m.group("gb")), "gb"
        self._first.setdefault(unit, value)
        self._recent.setdefault(unit, deque(maxlen=CLIMB_READOUTS)).append((value, evidence))
        return True

    def limit_line(self, msg: str, evidence: Evidence) -> None:
        """Remember the first line that names a memory limit of the host's, the container's or the job's."""
        if self.limit is None and MEMORY_LIMIT.search(msg) and not any(w in msg for w in MEMORY_LIMIT_NOT):
            self.limit = evidence

    @property
    def climb(self) -> Evidence | None:
        """The last readout of host memory that climbed to it (see the module docstring), or None."""
        for unit, recent in self._recent.items():
            values = [v for v, _ in recent]
            if len(values) < CLIMB_READOUTS or any(b < a for a, b in zip(values, values[1:])):
                continue
            if values[-1] >= self._first[unit] * CLIMB_FACTOR and (unit != "frac" or values[-1] >= CLIMB_MIN_FRAC):
                return recent[-1][1]
        return None


def heavy_phase(
    lines: Sequence[tuple[int, str]], source: str, is_step: Callable[[str], bool]
) -> tuple[str, Evidence] | None:
    """The memory-heavy phase the lines before a kill announce (``(kind, its line)``), the last line
    first; None when a training step came after it, or none is within ``HEAVY_PHASE_LINES``."""
    counted = 0
    for no, raw in reversed(lines):
        text = T.clean(raw)
        msg = T.message(text)
        if _TEARDOWN.search(msg):
            continue
        counted += 1
        if counted > HEAVY_PHASE_LINES or is_step(msg):
            return None
        m = MEMORY_HEAVY.search(msg)
        if m is not None:
            return m.lastgroup or "save", Evidence(no, text, source)
    return None


def numbered(lines: Iterable[bytes], last_no: int) -> list[tuple[int, str]]:
    """Lines that end at line ``last_no``, decoded and numbered."""
    out = [raw.decode("utf-8", "replace") for raw in lines]
    return [(last_no - len(out) + 1 + i, line) for i, line in enumerate(out)]
