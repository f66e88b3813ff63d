"""Confirmation re-runs: after the search, the fastest candidates that ran only once run again,
until one faster than every unconfirmed candidate is confirmed or the re-runs are spent."""

from __future__ import annotations

import optuna

from nccl_tune.failure import FailureClass
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.sampling import suggest, to_optuna
from nccl_tune.tuner.records.semantics import study_reference, study_user_env
from nccl_tune.tuner.records.stability import to_confirm
from nccl_tune.tuner.records.study_records import TrialKind
from nccl_tune.tuner.search.failure_model import flaky_rule
from nccl_tune.tuner.study.budget import Budget
from nccl_tune.tuner.trials.display import Display
from nccl_tune.tuner.trials.observer import InterruptFlag
from nccl_tune.tuner.trials.trial_run import TrialRunner


def confirm(
    study: optuna.Study, runner: TrialRunner, reruns: int, budget: Budget, interrupt: InterruptFlag, display: Display
) -> bool:
    """Up to ``reruns`` re-runs of the best unconfirmed candidate; True when interrupted."""
    space, pinned = runner.space, runner.held.params
    for _ in range(reruns):
        history = R.records(study)
        pending = to_confirm(
            history, 1, study_reference(space, history), flaky_rule(space, history), study_user_env(space, history)
        )
        if not pending:
            return False
        cand = pending[0]
        if interrupt.is_set:
            return True
        if budget.spent():
            display.note("the run's --budget is spent: no confirmation re-run")
            return False
        study.enqueue_trial(
            to_optuna(space, cand.values, pinned),
            user_attrs={R.A_KIND: TrialKind.RERUN.value, R.A_RERUN_OF: cand.first.number},
        )
        trial = runner.ask(study)
        with runner.told_on_failure(study, trial):
            values = suggest(trial, space, pinned)
            trial.set_user_attr(R.A_VALUES, values)
            result = runner.run(study, trial, values, f"re-run of trial {cand.first.number}", history, early_stop=False)
        budget.observe(result)
        if result.status is FailureClass.INTERRUPTED:
            return True
    return False
