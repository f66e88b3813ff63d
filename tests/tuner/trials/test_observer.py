"""The tuner's observer: what it stops a running trial for, and the words the trial's line gives."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from nccl_tune.launchers.base import TrialProgress
from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.trial import StopReason, StopRule, TrialSpec
from nccl_tune.tuner.trials.display import Display
from nccl_tune.tuner.trials.observer import InterruptFlag, TunerObserver
from nccl_tune.tuner.trials.screening import IncumbentBar

SPACE = parse_space(
    """
name: observed
parameters:
  - {name: micro, kind: pow2, low: 1, high: 8, default: 2, memory: increasing}
throughput: {samples_per_step: 64}
""",
    source="test",
    label="observed",
)


def spec(tmp_path: Path, screen_steps: int = 0) -> TrialSpec:
    return TrialSpec(
        study="observed",
        number=1,
        params={"micro": 4},
        argv=("true",),
        env={},
        trial_dir=tmp_path,
        stop=StopRule(warmup_steps=1, measured_steps=4, screen_steps=screen_steps),
        samples_per_step=64.0,
    )


def observer(early_stop_ratio: float, bar: IncumbentBar | None, screening: bool = False) -> TunerObserver:
    display = Display(Console(file=io.StringIO()), SPACE)
    return TunerObserver(display, InterruptFlag(), bar, early_stop_ratio, screening)


def progress(step_times_s: tuple[float, ...]) -> TrialProgress:
    return TrialProgress(elapsed_s=sum(step_times_s), step_times_s=step_times_s, open_phase="step", last_progress_s=0.1)


def test_measured_steps_far_slower_than_the_modelled_incumbent_stop_the_trial_and_say_which(tmp_path):
    """The incumbent runs 6.4 samples/s as modelled (10 s a step of 64 samples): a measured step of
    20 s (3.2 samples/s, 50%) stops the trial; one of 11 s (91%) does not."""
    watcher = observer(0.7, IncumbentBar(incumbent_per_s=6.4, reach_frac=0.1))
    assert watcher.should_stop(spec(tmp_path), progress((13.5, 11.0))) is None and watcher.stop_detail() is None
    assert watcher.should_stop(spec(tmp_path), progress((13.5, 20.0))) is StopReason.EARLY_STOP
    assert watcher.stop_detail() == (
        "step 2 ran at 50% of the incumbent's throughput (6.4 samples/s as modelled; the early stop is below 70%)"
    )
    assert watcher.should_stop(spec(tmp_path), progress((13.5, 14.0, 15.0))) is StopReason.EARLY_STOP
    assert watcher.stop_detail() == (
        "steps 2-3 ran at 69% of the incumbent's throughput (6.4 samples/s as modelled; the early stop is below 70%)"
    )


def test_one_stalled_step_of_a_config_as_fast_as_the_incumbent_does_not_stop_it(tmp_path):
    """A garbage collection makes one step of a config that runs at the incumbent's speed twice as
    long: a straggler, no reading of the config; the steps around it run on."""
    watcher = observer(0.7, IncumbentBar(incumbent_per_s=6.4, reach_frac=0.1))
    assert watcher.should_stop(spec(tmp_path), progress((13.5, 10.0, 20.0))) is None
    assert watcher.should_stop(spec(tmp_path), progress((13.5, 10.0, 20.0, 10.5, 9.8))) is None
    # two slow steps of three are the config's pace, not stalls
    assert watcher.should_stop(spec(tmp_path), progress((13.5, 10.0, 20.0, 21.0))) is StopReason.EARLY_STOP
    assert watcher.stop_detail().startswith("steps 2-4 ran at 59% of the incumbent's throughput")


def test_a_warm_up_step_is_held_against_the_incumbents_warm_up(tmp_path):
    """The incumbent's warm-up takes 13 s (4.9 samples/s as modelled): a warm-up of 15 s runs on,
    though it is under 70% of the measured steps' throughput; one of 40 s (33%) stops the trial."""
    bar = IncumbentBar(incumbent_per_s=6.4, reach_frac=0.1, warmup_per_s=(64 / 13.0,))
    assert observer(0.7, bar).should_stop(spec(tmp_path), progress((15.0,))) is None
    watcher = observer(0.7, bar)
    assert watcher.should_stop(spec(tmp_path), progress((40.0,))) is StopReason.EARLY_STOP
    assert watcher.stop_detail() == (
        "step 1 ran at 32% of the incumbent's warm-up step 1 (4.9 samples/s as modelled; the early stop is below 70%)"
    )
    assert observer(0.7, IncumbentBar(6.4, 0.1)).should_stop(spec(tmp_path), progress((40.0,))) is None


def test_without_screening_the_bar_only_serves_the_early_stop(tmp_path):
    bar = IncumbentBar(incumbent_per_s=6.0, reach_frac=0.1)
    assert observer(0.0, bar).should_stop(spec(tmp_path, screen_steps=1), progress((13.5, 12.5))) is None
    assert (
        observer(0.0, None, screening=True).should_stop(spec(tmp_path, screen_steps=1), progress((13.5, 30.0))) is None
    )


def test_a_screened_trial_under_the_bar_says_what_it_measured_against_what(tmp_path):
    bar = IncumbentBar(incumbent_per_s=6.0, reach_frac=0.1)
    watcher = observer(0.0, bar, screening=True)
    assert watcher.should_stop(spec(tmp_path, screen_steps=1), progress((13.5, 11.0))) is None  # 5.8 of a 5.4 floor
    assert watcher.should_stop(spec(tmp_path, screen_steps=1), progress((13.5, 12.5))) is StopReason.EARLY_STOP
    assert watcher.stop_detail() == (
        "5.1 samples/s over 1 screened step, under the bar of 5.4 (the incumbent's 6.0 as modelled, less 10%)"
    )


def test_the_live_line_counts_warm_up_and_measured_steps_apart_and_never_past_the_plan():
    from nccl_tune.tuner.trials.observer import step_words

    assert step_words(1, 1, 3) == "warm-up step 1/1"
    assert step_words(3, 1, 3) == "measured step 2/2"
    assert step_words(5, 1, 3) == "step 5: all 2 measured, stopping"  # the trainer ran on while it was stopped
