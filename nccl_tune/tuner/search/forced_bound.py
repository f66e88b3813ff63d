"""Configs a forced run has already judged: at least the memory of one that failed at its longest batch.

A forced run (``TrialKind.FORCED``) that ran out of memory, came within the headroom of the wall, or
failed there (a collective timeout or a hang at 98% of the GPU: ``memory_model.memory_explains``)
makes its config unstable. Another config that holds at least as much memory on every parameter that
moves it (a value at least as high in ``memory: increasing`` order, at most as high in
``decreasing`` order, the same value where the effect is ``unknown``; ``none`` and ``small``
parameters, NCCL's variables, left aside; when the OOM named its phase, only the parameters that
move that phase's peak, by their ``phases``) would fail forced too: it is not stable either, and
forcing it would spend a trial to learn nothing (``failure_model.FlakyRule`` passes it over, with why).

An OOM says more: how much memory it needed (in use plus the allocation that failed). A phase's
memory is a fixed part plus a part that grows in proportion to its micro-batch, so a smaller
micro-batch ``v`` than the failed ``v0`` needs at least ``needed x v / v0`` (all of it scaling is the
least it can need). On each parameter that moves the phase the OOM named (a number: a micro-batch),
every value for which that still exceeds the GPU would fail forced as well, with at least the failed
run's memory on the phase's other parameters. The forward micro-batch 8 of SkyRL's log-probs
needing 193 GiB forced rules out 4 (97 GiB at least), not 2: the search would otherwise measure 4,
lead with it and force it, two trials for the same OOM.

The allocation that failed says more again when it alone is larger than the GPU (116 GiB asked of
an 80 GiB GPU): no memory freed elsewhere makes room for it. A parameter that moves memory between
the GPU and the host (``memory: decreasing`` with ``host_memory: increasing``: CPU offload) moves
resident state, weights and optimizer, never the size of one allocation; where the failed
allocation, scaled down to the micro-batch ``v`` (``tried x v / v0``, not scaled up above ``v0``),
is still larger than the GPU, such parameters are set aside from "the phase's other parameters".
Offloading the policy does not save its forward micro-batch 8.

Where the failed allocation alone fits, offload may make room for it, but only as much room as it
frees: what it saved in that phase is measured by the normal runs of both configs (the phase's
highest peak, ``MemoryReport.phase_peak_frac``). A config that holds at least the failed run's
memory on the phase's other parameters, and whose offload saved less in that phase than the OOM
lacked, fails forced too: the policy's offload that freed 14 GiB in ``policy_train`` does not save
a longest batch that needed 134 GiB of an 80 GiB GPU. Without a normal run of both, nothing is said.

A config whose own forced run fitted is judged by that run, never covered by another's: NCCL's
buffers, left aside above, or the longest batch's own spread may take a config with as much memory
over the headroom (96% of the GPU) where this one peaked at 93%.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nccl_tune.failure import FailureClass
from nccl_tune.oom_demand import OomDemand, oom_demand
from nccl_tune.search_spaces.space import MemoryEffect, Parameter, SearchSpace
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.tuner.records.stability import run_key
from nccl_tune.tuner.records.study_records import TrialRecord
from nccl_tune.tuner.search.memory_model import holds_at_least, memory_explains

SAVED_SLACK = 1.25
"""What offload saved in a phase, as normal runs measured it, is taken as up to this much more
before a config is ruled out by it (sampled peaks may miss part of one)."""


def failed_forced(r: TrialRecord) -> bool:
    """A forced run that showed its config does not fit at its longest batch."""
    if not r.forced or not r.tells_of_values:
        return False
    if r.status in (FailureClass.OOM, FailureClass.HOST_OOM):
        return True
    if r.failed:
        return memory_explains(r, 1.0 - r.headroom_frac)
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


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def moves_to_host(p: Parameter) -> bool:
    """``p`` moves memory between the GPU and the host (CPU offload): resident state, not the size
    of any one allocation."""
    return {p.memory, p.host_memory} == {MemoryEffect.INCREASING, MemoryEffect.DECREASING}


def _below(p: Parameter, value: Any) -> list[Any]:
    """``p``'s values below ``value`` in memory order, nearest first."""
    rank = p.memory_rank(value)
    return sorted((c for c in p.choices if p.memory_rank(c) < rank), key=p.memory_rank, reverse=True)


