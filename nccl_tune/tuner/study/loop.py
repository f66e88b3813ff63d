"""The study: an Optuna ask / run / tell loop over trials, with resume, re-runs and a winner.

``run_study(settings)`` is what ``nccl-tune run`` calls. It opens (or resumes) the study, settles
the trials of a tuner that was killed (``recovery``), then searches (``scheduler``, in one slot or
``--parallel`` slots): **ask** Optuna for values, **admit** them or tell why not (``admission``:
rules, duplicates, predicted OOM), **run** the trial once the node is clean (``trial_run``), which
**tells** Optuna the result, and stop when a failure says the command or the node is broken
(``stop_rules``). Once a trial has finished, the NCCL sweep times each single NCCL change on the
collectives alone (``nccl_sweep_run``), for the default sampler to order them by. After the search the
winner-to-be runs once at its longest batch where the space says how (``forcing``), the best
candidates are re-run to confirm they are stable (``confirmation``), and a winner those changed is
forced in turn; the winner is the fastest config whose every run was ``ok`` away from the memory wall.
"""

from __future__ import annotations

import shlex
import socket
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import optuna
from rich.console import Console

from nccl_tune.launchers.base import Launcher
from nccl_tune.launchers.registry import make_launcher
from nccl_tune.nightly.fingerprint import Fingerprint
from nccl_tune.nightly.night import Night
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.search_spaces.skyrl_layout import chosen_space
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.hardware_record import hardware_facts, store_hardware
from nccl_tune.tuner.records.held import HeldParameters
from nccl_tune.tuner.records.pins import apply_pins, baseline_values
from nccl_tune.tuner.records.sampling import to_optuna
from nccl_tune.tuner.records.stability import Candidate
from nccl_tune.tuner.records.storage import create_or_resume, hold_study, open_storage, sqlite_path, study_folder
from nccl_tune.tuner.records.storage_faults import hide_password, storage_errors
from nccl_tune.tuner.records.study_records import TrialKind, TrialRecord
from nccl_tune.tuner.search.samplers import make_sampler
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.study.admission import Admission
from nccl_tune.tuner.study.budget import Budget
from nccl_tune.tuner.study.confirmation import confirm, measure_baseline
from nccl_tune.tuner.study.dry_run import first_values
from nccl_tune.tuner.study.forcing import Forcing
from nccl_tune.tuner.study.nccl_sweep_run import checking as nccl_checking
from nccl_tune.tuner.study.nccl_sweep_run import sweeper
from nccl_tune.tuner.study.night import check_runnable, finish_night, plan_night, start_night
from nccl_tune.tuner.study.preflight import check_before_trials, refuse_launcher_env
from nccl_tune.tuner.study.recovery import Recovery
from nccl_tune.tuner.study.scheduler import Scheduler
from nccl_tune.tuner.study.stop_rules import StopRules, refuse_unrankable
from nccl_tune.tuner.study.warm_start import warm_start
from nccl_tune.tuner.trials.display import Display
from nccl_tune.tuner.trials.observer import InterruptFlag
from nccl_tune.tuner.trials.trial_run import TrialRunner
from nccl_tune.tuner.winner.export import write_tuned
from nccl_tune.tuner.winner.study_view import StoredStudy, pick_speed_only, pick_winner, stored_of
from nccl_tune.tuner.winner.worst_proof import FAILS, UNPROVEN, fails_at_worst, fails_words, unproven_why


@dataclass(frozen=True)
class StudyOutcome:
    stored: StoredStudy
    """The study after the run (its winner is ``pick_winner``'s, as ``export`` sees it)."""
    winner: Candidate | None
    """This run's pick (``pick_winner``): the fastest stable config confirmed by a re-run, else the fastest
    stable one, unconfirmed (``stable`` says whether it is proven)."""
    launched: int
    """Trials launched by this run (re-runs included)."""
    confirmation_required: bool = True
    """The run asked for confirmation re-runs (``--confirm`` above 0)."""
    interrupted: bool = False
    resumed: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)
    """Lines for the person who ran it (where the tuned YAML went, what it holds)."""
    night: Night | None = None
    """The night's record (a run in a series, or compared with --baseline)."""
    fail_on_regression: bool = False
    """--fail-on-regression was given: a regression exits 3."""

    @property
    def regression(self) -> bool:
        return bool(self.night and self.night.verdict and self.night.verdict.regression)

    @property
    def study(self) -> str:
        return self.stored.name

    @property
    def storage_url(self) -> str:
        return self.stored.storage_url

    @property
    def space(self) -> SearchSpace:
        return self.stored.space

    @property
    def records(self) -> tuple[TrialRecord, ...]:
        return self.stored.records

    @property
    def baseline(self) -> Candidate | None:
        return self.stored.baseline

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        if self.fail_on_regression and self.regression:
            return 3
        return 0 if self.stable or self.fails_at_worst else 2

    @property
    def fails_at_worst(self) -> bool:
        """No config survives its worst batch: the winner is the fastest that passed its own trials
        (``worst_proof``); the run exits 0 with the warning."""
        return self.winner is not None and fails_at_worst(self.winner)

    @property
    def stable(self) -> bool:
        """A winner proven stable: confirmed by a re-run, or the run asked for no re-run."""
        return self.winner is not None and (self.winner.confirmed or not self.confirmation_required)


