"""Several trials at once (``--parallel N`` on a launcher with several nodes): the study's ask,
admission and tell stay on this thread; only ``Launcher.run`` calls go to N worker threads.

Each free slot gets a trial asked for and admitted as in the sequential loop; values equal to a
trial still running are not launched twice (told abandoned, so the sampler asks again). A trial is
told as soon as it ends, so the next ask already knows it. Once a trial has finished, the NCCL
sweep's checks (``nccl_sweep_run``) take the free slots before any new trial is asked for: the
baseline's alone, then the single changes side by side; each is recorded as it ends.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import optuna

from nccl_tune.failure import FailureClass
from nccl_tune.trial import TrialResult
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.nccl_sweep import BASELINE_KEY
from nccl_tune.tuner.records.telling import tell_abandoned
from nccl_tune.tuner.study.budget import Budget
from nccl_tune.tuner.study.nccl_sweep_run import SweepCheck, SweepPlan


def search_parallel(loop: Any, study: optuna.Study, budget: Budget, slots: int, start: int = 0) -> bool:
    """``StudyLoop.search`` with up to ``slots`` trials running (``start``: trials launched before
    the search, not counted in ``--trials``); True when interrupted."""
    running: dict[Future, tuple[Any, ...]] = {}
    sweep = _Sweep(loop, study)
    interrupted = stop = False
    with ThreadPoolExecutor(max_workers=slots, thread_name_prefix="trial") as pool:
        while True:
            while not stop and len(running) < slots:
                if loop.interrupt.is_set or budget.search_over():
                    interrupted = interrupted or loop.interrupt.is_set
                    if not interrupted:
                        loop.display.note(loop.budget_note(budget))
                    stop = True
                    break
                if (
                    loop.runner.launched - start + sum(not _is_check(j) for j in running.values())
                    >= loop.settings.trials
                ):
                    break
                if sweep.waiting(running):
                    if sweep.start_one(running, pool.submit):
                        continue
                    if running:
                        break  # the sweep's checks under way come first; the trials wait for them
                    sweep.over = True  # none may start and none runs: the search goes on without the rest
                started = _start_one(loop, study, running, pool.submit)
                if started is None:  # the search converged
                    stop = True
                    break
            if not running:
                return interrupted
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                job = running.pop(future)
                if _is_check(job):
                    interrupted = sweep.finish(job, future.result()) or interrupted
                    stop = stop or interrupted
                    continue
                trial, values, kind, history, spec = job
                with loop.runner.told_on_failure(study, trial):
                    result: TrialResult = loop.runner.finish(study, trial, values, kind, history, spec, future.result())
                budget.observe(result)
                if result.status is FailureClass.INTERRUPTED:
                    stop = interrupted = True
                else:
                    loop.stops.check(result, kind=kind, never_ok=not any(r.ok for r in history), values=values)


def _is_check(job: tuple[Any, ...]) -> bool:
    """A slot's job is a check of the NCCL sweep (``(SweepCheck,)``), not a trial."""
    return isinstance(job[0], SweepCheck)


class _Sweep:
    """The NCCL sweep's checks as jobs for the free slots (``StudyLoop.sweeper``; none when it does not
    run), from the first finished trial on."""

    def __init__(self, loop: Any, study: optuna.Study) -> None:
        self.loop, self.study = loop, study
        self.plan: SweepPlan | None = None
        self.over = loop.sweeper is None

    def waiting(self, running: dict) -> bool:
        """True while the sweep has checks to start or under way (the trials wait for them)."""
        if self.over:
            return False
        if self.plan is None:
            checker = self.loop.sweeper
            if checker.off is not None:
                self.over = True
                return False
            if not any(r.ok for r in R.records(self.study)):
                return False
            self.plan = SweepPlan(self.study, self.loop.runner, checker, self.loop.display)
            if self.plan.blocked:
                self.over = True
                return False
            self.plan.announce()
        if not self.plan.todo and not any(_is_check(j) for j in running.values()):
            self.over = True
        return not self.over

    def start_one(self, running: dict, submit: Any) -> bool:
        """Start the next check that may start now (the baseline's runs alone); False when none may."""
        assert self.plan is not None
        checks = [j[0] for j in running.values() if _is_check(j)]
        if not self.plan.todo or any(c.key == BASELINE_KEY for c in checks):
            return False
        if self.plan.todo[0].key == BASELINE_KEY and checks:
            return False
        check = self.plan.todo.pop(0)
        running[submit(self.plan.run, check)] = (check,)
        return True

    def finish(self, job: tuple[Any, ...], result: TrialResult) -> bool:
        """Record a check that ended; True when the tuner was interrupted during it."""
        assert self.plan is not None
        if result.status is FailureClass.INTERRUPTED:
            self.over = True
            return True
        if not self.plan.record(job[0], result):
            self.plan.todo.clear()
        return False


def _start_one(loop: Any, study: optuna.Study, running: dict, submit: Callable) -> bool | None:
    """Ask, admit and launch one trial; False when it was not launched, None when converged."""
    trial, values, kind = loop.ask(study)
    with loop.runner.told_on_failure(study, trial):
        trials = study.get_trials(deepcopy=False)
        history = R.records_of(trials)
        if not loop.admission.admit(study, trial, values, kind, trials, history):
            return None if loop.admission.converged else False
        twin = next((t for t, v, *_ in running.values() if v == values), None)
        if twin is not None:
            tell_abandoned(study, trial, f"the same values as trial {twin.number}, still running")
            return False
        spec, observer = loop.runner.begin(trial, values, kind, history)
        running[submit(loop.launcher.run, spec, observer)] = (trial, values, kind, history, spec)
    return True
