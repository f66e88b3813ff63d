"""What a run checks before its first trial, with nothing written.

``nccl-tune run --dry-run`` and the real run call the same checks, so a dry run that passes is a
run that starts, and a run refused here leaves nothing behind: the command (the launcher's
check), the trainer's log folder, where the run writes (``--results``, the storage, ``-o``), the
study it would resume, and the nightly plan (``--baseline``, ``--series``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import optuna

from nccl_tune.launchers.base import Launcher
from nccl_tune.launchers.private_ray import refuse_nccl_params
from nccl_tune.nightly.fingerprint import Fingerprint
from nccl_tune.search_spaces.skyrl_layout import check_log_paths
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.trial import TrialSpec
from nccl_tune.tuner.records import dropped
from nccl_tune.tuner.records.hardware_record import hardware_facts
from nccl_tune.tuner.records.storage import (
    check_results,
    check_storage_writable,
    check_study,
    peek_storage,
    study_folder,
)
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.study.night import check_runnable, plan_night
from nccl_tune.userfile import check_writable


def refuse_launcher_env(settings: RunSettings, space: SearchSpace, held: Mapping[str, Any]) -> None:
    """One line when the local launcher would tune NCCL variables on an existing Ray cluster (its
    workers keep the cluster's environment); the Ray launcher gives every trial a private Ray."""
    if settings.launcher == "local":
        tuned_nccl = [n for n in dropped.nccl_params(space) if n not in held]
        refuse_nccl_params({**os.environ, **settings.extra_env}, tuned_nccl)


def probe_fingerprint_of(settings: RunSettings) -> Fingerprint:
    """This node's and the command's fingerprint, as the run records it."""
    return Fingerprint.from_json(hardware_facts(settings.command)["fingerprint"])


def check_before_trials(
    settings: RunSettings,
    space: SearchSpace,
    held: Mapping[str, Any],
    study: str,
    launcher: Launcher,
    first: TrialSpec,
    fingerprint: Callable[[], Fingerprint] | None = None,
) -> None:
    """Raise the one-line ``NcclTuneError`` the run would raise before its first trial; write nothing.
    ``fingerprint`` gives this node's (probed only for a nightly run)."""
    launcher.prepare(first)
    check_log_paths(first.argv)
    check_results(settings.results)
    check_storage_writable(settings.storage_url)
    if settings.output is not None:
        check_writable(settings.output)
    storage = peek_storage(settings.storage_url)
    if storage is not None:
        check_study(
            storage,
            settings.storage_url,
            study,
            space_name=space.name,
            space_text=space.text,
            command=settings.command,
            folder=study_folder(settings.results, study),
        )
    check_night(storage, settings, space, held, fingerprint or (lambda: probe_fingerprint_of(settings)))


def check_night(
    storage: optuna.storages.BaseStorage | None,
    settings: RunSettings,
    space: SearchSpace,
    held: Mapping[str, Any],
    fingerprint: Callable[[], Fingerprint],
) -> None:
    """The nightly plan's refusals (a baseline file of another space, no earlier night to start from,
    a baseline outside the run's pins or rules). A storage that cannot be read without writing to it
    (None: a server) holds unknown nights: only ``--baseline`` is checked then."""
    series = settings.series if storage is not None else None
    if series is None and settings.baseline_file is None:
        return
    plan = plan_night(
        storage or optuna.storages.InMemoryStorage(),
        space,
        fingerprint(),
        series=series,
        baseline_file=settings.baseline_file,
        warm_start=settings.warm_start,
        fail_on_regression_pct=settings.fail_on_regression_pct,
    )
    check_runnable(plan, space, held)
