"""What the study has learnt about failures the memory model does not explain (hangs, crashes,
refusals; not OOMs, nor failures no value can bring about: ``Verdict.from_outside``, a signal from a
scheduler, a faulty GPU): which values make a run fail, alone or with a partner, and what a failure
costs. A run that failed with its peak within the headroom got past its start-up (it loaded its model
and trained to come that close), so its failure came after it; memory pressure may explain it (a rank
stalled in the allocator while the others wait) or one of its values (an NCCL combination that hangs
where the best configs sit, next to the wall): its place next to the wall is one of its causes, and
the runs tell which (below).

The causes a run holds are its values away from the baseline, each alone and each pair of them
(NCCL's NVLS algorithm hangs only without cuMem buffers; a batch larger than what a shorter prompt
limit leaves of the data set crashes only at that batch), and a leak held by every run (a failure
no value explains); in a space with a memory model, also its place next to the memory wall
(``MEMORY``: its peak came within twice the headroom of the wall, and for a config not yet run,
its predicted peak likely does), a cause like a value: on a node pressed for memory a rank
stalls in the allocator now and then, and those hangs, each next to other values, are told from
the values as one cause. A failed run had one cause fire; a finished run had none. A cause fires in one
of two phases: before the run's first step (a bad setting, a batch the data cannot fill: these
break most runs or none) or after it (a race, a hang now and then: a value that let the run start
and measure steps does not break every run); a run whose host ran out of memory counts with the
first whenever it failed (``EVERY_RUN``): a capacity runs out the same way each time, and on an
ordered axis (an integer or a power of two) further out too: the capacity ran out somewhere past the
furthest value a run finished at, so each value from there to the failure's is a cause (``Beyond``)
held by every run whose own value is as far out or further, and such a failure is blamed on one of
those, never on its value alone or with a partner (no run further out holds that value). Eight
data-loader workers ran the host out of memory where six finished: seven is suspect until a run of
seven finishes, and when seven fails too, one cause takes both. Those causes are nested, not
independent (a host that runs out at seven workers runs out at eight): a failure one of them takes
says nothing against the others on its axis (``_Spared``). Where the space says how a parameter
moves host RAM (``host_memory``), a host out of memory is
never blamed on a value that holds no more of it than the baseline's (``none`` or ``small``, or the
lower side of one declared ``increasing``): the workers take it, the attention kernel next to them is
clear, and with none of them changed the leak does. In each phase
each cause fires at a rate of its own,
unknown, with a Beta prior (``PRIORS``) that expects most values never to fire, smaller for a pair
than for one value; before the first step its mass sits near 0 and near 1, after it on small rates.

Which cause fired in each failed run is inferred by collapsed Gibbs sampling (the rates integrated
out): a cause is picked in proportion to ``(a + failures given to it) / (b + finished runs holding
it)``. So a value that many failures share (cuMem hanging at random, carried along by a lucky run)
takes them, and the values one failure happened to hold are cleared; a value that failed in one
context shares the blame with its pairs there, so that elsewhere it is suspect, not condemned (not
even suspect where its failures were cheap, crashes at start-up: one try settles it); and finished
runs of a value without a partner clear the value alone. The sampler's seed is fixed: a
resumed study infers what an uninterrupted one would.

A proposal's worth (``worth``) is the chance its run and its confirmation re-run both finish (the
two runs are correlated through the unknown rate: a value that failed once fails the re-run too if
it is a cause at all) over what it is expected to cost in finished trials' worth, ``P(ok) +
P(fail) x cost ratio``: a hang costs its whole stall timeout, and any failure at least the trial it
uses (a crash at start-up costs little GPU time, but a study has as many trials as ``--trials``
says: a pair that crashed a start-up cheaply six times is not worth a seventh try).
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from nccl_tune.failure import FailureClass
from nccl_tune.search_spaces.space import MemoryEffect, Parameter, ParamKind, SearchSpace
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.tuner.records.stability import values_key
from nccl_tune.tuner.records.study_records import FINISHED, Outcome, TrialRecord
from nccl_tune.tuner.search.forced_bound import ForcedFailures
from nccl_tune.tuner.search.memory_model import MemoryModel, failure_wall_frac, memory_explains

Value = tuple[str, Any]
"""(parameter, value)."""
MEMORY = "(memory)"
"""The pseudo-parameter of a run's place next to the memory wall: ``NEAR_WALL`` when its peak came
within twice the headroom of the wall (within the headroom too), unset otherwise."""
NEAR_WALL = "within twice the headroom of the wall"
Cause = tuple[Value, ...]
"""``()`` (the leak), one value, or a pair of values."""
Key = tuple[str, Cause]
"""(phase, cause): ``start`` (the run failed before its first step) or ``run`` (after it)."""
PRIORS: Mapping[str, Mapping[int, tuple[float, float]]] = {
    "start": {0: (0.005, 0.495), 1: (0.06, 0.44), 2: (0.015, 0.485)},
    "run": {0: (0.01, 0.99), 1: (0.3, 2.7), 2: (0.075, 2.925)},
}
"""``Beta(a, b)`` of a cause's firing rate by phase and size (leak, one value, a pair). Before the
first step, ``a + b = 1/2``: the mass sits near 0 and near 1 (a value breaks nothing, or breaks the
start-up of most runs: a bad NCCL setting, a batch the data cannot fill); a value breaks a run 12% of
the time before the study has seen it, a pair a quarter as often (a config holds many more pairs than
values), a run fails by chance 1% of the time. After the first step, ``a + b = 3``: a value that
let a run start and measure steps does not break every run, so the mass sits on small rates (a race,
a hang now and then: 10% in the mean for a value, 2.5% for a pair, 1% by chance), and a failure
there is blamed on a value held by other failures sooner than on the one value its run changed."""
CAPACITY_PRIOR = (0.25, 0.25)
"""``Beta(a, b)`` of a capacity cause's rate (``Beyond``): the host ran out somewhere past the furthest
value that finished, so before the runs say, each value out there is as likely as not where it ran
out (the mass near 0 and near 1, as for any value before the first step), while a value the
failed run held next to it (an attention kernel) breaks a run 12% of the time, as any value does."""
EVERY_RUN = frozenset({FailureClass.HOST_OOM})
"""Failures that a cause brings about in every run holding it, whenever in the run they come: the
host's memory, like the GPU's, runs out the same way each time. They fire among the causes of the
``start`` phase (a value breaks most runs or none), not of the ``run`` phase (now and then)."""
ORDERED = frozenset({ParamKind.INT, ParamKind.POW2})
"""Kinds of parameter whose values lie on an axis a capacity failure grows along (``Beyond``)."""
MAX_BEYOND = 16
"""Values up to a capacity failure's own on its axis that may be where the capacity ran out."""
SWEEPS = 200
BURN_IN = 40
MIN_FIRED = 0.02
"""Failures (averaged over the sweeps) a cause must have taken to be blamed at all."""
FLAKY_RATE = 0.10
"""Rate (posterior mean, per run) at or above which a value or pair that made runs fail makes every
config holding it flaky, once it has taken at least one failure: a setting that fails one trial run
in ten hangs a day of training many times over. The estimate is low where a failed run held many
values (its blame is shared among them and their pairs): a value that hung half the runs holding it
on the hang-region landscape was estimated at 11%."""
FLAKY_TOGETHER = 2.0
"""Failures (averaged over the sweeps) that the values and pairs a config holds must have taken
between them to make it flaky when none took a whole one alone: failed runs that held the same
few values (cuMem with the NVLS algorithm it was tried with) split their blame among those values
and their pairs, so no one of them reaches a failure while together they hold several."""
TOGETHER_SHARE = 0.1
"""Share of that blame a value or pair must hold to be named among them."""
CHEAP_SHARE = 0.5
"""Share of a finished run's cost below which a value's failures are cheap (``FailureModel._cheap``):
a start-up crash costs a few percent of a run, while a hang in the first step, caught by the stall
timeout, costs about as much as a run (its start-up dominates both)."""


