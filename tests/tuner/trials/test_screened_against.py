"""What a running trial is held against (the early stop, screening): the leader, except for a trial
that keeps the training as the user runs it while the leader changes it, which races the fastest
stable config that keeps it (the report's speed-only line)."""

from __future__ import annotations

from nccl_tune.tuner.records.study_records import TrialKind
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.trials.trial_run import TrialRunner
from tests.tuner.records.test_honest_winners import BASE, MICRO, PROMPT, SPACE, rec

RUNNER = TrialRunner(SPACE, None, RunSettings(command=("true",)), "s", None, None, None, host="node")
SPEEDY = {**BASE, MICRO: 4}
SHORT = {**SPEEDY, PROMPT: 2048}


def test_a_trial_that_keeps_the_training_races_the_fastest_config_that_keeps_it():
    records = [
        rec(0, BASE, step_s=14.0, kind=TrialKind.BASELINE),
        rec(1, SPEEDY, step_s=12.0),
        rec(2, SHORT, step_s=9.0),
    ]
    assert RUNNER.leader(records).values == SHORT
    # micro-batch 2 at the user's prompt limit answers the speed-only question: held against trial 1
    assert RUNNER.screened_against(records, {**BASE, MICRO: 2}).values == SPEEDY
    # one with the shorter prompts races the leader
    assert RUNNER.screened_against(records, {**BASE, MICRO: 2, PROMPT: 2048}).values == SHORT
    # none that keeps the training is stable yet but the baseline: the baseline
    assert RUNNER.screened_against([records[0], records[2]], {**BASE, MICRO: 2}).first.number == 0
    # a leader that keeps the training is every trial's bar
    kept = [records[0], records[1], rec(2, {**SHORT, MICRO: 1}, step_s=16.0)]
    assert RUNNER.screened_against(kept, {**BASE, MICRO: 2}).values == SPEEDY
    assert RUNNER.screened_against(kept, {**BASE, MICRO: 2, PROMPT: 2048}).values == SPEEDY
