"""The samplers a study can use, by name (``settings.SAMPLERS``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import optuna

from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.tuner.records.held import HeldParameters
from nccl_tune.tuner.search.local_search import LocalSearchSampler, tpe_sampler


def make_sampler(
    name: str,
    seed: int | None,
    space: SearchSpace,
    held: HeldParameters | Mapping[str, Any] | None = None,
    planned_trials: int | None = None,
    trials_fit: Callable[[int], int | None] | None = None,
) -> optuna.samplers.BaseSampler:
    """The sampler ``name`` (one of ``settings.SAMPLERS``, checked by ``RunSettings``): ``local``
    moves from the incumbent by expected gain, memory-aware (``local_search.py``); ``tpe`` models
    the whole space; ``random`` is the yardstick. ``planned_trials``: the trials this run launches
    (``local`` holds the study's failed runs to a share of the time they plan: ``failure_budget``);
    ``trials_fit``: the search trials the run's ``--budget`` still has time for (``local`` plans its
    last trials by the fewer of the two)."""
    if name == "local":
        return LocalSearchSampler(space, held, seed, planned_trials, trials_fit)
    if name == "tpe":
        return tpe_sampler(seed)
    return optuna.samplers.RandomSampler(seed=seed)
