"""Search efficiency of the tuner, measured on the synthetic landscape (the twin's cost model, in process).

The tuner (``nccl_tune.tuner.loop.run_study``) runs whole studies against
``nccl_tune.sim.launcher.ModelLauncher`` (modelled times, ~1 ms per trial), once per seed as
shipped (``RunSettings`` defaults: its sampler, OOM prediction, early stopping, re-runs; row ``tuner``) and
once as random search (no prediction, no early stop, no re-runs). Every launched config is then
judged against the landscape, computed exactly from the same cost model:

- stable: the config satisfies the space's rules; its modelled run (``evaluate``, run seed 0,
  the tuner's warm-up + measured steps) finishes every step without a failure and keeps at least
  ``min_headroom_frac`` of the GPU free; and no failure appears at run seeds 1..CHANCE_SEEDS-1
  either (a chance event, such as a cuMem weight-sync hang, that one seed misses is still unstable);
- throughput: samples per step (train_batch_size x n_samples_per_prompt) / noise-free ``step_s``;
- the best: the stable config of highest throughput. The product of the space has tens of
  millions of configs. The NCCL variables reach the model only through its ``CommModel``
  (bandwidth per collective, transport, SM share, buffer memory, cuMem, a refusal), so NCCL
  settings with equal CommModels form one class, and a class at least as good in each of those
  fields is at least as fast with no more memory for every config. The best is therefore found
  exactly on the full grid of the other parameters times the Pareto-optimal classes; the
  reduction is checked (sampled pairs model the same as their class's representative and no
  better than their dominator; every class is tried on the top configs);
- trials to reach: launched trials (rejected, predicted and duplicate ones are free) up to and
  including the first whose config is stable and within 2% of the best's throughput; budget + 1
  when never reached (censored);
- GPU time on failures: modelled GPU-seconds of the launched trials that failed (second figure:
  failed or stopped early / by the budget) over those of all launched trials, re-runs included.

    python benchmarks/search.py [--seeds 20] [--trials 40] [--json PATH] [--quick] [--set KEY=VALUE]

The landscape is cached in the JSON (under a fingerprint of the space, the pins, the cost model's
source and the definitions) and reused by the next run that writes the same file.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import itertools
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from rich.console import Console
from rich.table import Table

from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import FailureClass
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.search_spaces.space import Parameter, SearchSpace, Target
from nccl_tune.sim import SimConfig, SimConfigError, evaluate, parse_overrides
from nccl_tune.sim.config import read_run_env
from nccl_tune.sim.cost_model import CommModel, comm_model
from nccl_tune.sim.launcher import ModelLauncher, override_tokens
from nccl_tune.trial import TrialSpec
from nccl_tune.tuner.display import describe
from nccl_tune.tuner.loop import run_study
from nccl_tune.tuner.pins import Pins, apply_pins, parse_pin
from nccl_tune.tuner.study_records import Outcome, TrialRecord
from nccl_tune.tuner.settings import DEFAULT_SAMPLER, RunSettings
from nccl_tune.tuner.stability import values_key
from nccl_tune.tuner.trial_builder import build_trial_spec, stop_for

REPO = Path(__file__).resolve().parents[1]
TWIN = REPO / "examples" / "run_skyrl_sql_sim.sh"
SPACE = "skyrl-text2sql"
WITHIN_FRAC = 0.02
"""A launched config reaches the best when it is stable and within this fraction of the best's throughput."""
CHANCE_SEEDS = 8
"""Run seeds a config must pass without a failure to be called stable."""
TARGET_MEDIAN_TRIALS = 12
TARGET_RANDOM_RATIO = 3.0
TARGET_FAILED_GPU_FRAC = 0.15
CHECKPOINTS = (5, 10, 15, 20, 30, 40, 60, 80)
"""Launched-trial counts at which the best throughput found so far is reported."""
BASE_ENV = {"HOME": "/home/nccl-tune-bench"}
"""The environment trials start from: fixed, so a shell's NCCL_* variables cannot leak in."""
LANDSCAPE_VERSION = 2
"""Changes when the landscape's definitions change (invalidates cached landscapes)."""
QUICK_PINS = (("trainer.train_batch_size", "256"), ("trainer.max_prompt_length", "4096"))
"""``--quick`` searches this smaller subspace (micro-batches, offload and NCCL variables still free)."""
TRANSPORT_RANK = {"p2p": 2, "shm": 1, "socket": 0}
"""NCCL transports from fastest to slowest, as the cost model rates them."""
SHIPPED = DEFAULT_SAMPLER
"""The sampler the tuner ships with (``RunSettings``' default)."""
SAMPLERS = ("tuner", "random")
"""The tuner as shipped, and the random-search yardstick."""

