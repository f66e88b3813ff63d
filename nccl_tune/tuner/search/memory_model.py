"""Device memory of an untried config, predicted from what the study has measured.

Every launched trial that reports per-GPU memory is a data point: its highest peak as a fraction
of the GPU (``MemoryReport.max_peak_frac``). A trial that ran out of device memory says only that
its peak was above 1.0 (a lower bound). Only the parameters declared ``memory: increasing`` or
``decreasing`` enter the model (``unknown`` ones must match; ``none`` ones are ignored; ``small``
ones only as measured: below), in two layers:

- bounds that are certain, from monotonicity (the rule of ``predict.dominates_memory``): a config needs at
  least the memory of every measured config it dominates and at most that of every finished config
  that dominates it;
- a log-linear fit, ``log(peak) = a + sum_p beta_p * z_p`` with ``z_p`` the parameter's coordinate
  (log2 of a numeric value, the position in the choice order otherwise) and each ``beta_p`` held to
  the declared sign, under a weak prior (``PRIOR_SLOPE``). The intercept ``a`` is one per group of
  runs alike in every ``unknown`` parameter (``_within``): what an attention kernel does to memory is
  never read as the micro-batch's effect, and an out-of-memory run raises the effects only from a
  run of its own group. A prediction starts from the nearest
  measured config (its ``anchor``) and adds the fitted change, so it is exact at measured configs
  and uncertain in proportion to the fit's residuals, the posterior spread of the change and the
  distance travelled (a config that differs from its anchor only outside the fit carries the
  run-to-run spread alone, ``SIGMA_FLOOR``: the residuals measure the fit elsewhere). A change the
  data has not pinned down (``MEASURED_SHARE``) gives odds, but never refuses a config. Nor does a
  choice no run held on an axis of positions, which the fit would place by its order alone
  (selective checkpointing halfway between none and full, where it may save next to nothing, by an
  effect per position averaged over micro-batches, where dropping checkpointing costs more the
  larger the batch): between two measured choices its peak lies anywhere between the config's
  predictions at them (their middle in log, the spread of a value spread evenly between them:
  ``_between``); past the last measured choice, the step there may be anything up to twice the
  fitted one (one fitted position's effect of spread per position past it).

A parameter of ``unknown`` effect breaks dominance both ways. Yet a config that differs only in such
parameters from a run that held no more memory on the others and came above the wall (or ran out)
is unlikely to fit (``UNKNOWN_SAVES``) until a run with those values measures something: an OOM at
a micro-batch of 16 proves nothing about another attention kernel there, but most options move
memory little. For the same reason, where no run with a config's ``unknown`` values measured a peak
but runs with others did, the prediction starts from the nearest of those and moves by the fitted
effects as any other, with a spread of ``UNKNOWN_SIGMA`` per ``unknown`` parameter it changes, more
for a number by its log ratio (``_unknown_spread``; never a refusal): ``torch.compile`` at a micro-batch of 16, where 4 measured 85% of the GPU without
it and 16 ran out, is not an even guess.

A ``small`` parameter (NCCL's buffers: a few hundred MiB, either way) is left out of the fit, but a
step between two of its values that two finished runs measured (equal in every other parameter
that enters the model) is added to a prediction that takes that step from its anchor: 16 MiB
buffers measured 1.2% of the GPU above the default take a config measured just inside the headroom
with them out of it when they go back. An unmeasured step adds nothing.

OOM trials, and trials that failed otherwise after measuring some memory, are censored
observations (their peak is at least the GPU, or what PyTorch's message shows the failing
allocation needed, ``oom_demand``, or what was measured): when the fit predicts one
below its bound, the effects of what grew on the way from its anchor are raised until it reaches it
(``_raise_for``). A move that lowers memory along an axis takes the finished runs' own effect, never
the raised one (``PeakFit.along``): an OOM says that what grew needed more, not that shrinking it
saves as much. The effect it raised may belong to a part of memory the runs' peaks leave out (a
colocated engine's pool, which verl's printed peak does not hold: a share of the GPU raised by the
engine's OOMs took the trainer's measured peaks down to nothing as the share went back), and the
raises, each reckoned against the others, fed on one another. The prediction is then clipped into
the certain bounds.
A run that finished without reading memory (a trainer that prints none, GPUs the tool cannot read)
says only that its peak stayed under the GPU: a config it holds at least the memory of will not
run out (``MemoryPrediction.ran_under_frac``), and its odds to stay within the headroom are the
prediction's given that (``UNDER_FINISHED`` where nothing predicts it). This holds once the study
knows something of the wall (a run ran out, or measured a share of the GPU): before that, every
config's odds are the same even guess, and odds for some only would steer the search towards the
configs that use less memory, not towards the faster ones.

Colocated RL peaks in one phase or another (the generation engine's pool while it generates, the
trainer's micro-batch in training), and a log-linear fit of the run's highest peak adds effects
that belong to different phases. When trials measured memory per phase
(``MemoryReport.phase_peak_frac``), each phase that set or came near a run's peak gets its own fit
(``PeakFit``; a failed run gives lower bounds for the phases open when it stopped, an OOM's bound
for the innermost), and a config's peak is the highest of its phases', within the certain bounds of
the runs' highest peaks. A phase fit's anchor is the measured config nearest by the fitted effects,
so it travels freely along the axes that do not move that phase. A parameter no run has measured
is taken to move all the phases or one of them, all as often as the measured parameters moved
more than one (``MemoryModel.p_fits``, ``all_phases_share``): its prior slope in every phase at
once made a config whose generation pool sits near the wall look unlikely to fit with any
trainer-side change (offload moves the trainer's peak only).

A run's highest peak that stays flat along a memory-increasing axis (a micro-batch that moves the
trainer's part while the generation engine's pool sets the peak) says only that this axis's own
part of memory sits somewhere below the peak, as far as the runs went: a move past the largest value
measured along it gets an extra spread (``HIDDEN_SHARE`` per doubling past it), so the odds that it
fits say "maybe" until a run there measures it. The same holds the other way: a move that pays for
an increase with a decrease past the smallest value measured along another axis (a forward
micro-batch of 1, where only 8 and 16 ran, to make room for a larger training micro-batch) gets
that spread per halving past it, and the prediction counts the saving only as far as that smallest
value: the saving the fit extrapolates past it may belong to a phase that does not set the peak. This matters where memory is known only from a trainer's log
(``nccl-tune run`` on most trainers): runs' highest peaks, no peaks per phase. A phase's own fit
measures that phase and gets no such spread.

An OOM names the phase it happened in (``Verdict.phase``). A parameter that does not move that
phase's peak (the space declares the phases it moves, ``Parameter.phases``, or the study measured
its slope there as nil, ``PeakFit.moves``) is left out of the comparison with that OOM
(``PhaseFence``): the config that ran out in ``policy_train`` at a micro-batch of 16 fences off that
micro-batch with every forward micro-batch, which ``policy_train`` never sees.

The odds to fit a proposal shows and the study stores (``MemoryModel.p_fits``) are the model's
(``p_fits_model``) shifted by how they held on the study's earlier proposals (``fit_odds``): a
log-linear fit of a peak that is a sum of parts is too sure of itself away from its runs. The
planner ranks moves by the model's own odds, on which its trade of gain against risk was measured
(ranking by the shifted ones made it too timid after a first OOM: ``benchmarks/README.md``); the
admission rule below reads the model itself.

``MemoryModel.verdict`` is the admission rule: a config that dominates a known OOM, or one that
dominates a config measured within the headroom (by more than a ``small`` parameter can move, when
they differ in one), or one the fit (any phase's) predicts above ``1 - min_headroom_frac`` of the GPU with
``CONFIDENCE_Z`` standard deviations to spare, is not launched.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from statistics import NormalDist
from typing import Any

import numpy as np

from nccl_tune.failure import FailureClass
from nccl_tune.oom_demand import oom_demand
from nccl_tune.search_spaces.space import MemoryEffect, Parameter, ParamKind, SearchSpace
from nccl_tune.trial import MemoryReport
from nccl_tune.tuner.records.stability import values_key
from nccl_tune.tuner.records.study_records import Outcome, TrialRecord
from nccl_tune.tuner.search.fit_odds import shifted, study_shift

CONFIDENCE_Z = 2.0
"""Standard deviations between a prediction and the wall before the model prunes on its own."""
SIGMA_FLOOR = 0.02
"""Smallest residual spread of log peak assumed, and the whole spread of a prediction from an anchor
equal in every parameter of the fit (runs of one config differ by a few percent)."""
SIGMA_FEW_POINTS = 0.08
"""Residual spread assumed while the fit has too few points to measure its own."""
DISTANCE_SIGMA = 0.05
"""Extra spread per unit of coordinate travelled from the anchor (one doubling, one choice): the
log-linear form is only locally right (a static part makes growth accelerate with batch size)."""
PRIOR_SLOPE = {True: (0.2, 0.2), False: (0.3, 0.4)}
"""Prior (mean, sd) of ``|beta|``: per doubling on numeric axes (memory at most proportional to a
batch size or length, ln 2 = 0.69, usually well below as a static part dominates) and per choice
position otherwise (checkpointing, offload, a ZeRO stage: anything from a few percent to half the
GPU). It carries the odds that a move fits until the study measures the parameter."""
MOVES_Z = 2.0
"""Posterior deviations from zero at which a measured parameter counts as moving a phase's peak."""
SMALL_EFFECT_FRAC = 0.01
"""How much a ``memory: small`` parameter may lower a peak, as a share of the GPU: NCCL's buffers
are a few hundred MiB of an 80 GiB GPU."""
MEASURED_SHARE = 0.25
"""A change counts as measured when the data cut its prior variance to this share; only measured
changes can refuse a config."""
FIT_SIGMA = 0.05
"""Residual scale that weighs data against the prior in the fit."""
ANCHOR_WEIGHT_FLOOR = 0.05
"""Least weight of an axis in the distance to a prediction's anchor (a fitted effect per unit of
coordinate; the prior's is 0.2-0.3): an axis fitted flat still separates otherwise equal anchors."""
PHASE_UNACCOUNTED_FRAC = 0.02
"""A run whose phases' highest peak is further than this (share of the GPU) below its highest peak
measured is left out of the phases' fits: its peak came where no phase was sampled."""
PHASE_SHARE = 0.5
"""A phase enters the model when, in some run, its peak came within this share of the run's
highest (or it ran out of memory): the other phases never set the peak near what was measured."""
FLAT_ELASTICITY = 0.1
"""Elasticity of the runs' highest peak along a memory-increasing numeric axis (relative change of
the peak per relative change of the value) below which the axis counts as measured flat: its own
part of memory is hidden under another part's peak, as far as the runs went."""
HIDDEN_SHARE = 0.5
"""Spread of log peak per doubling past the largest value measured along such an axis: its hidden
part may be anywhere below the measured peak, growing at up to proportionally (a doubling of a
micro-batch past the measured ones may add nothing or up to about ln 2)."""
BOUND_SIGMA = 0.1
"""Extra spread of log peak for a prediction from an out-of-memory run's bound (``_from_bound``):
what PyTorch's message says the failing allocation needed is a least peak, not the peak."""
UNKNOWN_SAVES = 0.2
"""Chance that changing parameters of unknown memory effect (``memory: unknown``) takes a config
below a peak that a run holding at least its memory on every declared parameter reached, or ran out
at (``MemoryPrediction.unknown_lower_frac``), while no run with those values measured anything: most
options move memory little; an attention kernel may save much. Where another run that differs only
in such parameters finished holding at least the config's memory on the others
(``MemoryPrediction.unknown_upper_frac``), they moved memory much, and the odds are even (the eager
kernel runs out where sdpa finished: FlashAttention may fit or not)."""
UNKNOWN_SIGMA = 0.25
"""Spread of log peak that a change of one ``memory: unknown`` parameter adds to a prediction from a
run with another of its values (a factor of 1.28 either way at one standard deviation: most options
move memory by a few percent; an attention kernel's activations by half or more)."""
UNDER_FINISHED = 0.85
"""Chance that a config stays within the headroom when a run holding at least its memory finished
without reading any (``MemoryPrediction.ran_under_frac``) and nothing measured predicts its peak: it
will not run out, and a run seldom finishes in the last few percent of the GPU."""
_NORMAL = NormalDist()


