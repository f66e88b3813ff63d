"""Step detection over nights: a shift of level is found where it started; noise and one odd night are not steps."""

from __future__ import annotations

import math
import random

import pytest

from nccl_tune.nightly.changepoint import detect_steps, pending_shift


def series(levels: list[tuple[float, int]], sigma: float = 0.02, seed: int = 3) -> list[float]:
    rng = random.Random(seed)
    return [level * math.exp(rng.gauss(0, sigma)) for level, n in levels for _ in range(n)]


def test_a_flat_noisy_series_has_no_step():
    for seed in range(20):
        assert detect_steps(series([(100, 30)], seed=seed)) == ()


def test_a_drop_is_found_on_the_night_it_started():
    xs = series([(100, 8), (82, 6)])
    (step,) = detect_steps(xs)
    assert step.index == 8
    assert step.change_frac == pytest.approx(-0.18, abs=0.03)


def test_two_shifts_are_two_steps():
    xs = series([(100, 6), (85, 5), (102, 7)], seed=5)
    assert [s.index for s in detect_steps(xs)] == [6, 11]


def test_one_odd_night_is_not_a_step():
    xs = series([(100, 12)])
    xs[5] = 60.0
    assert detect_steps(xs) == ()


def test_a_shift_smaller_than_the_minimum_step_is_ignored():
    xs = series([(100, 10), (97, 10)], sigma=0.005)
    assert detect_steps(xs) == ()
    assert [s.index for s in detect_steps(xs, min_step_frac=0.02)] == [10]


def test_nights_without_a_value_are_skipped_and_indices_refer_to_the_input():
    xs: list[float | None] = list(series([(100, 5), (80, 5)]))
    xs.insert(7, None)
    (step,) = detect_steps(xs)
    assert step.index == 5


def test_a_shift_on_the_last_night_is_pending_not_a_step():
    xs = series([(100, 9), (80, 1)])
    assert detect_steps(xs) == ()
    shift = pending_shift(xs)
    assert shift is not None and shift.index == 9 and shift.change_frac < -0.15
    assert pending_shift(series([(100, 10)])) is None
    two = series([(100, 9), (80, 2)])
    assert detect_steps(two) == () and pending_shift(two).index == 9
    # once it has lasted three nights, it is a step and nothing is pending
    three = series([(100, 9), (80, 3)])
    assert [s.index for s in detect_steps(three)] == [9] and pending_shift(three) is None


def test_one_odd_last_night_after_a_normal_one_is_not_a_step():
    xs = series([(100, 10)]) + [70.0]
    assert detect_steps(xs) == ()
    assert pending_shift(xs).index == 10  # worth a look, not yet a step


def test_too_short_series():
    assert detect_steps([]) == () and detect_steps([100.0]) == () and pending_shift([100.0, 80.0]) is None
    assert pending_shift([100.0, 100.0, 100.0, 80.0]).index == 3


def test_noisy_flat_series_rarely_show_a_step_or_a_pending_shift():
    """3% noise over 40 nights, 200 series: the minimum step and the standard-error check together."""
    flat = [series([(100, 40)], sigma=0.03, seed=s) for s in range(200)]
    assert sum(bool(detect_steps(xs)) for xs in flat) <= 4
    assert sum(pending_shift(xs) is not None for xs in flat) <= 4
