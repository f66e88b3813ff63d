"""Memory effects a space leaves unsaid, read from the study's runs.

A parameter whose memory effect neither the space nor its name gives (``memory: unknown``) is held
apart by the memory model: configs compare only where they agree on it, its fit reads the declared
effects only between runs alike in it, and a space that declares no effect at all has no memory
model, so the search learns the wall only by running into it, again for every value it has not
tried (tensor-parallel sizes, a ZeRO stage, packing). The runs say more. Two launched runs whose
values differ in one such parameter alone, among the parameters that may move memory (those
declared ``none`` or ``small`` aside), show what it does:

- both finished with a peak read (in GiB: the GPU's size is not needed), one at least
  ``SHOWN_RATIO`` times the other: memory grows towards the value of the larger peak;
- one finished and the other ran out of device memory: memory grows towards the value that ran out;
- both finished with peaks within ``SAME_RATIO`` of each other: it moved memory little there.

A parameter whose pairs show one direction and never the other is taken as declared so
(``increasing`` or ``decreasing`` along its order), when its values are ordered (a bool, an int, a
power of two, numbers in ascending order; the order of a categorical's words is the space's, not
memory's). One whose pairs all moved memory little, ``SAME_PAIRS`` of them at least, is taken as
``small``: left out of the fit, and a step its runs measured between two of its values still
counts (``memory_model``). Pairs that disagree leave it unknown. What is learnt serves the planner's
models only (``learnt_space``, read afresh for each proposal); the space file, ``spaces show``, the
reports and the tuned YAML keep what was written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import combinations
from typing import Any

from nccl_tune.failure import FailureClass
from nccl_tune.search_spaces.space import MemoryEffect, Parameter, SearchSpace, ordered_choices
from nccl_tune.tuner.records.study_records import Outcome, TrialRecord

SHOWN_RATIO = 1.05
"""Peaks of two finished runs this far apart (the larger over the smaller) show a direction: well
beyond the few percent the same config's peak moves between runs."""
SAME_RATIO = 1.02
"""Peaks of two finished runs this close moved memory little between the two values."""
SAME_PAIRS = 2
"""Pairs that moved memory little needed before a parameter is taken as ``small``: one pair at a
small micro-batch may hide what the value does at a large one."""


@dataclass(frozen=True)
class _Run:
    values: Mapping[str, Any]
    peak_gib: float | None
    """The finished run's highest peak; None for a run that ran out of memory."""


def learnt_space(space: SearchSpace, records: Iterable[TrialRecord]) -> SearchSpace:
    """``space`` with each ``memory: unknown`` parameter whose effect the runs show declared so; the
    same object when they show none."""
    unknown = [p for p in space.parameters if p.memory is MemoryEffect.UNKNOWN]
    if not unknown:
        return space
    runs = _runs(records)
    moving = [p.name for p in space.parameters if p.memory not in (MemoryEffect.NONE, MemoryEffect.SMALL)]
    learnt = {}
    for p in unknown:
        effect = learnt_effect(p, runs, moving)
        if effect is not None:
            learnt[p.name] = effect
    if not learnt:
        return space
    params = tuple(replace(p, memory=learnt[p.name]) if p.name in learnt else p for p in space.parameters)
    return replace(space, parameters=params)


def learnt_effect(p: Parameter, runs: Sequence[_Run], moving: Sequence[str]) -> MemoryEffect | None:
    """What the pairs of ``runs`` that differ in ``p`` alone among ``moving`` show of ``p``'s effect."""
    up = down = same = 0
    for a, b in combinations(runs, 2):
        if a.values.get(p.name) == b.values.get(p.name) or any(
            a.values.get(q) != b.values.get(q) for q in moving if q != p.name
        ):
            continue
        shown = _shown(a, b)
        if shown == 0:
            same += 1
        elif shown is not None:
            grows = (shown > 0) == (_rank(p, b) > _rank(p, a))
            up, down = up + grows, down + (not grows)
    if (up or down) and ordered_choices(p.kind, p.choices) and not (up and down):
        return MemoryEffect.INCREASING if up else MemoryEffect.DECREASING
    if not up and not down and same >= SAME_PAIRS:
        return MemoryEffect.SMALL
    return None


def _shown(a: _Run, b: _Run) -> int | None:
    """1 when ``b`` took more memory than ``a``, -1 less, 0 about the same, None when the pair says
    nothing (both ran out, or the peaks differ within the noise and beyond the same)."""
    if a.peak_gib is None or b.peak_gib is None:
        return None if a.peak_gib is b.peak_gib else (1 if b.peak_gib is None else -1)
    ratio = b.peak_gib / a.peak_gib
    if ratio >= SHOWN_RATIO:
        return 1
    if ratio <= 1 / SHOWN_RATIO:
        return -1
    return 0 if 1 / SAME_RATIO <= ratio <= SAME_RATIO else None


def _rank(p: Parameter, run: _Run) -> int:
    """The position of ``run``'s value of ``p`` in its order (false before true)."""
    return p.memory_rank(run.values[p.name], MemoryEffect.INCREASING)


def _runs(records: Iterable[TrialRecord]) -> list[_Run]:
    """The launched, normal runs that finished with a peak read, or ran out of device memory."""
    out = []
    for r in records:
        if r.outcome is not Outcome.LAUNCHED or r.forced or r.result is None or not r.values:
            continue
        if r.status is FailureClass.OOM:
            out.append(_Run(r.values, None))
        elif r.status is FailureClass.OK and r.result.memory is not None and r.result.memory.peak_gib:
            out.append(_Run(r.values, r.result.memory.peak_gib))
    return out
