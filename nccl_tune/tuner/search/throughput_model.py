"""What the study has learnt about throughput: an additive Gaussian-process model of log
throughput over the parameters, fitted to every measured trial, and the measurement noise.

The model is ``log(throughput) = m(x) + sum_p g_p(x_p) + h(x)``:

- ``m`` is the prior: a change that uses more memory (a larger micro-batch, no checkpointing, no
  offload, a lower ZeRO stage; any non-semantic parameter declared ``memory: increasing`` or
  ``decreasing``) is expected to be slightly faster, by ``PRIOR_MEMORY_GAIN`` per step, since that is
  what memory-saving features trade away; and an NCCL value that by NCCL's design takes the fast
  path away from a bandwidth-bound collective (``node.nccl_narrowing``: the LL protocol alone,
  peer-to-peer off, small buffers) is expected slower by ``PRIOR_NARROWING``, unless the NCCL
  sweep timed it. It only orders the first moves; data overrides it.
- ``s * c(x)`` is what the NCCL sweep (``tuner.records.nccl_sweep``) measured: ``c(x)``, the log speed-up of
  the collectives with the config's NCCL values over the baseline's (summed over its variables),
  and ``s``, the share of a step that follows the collectives: fitted to the study's trials by
  type-II maximum likelihood on a grid (``SHARE_GRID``), jointly with the environment variables'
  common scale, under a Gaussian hyperprior (``COLLECTIVE_SHARE``, ``COLLECTIVE_SHARE_SD``). Untried,
  values whose collectives ran faster are expected faster; a job whose step did not follow the
  collectives of the values it tried (compute hides them) learns ``s`` near 0, and the rest of
  the sweep then promises little.
- ``g_p`` is the effect of parameter ``p``: independent per value for unordered choices, smooth
  in the choice order (with a linear trend, so that a run of gains extrapolates) for ordered ones.
  Its scale ``tau_p`` is fitted to the study's data by type-II maximum likelihood, shrunk towards
  a prior (``PRIOR_TAU``: larger for values that trade memory for speed), and for environment
  variables towards their common fitted scale. A parameter whose changes measured within noise
  gets a small scale, so its untried values promise little: the study spends its trials where
  the measured spread is.
- ``h`` is a small interaction term that correlates configs by how many values they share.

Observations are weighted by their noise: the per-step spread measured within trials (pooled
over the study) divided by the measured steps, plus a run-to-run spread (a floor, raised by type-II
maximum likelihood when the runs scatter more than their steps do).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from nccl_tune.failure import FailureClass
from nccl_tune.node.nccl_narrowing import narrowing
from nccl_tune.search_spaces.space import UNSET, Parameter, ParamKind, SearchSpace, Target
from nccl_tune.tuner.records.study_records import FINISHED, Outcome, TrialRecord
from nccl_tune.tuner.search.memory_model import failure_wall_frac, memory_explains

PRIOR_MEMORY_GAIN = 0.08
"""Prior log-throughput gain per step towards more memory (see the module docstring)."""
PRIOR_NARROWING = 0.05
"""Prior log-throughput loss of an NCCL value that takes the fast path away from a bandwidth-bound
collective (``node.nccl_narrowing``): half an environment variable's prior scale, so such values are
tried after the ones that may be faster, and a run that measures one faster overrides it."""
COLLECTIVE_SHARE = 0.25
COLLECTIVE_SHARE_SD = 0.5
"""Hyperprior mean and spread of the share of a step's log time that follows the log time of its
collectives (as the NCCL sweep times them). Jobs range from none (compute hides the collectives) to
most of a step (a job that waits on its all-reduce), so the hyperprior is weak: it holds the share
at a quarter while no trial has changed the collectives, and a few trials that did decide it."""
SHARE_GRID = (0.0, 0.125, 0.25, 0.5, 0.75)
"""Shares tried by type-II ML."""
PRIOR_TAU = {"memory": 0.30, Target.OVERRIDE: 0.15, Target.ENV: 0.10}
"""Prior effect scale (log throughput) of a parameter's untried values: a parameter that trades
memory for speed (declared ``memory: increasing/decreasing``: micro-batches, checkpointing,
offload) often moves a step by tens of percent, other command-line values by less, and NCCL
variables move a compute-bound job by a few percent."""
SCALE_FACTORS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0)
"""Factors of the prior (for a group) or of the group's scale (for a parameter) tried by type-II ML."""
GROUP_HYPER_SD = 1.0
PARAM_HYPER_SD = 1.0
"""Standard deviations of the log-normal hyperpriors on those factors."""
TAU_FLOOR = 0.004
STEP_NOISE_PRIOR = 0.03
"""Per-step spread of log step time assumed before the study has measured one."""
RUN_NOISE = 0.015
"""Run-to-run spread of log throughput not visible within one run (placement, thermals), at least."""
EXTRA_RUN_SD = (0.0, 0.02, 0.04, 0.08)
"""Further run-to-run spread tried by type-II ML (the study measures it only across runs)."""
LENGTH_SCALE = 1.0
"""Correlation length of an ordered parameter's effect, in choice positions."""
TREND_WEIGHT = 0.25
"""Variance of an ordered parameter's linear trend per choice position (squared), relative to its
scale: a run of gains along the axis extrapolates to the next position."""
WARMUP_EXTRA_VAR = 0.05**2
"""Extra variance of a throughput estimated from warm-up steps only (a trial stopped before measuring)."""
INTERACTION_RHO = 0.5
INTERACTION_SD = 0.05
"""Scale of the interaction term: configs that share more values resemble each other beyond the
additive effects (an effect measured in one context, say before a bottleneck was removed, transfers
only partly to another)."""


