"""``ProcessTreeLauncher``: one trial run and supervised to its end, the same way by every launcher.

The abstract launcher owns ``run`` and the one supervision loop; an implementation provides the
hooks it declares, as the sibling process contexts of torch.distributed.elastic do. A run:

1. ``launch`` opens the trial where it runs (its folder, its environment, its node) and starts its
   command: a ``ProcessTree``, or ``LaunchFailed`` when the command could not start (then
   ``launch_error_result`` is the trial's result). Leaving it releases where the trial ran.
2. The loop looks at the tree whenever its clock says (``ProcessTree.wait``: the wall clock's poll,
   or the next modelled event): the progress events go to the observer, then the command's end
   (``exit_status``), the three clocks and the stop rule (``supervise.Watch``), the memory peak and
   the observer's ``should_stop`` decide whether to stop, in that order.
3. Teardown, with SIGINT/SIGTERM held until it is done: the observer hears why, the ranks' stacks
   are taken at a stall (``take_stacks``), the tree is torn down with one grace deadline
   (``tear_down``) and closed.
4. The result: the tree's findings (``ProcessTree.findings``: the facts, memory, logs), the verdict
   from the one verdict function (``diagnose.verdict.decide``), assembled here and recorded
   (``record``).

Once the command runs, ``run`` never raises, except to re-raise an exception raised inside it (a
``KeyboardInterrupt``, an observer's error): the trial is torn down and recorded as ``interrupted``
first. Implementations: ``LocalLauncher`` (a process tree on this machine), ``RayLauncher`` (one on
a node of a Ray cluster) and the twin's ``ModelLauncher`` (a modelled run on the modelled clock).
"""

from __future__ import annotations

import signal
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from nccl_tune.diagnose.stacks import StackReport
from nccl_tune.diagnose.verdict import TrialFacts, decide
from nccl_tune.failure import Cause, Evidence, FailureClass, Verdict, split_returncode
from nccl_tune.launchers.base import STOP_SIGNALS, Launcher, TrialObserver, TrialProgress
from nccl_tune.launchers.progress import ProgressEvent, ProgressState
from nccl_tune.launchers.supervise import Decision, Watch, observer_decision
from nccl_tune.launchers.teardown import TeardownReport
from nccl_tune.trial import MemoryReport, StopReason, TrialResult, TrialSpec

SILENT_STOPS = (StopReason.STALL, StopReason.STARTUP)
"""Stops for silence: the ranks' stacks are taken before teardown, and what teardown makes the
command print does not decide the verdict."""


@dataclass(frozen=True)
class ExitStatus:
    """How the command's top process ended: an exit code, or the signal that killed it (neither
    when unknown)."""

    code: int | None = None
    signal_name: str | None = None

    @classmethod
    def of(cls, returncode: int | None) -> ExitStatus | None:
        """A ``Popen.returncode`` (negative: a signal) as a status; None while it runs."""
        if returncode is None:
            return None
        code, signal_name = split_returncode(returncode)
        return cls(code, signal_name)

    def describe(self) -> str:
        """``killed by SIGKILL`` or ``exit code 1``."""
        return f"killed by {self.signal_name}" if self.signal_name else f"exit code {self.code}"


@dataclass(frozen=True)
class LaunchFailed:
    """The command could not be started (not found, not executable, a node lost first): nothing runs."""

    reason: str
    """One line."""
    started_t: float
    """When the launch began, on the tree's clock."""


@dataclass(frozen=True)
class Ending:
    """How supervision ended a trial, for its findings."""

    decision: Decision
    stacks: StackReport | None
    """The ranks' stacks, taken at a stop for silence (``SILENT_STOPS``) before teardown."""
    teardown: TeardownReport
    exit: ExitStatus
    """The command's end, after teardown."""


@dataclass(frozen=True)
class Findings:
    """What a tree says of its trial after teardown: what the verdict is decided from, and what the
    result records beside the progress and the clocks."""

    facts: TrialFacts
    memory: MemoryReport | None
    log_paths: tuple[Path, ...] = ()
    fr_dumps: tuple[Path, ...] = ()
    nccl_env_seen: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    warmup_steps: int | None = None
    """Warm-up steps among the finished ones, when not the stop rule's (a modelled run counts only
    those it ran)."""
    gpus: int | None = None
    """GPUs the trial held (its ``gpu_s`` is its wall time times them): the ones NVML saw on the node,
    or the modelled node's; None where none was seen."""
    step_tokens: tuple[float | None, ...] = ()
    """The tokens each finished step carried (``TrialResult.step_tokens``), where the tree knows them."""