@dataclass(frozen=True)
class MemoryPrediction:
    """Predicted highest per-GPU peak of a config, as a fraction of the GPU."""

    peak_frac: float | None
    """Point prediction (None when nothing was measured to anchor it)."""
    sigma_log: float
    """Standard deviation of ``log(peak_frac)``; ``inf`` when the change was never observed."""
    lower_frac: float
    """Certain lower bound (0.0 when none): the peak of a measured config this one dominates."""
    upper_frac: float
    """Certain upper bound (``inf`` when none): the peak of a finished config that dominates this one."""
    anchor: int | None = None
    """Trial the prediction starts from."""
    lower_from: int | None = None
    """Trial that sets ``lower_frac``."""
    measured: bool = True
    """False when the move changes a parameter whose effect the study never measured (the
    prediction then leans on ``PRIOR_SLOPE``: good for odds, not for refusing a config)."""
    phases: Mapping[str, MemoryPrediction] = field(default_factory=dict)
    """Per phase, its own prediction, when the peak is predicted as the highest of the phases'
    (empty otherwise); the other fields then describe the phase predicted highest."""
    unknown_lower_frac: float = 0.0
    """The highest peak (or OOM bound) of a run that this config holds at least the memory of on
    every declared parameter while differing in an ``unknown`` one (0.0 when none): no certain bound,
    since the unknown change may save memory, but a likely one (``UNKNOWN_SAVES``)."""
    unknown_upper_frac: float = math.inf
    """The lowest peak of a finished run (the GPU for one that read none) that holds at least this
    config's memory on every declared parameter while differing in an ``unknown`` one (``inf`` when
    none): no bound, but it makes ``unknown_lower_frac`` say nothing (``UNKNOWN_SAVES``)."""
    ran_under_frac: float = math.inf
    """The GPU (1.0) when a run holding at least this config's memory finished without reading any:
    the peak stays under it, no more is known (``inf`` when no such run). The odds to stay within the
    headroom are taken given that."""

    @property
    def known(self) -> bool:
        return self.peak_frac is not None and math.isfinite(self.sigma_log)

    def p_below(self, frac: float) -> float:
        """Probability that the peak stays at or below ``frac`` of the GPU (of every phase's, taken
        as independent, when predicted per phase)."""
        if self.lower_frac > frac:
            return 0.0
        if self.upper_frac <= frac or self.ran_under_frac <= frac:
            return 1.0
        if self.phases:
            return math.prod(p.p_below(frac) for p in self.phases.values())
        if not self.known:
            return self._unknown_odds(frac)
        below = self._cdf(frac)
        if math.isfinite(self.ran_under_frac):
            under = self._cdf(self.ran_under_frac)
            return below / under if under > 0 else UNDER_FINISHED
        return below

    def _cdf(self, frac: float) -> float:
        if self.sigma_log <= 0:
            return 1.0 if self.peak_frac <= frac else 0.0
        return _NORMAL.cdf((math.log(frac) - math.log(self.peak_frac)) / self.sigma_log)

    def _unknown_odds(self, frac: float) -> float:
        """``p_below`` when nothing measured predicts the peak: ``UNDER_FINISHED`` under a finished
        run's ceiling, ``UNKNOWN_SAVES`` next to a run that differs only in ``unknown`` parameters
        and came above ``frac`` (unless another such run finished holding more), else even odds."""
        if math.isfinite(self.ran_under_frac):
            return UNDER_FINISHED
        if self.unknown_lower_frac > frac and self.unknown_upper_frac > max(frac, 1.0):
            return UNKNOWN_SAVES
        return 0.5


