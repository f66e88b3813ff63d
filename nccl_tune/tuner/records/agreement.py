"""When runs of one config agree: their throughputs differ by no more than their own noise.

A run's throughput is the mean of its measured steps, and the steps scatter, so the mean carries a
standard error: ``s / sqrt(n)`` of log throughput for ``n`` measured steps whose logs spread ``s``
(their sample standard deviation; the rates the trainer printed when the throughput is read from
them, else the step times), and under it a run-to-run floor that no number of steps removes
(placement, thermals: ``RUN_FLOOR_FRAC``). A run with fewer than two timed steps says nothing of its
scatter: its error is ``UNKNOWN_ERROR_FRAC``.

Two runs agree when the log of their throughputs' ratio is within ``AGREE_Z`` standard errors of a
difference, ``sqrt(se_a^2 + se_b^2)``: a noise read from each run's own steps, independent of how
far apart the pair came out. A config is confirmed when more than half of its timed ``ok`` runs, two
at least, agree pairwise: two runs that disagree are no confirmation, and a third run that agrees
with one of them is (the other is an outlier, which the reports name).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from nccl_tune.tuner.records.study_records import TrialRecord

AGREE_Z = 2.0
"""Standard errors of a difference two runs of one config may differ by and still agree (about 95%)."""
RUN_FLOOR_FRAC = 0.015
"""Run-to-run spread of log throughput not visible within one run, at least (the floor the search's
throughput model assumes too)."""
UNKNOWN_ERROR_FRAC = 0.03
"""Standard error of a run whose steps do not show their scatter (fewer than two timed steps)."""


def _step_logs(r: TrialRecord) -> list[float]:
    """Logs of the per-step readings a run's throughput was averaged from (stragglers left out)."""
    res = r.result
    if res is None:
        return []
    printed = res.kept_step_rates
    rates = [x for x in printed if x is not None]
    if res.rate_unit and len(rates) >= 2 and len(rates) == len(printed):
        return [math.log(x) for x in rates if x > 0]
    return [math.log(s) for s in res.kept_step_times_s if s > 0]


def run_error_frac(r: TrialRecord) -> float:
    """Standard error of the log of ``r``'s throughput: its steps' scatter over their count, with the
    run-to-run floor."""
    logs = _step_logs(r)
    if len(logs) < 2:
        return math.hypot(UNKNOWN_ERROR_FRAC, RUN_FLOOR_FRAC)
    return math.sqrt(statistics.variance(logs) / len(logs) + RUN_FLOOR_FRAC**2)


@dataclass(frozen=True)
class Pair:
    """Two runs of one config, how far apart they measured and how far their noise allows."""

    a: TrialRecord
    b: TrialRecord
    apart_frac: float
    """The faster run's throughput over the slower's, less one."""
    allowed_frac: float
    """How far apart they may measure and still agree (``AGREE_Z`` standard errors of the difference)."""

    @property
    def agree(self) -> bool:
        return self.apart_frac <= self.allowed_frac

    def words(self) -> str:
        """``trials 3 and 9 measured 12.7% apart, beyond the 4.4% their steps' noise allows``."""
        how = "within" if self.agree else "beyond"
        return (
            f"trials {self.a.number} and {self.b.number} measured {self.apart_frac:.1%} apart, "
            f"{how} the {self.allowed_frac:.1%} their steps' noise allows"
        )


def pair(a: TrialRecord, b: TrialRecord) -> Pair:
    """``a`` and ``b`` (``ok`` runs with a throughput) held against each other."""
    ta, tb = a.throughput or 0.0, b.throughput or 0.0
    apart = max(ta, tb) / min(ta, tb) - 1.0 if min(ta, tb) > 0 else math.inf
    allowed = math.exp(AGREE_Z * math.hypot(run_error_frac(a), run_error_frac(b))) - 1.0
    return Pair(a, b, apart, allowed)


def _timed(runs: Sequence[TrialRecord]) -> list[TrialRecord]:
    """The runs whose throughput a confirmation compares: ``ok``, timed, made the normal way (a run
    forced to its longest batch measures that batch, not the config's speed)."""
    return [r for r in runs if r.ok and not r.forced and r.throughput]


EXACT_RUNS = 8
"""Up to this many runs, every subset is tried for the largest that agrees; above it, the runs in
order of throughput, each stretch of them (runs that agree lie close together)."""


def agreeing(runs: Sequence[TrialRecord]) -> tuple[TrialRecord, ...]:
    """The largest set of ``runs`` (their timed ``ok`` ones) that agree pairwise, when it holds two
    runs at least and more than half of them; empty otherwise."""
    timed = sorted(_timed(runs), key=lambda r: r.throughput or 0.0)
    n = len(timed)
    ok = {(i, j): pair(timed[i], timed[j]).agree for i, j in combinations(range(n), 2)}
    least = max(2, n // 2 + 1)
    for size in range(n, least - 1, -1):
        if n <= EXACT_RUNS:
            groups = combinations(range(n), size)
        else:
            groups = (tuple(range(start, start + size)) for start in range(n - size + 1))
        for group in groups:
            if all(ok[i, j] for i, j in combinations(group, 2)):
                return tuple(sorted((timed[i] for i in group), key=lambda r: r.number))
    return ()


def worst_pair(runs: Sequence[TrialRecord]) -> Pair | None:
    """The pair of ``runs`` (their timed ``ok`` ones) furthest apart for its noise; None below two."""
    pairs = [pair(a, b) for a, b in combinations(_timed(runs), 2)]
    return max(pairs, key=lambda p: p.apart_frac / p.allowed_frac if p.allowed_frac else math.inf, default=None)
