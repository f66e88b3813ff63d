"""Memory of a running trial, from the best source there is.

A sampler thread reads, every ``interval_s``: used memory per GPU through ``GpuProbe`` (NVML, or
the fake NVML in tests), the resident memory of the trial's process tree (its top process, the
children, and marked processes that left the tree), and the host's used-memory fraction.
``build_report`` then picks the source: ``nvml`` when a GPU was read, else the memory lines the
trainer printed (``log``), else the process tree (``rss``).

Per phase: given ``phase_of`` (the trial's open-phase stack, outermost first), each sample that read
a GPU also takes the highest used/total share over the GPUs read and keeps, per phase, the highest
share seen while that phase was the innermost one open (``OUTSIDE_PHASES`` when none was), and the
stack of the last such sample; the report's ``phase_peak_frac`` and ``phases_open_at_end`` come
from them. The stack is read just after the GPUs, from the log as parsed so far: a sample taken
before a phase's line has been read counts under the phase before it. For ``log`` they come from
the memory lines of the live output that give a total, each under the phase open when it was read
(``ProgressState.memory_phase_peak_frac``); lines of the other files, read after the trial, have none.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

import psutil

from nccl_tune.gpu import GpuProbe, GpuUsage
from nccl_tune.launchers.progress import ProgressState
from nccl_tune.launchers.teardown import scan
from nccl_tune.trial import OUTSIDE_PHASES, GpuMemory, MemoryReport

GIB = float(1 << 30)
MARKER_SCAN_S = 2.0
"""How often the sampler looks for marked processes outside the process tree."""


def baseline_of(usage: tuple[GpuUsage, ...]) -> dict[int, float]:
    """Used GiB per GPU index."""
    return {u.index: u.used_gib for u in usage}


class MemorySource(Protocol):
    """Where a trial's memory readings come from: a ``MemorySampler`` here, or the one on the trial's
    Ray node as the driver last fetched it (``ray_launcher.RemoteSampler``)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    @property
    def gpu_peak_gib(self) -> dict[int, float]: ...

    @property
    def gpu_total_gib(self) -> dict[int, float]: ...

    @property
    def phase_peak_frac(self) -> dict[str, float]: ...

    @property
    def phases_at_last_sample(self) -> tuple[str, ...]: ...

    @property
    def peak_rss_gib(self) -> float: ...

    @property
    def host_peak_frac(self) -> float: ...


class MemorySampler(threading.Thread):
    """Samples GPU, process-tree and host memory of one trial until stopped; with ``phase_of`` (the
    open phases, outermost first, as a tuple the caller no longer changes) also the GPU peak per
    phase (see the module docstring)."""

    def __init__(
        self,
        probe: GpuProbe,
        root_pid: int,
        marker: str,
        *,
        interval_s: float = 0.5,
        phase_of: Callable[[], tuple[str, ...]] | None = None,
    ) -> None:
        super().__init__(name=f"memory:{marker}", daemon=True)
        self._probe = probe
        self._root_pid = root_pid
        self._marker = marker
        self._interval_s = interval_s
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._gpu_peak: dict[int, float] = {}
        self._gpu_total: dict[int, float] = {}
        self._rss_peak_bytes = 0
        self._host_peak_frac = 0.0
        self._phase_of = phase_of
        self._phase_peak: dict[str, float] = {}
        self._phases_last: tuple[str, ...] = ()
        self._outside: dict[int, psutil.Process] = {}
        self._last_marker_scan = -math.inf
        self.samples = 0
        self.gpu_error: str | None = None

    def run(self) -> None:
        while True:
            self.sample()
            if self._stop_event.wait(self._interval_s):
                break

    def stop(self) -> None:
        """Take a last sample and end the thread."""
        self._stop_event.set()
        self.join(5.0)
        self.sample()

    def _tree_rss_bytes(self) -> int:
        procs: dict[int, psutil.Process] = {}
        try:
            root = psutil.Process(self._root_pid)
            procs[root.pid] = root
            for child in root.children(recursive=True):
                procs[child.pid] = child
        except psutil.Error:
            pass
        now = time.monotonic()
        if now - self._last_marker_scan >= MARKER_SCAN_S:
            self._last_marker_scan = now
            self._outside = {p.pid: p for p in scan(self._marker.__eq__)[1]}
        procs.update({pid: p for pid, p in self._outside.items() if pid not in procs})
        total = 0
        for proc in procs.values():
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                pass
        return total

    def sample(self) -> None:
        """One reading of every source."""
        usage: tuple[GpuUsage, ...] = ()
        if self._probe.available:
            try:
                usage = self._probe.usage()
            except Exception as exc:  # a flaky driver read must not end the trial's supervision
                self.gpu_error = str(exc)
        phases = self._phases() if usage else None
        rss = self._tree_rss_bytes()
        vm = psutil.virtual_memory()
        host_frac = (vm.total - vm.available) / vm.total if vm.total else 0.0
        with self._lock:
            for u in usage:
                if u.used_gib > self._gpu_peak.get(u.index, -1.0):
                    self._gpu_peak[u.index] = u.used_gib
                self._gpu_total[u.index] = u.total_gib
            if phases is not None:
                self._take_phase(phases, usage)
            self._rss_peak_bytes = max(self._rss_peak_bytes, rss)
            self._host_peak_frac = max(self._host_peak_frac, host_frac)
            self.samples += 1

    def _phases(self) -> tuple[str, ...] | None:
        """The open-phase stack now (None without ``phase_of``, or when it failed)."""
        if self._phase_of is None:
            return None
        try:
            return tuple(self._phase_of())
        except Exception:  # the progress reader's failure must not end the sampling
            return None

    def _take_phase(self, phases: tuple[str, ...], usage: tuple[GpuUsage, ...]) -> None:
        """Count one sample's highest GPU share under its innermost phase (lock held)."""
        fracs = [u.used_gib / u.total_gib for u in usage if u.total_gib > 0]
        if not fracs:
            return
        phase = phases[-1] if phases else OUTSIDE_PHASES
        self._phase_peak[phase] = max(self._phase_peak.get(phase, -1.0), max(fracs))
        self._phases_last = phases or (OUTSIDE_PHASES,)

    @property
    def gpu_peak_gib(self) -> dict[int, float]:
        with self._lock:
            return dict(self._gpu_peak)

    @property
    def gpu_total_gib(self) -> dict[int, float]:
        with self._lock:
            return dict(self._gpu_total)

    @property
    def phase_peak_frac(self) -> dict[str, float]:
        """Highest GPU share per innermost open phase (empty without ``phase_of``)."""
        with self._lock:
            return dict(self._phase_peak)

    @property
    def phases_at_last_sample(self) -> tuple[str, ...]:
        """The phases open at the last sample counted per phase, outermost first
        (``(OUTSIDE_PHASES,)`` when none was; empty when no sample was)."""
        with self._lock:
            return self._phases_last

    @property
    def peak_rss_gib(self) -> float:
        with self._lock:
            return self._rss_peak_bytes / GIB

    @property
    def host_peak_frac(self) -> float:
        """Highest fraction of host RAM in use seen during the trial (whole machine)."""
        with self._lock:
            return self._host_peak_frac


