"""Step detection over a series of nights: where did the level of the best throughput shift?

The series is cut into segments of constant level by binary segmentation: a segment is split at
the point that most lowers the sum of absolute deviations from each side's median, when both
sides keep at least ``MIN_NIGHTS`` nights, their medians differ by at least ``MIN_STEP_FRAC``
of the earlier one and by ``Z_STEP`` standard errors of their difference (from the nights' own
spread, so a noisy series needs a larger or longer shift), and the two nights either side of the cut are each nearer their own side's
median (so a step is dated on the first night of the new level). Cuts are then re-checked against their final neighbours and dropped while
any pair differs by less than ``MIN_STEP_FRAC``. Medians and absolute deviations make one odd
night (a noisy run, a busy node) unable to create or hide a step.

A shift in the last ``MIN_NIGHTS - 1`` nights cannot be a step yet; ``pending_shift`` reports
it as a possible start when the last nights all differ from the current level, the same way, by
at least ``MIN_STEP_FRAC``.
Nights without a value (no stable config) are left out; indices refer to the input.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

MIN_STEP_FRAC = 0.05
"""Smallest relative change between two levels called a step (asv uses 5%)."""
Z_STEP = 3.0
"""A step's two medians must also differ by this many standard errors of their difference."""
MIN_NIGHTS = 3
"""Nights a level needs on each side of a step (the median of three ignores one odd night)."""


@dataclass(frozen=True)
class Step:
    index: int
    """The first night (index into the series) of the new level."""
    before_median: float
    after_median: float

    @property
    def change_frac(self) -> float:
        return (self.after_median - self.before_median) / self.before_median


def _median_error(left: Sequence[float], right: Sequence[float]) -> float:
    """Standard error of the difference of the two medians, from the nights' spread about their
    own side's median (1.4826 x the median absolute deviation estimates a normal sigma; a median
    of n values varies about 1.25 sigma / sqrt(n))."""
    ml, mr = statistics.median(left), statistics.median(right)
    sigma = 1.4826 * statistics.median([abs(x - ml) for x in left] + [abs(x - mr) for x in right])
    return 1.25 * sigma * (1 / len(left) + 1 / len(right)) ** 0.5


def _cost(xs: Sequence[float]) -> float:
    m = statistics.median(xs)
    return sum(abs(x - m) for x in xs)


def _rel(a: float, b: float) -> float:
    return abs(b - a) / abs(a) if a else float("inf")


def _best_cut(xs: Sequence[float], min_nights: int, min_step: float) -> int | None:
    """The split position in ``xs`` that lowers the L1 cost most, if it separates two levels."""
    best, gain_best = None, 1e-12 * (1 + _cost(xs))
    whole = _cost(xs)
    for k in range(min_nights, len(xs) - min_nights + 1):
        left, right = xs[:k], xs[k:]
        ml, mr = statistics.median(left), statistics.median(right)
        if _rel(ml, mr) < min_step:
            continue
        if abs(xs[k] - mr) > abs(xs[k] - ml) or abs(xs[k - 1] - ml) > abs(xs[k - 1] - mr):
            continue  # the nights either side of the cut must sit with their own level
        if abs(mr - ml) < Z_STEP * _median_error(left, right):
            continue
        gain = whole - _cost(left) - _cost(right)
        if gain > gain_best:
            best, gain_best = k, gain
    return best


def _segment(xs: Sequence[float], lo: int, hi: int, min_nights: int, min_step: float, cuts: list[int]) -> None:
    k = _best_cut(xs[lo:hi], min_nights, min_step)
    if k is None:
        return
    _segment(xs, lo, lo + k, min_nights, min_step, cuts)
    cuts.append(lo + k)
    _segment(xs, lo + k, hi, min_nights, min_step, cuts)


def _prune(xs: Sequence[float], cuts: list[int], min_step: float) -> list[int]:
    """Drop the weakest cut while two neighbouring segments differ by less than ``min_step``."""
    cuts = sorted(cuts)
    while cuts:
        bounds = [0, *cuts, len(xs)]
        meds = [statistics.median(xs[a:b]) for a, b in zip(bounds, bounds[1:])]
        rels = [_rel(a, b) for a, b in zip(meds, meds[1:])]
        weakest = min(range(len(rels)), key=rels.__getitem__)
        if rels[weakest] >= min_step:
            break
        del cuts[weakest]
    return cuts


def detect_steps(
    values: Sequence[float | None], min_step_frac: float = MIN_STEP_FRAC, min_nights: int = MIN_NIGHTS
) -> tuple[Step, ...]:
    """The steps of ``values`` (one per night, None for a night without a value), oldest first."""
    where = [i for i, v in enumerate(values) if v is not None]
    xs = [float(values[i]) for i in where]  # type: ignore[arg-type]
    if len(xs) < 2 * min_nights:
        return ()
    cuts: list[int] = []
    _segment(xs, 0, len(xs), min_nights, min_step_frac, cuts)
    cuts = _prune(xs, cuts, min_step_frac)
    bounds = [0, *cuts, len(xs)]
    meds = [statistics.median(xs[a:b]) for a, b in zip(bounds, bounds[1:])]
    return tuple(Step(where[c], meds[i], meds[i + 1]) for i, c in enumerate(cuts))


def pending_shift(
    values: Sequence[float | None], min_step_frac: float = MIN_STEP_FRAC, min_nights: int = MIN_NIGHTS
) -> Step | None:
    """A shift that may be starting in the last nights, too recent to be a step: the longest tail
    of fewer than ``min_nights`` nights that all differ from the level before them (at least
    ``min_nights`` nights since the last step), the same way, by at least ``min_step_frac`` and
    ``Z_STEP`` times the level's own spread."""
    where = [i for i, v in enumerate(values) if v is not None]
    xs = [float(values[i]) for i in where]  # type: ignore[arg-type]
    steps = detect_steps(values, min_step_frac, min_nights)
    start = where.index(steps[-1].index) if steps else 0
    for tail_n in range(max(min_nights - 1, 1), 0, -1):
        cut = len(xs) - tail_n
        if cut - start < min_nights:
            continue
        level = statistics.median(xs[start:cut])
        sigma = 1.4826 * statistics.median([abs(x - level) for x in xs[start:cut]])
        least = max(min_step_frac * abs(level), Z_STEP * sigma)
        changes = [t - level for t in xs[cut:]]
        if all(c <= -least for c in changes) or all(c >= least for c in changes):
            return Step(where[cut], level, statistics.median(xs[cut:]))
    return None