@dataclass(frozen=True)
class Observation:
    number: int
    values: Mapping[str, Any]
    log_tput: float
    var: float


def step_noise(records: Iterable[TrialRecord]) -> float:
    """Pooled standard deviation of log step time across the measured steps of each finished
    trial (stragglers left out, as its throughput leaves them); ``STEP_NOISE_PRIOR`` before a
    finished trial has measured two steps."""
    measured = pooled_step_spread(records)
    return STEP_NOISE_PRIOR if measured is None else measured[0]


def pooled_step_spread(records: Iterable[TrialRecord]) -> tuple[float, int] | None:
    """``step_noise`` as measured, with its degrees of freedom: None until a finished trial has
    measured two steps."""
    ss, dof = 0.0, 0
    for r in records:
        if r.result is None or r.status is not FailureClass.OK or r.forced:
            continue
        steps = [s for s in r.result.kept_step_times_s if s > 0]
        if len(steps) < 2:
            continue
        logs = [math.log(s) for s in steps]
        mean = sum(logs) / len(logs)
        ss += sum((x - mean) ** 2 for x in logs)
        dof += len(logs) - 1
    if dof == 0:
        return None
    return max(math.sqrt(ss / dof), 0.002), dof


def warmup_ratio(records: Sequence[TrialRecord]) -> float:
    """Mean log ratio of a measured step to the warm-up steps, over the study's finished trials."""
    ratios = []
    for r in records:
        res = r.result
        if res is None or r.status is not FailureClass.OK or not res.warmup_steps or res.mean_step_s is None:
            continue
        warm = res.step_times_s[: res.warmup_steps]
        if min(res.step_times_s) > 0:  # a step no clock timed reads 0: no ratio to take
            ratios.append(math.log(res.mean_step_s / (sum(warm) / len(warm))))
    return sum(ratios) / len(ratios) if ratios else 0.0


def speed_measured(r: TrialRecord, wall_frac: float | None) -> bool:
    """True when ``r`` ran steps that measure its config's speed: it finished or the tuner stopped
    it, or it failed after some steps for a reason of its own (a hang at the fifth step measured the
    four before it as any run would: a value that hangs now and then is then known to be slow or
    fast before it is tried again). Not an OOM, nor a failure memory explains
    (``memory_explains``: its steps may have slowed as the allocator thrashed), nor an interrupted run."""
    if r.outcome is not Outcome.LAUNCHED or r.result is None or r.status is None:
        return False
    if r.status in FINISHED:
        return True
    if r.status in (FailureClass.INTERRUPTED, FailureClass.OOM, FailureClass.HOST_OOM):
        return False
    return wall_frac is None or not memory_explains(r, wall_frac)


def run_variance(noise: float, steps: int) -> float:
    """Variance of one run's log throughput from ``steps`` measured steps of per-step spread
    ``noise``, with the run-to-run floor (``RUN_NOISE``)."""
    return noise**2 / steps + RUN_NOISE**2


