"""The regression rule of a nightly run: is tonight's best stable throughput worse than the
baseline's by more than both ``--fail-on-regression PCT`` and the measured noise?

A night is a regression when either

1. the baseline config, run again tonight, fails (any failure class: ``oom``, ``hang``, a refused
   key, ...) or comes within the memory margin: a regression in its own right, named by its verdict; or
2. the median of tonight's best runs is below the median of the baseline's runs by more than
   ``PCT`` percent **and** the drop is beyond noise:

   - both sides have at least ``MIN_RANK_TEST_RUNS`` runs: a one-sided Mann-Whitney U test (exact,
     over every split of the pooled runs, ties as mid-ranks) says tonight is slower with
     ``p <= ALPHA``;
   - otherwise: a z-score, the drop divided by the noise (the largest relative standard deviation
     of the groups with two or more runs: the baseline's runs, tonight's repeats of the baseline
     config, tonight's best runs), must exceed ``Z_LIMIT``;
   - with no group of two runs, the noise is unknown and ``PCT`` alone decides (said in the summary).

Everything here is pure: numbers in, a ``RegressionVerdict`` out.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

ALPHA = 0.05
"""Largest one-sided p-value of the rank test that calls a drop real (3 against 3 runs reach 0.05 at best)."""
Z_LIMIT = 3.0
"""A drop must exceed this many noise standard deviations when the rank test cannot be used."""
MIN_RANK_TEST_RUNS = 3
EXACT_SPLITS_MAX = 200_000
"""Above this many splits of the pooled runs, the rank test uses its normal approximation."""
NOISE_FLOOR_FRAC = 0.001
"""Relative noise never taken below 0.1% (identical runs would make any drop infinitely significant)."""


class VerdictKind(str, Enum):
    SLOWER = "slower"
    """Regression: slower beyond the threshold and the noise."""
    BASELINE_FAILS = "baseline_fails"
    """Regression: the baseline config failed tonight (or came too close to the memory wall)."""
    NO_STABLE_CONFIG = "no_stable_config"
    """Regression: the baseline config was not re-run and no config was stable tonight."""
    WITHIN_THRESHOLD = "within_threshold"
    """No regression: the change is smaller than the threshold (or an improvement)."""
    WITHIN_NOISE = "within_noise"
    """No regression: the drop exceeds the threshold but not the noise."""


@dataclass(frozen=True)
class RunFact:
    """One launched run of the baseline config tonight."""

    trial: int
    status: str
    """Its failure class (``ok``, ``oom``, ``hang``, ...)."""
    throughput_per_s: float | None = None
    near_wall: bool = False
    rank: int | None = None
    evidence: str = ""
    advice: str = ""


@dataclass(frozen=True)
class RegressionVerdict:
    regression: bool
    kind: VerdictKind
    summary: str
    """One line, for the terminal, the report and CI."""
    threshold_frac: float
    baseline_per_s: float | None = None
    night_per_s: float | None = None
    change_frac: float | None = None
    """(tonight - baseline) / baseline, of the medians."""
    noise_frac: float | None = None
    """Relative standard deviation used as the noise (None: unknown)."""
    method: str = ""
    """``mann-whitney``, ``z-score``, ``threshold only`` or ``failure``."""
    p_value: float | None = None
    z_score: float | None = None
    failure_class: str | None = None
    failed_trial: int | None = None
    unit: str = "samples/s"

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["kind"] = self.kind.value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RegressionVerdict:
        return cls(**{**data, "kind": VerdictKind(data["kind"])})


def midranks(pooled: Sequence[float]) -> list[float]:
    """The 1-based rank of each value within ``pooled``, ties sharing their mean rank."""
    return [sum(1 for x in pooled if x < v) + (sum(1 for x in pooled if x == v) + 1) / 2.0 for v in pooled]


def mann_whitney_less(night: Sequence[float], base: Sequence[float]) -> float:
    """One-sided p-value that ``night`` is stochastically smaller than ``base`` (Mann-Whitney U).

    Exact while the pooled runs have at most ``EXACT_SPLITS_MAX`` splits (under no change every
    assignment of the pooled values to the two groups is equally likely; ties get mid-ranks), the
    normal approximation with tie correction beyond."""
    n, m = len(night), len(base)
    if n == 0 or m == 0:
        raise ValueError("both groups need at least one run")
    pooled = [*night, *base]
    ranks = midranks(pooled)
    observed = sum(ranks[:n])
    if math.comb(n + m, n) <= EXACT_SPLITS_MAX:
        hits = total = 0
        for idx in itertools.combinations(range(n + m), n):
            total += 1
            hits += sum(ranks[i] for i in idx) <= observed + 1e-9
        return hits / total
    mean = n * (n + m + 1) / 2.0
    ties = sum(t**3 - t for t in (pooled.count(v) for v in set(pooled)))
    var = n * m / 12.0 * ((n + m + 1) - ties / ((n + m) * (n + m - 1)))
    if var <= 0:
        return 1.0
    return statistics.NormalDist().cdf((observed - mean + 0.5) / math.sqrt(var))


def relative_noise(*groups: Sequence[float]) -> float | None:
    """The largest relative standard deviation among the groups with two or more runs."""
    rel = [statistics.stdev(g) / statistics.fmean(g) for g in groups if len(g) >= 2 and statistics.fmean(g) > 0]
    return max(max(rel), NOISE_FLOOR_FRAC) if rel else None


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def compare_throughput(
    base: Sequence[float],
    night: Sequence[float],
    threshold_pct: float,
    repeats: Sequence[float] = (),
    unit: str = "samples/s",
) -> RegressionVerdict:
    """Tonight's best runs (``night``) against the baseline's runs (``base``); ``repeats`` are
    tonight's runs of the baseline config (noise only)."""
    if not base or not night:
        raise ValueError("both the baseline and tonight need at least one measured run")
    thr = threshold_pct / 100.0
    b, t = statistics.median(base), statistics.median(night)
    change = (t - b) / b
    noise = relative_noise(base, repeats, night)
    common = dict(threshold_frac=thr, baseline_per_s=b, night_per_s=t, change_frac=change, noise_frac=noise, unit=unit)
    head = f"best {_fmt(t)} {unit} against the baseline's {_fmt(b)} ({change:+.1%})"
    if -change <= thr:
        return RegressionVerdict(
            False,
            VerdictKind.WITHIN_THRESHOLD,
            f"no regression: {head}, within {threshold_pct:g}%",
            method="threshold",
            **common,
        )
    if len(base) >= MIN_RANK_TEST_RUNS and len(night) >= MIN_RANK_TEST_RUNS:
        p = mann_whitney_less(night, base)
        real, test = p <= ALPHA, f"Mann-Whitney p={p:.3g}"
        extra = dict(method="mann-whitney", p_value=p)
    elif noise is not None:
        z = -change / noise
        real, test = z > Z_LIMIT, f"z={z:.1f} with noise {noise:.1%}"
        extra = dict(method="z-score", z_score=z)
    else:
        real, test = True, "noise unknown: fewer than 2 runs on every side, the threshold alone decides"
        extra = dict(method="threshold only")
    if real:
        return RegressionVerdict(
            True,
            VerdictKind.SLOWER,
            f"regression: {head}, beyond {threshold_pct:g}% and noise ({test})",
            **common,
            **extra,
        )
    return RegressionVerdict(
        False, VerdictKind.WITHIN_NOISE, f"no regression: {head} is within noise ({test})", **common, **extra
    )


