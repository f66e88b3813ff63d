"""ProcessTreeLauncher's one supervision loop on a scripted tree: when it looks, what decides first,
the order of teardown, and what an exception inside a run leaves behind. Its siblings (local, Ray,
the twin's model) run it on real and modelled trials in their own tests and in the contract."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nccl_tune.diagnose.stacks import StackReport
from nccl_tune.diagnose.verdict import TrialFacts
from nccl_tune.failure import FailureClass, Verdict
from nccl_tune.launchers.process_tree import (
    Ending,
    ExitStatus,
    Findings,
    LaunchFailed,
    ProcessTree,
    ProcessTreeLauncher,
)
from nccl_tune.launchers.progress import ProgressEvent, ProgressLedger, ProgressState
from nccl_tune.launchers.teardown import TeardownReport
from nccl_tune.trial import Clocks, StopReason, StopRule, TrialResult, TrialSpec

from .helpers import RecordingObserver

CLOCKS = Clocks(startup_timeout_s=30, stall_timeout_s=10, stall_floor_s=10, trial_timeout_s=1000, grace_s=2)


class ScriptedTree(ProcessTree):
    """Each wait jumps to the next scripted moment: (time, a step finished then, the command ended)."""

    pid = 4242
    started_t = 0.0

    def __init__(self, moments: list[tuple[float, bool, bool]], log: list[str]) -> None:
        self.moments = moments
        self.log = log
        self.ledger = ProgressLedger(launch_t=0.0)
        self.t = 0.0
        self.ended = False
        self.queued: list[ProgressEvent] = []
        self.ending: Ending | None = None

    def now(self) -> float:
        return self.t

    def wait(self, due_t: float) -> None:
        self.log.append(f"wait {due_t:g}")
        self.t, step, ended = self.moments.pop(0)
        if step:
            index = self.ledger.step_finished(1.0, self.t)
            self.queued.append(ProgressEvent("step", index + 1, self.t, "step", 1.0, index))
        self.ended = self.ended or ended

    def events(self) -> list[ProgressEvent]:
        events, self.queued = self.queued, []
        return events

    def state(self) -> ProgressState:
        return self.ledger.snapshot()

    def exit_status(self) -> ExitStatus | None:
        return ExitStatus(3) if self.ended else None

    def memory_peak_gib(self, state: ProgressState) -> float | None:
        return None

    def hold_output(self) -> None:
        self.log.append("hold_output")

    def close(self) -> None:
        self.log.append("close")

    def findings(self, spec: TrialSpec, ending: Ending) -> Findings:
        self.log.append("findings")
        self.ending = ending
        facts = TrialFacts(stop_reason=ending.decision.reason, stop_detail=ending.decision.detail)
        return Findings(facts, memory=None)


class Scripted(ProcessTreeLauncher[ScriptedTree]):
    name = "scripted"

    def __init__(self, moments: list[tuple[float, bool, bool]] | None) -> None:
        self.moments = moments
        self.log: list[str] = []
        self.recorded: list[TrialResult] = []

    @contextmanager
    def launch(self, spec: TrialSpec) -> Iterator[ScriptedTree | LaunchFailed]:
        self.tree = ScriptedTree(self.moments or [], self.log)
        try:
            yield self.tree if self.moments is not None else LaunchFailed("no such command", 0.0)
        finally:
            self.log.append("released")

    def take_stacks(self, spec: TrialSpec, tree: ScriptedTree) -> StackReport:
        self.log.append("take_stacks")
        return StackReport()

    def tear_down(self, spec: TrialSpec, tree: ScriptedTree) -> TeardownReport:
        self.log.append("tear_down")
        tree.t += 1.5
        return TeardownReport(in_group=1, escaped=0, killed=0, survivors=0, elapsed_s=1.5)

    def launch_error_result(self, spec: TrialSpec, failed: LaunchFailed) -> TrialResult:
        self.log.append("launch_error_result")
        return TrialResult(
            spec.number, FailureClass.CONFIG_ERROR, Verdict(FailureClass.CONFIG_ERROR), StopReason.LAUNCH_ERROR
        )

    def record(self, spec: TrialSpec, result: TrialResult) -> None:
        self.log.append("record")
        self.recorded.append(result)


class Logged(RecordingObserver):
    def __init__(self, log: list[str], **kw) -> None:
        super().__init__(**kw)
        self.log = log

    def _rec(self, kind: str, value: object) -> None:
        super()._rec(kind, value)
        self.log.append(kind)

    def should_stop(self, spec, progress):
        self.log.append("poll")
        return super().should_stop(spec, progress)


def _spec(tmp_path: Path) -> TrialSpec:
    return TrialSpec(
        study="loop", number=0, params={}, argv=("x",), env={}, trial_dir=tmp_path, clocks=CLOCKS, stop=StopRule(1, 2)
    )


def test_the_loop_waits_before_each_look_and_an_exit_beats_a_clock_due_at_the_same_look(tmp_path: Path) -> None:
    launcher = Scripted([(5.0, True, False), (100.0, False, True)])
    result = launcher.run(_spec(tmp_path), Logged(launcher.log))
    assert result.stop_reason is StopReason.EXITED and (result.exit_code, result.signal_name) == (3, None)
    assert result.step_times_s == (1.0,) and result.wall_s == 101.5  # teardown counts, on the tree's clock
    # the first look only after the first wait, and the stall clock (due at 15 s) passed to the next
    assert launcher.log[:5] == ["start", "wait 30", "step", "poll", "wait 15"]
    assert launcher.log[5:] == ["stopping", "tear_down", "close", "findings", "record", "end", "released"]
    ending = launcher.tree.ending
    assert ending is not None and ending.decision.detail == "the command ended (exit code 3)"
    assert ending.exit == ExitStatus(3) and ending.stacks is None and ending.teardown.in_group == 1


def test_a_stop_for_silence_holds_the_output_and_takes_the_stacks_before_teardown(tmp_path: Path) -> None:
    launcher = Scripted([(5.0, True, False), (15.0, False, False)])
    result = launcher.run(_spec(tmp_path), Logged(launcher.log))
    assert result.stop_reason is StopReason.STALL and result.status is FailureClass.HANG
    tail = ["hold_output", "stopping", "take_stacks", "tear_down", "close", "findings", "record", "end", "released"]
    assert launcher.log[-len(tail) :] == tail


def test_an_exception_inside_a_run_is_recorded_as_interrupted_then_re_raised(tmp_path: Path) -> None:
    launcher = Scripted([(5.0, True, False), (6.0, True, False)])
    observer = Logged(launcher.log, raise_on_poll=2)
    with pytest.raises(KeyboardInterrupt):
        launcher.run(_spec(tmp_path), observer)
    assert [r.stop_reason for r in launcher.recorded] == [StopReason.INTERRUPTED]
    assert launcher.recorded[0].status is FailureClass.INTERRUPTED and len(launcher.recorded[0].step_times_s) == 2
    assert launcher.log[-5:] == ["tear_down", "close", "findings", "record", "released"]
    assert "stopping" not in launcher.log and "end" not in launcher.log


def test_a_command_that_cannot_start_is_recorded_without_supervision(tmp_path: Path) -> None:
    launcher = Scripted(None)
    result = launcher.run(_spec(tmp_path), Logged(launcher.log))
    assert result.stop_reason is StopReason.LAUNCH_ERROR
    assert launcher.log == ["launch_error_result", "record", "end", "released"]
