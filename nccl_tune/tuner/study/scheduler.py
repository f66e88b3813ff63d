"""The search's one step loop, with a number of slots: one slot is the sequential study, N slots run
N trials at once (``--parallel N`` on a launcher with several nodes).

Each free slot gets a trial asked for and admitted on this thread; the node is gated and the
trial begun here too, and only ``Launcher.run`` goes to the slot (a worker thread; with one slot it
runs here, in turn). Values equal to a trial still running are not launched twice (told abandoned,
so the sampler asks again). A trial is told as soon as it ends, so the next ask already knows it,
and the stop rules judge it then. Once a trial has finished, the NCCL sweep's checks
(``nccl_sweep_run``) take the free slots before any new trial is asked for: the baseline's alone,
then the single changes (side by side when there are several slots); each is recorded as it ends.
In one slot, from half the trials on, the leader is forced to its longest batch between trials
(``forcing``; forced runs are not search trials). The loop ends when ``--trials`` trials ran, the budget leaves no search trial, the search
converged, or the tuner is interrupted; running jobs are waited for.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import optuna

from nccl_tune.failure import FailureClass
from nccl_tune.launchers.nccl_check import CheckingLauncher
from nccl_tune.trial import TrialResult, TrialSpec
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.nccl_sweep import BASELINE_KEY
from nccl_tune.tuner.records.sampling import suggest
from nccl_tune.tuner.records.study_records import TrialKind, TrialRecord
from nccl_tune.tuner.records.telling import tell_abandoned
from nccl_tune.tuner.study.admission import Admission
from nccl_tune.tuner.study.budget import Budget, Gate
from nccl_tune.tuner.study.forcing import Forcing
from nccl_tune.tuner.study.nccl_sweep_run import SweepCheck, SweepPlan
from nccl_tune.tuner.study.stop_rules import StopRules
from nccl_tune.tuner.trials.trial_run import TrialRunner


class InlineExecutor(Executor):
    """One slot: a job runs when it is submitted, on this thread (the sequential study)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the one who waits on the future
            future.set_exception(exc)
        return future


@dataclass(frozen=True)
class TrialJob:
    """A launched trial in a slot."""

    trial: optuna.Trial
    values: dict[str, Any]
    kind: str
    history: tuple[TrialRecord, ...]
    """The study's records when it was admitted."""
    spec: TrialSpec


