"""A stored study as the read-only commands see it. One home for "open a study and pick its
winner": ``open_study`` (``export`` and every report format, which ``reporting.view`` builds its
view on) and ``run`` (on the study it has open) read the study through ``stored_of`` and pick the
winner with ``pick_winner``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import optuna

from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import FailureClass
from nccl_tune.nightly.fingerprint import Fingerprint
from nccl_tune.nightly.night import Night
from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.tuner.records import dropped
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.hardware_record import recorded_fingerprint, recorded_hardware
from nccl_tune.tuner.records.nccl_sweep import SweepLine
from nccl_tune.tuner.records.nccl_sweep import report as sweep_report
from nccl_tune.tuner.records.semantics import study_reference, study_user_env
from nccl_tune.tuner.records.series import check_series_name, night_from_attrs, series_nights
from nccl_tune.tuner.records.stability import (
    Candidate,
    baseline,
    candidates,
    changes_semantics,
    select_winner,
    speed_only,
)
from nccl_tune.tuner.records.storage import S_COMMAND, S_SPACE_SOURCE, S_SPACE_TEXT, load_existing, open_storage
from nccl_tune.tuner.records.study_records import TrialRecord
from nccl_tune.tuner.search.failure_model import FlakyRule, flaky_rule
from nccl_tune.tuner.winner.worst_proof import fallback


def pick_winner(
    records: Iterable[TrialRecord],
    space: SearchSpace,
    prefer_confirmed: bool = True,
    flaky: FlakyRule | None = None,
    failing_worst: bool = True,
) -> Candidate | None:
    """The study's winner: the fastest stable candidate confirmed by a re-run, else (or, without
    ``prefer_confirmed``, in any case) the fastest stable one; its ``confirmed`` says which. A
    change to the training itself, or an environment variable set away from the user's own run,
    wins only beyond the measured noise (``stability.select_winner``); a config holding a value the
    study has seen fail now and then is not stable (``flaky``: the study's ``flaky_rule`` when None).
    With no stable config, the fastest that fails only at its worst batch (``worst_proof.fallback``),
    unless ``failing_worst`` is False."""
    recs = list(records)
    ref, user = study_reference(space, recs), study_user_env(space, recs)
    flaky = flaky or flaky_rule(space, recs)
    confirmed = select_winner(recs, True, semantic_ref=ref, flaky=flaky, env_ref=user) if prefer_confirmed else None
    best = confirmed or select_winner(recs, False, semantic_ref=ref, flaky=flaky, env_ref=user)
    return best if best is not None or not failing_worst else fallback(recs, flaky)


def pick_speed_only(
    records: Iterable[TrialRecord], space: SearchSpace, prefer_confirmed: bool = True, flaky: FlakyRule | None = None
) -> Candidate | None:
    """``pick_winner`` among the configs that keep every semantic parameter as the user's run has it:
    the best the study found without changing the training (the baseline itself when none beat it)."""
    recs = list(records)
    ref, user = study_reference(space, recs), study_user_env(space, recs)
    flaky = flaky or flaky_rule(space, recs)
    confirmed = speed_only(recs, True, ref, flaky, user) if prefer_confirmed else None
    return confirmed or speed_only(recs, False, ref, flaky, user)


def fastest_changing_training(
    records: Iterable[TrialRecord], space: SearchSpace, flaky: FlakyRule | None = None
) -> Candidate | None:
    """The fastest stable config (not ``flaky``) that changes a semantic parameter from the user's run."""
    recs = list(records)
    ref = study_reference(space, recs)
    flaky = flaky or flaky_rule(space, recs)
    found = [c for c in candidates(recs) if c.stable and changes_semantics(c, ref) and not flaky(c.values)]
    return max(found, key=lambda c: c.throughput, default=None)


def passed_over(records: Iterable[TrialRecord], flaky: FlakyRule) -> tuple[tuple[Candidate, str], ...]:
    """Configs whose every run finished away from the wall, left out for holding a flaky value, with
    why; fastest first."""
    found = [c for c in candidates(records) if c.stable and flaky(c.values)]
    return tuple((c, flaky.why(c.values)) for c in sorted(found, key=lambda c: -c.throughput))


@dataclass(frozen=True)
class TrialTiming:
    start_s: float
    """Seconds from the study's first trial start to this trial's start."""
    duration_s: float
    """Wall time of the trial (launch to teardown), 0 for a trial not launched."""


def _timings(trials: list[optuna.trial.FrozenTrial], recs: Iterable[TrialRecord]) -> dict[int, TrialTiming]:
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


@dataclass(frozen=True)
class StoredStudy:
    """A study's space, command, trial records, winner, baseline and recorded hardware."""

    name: str
    storage_url: str
    space: SearchSpace
    command: tuple[str, ...]
    records: tuple[TrialRecord, ...]
    winner: Candidate | None
    baseline: Candidate | None
    hardware: Mapping[str, Any] | None = None
    """What ``run`` recorded about the node (None for studies recorded before it was kept)."""
    night: Night | None = None
    """The nightly record (a run in a series or compared with --baseline), if any."""
    dropped: Mapping[str, str] = field(default_factory=dict)
    """Parameters dropped during the study (their value never reached the program), with the reason."""
    passed_over: tuple[tuple[Candidate, str], ...] = ()
    """Configs whose own runs all finished but that hold a value the study has seen fail now and then
    (``passed_over``), with why they are not stable."""
    timings: Mapping[int, TrialTiming] = field(default_factory=dict)
    """When each trial started and how long it ran, by trial number."""
    fingerprint: Fingerprint | None = None
    """The node's fingerprint as ``run`` recorded it (``hardware``, parsed)."""
    nccl_sweep: tuple[SweepLine, ...] = ()
    """The NCCL sweep's checks (``tuner.records.nccl_sweep``), the baseline's first; empty when none ran."""
    series_nights: tuple[Night, ...] = ()
    """Every night of the series this study is a night of (read by ``open_study`` only)."""
    speed_only: Candidate | None = None
    """The best config that changes no semantic parameter (``pick_speed_only``)."""
    with_training: Candidate | None = None
    """The fastest stable config that changes the training (``fastest_changing_training``)."""
    flaky: FlakyRule | None = field(default=None, compare=False, repr=False)
    """The study's ``flaky_rule``, fitted once: a caller that picks the winner again (``run``, which
    may not require confirmation) passes it to ``pick_winner``."""

    @property
    def failures(self) -> dict[str, int]:
        """Launched trials that failed, by class."""
        out: dict[str, int] = {}
        for r in self.records:
            if r.outcome is R.Outcome.LAUNCHED and r.status not in (None, FailureClass.OK):
                out[r.status.value] = out.get(r.status.value, 0) + 1
        return out


def stored_of(study: optuna.Study, storage_url: str, space: SearchSpace | None = None) -> StoredStudy:
    """An open ``study`` read once (``space``: the one a run uses, else the one the study stored)."""
    attrs = study.user_attrs
    if space is None:
        space = parse_space(
            attrs[S_SPACE_TEXT], source=attrs.get(S_SPACE_SOURCE, ""), label=f"study {study.study_name}"
        )
    recs = tuple(R.records(study))
    flaky = flaky_rule(space, recs)
    return StoredStudy(
        name=study.study_name,
        storage_url=storage_url,
        space=space,
        command=tuple(attrs.get(S_COMMAND) or ()),
        records=recs,
        winner=pick_winner(recs, space, flaky=flaky),
        baseline=baseline(recs),
        hardware=recorded_hardware(attrs),
        night=night_from_attrs(study.study_name, attrs),
        dropped=dropped.load(study),
        passed_over=passed_over(recs, flaky),
        timings=_timings(study.get_trials(deepcopy=False), recs),
        fingerprint=recorded_fingerprint(attrs),
        nccl_sweep=sweep_report(study),
        speed_only=pick_speed_only(recs, space, flaky=flaky),
        with_training=fastest_changing_training(recs, space, flaky),
        flaky=flaky,
    )


def _latest_night_study(storage: optuna.storages.BaseStorage, url: str, series: str) -> str:
    nights = series_nights(storage, check_series_name(series))
    if not nights:
        raise NcclTuneError(
            f"no series named {series!r} in {url}; run `nccl-tune run --series {series} -- COMMAND` first"
        )
    return nights[-1].study


def open_study(storage_url: str, name: str | None, series: str | None = None) -> StoredStudy:
    """The stored study ``name`` (the only one when None; the latest night of ``series`` when a series
    is given instead), read-only, with the nights of its series."""
    storage = open_storage(storage_url, create=False)
    if name is None and series is not None:
        stored = stored_of(
            load_existing(storage, storage_url, _latest_night_study(storage, storage_url, series)), storage_url
        )
    else:
        stored = stored_of(load_existing(storage, storage_url, name), storage_url)
    night = stored.night
    if name is not None and series is not None and (night is None or night.series != series):
        raise NcclTuneError(f"--study {name} is not a night of series {series!r}; give --study or --series, not both")
    if night is None or not night.series:
        return stored
    return replace(stored, series_nights=tuple(series_nights(storage, night.series)))