class ProcessTree(ABC):
    """One trial's running command, as the supervision loop sees it."""

    pid: int | None
    """The command's top process (None for a modelled run)."""
    started_t: float
    """When the command was launched, on ``now``'s clock."""

    @abstractmethod
    def now(self) -> float:
        """The tree's clock: the wall clock (``time.monotonic``), or the modelled one."""

    @abstractmethod
    def wait(self, due_t: float) -> None:
        """Return at the next moment worth a look: at once the first time, then after the poll
        interval (wall clock), or at the next modelled event or ``due_t`` (when the first clock
        fires without further progress), whichever comes first (modelled clock)."""

    @abstractmethod
    def events(self) -> list[ProgressEvent]:
        """What the command's output said since the last call, in order (steps, phases)."""

    @abstractmethod
    def state(self) -> ProgressState:
        """What the command's output said so far."""

    @abstractmethod
    def exit_status(self) -> ExitStatus | None:
        """How the command ended; None while it runs."""

    @abstractmethod
    def memory_peak_gib(self, state: ProgressState) -> float | None:
        """The highest per-GPU memory seen so far (sampled, or from the memory lines in ``state``);
        None before any."""

    @abstractmethod
    def hold_output(self) -> None:
        """At a stop for silence: note how much output there is now (what teardown makes the
        command print after it does not decide the verdict)."""

    @abstractmethod
    def close(self) -> None:
        """After teardown: stop reading the output and sampling memory; remove what the trial
        needed only while it ran."""

    @abstractmethod
    def findings(self, spec: TrialSpec, ending: Ending) -> Findings:
        """What the trial's output, logs and memory say, once it is torn down and closed."""


TreeT = TypeVar("TreeT", bound=ProcessTree)