DEFINITIONS = {
    "stable": (
        "satisfies the space's rules; the modelled run (evaluate, run seed 0, warm-up + measured steps of the tuner) "
        "finishes every step with no failure and peak memory <= (1 - min_headroom_frac) of the GPU; "
        f"and no failure at run seeds 1..{CHANCE_SEEDS - 1} either"
    ),
    "throughput": "samples per step (train_batch_size x n_samples_per_prompt) / noise-free step_s",
    "best": (
        "the stable config of highest throughput: full grid of the command-line parameters x the Pareto-optimal "
        "classes of NCCL settings (equal CommModel = one class; a class no worse in every bandwidth, transport, "
        "SM share, buffer memory and cuMem dominates); the reduction is checked on samples and on the top configs"
    ),
    "trials_to_reach": (
        f"launched trials up to and including the first whose config is stable and within {WITHIN_FRAC:.0%} of the "
        "best's throughput; budget + 1 when never reached (censored)"
    ),
    "failed_gpu_frac": (
        "modelled GPU-seconds of launched trials whose status is a failure (not ok, not budget) / modelled "
        "GPU-seconds of all launched trials (re-runs included); per study, then median and max over seeds"
    ),
    "failed_or_stopped_gpu_frac": "as failed_gpu_frac, with trials stopped early or by the budget counted as failed",
    "best_frac_after": "throughput of the best stable config launched within the first N trials / the best's; median over seeds",
    "winner_frac": "the tuner's winner's noise-free throughput / the best's (0 when the winner is not stable)",
    "target_region": (
        "rule-satisfying configs that are stable and within the target, counted exactly; p = their share, the chance "
        "that a config random search launches reaches the target; its median trials to reach is then "
        "1 (the baseline) + ceil(ln 0.5 / ln(1 - p))"
    ),
    "tuner": "the tuner as shipped: RunSettings defaults (sampler, OOM prediction, early stop against the incumbent, confirmation re-runs)",
    "random": "sampler=random, predict_oom=False, early_stop_ratio=0, confirm=0",
}


# ---------------------------------------------------------------------------------------------
# One config, modelled
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Modelled:
    """What the landscape knows about one config: its noise-free modelled run."""

    throughput_samples_per_s: float
    """0.0 when the run does not finish its steps."""
    step_s: float | None
    peak_mem_gib: float | None
    failure: str | None
    """None when stable; else why not (a failure class, ``rules``, ``config_error``, ``too_few_steps``,
    ``near_wall``; ``(run seed N)`` when only another run seed fails)."""

    @property
    def stable(self) -> bool:
        return self.failure is None


class ConfigModel:
    """Models a parameter assignment exactly as a trial of it would run: the tuner's ``TrialSpec``,
    then the model launcher's overrides and environment; caches the verdicts."""

    def __init__(self, space: SearchSpace, pins: Pins, settings: RunSettings) -> None:
        self.space = space
        self.pins = pins
        self.settings = settings
        self.steps = stop_for(space, settings).total_steps
        self.launcher = ModelLauncher(env=BASE_ENV)
        self.cap_frac = 1.0 - space.min_headroom_frac
        self.runs = 0
        self._verdicts: dict[str, Modelled] = {}

    def _spec(self, values: Mapping[str, Any]) -> TrialSpec:
        return build_trial_spec(
            self.space, self.settings, study="landscape", number=0, values=values,
            context_pins=self.pins.context,
        )

    def parse(self, values: Mapping[str, Any]) -> tuple[SimConfig | None, str | None]:
        """(config, refusal): the twin's view of a trial with ``values``."""
        spec = self._spec(values)
        try:
            tokens = self.launcher.base_overrides + override_tokens(spec.argv)
            return parse_overrides(tokens, self.launcher.trial_env(spec)), None
        except SimConfigError as exc:
            return None, f"config_error ({exc})"

    def with_env(self, cfg: SimConfig, env_values: Mapping[str, Any]) -> SimConfig:
        """``cfg`` with the env parameters set to ``env_values`` (the trial's environment does not
        depend on the other parameters)."""
        spec = self._spec({**self.space.defaults(), **self.pins.params, **env_values})
        return dataclasses.replace(cfg, env=read_run_env(self.launcher.trial_env(spec), cfg.n_gpus))

    def run(self, cfg: SimConfig, seed: int) -> Modelled:
        """One modelled run of ``cfg`` at run seed ``seed``."""
        self.runs += 1
        out = evaluate(cfg, seed=seed, steps=self.steps)
        if out.failure is not None:
            failure: str | None = out.failure.failure_class.value
        elif len(out.steps) < self.steps:
            failure = "too_few_steps"
        elif out.peak_mem_gib > self.cap_frac * out.gpu_capacity_gib:
            failure = "near_wall"
        else:
            failure = None
        finished = failure in (None, "near_wall")
        tput = out.samples_per_step / out.step_s if finished and out.step_s > 0 else 0.0
        return Modelled(tput, out.step_s, out.peak_mem_gib, failure)

    def confirm(self, cfg: SimConfig, first: Modelled | None = None) -> Modelled:
        """The run at seed 0 (``first`` when given), unless another chance seed fails."""
        first = first if first is not None else self.run(cfg, 0)
        if not first.stable:
            return first
        for seed in range(1, CHANCE_SEEDS):
            other = self.run(cfg, seed)
            if not other.stable:
                return dataclasses.replace(first, throughput_samples_per_s=0.0, failure=f"{other.failure} (run seed {seed})")
        return first

    def judge(self, values: Mapping[str, Any]) -> Modelled:
        """The landscape's verdict on ``values`` (cached)."""
        key = values_key(values)
        if key not in self._verdicts:
            if self.space.violations(values):
                self._verdicts[key] = Modelled(0.0, None, None, "rules")
            else:
                cfg, refused = self.parse(values)
                self._verdicts[key] = Modelled(0.0, None, None, refused) if cfg is None else self.confirm(cfg)
        return self._verdicts[key]


