"""A config that passed its own trials and failed forced to its longest batch: out of memory, or a
collective timeout at the memory wall, which memory explains as it explains an OOM."""

from __future__ import annotations

from dataclasses import replace

from nccl_tune.failure import FailureClass, Verdict
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.trial import StopReason
from nccl_tune.tuner.records.stability import candidates
from nccl_tune.tuner.records.study_records import TrialKind, TrialRecord
from nccl_tune.tuner.winner.worst_proof import fails_at_worst, fails_words
from tests.tuner.search.test_forced_bound import normal_run

SPACE = load_space("skyrl-text2sql")
VALUES = {**SPACE.defaults(), "trainer.micro_train_batch_size_per_gpu": 2}


def _forced_timeout(peak_frac: float) -> TrialRecord:
    run = normal_run(12, VALUES, {"policy_train": peak_frac})
    timeout = FailureClass.COLLECTIVE_TIMEOUT
    result = replace(run.result, status=timeout, verdict=Verdict(timeout), stop_reason=StopReason.EXITED)
    return replace(run, kind=TrialKind.FORCED, rerun_of=11, status=timeout, result=result, min_headroom_frac=0.05)


def test_a_forced_collective_timeout_at_the_wall_fails_the_worst_batch_and_says_how_close_it_came():
    normal = normal_run(11, VALUES, {"policy_train": 0.7})
    (at_wall,) = candidates([normal, _forced_timeout(0.98)])
    assert fails_at_worst(at_wall)
    assert fails_words(SPACE, at_wall).startswith("its forced trial 12 ended collective_timeout at 98% of the GPU")
    (far,) = candidates([normal, _forced_timeout(0.6)])
    assert not fails_at_worst(far)
