"""A pattern-search sampler: step one parameter of the incumbent at a time.

On a landscape like a training node's, the fastest stable configs sit next to the memory wall
and the rest of the space is mostly slower or failing, so a few dozen trials are better spent
walking from the best config found so far than modelling the whole space. Each trial moves one
parameter of the incumbent one step (the next or previous choice; the next power of two) to
values not tried yet:

- a move that produced a new incumbent is repeated in the same direction;
- ``first`` moves (micro-batch sizes up: faster until memory runs out) are tried before others;
- ``late`` parameters (NCCL variables, whose effect is small) move only when nothing else is left;
- the incumbent changes only for a feasible trial faster by more than ``margin``: a trial's
  measured throughput is noisy, and chasing noise walks away from the real optimum;
- when the incumbent and its near-ties have no untried neighbour, TPE proposes.

Failed trials are infeasible (see ``telling.py``), so the walk never starts from one, and their
values count as tried. Nothing is kept that storage cannot rebuild: a resumed study recomputes
its incumbent.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler, TPESampler
from optuna.trial import FrozenTrial, TrialState

Move = tuple[str, int, dict[str, Any]]
"""(parameter, direction -1/+1, the values after the move)."""


def _key(params: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(params.items()))


def neighbours(params: dict[str, Any], space: dict[str, BaseDistribution]) -> list[Move]:
    """Every move of one parameter one step up or down within its distribution."""
    out: list[Move] = []
    for name, dist in space.items():
        if name not in params:
            continue
        value = params[name]
        for d in (-1, 1):
            if isinstance(dist, IntDistribution):
                moved = value + d * dist.step
                if dist.low <= moved <= dist.high:
                    out.append((name, d, {**params, name: moved}))
            elif isinstance(dist, CategoricalDistribution):
                i = list(dist.choices).index(value) + d
                if 0 <= i < len(dist.choices):
                    out.append((name, d, {**params, name: dist.choices[i]}))
    return out


def _feasible(trial: FrozenTrial) -> bool:
    return bool(trial.value) and all(v <= 0 for v in trial.constraints.values())


class LocalSearchSampler(BaseSampler):
    """Pattern search around the incumbent, TPE when the neighbourhood is exhausted (see the module docstring)."""

    def __init__(
        self,
        seed: int | None = None,
        *,
        first: frozenset[tuple[str, int]] = frozenset(),
        late: frozenset[str] = frozenset(),
        margin: float = 0.02,
    ) -> None:
        self._tpe = TPESampler(seed=seed, n_startup_trials=8, multivariate=True)
        self._rng = random.Random(seed)
        self._first = first
        self._late = late
        self._margin = margin
        self._incumbent: int | None = None
        self._last: tuple[str, int, int] | None = None
        """The last move: (parameter, direction, number of the trial it moved from)."""

    def _incumbent_of(self, feasible: Sequence[FrozenTrial]) -> FrozenTrial:
        best = max(feasible, key=lambda t: t.value)
        current = next((t for t in feasible if t.number == self._incumbent), None)
        if current is None or best.value > current.value * (1 + self._margin):
            current = best
        self._incumbent = current.number
        return current

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self._tpe.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space:
            return {}
        trials = study.get_trials(deepcopy=False)
        feasible = [t for t in trials if t.state is TrialState.COMPLETE and _feasible(t)]
        if not feasible:
            return self._tpe.sample_relative(study, trial, search_space)
        tried = {_key(t.params) for t in trials if t.number != trial.number}
        incumbent = self._incumbent_of(feasible)
        near = sorted(
            (t for t in feasible if t.value >= incumbent.value * (1 - self._margin)), key=lambda t: -t.value
        )
        for base in (incumbent, *near):
            moves = [m for m in neighbours(base.params, search_space) if _key(m[2]) not in tried]
            if moves:
                break
        else:
            return self._tpe.sample_relative(study, trial, search_space)
        if self._last is not None and self._last[2] != base.number:
            again = [m for m in moves if m[:2] == self._last[:2]]
            if again:
                self._last = (again[0][0], again[0][1], base.number)
                return again[0][2]
        pool = (
            [m for m in moves if m[:2] in self._first]
            or [m for m in moves if m[0] not in self._late]
            or moves
        )
        name, direction, values = self._rng.choice(pool)
        self._last = (name, direction, base.number)
        return values

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self._tpe.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._tpe.before_trial(study, trial)

    def after_trial(
        self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None
    ) -> None:
        self._tpe.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._tpe.reseed_rng()
        self._rng.seed()
