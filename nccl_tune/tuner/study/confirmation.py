"""Confirmation re-runs: after the search, the fastest candidates not yet confirmed run again,
until one faster than every unconfirmed candidate is confirmed or the re-runs are spent.

A re-run that disagrees with its config's first run (further apart than their steps' noise allows:
``records.agreement``) confirms nothing: the run says so, and when the re-runs are spent it gives
that config one more run (once a study run, while the ``--budget`` lasts), so that the two of three
that agree can confirm it. The same one more run goes to the winner rule's new pick when a re-run
moved it to a config no run has confirmed: a re-run widens the measured noise, and a config that
changes the training less than the one re-run can come within it (``records.stability``). A re-run
left over once the winner is confirmed goes to the speed-only pick (the fastest stable config that
keeps the training as the user runs it, ``study_view.pick_speed_only``) when that is another
config, neither the winner nor the user's own run: a user who will not shorten the prompts exports it, and an export that says "NOT confirmed"
leaves the doubt to them. Then, before a speed-up is quoted, the baseline is re-run at the
measured steps of the winner when none of its runs measured as many (``records.speedup``).
"""

from __future__ import annotations

import optuna

from nccl_tune.failure import FailureClass
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.trial import TrialResult
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.sampling import suggest, to_optuna
from nccl_tune.tuner.records.semantics import study_reference, study_user_env
from nccl_tune.tuner.records.speedup import baseline_steps_wanted
from nccl_tune.tuner.records.stability import Candidate, baseline, candidates, run_key, to_confirm
from nccl_tune.tuner.records.study_records import TrialKind
from nccl_tune.tuner.search.failure_model import flaky_rule
from nccl_tune.tuner.study.budget import Budget, Gate
from nccl_tune.tuner.trials.display import Display
from nccl_tune.tuner.trials.observer import InterruptFlag
from nccl_tune.tuner.trials.trial_run import TrialRunner
from nccl_tune.tuner.winner.study_view import pick_speed_only, pick_winner


def confirm(
    study: optuna.Study, runner: TrialRunner, reruns: int, budget: Budget, interrupt: InterruptFlag, display: Display
) -> bool:
    """Up to ``reruns`` re-runs of the best unconfirmed candidate (one more to settle a pair that
    disagrees, once), and one left over of the speed-only pick (``confirm_speed_only``); True when
    interrupted."""
    space = runner.space
    left, spare = reruns, 1
    while left > 0:
        history = R.records(study)
        pending = to_confirm(
            history, 1, study_reference(space, history), flaky_rule(space, history), study_user_env(space, history)
        )
        if not pending:
            return confirm_speed_only(study, runner, budget, interrupt, display)
        left -= 1
        cand = pending[0]
        gate = budget.gate(interrupt, display, "no confirmation re-run")
        if gate is not Gate.GO:
            return gate is Gate.INTERRUPTED
        result = rerun(study, runner, cand, f"re-run of trial {cand.first.number}", budget)
        if result.status is FailureClass.INTERRUPTED:
            return True
        disagrees = _disagrees(study, cand, display)
        why = _one_more(study, space, cand, disagrees) if left == 0 and spare else None
        if why:
            display.note(why)
            left, spare = 1, 0
    return False


def _one_more(study: optuna.Study, space: SearchSpace, cand: Candidate, disagrees: bool) -> str | None:
    """Why the run of ``cand`` just made calls for one more re-run: its runs disagree
    (``disagrees``), or it moved the winner rule's pick to a config no run has confirmed (module
    docstring); None when neither. Asked only while a run is spare: the pick reads the study's
    failure model."""
    if disagrees:
        return f"one more run of trial {cand.first.number}'s config, to tell which run was off"
    pick = pick_winner(R.records(study), space)
    if pick is None or pick.confirmed or run_key(pick.values) == run_key(cand.values):
        return None
    return (
        f"the re-run of trial {cand.first.number} moved the pick to trial {pick.first.number}, which no run has "
        "confirmed: one more re-run, to confirm it"
    )


def confirm_speed_only(
    study: optuna.Study, runner: TrialRunner, budget: Budget, interrupt: InterruptFlag, display: Display
) -> bool:
    """One re-run of the speed-only pick when it ran once and is neither the winner nor the
    baseline (module docstring), while the ``--budget`` lasts; True when interrupted."""
    space = runner.space
    history = R.records(study)
    flaky = flaky_rule(space, history)
    speed = pick_speed_only(history, space, flaky=flaky)
    if speed is None or speed.confirmed or len(speed.ok_runs) != 1 or speed.is_baseline:
        return False
    winner = pick_winner(history, space, flaky=flaky)
    if winner is not None and run_key(winner.values) == run_key(speed.values):
        return False
    gate = budget.gate(interrupt, display, "the speed-only config is not re-run")
    if gate is not Gate.GO:
        return gate is Gate.INTERRUPTED
    number = speed.first.number
    display.note(
        f"a re-run is left: confirming trial {number}, the fastest config that keeps the training as you run it"
    )
    result = rerun(study, runner, speed, f"re-run of trial {number}, speed only", budget)
    if result.status is not FailureClass.INTERRUPTED:
        _disagrees(study, speed, display)
    return result.status is FailureClass.INTERRUPTED


def rerun(
    study: optuna.Study, runner: TrialRunner, cand: Candidate, label: str, budget: Budget, steps: int | None = None
) -> TrialResult:
    """Launch one more run of ``cand``'s values (``steps``: its measured steps, else the study's count)."""
    space, pinned = runner.space, runner.held.params
    history = R.records(study)
    study.enqueue_trial(
        to_optuna(space, cand.values, pinned),
        user_attrs={R.A_KIND: TrialKind.RERUN.value, R.A_RERUN_OF: cand.first.number},
    )
    trial = runner.ask(study)
    with runner.told_on_failure(study, trial):
        values = suggest(trial, space, pinned)
        trial.set_user_attr(R.A_VALUES, values)
        result = runner.run(study, trial, values, label, history, early_stop=False, steps=steps)
    budget.observe(result)
    return result


def _disagrees(study: optuna.Study, cand: Candidate, display: Display) -> bool:
    """True (and said) when ``cand``'s runs, its latest included, do not agree within their noise."""
    key = run_key(cand.values)
    now = next((c for c in candidates(R.records(study)) if run_key(c.values) == key), None)
    pair = now.disagreement if now is not None else None
    if pair is None:
        return False
    display.note(f"not confirmed: {pair.words()}")
    return True


def measure_baseline(
    study: optuna.Study, runner: TrialRunner, budget: Budget, interrupt: InterruptFlag, display: Display, required: bool
) -> bool:
    """Re-run the baseline at the measured steps of the winner (``pick_winner``, confirmed first when
    ``required``) when none of its runs measured as many, while the ``--budget`` lasts; True when
    interrupted."""
    history = R.records(study)
    winner, base = pick_winner(history, runner.space, prefer_confirmed=required), baseline(history)
    steps = baseline_steps_wanted(winner, base) if winner is not None and base is not None else None
    if steps is None:
        return interrupt.is_set
    gate = budget.gate(interrupt, display, "the baseline is not re-run at the winner's steps")
    if gate is not Gate.GO:
        return gate is Gate.INTERRUPTED
    display.note(
        f"the baseline measured fewer or more steps than trial {winner.first.number}: re-running it at "
        f"{steps} measured steps before quoting a speed-up"
    )
    result = rerun(study, runner, base, f"re-run of the baseline at {steps} steps", budget, steps)
    return result.status is FailureClass.INTERRUPTED