class StudyLoop:
    """One ``run_study`` call: the state shared by its steps."""

    def __init__(self, settings: RunSettings, console: Console, launcher: Launcher | None) -> None:
        self.settings = settings
        name, picked = chosen_space(settings.space, settings.command, Path.cwd())
        self.space, pins = apply_pins(load_space(name), settings.pins)
        refuse_unrankable(self.space, pins.params)
        refuse_launcher_env(settings, self.space, pins.params)
        self.held = HeldParameters(self.space, pins)
        """The held parameters: ``--set`` values, and parameters dropped during the study."""
        self.study_name = settings.study_name(self.space.name)
        launcher = launcher or make_launcher(settings.launcher, settings.ray_address, settings.gate_timeout_s)
        self.launcher, checking = nccl_checking(launcher, settings, self.space)
        self.display = Display(console, self.space)
        self.interrupt = InterruptFlag()
        for line in (picked, checking):
            if line is not None:
                self.display.note(line)
        self.runner = TrialRunner(
            self.space,
            self.held,
            settings,
            self.study_name,
            self.launcher,
            self.display,
            self.interrupt,
            socket.gethostname(),
        )
        self.admission = Admission(self.space, self.display, settings.predict_oom, self.held)
        self.stops = StopRules(self.space, self.held)
        self.scheduler = Scheduler(
            self.runner, self.admission, self.stops, sweeper(self.launcher, settings), settings.parallel
        )

    @cached_property
    def facts(self) -> dict[str, Any]:
        """This node and the command as trials see them (``hardware_facts``), probed once."""
        return hardware_facts(self.settings.command)

    @property
    def fingerprint(self) -> Fingerprint:
        return Fingerprint.from_json(self.facts["fingerprint"])

    def check(self) -> None:
        """Everything that refuses the run before its first trial, with nothing written yet (what
        ``--dry-run`` checks): a refused run leaves no study, folder or database behind."""
        first = self.runner.spec_for(0, first_values(self.space, self.held.params, self.settings.seed), [])
        check_before_trials(
            self.settings, self.space, self.held.params, self.study_name, self.launcher, first, lambda: self.fingerprint
        )

    def open(self, budget: Budget) -> tuple[optuna.Study, bool]:
        """Open (or create) the study, once ``check`` passed, and settle it; its sampler plans its last
        trials by ``budget`` too."""
        storage = open_storage(self.settings.storage_url)
        facts = self.facts
        self.plan = plan_night(
            storage,
            self.space,
            self.fingerprint,
            series=self.settings.series,
            baseline_file=self.settings.baseline_file,
            warm_start=self.settings.warm_start,
            fail_on_regression_pct=self.settings.fail_on_regression_pct,
        )
        check_runnable(self.plan, self.space, self.held.params)
        study, existed = create_or_resume(
            storage,
            self.settings.storage_url,
            self.study_name,
            make_sampler(
                self.settings.sampler,
                self.settings.seed,
                self.space,
                self.held,
                self.settings.trials,
                budget.search_trials_left,
            ),
            space_name=self.space.name,
            space_source=self.space.source,
            space_text=self.space.text,
            command=self.settings.command,
            folder=study_folder(self.settings.results, self.study_name),
        )
        done = sum(r.outcome is R.Outcome.LAUNCHED for r in R.records(study)) if existed else 0
        self.display.header(
            self.study_name,
            hide_password(self.settings.storage_url),
            existed,
            done,
            self.settings.trials,
            shlex.join(self.settings.command),
        )
        self.held.read(study)
        if existed:
            recovery = Recovery(self.space, self.held, self.launcher, self.display)
            recovery.run(study, storage, self.settings.storage_url, self.runner.host)
        elif not self.plan.warm_start:
            self.enqueue_baseline(study)
        store_hardware(study, facts)
        start_night(study, self.plan, existed)
        return study, existed

    def enqueue_baseline(self, study: optuna.Study) -> None:
        values = baseline_values(self.space, self.held.params)
        if values is None:
            self.display.note("the space's defaults are incomplete or break its rules: no baseline trial")
            return
        study.enqueue_trial(
            to_optuna(self.space, values, self.held.params), user_attrs={R.A_KIND: TrialKind.BASELINE.value}
        )

    def run(self) -> StudyOutcome:
        forcing = (
            1 if self.space.force_worst_case and self.settings.force_worst_case else 0
        )  # the search leaves time for one forced run
        budget = Budget(self.settings.budget_s, self.settings.confirm, forcing)
        study, existed = self.open(budget)
        budget.begin()
        budget.observe_all(R.records(study))
        interrupted = False
        try:
            with self.interrupt:
                self.launcher.before_study()
                if self.plan.warm_start:
                    interrupted = warm_start(study, self.runner, self.plan, budget, self.interrupt, self.display)
                    budget.observe_all(R.records(study))
                interrupted = interrupted or self.search(study, budget)
                interrupted = interrupted or self.judge(study, budget)
        finally:
            self.display.close()
            self.launcher.close()
        stored = stored_of(study, self.settings.storage_url, self.space)
        required = self.settings.confirm > 0
        winner = pick_winner(stored.records, self.space, prefer_confirmed=required, flaky=stored.flaky)
        speed = pick_speed_only(stored.records, self.space, prefer_confirmed=required, flaky=stored.flaky)
        stored = replace(stored, speed_only=speed)
        proven = winner if winner is not None and (winner.confirmed or not required) else None
        proven = None if proven is not None and fails_at_worst(proven) else proven
        night = finish_night(study, self.plan, self.fingerprint, stored.records, proven, interrupted)
        return StudyOutcome(
            stored,
            winner,
            self.runner.launched,
            confirmation_required=required,
            interrupted=interrupted,
            resumed=existed,
            night=night,
            fail_on_regression=self.settings.fail_on_regression_pct is not None,
        )

    def judge(self, study: optuna.Study, budget: Budget) -> bool:
        """After the search: force the winner-to-be to its longest batch (where none is left, run
        the configs failed forced runs asked for, and force those), confirm the best by re-runs,
        then force the winner if the re-runs changed it, and measure the baseline at the winner's
        step count; True when interrupted."""
        required = self.settings.confirm > 0
        forcing = self.scheduler.forcing or Forcing(self.runner, budget, self.interrupt, self.display)
        while True:
            if forcing.run(study, required):
                return True
            launched = self.runner.launched
            if self.scheduler.repair(study, budget, forcing):
                return True
            if self.runner.launched == launched:
                break
        if required and confirm(study, self.runner, self.settings.confirm, budget, self.interrupt, self.display):
            return True
        if forcing.run(study, required):
            return True
        return required and measure_baseline(study, self.runner, budget, self.interrupt, self.display, required=True)

    def search(self, study: optuna.Study, budget: Budget) -> bool:
        """Ask, admit, run and tell until ``--trials`` trials ran; True when interrupted (warm-start
        runs come on top of ``--trials``, as re-runs and forced runs do)."""
        self.scheduler.forcing = Forcing(self.runner, budget, self.interrupt, self.display)
        return self.scheduler.search(study, budget, self.settings.trials)


