"""``nccl-tune run --dry-run``: validate the space and the command, check what the run checks before
its first trial (``preflight``: where it writes, the study it would resume, the nightly plan), and
show the first trial's argv, env, stop rule and clocks; run nothing, write nothing (an existing
storage is only read)."""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from nccl_tune.errors import NcclTuneError
from nccl_tune.launchers.base import Launcher
from nccl_tune.launchers.registry import make_launcher
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.search_spaces.skyrl_layout import chosen_space
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.trial import TrialSpec
from nccl_tune.tuner.records.pins import apply_pins, baseline_values
from nccl_tune.tuner.records.sampling import suggest
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.study.admission import MAX_REJECTED_IN_A_ROW
from nccl_tune.tuner.study.nccl_sweep_run import checking as nccl_checking
from nccl_tune.tuner.study.nccl_sweep_run import plan_line, sweeper
from nccl_tune.tuner.study.preflight import check_before_trials, refuse_launcher_env
from nccl_tune.tuner.study.stop_rules import refuse_unrankable
from nccl_tune.tuner.trials.steps import MAX_MEASURED_STEPS
from nccl_tune.tuner.trials.trial_builder import build_trial_spec


@dataclass(frozen=True)
class DryRun:
    """What trial 0 of a run would be."""

    study: str
    space: str
    spec: TrialSpec
    steps_follow_noise: bool = True
    """False when ``--steps`` fixes the measured steps of every trial."""
    nccl_check: str | None = None
    """Whether the NCCL check would run before trials, and why (None: the space sets no NCCL variable)."""
    nccl_sweep: str | None = None
    """What the NCCL sweep would time (None: it would not run)."""

    def to_json(self) -> dict[str, Any]:
        spec, c = self.spec, self.spec.clocks
        return {
            "study": self.study,
            "argv": list(spec.argv),
            "env": dict(spec.env),
            "trial_dir": str(spec.trial_dir),
            "nccl_check": self.nccl_check,
            "nccl_sweep": self.nccl_sweep,
            "stop": {
                "warmup_steps": spec.stop.warmup_steps,
                "measured_steps": spec.stop.measured_steps,
                "later_measured_steps_max": max(spec.stop.measured_steps, MAX_MEASURED_STEPS)
                if self.steps_follow_noise
                else spec.stop.measured_steps,
            },
            "clocks": {
                "startup_timeout_s": c.startup_timeout_s,
                "startup_deadline_s": c.startup_deadline_s(),
                "stall_timeout_s": c.stall_timeout_s,
                "stall_floor_s": c.stall_floor_s,
                "stall_multiplier": c.stall_multiplier,
                "trial_timeout_s": c.trial_timeout_s,
                "grace_s": c.grace_s,
                "phase_estimates_s": dict(c.phase_estimates_s),
                "phase_max_s": dict(c.phase_max_s),
            },
        }

    def lines(self) -> list[str]:
        """The plan as plain text lines."""
        spec, c = self.spec, self.spec.clocks
        out = [f"space {self.space} is valid; trial 0 would run in {spec.trial_dir}:", shlex.join(spec.argv)]
        out += [f"  unset {k}" if v is None else f"  {k}={v}" for k, v in spec.env.items()]
        out.append(
            f"stop after {spec.stop.warmup_steps} warm-up + {spec.stop.measured_steps} measured steps; start-up "
            f"{c.startup_deadline_s():g}s ({c.stall_multiplier:g}x a measured start-up, at most "
            f"{c.startup_timeout_s:g}s), stall {c.stall_timeout_s:g}s ({c.stall_multiplier:g}x a known phase, at least "
            f"{c.stall_floor_s:g}s), trial {c.trial_timeout_s:g}s, grace {c.grace_s:g}s"
        )
        out += [line for line in (self.nccl_check, self.nccl_sweep) if line]
        if self.steps_follow_noise and spec.stop.measured_steps < MAX_MEASURED_STEPS:
            out.append(
                f"later trials measure more steps (at most {MAX_MEASURED_STEPS}) when the study's finished trials "
                "measure steps that scatter beyond the run-to-run noise; --steps N fixes the count"
            )
        return out


def first_values(space: SearchSpace, held: Mapping[str, Any], seed: int | None) -> dict[str, Any]:
    """The baseline's values, or the first sampled values within the space's rules (``held``: the
    values held)."""
    values = baseline_values(space, held)
    if values is not None:
        return values
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed))
    broken: Counter[str] = Counter()
    for _ in range(MAX_REJECTED_IN_A_ROW):
        trial = study.ask()
        candidate = suggest(trial, space, held)
        violated = space.violations(candidate)
        if not violated:
            return candidate
        broken.update(violated)
        study.tell(trial, 0.0)
    raise NcclTuneError(_nothing_admissible(space, held, broken))


def _nothing_admissible(space: SearchSpace, pinned: Mapping[str, Any], broken: Counter[str]) -> str:
    """The line for a space whose constraints no sampled values met: which rule broke most, and the fix."""
    rule, times = broken.most_common(1)[0]
    held = f" with --set {', '.join(f'{k}={v}' for k, v in pinned.items())}" if pinned else ""
    fix = "loosen that constraint, widen the parameters' ranges" + (" or change the --set values" if held else "")
    return (
        f"space {space.name} ({space.source}): no values satisfy its constraints{held} in {MAX_REJECTED_IN_A_ROW} "
        f"draws; most often broken ({times}x): {rule!r}; {fix}"
    )


def plan_dry_run(settings: RunSettings, launcher: Launcher | None = None) -> DryRun:
    """Trial 0 of ``settings``' run, checked by the launcher as the run would check it."""
    space, pins = apply_pins(load_space(chosen_space(settings.space, settings.command, Path.cwd())[0]), settings.pins)
    refuse_unrankable(space, pins.params)
    refuse_launcher_env(settings, space, pins.params)
    study = settings.study_name(space.name)
    values = first_values(space, pins.params, settings.seed)
    spec = build_trial_spec(space, settings, study=study, number=0, values=values, context_pins=pins.context)
    launcher = launcher or make_launcher(settings.launcher, settings.ray_address, settings.gate_timeout_s)
    check_before_trials(settings, space, pins.params, study, launcher, spec)
    checker, checking = nccl_checking(launcher, settings, space)
    sweep = plan_line(space, dict(pins.params)) if sweeper(checker, settings) else None
    return DryRun(
        study=study,
        space=space.name,
        spec=spec,
        steps_follow_noise=settings.steps is None,
        nccl_check=checking,
        nccl_sweep=sweep,
    )
