"""The run's wall-clock budget (``--budget``), planned so that the confirmation re-runs fit.

A search trial starts only when it, the confirmation re-runs and the forced runs after the search
fit in the time left, as measured: the reserve is ``1 + confirm`` times the longest wall time of a
normal ``ok`` trial so far (0 before the first one, so the first trial always starts), plus the
forced runs', each at the longest a forced run took (at its longest batch it runs slower, and one
that ran out of memory took its start-up all the same), at least a normal trial's. A forced run that
fails sends the next-best config to its own (``forcing``), so the forced runs after the search are a
chain: where a share ``f`` of the study's forced runs failed, it runs ``1 / (1 - f)`` on average,
``f`` counted with one more run that passed (before any failed: one run; after one of one: two).
A re-run starts while the deadline has not passed. With ``--confirm 0`` and no forced run the
reserve is one trial: no search trial starts that would not end in time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from enum import Enum

from nccl_tune.failure import FailureClass
from nccl_tune.trial import TrialResult
from nccl_tune.tuner.records.study_records import TrialRecord
from nccl_tune.tuner.search.forced_bound import failed_forced
from nccl_tune.tuner.trials.display import Display
from nccl_tune.tuner.trials.observer import InterruptFlag


class Gate(Enum):
    """Whether one more run outside the search starts (``Budget.gate``)."""

    GO = "go"
    SPENT = "spent"
    INTERRUPTED = "interrupted"


class Budget:
    """The deadline of one run (None: no budget) and the time kept for confirmation re-runs."""

    def __init__(
        self, budget_s: float | None, confirm_runs: int, forced_runs: int = 0, now: float | None = None
    ) -> None:
        self.budget_s = budget_s
        self.begin(now)
        self.confirm_runs = confirm_runs
        self.forced_runs = forced_runs
        """Forced runs kept for after the search (one where the space forces the longest batch)."""
        self.longest_ok_s = 0.0
        self.longest_forced_s = 0.0
        self.forced_seen = 0
        self.forced_failed = 0
        """Forced runs timed, and those of them that showed their config unstable (``failed_forced``)."""

    def begin(self, now: float | None = None) -> None:
        """Start the clock: once the study is open, as the run's first trial is asked for."""
        self.start = time.monotonic() if now is None else now
        self.deadline = self.start + self.budget_s if self.budget_s else None

    def observe(self, result: TrialResult | None, forced: bool = False, unstable: bool = False) -> None:
        """Learn a trial's duration: a normal ``ok`` one says how long a re-run takes, a ``forced``
        one (however it ended) how long a forced run does, and whether it showed its config
        ``unstable`` how long the chain of forced runs after the search may be."""
        if result is None:
            return
        if forced:
            self.longest_forced_s = max(self.longest_forced_s, result.wall_s)
            self.forced_seen += 1
            self.forced_failed += unstable
        elif result.status is FailureClass.OK:
            self.longest_ok_s = max(self.longest_ok_s, result.wall_s)

    def observe_record(self, r: TrialRecord) -> None:
        """``observe`` a stored trial."""
        self.observe(r.result, r.forced, failed_forced(r))

    def observe_all(self, records: Iterable[TrialRecord]) -> None:
        for r in records:
            self.observe_record(r)

    @property
    def reserve_s(self) -> float:
        """Seconds a new search trial needs: itself, the confirmation re-runs and the forced runs after it."""
        forced_s = self.forced_run_s if self.longest_ok_s else 0.0
        return (1 + self.confirm_runs) * self.longest_ok_s + self.forced_chain * forced_s

    @property
    def forced_chain(self) -> float:
        """Forced runs expected after the search (the module docstring; 0 where none is kept)."""
        failed_share = self.forced_failed / (self.forced_seen + 1)
        return self.forced_runs / (1.0 - failed_share)

    @property
    def forced_run_s(self) -> float:
        """Seconds kept for a forced run: the longest one so far, at least a normal trial's."""
        return max(self.longest_forced_s, self.longest_ok_s)

    def left_s(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def search_trials_left(self, launched: int = 0) -> int | None:
        """Search trials that can still start before the reserve binds, at the run's pace: its time
        so far per search trial ``launched`` (forced runs and the time between trials included), at
        least the longest ``ok`` trial's (None: no deadline, or no trial has finished to time one).
        What the search plans its last trials by when the deadline comes before ``--trials``."""
        left = self.left_s()
        if left is None or self.longest_ok_s <= 0:
            return None
        pace = max(self.longest_ok_s, (time.monotonic() - self.start) / launched if launched else 0.0)
        return max(0, math.ceil((left - self.reserve_s) / pace))

    def search_over(self) -> bool:
        """No new search trial: the time left is within the reserve."""
        left = self.left_s()
        return left is not None and left <= self.reserve_s

    def spent(self) -> bool:
        """No new trial of any kind: the deadline has passed."""
        left = self.left_s()
        return left is not None and left <= 0

    def gate(self, interrupt: InterruptFlag, display: Display, skipped: str) -> Gate:
        """Whether a run outside the search (a warm start, a re-run, a forced run) starts: not once
        the run is interrupted, nor once the deadline has passed, which ``display`` is told with
        what is ``skipped``."""
        if interrupt.is_set:
            return Gate.INTERRUPTED
        if self.spent():
            display.note(f"the run's --budget is spent: {skipped}")
            return Gate.SPENT
        return Gate.GO

    def note(self) -> str:
        """Why the search starts no new trial."""
        if self.spent() or not self.reserve_s:
            return "the run's --budget is spent: no new trial"
        reruns = f" and {self.confirm_runs} confirmation re-run(s)" if self.confirm_runs else ""
        chain = self.forced_chain
        runs = "a forced run" if chain <= 1 else f"{math.ceil(chain)} forced runs"
        each = "" if chain <= 1 else " each"
        forced = f" and {runs} of about {self.forced_run_s / 60:.1f} min{each}" if chain else ""
        return (
            f"the run's --budget has {self.left_s() / 60:.1f} min left, too little for one more trial{reruns} of "
            f"about {self.longest_ok_s / 60:.1f} min each{forced}: no new search trial"
        )
