"""A real study of the tiny trainer, made the night of a series whose baseline config now runs
out of memory, shared by the report tests (one tuning run per test session)."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from nccl_tune.nightly.night import Baseline, Night
from nccl_tune.nightly.regression import RunFact, judge_night
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.hardware_record import S_HARDWARE
from nccl_tune.tuner.records.series import S_SERIES, S_STARTED_AT, write_night
from nccl_tune.tuner.records.stability import select_winner
from tests.tuner.conftest import TINY_SPACE, TINY_TRAINER, run_cli
from tests.tuner.nights import fingerprint, store_nights

SERIES = "tiny-nightly"


def _make_night(url: str) -> None:
    """Five earlier nights, then study ``t`` as the sixth, compared with a baseline config (its
    first out-of-memory trial) that now fails."""
    store_nights(url, SERIES, [390.0, 402.0, 398.0, 401.0, 399.0])
    study = optuna.load_study(study_name="t", storage=url)
    recs = R.records(study)
    oom = next(r for r in recs if r.result is not None and r.status is not None and r.status.value == "oom")
    winner = select_winner(recs, require_confirmation=False)
    fp = fingerprint(torch_version="2.13.0")
    base = Baseline("series", f"{SERIES}.4", dict(oom.values), (399.0, 400.0, 401.0), "tiny")
    v = oom.result.verdict
    run = RunFact(oom.number, "oom", rank=v.rank, evidence=v.evidence[0].text if v.evidence else "", advice=v.advice)
    verdict = judge_night(base.runs_per_s, [run], [r.throughput for r in winner.ok_runs], 5.0)
    night = Night(
        "t",
        SERIES,
        "2026-08-06T02:00:00+00:00",
        fp,
        tuple(r.throughput for r in winner.ok_runs),
        dict(winner.values),
        winner.first.number,
        base,
        verdict,
        True,
    )
    study.set_user_attr(S_SERIES, SERIES)
    study.set_user_attr(S_STARTED_AT, night.started_at)
    study.set_user_attr(S_HARDWARE, {"host": fp.host, "fingerprint": fp.to_json()})
    write_night(study, night)


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory) -> Path:
    """A folder whose results/ holds study ``t`` (8 trials of the tiny trainer, the first an OOM), the
    sixth night of series ``tiny-nightly``."""
    root = tmp_path_factory.mktemp("report")
    trainer = ["--", str(Path(__import__("sys").executable)), str(TINY_TRAINER)]
    common = ["run", "--space", str(TINY_SPACE), "--study", "t", "--seed", "3"]
    # first a config that runs out of memory (the default sampler's memory model would never launch
    # one once it has seen the trend), then the search resumes the same study
    proc = run_cli(
        [
            *common,
            "--trials",
            "1",
            "--confirm",
            "0",
            "--set",
            "trainer.micro=8",
            "--set",
            "trainer.offload=false",
            *trainer,
        ],
        cwd=root,
    )
    assert proc.returncode == 2 and "trial 0 oom" in proc.stdout, proc.stdout + proc.stderr
    proc = run_cli([*common, "--trials", "7", "--set", "trainer.offload=false", *trainer], cwd=root)
    assert proc.returncode == 0, proc.stderr
    _make_night(f"sqlite:///{root}/results/nccl-tune.db")
    return root
