"""spec.json and result.json in the trial folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import OK_VERDICT, FailureClass
from nccl_tune.launchers.trial_files import interrupted_result, read_result, write_result, write_spec
from nccl_tune.trial import Clocks, StopReason, TrialResult, TrialSpec


def spec(tmp_path: Path) -> TrialSpec:
    return TrialSpec(
        "s",
        4,
        {"micro": 2},
        ("bash", "run.sh", "a=1"),
        {"NCCL_ALGO": "Ring", "NCCL_P2P_DISABLE": None},
        tmp_path / "t4",
        clocks=Clocks(phase_max_s={"generate": 12.0}),
    )


def test_spec_file_and_stale_result(tmp_path: Path) -> None:
    s = spec(tmp_path)
    s.trial_dir.mkdir()
    (s.trial_dir / "result.json").write_text("{}")  # left by an earlier attempt
    data = json.loads(write_spec(s).read_text())
    assert data["argv"] == ["bash", "run.sh", "a=1"] and data["marker"] == "s/4"
    assert data["env"] == {"NCCL_ALGO": "Ring", "NCCL_P2P_DISABLE": None}
    assert data["params"] == {"micro": 2} and data["clocks"]["phase_max_s"] == {"generate": 12.0}
    assert not (s.trial_dir / "result.json").exists()
    assert [p.name for p in s.trial_dir.iterdir()] == ["spec.json"]  # no temporary file left


def test_result_round_trip_and_interrupted_records(tmp_path: Path) -> None:
    result = TrialResult(
        4, FailureClass.OK, OK_VERDICT, StopReason.MEASURED, step_times_s=(1.0, 2.0), trial_dir=tmp_path
    )
    write_result(result, tmp_path)
    assert read_result(tmp_path) == result
    assert interrupted_result(tmp_path, 4, "tuner killed") == result  # a finished trial is never overwritten
    other = tmp_path / "t5"
    other.mkdir()
    rec = interrupted_result(other, 5, "tuner killed while trial 5 ran", escaped_processes=3)
    assert rec.status is FailureClass.INTERRUPTED and rec.escaped_processes == 3
    assert read_result(other) == rec
    assert read_result(tmp_path / "none") is None


def test_unreadable_result_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "result.json").write_text("{not json")
    with pytest.raises(NcclTuneError, match=r"result.json is not a readable trial result .*delete it"):
        read_result(tmp_path)