# ---------------------------------------------------------------------------------------------
# NCCL settings, grouped by what they do to the model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommClass:
    """The ``CommModel`` fields the cost model reads: NCCL settings equal in these model the same."""

    busbw: tuple[tuple[str, float], ...]
    transport: str
    sm_steal: float
    buffers_gib: float
    cumem: bool
    refused: bool

    @classmethod
    def of(cls, comm: CommModel) -> "CommClass":
        return cls(tuple(sorted(comm.busbw.items())), comm.transport, comm.sm_steal, round(comm.buffers_gib, 12),
                   bool(comm.cumem), comm.failure is not None)

    def dominates(self, other: "CommClass") -> bool:
        """At least as fast with no more memory and no more cuMem for every config."""
        if self.refused or other.refused:
            return not self.refused
        return (
            all(a[1] >= b[1] for a, b in zip(self.busbw, other.busbw))
            and TRANSPORT_RANK[self.transport] >= TRANSPORT_RANK[other.transport]
            and self.sm_steal <= other.sm_steal
            and self.buffers_gib <= other.buffers_gib
            and self.cumem <= other.cumem
        )


@dataclass(frozen=True)
class EnvClasses:
    """Every combination of the env parameters, grouped into classes, and the Pareto front."""

    members: Mapping[CommClass, tuple[Mapping[str, Any], ...]]
    pareto: tuple[CommClass, ...]

    def representative(self, cls: CommClass) -> Mapping[str, Any]:
        return self.members[cls][0]

    def class_of(self, env_values: Mapping[str, Any]) -> CommClass:
        key = values_key(env_values)
        return next(c for c, group in self.members.items() if any(values_key(v) == key for v in group))

    def dominator(self, cls: CommClass) -> CommClass | None:
        """A Pareto class at least as good as ``cls`` (None for a refused class)."""
        if cls.refused:
            return None
        return next(p for p in self.pareto if p == cls or p.dominates(cls))


def params_of(space: SearchSpace, env: bool) -> list[Parameter]:
    return [p for p in space.parameters if (p.target is Target.ENV) == env]


def choices(pins: Pins, params: list[Parameter]) -> list[tuple[Any, ...]]:
    """Each parameter's values (a pinned one has only its pin)."""
    return [(pins.params[p.name],) if p.name in pins.params else p.choices for p in params]


def group_env(model: ConfigModel, base: SimConfig) -> EnvClasses:
    """Group the env parameters' combinations by their CommClass; keep the Pareto front."""
    eps = params_of(model.space, env=True)
    for p in eps:
        if not p.name.startswith("NCCL_"):
            raise NcclTuneError(
                f"space {model.space.name}: env parameter {p.name} is not an NCCL variable; the landscape's "
                "reduction covers NCCL variables only"
            )
    members: dict[CommClass, list[Mapping[str, Any]]] = {}
    for combo in itertools.product(*choices(model.pins, eps)):
        env_values = dict(zip([p.name for p in eps], combo))
        nccl = model.with_env(base, env_values).env.nccl
        members.setdefault(CommClass.of(comm_model(nccl, base.n_gpus)), []).append(env_values)
    usable = [c for c in members if not c.refused]
    pareto = tuple(b for b in usable if not any(a != b and a.dominates(b) for a in usable))
    return EnvClasses({c: tuple(v) for c, v in members.items()}, pareto)


