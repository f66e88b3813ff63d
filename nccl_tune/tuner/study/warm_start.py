"""``--warm-start``: before the search, the night's baseline config runs ``WARM_RUNS`` times, so
the night knows its speed and its noise today; a failed run ends the repeats (the failure is the
night's verdict) and the search goes on as usual."""

from __future__ import annotations

import optuna
from optuna.trial import TrialState

from nccl_tune.failure import FailureClass
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.sampling import suggest, to_optuna
from nccl_tune.tuner.records.stability import values_key
from nccl_tune.tuner.records.study_records import TrialKind
from nccl_tune.tuner.study.budget import Budget, Gate
from nccl_tune.tuner.study.night import WARM_RUNS, NightPlan, baseline_runs
from nccl_tune.tuner.trials.display import Display
from nccl_tune.tuner.trials.observer import InterruptFlag
from nccl_tune.tuner.trials.trial_run import TrialRunner


def warm_start(
    study: optuna.Study,
    runner: TrialRunner,
    plan: NightPlan,
    budget: Budget,
    interrupt: InterruptFlag,
    display: Display,
) -> bool:
    """Runs of the baseline config until ``WARM_RUNS`` are in the study (a resumed night counts
    those it has) or one fails; True when interrupted."""
    assert plan.baseline is not None
    space, pinned = runner.space, runner.held.params
    origin = f"{plan.baseline.source} {plan.baseline.origin}"
    while True:
        history = R.records(study)
        done = baseline_runs(plan.baseline, history)
        if len(done) >= WARM_RUNS or any(not r.ok for r in done):
            return False
        gate = budget.gate(interrupt, display, "no more runs of the baseline config")
        if gate is not Gate.GO:
            return gate is Gate.INTERRUPTED
        if not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            study.enqueue_trial(
                to_optuna(space, plan.baseline.values, pinned), user_attrs={R.A_KIND: TrialKind.WARM_START.value}
            )
        trial = runner.ask(study)
        with runner.told_on_failure(study, trial):
            values = suggest(trial, space, pinned)
            trial.set_user_attr(R.A_VALUES, values)
            if values_key(values) == values_key(plan.baseline.values):
                trial.set_user_attr(R.A_KIND, TrialKind.WARM_START.value)
                kind = f"warm start {len(done) + 1}/{WARM_RUNS} (best of {origin})"
            else:  # a trial queued before (a resumed night's interrupted one) comes first
                kind = trial.user_attrs.get(R.A_KIND, TrialKind.RETRY.value)
            result = runner.run(study, trial, values, kind, history, early_stop=False)
        if result.status is FailureClass.INTERRUPTED:
            return True
