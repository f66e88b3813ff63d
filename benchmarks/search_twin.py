"""The twin's landscape for ``search.py``, exactly: the best stable config of ``skyrl-text2sql``
under the twin's cost model (``twin.evaluate``) and the size of the target region.

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
  better than their dominator; every class is tried on the top configs).

The landscape is cached in the benchmark's JSON (under a fingerprint of the space, the pins, the
cost model's source and the definitions) and reused by the next run that writes the same file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from rich.console import Console

from nccl_tune.errors import NcclTuneError
from nccl_tune.search_spaces.space import Parameter, SearchSpace, Target
from nccl_tune.trial import TrialSpec
from nccl_tune.tuner.records.pins import Pins
from nccl_tune.tuner.records.stability import values_key
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.trials.trial_builder import build_trial_spec, stop_for
from twin import SimConfig, SimConfigError, evaluate, parse_overrides
from twin.config import read_run_env
from twin.cost_model import CommModel, comm_model
from twin.launcher import ModelLauncher, override_tokens

REPO = Path(__file__).resolve().parents[1]
TWIN = REPO / "examples" / "run_skyrl_sql_sim.sh"
SPACE = "skyrl-text2sql"
WITHIN_FRAC = 0.02
"""A launched config reaches the best when it is stable and within this fraction of the best's throughput."""
CHANCE_SEEDS = 8
"""Run seeds a config must pass without a failure to be called stable."""
BASE_ENV = {"HOME": "/home/nccl-tune-bench"}
"""The environment trials start from: fixed, so a shell's NCCL_* variables cannot leak in."""
LANDSCAPE_VERSION = 2
"""Changes when the landscape's definitions change (invalidates cached landscapes)."""
TRANSPORT_RANK = {"p2p": 2, "shm": 1, "socket": 0}
"""NCCL transports from fastest to slowest, as the cost model rates them."""


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
            self.space,
            self.settings,
            study="landscape",
            number=0,
            values=values,
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
        return dataclasses.replace(cfg, env=read_run_env(self.launcher.trial_env(spec), cfg.n_gpus, cfg.env.forced))

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
                return dataclasses.replace(
                    first, throughput_samples_per_s=0.0, failure=f"{other.failure} (run seed {seed})"
                )
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
    def of(cls, comm: CommModel) -> CommClass:
        return cls(
            tuple(sorted(comm.busbw.items())),
            comm.transport,
            comm.sm_steal,
            round(comm.buffers_gib, 12),
            bool(comm.cumem),
            comm.failure is not None,
        )

    def dominates(self, other: CommClass) -> bool:
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

    @cached_property
    def _by_key(self) -> dict[str, CommClass]:
        return {values_key(v): c for c, group in self.members.items() for v in group}

    def class_of(self, env_values: Mapping[str, Any]) -> CommClass:
        return self._by_key[values_key(env_values)]

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
    def from_json(cls, data: Mapping[str, Any]) -> Landscape:
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
    h.update(
        json.dumps(
            [
                LANDSCAPE_VERSION,
                space.text,
                sorted(pins.params.items()),
                sorted(pins.context.items()),
                steps,
                CHANCE_SEEDS,
                WITHIN_FRAC,
                BASE_ENV,
            ],
            default=str,
        ).encode()
    )
    for path in sorted((REPO / "twin").glob("*.py")):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def compute_landscape(model: ConfigModel, console: Console) -> Landscape:
    """The exact best stable config (see the module's docstring), with its checks."""
    t0 = time.monotonic()
    space, pins = model.space, model.pins
    ops = params_of(space, env=False)
    baseline_values = space.baseline(pins.params)
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
            raise NcclTuneError(
                f"space {space.name}: the GPU count changes with {over}; the NCCL classes assume it does not"
            )
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
        raise NcclTuneError(
            f"space {space.name}: no stable config in the landscape; check the space and the --set values"
        )
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


def target_region(
    model: ConfigModel, classes: EnvClasses, grid: list, best: Modelled, admissible: int
) -> dict[str, Any]:
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
    out: dict[str, Any] = {
        "configs_within": hits,
        "assignments_within": len(assignments),
        "configs_admissible": total,
        "p": p,
    }
    if 0 < p < 1:
        out["implied_random_median_trials"] = 1 + math.ceil(math.log(0.5) / math.log(1 - p))
    return out


def load_cached(path: Path | None, fp: str) -> Landscape | None:
    """The twin's landscape an earlier run wrote to ``path`` (``families.twin.landscape``), when its
    fingerprint still matches."""
    if path is None or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())["families"]["twin"]["landscape"]
        if data.get("fingerprint") == fp:
            return Landscape.from_json(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return None
