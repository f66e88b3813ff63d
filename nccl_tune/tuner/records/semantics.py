"""Parameters that change the training itself (``semantic: true`` in the space: batch sizes,
prompt filtering), and which of them a config changes from the baseline; the environment variables
the space sets, as the user's own run has them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nccl_tune.search_spaces.space import Parameter, SearchSpace, Target
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.tuner.records.stability import baseline
from nccl_tune.tuner.records.study_records import TrialRecord


@dataclass(frozen=True)
class SemanticChange:
    name: str
    before: Any
    after: Any

    def __str__(self) -> str:
        return f"{self.name}: {format_value(self.before)} -> {format_value(self.after)}"


def _in_user_run(
    space: SearchSpace, base_values: Mapping[str, Any] | None, keep: Callable[[Parameter], bool]
) -> dict[str, Any]:
    """The ``keep`` parameters as the user's own run has them: the baseline trial's value, else the
    space's default."""
    return {
        p.name: (base_values.get(p.name, p.default) if base_values is not None else p.default)
        for p in space.parameters
        if keep(p)
    }


def _baseline_values(records: Iterable[TrialRecord]) -> Mapping[str, Any] | None:
    base = baseline(records)
    return base.values if base else None


def user_env(space: SearchSpace, base_values: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every environment variable the space sets (``target: env``), as the user's own run has it."""
    return _in_user_run(space, base_values, lambda p: p.target is Target.ENV)


def study_user_env(space: SearchSpace, records: Iterable[TrialRecord]) -> dict[str, Any]:
    """``user_env`` of a study: its baseline trial's values, else the space's defaults."""
    return user_env(space, _baseline_values(records))


def semantic_reference(space: SearchSpace, base_values: Mapping[str, Any] | None) -> dict[str, Any]:
    """What each semantic parameter is in the user's own run."""
    return _in_user_run(space, base_values, lambda p: p.semantic)


def study_reference(space: SearchSpace, records: Iterable[TrialRecord]) -> dict[str, Any]:
    """``semantic_reference`` of a study: its baseline trial's values, else the space's defaults."""
    return semantic_reference(space, _baseline_values(records))


def semantic_changes(
    space: SearchSpace, values: Mapping[str, Any], base_values: Mapping[str, Any] | None
) -> list[SemanticChange]:
    """The semantic parameters whose value in ``values`` differs from the user's own run."""
    ref = semantic_reference(space, base_values)
    return [SemanticChange(k, before, values[k]) for k, before in ref.items() if k in values and values[k] != before]