def baseline_failure(
    run: RunFact, threshold_pct: float, base_throughput: float | None, unit: str = "samples/s"
) -> RegressionVerdict:
    """The verdict when the baseline config failed tonight (or came too close to the memory wall)."""
    if run.status == "ok" and run.near_wall:
        what = "came within the memory margin (not stable any more)"
        cls = "near_wall"
    else:
        where = f" on rank {run.rank}" if run.rank is not None else ""
        what = f"now fails: {run.status}{where}"
        cls = run.status
    detail = run.evidence or run.advice
    summary = f"regression: the baseline config (trial {run.trial}) {what}" + (f": {detail}" if detail else "")
    return RegressionVerdict(
        True,
        VerdictKind.BASELINE_FAILS,
        summary,
        threshold_frac=threshold_pct / 100.0,
        baseline_per_s=base_throughput,
        method="failure",
        failure_class=cls,
        failed_trial=run.trial,
        unit=unit,
    )


def judge_night(
    base: Sequence[float],
    baseline_runs: Sequence[RunFact],
    night_best: Sequence[float],
    threshold_pct: float,
    unit: str = "samples/s",
) -> RegressionVerdict:
    """The night's verdict: the baseline config's runs tonight first (a failure is a regression
    whatever the throughput), then tonight's best stable runs against the baseline's runs."""
    for run in baseline_runs:
        if run.status != "ok" or run.near_wall:
            return baseline_failure(run, threshold_pct, statistics.median(base) if base else None, unit)
    if not night_best:
        return RegressionVerdict(
            True,
            VerdictKind.NO_STABLE_CONFIG,
            "regression: no config was stable tonight, the baseline's included",
            threshold_frac=threshold_pct / 100.0,
            baseline_per_s=statistics.median(base) if base else None,
            method="failure",
            unit=unit,
        )
    repeats = [r.throughput_per_s for r in baseline_runs if r.throughput_per_s]
    return compare_throughput(base, night_best, threshold_pct, repeats, unit)
