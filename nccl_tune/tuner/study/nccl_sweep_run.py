"""Running the NCCL sweep (``records.nccl_sweep``): its plan of checks, each run in a slot of the
scheduler (``scheduler``) and stored as it ends."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import optuna

from nccl_tune.launchers.base import Launcher
from nccl_tune.launchers.nccl_check import CheckingLauncher, with_nccl_check
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.trial import TrialResult
from nccl_tune.tuner.records import dropped
from nccl_tune.tuner.records.nccl_sweep import (
    A_SWEEP,
    BASELINE_KEY,
    NUMBER_BASE,
    SweepEntry,
    entries,
    key_of,
    line_of,
    planned,
)
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.trials.display import Display
from nccl_tune.tuner.trials.observer import TunerObserver
from nccl_tune.tuner.trials.trial_run import TrialRunner


def checking(launcher: Launcher, settings: RunSettings, space: SearchSpace) -> tuple[Launcher, str | None]:
    """``launcher`` with the NCCL check as ``--nccl-check`` asks (``auto``: when the space tunes NCCL
    variables), and the line saying whether it runs: for the run and for its dry-run alike."""
    return with_nccl_check(launcher, settings.nccl_check, bool(dropped.nccl_params(space)))


def sweeper(launcher: Launcher, settings: RunSettings) -> CheckingLauncher | None:
    """The launcher the sweep runs its checks with, or None when the sweep does not run: it runs
    where the NCCL check does, for the default sampler (the one that reads it); with ``--parallel``
    its checks take the free slots (``scheduler``)."""
    if isinstance(launcher, CheckingLauncher) and settings.sampler == "local":
        return launcher
    return None


def what_it_times(changes: int) -> str:
    return (
        f"{changes} single NCCL changes from the baseline, each timed on the collectives alone (one check) "
        "before any trial tries it; --nccl-check off skips it"
    )


def plan_line(space: SearchSpace, held: Mapping[str, Any]) -> str | None:
    """What the sweep will do, for a run's plan (None when there is nothing to sweep)."""
    changes = len(planned(space, held))
    return f"NCCL sweep, once a trial has finished: {what_it_times(changes)}" if changes else None


@dataclass(frozen=True)
class SweepCheck:
    """One check of the sweep: its place in the plan, key (``BASELINE_KEY`` or ``NAME=VALUE``) and values."""

    index: int
    key: str
    values: Mapping[str, Any]


class SweepPlan:
    """The sweep's checks not yet in the study, and how each is run and recorded: the baseline's
    first (nothing can be compared before it), then the single changes, one at a time or side by
    side (``--parallel``)."""

    def __init__(self, study: optuna.Study, runner: TrialRunner, launcher: CheckingLauncher, display: Display) -> None:
        self.study, self.runner, self.launcher, self.display = study, runner, launcher, display
        base = runner.space.baseline(runner.held.params)
        changes = planned(runner.space, runner.held.params)
        self.tuned = sorted({n for n, _ in changes})
        every = [(BASELINE_KEY, base), *((key_of(n, v), {**base, n: v}) for n, v in changes)]
        self.done = entries(study)
        self.todo = [SweepCheck(i, key, values) for i, (key, values) in enumerate(every) if key not in self.done]
        self.changes = len(changes)

    @property
    def blocked(self) -> bool:
        """Nothing to run: nothing to sweep, every check done, or the baseline's own check failed."""
        base = self.done.get(BASELINE_KEY)
        return not self.changes or not self.todo or (base is not None and not base.ok)

    def announce(self) -> None:
        self.display.note(f"NCCL sweep: {what_it_times(self.changes)}")

    def run(self, check: SweepCheck) -> TrialResult:
        """``check``'s run (from any thread): the NCCL check alone, in ``nccl-sweep/`` of the study's folder."""
        spec = self.runner.spec_for(NUMBER_BASE + check.index, check.values, [])
        self.launcher.gate()
        folder = spec.trial_dir.parent / "nccl-sweep" / f"{check.index:03d}-{check.key}"
        return self.launcher.measure(
            replace(spec, trial_dir=folder), TunerObserver(self.display, self.runner.interrupt, None, 0.0)
        )

    def record(self, check: SweepCheck, result: TrialResult) -> bool:
        """Store ``result`` in the study and print its line (from the thread that owns the study);
        False when the sweep cannot go on (the baseline's check failed)."""
        entry = SweepEntry(
            result.status.value,
            result.measured_step_times_s,
            result.wall_s,
            result.modelled_gpu_s,
            {n: check.values[n] for n in self.tuned},
        )
        self.done[check.key] = entry
        self.study.set_user_attr(A_SWEEP, {k: e.to_json() for k, e in self.done.items()})
        self.display.note(line_of(check.key, entry, self.done.get(BASELINE_KEY)).text())
        return check.key != BASELINE_KEY or entry.ok
