"""``fit_odds``: the study checks the memory model's odds against what its runs did."""

from __future__ import annotations

import dataclasses

import pytest

from nccl_tune.failure import FailureClass
from nccl_tune.tuner.search.fit_odds import fitted, shift, shifted, study_shift
from nccl_tune.tuner.search.memory_model import MemoryModel
from tests.tuner.search.test_failure_model import run
from tests.tuner.search.test_memory_model import BASE, SPACE, study


def test_odds_that_held_are_kept_and_odds_that_failed_are_shifted():
    assert shift([]) == 0.0
    held = [(0.9, True)] * 9 + [(0.9, False)]
    assert abs(shift(held)) <= 0.2
    # the narrow-wall family's bands: too sure at every level, low and high alike
    surprised = [(0.57, True)] * 2 + [(0.57, False)] * 8 + [(0.85, True)] * 5 + [(0.85, False)] * 5
    b = shift(surprised)
    assert b <= -1.0
    assert shifted(0.85, b) < 0.6 and shifted(0.57, b) < 0.3
    assert shifted(0.85, 0.0) == 0.85
    assert shifted(0.0, b) == 0.0 and shifted(1.0, b) == 1.0  # certain bounds stay certain
    assert shifted(0.6, shift([(0.6, True)] * 20)) > 0.8  # and odds too low are raised


def test_one_surprise_moves_the_odds_little():
    assert shifted(0.9, shift([(0.9, False)])) >= 0.7


def test_a_run_fitted_when_it_measured_its_peak_within_the_headroom():
    assert fitted(run(0, {}, peak_frac=0.9), 0.95) is True
    assert fitted(run(0, {}, peak_frac=0.97), 0.95) is False  # ran, inside the headroom
    assert fitted(run(0, {}, FailureClass.OOM), 0.95) is False
    assert fitted(run(0, {}, FailureClass.HANG), 0.95) is None  # no peak: it says nothing


def test_the_memory_models_odds_are_shifted_by_the_studys_proposals():
    records = study({}, {"micro": 2}, {"micro": 4})
    plain = MemoryModel(SPACE, records)
    target = {**BASE, "micro": 8}
    p = plain.p_fits(target)
    assert plain.odds_shift == 0.0 and p == plain.p_fits_model(target) and 0.0 < p < 1.0

    def proposed(r, odds):  # a run the sampler had given ``odds`` to fit
        return dataclasses.replace(r, predicted_fits=odds, predicted_fits_model=odds)

    # runs rated 90% that ran out of memory: the study doubts its odds
    ooms = [proposed(r, 0.9) for r in study({"micro": 16}, {"micro": 32})]
    assert all(fitted(r, 0.95) is False for r in ooms)
    fooled = [*records, *(dataclasses.replace(r, number=3 + i) for i, r in enumerate(ooms))]
    assert study_shift(fooled, 0.95) < 0.0
    doubting = MemoryModel(SPACE, fooled)
    assert doubting.odds_shift == study_shift(fooled, 0.95)
    q = doubting.p_fits_model(target)
    assert doubting.p_fits(target) == pytest.approx(shifted(q, doubting.odds_shift))
    assert doubting.p_fits(target) < q
