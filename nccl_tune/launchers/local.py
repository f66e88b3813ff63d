"""``LocalLauncher``: one trial as a process tree on this machine, supervised to its end.

A run (``process_tree.ProcessTreeLauncher.run``): write ``spec.json``; start the command in a new
session with the trial's marker, the Flight Recorder dump path and a private Ray of its own in its
env; stream its output to ``output.log`` through the progress parser and sample its memory
(``piped.PipedTree``); watch the three clocks and the observer; tear it down (process group, then
every marked process, then the orphans adopted since it started); collect Flight Recorder dumps;
classify; write ``result.json``.

Interrupts: the tuner's observer returns ``StopReason.INTERRUPTED`` from ``should_stop`` and gets an
``interrupted`` result back. A ``KeyboardInterrupt`` (or any other exception) raised inside
``run`` is not swallowed: the trial is torn down, ``result.json`` records it as ``interrupted``,
and the exception is re-raised. SIGINT/SIGTERM arriving during teardown are held until teardown
has finished, so a second Ctrl-C cannot leave processes behind.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

from nccl_tune.diagnose.stacks import StackReport
from nccl_tune.errors import NcclTuneError
from nccl_tune.gpu import FAKE_NVML_ENV, GpuProbe, open_probe
from nccl_tune.launchers.base import CheckSupport
from nccl_tune.launchers.gate import GpuGate
from nccl_tune.launchers.memory import MemorySampler
from nccl_tune.launchers.nccl_check import nccl_unusable, visible_gpus
from nccl_tune.launchers.piped import POLL_S, TAIL_LINES, PhasesOpen, PipedTree, TrialFolder, launch_error, open_folder
from nccl_tune.launchers.process import build_env, resolve_command, spawn, tuner_alive
from nccl_tune.launchers.process_tree import LaunchFailed, ProcessTreeLauncher
from nccl_tune.launchers.progress import compile_rules
from nccl_tune.launchers.stacks import collect_stacks
from nccl_tune.launchers.teardown import TeardownReport, become_subreaper, kill_marked, study_match, terminate
from nccl_tune.launchers.trial_files import write_result
from nccl_tune.trial import TrialResult, TrialSpec

REAP_GRACE_S = 5.0

LocalTree = PipedTree[subprocess.Popen]
"""A trial on this machine: the command's own output pipe, sampled by a ``MemorySampler`` here."""


