"""Opening the study storage: SQLite under ``results/`` by default, any Optuna RDB URL otherwise."""

from __future__ import annotations

import hashlib
import json
import logging
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.samplers import BaseSampler

from nccl_tune.errors import NcclTuneError

S_SPACE_NAME = "space_name"
S_SPACE_SOURCE = "space_source"
S_SPACE_TEXT = "space_text"
S_COMMAND = "command"
S_TOOL_VERSION = "nccl_tune_version"

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def default_study_name(space_name: str, command: tuple[str, ...]) -> str:
    """A stable name for (space, command): running the same command again resumes its study."""
    digest = hashlib.sha1(json.dumps(list(command)).encode()).hexdigest()[:8]
    return f"{space_name}-{digest}"


def open_storage(url: str, create: bool = True) -> optuna.storages.BaseStorage:
    """An Optuna storage for ``url``; one-line error when it cannot be reached. With
    ``create=False`` a SQLite file that does not exist is an error, not a new empty database."""
    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///") :])
        if not create and not path.is_file():
            raise NcclTuneError(
                f"storage {url}: no such database; run `nccl-tune run` first, or point --results/--storage at one"
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise NcclTuneError(f"storage {url}: cannot create folder {path.parent}: {exc.strerror}") from None
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
    logging.getLogger("sqlalchemy").setLevel(logging.ERROR)
    try:
        return optuna.storages.RDBStorage(url, **kwargs)
    except Exception as exc:  # sqlalchemy's errors vary by driver; all mean "cannot use this URL"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NcclTuneError(
            f"storage {url}: cannot open it ({first}); give a reachable Optuna storage URL with --storage "
            "(e.g. sqlite:///results/nccl-tune.db or postgresql://user@host/db)"
        ) from None


def study_names(storage: optuna.storages.BaseStorage) -> list[str]:
    return [s.study_name for s in optuna.study.get_all_study_summaries(storage, include_best_trial=False)]


def load_existing(storage: optuna.storages.BaseStorage, url: str, name: str | None) -> optuna.Study:
    """An existing study by name, or the only study in the storage when ``name`` is None."""
    names = study_names(storage)
    if name is None:
        if len(names) == 1:
            name = names[0]
        elif not names:
            raise NcclTuneError(f"storage {url} holds no study yet; run `nccl-tune run -- COMMAND` first")
        else:
            raise NcclTuneError(f"storage {url} holds several studies; choose one with --study: {', '.join(names)}")
    elif name not in names:
        shown = ", ".join(names) if names else "none"
        raise NcclTuneError(f"no study named {name!r} in {url}; studies there: {shown}")
    return optuna.load_study(study_name=name, storage=storage)


def create_or_resume(
    storage: optuna.storages.BaseStorage,
    url: str,
    name: str,
    sampler: BaseSampler,
    *,
    space_name: str,
    space_source: str,
    space_text: str,
    command: tuple[str, ...],
) -> tuple[optuna.Study, bool]:
    """Open study ``name`` (creating it if needed); True when it already existed."""
    existed = name in study_names(storage)
    study = optuna.create_study(
        study_name=name, storage=storage, sampler=sampler, direction="maximize", load_if_exists=True
    )
    attrs = study.user_attrs
    if existed and attrs.get(S_COMMAND) not in (None, list(command)):
        raise NcclTuneError(
            f"study {name!r} was created for the command {' '.join(attrs[S_COMMAND])!r}; "
            f"use another --study for {' '.join(command)!r}"
        )
    if existed and attrs.get(S_SPACE_NAME) not in (None, space_name):
        raise NcclTuneError(
            f"study {name!r} was created with the space {attrs[S_SPACE_NAME]!r}, not {space_name!r}; "
            "use another --study or the same --space"
        )
    if not existed:
        from nccl_tune import __version__

        study.set_user_attr(S_SPACE_NAME, space_name)
        study.set_user_attr(S_SPACE_SOURCE, space_source)
        study.set_user_attr(S_SPACE_TEXT, space_text)
        study.set_user_attr(S_COMMAND, list(command))
        study.set_user_attr(S_TOOL_VERSION, __version__)
    return study, existed
