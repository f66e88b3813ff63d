"""The night's checks, as CI sees them (one JUnit test case each, a line in every report):
a stable config was found, no regression against the baseline, the baseline config still runs."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from nccl_tune.reporting.view import StudyView, advice_of
from nccl_tune.tuner.study.night import baseline_runs
from nccl_tune.tuner.winner.headline import confirmation_words
from nccl_tune.wording import fmt_rate, fmt_tput

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass(frozen=True)
class Check:
    name: str
    outcome: str
    """``passed``, ``failed`` or ``skipped``."""
    message: str
    """One line."""
    detail: str = ""
    """Evidence, advice or numbers (may span lines)."""


def stable_config_found(view: StudyView) -> Check:
    w = view.winner
    if w is not None:
        confirmed = confirmation_words(w)
        return Check(
            "stable config found", PASSED, f"trial {w.first.number}: {fmt_tput(w.throughput, view.unit)}, {confirmed}"
        )
    counts = Counter(r.status.value for r in view.launched if r.failed and r.status)
    what = ", ".join(f"{k} {n}" for k, n in counts.most_common()) or "none failed"
    return Check("stable config found", FAILED, f"no stable config in {len(view.launched)} launched trials ({what})")


def no_regression(view: StudyView) -> Check:
    name = "no regression against the baseline"
    night = view.night
    if night is None or night.verdict is None:
        why = (
            "the study is not part of a series"
            if night is None
            else "no baseline to compare with (first night of the series, or run without --warm-start/--fail-on-regression)"
        )
        return Check(name, SKIPPED, why)
    v = night.verdict
    detail = f"baseline: {night.baseline.source} {night.baseline.origin}" if night.baseline else ""
    return Check(name, FAILED if v.regression else PASSED, v.summary, detail)


def baseline_still_runs(view: StudyView) -> Check:
    name = "baseline config still runs"
    night = view.night
    if night is None or night.baseline is None:
        return Check(name, SKIPPED, "no baseline config for this study")
    runs = baseline_runs(night.baseline, view.records)
    if not runs:
        return Check(name, SKIPPED, "the baseline config was not run again tonight (use --warm-start)")
    bad = next((r for r in runs if not r.ok or r.near_wall), None)
    if bad is None:
        shown = ", ".join(fmt_rate(r.throughput) for r in runs if r.throughput)
        return Check(name, PASSED, f"{len(runs)} runs ok ({shown} {view.unit})")
    v = bad.result.verdict if bad.result else None
    if bad.ok:
        return Check(name, FAILED, f"trial {bad.number} came within the memory margin of the GPU's limit")
    rank = f" on rank {v.rank}" if v and v.rank is not None else ""
    evidence = "\n".join(e.text for e in v.evidence[:5]) if v else ""
    advice = advice_of(view, bad) if v else ""
    return Check(
        name,
        FAILED,
        f"trial {bad.number}: {bad.status.value if bad.status else '?'}{rank}",
        "\n".join(x for x in (evidence, advice and f"advice: {advice}") if x),
    )


def night_checks(view: StudyView) -> tuple[Check, ...]:
    return (stable_config_found(view), no_regression(view), baseline_still_runs(view))