# ---------------------------------------------------------------------------------------------
# The landscape
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Landscape:
    """The best stable config of the (pinned) space, and how it was found and checked."""

    fingerprint: str
    best_values: Mapping[str, Any]
    best: Modelled
    baseline_values: Mapping[str, Any]
    baseline: Modelled
    top: tuple[tuple[Mapping[str, Any], Modelled], ...]
    counts: Mapping[str, int]
    reduction_check: Mapping[str, Any]
    target_region: Mapping[str, Any]
    compute_s: float

    @property
    def target_throughput(self) -> float:
        return self.best.throughput_samples_per_s * (1.0 - WITHIN_FRAC)

    def reached(self, m: Modelled) -> bool:
        return m.stable and m.throughput_samples_per_s >= self.target_throughput

    def frac(self, m: Modelled) -> float:
        return m.throughput_samples_per_s / self.best.throughput_samples_per_s

    def to_json(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "best": {"values": dict(self.best_values), **dataclasses.asdict(self.best)},
            "target_throughput_samples_per_s": self.target_throughput,
            "baseline": {"values": dict(self.baseline_values), **dataclasses.asdict(self.baseline)},
            "top": [{"values": dict(v), **dataclasses.asdict(m)} for v, m in self.top],
            "counts": dict(self.counts),
            "reduction_check": dict(self.reduction_check),
            "target_region": dict(self.target_region),
            "compute_s": round(self.compute_s, 2),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Landscape":
        def modelled(d: Mapping[str, Any]) -> Modelled:
            return Modelled(d["throughput_samples_per_s"], d["step_s"], d["peak_mem_gib"], d["failure"])

        return cls(
            fingerprint=data["fingerprint"],
            best_values=data["best"]["values"],
            best=modelled(data["best"]),
            baseline_values=data["baseline"]["values"],
            baseline=modelled(data["baseline"]),
            top=tuple((t["values"], modelled(t)) for t in data["top"]),
            counts=data["counts"],
            reduction_check=data["reduction_check"],
            target_region=data["target_region"],
            compute_s=data["compute_s"],
        )


def fingerprint(space: SearchSpace, pins: Pins, steps: int) -> str:
    """Changes when anything that shapes the landscape changes."""
    h = hashlib.sha256()
    h.update(json.dumps([LANDSCAPE_VERSION, space.text, sorted(pins.params.items()), sorted(pins.context.items()),
                         steps, CHANCE_SEEDS, WITHIN_FRAC, BASE_ENV], default=str).encode())
    for path in sorted((REPO / "nccl_tune" / "sim").glob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def compute_landscape(model: ConfigModel, console: Console) -> Landscape:
    """The exact best stable config (see the module's docstring), with its checks."""
    t0 = time.monotonic()
    space, pins = model.space, model.pins
    ops = params_of(space, env=False)
    baseline_values = {**space.defaults(), **pins.params}
    base, refused = model.parse(baseline_values)
    if base is None:
        raise NcclTuneError(f"space {space.name}: the twin refuses the baseline config: {refused}")
    classes = group_env(model, base)
    unset_env = classes.representative(classes.pareto[0])

    # Stage 1: every rule-satisfying assignment of the command-line parameters x every Pareto class, seed 0.
    grid: list[tuple[float, dict[str, Any], SimConfig]] = []
    admissible = 0
    for combo in itertools.product(*choices(pins, ops)):
        over = dict(zip([p.name for p in ops], combo))
        if space.violations({**over, **unset_env}):
            continue
        admissible += 1
        cfg, _ = model.parse({**over, **unset_env})
        if cfg is None:
            continue
        if cfg.n_gpus != base.n_gpus:
            raise NcclTuneError(f"space {space.name}: the GPU count changes with {over}; the NCCL classes assume it does not")
        for cls in classes.pareto:
            run_cfg = model.with_env(cfg, classes.representative(cls))
            first = model.run(run_cfg, 0)
            if first.stable:
                grid.append((first.throughput_samples_per_s, {**over, **classes.representative(cls)}, run_cfg))
    console.print(
        f"landscape: {admissible:,} rule-satisfying command-line assignments x {len(classes.pareto)} Pareto NCCL "
        f"classes (of {len(classes.members)}), {len(grid):,} stable at run seed 0 ({time.monotonic() - t0:.1f} s)"
    )

    # Stage 2: the fastest first, each checked at every chance seed.
    grid.sort(key=lambda g: g[0], reverse=True)
    top: list[tuple[dict[str, Any], Modelled]] = []
    for _, values, run_cfg in grid:
        m = model.confirm(run_cfg)
        if m.stable:
            top.append((values, m))
            if len(top) >= 5:
                break
    if not top:
        raise NcclTuneError(f"space {space.name}: no stable config in the landscape; check the space and the --set values")
    best = top[0][1]
    check = reduction_check(model, classes, grid, best)
    region = target_region(model, classes, grid, best, admissible)
    counts = {
        "product": math.prod(len(c) for c in choices(pins, list(space.parameters))),
        "command_line_assignments": math.prod(len(c) for c in choices(pins, ops)),
        "command_line_assignments_admissible": admissible,
        "nccl_combinations": sum(len(v) for v in classes.members.values()),
        "nccl_classes": len(classes.members),
        "nccl_classes_refused": sum(1 for c in classes.members if c.refused),
        "nccl_classes_pareto": len(classes.pareto),
        "grid_stable_at_seed_0": len(grid),
        "modelled_runs": model.runs,
    }
    return Landscape(
        fingerprint=fingerprint(space, pins, model.steps),
        best_values=top[0][0],
        best=best,
        baseline_values=baseline_values,
        baseline=model.judge(baseline_values),
        top=tuple(top),
        counts=counts,
        reduction_check=check,
        target_region=region,
        compute_s=time.monotonic() - t0,
    )


def reduction_check(
    model: ConfigModel, classes: EnvClasses, grid: list, best: Modelled, pairs: int = 300, top_k: int = 8
) -> dict[str, Any]:
    """Evidence that the class reduction is exact: the space's rules do not read the NCCL values
    (the grid checks them with one), sampled (command line, NCCL) pairs model the same as with
    their class's representative and no better than with their Pareto dominator, and every class,
    refused ones included, on the top assignments finds nothing faster than the best."""
    rng = random.Random(0)
    ops, eps = params_of(model.space, env=False), params_of(model.space, env=True)
    op_choices, ep_choices = choices(model.pins, ops), choices(model.pins, eps)
    same = differ = dominator_ok = dominator_worse = rules_differ = tries = 0
    while same + differ < pairs and tries < pairs * 50:
        tries += 1
        over = {p.name: rng.choice(c) for p, c in zip(ops, op_choices)}
        env_values = {p.name: rng.choice(c) for p, c in zip(eps, ep_choices)}
        if model.space.violations({**over, **env_values}):
            continue
        rules_differ += int(bool(model.space.violations({**over, **classes.representative(classes.pareto[0])})))
        cfg, _ = model.parse({**over, **env_values})
        if cfg is None:
            continue
        own = model.run(cfg, 0)
        cls = classes.class_of(env_values)
        rep = model.run(model.with_env(cfg, classes.representative(cls)), 0)
        if (own.step_s, own.peak_mem_gib, own.failure) == (rep.step_s, rep.peak_mem_gib, rep.failure):
            same += 1
        else:
            differ += 1
        dom = classes.dominator(cls)
        if dom is not None and own.stable:
            better = model.run(model.with_env(cfg, classes.representative(dom)), 0)
            if better.stable and better.throughput_samples_per_s >= own.throughput_samples_per_s * (1 - 1e-12):
                dominator_ok += 1
            else:
                dominator_worse += 1
    seen: set[str] = set()
    faster = tried = 0
    for _, values, run_cfg in grid:
        key = values_key({p.name: values[p.name] for p in ops})
        if key in seen:
            continue
        seen.add(key)
        for cls in classes.members:
            cfg = model.with_env(run_cfg, classes.representative(cls))
            first = model.run(cfg, 0)
            tried += 1
            if first.stable and first.throughput_samples_per_s > best.throughput_samples_per_s * (1 + 1e-12):
                faster += int(model.confirm(cfg, first).stable)
        if len(seen) >= top_k:
            break
    return {
        "pairs": same + differ,
        "rules_depend_on_nccl": rules_differ,
        "same_as_representative": same,
        "differ_from_representative": differ,
        "stable_pairs_dominator_no_worse": dominator_ok,
        "stable_pairs_dominator_worse": dominator_worse,
        "top_assignments_with_every_class": len(seen),
        "top_assignments_runs": tried,
        "faster_than_best": faster,
        "exact": differ == 0 and dominator_worse == 0 and faster == 0 and rules_differ == 0,
    }


def target_region(model: ConfigModel, classes: EnvClasses, grid: list, best: Modelled, admissible: int) -> dict[str, Any]:
    """How many configs of the space reach the target, exactly: only an assignment whose best
    Pareto class reaches it can (dominance), so every class is tried on those assignments only.
    Random search draws uniformly among the rule-satisfying configs, so ``p`` is its chance per
    launched trial and fixes its median trials to reach (the baseline, then a geometric count)."""
    target = best.throughput_samples_per_s * (1.0 - WITHIN_FRAC)
    ops = params_of(model.space, env=False)
    assignments: dict[str, SimConfig] = {}
    for tput, values, run_cfg in grid:
        if tput < target:
            break
        assignments.setdefault(values_key({p.name: values[p.name] for p in ops}), run_cfg)
    hits = 0
    for run_cfg in assignments.values():
        for cls, members in classes.members.items():
            if cls.refused:
                continue
            cfg = model.with_env(run_cfg, classes.representative(cls))
            first = model.run(cfg, 0)
            if first.stable and first.throughput_samples_per_s >= target and model.confirm(cfg, first).stable:
                hits += len(members)
    total = admissible * sum(len(v) for v in classes.members.values())
    p = hits / total if total else 0.0
    out: dict[str, Any] = {"configs_within": hits, "assignments_within": len(assignments), "configs_admissible": total, "p": p}
    if 0 < p < 1:
        out["implied_random_median_trials"] = 1 + math.ceil(math.log(0.5) / math.log(1 - p))
    return out


# ---------------------------------------------------------------------------------------------
# The studies
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StudyStats:
    """One study, judged against the landscape."""

    sampler: str
    seed: int
    trials: int
    """The study's budget of launched search trials."""
    launched: int
    """Launched trials, confirmation re-runs included."""
    trials_to_reach: int
    censored: bool
    best_frac_after: Mapping[int, float]
    gpu_s: float
    failed_gpu_frac: float
    failed_or_stopped_gpu_frac: float
    statuses: Mapping[str, int]
    outcomes: Mapping[str, int]
    winner_values: Mapping[str, Any] | None
    winner_frac: float | None
    """None when the study has no winner."""
    winner_stable: bool | None
    wall_s: float


def settings_for(sampler: str, seed: int, trials: int, results: Path, pins: tuple[tuple[str, str], ...]) -> RunSettings:
    """The tuner as shipped (``tuner``) or the random-search yardstick, on an in-memory study."""
    common: dict[str, Any] = dict(
        command=("bash", str(TWIN)), results=results, storage="sqlite:///:memory:",
        study=f"bench-{sampler}-{seed}", trials=trials, seed=seed, pins=pins,
    )
    if sampler == "tuner":
        return RunSettings(**common)
    return RunSettings(**common, sampler="random", predict_oom=False, early_stop_ratio=0.0, confirm=0)


def judge_study(
    sampler: str, seed: int, trials: int, records: Iterable[TrialRecord], winner_values: Mapping[str, Any] | None,
    model: ConfigModel, land: Landscape, wall_s: float,
) -> StudyStats:
    """Trials to reach, best found after N trials, GPU time on failures, and the winner's truth."""
    recs = sorted(records, key=lambda r: r.number)
    launched = [r for r in recs if r.outcome is Outcome.LAUNCHED]
    reach: int | None = None
    best_so_far = 0.0
    after: dict[int, float] = {}
    for i, r in enumerate(launched, start=1):
        m = model.judge(r.values)
        if m.stable:
            best_so_far = max(best_so_far, land.frac(m))
        if reach is None and land.reached(m):
            reach = i
        if i in CHECKPOINTS:
            after[i] = best_so_far
    gpu = [(r.status, (r.result.modelled_gpu_s or 0.0) if r.result else 0.0) for r in launched]
    total = sum(s for _, s in gpu)
    failed = sum(s for st, s in gpu if st not in (FailureClass.OK, FailureClass.BUDGET))
    not_ok = sum(s for st, s in gpu if st is not FailureClass.OK)
    winner = model.judge(winner_values) if winner_values is not None else None
    return StudyStats(
        sampler=sampler,
        seed=seed,
        trials=trials,
        launched=len(launched),
        trials_to_reach=reach if reach is not None else trials + 1,
        censored=reach is None,
        best_frac_after=after,
        gpu_s=total,
        failed_gpu_frac=failed / total if total else 0.0,
        failed_or_stopped_gpu_frac=not_ok / total if total else 0.0,
        statuses=dict(Counter(r.status.value for r in launched if r.status)),
        outcomes=dict(Counter(r.outcome.value for r in recs)),
        winner_values=dict(winner_values) if winner_values is not None else None,
        winner_frac=land.frac(winner) if winner is not None else None,
        winner_stable=winner.stable if winner is not None else None,
        wall_s=wall_s,
    )


def run_studies(
    sampler: str, seeds: int, trials: int, pins: tuple[tuple[str, str], ...], model: ConfigModel,
    land: Landscape, root: Path,
) -> list[StudyStats]:
    """One study per seed with ``sampler``, each judged."""
    out = []
    for seed in range(seeds):
        settings = settings_for(sampler, seed, trials, root / f"{sampler}-{seed}", pins)
        t0 = time.monotonic()
        study = run_study(settings, console=Console(file=io.StringIO()), launcher=ModelLauncher(env=BASE_ENV))
        winner = dict(study.winner.values) if study.winner is not None else None
        out.append(judge_study(sampler, seed, trials, study.records, winner, model, land, time.monotonic() - t0))
    return out


# ---------------------------------------------------------------------------------------------
# Summary, targets, tables
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplerSummary:
    """The studies of one sampler, over seeds."""

    sampler: str
    seeds: int
    trials: int
    median_trials_to_reach: float
    censored: int
    trials_to_reach: tuple[int, ...]
    median_best_frac_after: Mapping[int, float]
    failed_gpu_frac_median: float
    failed_gpu_frac_max: float
    failed_or_stopped_gpu_frac_median: float
    failed_or_stopped_gpu_frac_max: float
    winner_frac_median: float | None
    winners_unstable: int
    no_winner: int
    study_wall_s_median: float

    @property
    def median_censored(self) -> bool:
        return self.median_trials_to_reach > self.trials


def summarize(sampler: str, stats: list[StudyStats]) -> SamplerSummary:
    after = {
        n: statistics.median(s.best_frac_after[n] for s in stats)
        for n in CHECKPOINTS
        if all(n in s.best_frac_after for s in stats)
    }
    winners = [s.winner_frac for s in stats if s.winner_frac is not None]
    return SamplerSummary(
        sampler=sampler,
        seeds=len(stats),
        trials=stats[0].trials,
        median_trials_to_reach=statistics.median(s.trials_to_reach for s in stats),
        censored=sum(s.censored for s in stats),
        trials_to_reach=tuple(s.trials_to_reach for s in stats),
        median_best_frac_after=after,
        failed_gpu_frac_median=statistics.median(s.failed_gpu_frac for s in stats),
        failed_gpu_frac_max=max(s.failed_gpu_frac for s in stats),
        failed_or_stopped_gpu_frac_median=statistics.median(s.failed_or_stopped_gpu_frac for s in stats),
        failed_or_stopped_gpu_frac_max=max(s.failed_or_stopped_gpu_frac for s in stats),
        winner_frac_median=statistics.median(winners) if winners else None,
        winners_unstable=sum(1 for s in stats if s.winner_stable is False),
        no_winner=sum(1 for s in stats if s.winner_frac is None),
        study_wall_s_median=statistics.median(s.wall_s for s in stats),
    )


def targets(tuner: SamplerSummary, rnd: SamplerSummary, land: Landscape) -> list[dict[str, Any]]:
    """The design targets, measured (a censored median is budget + 1, so only a bound)."""
    out = [{
        "what": f"median trials to reach (tuner, sampler={SHIPPED})",
        "measured": tuner.median_trials_to_reach,
        "target": f"<= {TARGET_MEDIAN_TRIALS}",
        "met": not tuner.median_censored and tuner.median_trials_to_reach <= TARGET_MEDIAN_TRIALS,
        "note": "censored: the median study never reached it" if tuner.median_censored else "",
    }]
    ratio = rnd.median_trials_to_reach / tuner.median_trials_to_reach
    implied = land.target_region.get("implied_random_median_trials")
    if tuner.median_censored:
        note, met, shown = "not measurable: the tuner's median is censored", False, None
    else:
        note = "a lower bound: the random median is censored" if rnd.median_censored else ""
        met, shown = ratio >= TARGET_RANDOM_RATIO, round(ratio, 2)
    if implied is not None and not tuner.median_censored:
        note += f"{'; ' if note else ''}against the landscape's random median ({implied}): {implied / tuner.median_trials_to_reach:.1f}x"
    out.append({"what": "random / tuner median trials to reach", "measured": shown,
                 "target": f">= {TARGET_RANDOM_RATIO:g}", "met": met, "note": note})
    out.append({
        "what": "GPU time on failed trials (tuner, median over seeds)",
        "measured": round(tuner.failed_gpu_frac_median, 4),
        "target": f"<= {TARGET_FAILED_GPU_FRAC:.0%}",
        "met": tuner.failed_gpu_frac_median <= TARGET_FAILED_GPU_FRAC,
        "note": f"max {tuner.failed_gpu_frac_max:.1%}; with early-stopped trials {tuner.failed_or_stopped_gpu_frac_median:.1%}",
    })
    return out


def render(console: Console, space: SearchSpace, land: Landscape, sums: list[SamplerSummary],
           tgt: list[dict[str, Any]], trials: int) -> None:
    """The landscape, the samplers' table, the per-seed results and the targets."""
    base, region = land.baseline, land.target_region
    implied = region.get("implied_random_median_trials", "-")
    console.print(
        f"[bold]landscape[/bold]: {land.counts['product']:,} configs, {land.counts['modelled_runs']:,} modelled runs, "
        f"reduction exact: {land.reduction_check['exact']}\n"
        f"  best: {describe(space, land.best_values, land.baseline_values)}\n"
        f"        {land.best.throughput_samples_per_s:.3f} samples/s, step {land.best.step_s:.1f} s, peak "
        f"{land.best.peak_mem_gib:.1f} GiB; target (within {WITHIN_FRAC:.0%}) >= {land.target_throughput:.3f} samples/s\n"
        f"  baseline: {base.throughput_samples_per_s:.3f} samples/s ({'stable' if base.stable else base.failure}); "
        f"{region['configs_within']:,} of {region['configs_admissible']:,} rule-satisfying configs reach the target "
        f"(p = {region['p']:.5f}: random search's median is {implied} trials)"
    )
    shown = [n for n in CHECKPOINTS if n <= trials]
    table = Table(title=(
        f"search on the synthetic landscape ({sums[0].seeds} seeds x {trials} trials)\n"
        f"trials to reach: launched trials up to the first stable config within {WITHIN_FRAC:.0%} of the best "
        "(budget+1 if never); best@N: best stable config launched in N trials / the best; "
        "failed GPU: GPU-s of failed launched trials / all"
    ))
    for col in ("sampler", "trials to reach (median)", "censored", *(f"best@{n}" for n in shown),
                "failed GPU med / max", "+ stopped med / max", "winner / best", "unstable winners", "s/study"):
        table.add_column(col, justify="left" if col == "sampler" else "right")
    for s in sums:
        table.add_row(
            s.sampler, f"{s.median_trials_to_reach:g}", f"{s.censored}/{s.seeds}",
            *(f"{s.median_best_frac_after[n]:.1%}" if n in s.median_best_frac_after else "-" for n in shown),
            f"{s.failed_gpu_frac_median:.1%} / {s.failed_gpu_frac_max:.1%}",
            f"{s.failed_or_stopped_gpu_frac_median:.1%} / {s.failed_or_stopped_gpu_frac_max:.1%}",
            "-" if s.winner_frac_median is None else f"{s.winner_frac_median:.1%}",
            f"{s.winners_unstable}/{s.seeds}", f"{s.study_wall_s_median:.1f}",
        )
    console.print(table)
    per_seed = Table(title="trials to reach, seed 0 onwards")
    per_seed.add_column("sampler")
    per_seed.add_column("trials")
    for s in sums:
        per_seed.add_row(s.sampler, " ".join(str(x) for x in s.trials_to_reach))
    console.print(per_seed)
    summary = Table(title="targets")
    for col in ("what", "measured", "target", "met", "note"):
        summary.add_column(col)
    for t in tgt:
        summary.add_row(t["what"], "-" if t["measured"] is None else f"{t['measured']:g}", t["target"],
                        "yes" if t["met"] else "NO", t["note"])
    console.print(summary)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def load_cached(path: Path | None, fp: str) -> Landscape | None:
    """The landscape an earlier run wrote to ``path``, when its fingerprint still matches."""
    if path is None or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        if data.get("landscape", {}).get("fingerprint") == fp:
            return Landscape.from_json(data["landscape"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Options, with ``--quick``'s smaller defaults; one-line errors for bad values."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=None, help="studies per sampler, seeds 0..N-1 (default 20; --quick 2)")
    p.add_argument("--trials", type=int, default=None, help="launched search trials per study (default 40; --quick 10)")
    p.add_argument("--set", dest="pins", action="append", default=[], metavar="KEY=VALUE",
                   help="hold a parameter fixed in the studies and the landscape (repeatable)")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: few seeds and trials on a subspace (" + ", ".join("=".join(x) for x in QUICK_PINS) + ")")
    p.add_argument("--json", type=Path, default=None, help="write the results here (and reuse the landscape cached there)")
    args = p.parse_args(argv)
    args.seeds = args.seeds if args.seeds is not None else (2 if args.quick else 20)
    args.trials = args.trials if args.trials is not None else (10 if args.quick else 40)
    for name in ("seeds", "trials"):
        if getattr(args, name) < 1:
            raise NcclTuneError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be at least 1")
    pins = [parse_pin(text) for text in args.pins]
    if args.quick:
        given = {key for key, _ in pins}
        pins = [pin for pin in QUICK_PINS if pin[0] not in given] + pins
    args.pin_pairs = tuple(pins)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every target is met, 1 when one is missed, 2 on a usage error."""
    t0 = time.monotonic()
    console = Console(width=170)
    try:
        args = parse_args(argv)
        if not TWIN.exists():
            raise NcclTuneError(f"{TWIN} not found: the synthetic twin's script is needed for this benchmark")
        space, pins = apply_pins(load_space(SPACE), args.pin_pairs)
        with tempfile.TemporaryDirectory(prefix="nccl-tune-search-") as tmp:
            root = Path(tmp)
            model = ConfigModel(space, pins, settings_for("tuner", 0, args.trials, root, args.pin_pairs))
            fp = fingerprint(space, pins, model.steps)
            land = load_cached(args.json, fp)
            if land is None:
                land = compute_landscape(model, console)
            else:
                console.print(f"landscape: reused from {args.json} (fingerprint {fp})")
            stats = {s: run_studies(s, args.seeds, args.trials, args.pin_pairs, model, land, root) for s in SAMPLERS}
    except NcclTuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sums = [summarize(s, stats[s]) for s in SAMPLERS]
    tgt = targets(sums[0], sums[1], land)
    render(console, space, land, sums, tgt, args.trials)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "benchmark": "search",
            "space": SPACE,
            "pins": dict(args.pin_pairs),
            "seeds": args.seeds,
            "trials": args.trials,
            "quick": args.quick,
            "steps_per_trial": model.steps,
            "within_frac": WITHIN_FRAC,
            "chance_seeds": CHANCE_SEEDS,
            "min_headroom_frac": space.min_headroom_frac,
            "definitions": DEFINITIONS,
            "landscape": land.to_json(),
            "samplers": {s.sampler: dataclasses.asdict(s) for s in sums},
            "studies": {name: [dataclasses.asdict(x) for x in v] for name, v in stats.items()},
            "targets": tgt,
            "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0],
            "wall_s": round(time.monotonic() - t0, 1),
        }
        args.json.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return 0 if all(t["met"] for t in tgt) else 1


if __name__ == "__main__":
    sys.exit(main())
