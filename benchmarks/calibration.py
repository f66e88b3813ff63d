"""How far the default sampler's odds can be believed: every proposal's predicted chance to run with
the headroom free (``fits N%`` in its ``why``) against whether it did, and its modelled gain against
the gain measured.

- Reliability: the proposals in ten bands of predicted odds (0-10%, ..., 90-100%), each band's mean
  prediction next to the share that fitted; well calibrated, the two agree.
- Brier score: the mean of ``(odds - fitted)^2`` over the proposals (0 is perfect; always saying
  50% scores 0.25).
- The target (issue: odds that mean what they say): of the proposals rated 90% or more to fit, at
  least 90% fit.
- Gain: the modelled change of log throughput over the incumbent against the measured one (the
  trial's throughput over the best measured before it), for the proposals that ran ``ok``: their
  mean absolute error and the share whose sign was right.

A proposal "fitted" when it was launched and neither ran out of memory (``oom``, ``host_oom``) nor
came within the headroom (``near_wall``). Proposals the study refused before launch are left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

BANDS = 10
HIGH_ODDS = 0.9
"""Proposals rated at least this likely to fit ..."""
TARGET_HIGH_FIT_SHARE = 0.9
"""... fit at least this often."""


@dataclass(frozen=True)
class Band:
    low: float
    high: float
    n: int
    mean_odds: float | None
    fitted_share: float | None


@dataclass(frozen=True)
class Calibration:
    """The odds of one sampler's proposals over studies, against what happened."""

    n: int
    brier: float | None
    bands: tuple[Band, ...]
    high_n: int
    """Proposals rated ``HIGH_ODDS`` or more."""
    high_fitted_share: float | None
    gain_n: int
    gain_mae: float | None
    """Mean absolute error of the modelled log-throughput gain, over proposals that ran ``ok``."""
    gain_sign_right: float | None

    @property
    def met(self) -> bool:
        """The target: proposals rated 90%+ fit 90%+ of the time (met when there were none)."""
        return self.high_fitted_share is None or self.high_fitted_share >= TARGET_HIGH_FIT_SHARE


def calibrate(odds: Iterable[tuple[float, bool]], gains: Iterable[tuple[float, float]] = ()) -> Calibration:
    """``odds``: (predicted chance to fit, fitted) per launched proposal; ``gains``: (modelled,
    measured) log-throughput gain per proposal that ran ``ok``."""
    pairs = [(min(max(p, 0.0), 1.0), bool(f)) for p, f in odds]
    gains = list(gains)
    bands = []
    for b in range(BANDS):
        low, high = b / BANDS, (b + 1) / BANDS
        inside = [(p, f) for p, f in pairs if low <= p < high or (b == BANDS - 1 and p == 1.0)]
        bands.append(
            Band(
                low,
                high,
                len(inside),
                sum(p for p, _ in inside) / len(inside) if inside else None,
                sum(f for _, f in inside) / len(inside) if inside else None,
            )
        )
    high = [f for p, f in pairs if p >= HIGH_ODDS]
    return Calibration(
        n=len(pairs),
        brier=sum((p - f) ** 2 for p, f in pairs) / len(pairs) if pairs else None,
        bands=tuple(bands),
        high_n=len(high),
        high_fitted_share=sum(high) / len(high) if high else None,
        gain_n=len(gains),
        gain_mae=sum(abs(m - g) for m, g in gains) / len(gains) if gains else None,
        gain_sign_right=sum((m > 0) == (g > 0) for m, g in gains) / len(gains) if gains else None,
    )


def measured_gains(trials: Sequence[tuple[float | None, float | None]]) -> list[tuple[float, float]]:
    """(modelled, measured) log gains from ``trials`` in launch order, each (its modelled gain or
    None, its measured throughput or None): the measured gain is over the best throughput measured
    before the trial."""
    best, out = None, []
    for modelled, tput in trials:
        if modelled is not None and tput and best:
            out.append((modelled, math.log(tput / best)))
        if tput:
            best = max(best or 0.0, tput)
    return out
