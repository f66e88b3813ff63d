"""Telling Optuna what a trial taught, so the sampler learns from failures too.

TPE learns only from COMPLETE and PRUNED trials, so a failed config is told as COMPLETE with
a violated constraint (``failed`` > 0): the sampler ranks it below every feasible trial and
steers away from its region. A config too close to the memory wall violates ``memory_wall``
by its headroom deficit. A trial stopped for being slower than the incumbent is PRUNED with
its partial throughput. Only a trial that says nothing about its values is FAIL: an interrupted
one, and one abandoned before its command started.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import optuna
from optuna.trial import TrialState

from nccl_tune.failure import FailureClass
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.trial import TrialResult
from nccl_tune.tuner.records.sampling import to_optuna
from nccl_tune.tuner.records.study_records import (
    A_ABANDONED,
    A_DUPLICATE_OF,
    A_HEADROOM,
    A_KIND,
    A_NEAR_WALL,
    A_PREDICTED_FROM,
    A_RESULT,
    A_STATUS,
    A_SWEEP_REFUSED,
    A_VIOLATIONS,
    A_WORST,
    TrialKind,
)
from nccl_tune.tuner.records.worst_case import WorstCase, judge

C_FAILED = "failed"
C_MEMORY_WALL = "memory_wall"
C_RULES = "rules"


def _constrain(trial: optuna.Trial, *, failed: float = -1.0, memory_wall: float = -1.0, rules: float = -1.0) -> None:
    """Every told trial carries the same constraints (> 0 violated), as every sampler expects."""
    trial.set_constraint(C_FAILED, failed)
    trial.set_constraint(C_MEMORY_WALL, memory_wall)
    trial.set_constraint(C_RULES, rules)


def near_wall(result: TrialResult, min_headroom_frac: float) -> bool:
    """``result``'s peak came within ``min_headroom_frac`` of the wall (``MemoryReport.near_wall``)."""
    return result.memory is not None and result.memory.near_wall(min_headroom_frac)


def worst_case_of(result: TrialResult, worst_tokens: float | None) -> WorstCase | None:
    """``result``'s memory at the longest batch its config allows: its own peak when it ran forced,
    else its steps' peaks fitted against their tokens and read at ``worst_tokens``."""
    mem = result.memory
    if mem is not None and mem.forced_worst and not mem.step_peak_frac and mem.max_peak_frac is not None:
        return judge((), (mem.max_peak_frac,), worst_tokens, True)  # a forced run's peak, whatever its steps gave
    if mem is None or not mem.step_peak_frac:
        return None
    return judge(result.step_tokens, mem.step_peak_frac, worst_tokens, mem.forced_worst)


def tell_result(
    study: optuna.Study,
    trial: optuna.Trial,
    result: TrialResult,
    min_headroom_frac: float,
    worst_tokens: float | None = None,
    forced: bool = False,
) -> None:
    """Record ``result`` in the trial's attributes and tell the study; ``worst_tokens``: the most
    tokens a step of its config can carry (``SearchSpace.worst_tokens``), for its worst case.
    ``forced``: the trial ran its longest batches (``TrialKind.FORCED``): its peak is its worst case,
    and the sampler hears nothing of it (FAIL), its throughput being no normal run's."""
    if forced and result.memory is not None:
        result = replace(result, memory=replace(result.memory, forced_worst=True))
    trial.set_user_attr(A_RESULT, result.to_json())
    trial.set_user_attr(A_STATUS, result.status.value)
    if result.status is FailureClass.INTERRUPTED:
        study.tell(trial, state=TrialState.FAIL)
        return
    if result.status is FailureClass.BUDGET and forced:
        study.tell(trial, state=TrialState.FAIL)
        return
    if result.status is FailureClass.BUDGET:
        partial = result.throughput_per_s
        if partial is not None:
            trial.report(partial, len(result.step_times_s))
        _constrain(trial)
        study.tell(trial, state=TrialState.PRUNED)
        return
    if result.status is FailureClass.OK:
        deficit = result.memory.headroom_deficit(min_headroom_frac) if result.memory is not None else None
        trial.set_user_attr(A_NEAR_WALL, near_wall(result, min_headroom_frac))
        trial.set_user_attr(A_HEADROOM, min_headroom_frac)
        worst = worst_case_of(result, worst_tokens)
        if worst is not None:
            trial.set_user_attr(A_WORST, worst.to_json())
            if worst.unfit(min_headroom_frac):
                over = max(worst.peak_frac - (1.0 - min_headroom_frac), worst.upper_frac - 1.0)
                deficit = max(deficit if deficit is not None else -1.0, over)
        if forced:
            study.tell(trial, state=TrialState.FAIL)
            return
        _constrain(trial, memory_wall=deficit if deficit is not None else -1.0)
        study.tell(trial, result.throughput_per_s or 0.0)
        return
    if forced:
        study.tell(trial, state=TrialState.FAIL)
        return
    _constrain(trial, failed=1.0)
    study.tell(trial, 0.0)


def tell_rejected(study: optuna.Study, trial: optuna.Trial, violations: list[str], sweep_refused: bool = False) -> None:
    """Values that break the space's rules, or (``sweep_refused``) whose NCCL values failed their check
    in the NCCL sweep: never launched, infeasible for the sampler."""
    trial.set_user_attr(A_VIOLATIONS, violations)
    if sweep_refused:
        trial.set_user_attr(A_SWEEP_REFUSED, True)
    _constrain(trial, rules=float(len(violations)))
    study.tell(trial, 0.0)


def tell_predicted(study: optuna.Study, trial: optuna.Trial, oom_trial: int, status: FailureClass | None) -> None:
    """Values predicted from trial ``oom_trial`` to fail (``status``) or to run too close to the
    memory wall to be stable (None): never launched, infeasible."""
    trial.set_user_attr(A_PREDICTED_FROM, oom_trial)
    if status is not None:
        trial.set_user_attr(A_STATUS, status.value)
    _constrain(trial, failed=1.0)
    study.tell(trial, 0.0)


def tell_duplicate(study: optuna.Study, trial: optuna.Trial, original: optuna.trial.FrozenTrial) -> None:
    """Values already measured in ``original``: not launched again; the sampler hears the same outcome."""
    trial.set_user_attr(A_DUPLICATE_OF, original.number)
    for key, value in original.constraints.items():
        trial.set_constraint(key, value)
    if original.state is TrialState.PRUNED:
        for step, value in original.intermediate_values.items():
            trial.report(value, step)
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, original.value if original.value is not None else 0.0)


def tell_abandoned(study: optuna.Study, trial: optuna.Trial, why: str) -> None:
    """Values asked for but never launched (the gate gave up, the tuner failed before the start):
    FAIL, with the reason, so that the study resumes cleanly and the sampler learns nothing."""
    trial.set_user_attr(A_ABANDONED, why)
    study.tell(trial, state=TrialState.FAIL)


def requeue(
    study: optuna.Study, space: SearchSpace, values: Mapping[str, Any], pinned: Mapping[str, Any], kind: str
) -> None:
    """Ask for ``values`` again next (an interrupted or abandoned trial); the baseline (and the
    nightly warm start) keep their kind. A forced trial is not asked for again here: the study
    forces its winner-to-be after the search, on this run or the next (``study.forcing``)."""
    if kind == TrialKind.FORCED.value:
        return
    again = kind if kind in (TrialKind.BASELINE.value, TrialKind.WARM_START.value) else TrialKind.RETRY.value
    study.enqueue_trial(to_optuna(space, values, pinned), user_attrs={A_KIND: again})