class ForcedFailures:
    """The study's forced runs that failed, and the configs they cover."""

    def __init__(self, space: SearchSpace, records: Iterable[TrialRecord]) -> None:
        records = list(records)
        self.space = space
        self.failed = [r for r in records if failed_forced(r)]
        self.fitted = {run_key(r.values) for r in records if r.forced and r.ok and not failed_forced(r)}
        """Configs whose own forced run fitted (the module docstring)."""
        self.demands = {r.number: self._demand(r) for r in self.failed}
        """Per failed forced run, what its OOM message says it needed (None: no such message)."""
        self.normal = [
            r
            for r in records
            if r.ok and not r.forced and r.result is not None and r.result.memory is not None and r.values
        ]
        """Normal runs that finished, whose per-phase peaks measure what a parameter saves."""
        self.ceilings = {r.number: self._ceilings(r) for r in self.failed}
        """Per failed forced run, (parameter, the most memory it may hold and fit, the values whose
        share of the failed allocation alone is larger than the GPU) on each parameter that moves
        the phase its OOM named (the module docstring)."""

    @staticmethod
    def _demand(r: TrialRecord) -> OomDemand | None:
        return oom_demand(e.text for e in r.result.verdict.evidence) if _phase(r) else None

    def _ceilings(self, r: TrialRecord) -> list[tuple[Parameter, Any, frozenset]]:
        phase = _phase(r)
        demand = self.demands[r.number]
        if demand is None or demand.needed_gib <= demand.capacity_gib:
            return []
        out = []
        for p in self.space.parameters:
            v0 = r.values.get(p.name)
            if phase not in p.phases or not p.memory.signed or not _number(v0) or v0 <= 0:
                continue
            lower = _below(p, v0)
            if not lower or not all(_number(v) for v in lower):
                continue
            fitting = [v for v in lower if demand.needed_gib * v / v0 <= demand.capacity_gib]
            too_large = frozenset()
            if p.memory is MemoryEffect.INCREASING and all(_number(v) for v in p.choices):
                too_large = frozenset(v for v in p.choices if demand.tried_gib * min(v, v0) / v0 > demand.capacity_gib)
            out.append((p, fitting[0] if fitting else lower[-1], too_large))
        return out

    def _above_ceiling(self, values: Mapping[str, Any], r: TrialRecord) -> Parameter | None:
        """The parameter on which ``values`` hold more than ``r``'s OOM leaves room for, with at least
        ``r``'s memory on the phase's other parameters (offload set aside where the failed
        allocation alone is larger than the GPU); None when there is none."""
        phase = _phase(r)
        for p, top, too_large in self.ceilings[r.number]:
            if values.get(p.name) not in p.choices or p.memory_rank(values[p.name]) <= p.memory_rank(top):
                continue
            others = [q for q in self.space.parameters if q is not p and (not q.phases or phase in q.phases)]
            if values[p.name] in too_large:
                others = [q for q in others if not moves_to_host(q)]
            if all(holds_at_least(q, values, r.values) for q in others):
                return p
        return None

    def _phase_peak_gib(self, values: Mapping[str, Any], phase: str, capacity_gib: float) -> float | None:
        """The highest peak in ``phase`` of the normal runs (finished, not forced) of configs holding
        the same memory as ``values`` on every parameter that moves it; None when none measured it."""
        peaks = [
            r.result.memory.phase_peak_frac[phase] * capacity_gib
            for r in self.normal
            if phase in r.result.memory.phase_peak_frac
            and at_least_the_memory(self.space, values, r.values)
            and at_least_the_memory(self.space, r.values, values)
        ]
        return max(peaks, default=None)

    def saved_too_little(self, values: Mapping[str, Any], r: TrialRecord) -> float | None:
        """What offload saved ``values`` in the phase ``r``'s OOM named, when ``values`` hold at least
        ``r``'s memory on the phase's other parameters and that saving leaves the OOM's need above
        the GPU (the module docstring); None otherwise."""
        phase = _phase(r)
        demand = self.demands.get(r.number)
        if phase is None or demand is None or demand.needed_gib <= demand.capacity_gib:
            return None
        others = [q for q in self.space.parameters if not moves_to_host(q) and (not q.phases or phase in q.phases)]
        if not all(holds_at_least(q, values, r.values) for q in others):
            return None
        mine = self._phase_peak_gib(values, phase, demand.capacity_gib)
        theirs = self._phase_peak_gib(r.values, phase, demand.capacity_gib)
        if mine is None or theirs is None:
            return None
        saved = max(0.0, theirs - mine)
        return saved if demand.needed_gib - saved * SAVED_SLACK > demand.capacity_gib else None

    def covering(self, values: Mapping[str, Any]) -> TrialRecord | None:
        """The first failed forced run whose config ``values`` hold at least the memory of, or more
        than its OOM leaves room for, or whose OOM their offload saves too little for (the module
        docstring); None for a config whose own forced run fitted."""
        if run_key(values) in self.fitted:
            return None
        return next(
            (
                r
                for r in self.failed
                if at_least_the_memory(self.space, values, r.values, _phase(r))
                or self._above_ceiling(values, r)
                or self.saved_too_little(values, r) is not None
            ),
            None,
        )

    def why(self, values: Mapping[str, Any]) -> str:
        r = self.covering(values)
        if r is None:
            return ""
        end = f"ended {r.status.value}" if not r.ok else "came within the headroom of the wall"
        phase = _phase(r)
        where = f" in {phase}" if phase else ""
        of = f"trial {r.rerun_of}'s config" if r.rerun_of is not None else "a config"
        if not at_least_the_memory(self.space, values, r.values, phase):
            saved = self.saved_too_little(values, r)
            if saved is not None and self._above_ceiling(values, r) is None:
                lacked = self.demands[r.number].needed_gib - self.demands[r.number].capacity_gib
                return (
                    f"it holds at least the memory{where} of {of} but for offload, which saved {saved:.1f} GiB "
                    f"there in normal runs: less than the {lacked:.1f} GiB it lacked forced to its longest batch "
                    f"(trial {r.number})"
                )
            p = self._above_ceiling(values, r)
            if p is not None:
                alone = next((t for q, _, t in self.ceilings[r.number] if q is p), frozenset())
                beyond = " (its share of the allocation that failed is alone larger than the GPU)"
                return (
                    f"{p.name}={format_value(values[p.name])} is more than the OOM{where} of {of} forced to its "
                    f"longest batch (trial {r.number}, {p.name}={format_value(r.values[p.name])}) leaves room for"
                    + (beyond if values[p.name] in alone else "")
                )
        return (
            f"it holds at least the memory{where} of {of}, which {end} forced to its longest batch (trial {r.number})"
        )