class LocalLauncher(ProcessTreeLauncher[LocalTree]):
    """Runs each trial as a local process tree. One instance serves a whole study."""

    name = "local"

    def __init__(
        self,
        *,
        probe: GpuProbe | None = None,
        gate_timeout_s: float = 60.0,
        gate_tolerance_gib: float = 1.0,
        poll_s: float = POLL_S,
        memory_interval_s: float = 0.5,
        tail_lines: int = TAIL_LINES,
        stack_timeout_s: float = 5.0,
    ) -> None:
        self._probe = probe
        self._gate_timeout_s = gate_timeout_s
        self._gate_tolerance_gib = gate_tolerance_gib
        self._gate: GpuGate | None = None
        self.poll_s = poll_s
        self.memory_interval_s = memory_interval_s
        self.tail_lines = tail_lines
        self.stack_timeout_s = stack_timeout_s
        self._study: str | None = None
        self._started_at: dict[int, float] = {}
        """The start (``time.time()``) of each running trial, by its leader's pid."""

    # -- set-up ---------------------------------------------------------------------------------

    @property
    def probe(self) -> GpuProbe:
        """The GPU probe (opened on first use: NVML, the fake NVML in tests, or none)."""
        if self._probe is None:
            self._probe = open_probe()
        return self._probe

    def nccl_check_support(self) -> CheckSupport:
        """The GPUs NVML sees on this machine, as many as this environment's ``CUDA_VISIBLE_DEVICES``
        shows (the trials inherit it), if this Python's torch can run NCCL on them (not under the
        tests' fake NVML, which has no GPU behind it)."""
        if os.environ.get(FAKE_NVML_ENV) or not self.probe.available:
            return CheckSupport(
                None, "no GPU visible through NVML" + (f": {self.probe.reason}" if self.probe.reason else "")
            )
        gpus = visible_gpus(len(self.probe.devices()), os.environ.get("CUDA_VISIBLE_DEVICES"))
        why = nccl_unusable() if gpus else "NVML lists no GPU"
        return CheckSupport(None, why) if why else CheckSupport(gpus)

    @property
    def gpu_gate(self) -> GpuGate:
        """The gate between trials (holds the baseline)."""
        if self._gate is None:
            self._gate = GpuGate(self.probe, tolerance_gib=self._gate_tolerance_gib, timeout_s=self._gate_timeout_s)
        return self._gate

    def prepare(self, spec: TrialSpec) -> None:
        """Raise ``NcclTuneError`` (one line) when the command cannot be found or executed, or a
        progress rule does not compile."""
        compile_rules(spec.progress)
        resolve_command(spec.argv, build_env(spec.env, spec.marker), spec.cwd)
        self._study = spec.marker_scope

    def before_study(self) -> None:
        """Take the GPU memory baseline the gate compares against."""
        self.gpu_gate.take_baseline()

    def gate(self) -> None:
        """Wait for a clean node; ``GpuGateError`` names what still holds it."""
        self.gpu_gate.wait(self._study)

    def reap(self, study: str) -> list[str]:
        """Kill every process carrying a marker of ``study`` (SIGTERM, grace, SIGKILL)."""
        return [p.describe() for p in kill_marked(study_match(study), REAP_GRACE_S)]

    def tuner_alive(self, pid: int) -> bool:
        """True when ``pid`` is a live nccl-tune process other than this one."""
        return tuner_alive(pid)

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()

    # -- the process tree's hooks -----------------------------------------------------------------

    @contextmanager
    def launch(self, spec: TrialSpec) -> Iterator[LocalTree | LaunchFailed]:
        """Write the trial folder (the trial gets a private Ray of its own) and start the command
        in its own session; the baseline is taken first when the study took none."""
        self._study = spec.marker_scope
        if self.gpu_gate.baseline_gib is None:
            self.gpu_gate.take_baseline()
        folder = open_folder(spec, own_ray=True)
        yield self._spawn(spec, folder)

    def _spawn(self, spec: TrialSpec, folder: TrialFolder) -> LocalTree | LaunchFailed:
        t0 = time.monotonic()
        try:
            env = build_env(folder.overlay, spec.marker)
            resolve_command(spec.argv, env, spec.cwd)
            become_subreaper()  # orphans of the trial come back to us, not to init: teardown finds them
            started = time.time()
            proc = spawn(spec.argv, env, spec.cwd)
        except (NcclTuneError, OSError, ValueError) as exc:  # ValueError: an env name exec refuses
            return LaunchFailed(str(exc), t0)
        self._started_at[proc.pid] = started

        def sampler(phase_of: PhasesOpen) -> MemorySampler:
            """Each GPU sample counts under the phases the output has open then."""
            return MemorySampler(
                self.probe, proc.pid, spec.marker, interval_s=self.memory_interval_s, phase_of=phase_of
            )

        baseline = self.gpu_gate.baseline_gib or {}
        return PipedTree(
            spec, proc, folder, t0, sampler, baseline_gib=baseline, poll_s=self.poll_s, tail_lines=self.tail_lines
        )

    def take_stacks(self, spec: TrialSpec, tree: LocalTree) -> StackReport:
        """Every Python process of the trial on this machine, with py-spy."""
        return collect_stacks(spec.marker, tree.pid, self.stack_timeout_s)

    def tear_down(self, spec: TrialSpec, tree: LocalTree) -> TeardownReport:
        """Tear the trial down: its process group, every process carrying its marker, and every one
        descending from it (the orphans this process adopted since the trial started)."""
        proc = tree.command
        since = self._started_at.pop(proc.pid, None)
        return terminate(spec.marker, spec.clocks.grace_s, pgid=proc.pid, leader=proc, since=since)

    def launch_error_result(self, spec: TrialSpec, failed: LaunchFailed) -> TrialResult:
        """Decided from the reason the command could not start (``config_error``)."""
        return launch_error(spec, failed)

    def record(self, spec: TrialSpec, result: TrialResult) -> None:
        """``result.json`` in the trial folder."""
        write_result(result, spec.trial_dir)
