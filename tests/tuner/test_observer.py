"""The tuner's observer: what it stops a running trial for, and the words the trial's line gives."""

from __future__ import annotations

import io
from pathlib import Path

from optuna.trial import TrialState
from rich.console import Console

from nccl_tune.failure import FailureClass, Verdict
from nccl_tune.launchers.base import TrialProgress
from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.trial import StopReason, StopRule, TrialResult, TrialSpec
from nccl_tune.tuner.display import Display
from nccl_tune.tuner.observer import InterruptFlag, TunerObserver
from nccl_tune.tuner.screening import ScreenBar
from nccl_tune.tuner.stability import Candidate
from nccl_tune.tuner.study_records import Outcome, TrialKind, TrialRecord

SPACE = parse_space("""
name: observed
parameters:
  - {name: micro, kind: pow2, low: 1, high: 8, default: 2, memory: increasing}
throughput: {samples_per_step: 64}
""", source="test", label="observed")


def incumbent(step_times_s: tuple[float, ...]) -> Candidate:
    result = TrialResult(number=0, status=FailureClass.OK, verdict=Verdict(FailureClass.OK),
                         stop_reason=StopReason.MEASURED, step_times_s=step_times_s, warmup_steps=1, samples_per_step=64.0)
    run = TrialRecord(0, TrialState.COMPLETE, {"micro": 2}, TrialKind.BASELINE, Outcome.LAUNCHED, FailureClass.OK, result)
    return Candidate({"micro": 2}, (run,))


def spec(tmp_path: Path, screen_steps: int = 0) -> TrialSpec:
    return TrialSpec(study="observed", number=1, params={"micro": 4}, argv=("true",), env={}, trial_dir=tmp_path,
                     stop=StopRule(warmup_steps=1, measured_steps=4, screen_steps=screen_steps), samples_per_step=64.0)


def observer(early_stop_ratio: float, screen: ScreenBar | None = None) -> TunerObserver:
    display = Display(Console(file=io.StringIO()), SPACE)
    return TunerObserver(display, InterruptFlag(), incumbent((13.0, 10.0, 10.0, 10.0, 10.0)), early_stop_ratio, screen)


def progress(step_times_s: tuple[float, ...]) -> TrialProgress:
    return TrialProgress(elapsed_s=sum(step_times_s), step_times_s=step_times_s, open_phase="step", last_progress_s=0.1)


def test_a_step_far_slower_than_the_incumbents_same_step_stops_the_trial_and_says_which(tmp_path):
    watcher = observer(0.7)
    assert watcher.should_stop(spec(tmp_path), progress((13.5, 11.0))) is None and watcher.stop_detail() is None
    assert watcher.should_stop(spec(tmp_path), progress((13.5, 11.0, 20.0))) is StopReason.EARLY_STOP
    assert watcher.stop_detail() == "step 3 ran at 50% of the incumbent's step 3 (the early stop is below 70%)"


def test_a_screened_trial_under_the_bar_says_what_it_measured_against_what(tmp_path):
    bar = ScreenBar(incumbent_per_s=6.0, reach_frac=0.1)
    watcher = observer(0.0, bar)
    assert watcher.should_stop(spec(tmp_path, screen_steps=1), progress((13.5, 11.0))) is None  # 5.8 of a 5.4 floor
    assert watcher.should_stop(spec(tmp_path, screen_steps=1), progress((13.5, 12.5))) is StopReason.EARLY_STOP
    assert watcher.stop_detail() == ("5.1 samples/s over 1 screened step, under the bar of 5.4 (the incumbent's 6.0 "
                                     "as modelled, less 10%)")
