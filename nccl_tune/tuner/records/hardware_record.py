"""The hardware and software a study ran on, recorded in the study when ``run`` starts, so that
``export``, ``report`` and ``history`` name them without probing the machine they run on (which
may have no GPU at all).

One function builds the record (``hardware_facts``): the run-time fingerprint
(``nccl_tune.nightly.fingerprint``: GPUs, driver, CUDA, torch, NCCL, the trainer's version or
commit, the host) and a readable summary of it; every reader gets its fields from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import optuna

from nccl_tune.nightly.fingerprint import Fingerprint, probe_fingerprint

S_HARDWARE = "hardware"
"""Study user attribute holding the record of the latest run."""


def hardware_facts(command: Sequence[str] = (), cwd: Path | None = None) -> dict[str, Any]:
    """This node and ``command`` as trials see them: host, GPUs (count, model, memory), driver,
    CUDA, torch and NCCL versions, the trainer; ``fingerprint`` holds every field."""
    fp = probe_fingerprint(command, cwd)
    gpus = f"{fp.gpu_count}x {fp.gpu_model} ({fp.gpu_memory_gib:.0f} GiB)" if fp.gpu_count else "none"
    return {
        "host": fp.host,
        "gpus": gpus,
        "driver": fp.driver_version,
        "cuda": fp.cuda_version,
        "torch": fp.torch_version,
        "nccl": fp.nccl_version,
        "trainer": fp.trainer,
        "fingerprint": fp.to_json(),
    }


def store_hardware(study: optuna.Study, facts: Mapping[str, Any]) -> None:
    """Keep ``hardware_facts``' record in ``study`` (the latest run's hardware wins)."""
    study.set_user_attr(S_HARDWARE, dict(facts))


def recorded_hardware(study_attrs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record stored by the latest ``run`` (None for a study recorded before it was kept)."""
    facts = study_attrs.get(S_HARDWARE)
    return dict(facts) if isinstance(facts, Mapping) else None


def recorded_fingerprint(study_attrs: Mapping[str, Any]) -> Fingerprint | None:
    """The fingerprint stored by the latest ``run`` (None for a study recorded before it was kept)."""
    facts = recorded_hardware(study_attrs)
    fp = facts.get("fingerprint") if facts else None
    return Fingerprint.from_json(fp) if isinstance(fp, Mapping) else None
