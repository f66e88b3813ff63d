"""The study: an Optuna ask/tell loop over trials, with resume, re-runs and a winner.

``run_study(settings)`` is what ``nccl-tune run`` calls. Each iteration asks Optuna for
values, rejects those that break the space's rules or dominate a known OOM (without
launching), waits for the node to be clean, runs the trial through the launcher, and tells
Optuna what happened. After the search the best candidates are re-run once to confirm they
are stable; the winner is the fastest config whose every run was ``ok`` away from the wall.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import psutil
from optuna.trial import TrialState
from rich.console import Console

from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import FailureClass
from nccl_tune.launchers.base import Launcher
from nccl_tune.launchers.trial_files import interrupted_result
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.search_spaces.space import MemoryEffect, SearchSpace, Target
from nccl_tune.trial import TrialResult, TrialSpec
from nccl_tune.tuner import study_records as R
from nccl_tune.tuner.display import Display
from nccl_tune.tuner.observer import InterruptFlag, TunerObserver
from nccl_tune.tuner.pins import Pins, apply_pins
from nccl_tune.tuner.predict import predicted_oom
from nccl_tune.tuner.study_records import TrialKind, TrialRecord
from nccl_tune.tuner.local_search import LocalSearchSampler
from nccl_tune.tuner.sampling import optuna_name, suggest, to_optuna
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.stability import Candidate, baseline, select_winner, to_confirm, values_key
from nccl_tune.tuner.storage import create_or_resume, default_study_name, open_storage
from nccl_tune.tuner.telling import near_wall, tell_duplicate, tell_predicted, tell_rejected, tell_result
from nccl_tune.tuner.trial_builder import build_trial_spec

MAX_REJECTED_IN_A_ROW = 2000
MAX_ENV_FAILURES_IN_A_ROW = 3
MAX_DUPLICATES_IN_A_ROW = 50
_INTERPRETERS = {"bash", "sh", "zsh", "dash", "python", "python3"}


@dataclass(frozen=True)
class StudyOutcome:
    study: str
    storage_url: str
    space: SearchSpace
    records: tuple[TrialRecord, ...]
    winner: Candidate | None
    baseline: Candidate | None
    launched: int
    """Trials launched by this run (re-runs included)."""
    interrupted: bool = False
    resumed: bool = False
    dry_run_spec: TrialSpec | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        if self.dry_run_spec is not None:
            return 0
        return 0 if self.winner is not None else 2


def make_launcher(name: str, parallel: int) -> Launcher:
    """The launcher for ``--launcher``; refuses what is not built yet."""
    if parallel != 1:
        raise NcclTuneError(f"--parallel {parallel}: only one trial at a time is supported yet; use --parallel 1")
    if name == "local":
        from nccl_tune.launchers.local import LocalLauncher

        return LocalLauncher()
    if name == "ray":
        raise NcclTuneError("--launcher ray is not available yet; use --launcher local")
    raise NcclTuneError(f"--launcher {name!r} is unknown; use --launcher local")


def make_sampler(name: str, seed: int | None, space: SearchSpace) -> optuna.samplers.BaseSampler:
    """The sampler for ``RunSettings.sampler``: ``local`` walks from the incumbent, micro-batches up
    first and NCCL variables last; ``tpe`` models the whole space; ``random`` is the yardstick."""
    if name == "local":
        return LocalSearchSampler(
            seed,
            first=frozenset(
                (optuna_name(p), 1) for p in space.parameters if p.memory is MemoryEffect.INCREASING and not p.semantic
            ),
            late=frozenset(optuna_name(p) for p in space.parameters if p.target is Target.ENV),
        )
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=8, multivariate=True)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise NcclTuneError(f"--sampler {name!r} is unknown; use local, tpe or random")


def check_command(command: tuple[str, ...]) -> None:
    """One-line errors for a missing command, before any trial is spent on it."""
    if not command:
        raise NcclTuneError("no command after --; usage: nccl-tune run [OPTIONS] -- COMMAND [ARGS...]")
    exe = command[0]
    if shutil.which(exe) is None:
        raise NcclTuneError(f"command {exe!r} not found (not on PATH and not an executable file)")
    if Path(exe).name in _INTERPRETERS and len(command) > 1:
        script = command[1]
        if not script.startswith("-") and not Path(script).exists():
            raise NcclTuneError(f"{exe} cannot run {script!r}: no such file (from {Path.cwd()})")


def _alive_tuner(pid: int | None) -> bool:
    if not pid or pid == os.getpid():
        return False
    try:
        proc = psutil.Process(pid)
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE and "nccl" in " ".join(proc.cmdline())
    except (psutil.Error, OSError):
        return False


class StudyRunner:
    """One ``run_study`` call: the state shared by its steps."""

    def __init__(self, settings: RunSettings, console: Console, launcher: Launcher | None) -> None:
        self.settings = settings
        self.console = console
        check_command(settings.command)
        if settings.sampler not in ("local", "tpe", "random"):
            raise NcclTuneError(f"--sampler {settings.sampler!r} is unknown; use local, tpe or random")
        space = load_space(settings.space)
        self.space, self.pins = apply_pins(space, settings.pins)
        self.study_name = settings.study or default_study_name(self.space.name, settings.command)
        self.launcher = launcher or make_launcher(settings.launcher, settings.parallel)
        self.display = Display(console, self.space)
        self.interrupt = InterruptFlag()
        self.host = socket.gethostname()
        self.launched = 0
        self.notes: list[str] = []

    # -- values ----------------------------------------------------------------------------
    def baseline_values(self) -> dict[str, Any] | None:
        values = {**self.space.defaults(), **self.pins.params}
        if set(values) != set(self.space.names):
            return None
        return values if not self.space.violations(values) else None

    def spec_for(self, number: int, values: dict[str, Any], history: list[TrialRecord]) -> TrialSpec:
        observed: dict[str, float] = {}
        for r in history:
            if r.result:
                for phase, secs in r.result.phase_max_s.items():
                    observed[phase] = max(observed.get(phase, 0.0), secs)
        return build_trial_spec(
            self.space,
            self.settings,
            study=self.study_name,
            number=number,
            values=values,
            context_pins=self.pins.context,
            observed_phase_s=observed,
        )

    # -- dry run -----------------------------------------------------------------------------
    def dry_run(self) -> StudyOutcome:
        values = self.baseline_values()
        if values is None:
            study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(self.settings.seed))
            for _ in range(MAX_REJECTED_IN_A_ROW):
                trial = study.ask()
                candidate = suggest(trial, self.space, self.pins.params)
                if not self.space.violations(candidate):
                    values = candidate
                    break
                study.tell(trial, 0.0)
            if values is None:
                raise NcclTuneError(f"space {self.space.name}: no values satisfy its constraints")
        spec = self.spec_for(0, values, [])
        self.launcher.prepare(spec)
        return StudyOutcome(
            study=self.study_name,
            storage_url=self.settings.storage_url,
            space=self.space,
            records=(),
            winner=None,
            baseline=None,
            launched=0,
            dry_run_spec=spec,
        )

    # -- resume ------------------------------------------------------------------------------
    def recover(self, study: optuna.Study) -> None:
        """After a tuner that was killed: kill its orphans, keep finished results, retry the rest."""
        running = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
        mine = [t for t in running if t.user_attrs.get(R.A_HOST) == self.host]
        for t in mine:
            if _alive_tuner(t.user_attrs.get(R.A_PID)):
                raise NcclTuneError(
                    f"study {self.study_name!r} is being run by nccl-tune (pid {t.user_attrs[R.A_PID]}) on this host; "
                    "wait for it or use another --study"
                )
        for desc in self.launcher.reap(self.study_name):
            self.display.note(f"killed an orphan of an interrupted trial: {desc}")
        for t in mine:
            trial = optuna.trial.Trial(study, t._trial_id)
            trial_dir = t.user_attrs.get(R.A_TRIAL_DIR)
            result = (
                interrupted_result(Path(trial_dir), t.number, "the tuner was killed while this trial ran")
                if trial_dir
                else None
            )
            if result is not None and result.status is not FailureClass.INTERRUPTED:
                tell_result(study, trial, result, self.space.min_headroom_frac)
                self.display.note(f"trial {t.number}: recovered its finished result ({result.status.value})")
                continue
            if result is not None:
                trial.set_user_attr(R.A_RESULT, result.to_json())
            trial.set_user_attr(R.A_STATUS, FailureClass.INTERRUPTED.value)
            study.tell(trial, state=TrialState.FAIL)
            values = t.user_attrs.get(R.A_VALUES)
            if values:
                study.enqueue_trial(
                    to_optuna(self.space, values, self.pins.params), user_attrs={R.A_KIND: TrialKind.RETRY.value}
                )
            self.display.note(f"trial {t.number}: interrupted before it finished; it will be run again")

    # -- one trial ---------------------------------------------------------------------------
    def run_one(
        self,
        study: optuna.Study,
        trial: optuna.Trial,
        values: dict[str, Any],
        kind: str,
        history: list[TrialRecord],
        early_stop: bool = True,
    ) -> TrialResult:
        """Launch ``trial`` with ``values``; ``history`` is the study's records before it."""
        spec = self.spec_for(trial.number, values, history)
        for key, value in (
            (R.A_VALUES, values),
            (R.A_TRIAL_DIR, str(spec.trial_dir)),
            (R.A_HOST, self.host),
            (R.A_PID, os.getpid()),
            ("argv", list(spec.argv)),
            ("env", {k: v for k, v in spec.env.items()}),
        ):
            trial.set_user_attr(key, value)
        self.launcher.gate()
        incumbent = select_winner(history, require_confirmation=False)
        ratio = self.settings.early_stop_ratio if early_stop else 0.0
        observer = TunerObserver(self.display, self.interrupt, incumbent, ratio)
        self.display.trial_started(trial.number, kind, values)
        result = self.launcher.run(spec, observer)
        if self.interrupt.is_set and result.status is FailureClass.OK and len(result.step_times_s) < spec.stop.total_steps:
            result = _as_interrupted(result)
        tell_result(study, trial, result, self.space.min_headroom_frac)
        self.launched += 1
        if result.status is FailureClass.INTERRUPTED:
            study.enqueue_trial(
                to_optuna(self.space, values, self.pins.params), user_attrs={R.A_KIND: TrialKind.RETRY.value}
            )
        deficit = near_wall(result, self.space.min_headroom_frac)
        self.display.trial_finished(
            trial.number,
            result,
            bool(deficit is not None and deficit > 0 and result.status is FailureClass.OK),
            select_winner(R.records(study), require_confirmation=False),
        )
        return result

    @staticmethod
    def measured_before(
        trials: list[optuna.trial.FrozenTrial], history: list[TrialRecord], values: dict[str, Any]
    ) -> optuna.trial.FrozenTrial | None:
        """The first launched, finished trial with exactly these values (interrupted ones do not count);
        ``history`` holds the records of ``trials``, in the same order."""
        key = values_key(values)
        for t, rec in zip(trials, history):
            if (
                t.state in (TrialState.COMPLETE, TrialState.PRUNED)
                and rec.outcome is R.Outcome.LAUNCHED
                and values_key(rec.values) == key
            ):
                return t
        return None

    def check_stop(self, result: TrialResult, first: bool, env_failures: int) -> None:
        """Stop the study when a failure says the command or the node is broken, not the values."""
        evidence = result.verdict.evidence[0].text if result.verdict.evidence else ""
        if result.status is FailureClass.CONFIG_ERROR and (first or "Could not override" in evidence):
            raise NcclTuneError(
                f"the command refused its configuration in trial {result.number}: {evidence or result.verdict.advice} "
                f"(log: {result.trial_dir}/output.log); fix the space or the command"
            )
        if first and result.exit_code in (126, 127):
            raise NcclTuneError(
                f"trial {result.number}: the command could not be executed (exit {result.exit_code}): {evidence} "
                f"(log: {result.trial_dir}/output.log)"
            )
        if env_failures >= MAX_ENV_FAILURES_IN_A_ROW:
            raise NcclTuneError(
                f"{env_failures} trials in a row failed with {result.status.value}: the node or the command looks "
                f"broken, not the values ({evidence}); run `nccl-tune doctor` and `nccl-tune diagnose {result.trial_dir}`"
            )

    # -- the whole run -----------------------------------------------------------------------
    def run(self) -> StudyOutcome:
        if self.settings.dry_run:
            return self.dry_run()
        sampler = make_sampler(self.settings.sampler, self.settings.seed, self.space)
        storage = open_storage(self.settings.storage_url)
        first_values = self.baseline_values()
        probe_spec = self.spec_for(0, first_values or {**self.space.defaults(), **self.pins.params}, [])
        self.launcher.prepare(probe_spec)
        study, existed = create_or_resume(
            storage,
            self.settings.storage_url,
            self.study_name,
            sampler,
            space_name=self.space.name,
            space_source=self.space.source,
            space_text=self.space.text,
            command=self.settings.command,
        )
        n_before = len(study.trials)
        self.display.header(
            self.study_name, self.settings.storage_url, existed, n_before, shlex.join(self.settings.command)
        )
        if existed:
            self.recover(study)
        elif first_values is not None:
            study.enqueue_trial(
                to_optuna(self.space, first_values, self.pins.params), user_attrs={R.A_KIND: TrialKind.BASELINE.value}
            )
        else:
            self.display.note("the space's defaults are incomplete or break its rules: no baseline trial")
        deadline = time.monotonic() + self.settings.budget_s if self.settings.budget_s else None
        interrupted = False
        try:
            with self.interrupt:
                self.launcher.before_study()
                interrupted = self.search(study, deadline)
                if not interrupted and self.settings.confirm:
                    interrupted = self.confirm(study, deadline)
        finally:
            self.display.close()
            self.launcher.close()
        recs = R.records(study)
        winner = select_winner(recs, require_confirmation=self.settings.confirm > 0)
        base = baseline(recs)
        if not interrupted:
            self.display.summary(recs, winner, base)
        return StudyOutcome(
            study=self.study_name,
            storage_url=self.settings.storage_url,
            space=self.space,
            records=tuple(recs),
            winner=winner,
            baseline=base,
            launched=self.launched,
            interrupted=interrupted,
            resumed=existed,
            notes=tuple(self.notes),
        )

    def _out_of_time(self, deadline: float | None) -> bool:
        if deadline is not None and time.monotonic() >= deadline:
            self.display.note("the run's --budget is spent: no new trial")
            return True
        return False

    def search(self, study: optuna.Study, deadline: float | None) -> bool:
        """The main loop; True when interrupted."""
        rejected_in_a_row = 0
        duplicates_in_a_row = 0
        env_failures = 0
        launched_here = 0
        while launched_here < self.settings.trials:
            if self.interrupt.is_set:
                return True
            if self._out_of_time(deadline):
                return False
            trial = study.ask()
            values = suggest(trial, self.space, self.pins.params)
            kind = trial.user_attrs.get(R.A_KIND, TrialKind.SEARCH.value)
            trial.set_user_attr(R.A_VALUES, values)
            trial.set_user_attr(R.A_KIND, kind)
            violations = self.space.violations(values)
            if violations:
                tell_rejected(study, trial, violations)
                rejected_in_a_row += 1
                if rejected_in_a_row >= MAX_REJECTED_IN_A_ROW:
                    raise NcclTuneError(
                        f"space {self.space.name}: {rejected_in_a_row} sampled configs in a row broke its rules "
                        f"(last: {violations[0]}); widen the ranges or check --set values"
                    )
                continue
            rejected_in_a_row = 0
            trials = study.get_trials(deepcopy=False)
            history = [R.record_of(t) for t in trials]
            original = self.measured_before(trials, history, values) if kind == TrialKind.SEARCH.value else None
            if original is not None:
                tell_duplicate(study, trial, original)
                duplicates_in_a_row += 1
                if duplicates_in_a_row >= MAX_DUPLICATES_IN_A_ROW:
                    self.display.note("the sampler keeps proposing configs already measured: the search has converged")
                    return False
                continue
            duplicates_in_a_row = 0
            if self.settings.predict_oom and kind == TrialKind.SEARCH.value:
                oom_from = predicted_oom(self.space, values, history)
                if oom_from is not None:
                    tell_predicted(study, trial, oom_from, FailureClass.OOM)
                    self.display.skipped(trial.number, f"needs at least the memory of trial {oom_from}, which ran out")
                    continue
            never_ok = not any(r.ok for r in history)
            result = self.run_one(study, trial, values, kind, history)
            launched_here += 1
            if result.status is FailureClass.INTERRUPTED:
                return True
            env_failures = env_failures + 1 if result.status.is_environment_failure else 0
            self.check_stop(result, first=never_ok, env_failures=env_failures)
        return False

    def confirm(self, study: optuna.Study, deadline: float | None) -> bool:
        """Re-run the best unconfirmed candidates once, until one faster than every unconfirmed
        one is confirmed or ``confirm`` re-runs are spent; True when interrupted."""
        for _ in range(self.settings.confirm):
            history = R.records(study)
            pending = to_confirm(history, 1)
            if not pending:
                return False
            cand = pending[0]
            if self.interrupt.is_set:
                return True
            if self._out_of_time(deadline):
                return False
            study.enqueue_trial(
                to_optuna(self.space, cand.values, self.pins.params),
                user_attrs={R.A_KIND: TrialKind.RERUN.value, R.A_RERUN_OF: cand.first.number},
            )
            trial = study.ask()
            values = suggest(trial, self.space, self.pins.params)
            trial.set_user_attr(R.A_VALUES, values)
            result = self.run_one(
                study, trial, values, f"re-run of trial {cand.first.number}", history, early_stop=False
            )
            if result.status is FailureClass.INTERRUPTED:
                return True
        return False


def _as_interrupted(result: TrialResult) -> TrialResult:
    from dataclasses import replace

    from nccl_tune.failure import Verdict
    from nccl_tune.trial import StopReason

    return replace(
        result,
        status=FailureClass.INTERRUPTED,
        stop_reason=StopReason.INTERRUPTED,
        verdict=Verdict(FailureClass.INTERRUPTED, advice="the tuner was interrupted; the trial runs again on resume"),
    )


def run_study(settings: RunSettings, console: Console | None = None, launcher: Launcher | None = None) -> StudyOutcome:
    """Run (or resume) the study described by ``settings``; see ``StudyOutcome.exit_code``."""
    return StudyRunner(settings, console or Console(stderr=True), launcher).run()