def observations(records: Sequence[TrialRecord], noise: float, wall_frac: float | None) -> list[Observation]:
    """Every launched trial whose steps measured its speed (``speed_measured``): from its measured
    steps, else (stopped or failed in its warm-up) estimated from the warm-up steps, scaled by the
    study's warm-up ratio. ``wall_frac``: the peak above which memory explains a failure
    (``failure_wall_frac``)."""
    out = []
    ratio = warmup_ratio(records)
    for r in records:
        if not speed_measured(r, wall_frac):
            continue
        res = r.result
        tput, n = res.throughput_per_s, len(res.kept_step_times_s)
        if tput and tput > 0 and n:
            out.append(Observation(r.number, r.values, math.log(tput), run_variance(noise, n)))
        elif res.step_times_s and res.samples_per_step and min(res.step_times_s) > 0:  # 0: a step untimed
            warm = sum(res.step_times_s) / len(res.step_times_s)
            log_tput = math.log(res.samples_per_step / warm) - ratio
            out.append(Observation(r.number, r.values, log_tput, noise**2 + RUN_NOISE**2 + WARMUP_EXTRA_VAR))
    return out


def _group(p: Parameter) -> Any:
    """The group whose measured spread a parameter's scale is shrunk towards (keys of ``PRIOR_TAU``)."""
    if p.target is Target.ENV:
        return Target.ENV
    return "memory" if p.memory.signed else Target.OVERRIDE


