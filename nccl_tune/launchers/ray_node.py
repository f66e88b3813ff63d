"""What runs on a node of the Ray cluster for one trial: ``TrialHost``, the body of a Ray actor
pinned to that node, and ``reap_node``, the body of a task sweeping a study's leftovers.

The host starts the command exactly as the local launcher does (``process.spawn``: a new
session, the trial's marker), runs the GPU gate and the memory sampler of this node, buffers the
command's output for the driver to fetch (``read``), reads the phase lines of that output with the
trial's progress rules (so each GPU sample counts under the phase open on this node when it was
taken, as the local launcher's do; the driver reads the output a fetch later), and tears the trial
down with the local launcher's ``teardown.terminate`` (SIGTERM to the group and the marked
processes, grace, SIGKILL, marker sweep) before the driver kills the actor: ``ray.kill`` alone
would leave the command alive.
This module does not import Ray; the launcher wraps the class with ``ray.remote``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nccl_tune.diagnose.stacks import StackReport
from nccl_tune.gpu import open_probe
from nccl_tune.launchers.gate import GpuGate
from nccl_tune.launchers.logstream import LineScanner
from nccl_tune.launchers.memory import MemorySampler
from nccl_tune.launchers.private_ray import make_private_temp, private_ray_env, remove_private_temp
from nccl_tune.launchers.process import build_env, resolve_command, spawn
from nccl_tune.launchers.progress import ProgressTracker
from nccl_tune.launchers.stacks import collect_stacks
from nccl_tune.launchers.teardown import TeardownReport, become_subreaper, kill_marked, study_match, terminate
from nccl_tune.trial import ProgressRules

BUFFER_LIMIT_BYTES = 64 << 20
"""Output held for the driver at most; beyond it the reader waits (the command's pipe fills)."""
READ_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class MemoryReading:
    """The node's memory sampler, as the driver's stand-in for it reads it."""

    gpu_peak_gib: dict[int, float] = field(default_factory=dict)
    gpu_total_gib: dict[int, float] = field(default_factory=dict)
    peak_rss_gib: float = 0.0
    host_peak_frac: float = 0.0
    phase_peak_frac: dict[str, float] = field(default_factory=dict)
    """Highest GPU share per innermost open phase (``MemorySampler.phase_peak_frac``)."""
    phases_at_last_sample: tuple[str, ...] = ()


@dataclass(frozen=True)
class Chunk:
    """One answer to ``read``: new output, the exit status once known, memory so far."""

    data: bytes
    returncode: int | None
    eof: bool
    memory: MemoryReading


def node_name() -> str:
    """How evidence names this node: host name and IP address."""
    host = socket.gethostname()
    try:
        ip = socket.gethostbyname(host)
    except OSError:
        ip = "?"
    return f"{host} ({ip})"


def node_baseline_gib() -> dict[int, float]:
    """Used GPU memory per index on this node now (before the study's first trial)."""
    probe = open_probe()
    try:
        return GpuGate(probe).take_baseline()
    finally:
        probe.close()


def reap_node(study: str, grace_s: float) -> list[str]:
    """Kill every process of ``study`` on this node; one description per process."""
    return [f"{node_name()}: {p.describe()}" for p in kill_marked(study_match(study), grace_s)]


def trial_env(overlay: Mapping[str, str | None], marker: str, temp_dir: str) -> dict[str, str]:
    """This node's environment with a private Ray for the trial, then the trial's overlay, then
    its marker. An empty ``CUDA_VISIBLE_DEVICES`` (Ray's, for an actor holding no GPU) is dropped."""
    base = dict(os.environ)
    if base.get("CUDA_VISIBLE_DEVICES") == "":
        del base["CUDA_VISIBLE_DEVICES"]
    return build_env({**private_ray_env(temp_dir), **overlay}, marker, base)


class TrialHost:
    """One trial on this node (the actor's body)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._started: float | None = None
        self._sampler: MemorySampler | None = None
        self._tracker: ProgressTracker | None = None
        self._scanner: LineScanner | None = None
        """Reads the phase lines of the output into ``_tracker`` on this node (fed by the pump alone)."""
        self._buffer = bytearray()
        self._eof = False
        self._cond = threading.Condition()
        self._temp_dir: str | None = None
        self._probe = open_probe()

    def node(self) -> str:
        return node_name()

    def gate(self, baseline_gib: dict[int, float] | None, tolerance_gib: float, timeout_s: float) -> float:
        """Wait until this node's GPU memory is back to its baseline (taken now when the study
        took none on this node); raises ``GpuGateError``."""
        gate = GpuGate(self._probe, tolerance_gib=tolerance_gib, timeout_s=timeout_s)
        gate.baseline_gib = dict(baseline_gib) if baseline_gib is not None else None
        return gate.wait(None)

    def start(
        self,
        argv: Sequence[str],
        overlay: Mapping[str, str | None],
        marker: str,
        cwd: str | None,
        memory_interval_s: float,
        progress: ProgressRules | None = None,
    ) -> int:
        """Start the command; its pid. With ``progress`` (the trial's rules), each GPU sample counts
        under the phase its output had open then. Raises ``NcclTuneError``/``OSError``/``ValueError``
        when it cannot."""
        self._temp_dir = make_private_temp()
        env = trial_env(overlay, marker, self._temp_dir)
        where = Path(cwd) if cwd is not None else None
        resolve_command(argv, env, where)
        become_subreaper()  # the trial's orphans come back to this actor: its teardown finds them
        self._started = time.time()
        self._proc = spawn(argv, env, where)
        tracker = self._tracker = ProgressTracker(progress) if progress is not None else None
        self._scanner = LineScanner(tracker.feed, tracker.current_literals) if tracker is not None else None
        self._sampler = MemorySampler(
            self._probe,
            self._proc.pid,
            marker,
            interval_s=memory_interval_s,
            phase_of=tracker.open_phases if tracker is not None else None,
        )
        self._sampler.start()
        threading.Thread(target=self._pump, name=f"pump:{marker}", daemon=True).start()
        return self._proc.pid

    def _pump(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while True:
            try:
                data = os.read(fd, READ_CHUNK_BYTES)
            except OSError:
                data = b""
            if data:
                self._read_phases(data)
            with self._cond:
                if not data:
                    self._eof = True
                    self._cond.notify_all()
                    return
                while len(self._buffer) >= BUFFER_LIMIT_BYTES:
                    self._cond.wait(0.5)
                self._buffer += data
                self._cond.notify_all()

    def _read_phases(self, data: bytes) -> None:
        """Feed the phase reader, when the trial has one; its failure must not stop the output
        reaching the driver."""
        scanner, tracker = self._scanner, self._tracker
        try:
            if scanner is not None and tracker is not None:
                scanner.feed(data)
                tracker.drain_events()  # only the open phases matter here: the driver reports the events
        except Exception:  # the samples then count under the phases open when it failed
            self._scanner = None

    def read(self, wait_s: float) -> Chunk:
        """The output since the last call (waiting up to ``wait_s`` for some), the exit status.
        Once the output has ended the call waits up to ``wait_s`` for the exit status instead: a
        command's pipe often closes a moment before it can be reaped, and a command may close its
        output and go on running."""
        with self._cond:
            if not self._buffer and not self._eof:
                self._cond.wait(wait_s)
            data = bytes(self._buffer[: READ_CHUNK_BYTES * 4])
            del self._buffer[: len(data)]
            eof = self._eof and not self._buffer
            self._cond.notify_all()
        returncode = self._proc.poll() if self._proc is not None else None
        if eof and returncode is None and self._proc is not None:
            try:
                returncode = self._proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                pass
        return Chunk(data, returncode, eof, self._memory())

    def _memory(self) -> MemoryReading:
        s = self._sampler
        if s is None:
            return MemoryReading()
        return MemoryReading(
            s.gpu_peak_gib,
            s.gpu_total_gib,
            s.peak_rss_gib,
            s.host_peak_frac,
            s.phase_peak_frac,
            s.phases_at_last_sample,
        )

    def stacks(self, marker: str, timeout_s: float) -> StackReport:
        """Every Python process of the trial on this node, with py-spy (see ``launchers.stacks``)."""
        proc = self._proc
        return collect_stacks(marker, proc.pid if proc is not None else None, timeout_s)

    def stop(self, marker: str, grace_s: float) -> tuple[TeardownReport, int | None]:
        """Tear the trial down on this node; the report and the command's exit status."""
        proc = self._proc
        report = terminate(marker, grace_s, pgid=proc.pid if proc else None, leader=proc, since=self._started)
        if self._sampler is not None:
            self._sampler.stop()
        if self._temp_dir is not None:
            remove_private_temp(self._temp_dir)
        return report, proc.returncode if proc is not None else None

    def close(self) -> None:
        self._probe.close()
