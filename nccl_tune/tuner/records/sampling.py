"""Between a ``SearchSpace`` and Optuna: distributions, suggestions, enqueued values.

Powers of two are sampled as their exponent (an ordered integer, so the sampler can learn
"smaller is safer"), under the name ``<param>:log2``; every other kind is categorical or an
integer range. ``to_optuna``/``from_optuna`` translate between the two spellings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from nccl_tune.search_spaces.space import Parameter, ParamKind, SearchSpace

LOG2 = ":log2"


def optuna_name(p: Parameter) -> str:
    return p.name + LOG2 if p.kind is ParamKind.POW2 else p.name


def distribution(p: Parameter) -> BaseDistribution:
    """The Optuna distribution ``suggest`` samples ``p`` from."""
    if p.kind is ParamKind.POW2:
        return IntDistribution(int(math.log2(p.choices[0])), int(math.log2(p.choices[-1])))
    if p.kind is ParamKind.INT:
        step = p.choices[1] - p.choices[0] if len(p.choices) > 1 else 1
        return IntDistribution(p.choices[0], p.choices[-1], step=step)
    return CategoricalDistribution(list(p.choices))


def distributions(space: SearchSpace, pinned: Mapping[str, Any]) -> dict[str, BaseDistribution]:
    """Optuna's view of the parameters that are not pinned, by Optuna name."""
    return {optuna_name(p): distribution(p) for p in space.parameters if p.name not in pinned}


def suggest(trial: optuna.Trial, space: SearchSpace, pinned: Mapping[str, Any]) -> dict[str, Any]:
    """Values for every parameter: pinned ones as given, the rest suggested by the sampler."""
    params: dict[str, Any] = {}
    for p in space.parameters:
        if p.name in pinned:
            continue
        dist = distribution(p)
        if isinstance(dist, IntDistribution):
            params[optuna_name(p)] = trial.suggest_int(optuna_name(p), dist.low, dist.high, step=dist.step)
        else:
            params[p.name] = trial.suggest_categorical(p.name, list(p.choices))
    return from_optuna(space, params, pinned)


def to_optuna(space: SearchSpace, values: Mapping[str, Any], pinned: Mapping[str, Any]) -> dict[str, Any]:
    """Optuna's spelling of ``values`` (for ``enqueue_trial``), leaving pinned parameters out."""
    out: dict[str, Any] = {}
    for p in space.parameters:
        if p.name in pinned or p.name not in values:
            continue
        v = values[p.name]
        out[optuna_name(p)] = int(math.log2(v)) if p.kind is ParamKind.POW2 else v
    return out


def from_optuna(space: SearchSpace, params: Mapping[str, Any], pinned: Mapping[str, Any]) -> dict[str, Any]:
    """The values Optuna's ``params`` (by Optuna name, every parameter not pinned) stand for, pinned
    parameters as given: the inverse of ``to_optuna``."""
    out: dict[str, Any] = {}
    for p in space.parameters:
        if p.name in pinned:
            out[p.name] = pinned[p.name]
            continue
        v = params[optuna_name(p)]
        out[p.name] = 2**v if p.kind is ParamKind.POW2 else v
    return out