def run_study(settings: RunSettings, console: Console | None = None, launcher: Launcher | None = None) -> StudyOutcome:
    """Run (or resume) the study described by ``settings`` and write its winner to
    ``settings.output``; see ``StudyOutcome.exit_code`` and ``StudyOutcome.notes``."""
    loop = StudyLoop(settings, console or Console(stderr=True), launcher)
    loop.check()
    url = settings.storage_url
    with hold_study(study_folder(settings.results, loop.study_name), loop.study_name):
        with storage_errors(url, sqlite_path(url)):
            outcome = loop.run()
    if settings.output is None or outcome.winner is None or outcome.interrupted:
        return outcome
    return replace(outcome, notes=outcome.notes + tuple(deliver_tuned(settings.output, outcome)))


def deliver_tuned(path: Path, outcome: StudyOutcome) -> list[str]:
    """Write the run's winner to ``path`` (keeping a file already there as ``NAME.prev.yaml``);
    the lines that say what was written."""
    previous = write_tuned(path, outcome.stored, outcome.winner)
    lines = [f"tuned YAML: {path}"]
    if previous is not None:
        lines.append(f"the previous tuned YAML is kept as {previous}")
    unproven = unproven_why(outcome.space, outcome.winner)
    if unproven is not None:
        lines.append(f"{path} holds a winner {UNPROVEN} (metrics.worst_case.stable): {unproven}")
    if outcome.fails_at_worst:
        lines.append(
            f"{path} holds a winner that {FAILS} (metrics.worst_case.stable): no config survived its longest "
            f"batch; trial {outcome.winner.first.number} is the fastest that passed its own trials: "
            f"{fails_words(outcome.space, outcome.winner)}"
        )
    elif not outcome.stable:
        lines.append(
            f"no config was confirmed by a re-run: {path} holds the fastest stable one (trial "
            f"{outcome.winner.first.number}), marked unconfirmed (metrics.confirmed: false); run the same "
            "command again to confirm it"
        )
    return lines