def ordered(p: Parameter) -> bool:
    """True when the choice order means something (numbers, booleans, declared memory order)."""
    if p.kind in (ParamKind.POW2, ParamKind.INT, ParamKind.BOOL):
        return True
    if p.memory.signed:
        return True
    nums = [c for c in p.choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
    return len(nums) == len(p.choices) and nums == sorted(nums)


def axis(p: Parameter) -> list[int | None]:
    """Each choice's position on the parameter's ordered axis, or None for a choice off it: all
    choices of an ordered parameter are on it; an environment variable whose values are ascending
    numbers besides ``unset`` (``NCCL_BUFFSIZE``, ``NCCL_MIN_NCHANNELS``) has those on it and
    ``unset`` off it; an unordered parameter has none."""
    if ordered(p):
        return list(range(len(p.choices)))
    nums = [c for c in p.choices if c != UNSET]
    numeric = [c for c in nums if isinstance(c, (int, float)) and not isinstance(c, bool)]
    if len(nums) >= 2 and len(numeric) == len(nums) and numeric == sorted(numeric):
        return [None if c == UNSET else numeric.index(c) for c in p.choices]
    return [None] * len(p.choices)


def _level_kernel(p: Parameter, base_index: int) -> np.ndarray:
    """Correlation of a parameter's effect between its choices: smooth along its axis with a linear
    trend (anchored at the baseline's choice, or at the axis's start), independent off it."""
    pos = axis(p)
    n = len(p.choices)
    out = np.eye(n)
    on = [i for i in range(n) if pos[i] is not None]
    if not on:
        return out
    anchor = pos[base_index] if pos[base_index] is not None else 0
    for i in on:
        for j in on:
            se = math.exp(-((pos[i] - pos[j]) ** 2) / (2 * LENGTH_SCALE**2))
            out[i, j] = se + TREND_WEIGHT * (pos[i] - anchor) * (pos[j] - anchor)
    return out


class ThroughputModel:
    """The fitted model (module docstring); ``predict`` gives mean and standard deviation of log throughput."""

    def __init__(
        self,
        space: SearchSpace,
        free: Sequence[Parameter],
        records: Sequence[TrialRecord],
        baseline: Mapping[str, Any],
        collective: Mapping[str, Mapping[Any, float]] | None = None,
    ) -> None:
        """``collective``: the NCCL sweep's log speed-ups of the collectives per variable and value
        (``nccl_sweep.Sweep.speeds``; none: no term ``s * c(x)``)."""
        self.space = space
        self.free = [p for p in free if len(p.choices) > 1]
        self.baseline = baseline
        records = [r for r in records if not r.forced]  # its longest batches: no normal run's speed
        self.noise = step_noise(records)
        self.obs = observations(records, self.noise, failure_wall_frac(space))
        self.base_narrowed = {
            p.name: bool(narrowing(p.name, baseline[p.name]))
            for p in self.free
            if p.target is Target.ENV and p.name in baseline
        }
        """Per environment variable the baseline sets, whether its value removes NCCL's fast path."""
        self.collective = {name: dict(levels) for name, levels in (collective or {}).items()}
        self.speedup = [np.array([self.collective.get(p.name, {}).get(c, 0.0) for c in p.choices]) for p in self.free]
        """Per free parameter, the sweep's log speed-up of each choice (0: not timed, or as fast)."""
        self.base_index = [self._index(p, baseline.get(p.name, p.choices[0])) for p in self.free]
        self.kernels = [_level_kernel(p, b) for p, b in zip(self.free, self.base_index)]
        self.levels_obs = self.encode([o.values for o in self.obs])
        self.share = COLLECTIVE_SHARE if self.collective else 0.0
        """``s``: the share of a step's log time that follows its collectives' (fitted in ``_scales``)."""
        self.c_obs = self.collective_speedup(self.levels_obs)
        self.design_resid = np.array([o.log_tput - self.design_prior(o.values) for o in self.obs])
        self.tau = self._scales()
        self.resid, self.offset = self._residuals(self.share)
        self._fit()

    @classmethod
    def of_study(
        cls,
        space: SearchSpace,
        pinned: Mapping[str, Any],
        records: Sequence[TrialRecord],
        collective: Mapping[str, Mapping[Any, float]] | None = None,
    ) -> ThroughputModel:
        """The study's model: over the parameters the search varies (``SearchSpace.free``), from the
        user's own config with the pins (``SearchSpace.baseline``). The planner and screening both
        read this one, so a trial is screened by the model that proposed it."""
        return cls(space, space.free(pinned), records, space.baseline(pinned), collective)

    # -- encoding ------------------------------------------------------------------------------
    @staticmethod
    def _index(p: Parameter, value: Any) -> int:
        try:
            return p.choices.index(value)
        except ValueError:
            return 0

    def levels(self, values: Mapping[str, Any]) -> np.ndarray:
        return np.array([self._index(p, values.get(p.name, p.choices[0])) for p in self.free], dtype=int)

    def encode(self, configs: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Each config's choice index per free parameter, one row per config."""
        return np.array([self.levels(c) for c in configs], dtype=int).reshape(len(configs), len(self.free))

    def collective_speedup(self, levels: np.ndarray) -> np.ndarray:
        """``c(x)`` of each row of encoded configs."""
        out = np.zeros(len(levels))
        for k, table in enumerate(self.speedup):
            out += table[levels[:, k]]
        return out

    def _residuals(self, share: float) -> tuple[np.ndarray, float]:
        """The observations less the prior with collective share ``share``, and their mean (the offset)."""
        resid = self.design_resid - share * self.c_obs
        return resid, float(resid.mean()) if len(resid) else 0.0

    def prior_mean(self, values: Mapping[str, Any]) -> float:
        """``m(x) + s c(x)`` (the module docstring)."""
        if not self.collective:
            return self.design_prior(values)
        return self.design_prior(values) + self.share * float(self.collective_speedup(self.levels(values)[None, :])[0])

    def design_prior(self, values: Mapping[str, Any]) -> float:
        """``m(x)``: what the values are expected to do by design, before any measurement."""
        total = 0.0
        for p in self.free:
            timed = p.name in values and values[p.name] in self.collective.get(p.name, {})
            if p.name in self.base_narrowed and p.name in values and not timed:
                total += PRIOR_NARROWING * (self.base_narrowed[p.name] - bool(narrowing(p.name, values[p.name])))
            if p.semantic or not p.memory.signed:
                continue
            if p.name in values and p.name in self.baseline:
                total += PRIOR_MEMORY_GAIN * (p.memory_rank(values[p.name]) - p.memory_rank(self.baseline[p.name]))
        return total

    # -- scales from the study's own pairs --------------------------------------------------------
    def _scales(self) -> np.ndarray:
        """Per-parameter effect scales by type-II maximum likelihood on a grid, under log-normal
        hyperpriors: first the environment variables' common scale (a factor of its prior: NCCL
        variables all act on the collectives, so when the job is not communication-bound none of
        them matters much), then each parameter's (a factor of that, or of its own prior for a
        command-line value: checkpointing and offload say nothing about each other). A parameter the
        study never varied keeps its prior; one whose changes measured within noise gets a small
        scale. The data are weighed jointly, so a difference between two configs is not blamed on a
        parameter whose effect is known."""
        groups = [_group(p) for p in self.free]
        tau = np.array([PRIOR_TAU[g] for g in groups], dtype=float)
        self.extra_var = 0.0
        if len(self.obs) < 2:
            return tau
        blocks = [kern[np.ix_(self.levels_obs[:, k], self.levels_obs[:, k])] for k, kern in enumerate(self.kernels)]
        fixed = INTERACTION_SD**2 * self._interaction(self.levels_obs, self.levels_obs) + np.diag(
            [o.var for o in self.obs]
        )
        eye = np.eye(len(self.obs))

        def centred(share: float) -> np.ndarray:
            resid, offset = self._residuals(share)
            return resid - offset

        y = centred(self.share)

        def score(
            t: np.ndarray,
            log_factor: float,
            hyper_sd: float,
            extra: float | None = None,
            target: np.ndarray | None = None,
        ) -> float:
            k = (
                fixed
                + (self.extra_var if extra is None else extra) * eye
                + sum(t[j] ** 2 * blocks[j] for j in range(len(t)))
            )
            try:
                chol = np.linalg.cholesky(k + 1e-9 * np.eye(len(k)))
            except np.linalg.LinAlgError:
                return -math.inf
            alpha = np.linalg.solve(chol, y if target is None else target)
            return float(-0.5 * alpha @ alpha - np.log(np.diag(chol)).sum() - 0.5 * (log_factor / hyper_sd) ** 2)

        self.extra_var = max((sd**2 for sd in EXTRA_RUN_SD), key=lambda v: score(tau, 0.0, 1.0, v))
        mask = np.array([g == Target.ENV for g in groups])
        if mask.any():
            shares = SHARE_GRID if self.collective else (0.0,)

            def joint(share: float, f: float) -> float:
                penalty = 0.5 * ((share - COLLECTIVE_SHARE) / COLLECTIVE_SHARE_SD) ** 2 if self.collective else 0.0
                return score(np.where(mask, tau * f, tau), math.log(f), GROUP_HYPER_SD, target=centred(share)) - penalty

            self.share, best = max(((sh, f) for sh in shares for f in SCALE_FACTORS), key=lambda sf: joint(*sf))
            y = centred(self.share)
            tau[mask] *= best
        group_scale = tau.copy()
        for _ in range(2):
            for j in range(len(tau)):
                options = [group_scale[j] * f for f in SCALE_FACTORS]
                tau[j] = max(
                    options,
                    key=lambda v: score(
                        np.where(np.arange(len(tau)) == j, v, tau), math.log(v / group_scale[j]), PARAM_HYPER_SD
                    ),
                )
        self.extra_var = max((sd**2 for sd in EXTRA_RUN_SD), key=lambda v: score(tau, 0.0, 1.0, v))
        return np.maximum(tau, TAU_FLOOR)

    # -- the Gaussian process ----------------------------------------------------------------------
    def _interaction(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        differ = len(self.free) - (a[:, None, :] == b[None, :, :]).sum(axis=2)
        return INTERACTION_RHO**differ

    def _kernel(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.zeros((len(a), len(b)))
        for k, kern in enumerate(self.kernels):
            out += self.tau[k] ** 2 * kern[np.ix_(a[:, k], b[:, k])]
        return out + INTERACTION_SD**2 * self._interaction(a, b)

    def _fit(self) -> None:
        resid = self.resid
        if not len(self.obs):
            self.alpha = np.zeros(0)
            self.chol = None
            return
        k = self._kernel(self.levels_obs, self.levels_obs) + np.diag([o.var + self.extra_var for o in self.obs])
        self.chol = np.linalg.cholesky(k + 1e-9 * np.eye(len(k)))
        self.alpha = np.linalg.solve(self.chol.T, np.linalg.solve(self.chol, resid - self.offset))

    def predict(self, configs: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of log throughput (the latent value, without noise)."""
        if not configs:
            return np.zeros(0), np.zeros(0)
        lv = self.encode(configs)
        prior = np.array([self.prior_mean(c) for c in configs]) + self.offset
        kss = np.diag(self._kernel(lv, lv))
        if self.chol is None:
            return prior, np.sqrt(kss)
        ks = self._kernel(lv, self.levels_obs)
        mean = prior + ks @ self.alpha
        v = np.linalg.solve(self.chol, ks.T)
        var = np.maximum(kss - (v**2).sum(axis=0), 1e-12)
        return mean, np.sqrt(var)

    def difference_sd(self, configs: Sequence[Mapping[str, Any]], other: Mapping[str, Any]) -> np.ndarray:
        """Standard deviation of the modelled log-throughput difference between each of ``configs``
        and ``other``: small where the two differ in values whose effects the study measured well,
        large where a difference rests on one noisy run."""
        lv = self.encode([*configs, other])
        cov = self._kernel(lv, lv)
        if self.chol is not None:
            v = np.linalg.solve(self.chol, self._kernel(lv, self.levels_obs).T)
            cov = cov - v.T @ v
        var = np.diag(cov)[:-1] + cov[-1, -1] - 2.0 * cov[:-1, -1]
        return np.sqrt(np.maximum(var, 0.0))

    def scale_of(self, name: str) -> float:
        for p, t in zip(self.free, self.tau):
            if p.name == name:
                return float(t)
        return 0.0