@dataclass(frozen=True)
class MemoryVerdict:
    """Why a config is not launched."""

    oom: bool
    """True when it would run out of memory; False when it would run, but within the headroom (not stable)."""
    from_trial: int
    reason: str

    @property
    def status(self) -> FailureClass | None:
        """The failure the config is predicted to meet (None: it would run, just not stably)."""
        return FailureClass.OOM if self.oom else None


@dataclass(frozen=True)
class _Point:
    number: int
    values: Mapping[str, Any]
    frac: float
    exact: bool
    """True for a finished run's peak; False for a lower bound (OOM, or a run cut short)."""
    ceiling: bool = False
    """True for a finished run that read no memory: its peak stayed under the GPU (``frac`` 1.0), no
    more is known; an upper bound, never a lower one nor an anchor."""


def _unknown_spread(old: Any, new: Any) -> float:
    """The spread of log peak a ``memory: unknown`` parameter adds going from ``old`` to ``new``:
    ``UNKNOWN_SIGMA``, and for positive numbers their log ratio on top (a share of the GPU that an
    engine reserves, a buffer's size: memory may follow the value itself); 0 where they are equal."""
    if old == new:
        return 0.0
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in (old, new))
    return UNKNOWN_SIGMA + (abs(math.log(new / old)) if numbers else 0.0)