class Scheduler:
    """The search of one run: ask, admit, launch into the free slots and tell, until it ends."""

    def __init__(
        self,
        runner: TrialRunner,
        admission: Admission,
        stops: StopRules,
        sweeper: CheckingLauncher | None,
        slots: int,
    ) -> None:
        self.runner, self.admission, self.stops, self.slots = runner, admission, stops, slots
        self.sweeper = sweeper
        """The launcher the NCCL sweep runs its checks with (None: the sweep does not run)."""
        self.running: dict[Future, TrialJob | SweepCheck] = {}
        self._plan: SweepPlan | None = None
        self._sweep_over = sweeper is None or sweeper.off is not None
        self.forcing: Forcing | None = None
        """Forces the leader between trials of a one-slot search (``forcing.Forcing.between``)."""

    def search(self, study: optuna.Study, budget: Budget, trials: int) -> bool:
        """Run up to ``trials`` search trials; True when interrupted."""
        pool: Executor = InlineExecutor() if self.slots == 1 else ThreadPoolExecutor(self.slots, "trial")
        start, interrupted, stop = self.runner.launched, False, False
        forced_before = self.forcing.launched if self.forcing is not None else 0

        def searched() -> int:
            forced = self.forcing.launched - forced_before if self.forcing is not None else 0
            return self.runner.launched - start - forced

        with pool:
            while True:
                if self._force_now(searched(), trials) and not stop and self.forcing.between(study):
                    stop = interrupted = True
                while not stop and len(self.running) < self.slots:
                    if self.runner.interrupt.is_set or budget.search_over():
                        interrupted = self.runner.interrupt.is_set
                        if not interrupted:
                            self.runner.display.note(budget.note())
                        stop = True
                    elif searched() + self._trials_running() >= trials:
                        break
                    elif self._sweep_waiting(study):
                        if not self._start_check(pool) and self.running:
                            break  # the sweep's checks under way come first; the trials wait for them
                        if not self.running:
                            self._sweep_over = True  # none may start and none runs: search without the rest
                    elif self._start_repair(study) and self._start_trial(study, pool) is None:
                        stop = True  # the search converged
                if not self.running:
                    return interrupted
                done, _ = wait(self.running, return_when=FIRST_COMPLETED)
                for future in done:
                    if self._end(study, future, budget):
                        stop = interrupted = True

    def repair(self, study: optuna.Study, budget: Budget, forcing: Forcing) -> bool:
        """After the search, where no config is left to force: run the configs the failed forced
        runs asked for (``Forcing.repair``), one at a time while the deadline has not passed; each
        comes on top of ``--trials``, as forced runs do, since without it no config may survive its
        longest batch. True when interrupted."""
        pool = InlineExecutor()
        while forcing.repairs and forcing.winner_to_be(study) is None:
            gate = budget.gate(
                self.runner.interrupt, self.runner.display, "the config a forced run asked for is not run"
            )
            if gate is not Gate.GO:
                return gate is Gate.INTERRUPTED
            forcing.next_repair(study)
            self._start_trial(study, pool)
            for future in list(self.running):
                if self._end(study, future, budget):
                    return True
        return False

    def _force_now(self, searched: int, trials: int) -> bool:
        """Force the leader now: one slot, nothing running, half the search's trials run or more."""
        return (
            self.forcing is not None
            and self.slots == 1
            and not self.running
            and searched >= max(1, trials // 2)
            and not self.runner.interrupt.is_set
        )

    def _start_repair(self, study: optuna.Study) -> bool:
        """Queue the config a failed forced run asked for, if any, as the next trial (always True)."""
        if self.forcing is not None:
            self.forcing.next_repair(study)
        return True

    def _trials_running(self) -> int:
        return sum(isinstance(job, TrialJob) for job in self.running.values())

    def _end(self, study: optuna.Study, future: Future, budget: Budget) -> bool:
        """Tell the study how a job ended; True when the tuner was interrupted during it."""
        job = self.running.pop(future)
        if isinstance(job, SweepCheck):
            return self._end_check(job, future.result())
        with self.runner.told_on_failure(study, job.trial):
            result = self.runner.finish(study, job.trial, job.values, job.kind, job.history, job.spec, future.result())
        budget.observe(result)
        if result.status is FailureClass.INTERRUPTED:
            return True
        never_ok = not any(r.ok for r in job.history)
        self.stops.check(result, kind=job.kind, never_ok=never_ok, values=job.values)
        return False

    def ask(self, study: optuna.Study) -> tuple[optuna.Trial, dict[str, Any], str]:
        """Optuna's next trial, its values and its kind (baseline, search, retry), recorded in it."""
        trial = self.runner.ask(study)
        values = suggest(trial, self.runner.space, self.runner.held.params)
        kind = trial.user_attrs.get(R.A_KIND, TrialKind.SEARCH.value)
        trial.set_user_attr(R.A_VALUES, values)
        trial.set_user_attr(R.A_KIND, kind)
        why = getattr(study.sampler, "why", None)
        reason = why(trial.number, values) if callable(why) else None
        if reason:
            trial.set_user_attr(R.A_WHY, reason)
        odds = getattr(study.sampler, "odds", None)
        predicted = odds(trial.number, values) if callable(odds) else None
        if predicted:
            trial.set_user_attr(R.A_ODDS, predicted)
        return trial, values, kind

    def _start_trial(self, study: optuna.Study, pool: Executor) -> bool | None:
        """Ask, admit and launch one trial; False when it was not launched, None when converged."""
        trial, values, kind = self.ask(study)
        with self.runner.told_on_failure(study, trial):
            trials = study.get_trials(deepcopy=False)
            history = R.records_of(trials)
            if not self.admission.admit(study, trial, values, kind, trials, history):
                return None if self.admission.converged else False
            twin = next(
                (j.trial for j in self.running.values() if isinstance(j, TrialJob) and j.values == values), None
            )
            if twin is not None:
                tell_abandoned(study, trial, f"the same values as trial {twin.number}, still running")
                return False
            self.runner.launcher.gate()
            spec, observer = self.runner.begin(trial, values, kind, history)
            job = TrialJob(trial, values, kind, tuple(history), spec)
            self.running[pool.submit(self.runner.launcher.run, spec, observer)] = job
        return True

    def _sweep_waiting(self, study: optuna.Study) -> bool:
        """True while the sweep has checks to start or under way (the trials wait for them); its plan
        is made once a trial has finished."""
        if self._sweep_over:
            return False
        if self._plan is None:
            if not any(r.ok for r in R.records(study)):
                return False
            assert self.sweeper is not None
            self._plan = SweepPlan(study, self.runner, self.sweeper, self.runner.display)
            if self._plan.blocked:
                self._sweep_over = True
                return False
            self._plan.announce()
        if not self._plan.todo and not any(isinstance(j, SweepCheck) for j in self.running.values()):
            self._sweep_over = True
        return not self._sweep_over

    def _start_check(self, pool: Executor) -> bool:
        """Start the next check that may start now (the baseline's runs alone); False when none may."""
        assert self._plan is not None
        checks = [j for j in self.running.values() if isinstance(j, SweepCheck)]
        if not self._plan.todo or any(c.key == BASELINE_KEY for c in checks):
            return False
        if self._plan.todo[0].key == BASELINE_KEY and checks:
            return False
        check = self._plan.todo.pop(0)
        self.running[pool.submit(self._plan.run, check)] = check
        return True

    def _end_check(self, check: SweepCheck, result: TrialResult) -> bool:
        """Record a check that ended; True when the tuner was interrupted during it."""
        assert self._plan is not None
        if result.status is FailureClass.INTERRUPTED:
            self._sweep_over = True
            return True
        if not self._plan.record(check, result):
            self._plan.todo.clear()
        return False
