"""Several trials at once (``--parallel N`` on a launcher with several nodes): the study's ask,
admission and tell stay on this thread; only ``Launcher.run`` calls go to N worker threads.

Each free slot gets a trial asked for and admitted as in the sequential loop; values equal to a
trial still running are not launched twice (told abandoned, so the sampler asks again). A trial is
told as soon as it ends, so the next ask already knows it.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Callable

import optuna

from nccl_tune.failure import FailureClass
from nccl_tune.trial import TrialResult
from nccl_tune.tuner import study_records as R
from nccl_tune.tuner.budget import Budget
from nccl_tune.tuner.telling import tell_abandoned


def search_parallel(loop: Any, study: optuna.Study, budget: Budget, slots: int, start: int = 0) -> bool:
    """``StudyLoop.search`` with up to ``slots`` trials running (``start``: trials launched before
    the search, not counted in ``--trials``); True when interrupted."""
    running: dict[Future, tuple[Any, ...]] = {}
    interrupted = stop = False
    with ThreadPoolExecutor(max_workers=slots, thread_name_prefix="trial") as pool:
        while True:
            while not stop and len(running) < slots and loop.runner.launched - start + len(running) < loop.settings.trials:
                if loop.interrupt.is_set or budget.search_over():
                    interrupted = interrupted or loop.interrupt.is_set
                    if not interrupted:
                        loop.display.note(loop.budget_note(budget))
                    stop = True
                    break
                started = _start_one(loop, study, running, pool.submit)
                if started is None:  # the search converged
                    stop = True
                    break
            if not running:
                return interrupted
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                trial, values, kind, history, spec = running.pop(future)
                with loop.runner.told_on_failure(study, trial):
                    result: TrialResult = loop.runner.finish(study, trial, values, kind, history, spec, future.result())
                budget.observe(result)
                if result.status is FailureClass.INTERRUPTED:
                    stop = interrupted = True
                else:
                    loop.stops.check(result, kind=kind, never_ok=not any(r.ok for r in history), values=values)


def _start_one(loop: Any, study: optuna.Study, running: dict, submit: Callable) -> bool | None:
    """Ask, admit and launch one trial; False when it was not launched, None when converged."""
    trial, values, kind = loop.ask(study)
    with loop.runner.told_on_failure(study, trial):
        trials = study.get_trials(deepcopy=False)
        history = [R.record_of(t) for t in trials]
        if not loop.admission.admit(study, trial, values, kind, trials, history):
            return None if loop.admission.converged else False
        twin = next((t for t, v, *_ in running.values() if v == values), None)
        if twin is not None:
            tell_abandoned(study, trial, f"the same values as trial {twin.number}, still running")
            return False
        spec, observer = loop.runner.begin(trial, values, kind, history)
        running[submit(loop.launcher.run, spec, observer)] = (trial, values, kind, history, spec)
    return True
