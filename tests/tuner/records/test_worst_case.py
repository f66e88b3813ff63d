"""worst_case: a run's peak at the longest batch its config allows, fitted on its steps' tokens."""

from __future__ import annotations

import optuna
import pytest

from nccl_tune.failure import FailureClass, Verdict
from nccl_tune.trial import GpuMemory, MemoryReport, StopReason, TrialResult
from nccl_tune.tuner.records.stability import faster_unfit, select_winner
from nccl_tune.tuner.records.study_records import A_VALUES, record_of
from nccl_tune.tuner.records.telling import C_MEMORY_WALL, tell_result
from nccl_tune.tuner.records.worst_case import WorstCase, judge, predict


def _affine(tokens: list[float], fixed: float = 0.4, per_token: float = 2e-5) -> list[float]:
    return [fixed + per_token * t for t in tokens]


def test_an_affine_peak_is_read_at_the_longest_batch():
    tokens = [4000.0, 5200.0, 4500.0, 6100.0]
    w = predict(tokens, _affine(tokens), 19000)
    assert w is not None and w.how == "predicted" and w.fitted
    assert w.peak_frac == pytest.approx(0.4 + 2e-5 * 19000, abs=1e-6)
    assert w.seen_frac == pytest.approx(0.4 + 2e-5 * 6100)
    assert w.lower_frac < w.peak_frac < w.upper_frac and w.tokens_worst == 19000 and w.tokens_seen == 6100
    assert w.fits(0.05) and not w.fits(0.25)  # 0.78 keeps 5% free, not 25%
    near = predict(tokens, _affine(tokens), 7000)
    assert near is not None and near.fits(0.05) and near.upper_frac - near.lower_frac < w.upper_frac - w.lower_frac


def test_a_config_that_fits_its_first_steps_can_fail_at_its_worst():
    tokens = [4000.0, 5000.0, 6000.0]
    peaks = _affine(tokens, fixed=0.5, per_token=4e-5)  # 0.66 .. 0.74: 26% free on the trial
    w = predict(tokens, peaks, 12000)
    assert max(peaks) < 0.75 and w is not None and w.peak_frac > 0.95 and not w.fits(0.05)


def test_steps_too_alike_give_the_proportional_bound():
    w = predict([5000.0, 5010.0], [0.6, 0.6], 10000)
    assert w is not None and not w.fitted and w.peak_frac == pytest.approx(0.6 * 10000 / 5010)
    assert not w.fits(0.05) and not w.judged and not w.unfit(0.05)  # reported, decides nothing


def test_a_slope_below_zero_is_read_as_flat_and_never_below_the_peak_seen():
    w = predict([4000.0, 5000.0, 6000.0], [0.7, 0.69, 0.68], 9000)
    assert w is not None and w.peak_frac == pytest.approx(0.7)


def test_forced_runs_are_their_own_worst_case_and_no_tokens_is_no_prediction():
    f = judge([None, None], [0.8, 0.83], None, was_forced=True)
    assert f is not None and f.how == "forced" and f.peak_frac == f.upper_frac == 0.83 and f.fits(0.05)
    assert f.judged and judge([None], [0.97], None, was_forced=True).unfit(0.05)
    assert judge([None, None], [0.5, 0.6], 19000) is None
    assert judge([4000.0, 5000.0, 6000.0], [0.5, 0.6, 0.7], None) is None
    w = predict([4000.0, 5000.0, 6000.0], [0.5, 0.6, 0.7], 8000)
    assert WorstCase.from_json(w.to_json()) == w and WorstCase.from_json(None) is None


# -- through the study: told, stored, read back, judged --------------------------------------


def _result(number: int, tokens: list[float], peaks: list[float], step_s: float) -> TrialResult:
    return TrialResult(
        number=number,
        status=FailureClass.OK,
        verdict=Verdict(FailureClass.OK),
        stop_reason=StopReason.MEASURED,
        step_times_s=(step_s * 1.2, step_s, step_s),
        warmup_steps=1,
        samples_per_step=1280.0,
        step_tokens=tuple(tokens),
        memory=MemoryReport(
            "model",
            (GpuMemory(0, 80.0, 80.0 * max(peaks)),),
            step_peak_frac=tuple(peaks),
        ),
    )


def test_a_winner_whose_worst_case_does_not_fit_is_not_stable_and_the_next_best_wins():
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction="maximize")
    tokens = [4000.0, 5000.0, 6000.0]
    fast = _result(0, tokens, [0.60, 0.70, 0.80], step_s=150.0)  # 20% free on its steps; ~1.3 at 12k tokens
    slow = _result(1, tokens, [0.50, 0.52, 0.54], step_s=200.0)  # ~0.66 at 12k tokens
    for values, result in (({"micro": 4}, fast), ({"micro": 2}, slow)):
        trial = study.ask()
        trial.set_user_attr(A_VALUES, values)
        tell_result(study, trial, result, 0.05, worst_tokens=12000.0)
    records = [record_of(t) for t in study.get_trials()]
    assert records[0].worst_case is not None and records[0].worst_case.peak_frac > 1.0 and records[0].worst_unfit
    assert records[1].worst_case is not None and not records[1].worst_unfit
    assert study.get_trials()[0].constraints[C_MEMORY_WALL] > 0  # the sampler hears it as past the memory wall
    winner = select_winner(records, require_confirmation=False)
    assert winner is not None and winner.values == {"micro": 2}
    assert [c.values for c in faster_unfit(records, winner)] == [{"micro": 4}]
    # Without the space's longest batch there is nothing to extrapolate to: the fast one wins.
    plain = optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction="maximize")
    trial = plain.ask()
    trial.set_user_attr(A_VALUES, {"micro": 4})
    tell_result(plain, trial, fast, 0.05)
    assert record_of(plain.get_trials()[0]).worst_case is None
