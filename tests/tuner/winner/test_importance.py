"""Which parameters mattered, by Optuna's PED-ANOVA over the runs that measured a throughput."""

from __future__ import annotations

from nccl_tune.failure import OK_VERDICT, FailureClass
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.trial import StopReason, TrialResult
from nccl_tune.tuner.records.study_records import Outcome, TrialKind, TrialRecord
from nccl_tune.tuner.winner.importance import MIN_TRIALS, parameter_importance
from tests.tuner.conftest import TINY_SPACE


def _run(number: int, micro: int, algo: str, step_s: float, status: FailureClass = FailureClass.OK) -> TrialRecord:
    result = TrialResult(
        number=number,
        status=status,
        verdict=OK_VERDICT,
        stop_reason=StopReason.MEASURED,
        step_times_s=(step_s, step_s),
        samples_per_step=8.0 * micro,
    )
    values = {"trainer.micro": micro, "trainer.offload": False, "NCCL_ALGO": algo}
    return TrialRecord(number, None, values, TrialKind.SEARCH, Outcome.LAUNCHED, status, result)


def test_the_parameter_that_sets_the_speed_matters_most():
    space = load_space(str(TINY_SPACE))
    algos = ["Ring", "Tree", "unset"]
    # throughput grows with micro (8*micro samples per 0.1 s step); the algorithm changes nothing
    runs = [_run(n, micro, algos[n % 3], 0.1) for n, micro in enumerate([1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 1])]
    shares = parameter_importance(space, runs)
    assert set(shares) == {"trainer.micro", "NCCL_ALGO"}  # offload never varied
    assert list(shares)[0] == "trainer.micro" and shares["trainer.micro"] > 0.7, shares
    assert abs(sum(shares.values()) - 1.0) < 1e-6


def test_too_few_runs_or_failures_only_say_nothing():
    space = load_space(str(TINY_SPACE))
    assert parameter_importance(space, [_run(n, 2**n, "Ring", 0.1) for n in range(MIN_TRIALS - 1)]) == {}
    failed = [_run(n, 2 ** (n % 4), "Ring", 0.1, FailureClass.CRASH) for n in range(8)]
    assert parameter_importance(space, failed) == {}
