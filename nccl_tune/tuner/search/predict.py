"""Predicting an OOM before launching: memory is monotone in micro-batch size, sequence length
and offload, so a config at least as memory-hungry as a known OOM in every such parameter,
and equal in the parameters whose effect is unknown, will run out too. Parameters with no or a
small effect (``memory: none`` / ``small``) are ignored."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nccl_tune.failure import FailureClass
from nccl_tune.search_spaces.space import MemoryEffect, SearchSpace
from nccl_tune.tuner.records.study_records import Outcome, TrialRecord


def dominates_memory(space: SearchSpace, candidate: Mapping[str, Any], oom: Mapping[str, Any]) -> bool:
    """True when ``candidate`` needs at least the memory of ``oom`` in every parameter."""
    for p in space.parameters:
        if p.name not in candidate or p.name not in oom:
            return False
        a, b = candidate[p.name], oom[p.name]
        if p.memory in (MemoryEffect.NONE, MemoryEffect.SMALL):
            continue
        if p.memory is MemoryEffect.UNKNOWN:
            if a != b:
                return False
            continue
        if a not in p.choices or b not in p.choices:
            return False
        if p.memory_rank(a) < p.memory_rank(b):
            return False
    return True


def predicted_oom(space: SearchSpace, candidate: Mapping[str, Any], history: Iterable[TrialRecord]) -> int | None:
    """Number of a launched trial that ran out of device memory and that ``candidate`` dominates."""
    for rec in history:
        if rec.outcome is Outcome.LAUNCHED and rec.status is FailureClass.OOM:
            if dominates_memory(space, candidate, rec.values):
                return rec.number
    return None
