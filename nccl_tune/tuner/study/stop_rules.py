"""When a failure says the command or the node is broken, not the values: stop the study with
one line that says what to fix, instead of spending every later trial on the same failure.

The rules, checked after every launched trial, in order:
- the command refused a key of the space (``config_error``) in a way that names it, or shows the
  command runs the other SkyRL layout (``skyrl_layout.refusal_line``): one line naming the key and the fix;
- the baseline (the user's own values) failed before any step for a reason no value can fix: the
  command exited 0 without a step, ``config_error``/``crash``/``init_failure`` before any step
  (a ``ModuleNotFoundError``), no progress line before the start-up deadline, or no step line
  within the trial budget (a step rule that matches nothing). Memory failures (``oom``,
  ``host_oom``) are the exception: smaller values may fit;
- the command refused its configuration (``config_error``) before any trial was ``ok``, or refused
  a key it does not know (``Verdict.refused_key``); a training that finished by itself before the
  trial's steps (``too_few_steps``) is said as such, with its advice (nothing was refused);
- the command could not be executed at all (exit 126/127) before any trial was ``ok``;
- ``MAX_SAME_EARLY_FAILURES`` trials in a row failed the same way (class and stop reason) before
  any step, memory failures excepted; once a trial has run ``ok``, not when they share a value away
  from the baseline (a forced ``NCCL_ALGO`` that NCCL refuses: the value is to blame, and the
  sampler learns from it); never for the command refusing its configuration once a trial ran
  ``ok``: the same command ran, so a refusal is the values' doing (a batch rule that a combination
  breaks), however many come in a row;
- ``MAX_ENV_FAILURES_IN_A_ROW`` trials in a row failed for an environment reason (a training that
  finished by itself, ``too_few_steps``, is none: the command ran, and nothing of the node broke;
  nor is a refusal once a trial ran ``ok``);
- given the space, a trial that measured steps per second where those cannot rank trials (a preset
  recognised in the output reads no rate while a parameter changes how much a step does).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import FailureClass
from nccl_tune.search_spaces.skyrl_layout import refusal_line
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.trial import StopReason, TrialResult
from nccl_tune.tuner.records.held import HeldParameters
from nccl_tune.tuner.records.study_records import TrialKind

MAX_ENV_FAILURES_IN_A_ROW = 3
MAX_SAME_EARLY_FAILURES = 3
MEMORY = frozenset({FailureClass.OOM, FailureClass.HOST_OOM})
_UNFIXABLE = frozenset({FailureClass.CONFIG_ERROR, FailureClass.CRASH, FailureClass.INIT_FAILURE})


def _evidence(result: TrialResult) -> str:
    return result.verdict.evidence[0].text if result.verdict.evidence else ""


def _log(result: TrialResult) -> str:
    return f"(log: {result.trial_dir}/output.log)"


def early_failure(result: TrialResult) -> bool:
    """Failed before its first step, not for memory (a trial stopped for being slow did not fail)."""
    if result.step_times_s or result.status in MEMORY or result.status is FailureClass.INTERRUPTED:
        return False
    if result.status is FailureClass.BUDGET:
        return result.stop_reason is StopReason.BUDGET
    return result.status is not FailureClass.OK


def unfixable(result: TrialResult) -> tuple[str, str] | None:
    """What went wrong and what to fix, when ``result`` failed in a way no value of the space can fix."""
    if not early_failure(result):
        return None
    fix = result.verdict.advice or "read the log"
    if result.stop_reason is StopReason.STARTUP:
        return "no progress line before the start-up deadline", fix
    if result.status is FailureClass.BUDGET:
        return "no step line within the trial budget", (
            "check that the space's progress rules (progress.step_end) match the command's step lines, "
            "or raise --trial-timeout if one step takes that long"
        )
    if result.stop_reason is StopReason.EXITED and result.exit_code == 0:
        return "the command exited 0 without a step", fix
    if result.status in _UNFIXABLE:
        return f"{result.status.value} before any step", fix
    return None


def refuse_unrankable(space: SearchSpace, pinned: Collection[str]) -> None:
    """Before any trial: refuse a space whose progress rules can only measure steps per second
    while a parameter changes how much a step does."""
    problem = space.ranking_problem(pinned, space.progress.throughput_units())
    if problem:
        raise NcclTuneError(problem)


class StopRules:
    """Checks each launched trial's result, in order; raises ``NcclTuneError`` to stop the study."""

    def __init__(self, space: SearchSpace | None = None, held: HeldParameters | None = None) -> None:
        self.env_failures = 0
        self.same_early: tuple[tuple[FailureClass, StopReason] | None, int] = (None, 0)
        self.shared: set[tuple[str, str]] = set()
        """The values away from the baseline that every trial of the current run of failures shares."""
        self.space = space
        self.held = held
        """The run's held parameters, read when a trial is judged."""

    @property
    def pinned(self) -> Collection[str]:
        """The parameters held now (``--set``, and those dropped during the study)."""
        return set(self.held.params) if self.held is not None else set()

    def check(self, result: TrialResult, *, kind: str, never_ok: bool, values: Mapping[str, Any] | None = None) -> None:
        """``kind``: the trial's kind; ``never_ok``: no trial of the study was ``ok`` before this one;
        ``values``: the trial's parameter values."""
        space_name = self.space.name if self.space is not None else ""
        refused = refusal_line(space_name, (e.text for e in result.verdict.evidence))
        if result.status is FailureClass.CONFIG_ERROR and refused:
            raise NcclTuneError(f"trial {result.number}: {refused} {_log(result)}")
        found = unfixable(result) if kind == TrialKind.BASELINE.value else None
        if found is not None:
            what, fix = found
            seen = f" ({_evidence(result)})" if _evidence(result) else ""
            raise NcclTuneError(
                f"the baseline (trial {result.number}, the command's own values) failed: {what}{seen}; no value the "
                f"search tries can fix that: {fix} {_log(result)}"
            )
        self._refused(result, never_ok)
        self._unrankable(result)
        self._in_a_row(result, values or {}, never_ok)

    def _unrankable(self, result: TrialResult) -> None:
        if self.space is not None and result.status is FailureClass.OK and result.throughput_unit == "steps/s":
            problem = self.space.ranking_problem(self.pinned, {"steps"})
            if problem:
                raise NcclTuneError(f"{problem} (trial {result.number} measured steps/s)")

    def _refused(self, result: TrialResult, never_ok: bool) -> None:
        evidence = _evidence(result)
        cause = result.verdict.cause
        if (
            result.status is FailureClass.CONFIG_ERROR
            and never_ok
            and cause is not None
            and cause.rule == "too_few_steps"
        ):
            raise NcclTuneError(  # nothing was refused: the run ended, done, before the trial's steps
                f"trial {result.number} ended early: {evidence}; {result.verdict.advice} {_log(result)}"
            )
        if result.status is FailureClass.CONFIG_ERROR and (never_ok or result.verdict.refused_key):
            raise NcclTuneError(
                f"the command refused its configuration in trial {result.number}: {evidence or result.verdict.advice} "
                f"{_log(result)}; fix the space or the command"
            )
        if never_ok and result.exit_code in (126, 127):
            raise NcclTuneError(
                f"trial {result.number}: the command could not be executed (exit {result.exit_code}): {evidence} "
                f"{_log(result)}"
            )

    def _away_from_baseline(self, values: Mapping[str, Any]) -> set[tuple[str, str]]:
        defaults = self.space.defaults() if self.space is not None else {}
        return {(k, repr(v)) for k, v in values.items() if k not in self.pinned and k in defaults and v != defaults[k]}

    def _in_a_row(self, result: TrialResult, values: Mapping[str, Any], never_ok: bool) -> None:
        if result.nccl_check_failed:  # its values failed the NCCL check, which passed others in this run:
            return  # the values, not the command or the node; the run of failures neither grows nor ends
        refused = result.status is FailureClass.CONFIG_ERROR and not never_ok
        way = (result.status, result.stop_reason) if early_failure(result) and not refused else None
        last, count = self.same_early
        self.same_early = (way, count + 1 if way is not None and way == last else 1)
        away = self._away_from_baseline(values)
        self.shared = self.shared & away if self.same_early[1] > 1 else away
        if way is not None and self.same_early[1] >= MAX_SAME_EARLY_FAILURES and (never_ok or not self.shared):
            raise NcclTuneError(
                f"{self.same_early[1]} trials in a row failed the same way before any step ({result.status.value}, "
                f"stopped: {result.stop_reason.value}): the command or the node looks broken, not the values; "
                f"{result.verdict.advice or _evidence(result)} {_log(result)}"
            )
        finished = result.verdict.cause is not None and result.verdict.cause.rule == "too_few_steps"
        if not refused:  # a refusal of these values says nothing of the node's health
            self.env_failures = self.env_failures + 1 if result.status.is_environment_failure and not finished else 0
        if self.env_failures >= MAX_ENV_FAILURES_IN_A_ROW:
            raise NcclTuneError(
                f"{self.env_failures} trials in a row failed with {result.status.value}: the node or the command looks "
                f"broken, not the values ({_evidence(result)}); run `nccl-tune doctor` and "
                f"`nccl-tune diagnose {result.trial_dir}`"
            )
