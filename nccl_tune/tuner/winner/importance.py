"""Which parameters mattered to the throughput, by Optuna's own importance evaluator.

The trials that measured a throughput and did not fail (``ok``, and those stopped early as slower
than the incumbent, at the rate they ran) are copied into an in-memory Optuna
study, one trial per run, with the parameters that took two values or more among them: a number
as a float range over the values seen, anything else as a category. PED-ANOVA
(``optuna.importance.PedAnovaImportanceEvaluator``, no scikit-learn needed) then says how much of
the top trials' difference from the rest each parameter explains (the top: the fastest tenth, at
least two runs); the shares sum to 1. With fewer
than ``MIN_TRIALS`` such runs there is nothing to say and the answer is empty."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution

from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.tuner.records.study_records import TrialRecord

MIN_TRIALS = 4
"""Runs with a measured throughput needed before an importance is computed."""
EVALUATOR = "PED-ANOVA"
"""The evaluator's name, as the report says it."""


def _distribution(values: Sequence[object]) -> BaseDistribution:
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return FloatDistribution(float(min(values)), float(max(values)))  # type: ignore[arg-type]
    return CategoricalDistribution(sorted({format_value(v) for v in values}))


def _as_param(value: object, dist: BaseDistribution) -> object:
    return float(value) if isinstance(dist, FloatDistribution) else format_value(value)  # type: ignore[arg-type]


def parameter_importance(space: SearchSpace, records: Sequence[TrialRecord]) -> dict[str, float]:
    """Each varied parameter's share of what made the fast runs fast, largest first; empty when
    fewer than ``MIN_TRIALS`` runs finished or none of the parameters varied among them."""
    runs = [r for r in records if r.throughput and not r.failed and not r.forced]
    if len(runs) < MIN_TRIALS:
        return {}
    seen = {p.name: [r.values[p.name] for r in runs if p.name in r.values] for p in space.parameters}
    varied = {
        name: _distribution(values)
        for name, values in seen.items()
        if len(values) == len(runs) and len({format_value(v) for v in values}) >= 2
    }
    if not varied:
        return {}
    study = optuna.create_study(direction="maximize")
    for r in runs:
        params = {name: _as_param(r.values[name], dist) for name, dist in varied.items()}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=varied, value=float(r.throughput)))
    top = min(0.5, max(0.1, 2 / len(runs)))  # at least two runs in the top set
    evaluator = optuna.importance.PedAnovaImportanceEvaluator(target_quantile=top)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a study this small: equal shares, said by the numbers themselves
        found = optuna.importance.get_param_importances(study, evaluator=evaluator, normalize=True)
    return {name: float(share) for name, share in sorted(found.items(), key=lambda kv: -kv[1])}