@contextmanager
def signals_held() -> Iterator[None]:
    """Hold the stop signals (``STOP_SIGNALS``) while the body runs (main thread only), then deliver them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {}
    for sig in STOP_SIGNALS:
        try:
            previous[sig] = signal.signal(sig, lambda s, _f: pending.append(s))
        except (ValueError, OSError):
            pass
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(pending):
            signal.raise_signal(sig)


class ProcessTreeLauncher(Launcher, Generic[TreeT]):
    """Runs each trial as a process tree and supervises it (see the module docstring); the
    implementation provides the hooks below."""

    # -- the hooks ------------------------------------------------------------------------------

    @abstractmethod
    def launch(self, spec: TrialSpec) -> AbstractContextManager[TreeT | LaunchFailed]:
        """Open the trial where it runs and start its command: the tree, or ``LaunchFailed`` when
        the command could not start. Raises ``NcclTuneError`` only before anything started (the
        trial folder cannot be written, no node is free, a node's gate does not open). Leaving the
        context releases where the trial ran (after the trial's ``on_end``)."""

    @abstractmethod
    def take_stacks(self, spec: TrialSpec, tree: TreeT) -> StackReport:
        """Every rank's Python stack, at a stop for silence, before teardown."""

    @abstractmethod
    def tear_down(self, spec: TrialSpec, tree: TreeT) -> TeardownReport:
        """Stop the trial: every process of it, within ``spec.clocks.grace_s`` of the SIGTERM."""

    @abstractmethod
    def launch_error_result(self, spec: TrialSpec, failed: LaunchFailed) -> TrialResult:
        """The result of a trial whose command could not start."""

    @abstractmethod
    def record(self, spec: TrialSpec, result: TrialResult) -> None:
        """Keep the trial's result (``result.json`` in its folder)."""

    # -- one trial ------------------------------------------------------------------------------

    def run(self, spec: TrialSpec, observer: TrialObserver | None = None) -> TrialResult:
        """Run ``spec`` to its end, tear it down, classify it (see the module docstring)."""
        observer = observer or TrialObserver()
        with self.launch(spec) as tree:
            if isinstance(tree, LaunchFailed):
                result = self.launch_error_result(spec, tree)
                self.record(spec, result)
                observer.on_end(spec, result)
                return result
            return self._supervised(spec, tree, observer)

    def _supervised(self, spec: TrialSpec, tree: TreeT, observer: TrialObserver) -> TrialResult:
        raised: BaseException | None = None
        try:
            observer.on_start(spec, tree.pid)
            decision = self._supervise(spec, tree, observer)
            if decision.reason in SILENT_STOPS:
                tree.hold_output()
        except BaseException as exc:  # KeyboardInterrupt, SystemExit, an observer's error: tear down first
            raised = exc
            decision = Decision(StopReason.INTERRUPTED, f"interrupted by {type(exc).__name__} {exc}".strip())
        with signals_held():
            if raised is None:
                try:
                    observer.on_stopping(spec, decision.reason, decision.detail)
                except Exception as exc:  # an observer's error must not stop the teardown
                    raised = exc
            stacks = self._stacks(spec, tree, decision)
            report = self.tear_down(spec, tree)
            tree.close()
            result = self._result(spec, tree, Ending(decision, stacks, report, tree.exit_status() or ExitStatus()))
            self.record(spec, result)
        if raised is not None:
            raise raised
        observer.on_end(spec, result)
        return result

    def _supervise(self, spec: TrialSpec, tree: TreeT, observer: TrialObserver) -> Decision:
        """Watch the tree until it must stop: its end, a clock, the stop rule or the observer."""
        watch = Watch(spec.clocks, spec.stop, tree.started_t)
        peak_seen = 0.0
        state = tree.state()
        while True:
            tree.wait(watch.due(state)[0])
            _dispatch(spec, tree.events(), observer)
            now = tree.now()
            status = tree.exit_status()
            state = tree.state()
            if status is not None:
                return Decision(StopReason.EXITED, f"the command ended ({status.describe()})", state.open_phase)
            decision = watch.check(state, now)
            if decision is not None:
                return decision
            peak = tree.memory_peak_gib(state)
            if peak is not None and peak > peak_seen:
                peak_seen = peak
                observer.on_memory(spec, peak)
            last = state.last_progress_t
            progress = TrialProgress(
                elapsed_s=now - tree.started_t,
                step_times_s=state.step_times_s,
                open_phase=state.open_phase,
                last_progress_s=now - (last if last is not None else tree.started_t),
                peak_mem_gib=peak,
            )
            decision = observer_decision(observer, spec, progress, state)
            if decision is not None:
                return decision

    def _stacks(self, spec: TrialSpec, tree: TreeT, decision: Decision) -> StackReport | None:
        """At a stop for silence, every rank's stack, before teardown."""
        if decision.reason not in SILENT_STOPS:
            return None
        try:
            return self.take_stacks(spec, tree)
        except Exception as exc:  # a stack reader's failure must not stop the teardown
            return StackReport(note=f"the ranks' stacks could not be taken ({type(exc).__name__}: {exc})")

    def _result(self, spec: TrialSpec, tree: TreeT, ending: Ending) -> TrialResult:
        found = tree.findings(spec, ending)
        verdict = _verdict(found.facts)
        state = tree.state().upto(ending.decision.steps_kept)
        wall_s = tree.now() - tree.started_t
        return TrialResult(
            number=spec.number,
            status=verdict.failure_class,
            verdict=verdict,
            stop_reason=ending.decision.reason,
            exit_code=ending.exit.code,
            signal_name=ending.exit.signal_name,
            step_times_s=state.step_times_s,
            step_rates=state.step_rates,
            untimed_steps=state.untimed_steps,
            late_steps=state.late_steps,
            rate_unit=state.rate_unit,
            progress_preset=state.preset,
            warmup_steps=state.warmup_for(spec.stop.warmup_steps) if found.warmup_steps is None else found.warmup_steps,
            phase_max_s=state.phase_max_s,
            samples_per_step=state.samples_per_step or spec.samples_per_step,
            memory=found.memory,
            wall_s=wall_s,
            trial_dir=spec.trial_dir,
            log_paths=found.log_paths,
            fr_dumps=found.fr_dumps,
            escaped_processes=ending.teardown.escaped,
            survivors=ending.teardown.survivors,
            gpu_s=wall_s * found.gpus if found.gpus is not None else None,
            nccl_env_seen=found.nccl_env_seen,
            step_tokens=found.step_tokens[: len(state.step_times_s)] or state.step_tokens,
        )


def _dispatch(spec: TrialSpec, events: list[ProgressEvent], observer: TrialObserver) -> None:
    for ev in events:
        if ev.kind == "step":
            observer.on_step(spec, ev.step_index or 0, ev.seconds or 0.0)
        elif ev.kind == "phase_end" and ev.phase is not None:
            observer.on_phase(spec, ev.phase, ev.seconds or 0.0)


def _verdict(facts: TrialFacts) -> Verdict:
    """The one verdict function's answer; a classifier error is a crash that keeps the trial's record."""
    try:
        return decide(facts)
    except Exception as exc:  # a classifier bug must not lose the trial's record
        return Verdict(
            FailureClass.CRASH,
            evidence=(Evidence(0, f"{facts.stop_detail}; the log could not be classified: {exc}", "nccl-tune"),),
            advice="read output.log in the trial folder",
            cause=Cause("classifier_error", "", {"error": f"{type(exc).__name__}: {exc}"}),
        )
