"""The launcher plug-in kind: runs one ``TrialSpec`` and returns a ``TrialResult``.

Only ``launchers/`` starts or kills processes. A launcher never raises once a trial has
started: whatever happens becomes the ``status`` and ``verdict`` of the result. It raises
``NcclTuneError`` only for what makes the whole study pointless (for instance the command
does not exist, or the GPU gate does not open).

Implementations: the siblings of ``process_tree.ProcessTreeLauncher``, which owns the run and its
supervision: ``LocalLauncher`` (a process tree on this machine), ``RayLauncher`` (one on a node of
a Ray cluster) and the twin's ``ModelLauncher`` (the synthetic cost model, in-process); and
``nccl_check.CheckingLauncher``, which runs a trial's NCCL check through the launcher it wraps.
Every implementation passes ``tests/launchers/test_contract.py``.
"""

from __future__ import annotations

import signal
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass

from nccl_tune.trial import StopReason, TrialResult, TrialSpec

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that stop the tuner by one path: the running trial torn down and recorded as
interrupted, the study left to resume (exit 130). SIGHUP is the terminal closing: left to its
default it would end the tuner with the trainer still running and the trial still RUNNING."""


@dataclass(frozen=True)
class TrialProgress:
    """What the launcher knows about a running trial, given to the observer."""

    elapsed_s: float
    step_times_s: tuple[float, ...]
    """Finished steps so far, warm-up included."""
    open_phase: str | None
    last_progress_s: float
    """Seconds since the last progress line."""
    peak_mem_gib: float | None = None


@dataclass(frozen=True)
class CheckSupport:
    """Whether a launcher can run the NCCL check where its trials run, and on how many GPUs."""

    gpus: int | None
    """GPUs the check runs one rank each on; None: it cannot run."""
    why_not: str = ""
    """One line, when it cannot."""
    python: str = sys.executable
    """The Python the check's ranks run under where the trials run (its torch runs NCCL there)."""


class TrialObserver:
    """Callbacks from a running trial. The base class does nothing; the tuner subclasses it
    for its live display, early stopping and interrupt handling."""

    def on_start(self, spec: TrialSpec, pid: int | None) -> None:
        """The command was started (``pid`` of its top process; None for in-process launchers)."""

    def on_phase(self, spec: TrialSpec, phase: str, seconds: float) -> None:
        """A phase finished."""

    def on_step(self, spec: TrialSpec, step_index: int, seconds: float) -> None:
        """Step ``step_index`` (0-based, warm-up included) finished in ``seconds``."""

    def on_memory(self, spec: TrialSpec, peak_gib: float) -> None:
        """A new peak of per-GPU memory was seen."""

    def should_stop(self, spec: TrialSpec, progress: TrialProgress) -> StopReason | None:
        """Polled about every 0.2 s (at every modelled event by in-process launchers). Return
        ``StopReason.INTERRUPTED`` to stop because the tuner is being interrupted, or
        ``StopReason.EARLY_STOP`` to stop a trial already worse than the incumbent; None to let it run."""
        return None

    def stop_detail(self) -> str | None:
        """Why the last ``EARLY_STOP`` was asked for, in a few words the trial's line shows (None: the
        launcher says "slower than the best trial so far")."""
        return None

    def on_stopping(self, spec: TrialSpec, reason: StopReason, detail: str) -> None:
        """The launcher stops watching the trial (``reason``: measured, stall, exited, ...) and
        starts tearing it down; ``detail`` is one line."""

    def on_end(self, spec: TrialSpec, result: TrialResult) -> None:
        """The trial was torn down and classified."""


class Launcher(ABC):
    """Runs trials. One instance serves a whole study."""

    name: str = "base"

    def prepare(self, spec: TrialSpec) -> None:
        """Check, before the first trial, that ``spec`` can be launched at all (the command
        exists and is executable); raise ``NcclTuneError`` with a one-line message if not."""

    @abstractmethod
    def run(self, spec: TrialSpec, observer: TrialObserver | None = None) -> TrialResult:
        """Run one trial to its end and tear it down; never raises once it has started."""

    def before_study(self) -> None:
        """Take the baseline (GPU memory before the study) and anything else needed once."""

    def gate(self) -> None:
        """Block until the node is clean for the next trial (GPU memory back to baseline, no
        process of an earlier trial alive); raise ``GpuGateError`` naming what still holds it."""

    def nccl_check_support(self) -> CheckSupport:
        """Whether the NCCL check (``launchers.nccl_check``) can run where this launcher's trials run."""
        return CheckSupport(None, f"the {self.name} launcher does not run it")

    def notes(self) -> list[str]:
        """Lines for the user that came up since the last call (the runner shows them after a trial)."""
        return []

    def reap(self, study: str) -> list[str]:
        """Kill every process still carrying a marker of ``study`` (left by a tuner that was
        killed); return one description per process killed."""
        return []

    def tuner_alive(self, pid: int) -> bool:
        """True when process ``pid`` of this host, the tuner that started a trial still recorded
        as running, is alive (another ``nccl-tune run`` is running the study). A launcher that
        cannot tell answers False."""
        return False

    def close(self) -> None:
        """Release resources (threads, connections)."""