def build_report(
    sampler: MemorySource | None,
    progress: ProgressState,
    baseline_gib: Mapping[int, float],
) -> MemoryReport:
    """The trial's ``MemoryReport``: NVML per GPU if sampled, else the trainer's memory lines
    (rank -> GPU index; total from the printed percentage, or NVML's total, or NaN when unknown),
    else the process tree's RSS alone."""
    peak_rss = sampler.peak_rss_gib if sampler is not None else None
    if sampler is not None and sampler.gpu_peak_gib:
        return _nvml_report(sampler, baseline_gib, peak_rss)
    if progress.memory_peak_gib:
        return _log_report(sampler, progress, baseline_gib, peak_rss)
    return MemoryReport("rss", (), peak_rss)


def _nvml_report(sampler: MemorySource, baseline_gib: Mapping[int, float], peak_rss: float) -> MemoryReport:
    """The report from the sampler's GPU readings, with its peaks per phase."""
    totals = sampler.gpu_total_gib
    gpus = tuple(
        GpuMemory(index=i, total_gib=totals[i], peak_gib=peak, baseline_gib=baseline_gib.get(i, 0.0))
        for i, peak in sorted(sampler.gpu_peak_gib.items())
    )
    return MemoryReport("nvml", gpus, peak_rss, sampler.phase_peak_frac, sampler.phases_at_last_sample)


def _log_report(
    sampler: MemorySource | None, progress: ProgressState, baseline_gib: Mapping[int, float], peak_rss: float | None
) -> MemoryReport:
    """The report from the trainer's memory lines, with their peaks per phase (ranks as the GPUs)."""
    nvml_totals = sampler.gpu_total_gib if sampler is not None else {}
    gpus = []
    by_rank = dict(progress.memory_peak_gib)
    if len(by_rank) > 1:  # lines with a rank say more than lines without one
        by_rank.pop(None, None)
    for rank, peak in sorted(by_rank.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        index = rank if rank is not None else 0
        total = progress.memory_total_gib.get(rank) or nvml_totals.get(index) or math.nan
        gpus.append(
            GpuMemory(index=index, total_gib=round(total, 3), peak_gib=peak, baseline_gib=baseline_gib.get(index, 0.0))
        )
    phase_peak: dict[str, float] = {}
    for rank, peaks in progress.memory_phase_peak_frac.items():
        if rank in by_rank:
            for phase, frac in peaks.items():
                phase_peak[phase] = max(phase_peak.get(phase, -1.0), frac)
    last = [phases for rank, phases in progress.memory_phases_last.items() if rank in by_rank]
    return MemoryReport(
        "log", tuple(gpus), peak_rss, phase_peak, last[-1] if last else (), step_peak_frac=progress.step_peak_frac
    )
