"""Synthetic nights of a series written into a real Optuna storage, the way `run --series` keeps them."""

from __future__ import annotations

import optuna

from nccl_tune.nightly.fingerprint import Fingerprint
from nccl_tune.nightly.night import Baseline, Night
from nccl_tune.nightly.regression import compare_throughput
from nccl_tune.tuner.records.hardware_record import S_HARDWARE
from nccl_tune.tuner.records.series import S_SERIES, S_STARTED_AT, write_night

FP = dict(
    host="node-1",
    gpu_model="NVIDIA H100 80GB HBM3",
    gpu_count=8,
    gpu_memory_gib=79.65,
    driver_version="550.54.15",
    cuda_version="12.4",
    torch_version="2.12.0",
    nccl_version="2.21.5",
    python_version="3.11.7",
    trainer_package=None,
    trainer_version=None,
    trainer_commit="a" * 40,
    trainer_branch="main",
    nccl_tune_version="0.1.0",
    recorded_at="",
)


def fingerprint(**changes) -> Fingerprint:
    return Fingerprint(**{**FP, **changes})


def store_nights(
    url: str,
    series: str,
    bests: list[float | None],
    fingerprints: list[Fingerprint] | None = None,
    threshold_pct: float = 5.0,
) -> list[Night]:
    """One study per night, each compared with the previous night's runs."""
    storage = optuna.storages.RDBStorage(url)
    nights: list[Night] = []
    for i, best in enumerate(bests):
        fp = (fingerprints or [fingerprint()] * len(bests))[i]
        runs = () if best is None else (best * 0.99, best, best * 1.01)
        prev = next((n for n in reversed(nights) if n.best_runs_per_s), None)
        base = None if prev is None else Baseline("series", prev.study, {"x": 1}, prev.best_runs_per_s, "tiny")
        verdict = compare_throughput(base.runs_per_s, runs, threshold_pct) if base and runs else None
        started = f"2026-08-{i + 1:02d}T02:00:00+00:00"
        night = Night(f"{series}.{i}", series, started, fp, runs, {"x": 1}, 0 if runs else None, base, verdict, True)
        study = optuna.create_study(study_name=night.study, storage=storage, direction="maximize")
        study.set_user_attr(S_SERIES, series)
        study.set_user_attr(S_STARTED_AT, started)
        study.set_user_attr(S_HARDWARE, {"host": fp.host, "fingerprint": fp.to_json()})
        write_night(study, night)
        nights.append(night)
    return nights
