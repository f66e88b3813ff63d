"""The speed-up quoted against the user's own run, and when it may be quoted plainly.

A run's throughput is the mean of its measured steps, and how many steps a trial measures changes
during a study: the measured step noise raises the count (``trials.steps``), ``--steps`` fixes it,
and a command of a fixed length ends a run early. A slow first measured step, drift (responses that
grow in RL) or one straggler weigh differently in 4 steps than in 17, so a baseline measured over
another count than the winner is not the same measurement. The speed-up is quoted against the
baseline's runs that measured as many steps as one of the winner's runs (the study re-runs the
baseline at the winner's count to have one: ``study.confirmation.measure_baseline``); when none did,
against all of its runs, with a caveat naming both counts. A run's count is the one it was planned
to measure (``run_steps``): a run stopped at its last step may read one more, which makes no other
measurement of it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from nccl_tune.tuner.records.stability import Candidate, run_key
from nccl_tune.tuner.records.study_records import TrialRecord
from nccl_tune.wording import fmt_tput


def _timed(c: Candidate) -> list[TrialRecord]:
    return [r for r in c.ok_runs if r.throughput and r.result is not None]


def run_steps(r: TrialRecord) -> int:
    """The measured steps ``r`` was run for: those it was planned to measure, or fewer when its command
    ended before them (a run stopped at its last step may read one more; that one does not count)."""
    measured = len(r.result.measured_step_times_s)
    if r.planned_steps is None:
        return measured
    return min(measured, r.planned_steps - r.result.warmup_steps)


def measured_steps(c: Candidate) -> tuple[int, ...]:
    """The measured steps of each of ``c``'s timed ``ok`` runs (``run_steps``), in order of launch."""
    return tuple(run_steps(r) for r in _timed(c))


def baseline_steps_wanted(winner: Candidate, base: Candidate) -> int | None:
    """The measured steps to re-run the baseline at before a speed-up is quoted (the most the winner's
    runs measured); None when a run of the baseline already measured as many as one of the winner's,
    or either has no timed run."""
    mine, theirs = measured_steps(winner), measured_steps(base)
    if not mine or not theirs or set(mine) & set(theirs):
        return None
    return max(mine)


@dataclass(frozen=True)
class Speedup:
    """``winner`` against the baseline, and whether the two were measured alike."""

    ratio: float
    baseline_per_s: float
    """The mean of the baseline runs the ratio is against."""
    unit: str | None
    winner_steps: tuple[int, ...]
    baseline_steps: tuple[int, ...]
    """The measured steps of the baseline runs the ratio is against."""
    matched: bool
    """Those runs measured as many steps as one of the winner's."""

    def caveat(self) -> str | None:
        """Why the figure is not like for like, in a sentence; None when it is."""
        if self.matched:
            return None
        return (
            f"the baseline measured {_counts(self.baseline_steps)} steps a run and this config "
            f"{_counts(self.winner_steps)}: not the same measurement (a slow first step or drift weighs "
            "differently), and no run of the baseline at this config's count was made"
        )

    def words(self) -> str:
        """``1.42x the baseline's 930.9 samples/s``, then the caveat when there is one."""
        text = f"{self.ratio:.2f}x the baseline's {fmt_tput(self.baseline_per_s, self.unit)}"
        caveat = self.caveat()
        return text + (f"; not like for like: {caveat}" if caveat else "")


def _counts(steps: tuple[int, ...]) -> str:
    return "/".join(str(n) for n in sorted(set(steps)))


def speedup(winner: Candidate, base: Candidate | None) -> Speedup | None:
    """``winner``'s throughput over the baseline's runs that measured as many steps as one of the
    winner's (all of the baseline's, with the caveat, when none did); None without a timed run of
    either, or when ``winner`` is the baseline."""
    if base is None or run_key(winner.values) == run_key(base.values) or not winner.throughput:
        return None
    mine = measured_steps(winner)
    runs = _timed(base)
    same = [r for r in runs if run_steps(r) in mine]
    quoted = same or runs
    if not quoted:
        return None
    per_s = statistics.fmean(r.throughput for r in quoted)
    steps = tuple(run_steps(r) for r in quoted)
    return Speedup(winner.throughput / per_s, per_s, winner.throughput_unit, mine, steps, bool(same))
