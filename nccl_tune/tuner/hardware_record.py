"""The hardware a study ran on, recorded in the study when ``run`` starts, so that ``export``
and ``report`` name it without probing the machine they run on (which may have no GPU at all).

One function builds the record (``hardware_facts``); extend it there (a run-time fingerprint)
and every reader gets the new fields.
"""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Mapping

import optuna

from nccl_tune.gpu import open_probe

S_HARDWARE = "hardware"
"""Study user attribute holding the record of the latest run."""


def hardware_facts() -> dict[str, Any]:
    """This node as trials see it: host name, GPUs (count, model, memory) and the torch version."""
    probe = open_probe()
    try:
        devices = probe.devices()
        gpus = f"{len(devices)}x {devices[0].name} ({devices[0].total_gib:.0f} GiB)" if devices else "none"
    finally:
        probe.close()
    try:
        torch_version: str | None = version("torch")
    except PackageNotFoundError:
        torch_version = None
    return {"host": platform.node(), "gpus": gpus, "torch": torch_version}


def record_hardware(study: optuna.Study) -> dict[str, Any]:
    """Probe this node and store the record in ``study`` (the latest run's hardware wins)."""
    facts = hardware_facts()
    study.set_user_attr(S_HARDWARE, facts)
    return facts


def recorded_hardware(study_attrs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record stored by the latest ``run`` (None for a study recorded before it was kept)."""
    facts = study_attrs.get(S_HARDWARE)
    return dict(facts) if isinstance(facts, Mapping) else None