@dataclass(frozen=True)
class Beyond:
    """A value on an ordered axis and every value past it away from the baseline, as one cause of
    a capacity failure (``EVERY_RUN``)."""

    value: int | float
    up: bool
    """True when the value lies above the baseline (the cause holds it and every larger one)."""

    def holds(self, value: Any) -> bool:
        return value >= self.value if self.up else value <= self.value

    def __str__(self) -> str:
        return f"{'>=' if self.up else '<='}{format_value(self.value)}"


class _Spared:
    """Which capacity causes a failed run's assigned cause spares, in one Gibbs chain. The causes
    past a capacity failure on one axis (``Beyond``) are nested, not independent: if the capacity
    runs out at seven workers, a run of eight fails too. A failure given to ``>=8`` is therefore
    no run in which ``>=7`` held and did not fire; it tells nothing of ``>=7`` (counted neither
    fired nor spared by it), and choosing a capacity cause leaves the others on its axis untold."""

    def __init__(self, failed: Sequence[tuple[tuple[Key, ...], float]]) -> None:
        self._axes = [[_axis(k) for k in keys] for keys, _ in failed]
        self._keys = [keys for keys, _ in failed]
        self._count: Counter[Key] = Counter()

    def __getitem__(self, key: Key) -> int:
        """Failed runs holding ``key`` that another capacity cause on its axis now takes."""
        return self._count[key]

    def of(self, i: int, cause: Key) -> list[Key]:
        """The causes of failed run ``i`` that ``cause``, if it took the run, spares."""
        axis = _axis(cause)
        if axis is None:
            return []
        return [k for k, a in zip(self._keys[i], self._axes[i]) if a == axis and k != cause]

    def move(self, i: int, cause: Key, sign: int) -> None:
        """Run ``i`` given to ``cause`` (``sign`` 1) or taken from it (-1)."""
        for k in self.of(i, cause):
            self._count[k] += sign

    def alongside(self, i: int) -> list[tuple[int, list[int]]]:
        """(index of a capacity cause of run ``i``, indices of the others on its axis) for each."""
        axes = self._axes[i]
        return [
            (j, [o for o, other in enumerate(axes) if other == axis and o != j])
            for j, axis in enumerate(axes)
            if axis is not None
        ]


