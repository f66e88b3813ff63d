"""The regression rule on synthetic numbers: real drops are caught, noise-only nights are not."""

from __future__ import annotations

import math
import random

import pytest

from nccl_tune.nightly.regression import (
    ALPHA,
    RegressionVerdict,
    RunFact,
    VerdictKind,
    compare_throughput,
    judge_night,
    mann_whitney_less,
    midranks,
)


def noisy(rng: random.Random, centre: float, sigma: float, n: int) -> list[float]:
    return [centre * math.exp(rng.gauss(0.0, sigma)) for _ in range(n)]


def test_midranks_share_ties():
    assert midranks([10.0, 20.0, 20.0, 5.0]) == [2.0, 3.5, 3.5, 1.0]


@pytest.mark.parametrize(
    "night, base, p",
    [
        ([1, 2, 3], [4, 5, 6], 1 / 20),  # complete separation, 3 against 3: the smallest p there is
        ([1, 2, 3, 4], [5, 6, 7, 8], 1 / 70),
        ([4, 5, 6], [1, 2, 3], 1.0),  # tonight faster: nothing to see
        ([1, 5, 6], [2, 3, 4], 16 / 20),  # 16 of the 20 splits have a rank sum <= 12 (only 13, 14, 15 do not)
    ],
)
def test_exact_mann_whitney_matches_counted_splits(night, base, p):
    assert mann_whitney_less(night, base) == pytest.approx(p)


def test_normal_approximation_agrees_with_the_exact_test_and_takes_over_for_large_groups():
    rng = random.Random(7)
    night, base = noisy(rng, 95, 0.05, 9), noisy(rng, 100, 0.05, 9)
    exact = mann_whitney_less(night, base)
    big_night, big_base = night * 2, base * 2  # 18 against 18: beyond the exact enumeration
    approx = mann_whitney_less(big_night, big_base)
    assert 0.0 < approx < 1.0
    assert mann_whitney_less(noisy(rng, 80, 0.02, 18), noisy(rng, 100, 0.02, 18)) < 1e-6
    assert exact == pytest.approx(mann_whitney_less(night, base))


def test_a_clear_slowdown_is_a_regression_by_the_rank_test():
    v = compare_throughput([100.0, 102.0, 98.0], [81.0, 83.0, 80.0], threshold_pct=5)
    assert v.regression and v.kind is VerdictKind.SLOWER and v.method == "mann-whitney"
    assert v.p_value == pytest.approx(0.05) and v.change_frac == pytest.approx(-0.19)
    assert v.summary.startswith("regression: best 81 samples/s against the baseline's 100 (-19.0%)")
    assert "\n" not in v.summary


def test_a_drop_below_the_threshold_is_not_a_regression_even_when_separated():
    v = compare_throughput([100.0, 100.5, 99.5], [97.0, 97.2, 96.9], threshold_pct=5)
    assert not v.regression and v.kind is VerdictKind.WITHIN_THRESHOLD


def test_a_drop_beyond_the_threshold_inside_the_noise_is_not_a_regression():
    # -6% of the medians, but the runs overlap: the rank test cannot tell them apart
    v = compare_throughput([100.0, 88.0, 112.0], [94.0, 104.0, 86.0], threshold_pct=5)
    assert not v.regression and v.kind is VerdictKind.WITHIN_NOISE and v.p_value > ALPHA


def test_z_score_with_too_few_runs_for_the_rank_test():
    # two baseline runs 10% apart: a 15% drop is 1.5 noise deviations, not enough
    v = compare_throughput([95.0, 105.0], [85.0], threshold_pct=5)
    assert v.method == "z-score" and not v.regression and v.noise_frac == pytest.approx(0.0707, abs=1e-3)
    tight = compare_throughput([99.5, 100.5], [85.0], threshold_pct=5)
    assert tight.method == "z-score" and tight.regression and tight.z_score > 3
    # tonight's repeats of the baseline config widen the noise (the largest spread counts)
    loose = compare_throughput([99.5, 100.5], [85.0], threshold_pct=5, repeats=[90.0, 110.0, 100.0])
    assert not loose.regression and loose.noise_frac == pytest.approx(0.1)


def test_single_runs_leave_the_threshold_alone_and_say_so():
    v = compare_throughput([100.0], [90.0], threshold_pct=5)
    assert v.regression and v.method == "threshold only" and "noise unknown" in v.summary


@pytest.mark.parametrize("threshold", [2.0, 5.0, 10.0])
def test_noise_only_nights_are_not_called_regressions(threshold):
    """2000 nights where nothing changed (3% lognormal noise, 3 runs each side): false alarms stay
    at or below the rank test's level with a small threshold, near 1% when the threshold is close
    to the noise, and vanish once it is well above it."""
    rng = random.Random(13)
    alarms = sum(
        compare_throughput(noisy(rng, 100, 0.03, 3), noisy(rng, 100, 0.03, 3), threshold).regression
        for _ in range(2000)
    )
    assert alarms / 2000 <= {2.0: ALPHA, 5.0: 0.02, 10.0: 0.0}[threshold]


def test_noise_only_nights_with_the_z_score_stay_quiet():
    """Two runs a side (the z-score's case): two runs give a rough noise estimate, so a little
    more than 1% of unchanged nights cross both the threshold and 3 deviations."""
    rng = random.Random(17)
    alarms = sum(
        compare_throughput(noisy(rng, 100, 0.03, 2), noisy(rng, 100, 0.03, 2), 5.0).regression for _ in range(2000)
    )
    assert alarms / 2000 <= 0.02


def test_twenty_percent_slower_nights_are_caught():
    rng = random.Random(19)
    caught = sum(
        compare_throughput(noisy(rng, 100, 0.03, 3), noisy(rng, 100 / 1.2, 0.03, 3), 5.0).regression for _ in range(500)
    )
    assert caught / 500 >= 0.99


def test_a_baseline_config_that_now_fails_is_a_regression_with_its_verdict():
    runs = [RunFact(0, "oom", rank=1, evidence="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB")]
    v = judge_night([100.0, 101.0], runs, [120.0, 121.0], threshold_pct=5)
    assert v.regression and v.kind is VerdictKind.BASELINE_FAILS and v.failure_class == "oom" and v.failed_trial == 0
    assert v.summary == (
        "regression: the baseline config (trial 0) now fails: oom on rank 1: "
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"
    )


def test_a_baseline_config_near_the_wall_is_a_regression():
    runs = [RunFact(0, "ok", 100.0), RunFact(1, "ok", 99.0, near_wall=True)]
    v = judge_night([100.0], runs, [100.0], threshold_pct=5)
    assert v.regression and v.failure_class == "near_wall" and v.failed_trial == 1


def test_repeats_of_the_baseline_config_feed_the_noise_and_nothing_stable_is_a_regression():
    ok = [RunFact(0, "ok", 99.0), RunFact(1, "ok", 101.0), RunFact(2, "ok", 100.0)]
    v = judge_night([100.0, 100.2, 99.8], ok, [99.0, 101.0, 100.0], threshold_pct=5)
    assert not v.regression and v.kind is VerdictKind.WITHIN_THRESHOLD
    none = judge_night([100.0], [], [], threshold_pct=5)
    assert none.regression and none.kind is VerdictKind.NO_STABLE_CONFIG


def test_verdict_round_trips_through_json():
    v = compare_throughput([100.0, 102.0, 98.0], [81.0, 83.0, 80.0], threshold_pct=5)
    assert RegressionVerdict.from_json(v.to_json()) == v
