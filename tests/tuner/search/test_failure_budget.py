"""The failure budget: what a study's failed runs took of its planned GPU time, and which moves it
may still risk."""

from __future__ import annotations

import math

import pytest

from nccl_tune.failure import FailureClass
from nccl_tune.tuner.search.failure_budget import ALWAYS_SHARE, FAILED_SHARE, MIN_HORIZON_TRIALS, FailureBudget
from tests.tuner.search.test_failure_model import run

OOM, HANG, CONFIG = FailureClass.OOM, FailureClass.HANG, FailureClass.CONFIG_ERROR


def test_the_budget_counts_failed_seconds_against_the_planned_study():
    records = [
        run(0, {}, wall_s=100.0),
        run(1, {}, OOM, wall_s=30.0),
        run(2, {}, wall_s=120.0),
        run(3, {}, wall_s=110.0),
    ]
    budget = FailureBudget.of_study(records, horizon_trials=20)
    assert budget.failed_s == 30.0
    assert budget.launched_s == 360.0
    assert budget.run_s == 110.0  # the median finished run
    assert budget.remaining_trials == 15  # 20 planned, 4 launched, this one
    assert budget.left_s == pytest.approx(FAILED_SHARE * (360.0 + 16 * 110.0) - 30.0)


def test_early_risks_fit_and_late_ones_wait_once_failures_took_the_share():
    early = FailureBudget.of_study([run(0, {}, wall_s=100.0)], horizon_trials=24)
    coin_toss = early.expected_failed_s(0.5, 1.0)
    assert coin_toss == 50.0
    assert early.allows(coin_toss)

    hung = [run(0, {}, wall_s=100.0), run(1, {}, HANG, wall_s=400.0)] + [run(n, {}, wall_s=100.0) for n in range(2, 12)]
    late = FailureBudget.of_study(hung, horizon_trials=24)
    assert late.left_s < 0
    assert not late.allows(late.expected_failed_s(0.5, 1.0))
    assert late.allows(late.expected_failed_s(0.95, 1.0))  # likely to finish: always worth the risk
    assert not late.allows(late.expected_failed_s(1 - ALWAYS_SHARE - 0.01, 1.0))


def test_a_failure_that_costs_more_than_a_run_weighs_more():
    budget = FailureBudget.of_study([run(0, {}, wall_s=100.0)], horizon_trials=MIN_HORIZON_TRIALS)
    assert budget.left_s == pytest.approx(FAILED_SHARE * MIN_HORIZON_TRIALS * 100.0)
    assert budget.expected_failed_s(0.8, 10.0) == pytest.approx(200.0)
    assert budget.expected_failed_s(0.8, 0.2) == pytest.approx(20.0)  # never less than a run's
    assert budget.allows(budget.expected_failed_s(0.8, 1.0))
    assert not budget.allows(budget.expected_failed_s(0.8, 10.0))  # a hang to the stall timeout


def test_a_short_run_plans_for_a_study_of_the_least_horizon():
    """``--trials 2`` is most often the start of a longer study: two runs' 8% would refuse every risk."""
    records = [run(0, {}, wall_s=100.0)]
    short = FailureBudget.of_study(records, horizon_trials=2)
    assert short.left_s == FailureBudget.of_study(records, horizon_trials=MIN_HORIZON_TRIALS).left_s
    assert short.allows(short.expected_failed_s(0.5, 1.0))
    assert FailureBudget.of_study(records, horizon_trials=40).left_s > short.left_s


def test_before_any_run_finished_every_move_fits():
    budget = FailureBudget.of_study([run(0, {}, CONFIG, wall_s=5.0)], horizon_trials=10)
    assert budget.left_s == math.inf
    assert budget.allows(budget.expected_failed_s(0.0, 10.0))


def test_without_a_planned_number_of_trials_there_is_no_budget():
    records = [run(0, {}, wall_s=100.0), run(1, {}, HANG, wall_s=900.0)]
    assert FailureBudget.of_study(records, horizon_trials=None).left_s == math.inf
    assert FailureBudget.of_study(records, horizon_trials=10).left_s < 0
