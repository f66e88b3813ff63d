"""Configs a forced run has already judged: at least the memory of one that failed at its longest batch.

A forced run (``TrialKind.FORCED``) that ran out of memory, or came within the headroom of the wall,
makes its config unstable. Another config that holds at least as much memory on every parameter that
moves it (a value at least as high in ``memory: increasing`` order, at most as high in
``decreasing`` order, the same value where the effect is ``unknown``; ``none`` and ``small``
parameters, NCCL's variables, left aside; when the OOM named its phase, only the parameters that
move that phase's peak, by their ``phases``) would fail forced too: it is not stable either, and
forcing it would spend a trial to learn nothing (``failure_model.FlakyRule`` passes it over, with why).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nccl_tune.failure import FailureClass
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.tuner.records.study_records import TrialRecord
from nccl_tune.tuner.search.memory_model import holds_at_least


def failed_forced(r: TrialRecord) -> bool:
    """A forced run that showed its config does not fit at its longest batch."""
    if not r.forced or not r.tells_of_values:
        return False
    if r.status in (FailureClass.OOM, FailureClass.HOST_OOM):
        return True
    return r.ok and (r.near_wall or r.worst_unfit)


def at_least_the_memory(
    space: SearchSpace, values: Mapping[str, Any], other: Mapping[str, Any], phase: str | None = None
) -> bool:
    """``values`` hold at least the memory of ``other`` on every parameter that moves memory (that
    moves ``phase``'s, when the failure named its phase: a parameter whose ``phases`` leave it out
    is set aside, as ``memory_model.PhaseFence`` does)."""
    return all(
        holds_at_least(p, values, other) for p in space.parameters if phase is None or not p.phases or phase in p.phases
    )


def _phase(r: TrialRecord) -> str | None:
    """The phase a forced run ran out of memory in, when its verdict names one."""
    if r.status is FailureClass.OOM and r.result is not None:
        return r.result.verdict.phase or None
    return None


class ForcedFailures:
    """The study's forced runs that failed, and the configs they cover."""

    def __init__(self, space: SearchSpace, records: Iterable[TrialRecord]) -> None:
        self.space = space
        self.failed = [r for r in records if failed_forced(r)]

    def covering(self, values: Mapping[str, Any]) -> TrialRecord | None:
        """The first failed forced run whose config ``values`` hold at least the memory of."""
        return next((r for r in self.failed if at_least_the_memory(self.space, values, r.values, _phase(r))), None)

    def why(self, values: Mapping[str, Any]) -> str:
        r = self.covering(values)
        if r is None:
            return ""
        end = f"ended {r.status.value}" if not r.ok else "came within the headroom of the wall"
        phase = _phase(r)
        where = f" in {phase}" if phase else ""
        of = f"trial {r.rerun_of}'s config" if r.rerun_of is not None else "a config"
        return (
            f"it holds at least the memory{where} of {of}, which {end} forced to its longest batch (trial {r.number})"
        )
