"""The study checks the memory model's odds against what its runs did, and shifts them.

The memory model's odds that a config fits (``MemoryModel.p_fits_model``) come from a log-linear fit
of the runs' peaks. Where memory is a sum of parts that scale differently (a ZeRO stage's static
share and the activations of a micro-batch times a sequence length, checkpointing multiplying only
the second), a change measured in one context moves the peak by another share in the next, and the
fit is too sure of itself away from its runs: on the narrow-wall family, proposals rated 57%, 65%,
77%, 85% and 99% to fit fitted about 18%, 14%, 35%, 50% and 90% of the time, a shift of about two
in log-odds at every level. So the odds each proposal was given when it was proposed
(``TrialRecord.predicted_fits_model``) are checked against whether its run fitted (ran with the
headroom free, ``fitted``), and the odds of the next proposals are shifted by the amount that makes
those outcomes likeliest (``shift``):

    p' = sigmoid(logit(p) + b),

under a normal prior on ``b`` centred on 0 (``PRIOR_SD``): a study whose odds held keeps them, and
one surprised a few times learns to doubt them. Odds of 0 and 1 (a certain bound: a config that
holds a known OOM's memory, or less than a finished run's) stay as they are. These are the odds a
proposal shows and the study stores; the planner ranks by the model's own (``memory_model``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from nccl_tune.failure import FailureClass
from nccl_tune.tuner.records.study_records import Outcome, TrialRecord

PRIOR_SD = 1.0
"""Standard deviation of the shift's prior, in log-odds (centred on 0: no shift)."""
GRID = tuple(round(-4.0 + 0.1 * i, 1) for i in range(61))
"""The shifts tried, -4 to +2 in log-odds."""
LOGIT_CAP = 7.0
"""Log-odds are taken within +-this (99.9%): a rating of 100% is a certain bound, not a guess."""


def fitted(record: TrialRecord, wall_frac: float) -> bool | None:
    """Whether ``record``'s run fitted: False when it ran out of memory or its peak came above
    ``wall_frac`` of the GPU; True when it measured a peak at or below it; None when it says
    neither (it failed before any memory was measured, or no peak is known)."""
    if record.outcome is not Outcome.LAUNCHED or record.result is None:
        return None
    if record.status is FailureClass.OOM:
        return False
    mem = record.result.memory
    peak = mem.max_peak_frac if mem is not None else None
    if peak is None:
        return None
    return peak <= wall_frac


def _logit(p: float) -> float:
    p = min(max(p, 1e-12), 1.0 - 1e-12)
    return max(-LOGIT_CAP, min(LOGIT_CAP, math.log(p / (1.0 - p))))


def _log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x)) if x > -30 else x


def shift(outcomes: Sequence[tuple[float, bool]]) -> float:
    """The shift of log-odds (module docstring) that makes ``outcomes``, (odds given, fitted) per
    proposal, likeliest under the prior; 0 with none."""
    rated = [(_logit(p), y) for p, y in outcomes if 0.0 < p < 1.0]
    if not rated:
        return 0.0

    def score(b: float) -> float:
        ll = sum(_log_sigmoid(z + b) if y else _log_sigmoid(-(z + b)) for z, y in rated)
        return ll - b**2 / (2 * PRIOR_SD**2)

    return max(GRID, key=score)


def study_shift(records: Iterable[TrialRecord], wall_frac: float) -> float:
    """``shift`` of the proposals in ``records`` whose runs say whether they fitted."""
    outcomes = []
    for r in records:
        if r.predicted_fits_model is None or r.forced:
            continue
        y = fitted(r, wall_frac)
        if y is not None:
            outcomes.append((r.predicted_fits_model, y))
    return shift(outcomes)


def shifted(p: float, b: float) -> float:
    """``p`` shifted by ``b`` in log-odds; 0 and 1 as they are."""
    if b == 0.0 or p <= 0.0 or p >= 1.0:
        return p
    return 1.0 / (1.0 + math.exp(-(_logit(p) + b)))