def _numeric_ascending(p: Parameter) -> bool:
    """Positive numbers in ascending order spanning a factor of 4 or more (sizes, lengths): an axis
    measured in doublings. Narrow numeric ranges (ZeRO stages 1-3) are treated as positions."""
    nums = [c for c in p.choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
    return (
        len(nums) == len(p.choices) > 1
        and all(c > 0 for c in nums)
        and list(nums) == sorted(nums)
        and nums[-1] >= 4 * nums[0]
    )


def coordinate(p: Parameter, value: Any) -> float:
    """The value's position on the axis the fit uses: log2 of a number, else its choice index."""
    if p.kind is ParamKind.BOOL:
        return 1.0 if value else 0.0
    if _numeric_ascending(p):
        return math.log2(value)
    return float(p.choices.index(value))


def holds_at_least(p: Parameter, values: Mapping[str, Any], failed: Mapping[str, Any]) -> bool:
    """``values`` hold at least the memory of ``failed`` on parameter ``p`` (``none`` and ``small``
    parameters always do; an ``unknown`` one only with the same value)."""
    if p.memory in (MemoryEffect.NONE, MemoryEffect.SMALL):
        return True
    a, b = values.get(p.name), failed.get(p.name)
    if p.memory is MemoryEffect.UNKNOWN or a is None or b is None:
        return a == b
    return p.memory_rank(a) >= p.memory_rank(b)


def _measured(records: Iterable[TrialRecord]) -> Iterable[tuple[TrialRecord, MemoryReport | None, bool]]:
    """(record, its memory report, whether its peaks were measured whole) of the launched trials
    whose memory says something: finished runs (and runs stopped after their measured steps) are
    whole; an OOM or another failure gives lower bounds."""
    for r in records:
        if r.outcome is not Outcome.LAUNCHED or r.result is None or r.status is FailureClass.INTERRUPTED:
            continue
        if r.forced:  # its longest batches: not the peak a normal run of its values reaches
            continue
        whole = r.status is FailureClass.OK or (r.status is FailureClass.BUDGET and bool(r.result.step_times_s))
        yield r, r.result.memory, whole


def _oom_bound(record: TrialRecord, frac: float | None) -> float:
    """The least peak an OOM says its config needed: the GPU, or what PyTorch's message shows the
    failing allocation needed on top of what was in use, or what was measured."""
    demand = oom_demand(e.text for e in record.result.verdict.evidence) if record.result else None
    need = demand.needed_frac if demand is not None else 0.0
    return max(frac or 0.0, need, 1.0)


def observations(records: Iterable[TrialRecord]) -> list[_Point]:
    """Memory data points of launched trials (exact peaks, lower bounds, and the GPU as the ceiling
    of a finished run that read no memory)."""
    out = []
    for r, mem, whole in _measured(records):
        frac = mem.max_peak_frac if mem is not None else None
        if r.status is FailureClass.OOM:
            out.append(_Point(r.number, r.values, _oom_bound(r, frac), exact=False))
        elif frac is not None and frac > 0:
            out.append(_Point(r.number, r.values, frac, exact=whole))
        elif whole:
            out.append(_Point(r.number, r.values, 1.0, exact=False, ceiling=True))
    if all(pt.ceiling for pt in out):
        return []  # no wall known yet: every config's odds are the same guess, ranked alike
    return out


def phase_observations(records: Iterable[TrialRecord]) -> dict[str, list[_Point]]:
    """Per phase, the data points of the trials that measured memory per phase
    (``MemoryReport.phase_peak_frac``) and whose phases account for its peak. A failed run measured
    the phases it left whole; those open when it stopped give lower bounds, and the innermost of
    them, when it ran out of memory, the OOM's bound. Phases that never came within ``PHASE_SHARE`` of their run's peak are left out (phases of
    the driver's bookkeeping: they never set a peak)."""
    out: dict[str, list[_Point]] = {}
    leading: set[str] = set()
    for r, mem, whole in _measured(records):
        if mem is None or not mem.phase_peak_frac:
            continue
        top = max(mem.phase_peak_frac.values())
        if mem.max_peak_frac is not None and top < mem.max_peak_frac - PHASE_UNACCOUNTED_FRAC:
            continue  # the peak came where no phase was sampled (memory lines read after the run)
        open_at_end = mem.phases_open_at_end
        for name, frac in mem.phase_peak_frac.items():
            if not frac > 0:
                continue
            if frac >= PHASE_SHARE * top:
                leading.add(name)
            if whole or name not in open_at_end:
                out.setdefault(name, []).append(_Point(r.number, r.values, frac, exact=True))
            elif r.status is FailureClass.OOM and name == open_at_end[-1]:
                out.setdefault(name, []).append(_Point(r.number, r.values, _oom_bound(r, frac), exact=False))
                leading.add(name)
            else:
                out.setdefault(name, []).append(_Point(r.number, r.values, frac, exact=False))
    return {name: pts for name, pts in out.items() if name in leading}


def memory_explains(r: TrialRecord, wall_frac: float) -> bool:
    """True when ``r`` ran out of memory or failed after its peak came above ``wall_frac``
    (``failure_wall_frac``): the failure is memory pressure, not its values' doing, and its last steps
    may have slowed as the allocator thrashed."""
    if r.status is FailureClass.OOM:
        return True
    mem = r.result.memory if r.result is not None else None
    peak = mem.max_peak_frac if mem is not None else None
    return r.failed and peak is not None and peak > wall_frac


def failure_wall_frac(space: SearchSpace) -> float | None:
    """The peak (share of the GPU) above which memory explains a failure (an OOM, or a hang, crash or
    timeout of a run that came that close: the headroom's edge); None when no parameter declares an
    increasing or decreasing memory effect (the space has no memory model)."""
    return 1.0 - space.min_headroom_frac if any(p.memory.signed for p in space.parameters) else None


class PeakFit:
    """One series of peaks (the run's highest, or one phase's) fitted once per study state (cheap: a
    few dozen points); see the module docstring."""

    def __init__(self, space: SearchSpace, points: Sequence[_Point], *, by_effect: bool = False) -> None:
        self.space = space
        self.by_effect = by_effect
        """Anchors by the fitted effects (a phase's fit: some declared parameters do not move it)."""
        self.wall_frac = 1.0 - space.min_headroom_frac
        self.signed = [p for p in space.parameters if p.memory.signed]
        self.unknown = [p for p in space.parameters if p.memory is MemoryEffect.UNKNOWN]
        self.small = [p for p in space.parameters if p.memory is MemoryEffect.SMALL]
        self.points = list(points)
        sign = [1.0 if p.memory is MemoryEffect.INCREASING else -1.0 for p in self.signed]
        slopes = [PRIOR_SLOPE[_numeric_ascending(p) and p.kind is not ParamKind.BOOL] for p in self.signed]
        self.prior_beta = np.array([s * m for s, (m, _) in zip(sign, slopes)])
        self.prior_sd = np.array([sd for _, sd in slopes])
        self.affine = [
            j
            for j, p in enumerate(self.signed)
            if p.memory is MemoryEffect.INCREASING and _numeric_ascending(p) and p.kind is not ParamKind.BOOL
        ]
        self.positional = [
            j for j, p in enumerate(self.signed) if p.kind is not ParamKind.BOOL and not _numeric_ascending(p)
        ]
        """Axes whose coordinate is a choice's position (checkpointing none/selective/full, a ZeRO stage)."""
        self._index_points()
        self._fit()
        self.small_steps = self._measure_small_steps()
        """(parameter, from value, to value), values spelled by ``repr`` -> mean change of the peak
        (share of the GPU) between finished runs equal in every other parameter that enters the model."""
        self._predicted: dict[tuple, MemoryPrediction] = {}
        """``predict``'s answers: a proposal asks for each move's several times (its admission, its
        odds to fit, its failure odds next to the wall), and the fit does not change."""

    # -- the fit -----------------------------------------------------------------------------
    def _z(self, values: Mapping[str, Any]) -> np.ndarray | None:
        try:
            return np.array([coordinate(p, values[p.name]) for p in self.signed], dtype=float)
        except (KeyError, ValueError, TypeError):
            return None

    def _fit(self) -> None:
        """Sign-constrained MAP fit of ``beta`` on the finished runs under the prior ``PRIOR_SLOPE``,
        then raised where a censored point (an OOM, a failure after some memory was measured) is
        predicted below its bound (``_raise_for``)."""
        exact = [(pt, self._z(pt.values)) for pt in self.points if pt.exact]
        self.anchors = [(pt, z) for pt, z in exact if z is not None]
        bounds = [(pt, self._z(pt.values)) for pt in self.points if not pt.exact and not pt.ceiling]
        self.bound_anchors = [(pt, z) for pt, z in bounds if z is not None]
        """Censored points (an OOM, a failure after some memory was measured): ``_from_bound``'s anchors."""
        self.censored = [(pt, z, math.log(pt.frac)) for pt, z in self.bound_anchors]
        k = len(self.signed)
        self.beta = self.prior_beta.copy()
        self.beta_fit = self.beta.copy()
        self.cov = np.diag(self.prior_sd**2)
        self.sigma = SIGMA_FEW_POINTS
        if not self.anchors or not k:
            return
        rows = np.array([z for _, z in self.anchors])
        ys = np.array([math.log(pt.frac) for pt, _ in self.anchors])
        groups = _group_ids([self._unknown_key(pt.values) for pt, _ in self.anchors])
        centred, yc = _within(rows, groups), _within(ys, groups)
        beta = _map_fit(centred, yc, self.prior_beta, self.prior_sd)
        resid = yc - centred @ beta
        dof = len(ys) - int(groups.max()) - 1 - int(np.sum(np.ptp(centred, axis=0) > 1e-9))
        if dof >= 2:
            self.sigma = max(SIGMA_FLOOR, float(np.sqrt(np.sum(resid**2) / dof)))
        else:
            self.sigma = max(SIGMA_FEW_POINTS, float(np.max(np.abs(resid))))
        self.beta = beta
        self.beta_fit = beta.copy()
        """The finished runs' own fit: a move that lowers memory along an axis takes its effect from
        here, never from what an OOM raised (``along``)."""
        raised = self._raise_for()
        info = centred.T @ centred / self.sigma**2 + np.diag(1.0 / self.prior_sd**2)
        for dz in raised:
            info += np.outer(dz, dz) / self.sigma**2
        self.cov = np.linalg.inv(info)

    def _raise_for(self) -> list[np.ndarray]:
        """Make every censored point's prediction reach its bound by raising the coefficients of the
        changes that increased memory on the way from its anchor (never lowering another: a config
        that ran out says something about what grew, not about what shrank). Returns the moves used."""
        used = []
        for _ in range(3):
            for bound, z, target in self.censored:
                same = [(pt, pz) for pt, pz in self.anchors if self._same_unknown(pt, bound.values)]
                if not same:  # what grew may be an unknown parameter's change: nothing to raise
                    continue
                pt, pz = min(same, key=lambda a: float(np.abs(z - a[1]).sum()))
                dz = z - pz
                grew = np.array([(self.prior_beta[j] > 0) == (dz[j] > 0) and dz[j] != 0 for j in range(len(dz))])
                deficit = target - (math.log(pt.frac) + float(dz @ self.along(dz)))
                if deficit <= 1e-6 or not grew.any():
                    continue
                step = np.where(grew, dz, 0.0)
                self.beta += step * deficit / float(step @ step)
                used.append(step)
        return used

    def _measure_small_steps(self) -> dict[tuple[str, str, str], float]:
        """The measured steps of each ``small`` parameter (``small_steps``), both ways."""
        if not self.small:
            return {}
        others = [p.name for p in (*self.signed, *self.unknown, *self.small)]
        groups: dict[tuple[str, str], dict[Any, list[float]]] = {}
        for pt in self.points:
            if not pt.exact:
                continue
            for p in self.small:
                rest = values_key({n: pt.values.get(n) for n in others if n != p.name})
                groups.setdefault((p.name, rest), {}).setdefault(pt.values.get(p.name), []).append(pt.frac)
        steps: dict[tuple[str, str, str], list[float]] = {}
        for (name, _), by_value in groups.items():
            means = {v: sum(f) / len(f) for v, f in by_value.items()}
            for a, fa in means.items():
                for b, fb in means.items():
                    if a != b:
                        steps.setdefault((name, repr(a), repr(b)), []).append(fb - fa)
        return {k: sum(d) / len(d) for k, d in steps.items()}

    def small_step(self, anchor: Mapping[str, Any], values: Mapping[str, Any]) -> float:
        """The measured change of the peak (share of the GPU) from ``anchor``'s ``small`` values to
        ``values``'; 0.0 for the steps not measured."""
        return sum(
            self.small_steps.get((p.name, repr(anchor.get(p.name)), repr(values.get(p.name))), 0.0)
            for p in self.small
            if anchor.get(p.name) != values.get(p.name)
        )

    # -- bounds ------------------------------------------------------------------------------
    def _ranks(self, values: Mapping[str, Any]) -> np.ndarray | None:
        """Memory ranks of the signed parameters, then choice positions of the ``unknown`` ones."""
        try:
            signed = [p.memory_rank(values[p.name]) for p in self.signed]
            unknown = [p.choices.index(values[p.name]) for p in self.unknown]
        except (KeyError, ValueError):
            return None
        return np.array(signed + unknown, dtype=float)

    def _index_points(self) -> None:
        rows = [(pt, self._ranks(pt.values)) for pt in self.points]
        rows = [(pt, r) for pt, r in rows if r is not None]
        width = len(self.signed) + len(self.unknown)
        self._dom_points = [pt for pt, _ in rows]
        self._dom_ranks = np.array([r for _, r in rows], dtype=float).reshape(len(rows), width)
        self._dom_frac = np.array([pt.frac for pt in self._dom_points])
        self._dom_exact = np.array([pt.exact for pt in self._dom_points], dtype=bool)
        self._dom_ceiling = np.array([pt.ceiling for pt in self._dom_points], dtype=bool)
        self._dom_small = [tuple(pt.values.get(p.name) for p in self.small) for pt in self._dom_points]

    def bounds(self, values: Mapping[str, Any]) -> tuple[float, int | None, float, float]:
        """(lower bound, trial that sets it, upper bound, ``MemoryPrediction.ran_under_frac``) from
        dominance alone (``predict.dominates_memory``, vectorised over the measured configs). A peak
        measured below the GPU bounds a config that differs in a ``small`` parameter less surely, by
        ``SMALL_EFFECT_FRAC`` or the step measured (``small_steps``) if larger, either way: a smaller
        NCCL buffer may take a config measured just inside the headroom out of it, a larger one may
        take a config just outside into it. An OOM bounds them all from below."""
        masks = self._masks(values)
        if masks is None:
            return 0.0, None, math.inf, math.inf
        same, same_small, below, above = masks
        below &= ~self._dom_ceiling
        ran_under = 1.0 if (above & same & same_small & self._dom_ceiling).any() else math.inf
        above &= same & self._dom_exact
        below &= same
        floor, ceiling = self._dom_frac.copy(), self._dom_frac.copy()
        for i in np.flatnonzero(~same_small & self._dom_exact & (below | above)):
            step = self.small_step(self._dom_points[i].values, values)
            floor[i] += min(-SMALL_EFFECT_FRAC, step)
            ceiling[i] += max(SMALL_EFFECT_FRAC, step)
        lower, lower_from = 0.0, None
        if below.any():
            i = int(np.argmax(np.where(below, floor, -1.0)))
            lower, lower_from = float(floor[i]), self._dom_points[i].number
        upper = float(ceiling[above].min()) if above.any() else math.inf
        return lower, lower_from, upper, ran_under

    def _masks(self, values: Mapping[str, Any]) -> tuple[np.ndarray, ...] | None:
        """Over the points: (same ``unknown`` values, same ``small`` values, holding at most the
        memory of ``values`` on the declared parameters, holding at least it); None when none."""
        r = self._ranks(values)
        if r is None or not len(self._dom_points):
            return None
        k = len(self.signed)
        small = tuple(values.get(p.name) for p in self.small)
        same_small = np.array([s == small for s in self._dom_small], dtype=bool)
        same = np.all(self._dom_ranks[:, k:] == r[k:], axis=1)
        below = np.all(self._dom_ranks[:, :k] <= r[:k], axis=1)
        above = np.all(self._dom_ranks[:, :k] >= r[:k], axis=1)
        return same, same_small, below, above

    def unknown_sides(self, values: Mapping[str, Any]) -> tuple[float, float]:
        """(``MemoryPrediction.unknown_lower_frac``, ``unknown_upper_frac``): the runs that differ from
        ``values`` in an ``unknown`` parameter, ``small`` ones alike, holding at most its memory on
        every declared parameter (their highest peak or OOM bound), or finished holding at least it
        (their lowest peak, the GPU for one that read none)."""
        masks = self._masks(values) if self.unknown else None
        if masks is None:
            return 0.0, math.inf
        same, same_small, below, above = masks
        less = same_small & ~same & below & ~self._dom_ceiling
        more = same_small & ~same & above & (self._dom_exact | self._dom_ceiling)
        lower = float(self._dom_frac[less].max()) if less.any() else 0.0
        return lower, float(self._dom_frac[more].min()) if more.any() else math.inf

    def _unknown_key(self, values: Mapping[str, Any]) -> tuple[str, ...]:
        """The values of ``values`` on the ``unknown`` parameters (``repr``: a run's group in the fit)."""
        return tuple(repr(values.get(p.name)) for p in self.unknown)

    def _same_unknown(self, pt: _Point, values: Mapping[str, Any]) -> bool:
        """True when ``pt`` holds the values of ``values`` on every ``unknown`` parameter (the only
        points a prediction for ``values`` may start from)."""
        return all(pt.values.get(p.name) == values.get(p.name) for p in self.unknown)

    def _anchor(
        self, values: Mapping[str, Any], z: np.ndarray, same_unknown: bool = True
    ) -> tuple[_Point, np.ndarray] | None:
        """The measured config nearest to ``z`` (holding the ``unknown`` values of ``values`` unless
        not ``same_unknown``); with ``by_effect``, each axis weighed by its fitted effect (at least
        ``ANCHOR_WEIGHT_FLOOR``): travelling along an axis that barely moves this phase's peak costs
        little."""
        weight = np.maximum(np.abs(self.beta), ANCHOR_WEIGHT_FLOOR) if self.by_effect else np.ones_like(self.beta)
        best, best_d = None, math.inf
        for pt, pz in self.anchors:
            if same_unknown and not self._same_unknown(pt, values):
                continue
            d = float((np.abs(z - pz) * weight).sum())
            if d < best_d:
                best, best_d = (pt, pz), d
        return best

    # -- predictions -------------------------------------------------------------------------
    def predict(self, values: Mapping[str, Any], still: frozenset[str] = frozenset()) -> MemoryPrediction:
        """The peak of ``values``; ``still``: parameters taken not to move this peak (their change
        from the anchor is left out)."""
        key = (values_key(values), still)
        if key not in self._predicted:
            lower, lower_from, upper, ran_under = self.bounds(values)
            pred = self._predict(values, still, lower, lower_from, upper)
            self._predicted[key] = pred if math.isinf(ran_under) else replace(pred, ran_under_frac=ran_under)
        return self._predicted[key]

    def _predict(
        self, values: Mapping[str, Any], still: frozenset[str], lower: float, lower_from: int | None, upper: float
    ) -> MemoryPrediction:
        between = self._between(values, still)
        if between is not None:
            peak, sigma, anchor = between
            peak = min(max(peak, lower), upper) if upper >= lower else lower
            return MemoryPrediction(peak, sigma, lower, upper, anchor, lower_from, measured=False)
        z = self._z(values)
        found = self._anchor(values, z) if z is not None and self.anchors else None
        unknown_var = 0.0
        if found is None:
            bound = self._from_bound(values, z, lower, lower_from, upper)
            found = self._anchor(values, z, same_unknown=False) if z is not None and self.anchors else None
            if bound.known or found is None:
                return bound
            unknown_var = sum(
                _unknown_spread(found[0].values.get(p.name), values.get(p.name)) ** 2 for p in self.unknown
            )
        pt, pz = found
        dz = z - pz
        for j, p in enumerate(self.signed):
            if p.name in still:
                dz[j] = 0.0
        change, grad, on_line = self._change(pt, pz, self._trusted(pz, dz))
        spread = float(grad @ self.cov @ grad)
        prior_spread = float((self.prior_sd * grad) @ (self.prior_sd * grad))
        residual = self.sigma if np.any(dz) else SIGMA_FLOOR
        var = residual**2 + spread + (DISTANCE_SIGMA * float(np.abs(dz).sum())) ** 2 + unknown_var
        peak = max(math.exp(math.log(pt.frac) + change) + self.small_step(pt.values, values), 1e-3)
        unmeasured = self._unmeasured_choice(pz, dz)
        var += self._hidden(pt, pz, dz) ** 2 + unmeasured**2
        chord = self._chord(pt, pz, dz)
        if chord is not None and chord > peak:  # the steep part may have started anywhere before the OOM
            gap = math.log(chord / peak)
            peak = chord
            var += gap**2
        peak = min(max(peak, lower), upper) if upper >= lower else lower
        measured = on_line and spread <= MEASURED_SHARE * prior_spread and not unknown_var and not unmeasured
        return MemoryPrediction(peak, math.sqrt(var), lower, upper, pt.number, lower_from, measured=measured)

    def _from_bound(
        self, values: Mapping[str, Any], z: np.ndarray | None, lower: float, lower_from: int | None, upper: float
    ) -> MemoryPrediction:
        """The peak of ``values`` when no run with their ``unknown`` values measured one: from the
        nearest run with those values that ran out of memory, at what it needed (``_oom_bound``),
        moved by the fitted (or prior) effects, with the spread of a bound (``BOUND_SIGMA``). A
        trainer that prints no memory, on a node whose GPUs the tool cannot read, tells the model
        only which runs ran out and what PyTorch's message said they needed. Never refuses a config
        (``measured`` is False); with no such run, the peak is not known."""
        near = None
        if z is not None:
            same = [(pt, pz) for pt, pz in self.bound_anchors if self._same_unknown(pt, values)]
            near = min(same, key=lambda a: float(np.abs(z - a[1]).sum()), default=None)
        if near is None:
            unknown_lower, unknown_upper = self.unknown_sides(values)
            return MemoryPrediction(
                None,
                math.inf,
                lower,
                upper,
                None,
                lower_from,
                measured=False,
                unknown_lower_frac=unknown_lower,
                unknown_upper_frac=unknown_upper,
            )
        pt, pz = near
        dz = z - pz
        var = (
            SIGMA_FEW_POINTS**2
            + BOUND_SIGMA**2
            + float(dz @ self.cov @ dz)
            + (DISTANCE_SIGMA * float(np.abs(dz).sum())) ** 2
        )
        peak = math.exp(math.log(pt.frac) + float(dz @ self.along(dz)))
        peak = min(max(peak, lower), upper) if upper >= lower else lower
        return MemoryPrediction(peak, math.sqrt(var), lower, upper, pt.number, lower_from, measured=False)

    def along(self, dz: np.ndarray) -> np.ndarray:
        """The effects a move ``dz`` takes: raised by the OOMs on the axes it increases memory
        along, the finished runs' own (``beta_fit``) on those it lowers memory along (module
        docstring)."""
        return np.where(dz * self.prior_beta > 0, self.beta, self.beta_fit)

    def _trusted(self, pz: np.ndarray, dz: np.ndarray) -> np.ndarray:
        """``dz`` with a decrease past the smallest value measured along its axis stopped there,
        when the move increases another axis: of the runs' highest peaks, no run says that the
        part saved past it sets the peak (the module docstring; ``_hidden`` gives the spread). A
        phase's own fit measures that phase."""
        if self.by_effect or not np.any(dz > 0) or not self.anchors:
            return dz
        out = dz.copy()
        for j in self.affine:
            if dz[j] < 0.0:
                out[j] = max(dz[j], min(qz[j] for _, qz in self.anchors) - pz[j])
        return out

    def _hidden(self, pt: _Point, pz: np.ndarray, dz: np.ndarray) -> float:
        """Extra spread of log peak for a move past the largest value measured along a
        memory-increasing numeric axis that the runs' highest peaks measured as flat, and for a
        move that pays for an increase with a decrease past the smallest value measured along
        another such axis (module docstring: a phase hidden under another's peak). Only for a fit
        of the runs' highest peaks; a phase's own fit measures that phase."""
        if self.by_effect or not np.any(dz > 0):
            return 0.0
        extra = 0.0
        for j in self.affine:
            if dz[j] == 0.0:
                continue
            measured = [qz[j] for _, qz in self.anchors]
            if dz[j] < 0.0:
                past = min(measured, default=pz[j]) - (pz[j] + dz[j])
            elif self._elasticity(pt, pz, j) < FLAT_ELASTICITY:
                past = pz[j] + dz[j] - max(measured, default=pz[j])
            else:
                continue
            extra += HIDDEN_SHARE * max(past, 0.0) * math.log(2)
        return extra

    @cached_property
    def held_positions(self) -> dict[int, frozenset[int]]:
        """Per axis of positions (``positional``), the choices measured runs held, by position."""
        return {j: frozenset(int(qz[j]) for _, qz in self.anchors) for j in self.positional}

    def _between(self, values: Mapping[str, Any], still: frozenset[str]) -> tuple[float, float, int | None] | None:
        """(peak, spread of log peak, anchor) of a config holding, on an axis of positions, a choice
        no measured run held between two that runs did (the module docstring); None when none does."""
        for j in self.positional:
            p = self.signed[j]
            here = p.choices.index(values[p.name]) if values.get(p.name) in p.choices else None
            measured = self.held_positions[j]
            below = [m for m in measured if here is not None and m < here]
            above = [m for m in measured if here is not None and m > here]
            if here in measured or not below or not above:
                continue
            low = self.predict({**values, p.name: p.choices[max(below)]}, still)
            high = self.predict({**values, p.name: p.choices[min(above)]}, still)
            if low.peak_frac is None or high.peak_frac is None:
                continue
            a, b = math.log(low.peak_frac), math.log(high.peak_frac)
            spread = math.sqrt((a - b) ** 2 / 12 + (low.sigma_log**2 + high.sigma_log**2) / 2)
            return math.exp((a + b) / 2), spread, low.anchor
        return None

    def _unmeasured_choice(self, pz: np.ndarray, dz: np.ndarray) -> float:
        """Extra spread of log peak for a move past the last measured choice of an axis of positions
        (the module docstring)."""
        extra = 0.0
        for j in self.positional:
            if dz[j] == 0.0:
                continue
            target = pz[j] + dz[j]
            distance = min((abs(target - m) for m in self.held_positions[j]), default=0.0)
            extra += abs(float(self.beta[j])) * distance
        return extra

    def _elasticity(self, pt: _Point, pz: np.ndarray, j: int) -> float:
        """Relative change of the peak per relative change of axis ``j``'s value at the anchor:
        along the measured line through it, else from the fitted slope."""
        line = self._line(pt, pz, j)
        if line is None:
            return float(self.beta[j]) / math.log(2)
        static, slope = line
        base = static + slope * 2.0 ** pz[j]
        return slope * 2.0 ** pz[j] / base if base > 0 else 0.0

    def _chord(self, pt: _Point, pz: np.ndarray, dz: np.ndarray) -> float | None:
        """The peak on the chord from the anchor to a run that ran out (or failed) further along the
        one affine axis moved, when there is such a run equal to the anchor elsewhere.

        The run's highest peak is the highest of its phases', each affine in the value: flat while
        another phase sets it, then steep. Two finished runs on the flat part predict the flat line
        on; an OOM further along says the steep part starts somewhere before it. The chord is the
        least the steep part can be (the OOM's bound is a lower bound; its run needed more): the
        prediction is the chord, uncertain by the whole gap to the line (``_predict``)."""
        moved = [j for j in self.affine if dz[j] != 0.0]
        if len(moved) != 1 or np.count_nonzero(dz) != 1 or dz[moved[0]] <= 0:
            return None
        j = moved[0]
        others = [k for k in range(len(pz)) if k != j]
        v_a, v_t = 2.0 ** pz[j], 2.0 ** (pz[j] + dz[j])
        best = None
        for bound, cz, log_bound in self.censored:
            v_c = 2.0 ** cz[j]
            if v_c <= v_t or not np.array_equal(cz[others], pz[others]) or not self._same_unknown(bound, pt.values):
                continue
            at = pt.frac + (v_t - v_a) * (math.exp(log_bound) - pt.frac) / (v_c - v_a)
            best = at if best is None else max(best, at)
        return best

    def _change(self, pt: _Point, pz: np.ndarray, dz: np.ndarray) -> tuple[float, np.ndarray, bool]:
        """Change of log peak from the anchor, its gradient in ``beta`` (for the spread), and whether
        every numeric axis moved was measured through the anchor.

        Along a numeric memory-increasing axis memory is taken as affine in the value (a static part
        plus a part proportional to a batch size or length), as on a real GPU, where a log-linear fit
        under-predicts growth. The line is fitted on the measured configs that differ from the anchor
        in that axis alone (the slope depends on the other values: checkpointing shrinks it); without
        such configs the fitted elasticity ``e = beta / ln 2`` gives it (a factor ``r`` on the value
        multiplies the peak by ``1 - e + e r``), and the change does not count as measured."""
        beta = self.along(dz)
        change = float(dz @ beta)
        grad = dz.copy()
        on_line = True
        for j in self.affine:
            if dz[j] == 0.0:
                continue
            r = 2.0 ** dz[j]
            change -= beta[j] * dz[j]
            line = self._line(pt, pz, j)
            if line is not None:
                static, slope = line
                base = static + slope * 2.0 ** pz[j]
                change += math.log(max(static + slope * 2.0 ** (pz[j] + dz[j]), 1e-3) / base)
                grad[j] = 0.0
                continue
            on_line = False
            e = min(beta[j] / math.log(2), 0.95 if dz[j] < 0 else 2.0)
            factor = max(1.0 - e + e * r, 1e-3)
            change += math.log(factor)
            grad[j] = (r - 1.0) / (math.log(2) * factor)
        return change, grad, on_line

    def _line(self, pt: _Point, pz: np.ndarray, j: int) -> tuple[float, float] | None:
        """(static, slope) of peak against the value of axis ``j`` through the anchor, from the
        measured configs equal to it elsewhere (None without such a config)."""
        others = [k for k in range(len(pz)) if k != j]
        rows = [
            (2.0 ** qz[j], q.frac)
            for q, qz in self.anchors
            if np.array_equal(qz[others], pz[others])
            and all(q.values.get(p.name) == pt.values.get(p.name) for p in self.unknown)
        ]
        values = {v for v, _ in rows}
        if len(values) < 2:
            return None
        v = np.array([v for v, _ in rows])
        f = np.array([f for _, f in rows])
        slope = max(float(np.polyfit(v, f, 1)[0]), 0.0)
        anchor_v = 2.0 ** pz[j]
        return pt.frac - slope * anchor_v, slope

    def varies(self, name: str) -> bool:
        """True when the study has measured ``name``'s effect (its posterior spread is well below the prior's)."""
        for j, p in enumerate(self.signed):
            if p.name == name:
                return bool(self.cov[j, j] <= MEASURED_SHARE * self.prior_sd[j] ** 2)
        return False

    def moves(self, name: str) -> bool | None:
        """Whether ``name`` measurably moves this peak (its fitted slope ``MOVES_Z`` posterior
        deviations from zero); None while the study has not measured it (``varies``)."""
        if not self.varies(name):
            return None
        j = next(j for j, p in enumerate(self.signed) if p.name == name)
        return bool(abs(self.beta[j]) > MOVES_Z * math.sqrt(self.cov[j, j]))

    def verdict(self, values: Mapping[str, Any]) -> MemoryVerdict | None:
        """The admission rule (module docstring): None when the config may be launched."""
        pred = self.predict(values)
        return self.bound_verdict(pred) or self.fit_verdict(pred)

    def bound_verdict(self, pred: MemoryPrediction) -> MemoryVerdict | None:
        """The certain part of the rule: the config needs at least the memory of a run that ran out
        or came within the headroom."""
        if pred.lower_from is not None and pred.lower_frac >= 1.0:
            return MemoryVerdict(
                True, pred.lower_from, f"needs at least the memory of trial {pred.lower_from}, which ran out"
            )
        if pred.lower_from is not None and pred.lower_frac > self.wall_frac:
            return MemoryVerdict(
                False,
                pred.lower_from,
                f"needs at least the memory of trial {pred.lower_from} ({pred.lower_frac:.0%} of the GPU), "
                f"within the {self.space.min_headroom_frac:.0%} headroom",
            )
        return None

    def fit_verdict(self, pred: MemoryPrediction) -> MemoryVerdict | None:
        """The fitted part of the rule: a measured change predicted past the wall with
        ``CONFIDENCE_Z`` standard deviations to spare."""
        if pred.known and pred.measured and pred.upper_frac > self.wall_frac and math.isinf(pred.ran_under_frac):
            low = pred.peak_frac * math.exp(-CONFIDENCE_Z * pred.sigma_log)
            if low > self.wall_frac:
                what = "runs out of memory" if low > 1.0 else "comes within the headroom"
                return MemoryVerdict(
                    low > 1.0,
                    pred.anchor,
                    f"predicted peak {pred.peak_frac:.0%} of the GPU (at least {low:.0%}) from trial {pred.anchor}: {what}",
                )
        return None


@dataclass(frozen=True)
class _PhaseOom:
    number: int
    phase: str
    values: Mapping[str, Any]
    bound: float


class PhaseFence:
    """The OOMs that named their phase, each held against a config on the parameters that move that
    phase's peak only (module docstring)."""

    def __init__(self, space: SearchSpace, records: Iterable[TrialRecord], phases: Mapping[str, PeakFit]) -> None:
        self.space = space
        self.ooms = [
            _PhaseOom(r.number, r.result.verdict.phase, r.values, _oom_bound(r, None))
            for r in records
            if r.outcome is Outcome.LAUNCHED
            and not r.forced
            and r.status is FailureClass.OOM
            and r.result is not None
            and r.result.verdict.phase
        ]
        self.phases = phases
        self._free: dict[str, frozenset[str]] = {}

    def free(self, phase: str) -> frozenset[str]:
        """The signed parameters that do not move ``phase``'s peak: declared for other phases only,
        or measured there as nil."""
        if phase not in self._free:
            fit = self.phases.get(phase)
            self._free[phase] = frozenset(
                p.name
                for p in self.space.parameters
                if p.memory.signed
                and ((p.phases and phase not in p.phases) or (fit is not None and fit.moves(p.name) is False))
            )
        return self._free[phase]

    def fenced(self, values: Mapping[str, Any]) -> tuple[_PhaseOom, frozenset[str]] | None:
        """The first OOM that ``values`` needs at least the memory of in its phase, with the
        parameters set aside for it; None when there is none (or only the plain dominance, which
        ``PeakFit.bounds`` already sees)."""
        for oom in self.ooms:
            free = self.free(oom.phase)
            if not free or all(values.get(n) == oom.values.get(n) for n in free):
                continue
            if all(holds_at_least(p, values, oom.values) for p in self.space.parameters if p.name not in free):
                return oom, free
        return None


class MemoryModel:
    """The study's memory model: a ``PeakFit`` of the runs' highest peaks, and, when the runs
    measured memory per phase and two or more phases set or came near their peak, one ``PeakFit``
    per phase. A config's peak is then predicted as the highest of its phases' (each phase moves with
    its own knobs: a colocated engine's pool in generation, the micro-batch in training), kept
    within the certain bounds of the highest peaks; a config is refused when the highest peaks' bounds
    or any phase's rule refuse it."""

    def __init__(self, space: SearchSpace, records: Iterable[TrialRecord]) -> None:
        records = list(records)
        self.space = space
        self.wall_frac = 1.0 - space.min_headroom_frac
        self.whole = PeakFit(space, observations(records))
        by_phase = phase_observations(records)
        self.phases = (
            {name: PeakFit(space, pts, by_effect=True) for name, pts in sorted(by_phase.items())}
            if len(by_phase) > 1
            else {}
        )
        self.fence = PhaseFence(space, records, self.phases)
        self.odds_shift = study_shift(records, self.wall_frac)
        """The shift of the log-odds to fit that the study's proposals so far call for (``fit_odds``)."""

    def varies(self, name: str) -> bool:
        """True when the study has measured ``name``'s effect (``PeakFit.varies``)."""
        return self.whole.varies(name)

    def predict(self, values: Mapping[str, Any]) -> MemoryPrediction:
        pred = self._predict(values)
        found = self.fence.fenced(values)
        if found is None or found[0].bound <= pred.lower_frac:
            return pred
        return replace(pred, lower_frac=found[0].bound, lower_from=found[0].number)

    def _predict(self, values: Mapping[str, Any]) -> MemoryPrediction:
        whole = self.whole.predict(values)
        if not self.phases:
            return whole
        parts = {name: fit.predict(values) for name, fit in self.phases.items()}
        if not all(p.known for p in parts.values()):
            return whole
        name, top = max(parts.items(), key=lambda kv: kv[1].peak_frac)
        lower = max((whole, *parts.values()), key=lambda p: p.lower_frac)
        upper = min(whole.upper_frac, max(p.upper_frac for p in parts.values()))
        peak = min(max(top.peak_frac, lower.lower_frac), upper) if upper >= lower.lower_frac else lower.lower_frac
        return replace(
            top,
            peak_frac=peak,
            lower_frac=lower.lower_frac,
            lower_from=lower.lower_from,
            upper_frac=upper,
            ran_under_frac=whole.ran_under_frac,
            measured=all(p.measured for p in parts.values()),
            phases=parts,
        )

    @cached_property
    def unmeasured(self) -> frozenset[str]:
        """The parameters of the fit whose effect the study has not measured (``PeakFit.varies``):
        decided once per model, read by ``p_fits`` for every move of a proposal's pool."""
        return frozenset(p.name for p in self.whole.signed if not self.whole.varies(p.name))

    @cached_property
    def all_phases_share(self) -> float:
        """The chance that a parameter the study has not measured moves every phase's peak rather
        than one, learnt from the parameters it has measured in every phase fit: of those that
        moved a phase (``PeakFit.moves``), the share that moved more than one, under an even prior
        (one of each)."""
        moved = [
            sum(moves)
            for p in self.whole.signed
            if None not in (moves := [fit.moves(p.name) for fit in self.phases.values()])
        ]
        several = sum(1 for n in moved if n > 1)
        return (1.0 + several) / (2.0 + sum(1 for n in moved if n > 0))

    def p_below(self, values: Mapping[str, Any], frac: float) -> float:
        """Probability that the predicted peak of ``values`` stays at or below ``frac`` of the GPU."""
        return self.predict(values).p_below(frac)

    def p_fits(self, values: Mapping[str, Any]) -> float:
        """Probability that ``values`` run with at least the headroom free: the model's own odds
        (``p_fits_model``), shifted by what the study's proposals did (``fit_odds``)."""
        return shifted(self.p_fits_model(values), self.odds_shift)

    def knows(self, values: Mapping[str, Any]) -> bool:
        """False when nothing measured predicts the peak of ``values`` (no run's peak near them is
        a share of a known GPU size, no bound holds it, no run finished holding more memory, no run
        holding less but for an ``unknown`` parameter came above the wall): its odds to fit are then even by
        default, a guess to weigh, not a prediction to show."""
        pred = self.predict(values)
        return (
            pred.known
            or bool(pred.phases)
            or not pred.lower_frac <= self.wall_frac < pred.upper_frac
            or pred.unknown_lower_frac > self.wall_frac
            or not math.isinf(pred.ran_under_frac)
        )

    def p_fits_model(self, values: Mapping[str, Any]) -> float:
        """The model's odds that ``values`` run with at least the headroom free. Per phase, a parameter
        the study has not measured (``varies``) may move one phase's peak, not each by its prior
        slope (offload moves the trainer's, not the generation engine's pool): the chance is a
        mixture of "it moves them all" (``all_phases_share``) and, sharing the rest evenly, "it
        moves only phase X", each phase's chance taken as independent of the others'."""
        pred = self.predict(values)
        wall = self.wall_frac
        if not pred.phases or pred.lower_frac > wall or pred.upper_frac <= wall:
            return pred.p_below(wall)
        moved = {name: part.p_below(wall) for name, part in pred.phases.items()}
        if not self.unmeasured:
            return math.prod(moved.values())
        still = {name: self.phases[name].predict(values, self.unmeasured).p_below(wall) for name in moved}
        if still == moved:
            return math.prod(moved.values())
        only = [moved[a] * math.prod(still[b] for b in moved if b != a) for a in moved]
        share = self.all_phases_share
        return share * math.prod(moved.values()) + (1.0 - share) * sum(only) / len(only)

    def verdict(self, values: Mapping[str, Any]) -> MemoryVerdict | None:
        """The admission rule (module docstring): None when the config may be launched."""
        found = self.fence.fenced(values)
        if found is not None:
            oom, free = found
            aside = ", ".join(sorted(n for n in free if values.get(n) != oom.values.get(n)))
            return MemoryVerdict(
                True,
                oom.number,
                f"needs at least the memory trial {oom.number} ran out of in {oom.phase} ({aside}: not used there)",
            )
        if not self.phases:
            return self.whole.verdict(values)
        found = self.whole.bound_verdict(self.whole.predict(values))
        if found is not None:
            return found
        for name, fit in self.phases.items():
            found = fit.verdict(values)
            if found is not None:
                return replace(found, reason=f"{name}: {found.reason}")
        return None


def _group_ids(keys: Sequence[Any]) -> np.ndarray:
    """An integer per row, equal for rows with equal ``keys``, numbered from 0 in order of appearance."""
    ids: dict[Any, int] = {}
    return np.array([ids.setdefault(k, len(ids)) for k in keys], dtype=int)


def _within(a: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """``a`` (rows) less its mean over each group's rows: what differs between groups is left out."""
    out = np.array(a, dtype=float)
    for g in np.unique(groups):
        rows = groups == g
        out[rows] -= out[rows].mean(axis=0)
    return out


def _map_fit(zc: np.ndarray, yc: np.ndarray, prior: np.ndarray, prior_sd: np.ndarray) -> np.ndarray:
    """``beta`` of ``yc ~ zc @ beta``, both centred (``_within``), by least squares (residual scale
    ``FIT_SIGMA``) with a Gaussian prior on ``beta`` and each ``beta_j`` held to the sign of
    ``prior_j`` (coordinate descent)."""
    beta = prior.copy()
    resid = yc - zc @ beta
    inv_var = 1.0 / prior_sd**2
    norms = (zc**2).sum(axis=0) / FIT_SIGMA**2 + inv_var
    for _ in range(500):
        change = 0.0
        for j in range(len(beta)):
            old = beta[j]
            rho = float(zc[:, j] @ resid) / FIT_SIGMA**2 + (norms[j] - inv_var[j]) * old + inv_var[j] * prior[j]
            new = rho / norms[j]
            new = max(new, 0.0) if prior[j] > 0 else min(new, 0.0)
            if new != old:
                resid -= zc[:, j] * (new - old)
                beta[j] = new
                change = max(change, abs(new - old))
        if change < 1e-10:
            break
    return beta


def memory_verdict(
    space: SearchSpace, values: Mapping[str, Any], history: Sequence[TrialRecord]
) -> MemoryVerdict | None:
    """The admission gate's memory rule for one config, from the study's records."""
    return MemoryModel(space, history).verdict(values)