def _axis(key: Key) -> tuple[str, bool] | None:
    """The parameter and side of a capacity cause (``Beyond``); None for any other cause."""
    cause = key[1]
    if len(cause) == 1 and isinstance(cause[0][1], Beyond):
        return cause[0][0], cause[0][1].up
    return None


def _prior(k: Key) -> tuple[float, float]:
    """``Beta(a, b)`` of a cause's rate in its phase (``PRIORS``), or of a capacity cause's
    (``CAPACITY_PRIOR``)."""
    return CAPACITY_PRIOR if _axis(k) is not None else PRIORS[k[0]][len(k[1])]


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


class FailureModel:
    """The causes' posteriors (module docstring), fitted to the study's launched runs."""

    def __init__(
        self,
        free: Sequence[Parameter],
        baseline: Mapping[str, Any],
        records: Iterable[TrialRecord],
        memory_wall_frac: float | None,
        p_below: Callable[[Mapping[str, Any], float], float] | None = None,
    ) -> None:
        """``memory_wall_frac``: the peak (share of the GPU) above which the memory model explains a
        failure: an OOM, or a hang, crash or timeout of a run that came that close to the wall (the
        allocator thrashing, a rank stalled in a retry while the others wait in a collective); None
        when the space has no memory model (no parameter declares a memory effect).

        ``p_below(values, frac)``: the chance an untried config's peak stays at or below ``frac`` of
        the GPU (the memory model's); with a memory model, a run's place next to the wall is a cause
        like a value (``MEMORY``): a run holds it when its measured peak came within twice the
        headroom of the wall, a config when its predicted peak likely does. Hangs of runs that
        came that close, each next to other values, are then told from those values as one cause.
        Without ``p_below`` a config is taken to be clear of the wall."""
        self.names = [p.name for p in free]
        self.baseline = dict(baseline)
        self._params = {p.name: p for p in free}
        self.band_frac = None if memory_wall_frac is None else 2.0 * memory_wall_frac - 1.0
        """Peak share from which a run is near the wall (the headroom's edge minus one more headroom)."""
        self._p_below = p_below
        self._placed_cache: dict[str, bool] = {}
        if self.band_frac is not None:
            self.names.append(MEMORY)
            self.baseline[MEMORY] = None
        records = sorted(records, key=lambda r: r.number)
        self.beyond = self._capacity_causes(free, records)
        """(parameter, ``Beyond``) of each ordered value a capacity failure came at."""
        self.runs: list[tuple[tuple[Key, ...], tuple[Key, ...], float]] = []
        """(keys held, keys one of which fired (empty for a finished run), cost) per run."""
        on_axis = {name for name, _ in self.beyond}
        for r in records:
            if r.status is None or not r.tells_of_values:
                continue
            values = self._measured_place(r)
            start, run, past = self.keys(values, "start"), self.keys(values, "run"), self.past(values)
            at_wall = memory_wall_frac is not None and memory_explains(r, memory_wall_frac)
            if at_wall and r.status is FailureClass.OOM:  # the memory model's
                continue
            cost = r.result.wall_s if r.result is not None else 0.0
            if r.status in FINISHED:
                self.runs.append((start + run + past, (), cost))
            elif r.status in EVERY_RUN:
                own = tuple(
                    k
                    for k in start
                    if all(name not in on_axis for name, _ in k[1]) and (not k[1] or any(map(self._host_cause, k[1])))
                )
                self.runs.append((start + run + past, own + past, cost))
            elif at_wall or (r.result is not None and r.result.step_times_s):  # past its start-up
                self.runs.append((start + run, run, cost))
            else:
                self.runs.append((start, start, cost))
        self.ok_cost_s = statistics.median([c for _, fired, c in self.runs if not fired and c > 0] or [0.0])
        self.held = Counter(k for keys, _, _ in self.runs for k in keys)
        self.partners = self._partners()
        """Per cause held by a failed run, the values every failed run holding it held besides its own."""
        self.spared: dict[Key, float] = {}
        """Per capacity cause, the failed runs holding it (averaged over the sweeps) that another cause
        on its axis took: they tell nothing of whether it fired (``_Spared``)."""
        self.fired, self.cost_s = self._sample()

    def _capacity_causes(self, free: Sequence[Parameter], records: Sequence[TrialRecord]) -> tuple[Value, ...]:
        """``beyond``: on each ordered axis, a ``Beyond`` of every value past the furthest that a
        run finished at, out to each value a capacity failure came at (at most ``MAX_BEYOND``): the
        capacity ran out somewhere there."""
        found: set[Value] = set()
        for p in free:
            if p.kind not in ORDERED or (base := self.baseline.get(p.name)) is None:
                continue
            ran = [v for r in records if r.status in FINISHED and (v := r.values.get(p.name)) is not None]
            for r in records:
                v = r.values.get(p.name)
                if r.status not in EVERY_RUN or not r.tells_of_values or v is None or v == base:
                    continue
                if not self._host_cause((p.name, v)):  # the space says this side holds no more host RAM
                    continue
                up = v > base
                if up:
                    far = max((u for u in ran if base < u < v), default=base)
                    past = sorted((c for c in p.choices if far < c <= v), reverse=True)
                else:
                    far = min((u for u in ran if v < u < base), default=base)
                    past = sorted(c for c in p.choices if v <= c < far)
                found.update((p.name, Beyond(c, up)) for c in past[:MAX_BEYOND])
        return tuple(sorted(found, key=lambda c: (c[0], c[1].value)))

    def _host_cause(self, value: Value) -> bool:
        """Whether ``value`` may have run the host out of memory: not where its parameter declares
        no ``host_memory`` effect, nor where it holds no more host RAM than the baseline's value."""
        p = self._params.get(value[0])
        if p is None:
            return True
        if p.host_memory in (MemoryEffect.NONE, MemoryEffect.SMALL):
            return False
        base = self.baseline.get(p.name)
        if not p.host_memory.signed or base is None:
            return True
        return p.memory_rank(value[1], p.host_memory) > p.memory_rank(base, p.host_memory)

    def past(self, values: Mapping[str, Any]) -> tuple[Key, ...]:
        """The capacity causes (``Beyond``) ``values`` hold: start-up keys, like a value's."""
        return tuple(("start", (c,)) for c in self.beyond if (v := values.get(c[0])) is not None and c[1].holds(v))

    def _partners(self) -> dict[Cause, frozenset[Value]]:
        out: dict[Cause, frozenset[Value]] = {}
        for keys, fired, _ in self.runs:
            if not fired:
                continue
            values = frozenset(
                c[0] for _, c in keys if len(c) == 1 and c[0][0] != MEMORY and not isinstance(c[0][1], Beyond)
            )
            for cause in {c for _, c in keys if c}:
                others = values - set(cause)
                out[cause] = out[cause] & others if cause in out else others
        return out

    def _measured_place(self, r: TrialRecord) -> Mapping[str, Any]:
        """``r``'s values with its place next to the wall, from its measured peak."""
        if self.band_frac is None:
            return r.values
        mem = r.result.memory if r.result is not None else None
        peak = mem.max_peak_frac if mem is not None else None
        return {**r.values, MEMORY: NEAR_WALL if peak is not None and peak >= self.band_frac else None}

    def placed(self, values: Mapping[str, Any]) -> Mapping[str, Any]:
        """``values`` with their place next to the wall: as given, or from the predicted peak."""
        if self.band_frac is None or MEMORY in values:
            return values
        if self._p_below is None:
            return {**values, MEMORY: None}
        key = values_key(values)
        near = self._placed_cache.get(key)
        if near is None:
            near = self._placed_cache[key] = self._p_below(values, self.band_frac) < 0.5
        return {**values, MEMORY: NEAR_WALL if near else None}

    def causes(self, values: Mapping[str, Any]) -> tuple[Cause, ...]:
        values = self.placed(values)
        off = [(n, values.get(n)) for n in self.names if values.get(n) != self.baseline.get(n)]
        return ((),) + tuple((v,) for v in off) + tuple(itertools.combinations(off, 2))

    def keys(self, values: Mapping[str, Any], phase: str | None = None) -> tuple[Key, ...]:
        """The causes ``values`` hold in ``phase`` (both phases when None)."""
        phases = ("start", "run") if phase is None else (phase,)
        return tuple((ph, c) for ph in phases for c in self.causes(values))

    def _sample(self) -> tuple[dict[Key, float], dict[Key, float]]:
        """Collapsed Gibbs over which cause fired in each failed run, (failures taken averaged over
        the sweeps after burn-in; mean cost of the failures taken) per cause. The posterior often
        has two modes (one cause shared by many failures, or a cause of each failure's own) that one
        chain does not cross: a chain starts in each, and each chain counts in proportion to the
        posterior mass it visits."""
        failed = [(fired, cost) for _, fired, cost in self.runs if fired]
        if not failed:
            return {}, {}
        in_failures = Counter(k for keys, _ in failed for k in keys)
        shared = [
            max([k for k in keys if k[1]] or keys, key=lambda k: (in_failures[k], -len(k[1]), -self.held[k]))
            for keys, _ in failed
        ]
        own = [min(keys, key=lambda k: (self.held[k], len(k[1]))) for keys, _ in failed]
        chains = [self._chain(failed, start, seed) for seed, start in enumerate((shared, own))]
        top = max(mass for *_, mass in chains)
        weights = [math.exp(mass - top) for *_, mass in chains]
        total = sum(weights)
        fired: dict[Key, float] = {}
        cost: dict[Key, float] = {}
        for (f, c, spared, _), w in zip(chains, weights):
            for k in f:
                fired[k] = fired.get(k, 0.0) + w * f[k] / total
                cost[k] = cost.get(k, 0.0) + w * c[k] / total
            for k in spared:
                self.spared[k] = self.spared.get(k, 0.0) + w * spared[k] / total
        return fired, {k: cost[k] / fired[k] for k in fired}

    def _chain(
        self, failed: list[tuple[tuple[Key, ...], float]], start: list[Key], seed: int
    ) -> tuple[dict[Key, float], dict[Key, float], dict[Key, float], float]:
        """One Gibbs chain from ``start``: (failures taken, cost taken, failures spared (``_Spared``),
        log of the mean posterior probability of its states after burn-in)."""
        rng = random.Random(seed)
        assigned = list(start)
        taken = Counter(assigned)
        spared = _Spared(failed)
        for i, c in enumerate(assigned):
            spared.move(i, c, 1)
        suspects = {k for keys, _ in failed for k in keys}
        fired: dict[Key, float] = {}
        cost: dict[Key, float] = {}
        spared_mean: dict[Key, float] = {}
        log_joints = []
        kept = SWEEPS - BURN_IN
        for sweep in range(SWEEPS):
            for i, (keys, run_cost) in enumerate(failed):
                taken[assigned[i]] -= 1
                spared.move(i, assigned[i], -1)
                # runs besides this one that tell whether each cause fired: (prior a, b, fired, did not)
                told = [(*_prior(key), taken[key], self.held[key] - 1 - spared[key] - taken[key]) for key in keys]
                weights = [(a + k) / (b + n) for a, b, k, n in told]
                for j, others in spared.alongside(i):  # a capacity cause spares the others on its axis
                    for o in others:
                        a, b, k, n = told[o]
                        weights[j] *= (a + b + k + n) / (b + n)
                c = rng.choices(keys, weights)[0]
                assigned[i] = c
                taken[c] += 1
                spared.move(i, c, 1)
                if sweep >= BURN_IN:
                    fired[c] = fired.get(c, 0.0) + 1.0 / kept
                    cost[c] = cost.get(c, 0.0) + run_cost / kept
                    for k in spared.of(i, c):
                        spared_mean[k] = spared_mean.get(k, 0.0) + 1.0 / kept
            if sweep >= BURN_IN:
                log_joints.append(
                    sum(
                        _log_beta(_prior(k)[0] + taken[k], _prior(k)[1] + self.held[k] - taken[k] - spared[k])
                        for k in suspects
                    )
                )
        top = max(log_joints)
        mass = top + math.log(sum(math.exp(x - top) for x in log_joints) / len(log_joints))
        return fired, cost, spared_mean, mass

    def _posterior(self, k: Key) -> tuple[float, float] | None:
        """Beta posterior (alpha, beta) of a blamed cause's rate; None when it is not blamed."""
        f = self.fired.get(k, 0.0)
        if f < MIN_FIRED:
            return None
        a, b = _prior(k)
        return a + f, b + self.held[k] - f - self.spared.get(k, 0.0)

    def _rate(self, k: Key) -> float | None:
        """The posterior mean rate of a blamed cause; None when it is not blamed."""
        post = self._posterior(k)
        return None if post is None else post[0] / (post[0] + post[1])

    def _held_posteriors(self, values: Mapping[str, Any]) -> list[tuple[float, float, float]]:
        """(alpha, beta, mean failure cost) of each blamed cause ``values`` hold. A value whose
        failures were cheap (``_cheap``: crashes at start-up) counts only next to one of its
        partners (``_near_context``): its runs cannot tell it from the partners they all held, and
        one more try without them costs little and settles it; a value whose failures cost about
        a run (a hang) counts everywhere."""
        out = []
        for k in self.keys(values) + self.past(values):
            post = self._posterior(k)
            if post is None:
                continue
            if self._cheap(k) and not self._near_context(k[1], values):
                continue
            out.append((*post, self.cost_s[k]))
        return out

    def _near_context(self, cause: Cause, values: Mapping[str, Any]) -> bool:
        """True when ``values`` hold one of the values every failed run holding ``cause`` held (or it
        had none): such a config may hold the very partner the value fails with, so it stays suspect;
        only one holding none of them (the planner's move without a partner) tries the value apart."""
        partners = self.partners.get(cause, frozenset())
        return not partners or any(values.get(name) == value for name, value in partners)

    def _cheap(self, k: Key) -> bool:
        """True when ``k`` is one value whose failures cost less than ``CHEAP_SHARE`` of a finished
        run (the mean over the sweeps). A capacity cause (``Beyond``) never is: a run without its
        partners settles nothing about how far out the capacity lasts, and no move can set it."""
        return len(k[1]) == 1 and not isinstance(k[1][0][1], Beyond) and self.cost_s[k] < CHEAP_SHARE * self.ok_cost_s

    def p_ok(self, values: Mapping[str, Any]) -> float:
        """Probability that a run of ``values`` finishes without a failure the memory model does not explain."""
        return self.odds(values)[0]

    def worth(self, values: Mapping[str, Any]) -> float:
        """The factor on a proposal's expected improvement (module docstring)."""
        return self.odds(values)[1]

    def odds(self, values: Mapping[str, Any]) -> tuple[float, float]:
        """(``p_ok``, ``worth``) of ``values`` from one pass over the causes they hold (a proposal
        asks both of every move)."""
        ok, worth, _ = self.risk(values)
        return ok, worth

    def risk(self, values: Mapping[str, Any]) -> tuple[float, float, float]:
        """(``p_ok``, ``worth``, cost ratio) of ``values`` from one pass over the causes they hold (the
        planner asks all three of every move); the cost ratio is what a failure of ``values`` would
        cost, in finished runs (``_cost_ratio``)."""
        held = self._held_posteriors(values)
        ok = math.prod(b / (a + b) for a, b, _ in held)
        both = math.prod(b * (b + 1.0) / ((a + b) * (a + b + 1.0)) for a, b, _ in held)
        ratio = self._cost_ratio(held)
        return ok, both / max(ok + (1.0 - ok) * max(ratio, 1.0), 1e-12), ratio

    def _cost_ratio(self, held: Sequence[tuple[float, float, float]]) -> float:
        """What a failure would cost, in finished runs: the mean cost of the failures of the ``held``
        causes, weighted by their rates (1 where there are none, or no run finished)."""
        risk = [(a / (a + b), cost) for a, b, cost in held]
        if not risk or self.ok_cost_s <= 0:
            return 1.0
        return sum(p * c for p, c in risk) / sum(p for p, _ in risk) / self.ok_cost_s

    def flaky(self, values: Mapping[str, Any]) -> list[tuple[Cause, float, float]]:
        """(cause, failures taken, mean rate) of each value or pair in ``values`` that made runs fail
        at ``FLAKY_RATE`` or more, having taken at least one failure, both counted over the two
        phases (a value that hangs at random hangs in a run's first step too). Asked of a
        config whose own runs finished, it names causes that fail now and then (those runs held it
        too): the config is not stable however its own runs went, since a hang now and then spares a
        few short runs, not a day of training. A cause counts only where ``values`` also hold what
        every failed run holding it held (``_in_context``): the runs cannot tell it from that pair.
        When no one cause took a whole failure but those ``values`` hold took ``FLAKY_TOGETHER``
        between them, they are named as one (``_flaky_together``)."""
        phases: dict[Cause, list[tuple[float, float]]] = {}
        for k in self.keys(values):
            rate = self._rate(k)
            if k[1] and rate is not None and self._in_context(k[1], values):
                phases.setdefault(k[1], []).append((self.fired[k], rate))
        rows = [(cause, sum(f for f, _ in fr), 1.0 - math.prod(1.0 - r for _, r in fr)) for cause, fr in phases.items()]
        out = [row for row in rows if row[2] >= FLAKY_RATE and row[1] >= 1.0]
        if out:
            return out
        return self._flaky_together(rows)

    @staticmethod
    def _flaky_together(rows: list[tuple[Cause, float, float]]) -> list[tuple[Cause, float, float]]:
        """The values a config holds that share the blame of ``FLAKY_TOGETHER`` failures or more
        between them (each failed run held them all, and the runs cannot tell which one hangs), as
        one cause with their joint rate: a config holding them fails as often as they do together."""
        total = sum(taken for _, taken, _ in rows)
        if total < FLAKY_TOGETHER:
            return []
        shared = [row for row in rows if row[1] >= TOGETHER_SHARE * total]
        rate = 1.0 - math.prod(1.0 - r for _, _, r in shared)
        if rate < FLAKY_RATE:
            return []
        values = tuple(sorted({v for cause, _, _ in shared for v in cause}, key=lambda v: v[0]))
        return [(values, sum(taken for _, taken, _ in shared), rate)]

    @cached_property
    def partnered(self) -> dict[Value, frozenset[Value]]:
        """Value -> its partners, for each blamed value whose failures were cheap (``_cheap``) and
        all came next to the same other values: the runs cannot tell it from them, and only a run
        that holds it without them can (the planner's move without a partner). Read once per
        base by the planner; the model does not change after its fit."""
        return {
            k[1][0]: self.partners[k[1]]
            for k in self.fired
            if self._cheap(k) and self._posterior(k) is not None and self.partners.get(k[1])
        }

    def _in_context(self, cause: Cause, values: Mapping[str, Any]) -> bool:
        """True when ``values`` hold every value that each failed run holding ``cause`` held too: a
        value whose failures all came with a partner (a shorter prompt limit, every run of it at a
        batch larger than the prompts it keeps) is not condemned without that partner. A partner is
        a value, never the place next to the wall (``_partners``)."""
        return all(values.get(name) == value for name, value in self.partners.get(cause, ()))

    def blamed(self) -> list[tuple[Cause, float, float]]:
        """(cause, failures taken, mean rate) of each blamed cause (in each phase it failed in),
        most failures first."""
        rows = [(k[1], self.fired[k], rate) for k in self.fired if (rate := self._rate(k)) is not None]
        return sorted(rows, key=lambda r: -r[1])


