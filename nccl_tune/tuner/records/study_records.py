"""What the study storage holds per trial, read back as ``TrialRecord`` values.

Optuna keeps the sampler's view (params, value, state, constraints); the rest lives in the
trial's user attributes under the keys below, so a study can be reported and exported from
its storage alone, after a crash or on another machine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from nccl_tune.failure import FailureClass
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.trial import StopReason, TrialResult
from nccl_tune.tuner.records.gpu_size import sized
from nccl_tune.tuner.records.worst_case import WorstCase

FINISHED = frozenset({FailureClass.OK, FailureClass.BUDGET})
"""Statuses of a launched run that did not fail: it ran its steps, or the tuner stopped it (slower
than the incumbent, or out of trial time)."""
A_VALUES = "values"
A_KIND = "kind"
A_WHY = "why"
"""Why the sampler proposed the trial (the default sampler's move and what it modelled)."""
A_ODDS = "odds"
"""What the default sampler predicted of the trial it proposed: ``{"fits": P(runs with the headroom
free), "gain": modelled change of log throughput over the incumbent}``; read back to measure how
well the odds are calibrated (``benchmarks/search.py``)."""
A_RERUN_OF = "rerun_of"
A_STATUS = "status"
A_RESULT = "result"
A_TRIAL_DIR = "trial_dir"
A_HOST = "host"
A_PID = "tuner_pid"
A_VIOLATIONS = "violations"
A_SWEEP_REFUSED = "nccl_sweep_refused"
"""A rejected trial's NCCL values failed their check in the NCCL sweep (``nccl_sweep.Sweep.refused``)."""
A_PREDICTED_FROM = "predicted_from"
A_NEAR_WALL = "near_wall"
A_HEADROOM = "min_headroom_frac"
"""The headroom a finished run was judged against (``near_wall``), to judge it again once the study
learns its GPU size (``gpu_size``)."""
A_WORST = "worst_case"
"""The run's memory at the longest batch its config allows (``worst_case.WorstCase``, as JSON)."""
A_DUPLICATE_OF = "duplicate_of"
A_ABANDONED = "abandoned"
"""Why a trial was asked but never launched (the node gate gave up, the tuner failed before the start)."""
A_PLANNED_STEPS = "planned_steps"
"""The steps (warm-up and measured) the trial was to run when it was launched."""


class TrialKind(str, Enum):
    BASELINE = "baseline"
    """The space's defaults: what the user runs today."""
    SEARCH = "search"
    RERUN = "rerun"
    """A repeat of an earlier trial's values, to confirm stability."""
    RETRY = "retry"
    """A repeat of a trial that was interrupted."""
    WARM_START = "warm_start"
    """The nightly baseline config (the series' previous best or ``--baseline FILE``), run first and repeated."""
    FORCED = "forced"
    """A repeat of an earlier trial's values forced to the longest batch its config allows (the space's
    ``stability.force_worst_case``): its memory and its failure judge the config's stability, its
    throughput is never compared with normal runs'."""


class Outcome(str, Enum):
    """How a record ended, from the study's point of view."""

    LAUNCHED = "launched"
    REJECTED = "rejected"
    """Not launched: the values break the space's rules."""
    PREDICTED = "predicted"
    """Not launched: predicted to fail (dominates a known OOM)."""
    DUPLICATE = "duplicate"
    """Not launched: the same values were already measured; told the sampler the same outcome."""
    ABANDONED = "abandoned"
    """Not launched: something failed between asking for the values and starting the command."""
    PENDING = "pending"
    """Running, or interrupted before a result was recorded."""


@dataclass(frozen=True)
class TrialRecord:
    number: int
    state: TrialState
    values: Mapping[str, Any]
    kind: TrialKind
    outcome: Outcome
    status: FailureClass | None
    result: TrialResult | None
    rerun_of: int | None = None
    near_wall: bool = False
    min_headroom_frac: float | None = None
    """The headroom ``near_wall`` was judged against (None before nccl-tune stored it)."""
    violations: tuple[str, ...] = ()
    sweep_refused: bool = False
    """Rejected because its NCCL values failed their check in the NCCL sweep (``violations`` says which)."""
    predicted_from: int | None = None
    trial_dir: str | None = None
    why: str | None = None
    """Why the default sampler proposed the trial (its move, the modelled gain, the odds it fits, or
    why its planner left the trial to TPE); None for the baseline, re-runs and other samplers."""
    planned_steps: int | None = None
    """The steps (warm-up and measured) the trial was to run; None when the study did not record
    them (trials launched before nccl-tune stored them)."""
    predicted_fits: float | None = None
    """The default sampler's odds that the trial runs with the headroom free (None when it did not propose it)."""
    predicted_fits_model: float | None = None
    """The memory model's own odds behind ``predicted_fits``, before the study shifted them
    (``fit_odds``); its odds as given for trials proposed before nccl-tune stored both."""
    predicted_gain: float | None = None
    """The default sampler's modelled change of log throughput over the incumbent, when it proposed the trial."""
    worst_case: WorstCase | None = None
    """Its memory at the longest batch its config allows (forced or predicted); None when neither
    the run nor the space says."""

    @property
    def headroom_frac(self) -> float:
        """The headroom its run was judged against (the space's default for runs stored before
        nccl-tune kept it)."""
        return self.min_headroom_frac if self.min_headroom_frac is not None else SearchSpace.min_headroom_frac

    @property
    def worst_unfit(self) -> bool:
        """Its worst case does not fit the headroom it was judged against: not stable, however its
        own steps went."""
        return self.worst_case is not None and self.worst_case.unfit(self.headroom_frac)

    @property
    def ok(self) -> bool:
        return self.status is FailureClass.OK and self.result is not None

    @property
    def forced(self) -> bool:
        """Run at the longest batch its config allows: its throughput compares with no normal run's."""
        return self.kind is TrialKind.FORCED

    @property
    def forcing_broke(self) -> bool:
        """A forced run refused, crashed or failed to start before its first step: the forcing
        setting broke the command (the same values ran without it), which says nothing of the values."""
        return (
            self.forced
            and self.failed
            and self.result is not None
            and not self.result.step_times_s
            and self.status in (FailureClass.CONFIG_ERROR, FailureClass.CRASH, FailureClass.INIT_FAILURE)
        )

    @property
    def throughput(self) -> float | None:
        """Measured throughput, in ``throughput_unit``."""
        return self.result.throughput_per_s if self.result else None

    @property
    def throughput_unit(self) -> str | None:
        return self.result.throughput_unit if self.result else None

    @property
    def peak_mem_gib(self) -> float | None:
        return self.result.peak_mem_gib if self.result else None

    @property
    def peak_phase(self) -> str | None:
        """The phase that held the run's peak (``MemoryReport.peak_phase``), when it says."""
        return self.result.memory.peak_phase if self.result and self.result.memory else None

    @property
    def tells_of_values(self) -> bool:
        """Launched, and its end says something of its values: not interrupted, and not failed for a
        cause none of them can bring about (``Verdict.from_outside``: a signal from outside, a faulty
        or busy GPU)."""
        return (
            self.outcome is Outcome.LAUNCHED
            and self.status is not FailureClass.INTERRUPTED
            and not (self.result is not None and self.result.verdict.from_outside)
            and not self.forcing_broke
        )

    @property
    def failed(self) -> bool:
        """Launched and failed: stopped for being slow or for running out of time (``budget``), or
        interrupted, is not a failure."""
        return (
            self.outcome is Outcome.LAUNCHED
            and self.result is not None
            and self.status not in FINISHED
            and self.status is not FailureClass.INTERRUPTED
        )

    @property
    def stopped_early(self) -> bool:
        """Stopped by the tuner as slower than the incumbent (screening or the early stop)."""
        return self.result is not None and self.result.stop_reason is StopReason.EARLY_STOP

    @property
    def unspent_s(self) -> float | None:
        """Seconds a trial stopped early did not run: its planned steps it did not reach, at its own
        mean step time (0 for a trial not stopped early; None when the planned steps are unknown)."""
        if self.result is None or not self.stopped_early:
            return 0.0
        steps = self.result.step_times_s
        if self.planned_steps is None or not steps:
            return None
        return max(0, self.planned_steps - len(steps)) * sum(steps) / len(steps)


def record_of(t: FrozenTrial) -> TrialRecord:
    a = t.user_attrs
    result = TrialResult.from_json(a[A_RESULT]) if a.get(A_RESULT) else None
    status_raw = a.get(A_STATUS)
    status = FailureClass(status_raw) if status_raw in FailureClass._value2member_map_ else None
    if a.get(A_VIOLATIONS) is not None:
        outcome = Outcome.REJECTED
    elif a.get(A_PREDICTED_FROM) is not None:
        outcome = Outcome.PREDICTED
    elif a.get(A_DUPLICATE_OF) is not None:
        outcome = Outcome.DUPLICATE
    elif a.get(A_ABANDONED) is not None and result is None:
        outcome = Outcome.ABANDONED
    elif result is not None:
        outcome = Outcome.LAUNCHED
    else:
        outcome = Outcome.PENDING
    return TrialRecord(
        number=t.number,
        state=t.state,
        values=dict(a.get(A_VALUES) or {}),
        kind=TrialKind(a.get(A_KIND, TrialKind.SEARCH.value)),
        outcome=outcome,
        status=status,
        result=result,
        rerun_of=a.get(A_RERUN_OF),
        near_wall=bool(a.get(A_NEAR_WALL)),
        min_headroom_frac=a.get(A_HEADROOM),
        violations=tuple(a.get(A_VIOLATIONS) or ()),
        sweep_refused=bool(a.get(A_SWEEP_REFUSED)),
        predicted_from=a.get(A_PREDICTED_FROM),
        trial_dir=a.get(A_TRIAL_DIR),
        why=a.get(A_WHY) or None,
        planned_steps=a.get(A_PLANNED_STEPS),
        predicted_fits=(a.get(A_ODDS) or {}).get("fits"),
        predicted_fits_model=(a.get(A_ODDS) or {}).get("fits_model", (a.get(A_ODDS) or {}).get("fits")),
        predicted_gain=(a.get(A_ODDS) or {}).get("gain"),
        worst_case=WorstCase.from_json(a.get(A_WORST)),
    )


def records_of(trials: Iterable[FrozenTrial]) -> list[TrialRecord]:
    """The records of ``trials``, their memory reports sized by what the study learned of its GPUs
    (``gpu_size``): a run that gave its peak in GiB alone reads as a share once any run gave the size,
    and is judged against the headroom again."""
    out = [record_of(t) for t in trials]
    ran = [i for i, r in enumerate(out) if r.result is not None]
    for i, result in zip(ran, sized([out[i].result for i in ran])):
        if result is not out[i].result:
            out[i] = _resized(out[i], result)
    return out


def _resized(record: TrialRecord, result: TrialResult) -> TrialRecord:
    h = record.min_headroom_frac
    near = h is not None and result.memory is not None and result.memory.near_wall(h)
    return replace(record, result=result, near_wall=record.near_wall or near)


def records(study: optuna.Study) -> list[TrialRecord]:
    return records_of(study.get_trials(deepcopy=False))
