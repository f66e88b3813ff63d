"""Series of nights in the study storage.

Each night is its own Optuna study; its user attributes hold the series name, the fingerprint
recorded when it ran, and the night's record (best runs, baseline, verdict). A series is every
study of the storage that names it, oldest first; nothing else is stored anywhere.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna

from nccl_tune.errors import NcclTuneError
from nccl_tune.nightly.night import Night
from nccl_tune.tuner.records.hardware_record import recorded_fingerprint

S_SERIES = "series"
S_NIGHT = "night"
S_STARTED_AT = "started_at"

_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def plain_series_name(name: str) -> bool:
    """Letters, digits, ``_ . -``, at most 64, starting with a letter or digit (no ``..``)."""
    return bool(_PLAIN.fullmatch(name)) and ".." not in name


def check_series_name(name: str) -> str:
    """``name`` if it is a plain name; one-line error otherwise."""
    if not plain_series_name(name):
        raise NcclTuneError(
            f"--series {name!r}: not a plain name; use letters, digits, '_', '.' and '-' (at most 64, "
            "starting with a letter or digit), e.g. --series skyrl-nightly"
        )
    return name


def night_from_attrs(study_name: str, attrs: Mapping[str, Any]) -> Night | None:
    """The night a study's user attributes describe: its record when the run kept one (a run in a
    series, or compared with --baseline), a night still running when only its series is known,
    else None."""
    if attrs.get(S_NIGHT):
        return Night.from_json(attrs[S_NIGHT])
    series = attrs.get(S_SERIES)
    if not series:
        return None
    return Night(study_name, series, attrs.get(S_STARTED_AT, ""), recorded_fingerprint(attrs))


def series_nights(storage: optuna.storages.BaseStorage, series: str) -> list[Night]:
    """Every night of ``series`` in ``storage``, oldest first."""
    nights = []
    for s in optuna.study.get_all_study_summaries(storage, include_best_trial=False):
        night = night_from_attrs(s.study_name, s.user_attrs)
        if night is not None and night.series and night.series == series:
            nights.append(night)
    return sorted(nights, key=lambda n: (n.started_at, n.study))


def series_names(storage: optuna.storages.BaseStorage) -> list[str]:
    names = {
        s.user_attrs.get(S_SERIES) for s in optuna.study.get_all_study_summaries(storage, include_best_trial=False)
    }
    return sorted(n for n in names if n)


def pick_series(storage: optuna.storages.BaseStorage, url: str, series: str | None) -> str:
    """``series`` if the storage holds it, else the only series there; one-line errors otherwise."""
    names = series_names(storage)
    if series is not None:
        check_series_name(series)
        if series not in names:
            shown = ", ".join(names) or "none"
            raise NcclTuneError(f"no series named {series!r} in {url}; series there: {shown}")
        return series
    if len(names) == 1:
        return names[0]
    if not names:
        raise NcclTuneError(f"storage {url} holds no series yet; run `nccl-tune run --series NAME -- COMMAND` nightly")
    raise NcclTuneError(f"storage {url} holds several series; choose one with --series: {', '.join(names)}")


def write_night(study: optuna.Study, night: Night) -> None:
    study.set_user_attr(S_NIGHT, night.to_json())


def load_history(storage_url: str, series: str | None):
    """The ``History`` of a stored series (the only one when ``series`` is None)."""
    from nccl_tune.nightly.history import build_history
    from nccl_tune.tuner.records.storage import open_storage

    storage = open_storage(storage_url, create=False)
    name = pick_series(storage, storage_url, series)
    return build_history(name, series_nights(storage, name))


def night_study_name(series: str, now: dt.datetime | None = None) -> str:
    """A new study per night: ``SERIES.YYYYMMDD-HHMMSS`` (UTC)."""
    return f"{series}.{(now or dt.datetime.now(dt.timezone.utc)).strftime('%Y%m%d-%H%M%S')}"


def nightly_option_problems(
    series: str | None, baseline_file: Path | None, warm_start: bool, pct: float | None
) -> list[str]:
    """One line per nightly option no storage could make right, with the fix."""
    problems = []
    if series is not None and not plain_series_name(series):
        problems.append(
            f"--series {series!r}: not a plain name; use letters, digits, '_', '.' and '-' (at most 64, "
            "starting with a letter or digit), e.g. --series skyrl-nightly"
        )
    if pct is not None and not 0 < pct < 100:
        problems.append(f"--fail-on-regression {pct:g}: give a percentage between 0 and 100, e.g. 5")
    if warm_start and series is None and baseline_file is None:
        problems.append(
            "--warm-start: nothing to start from; name the series with --series NAME "
            "or give a tuned YAML with --baseline FILE"
        )
    if pct is not None and series is None and baseline_file is None:
        problems.append(
            f"--fail-on-regression {pct:g}: no baseline to compare with; name the series with "
            "--series NAME or give a tuned YAML with --baseline FILE"
        )
    return problems
