"""Which asked-for values are launched: the gate between Optuna's ask and a trial's start.

Values are not launched, and are told to the study at once, when they
- break the space's rules, or an expression of the space fails on them (``rejected``:
  infeasible for the sampler, with the rule's message or the expression's error);
- were already measured by a launched trial, or are values NCCL runs as it ran a launched
  trial's, a setting past one of its limits being clamped (``node.nccl_clamps``); ``duplicate``:
  the sampler hears the same outcome;
- are the baseline's NCCL values with one change whose check failed in the NCCL sweep
  (``nccl_sweep.Sweep.refused``: rejected, with that reason; the trial would fail at its own check);
- are refused by the memory model (``memory_model.MemoryModel.verdict``: they need at least the
  memory of a known OOM or of a run within the headroom, or are predicted with confidence to run
  out or to come within the headroom of the wall; ``predicted``).
Re-runs, retries and the baseline skip the last two checks: they are asked for on purpose.

The search has converged when the sampler keeps proposing values that are not launched: 50
measured ones in a row, ``MAX_REFUSED_IN_A_ROW`` refused ones (the sweep, the memory model, a
failed forced run), or, in a space small enough to list (``MAX_LISTED`` configs), as soon as every
config that keeps its rules has been run or is refused now. In a larger space, the values of the
parameters that move memory may still be few: when each of their combinations holds at least the
memory of a failed forced run, no value of the others (NCCL's variables) makes a config stable.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from nccl_tune.errors import NcclTuneError
from nccl_tune.node.nccl_clamps import clamps
from nccl_tune.search_spaces.expr import ExprError
from nccl_tune.search_spaces.space import MemoryEffect, SearchSpace
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.held import HeldParameters
from nccl_tune.tuner.records.nccl_sweep import load as load_sweep
from nccl_tune.tuner.records.stability import run_key
from nccl_tune.tuner.records.study_records import TrialKind, TrialRecord
from nccl_tune.tuner.records.telling import tell_duplicate, tell_predicted, tell_rejected
from nccl_tune.tuner.search.forced_bound import ForcedFailures
from nccl_tune.tuner.search.memory_model import MemoryModel, memory_verdict
from nccl_tune.tuner.trials.display import Display

MAX_REJECTED_IN_A_ROW = 2000
MAX_DUPLICATES_IN_A_ROW = 50
MAX_REFUSED_IN_A_ROW = 200
MAX_LISTED = 512
"""A space with more free configs than this is not listed to see whether any is left to run."""
MAX_LEFT_JUDGED = 64
"""More configs than this not yet run are not each put to the memory model: the search goes on."""


def rule_violations(space: SearchSpace, values: Mapping[str, Any]) -> list[str]:
    """The rules ``values`` break; when none, every derived value and the samples per step are
    evaluated too, so that ``ExprError`` (division by zero) is raised here and not at launch."""
    broken = space.violations(values)
    if not broken:
        space.derived_values(values)
        space.samples(values)
        space.worst_tokens(values)
    return broken


def measured_before(
    trials: Sequence[FrozenTrial], history: Sequence[TrialRecord], values: Mapping[str, Any]
) -> FrozenTrial | None:
    """The first launched, finished trial that ran these values, or values NCCL runs alike
    (``stability.run_key``; interrupted ones do not count); ``history`` holds the records of
    ``trials``, in the same order."""
    key = run_key(values)
    for t, rec in zip(trials, history):
        if (
            t.state in (TrialState.COMPLETE, TrialState.PRUNED)
            and rec.outcome is R.Outcome.LAUNCHED
            and run_key(rec.values) == key
        ):
            return t
    return None


def within_rules(space: SearchSpace, values: Mapping[str, Any]) -> bool:
    try:
        return not rule_violations(space, values)
    except ExprError:
        return False


def launchable_configs(space: SearchSpace, pinned: Mapping[str, Any]) -> dict[str, dict[str, Any]] | None:
    """Every config of the space that keeps its rules, by run key (``stability.run_key``), the
    ``pinned`` values held; None when the free parameters make more than ``MAX_LISTED`` configs."""
    free = space.free(pinned)
    if math.prod(len(p.choices) for p in free) > MAX_LISTED:
        return None
    held = {p.name: pinned.get(p.name, p.choices[0]) for p in space.parameters if p not in free}
    configs: dict[str, dict[str, Any]] = {}
    for combo in itertools.product(*(p.choices for p in free)):
        values = {**held, **{p.name: v for p, v in zip(free, combo)}}
        if within_rules(space, values):
            configs.setdefault(run_key(values), values)
    return configs


def _read_by_rules(space: SearchSpace) -> set[str]:
    """The names the space's rules read, through the defines they name."""
    names = {n for c in space.constraints for n in c.expr.names}
    for name, ex in reversed(space.defines):  # a define reads only earlier ones
        if name in names:
            names |= ex.names
    return names


