"""A nightly run: its plan, checked before any trial (series name, baseline, threshold), and
its record, kept with the study at the end (best runs, baseline, verdict).

``--series NAME`` keeps every night in a named series; ``--warm-start`` runs the baseline config
first, ``WARM_RUNS`` times, to know its noise; ``--fail-on-regression PCT`` compares the night's
best stable throughput with the baseline's (``nccl_tune.nightly.regression``) and makes a
regression exit 3. The baseline is ``--baseline FILE`` (a tuned YAML) or the series' previous good
night on the same hardware.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from nccl_tune.errors import NcclTuneError
from nccl_tune.nightly.baseline import baseline_from_file, baseline_of_night, previous_good_night
from nccl_tune.nightly.fingerprint import Fingerprint
from nccl_tune.nightly.night import Baseline, Night
from nccl_tune.nightly.regression import RegressionVerdict, RunFact, judge_night
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.tuner.records.series import S_SERIES, S_STARTED_AT, nightly_option_problems, series_nights, write_night
from nccl_tune.tuner.records.stability import Candidate, run_key
from nccl_tune.tuner.records.study_records import Outcome, TrialRecord

WARM_RUNS = 3
"""Runs of the baseline config with --warm-start: three a side is what the rank test needs."""
RECORD_PCT = 5.0
"""Threshold of the verdict recorded for the history when --fail-on-regression is not given."""


@dataclass(frozen=True)
class NightPlan:
    series: str | None
    baseline: Baseline | None
    warm_start: bool
    fail_on_regression_pct: float | None

    @property
    def threshold_pct(self) -> float:
        return self.fail_on_regression_pct if self.fail_on_regression_pct is not None else RECORD_PCT


def _check_options(series: str | None, baseline_file: Path | None, warm_start: bool, pct: float | None) -> None:
    problems = nightly_option_problems(series, baseline_file, warm_start, pct)
    if problems:
        raise NcclTuneError(problems[0])


def plan_night(
    storage: optuna.storages.BaseStorage,
    space: SearchSpace,
    fingerprint: Fingerprint,
    *,
    series: str | None,
    baseline_file: Path | None,
    warm_start: bool,
    fail_on_regression_pct: float | None,
) -> NightPlan:
    """The night's plan; one-line errors, before any trial, for a series name that is not plain,
    a baseline file of another space, and --fail-on-regression or --warm-start with no baseline."""
    _check_options(series, baseline_file, warm_start, fail_on_regression_pct)
    baseline = None
    if baseline_file is not None:
        baseline = baseline_from_file(baseline_file, space)
    elif series is not None:
        night = previous_good_night(series_nights(storage, series), fingerprint.hardware)
        baseline = baseline_of_night(night, space.name) if night is not None else None
        if baseline is not None and set(baseline.values) != set(space.names):
            raise NcclTuneError(
                f"--series {series}: its previous best (study {night.study}) was tuned over other "
                f"parameters than space {space.name}'s; use a new series for this space"
            )
    if baseline is None and (warm_start or fail_on_regression_pct is not None):
        what = "--fail-on-regression" if fail_on_regression_pct is not None else "--warm-start"
        raise NcclTuneError(
            f"{what}: series {series!r} has no earlier night with a stable config on this hardware "
            f"({fingerprint.hardware}), and no --baseline FILE was given; run once without {what} "
            "to start the series, or give a tuned YAML with --baseline"
        )
    return NightPlan(series, baseline, warm_start, fail_on_regression_pct)


def _fact(r: TrialRecord) -> RunFact:
    v = r.result.verdict if r.result else None
    return RunFact(
        r.number,
        r.status.value if r.status else "crash",
        r.throughput,
        r.near_wall,
        v.rank if v else None,
        v.evidence[0].text if v and v.evidence else "",
        v.advice if v else "",
    )


def baseline_runs(baseline: Baseline, records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Tonight's launched runs of the baseline config (runs NCCL makes alike count as one config:
    ``run_key``), but for interrupted ones: a run stopped from outside says nothing of the config."""
    key = run_key(baseline.values)
    return [
        r
        for r in records
        if r.outcome is Outcome.LAUNCHED
        and r.result is not None
        and run_key(r.values) == key
        and r.status is not None
        and r.status.value != "interrupted"
    ]


def verdict_of(plan: NightPlan, records: Sequence[TrialRecord], winner: Candidate | None) -> RegressionVerdict | None:
    """The night against its baseline (None without one)."""
    if plan.baseline is None:
        return None
    runs = [_fact(r) for r in baseline_runs(plan.baseline, records)]
    best = [r.throughput for r in winner.ok_runs if r.throughput] if winner is not None else []
    unit = (winner.throughput_unit if winner is not None else None) or plan.baseline.unit
    return judge_night(plan.baseline.runs_per_s, runs, best, plan.threshold_pct, unit)


def night_record(
    plan: NightPlan,
    study: str,
    started_at: str,
    fingerprint: Fingerprint | None,
    records: Sequence[TrialRecord],
    winner: Candidate | None,
    finished: bool,
) -> Night:
    best = tuple(r.throughput for r in winner.ok_runs if r.throughput) if winner is not None else ()
    return Night(
        study=study,
        series=plan.series or "",
        started_at=started_at,
        fingerprint=fingerprint,
        best_runs_per_s=best,
        best_values=dict(winner.values) if winner is not None else {},
        best_trial=winner.first.number if winner is not None else None,
        baseline=plan.baseline,
        verdict=verdict_of(plan, records, winner) if finished else None,
        finished=finished,
        unit=(winner.throughput_unit if winner is not None else None)
        or (plan.baseline.unit if plan.baseline else "samples/s"),
    )


def check_runnable(plan: NightPlan, space: SearchSpace, pinned: Mapping[str, Any]) -> None:
    """The baseline config must be a config of this run: within its pins and the space's rules."""
    if plan.baseline is None:
        return
    b = plan.baseline
    for name, value in pinned.items():
        if name in b.values and b.values[name] != value:
            raise NcclTuneError(
                f"--set {name}={format_value(value)}: the baseline config ({b.source} {b.origin}) has "
                f"{name}={format_value(b.values[name])}; pin the same value or leave it free"
            )
    broken = space.violations(b.values)
    if broken:
        raise NcclTuneError(
            f"the baseline config ({b.source} {b.origin}) breaks space {space.name}'s rules: {broken[0]}"
        )


def start_night(study: optuna.Study, plan: NightPlan, existed: bool) -> None:
    """Mark a new study as a night of its series (a resumed one keeps its start)."""
    if plan.series and not existed:
        study.set_user_attr(S_SERIES, plan.series)
        study.set_user_attr(S_STARTED_AT, dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))


def finish_night(
    study: optuna.Study,
    plan: NightPlan,
    fingerprint: Fingerprint | None,
    records: Sequence[TrialRecord],
    winner: Candidate | None,
    interrupted: bool,
) -> Night | None:
    """The night's record, kept with the study (None for a run outside any series and without a baseline)."""
    if not plan.series and plan.baseline is None:
        return None
    started = study.user_attrs.get(S_STARTED_AT) or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    night = night_record(plan, study.study_name, started, fingerprint, records, winner, finished=not interrupted)
    write_night(study, night)
    return night
