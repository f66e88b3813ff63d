"""When a failure says the command or the node is broken, not the values: stop the study with
one line that says what to fix, instead of spending every later trial on the same failure."""

from __future__ import annotations

from typing import Collection

from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import FailureClass
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.trial import TrialResult

MAX_ENV_FAILURES_IN_A_ROW = 3


def _evidence(result: TrialResult) -> str:
    return result.verdict.evidence[0].text if result.verdict.evidence else ""


def refuse_unrankable(space: SearchSpace, pinned: Collection[str]) -> None:
    """Before any trial: refuse a space whose progress rules can only measure steps per second
    while a parameter changes how much a step does."""
    problem = space.ranking_problem(pinned, space.progress.throughput_units())
    if problem:
        raise NcclTuneError(problem)


class StopRules:
    """Checks each launched trial's result, in order; raises ``NcclTuneError`` to stop the study.
    Given the space and the pinned parameters, a trial that measured steps per second where those
    cannot rank trials stops the study too (a preset recognised in the output reads no rate)."""

    def __init__(self, space: SearchSpace | None = None, pinned: Collection[str] = ()) -> None:
        self.env_failures = 0
        self.space = space
        self.pinned = pinned

    def check(self, result: TrialResult, *, never_ok: bool) -> None:
        """``never_ok``: no trial of the study had finished ``ok`` before this one."""
        evidence = _evidence(result)
        if result.status is FailureClass.CONFIG_ERROR and (never_ok or result.verdict.refused_key):
            raise NcclTuneError(
                f"the command refused its configuration in trial {result.number}: {evidence or result.verdict.advice} "
                f"(log: {result.trial_dir}/output.log); fix the space or the command"
            )
        if never_ok and result.exit_code in (126, 127):
            raise NcclTuneError(
                f"trial {result.number}: the command could not be executed (exit {result.exit_code}): {evidence} "
                f"(log: {result.trial_dir}/output.log)"
            )
        if self.space is not None and result.status is FailureClass.OK and result.throughput_unit == "steps/s":
            problem = self.space.ranking_problem(self.pinned, {"steps"})
            if problem:
                raise NcclTuneError(f"{problem} (trial {result.number} measured steps/s)")
        self.env_failures = self.env_failures + 1 if result.status.is_environment_failure else 0
        if self.env_failures >= MAX_ENV_FAILURES_IN_A_ROW:
            raise NcclTuneError(
                f"{self.env_failures} trials in a row failed with {result.status.value}: the node or the command looks "
                f"broken, not the values ({evidence}); run `nccl-tune doctor` and `nccl-tune diagnose {result.trial_dir}`"
            )