def study_failures(space: SearchSpace, records: Sequence[TrialRecord]) -> FailureModel:
    """The failure model of a stored study, as its records show it: the parameters its launched runs
    varied (a value every run held, pinned, is told from chance by nothing), against the space's
    defaults (the user's own values). Forced runs (``TrialRecord.forced``) are left out: their
    longest batches are no normal run's, and ``ForcedFailures`` reads them."""
    records = [r for r in records if not r.forced]
    launched = [r for r in records if r.outcome is Outcome.LAUNCHED and r.values]
    free = [p for p in space.parameters if len({repr(r.values.get(p.name)) for r in launched}) > 1]
    return FailureModel(
        free,
        space.defaults(),
        records,
        memory_wall_frac=failure_wall_frac(space),
        p_below=MemoryModel(space, records).p_below,
    )


class FlakyRule:
    """Which configs hold a flaky cause (``FailureModel.flaky``), or at least the memory of a config
    that failed forced to its longest batch (``forced_bound``), by a study's records; called with a
    config's values, True when it holds one."""

    def __init__(self, model: FailureModel, forced: ForcedFailures | None = None) -> None:
        self.model = model
        self.forced = forced

    def __call__(self, values: Mapping[str, Any]) -> bool:
        return bool(self.model.flaky(values)) or (self.forced is not None and self.forced.covering(values) is not None)

    def why(self, values: Mapping[str, Any]) -> str:
        """The flaky causes ``values`` hold, in words."""
        causes = [
            f"{' with '.join(f'{n}={format_value(v)}' for n, v in cause)} fails about {rate:.0%} of the runs "
            f"holding it (blamed for {taken:.1f} of the study's failures)"
            for cause, taken, rate in self.model.flaky(values)
        ]
        bound = self.forced.why(values) if self.forced is not None else ""
        return "; ".join(causes + ([bound] if bound else []))


def flaky_rule(space: SearchSpace, records: Sequence[TrialRecord]) -> FlakyRule:
    """``FlakyRule`` of a stored study (``study_failures``, ``ForcedFailures``)."""
    recs = list(records)
    return FlakyRule(study_failures(space, recs), ForcedFailures(space, recs))
