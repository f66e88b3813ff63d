"""Running the NCCL sweep (``nccl_sweep``): its checks, one at a time, each stored as it ends."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping

import optuna

from nccl_tune.failure import FailureClass
from nccl_tune.launchers.nccl_check import CheckingLauncher, with_nccl_check
from nccl_tune.launchers.base import Launcher
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.tuner import dropped
from nccl_tune.tuner.display import Display
from nccl_tune.tuner.nccl_sweep import A_SWEEP, BASELINE_KEY, NUMBER_BASE, SweepEntry, entries, key_of, line_of, planned
from nccl_tune.tuner.observer import TunerObserver
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.trial_run import TrialRunner


def checking(launcher: Launcher, settings: RunSettings, space: SearchSpace) -> tuple[Launcher, str | None]:
    """``launcher`` with the NCCL check as ``--nccl-check`` asks (``auto``: when the space tunes NCCL
    variables), and the line saying whether it runs: for the run and for its dry-run alike."""
    return with_nccl_check(launcher, settings.nccl_check, bool(dropped.nccl_params(space)))


def sweeper(launcher: Launcher, settings: RunSettings) -> CheckingLauncher | None:
    """The launcher the sweep runs its checks with, or None when the sweep does not run: it runs
    where the NCCL check does, with trials one at a time (not with ``--parallel``), for the default
    sampler (the one that reads it)."""
    if isinstance(launcher, CheckingLauncher) and settings.sampler == "local" and settings.parallel == 1:
        return launcher
    return None


def what_it_times(changes: int) -> str:
    return (f"{changes} single NCCL changes from the baseline, each timed on the collectives alone (one check) "
            "before any trial tries it; --nccl-check off skips it")


def plan_line(space: SearchSpace, held: Mapping[str, Any]) -> str | None:
    """What the sweep will do, for a run's plan (None when there is nothing to sweep)."""
    changes = len(planned(space, held))
    return f"NCCL sweep, once a trial has finished: {what_it_times(changes)}" if changes else None


def run_sweep(study: optuna.Study, runner: TrialRunner, launcher: CheckingLauncher, display: Display,
              time_is_up: Callable[[], bool] = lambda: False) -> bool:
    """Check the baseline's NCCL values, then each single change (``planned``) not yet in the study;
    True when the tuner was interrupted (the checks done so far are kept). Stops when the baseline's
    own check failed (nothing can be compared with it), and before a check once ``time_is_up`` (the
    run's ``--budget``: the next run resumes the sweep)."""
    held = runner.pins.params
    base_values = runner.space.baseline(held)
    changes = planned(runner.space, held)
    tuned = sorted({n for n, _ in changes})
    todo = [(BASELINE_KEY, base_values), *((key_of(n, v), {**base_values, n: v}) for n, v in changes)]
    done = entries(study)
    if not changes or all(key in done for key, _ in todo) or (BASELINE_KEY in done and not done[BASELINE_KEY].ok):
        return False
    display.note(f"NCCL sweep: {what_it_times(len(changes))}")
    for i, (key, values) in enumerate(todo):
        if key in done:
            continue
        if time_is_up():
            return False
        spec = runner.spec_for(NUMBER_BASE + i, values, [])
        launcher.gate()
        check = launcher.measure(replace(spec, trial_dir=spec.trial_dir.parent / "nccl-sweep" / f"{i:03d}-{key}"),
                                 TunerObserver(display, runner.interrupt, None, 0.0))
        if check.status is FailureClass.INTERRUPTED:
            return True
        done[key] = SweepEntry(check.status.value, check.measured_step_times_s, check.wall_s, check.modelled_gpu_s,
                               {n: values[n] for n in tuned})
        study.set_user_attr(A_SWEEP, {k: e.to_json() for k, e in done.items()})
        display.note(line_of(key, done[key], done.get(BASELINE_KEY)).text())
        if key == BASELINE_KEY and not done[key].ok:
            return False
    return False
