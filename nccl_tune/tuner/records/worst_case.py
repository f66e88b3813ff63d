"""A run's memory at the longest batch its config allows, not only at the batches it happened to see.

A trial measures a few steps; in RL each step's rollouts have different lengths, so a config can
pass its short trial because its steps were short and run out of memory at step 40. Two ways to
know the worst case:

- **forced**: the trial ran with its longest batches (a space's ``stability.force_worst_case``
  overrides: for SkyRL, vLLM's ``min_tokens`` up to ``max_generate_length``): the peak it measured
  is the worst case;
- **predicted**: the trial's steps carry their tokens (``TrialResult.step_tokens``: SkyRL's
  ``generate/max_num_tokens``, a trainer's ``num_tokens``) and their peaks
  (``MemoryReport.step_peak_frac``). Device memory is affine in the tokens of the micro-batch that
  holds the longest sequence (activations and logits grow with them, the rest does not), so the
  peak is fitted as ``a + b * tokens`` by least squares (``b`` at least 0) and read at the longest
  the config allows (``stability.worst_case_tokens``), with the fit's prediction interval
  (``WORST_Z`` standard errors, the residual spread at least ``SIGMA_FLOOR``). Fewer than
  ``MIN_STEPS`` steps, or steps whose tokens span too little (``MIN_SPAN_FRAC``), cannot pin the
  slope: the slope is then taken as proportional (``b = peak / tokens`` at the longest step seen),
  an upper bound for a peak with a fixed part, the range is widened by ``FEW_POINTS_SIGMA``, and the
  figure is reported but judges nothing (``judged``): a short trial would otherwise never pass. Nor
  does a fit whose range is wider than ``MAX_JUDGED_HALF_RANGE`` on either side.

A worst case *fits* when its point stays outside the space's headroom (``1 - min_headroom_frac``
of the GPU) and its upper bound inside the GPU. A run whose judged worst case does not fit is not
stable (``stability.Candidate.stable``), however its own steps went.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

MIN_STEPS = 3
"""Steps with tokens and a peak a fit needs; fewer give the proportional bound."""
MIN_SPAN_FRAC = 0.02
"""Least spread of the steps' tokens, (max - min) / max, that measures a slope."""
WORST_Z = 2.0
"""Standard errors between the predicted worst case and its upper bound."""
SIGMA_FLOOR = 0.005
"""Least residual spread of a step's peak (share of the GPU): samples and allocator noise."""
FEW_POINTS_SIGMA = 0.03
"""Spread of a prediction whose slope was not measured (share of the GPU)."""
MAX_JUDGED_HALF_RANGE = 0.2
"""Widest half-range (upper bound minus point, share of the GPU) of a prediction that judges: a fit
on a few steps of near-equal tokens reads almost any slope, and would refuse every config."""


@dataclass(frozen=True)
class WorstCase:
    """A run's peak at the longest batch its config allows (shares of the GPU)."""

    how: str
    """``forced`` (the run ran its longest batches) or ``predicted`` (fitted on its steps' tokens)."""
    seen_frac: float
    """The highest step peak the run measured."""
    peak_frac: float
    """The worst case: measured (forced) or the point prediction."""
    lower_frac: float
    upper_frac: float
    tokens_seen: float | None = None
    """The most tokens a measured step carried (None when forced runs did not print them)."""
    tokens_worst: float | None = None
    """The tokens of the longest batch the config allows."""
    fitted: bool = False
    """The slope was measured on the steps (else the proportional bound, or forced)."""

    @property
    def judged(self) -> bool:
        """It decides stability: measured (forced) or fitted on steps that pin the slope."""
        return self.how == "forced" or (self.fitted and self.upper_frac - self.peak_frac <= MAX_JUDGED_HALF_RANGE)

    def unfit(self, min_headroom_frac: float) -> bool:
        """Judged, and does not fit: the run is not stable."""
        return self.judged and not self.fits(min_headroom_frac)

    def fits(self, min_headroom_frac: float) -> bool:
        """The point keeps ``min_headroom_frac`` of the GPU free and the upper bound stays inside it."""
        return self.peak_frac <= 1.0 - min_headroom_frac and self.upper_frac <= 1.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> WorstCase | None:
        if not data:
            return None
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def forced(step_peak_frac: Sequence[float], step_tokens: Sequence[float | None] = ()) -> WorstCase | None:
    """The worst case of a run forced to its longest batches: the highest peak it measured."""
    if not step_peak_frac:
        return None
    peak = max(step_peak_frac)
    seen = [t for t in step_tokens if t is not None]
    tokens = max(seen) if seen else None
    return WorstCase("forced", peak, peak, peak, peak, tokens, tokens, fitted=True)


def predict(
    step_tokens: Sequence[float | None], step_peak_frac: Sequence[float], worst_tokens: float
) -> WorstCase | None:
    """The peak at ``worst_tokens`` fitted on the steps' (tokens, peak) pairs (aligned, step by step);
    None when no step carries both."""
    pairs = [
        (float(t), float(p))
        for t, p in zip(step_tokens, step_peak_frac)
        if t is not None and t > 0 and math.isfinite(p)
    ]
    if not pairs:
        return None
    xs, ys = [x for x, _ in pairs], [y for _, y in pairs]
    seen = max(ys)
    x_top = max(xs)
    worst = max(float(worst_tokens), x_top)
    n = len(pairs)
    span = (x_top - min(xs)) / x_top
    if n < MIN_STEPS or span < MIN_SPAN_FRAC:
        y_top = max(y for x, y in pairs if x == x_top)
        point = y_top * worst / x_top
        sd = FEW_POINTS_SIGMA
        return WorstCase("predicted", seen, point, point - WORST_Z * sd, point + WORST_Z * sd, x_top, worst)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = max(0.0, sum((x - mx) * (y - my) for x, y in pairs) / sxx)
    icept = my - slope * mx
    resid = [y - (icept + slope * x) for x, y in pairs]
    s = max(math.sqrt(sum(r * r for r in resid) / max(n - 2, 1)), SIGMA_FLOOR)
    point = icept + slope * worst
    sd = s * math.sqrt(1.0 + 1.0 / n + (worst - mx) ** 2 / sxx)
    point = max(point, seen)
    return WorstCase("predicted", seen, point, point - WORST_Z * sd, point + WORST_Z * sd, x_top, worst, fitted=True)


def judge(
    step_tokens: Sequence[float | None],
    step_peak_frac: Sequence[float],
    worst_tokens: float | None,
    was_forced: bool = False,
) -> WorstCase | None:
    """The run's worst case: forced when it ran its longest batches, else predicted at
    ``worst_tokens`` (None: the space does not say how long a batch can get, or no step carried its
    tokens and a peak)."""
    if was_forced:
        return forced(step_peak_frac, step_tokens)
    if worst_tokens is None or worst_tokens <= 0:
        return None
    return predict(step_tokens, step_peak_frac, worst_tokens)