class Admission:
    """Decides, trial by trial, whether asked values are launched; counts refusals in a row and
    says when the search has converged (module docstring)."""

    def __init__(
        self, space: SearchSpace, display: Display, predict_oom: bool, held: HeldParameters | None = None
    ) -> None:
        self.space = space
        self.display = display
        self.predict_oom = predict_oom
        self.held = held or HeldParameters.of_values(space)
        """The run's held parameters (``--set``, and parameters dropped during the study), read when used."""
        self.rejected_in_a_row = 0
        self.duplicates_in_a_row = 0
        self.refused_in_a_row = 0
        self.converged = False
        self._rules_read = _read_by_rules(space)
        self._listed: tuple[tuple[tuple[str, Any], ...], dict[str, dict[str, Any]] | None] | None = None

    def _launchable(self) -> dict[str, dict[str, Any]] | None:
        pinned = self.held.params
        key = tuple(sorted((k, repr(v)) for k, v in pinned.items()))
        if self._listed is None or self._listed[0] != key:
            self._listed = (key, launchable_configs(self.space, pinned))
        return self._listed[1]

    def nothing_left(self, study: optuna.Study, trials: Sequence[FrozenTrial], history: Sequence[TrialRecord]) -> bool:
        """True when every config of a listable space has been run (``measured_before``'s sense) or is
        refused now: by the NCCL sweep, by the memory model, or as holding at least the memory of a
        failed forced run."""
        configs = self._launchable()
        if configs is None:
            return self.predict_oom and self._memory_all_covered(history)
        ran = {
            run_key(rec.values)
            for t, rec in zip(trials, history)
            if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and rec.outcome is R.Outcome.LAUNCHED
        }
        left = [values for key, values in configs.items() if key not in ran]
        if not left:
            return True
        if len(left) > MAX_LEFT_JUDGED:  # the memory model per config would cost more than it saves
            return False
        sweep = load_sweep(study, self.space)
        if not self.predict_oom:
            return all(sweep.refused(v) is not None for v in left)
        model, forced = MemoryModel(self.space, history), ForcedFailures(self.space, history)
        return all(
            sweep.refused(v) is not None or model.verdict(v) is not None or forced.covering(v) is not None for v in left
        )

    def _memory_all_covered(self, history: Sequence[TrialRecord]) -> bool:
        """A space too large to list: True when every combination of the free parameters that move
        memory (at most ``MAX_LISTED``) holds at least the memory of a failed forced run, or breaks a
        rule that reads none of the others, whatever those others (NCCL's variables) are set to."""
        forced = ForcedFailures(self.space, history)
        pinned = self.held.params
        free = self.space.free(pinned)
        moving = [p for p in free if p.memory not in (MemoryEffect.NONE, MemoryEffect.SMALL)]
        if not forced.failed or math.prod(len(p.choices) for p in moving) > MAX_LISTED:
            return False
        rest = {n: v for n, v in self.space.baseline(pinned).items() if n not in {p.name for p in moving}}
        rules_read_the_rest = any(p.name in self._rules_read for p in free if p not in moving)
        for combo in itertools.product(*(p.choices for p in moving)):
            values = {**rest, **{p.name: v for p, v in zip(moving, combo)}}
            if forced.covering(values) is None and (rules_read_the_rest or within_rules(self.space, values)):
                return False
        return True

    def _check_converged(
        self, study: optuna.Study, trials: Sequence[FrozenTrial], history: Sequence[TrialRecord]
    ) -> None:
        if self.duplicates_in_a_row >= MAX_DUPLICATES_IN_A_ROW:
            self.converged = True
            self.display.note("the sampler keeps proposing configs already measured: the search has converged")
        elif self.refused_in_a_row >= MAX_REFUSED_IN_A_ROW:
            self.converged = True
            self.display.note(
                f"the sampler's last {self.refused_in_a_row} proposals were all refused (predicted to fail or to "
                "be unstable): the search has converged"
            )
        elif self.nothing_left(study, trials, history):
            self.converged = True
            self.display.note("every config of the space has been run or is ruled out: the search is complete")

    def admit(
        self,
        study: optuna.Study,
        trial: optuna.Trial,
        values: Mapping[str, Any],
        kind: str,
        trials: Sequence[FrozenTrial],
        history: Sequence[TrialRecord],
    ) -> bool:
        """True when ``values`` are to be launched; otherwise the trial has been told why not.
        ``trials`` are the study's trials and ``history`` their records, in the same order."""
        if not self._within_rules(study, trial, values):
            if kind == TrialKind.SEARCH.value:
                self._check_converged(study, trials, history)
            return False
        if kind != TrialKind.SEARCH.value:
            return True
        original = measured_before(trials, history, values)
        if original is not None:
            clamped = clamps(values)
            if clamped:
                self.display.skipped(
                    trial.number, f"{'; '.join(c.describe() for c in clamped)}: the run of trial {original.number}"
                )
            tell_duplicate(study, trial, original)
            self.duplicates_in_a_row += 1
            self._check_converged(study, trials, history)
            return False
        self.duplicates_in_a_row = 0
        swept = load_sweep(study, self.space).refused(values)
        if swept is not None:
            tell_rejected(study, trial, [swept], sweep_refused=True)
            self.display.skipped(trial.number, swept)
            self._refused(study, trials, history)
            return False
        verdict = memory_verdict(self.space, values, history) if self.predict_oom else None
        if verdict is not None:
            tell_predicted(study, trial, verdict.from_trial, verdict.status)
            self.display.skipped(trial.number, verdict.reason)
            self._refused(study, trials, history)
            return False
        forced = ForcedFailures(self.space, history)
        cover = forced.covering(values) if self.predict_oom else None
        if cover is not None:  # it would fail forced too: not stable, whatever its normal run shows
            tell_predicted(study, trial, cover.number, cover.status if not cover.ok else None)
            self.display.skipped(trial.number, forced.why(values))
            self._refused(study, trials, history)
            return False
        self.refused_in_a_row = 0
        return True

    def _refused(self, study: optuna.Study, trials: Sequence[FrozenTrial], history: Sequence[TrialRecord]) -> None:
        """Count a proposal refused by the sweep or a memory prediction; converged, perhaps, now."""
        self.refused_in_a_row += 1
        self._check_converged(study, trials, history)

    def _within_rules(self, study: optuna.Study, trial: optuna.Trial, values: Mapping[str, Any]) -> bool:
        try:
            violations = rule_violations(self.space, values)
        except ExprError as exc:
            violations = [str(exc)]
            self.display.skipped(trial.number, f"an expression of the space fails on these values: {exc}")
        if not violations:
            self.rejected_in_a_row = 0
            return True
        tell_rejected(study, trial, violations)
        self.rejected_in_a_row += 1
        if self.rejected_in_a_row >= MAX_REJECTED_IN_A_ROW:
            raise NcclTuneError(
                f"space {self.space.name}: {self.rejected_in_a_row} sampled configs in a row broke its rules "
                f"(last: {violations[0]}); widen the ranges or check --set values"
            )
        return False
