"""benchmarks/calibration.py: the reliability table, the Brier score and the 90% target."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "bench_calibration", Path(__file__).resolve().parents[2] / "benchmarks" / "calibration.py"
)
cal = sys.modules.setdefault("bench_calibration", importlib.util.module_from_spec(_SPEC))
_SPEC.loader.exec_module(cal)


def test_odds_that_come_true_as_often_as_they_say_are_calibrated():
    rng = random.Random(3)
    odds = [rng.random() for _ in range(10000)]
    got = cal.calibrate([(p, rng.random() < p) for p in odds])
    assert got.n == 10000 and sum(b.n for b in got.bands) == 10000
    for band in got.bands:
        assert band.fitted_share == pytest.approx(band.mean_odds, abs=0.06)
    assert got.brier == pytest.approx(1 / 6, abs=0.02)  # E[p(1-p)] for p uniform
    assert got.met


def test_overconfident_odds_miss_the_target_and_score_worse():
    rng = random.Random(4)
    # rated 95%, fit half the time: the demo's OOMs proposed at "fits 94-100%"
    pairs = [(0.95, rng.random() < 0.5) for _ in range(200)] + [(0.3, rng.random() < 0.3) for _ in range(200)]
    got = cal.calibrate(pairs)
    assert got.high_n == 200 and got.high_fitted_share == pytest.approx(0.5, abs=0.1)
    assert not got.met
    honest = cal.calibrate([(0.5, f) for _, f in pairs])
    assert got.brier > honest.brier - 0.01


def test_an_odds_of_one_falls_in_the_top_band_and_none_rated_high_meets_the_target():
    got = cal.calibrate([(1.0, True), (0.0, False), (0.45, True)])
    assert got.bands[-1].n == 1 and got.bands[0].n == 1 and got.bands[4].n == 1
    assert cal.calibrate([(0.2, False)]).met and cal.calibrate([(0.2, False)]).high_fitted_share is None
    assert cal.calibrate([]).brier is None


def test_measured_gain_is_over_the_best_before_the_trial():
    trials = [(None, 100.0), (0.10, 110.0), (0.05, None), (0.20, 99.0), (None, 120.0), (-0.1, 108.0)]
    gains = cal.measured_gains(trials)
    assert [m for m, _ in gains] == [0.10, 0.20, -0.1]
    assert gains[0][1] == pytest.approx(0.0953, abs=1e-3)  # 110 over 100
    assert gains[1][1] == pytest.approx(-0.1053, abs=1e-3)  # 99 over 110
    assert gains[2][1] == pytest.approx(-0.1054, abs=1e-3)  # 108 over 120
    got = cal.calibrate([], gains)
    assert got.gain_n == 3 and got.gain_sign_right == pytest.approx(2 / 3)
