"""A stored study read once for a report: ``load_view`` opens it (or the latest night of a
series) and gathers what every report format shows, on top of ``study_view.stored_of``."""

from __future__ import annotations

import datetime as dt

import optuna

from nccl_tune.errors import NcclTuneError
from nccl_tune.nightly.history import build_history
from nccl_tune.reporting.view import StudyView, TrialTiming
from nccl_tune.tuner import study_records as R
from nccl_tune.tuner.hardware_record import recorded_fingerprint
from nccl_tune.tuner.nccl_sweep import report as sweep_report
from nccl_tune.tuner.series import check_series_name, series_nights
from nccl_tune.tuner.storage import load_existing, open_storage
from nccl_tune.tuner.study_view import stored_of


def _timings(trials: list[optuna.trial.FrozenTrial], recs: list[R.TrialRecord]) -> dict[int, TrialTiming]:
    starts = [t.datetime_start for t in trials if t.datetime_start is not None]
    if not starts:
        return {}
    t0 = min(starts)
    out = {}
    for t, r in zip(trials, recs):
        if t.datetime_start is None:
            continue
        end = t.datetime_complete or t.datetime_start
        wall = 0.0
        if r.outcome is R.Outcome.LAUNCHED:
            wall = (r.result.wall_s if r.result else 0.0) or (end - t.datetime_start).total_seconds()
        out[t.number] = TrialTiming((t.datetime_start - t0).total_seconds(), wall)
    return out


def _latest_night_study(storage: optuna.storages.BaseStorage, url: str, series: str) -> str:
    nights = series_nights(storage, check_series_name(series))
    if not nights:
        raise NcclTuneError(
            f"no series named {series!r} in {url}; run `nccl-tune run --series {series} -- COMMAND` first"
        )
    return nights[-1].study


def load_view(storage_url: str, study_name: str | None, series: str | None = None) -> StudyView:
    """The report's view of ``study_name`` (the only study when None; the latest night of
    ``series`` when a series is given instead)."""
    storage = open_storage(storage_url, create=False)
    named = study_name
    if study_name is None and series is not None:
        study_name = _latest_night_study(storage, storage_url, series)
    study = load_existing(storage, storage_url, study_name)
    stored = stored_of(study, storage_url)
    trials = study.get_trials(deepcopy=False)
    night = stored.night
    if named is not None and series is not None and (night is None or night.series != series):
        raise NcclTuneError(f"--study {named} is not a night of series {series!r}; give --study or --series, not both")
    history = build_history(night.series, series_nights(storage, night.series)) if night and night.series else None
    return StudyView(
        study=stored.name,
        storage_url=storage_url,
        command=stored.command,
        space=stored.space,
        records=stored.records,
        winner=stored.winner,
        baseline=stored.baseline,
        timings=_timings(trials, list(stored.records)),
        fingerprint=recorded_fingerprint(study.user_attrs),
        night=night,
        history=history,
        generated_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        passed_over=stored.passed_over,
        nccl_sweep=sweep_report(study),
    )
