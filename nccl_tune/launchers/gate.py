"""The gate between trials: the next trial starts only on a clean node.

Clean means: every GPU's used memory is back within ``tolerance_gib`` of the baseline taken
before the study, and no process carrying a marker of the study is alive. After ``timeout_s``
the gate raises ``GpuGateError`` naming what still holds the node (pid, command, GPU memory),
instead of letting a leftover worker turn every later trial into a false OOM.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil

from nccl_tune.errors import GpuGateError
from nccl_tune.gpu import GpuProbe
from nccl_tune.launchers.memory import baseline_of
from nccl_tune.launchers.teardown import MarkedProcess, command_of, find_marked, study_match
from nccl_tune.trial import MARKER_ENV

MAX_NAMED = 6
"""The error message names at most this many holders."""


@dataclass(frozen=True)
class Holder:
    """A process holding GPU memory, or a marked process of the study still alive."""

    pid: int
    command: str
    gpu_index: int | None = None
    used_gib: float | None = None
    marker: str | None = None

    def describe(self) -> str:
        where = ""
        if self.gpu_index is not None:
            mem = f"{self.used_gib:.1f} GiB" if self.used_gib is not None else "memory"
            where = f" {mem} on GPU {self.gpu_index}"
        trial = f" [trial {self.marker}]" if self.marker else ""
        return f"pid {self.pid} ({self.command}){where}{trial}"


@dataclass(frozen=True)
class GateState:
    """One look at the node."""

    over: tuple[tuple[int, float, float], ...]
    """GPUs above baseline + tolerance: (index, used GiB, baseline GiB)."""
    marked: tuple[MarkedProcess, ...]
    """Live processes of the study."""

    @property
    def clean(self) -> bool:
        return not self.over and not self.marked


class GpuGate:
    """Waits for GPU memory to return to the baseline and the study's processes to be gone."""

    def __init__(
        self, probe: GpuProbe, *, tolerance_gib: float = 1.0, timeout_s: float = 60.0, poll_s: float = 0.25
    ) -> None:
        self.probe = probe
        self.tolerance_gib = tolerance_gib
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.baseline_gib: dict[int, float] | None = None

    def take_baseline(self) -> dict[int, float]:
        """Record used memory per GPU now (before the study's first trial)."""
        self.baseline_gib = baseline_of(self.probe.usage()) if self.probe.available else {}
        return dict(self.baseline_gib)

    def look(self, study: str | None) -> GateState:
        """The node's state now, against the baseline."""
        if self.baseline_gib is None:
            self.take_baseline()
        assert self.baseline_gib is not None
        over = []
        if self.probe.available:
            for u in self.probe.usage():
                base = self.baseline_gib.get(u.index, 0.0)
                if u.used_gib > base + self.tolerance_gib:
                    over.append((u.index, u.used_gib, base))
        marked = tuple(find_marked(study_match(study))) if study else ()
        return GateState(tuple(over), marked)

    def holders(self, state: GateState) -> list[Holder]:
        """Who holds the node: GPU processes (as NVML lists them) and the study's live processes."""
        out: list[Holder] = []
        seen: set[int] = set()
        if self.probe.available and state.over:
            busy = {index for index, _, _ in state.over}
            for gp in self.probe.processes():
                if gp.gpu_index not in busy:
                    continue
                command, marker = "?", None
                try:
                    proc = psutil.Process(gp.pid)
                    command = command_of(proc, 80)
                    marker = proc.environ().get(MARKER_ENV)
                except (psutil.Error, OSError):
                    pass
                out.append(Holder(gp.pid, command, gp.gpu_index, gp.used_gib, marker))
                seen.add(gp.pid)
        for mp in state.marked:
            if mp.pid not in seen:
                out.append(Holder(mp.pid, mp.command[:80], None, None, mp.marker))
        return out

    def wait(self, study: str | None) -> float:
        """Block until the node is clean; return the seconds waited. Raise ``GpuGateError``
        (one line naming the holders) after ``timeout_s``."""
        t0 = time.monotonic()
        while True:
            state = self.look(study)
            if state.clean:
                return time.monotonic() - t0
            if time.monotonic() - t0 >= self.timeout_s:
                raise GpuGateError(self.message(state))
            time.sleep(self.poll_s)

    def message(self, state: GateState) -> str:
        """The one-line explanation of a gate that did not open."""
        parts = []
        if state.over:
            gpus = ", ".join(f"GPU {i} {used:.1f} GiB (baseline {base:.1f})" for i, used, base in state.over)
            parts.append(f"GPU memory did not return to the baseline within {self.timeout_s:g} s: {gpus}")
        else:
            parts.append(f"processes of the study are still alive after {self.timeout_s:g} s")
        holders = self.holders(state)
        if holders:
            named = "; ".join(h.describe() for h in holders[:MAX_NAMED])
            more = f"; and {len(holders) - MAX_NAMED} more" if len(holders) > MAX_NAMED else ""
            pids = " ".join(str(h.pid) for h in holders[:MAX_NAMED])
            parts.append(f"held by {named}{more}")
            fix = f"stop them (kill {pids}) and resume the study with the same --study"
        else:
            fix = "no process is listed as holding it (another container?); free the GPUs or raise the gate tolerance, then resume"
        return "; ".join(parts) + f": {fix}"
