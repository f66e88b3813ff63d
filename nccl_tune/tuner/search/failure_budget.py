"""The study's failure budget: the share of its GPU time that failed runs may take.

A failed run (out of memory, a hang, a crash, a refusal) is GPU time that measured no config. The
search pays some of it to learn where the memory wall and the failing values are, but once a
study has paid its share, a move that is likely to fail is worth less than a slower one that will
finish: the same few points of modelled gain are found later at no cost, and the time a hang
takes is lost for good. So the planner holds the study to ``FAILED_SHARE`` of its GPU time:

- the study's total is what its launched runs took so far, plus a finished run's seconds (their
  median) for each trial the run still plans (``horizon_trials``: the trials launched before this
  run and those it was asked for, at least ``MIN_HORIZON_TRIALS``);
- a move's expected failed seconds are its chance to fail (in memory, or for a value the failure
  model suspects) times what a failure costs (a finished run's seconds; more for a value whose
  failures were hangs that ran to the stall timeout);
- a move fits the budget when its expected failed seconds are at most what the budget has left,
  or at most ``ALWAYS_SHARE`` of a finished run (a move that will likely finish is never held back).

Early in a study the budget is mostly unspent, so the first risky moves near the wall (the ones
that find it) go ahead; it binds late, when the moves left are long shots next to values that
failed. Before any run finished there is no scale for it, and every move fits (as in a study with
no planned number of trials).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from nccl_tune.tuner.records.study_records import Outcome, TrialRecord

FAILED_SHARE = 0.08
"""Share of the study's GPU time (projected to its planned trials) that failed runs may take. The
search benchmarks' target is 10%; a failure's cost is known only after it, so the budget keeps
a margin below it."""
ALWAYS_SHARE = 0.1
"""Expected failed seconds, as a share of a finished run, that a move may always risk."""
MIN_HORIZON_TRIALS = 20
"""Trials the budget plans for at least: a short run is most often the start of a study that the
same command resumes, and 8% of two or eight runs would refuse the first risky move of every one."""


@dataclass(frozen=True)
class FailureBudget:
    """What the study spent on failures and what it may still risk."""

    failed_s: float
    """Seconds the study's failed runs took (``TrialRecord.failed``)."""
    launched_s: float
    """Seconds all its launched runs took."""
    run_s: float
    """A finished run's seconds (the median; 0 before any finished)."""
    remaining_trials: int | None
    """Trials the run still plans after this one is proposed (None: no plan; no budget)."""

    @classmethod
    def of_study(cls, records: Sequence[TrialRecord], horizon_trials: int | None) -> FailureBudget:
        """The budget of a study with ``records``, planned to end at ``horizon_trials`` launched trials
        (None: no plan, so no budget: every move fits)."""
        launched = [r for r in records if r.outcome is Outcome.LAUNCHED and r.result is not None]
        finished = [r.result.wall_s for r in launched if not r.failed and r.result.wall_s > 0]
        count = sum(r.outcome is Outcome.LAUNCHED for r in records)
        return cls(
            failed_s=sum(r.result.wall_s for r in launched if r.failed),
            launched_s=sum(r.result.wall_s for r in launched),
            run_s=statistics.median(finished) if finished else 0.0,
            remaining_trials=None
            if horizon_trials is None
            else max(0, max(horizon_trials, MIN_HORIZON_TRIALS) - count - 1),
        )

    @property
    def left_s(self) -> float:
        """Failed seconds the study may still take (inf before any run finished, or with no plan)."""
        if self.run_s <= 0 or self.remaining_trials is None:
            return math.inf
        total = self.launched_s + (self.remaining_trials + 1) * self.run_s
        return FAILED_SHARE * total - self.failed_s

    def expected_failed_s(self, p_finish: float, cost_ratio: float) -> float:
        """Expected failed seconds of a run that finishes with chance ``p_finish`` and whose failure
        costs ``cost_ratio`` finished runs."""
        return (1.0 - p_finish) * max(cost_ratio, 1.0) * self.run_s

    def allows(self, expected_failed_s: float) -> bool:
        """True when a move risking ``expected_failed_s`` fits the budget (module docstring)."""
        return expected_failed_s <= max(self.left_s, ALWAYS_SHARE * self.run_s)
