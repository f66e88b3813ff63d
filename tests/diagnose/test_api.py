"""``diagnose_paths`` on files, trial folders and bad paths; ``print_diagnoses`` output."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from nccl_tune.diagnose.api import diagnose_paths
from nccl_tune.diagnose.show import print_diagnoses
from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import FailureClass as F

from .helpers import FIXTURES, cuda_oom, read_fixture, started


def _write_log(path: Path, name: str) -> Path:
    path.write_text("".join(read_fixture(FIXTURES / name).lines))
    return path


def test_log_file_and_gzipped_log(tmp_path: Path) -> None:
    plain = _write_log(tmp_path / "run.log", "09_init_failure.log")
    gz = tmp_path / "run2.log.gz"
    with gzip.open(gz, "wt") as fh:
        fh.write("".join(read_fixture(FIXTURES / "07_cuda_error.log").lines))
    a, b = diagnose_paths([plain, gz])
    assert a.verdict.failure_class is F.INIT_FAILURE and a.inputs == (plain,)
    assert b.verdict.failure_class is F.CUDA_ERROR
    assert b.verdict.evidence[0].source == "run2.log.gz"


def test_trial_folder_reads_output_log_and_exit_status(tmp_path: Path) -> None:
    trial = tmp_path / "0007"
    trial.mkdir()
    (trial / "output.log").write_text(started("step") + started("policy_train") + "working\n")
    (trial / "result.json").write_text(json.dumps({"number": 7, "exit_code": None, "signal_name": "SIGKILL"}))
    (trial / "spec.json").write_text("{}")
    (d,) = diagnose_paths([trial])
    assert d.verdict.failure_class is F.CRASH
    assert d.signal_name == "SIGKILL" and "SIGKILL" in d.verdict.advice
    assert d.verdict.phase == "policy_train"
    assert [p.name for p in d.inputs] == ["output.log"]


def test_a_trial_that_ended_in_its_nccl_check_is_diagnosed_from_the_check(tmp_path: Path) -> None:
    trial = tmp_path / "0003"
    check = trial / "nccl-check"
    check.mkdir(parents=True)
    log = _write_log(check / "output.log", "07_cuda_error.log")
    (trial / "result.json").write_text(
        json.dumps({"number": 3, "status": "crash", "log_paths": [str(log)], "nccl_check_failed": True})
    )
    (d,) = diagnose_paths([trial])
    assert d.path == check and d.inputs == (log,)
    assert d.verdict.failure_class is F.CUDA_ERROR
    (trial / "output.log").write_text(started("step"))  # a trial folder with a log of its own is read itself
    (d,) = diagnose_paths([trial])
    assert d.path == trial


def test_trial_folder_with_several_logs(tmp_path: Path) -> None:
    (tmp_path / "output.log").write_text(started("step") + started("policy_train"))
    (tmp_path / "rank3.log").write_text("".join(cuda_oom(3)))
    (d,) = diagnose_paths([tmp_path])
    assert (d.verdict.failure_class, d.verdict.rank) == (F.OOM, 3)
    assert [p.name for p in d.inputs] == ["output.log", "rank3.log"]
    assert d.verdict.evidence[0].source == "rank3.log"


def test_json_has_the_documented_keys(tmp_path: Path) -> None:
    (d,) = diagnose_paths([_write_log(tmp_path / "x.log", "01_collective_mismatch.log")])
    j = d.to_json()
    for key in ("path", "class", "rank", "evidence", "advice", "phase", "after_training", "flight_recorder"):
        assert key in j
    assert j["class"] == "collective_mismatch" and j["rank"] == 0
    assert all(isinstance(e, str) and e.startswith("x.log:") for e in j["evidence"])
    json.dumps(j)


@pytest.mark.parametrize("kind", ["missing", "empty_folder", "directory_of_junk"])
def test_bad_paths_raise_one_line_errors(tmp_path: Path, kind: str) -> None:
    if kind == "missing":
        path = tmp_path / "nope.log"
    else:
        path = tmp_path / "folder"
        path.mkdir()
        if kind == "directory_of_junk":
            (path / "notes.md").write_text("hello")
    with pytest.raises(NcclTuneError) as err:
        diagnose_paths([path])
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg
    assert "log file" in msg


def test_print_diagnoses(tmp_path: Path) -> None:
    ds = diagnose_paths([_write_log(tmp_path / "a.log", "11_oom.log"), _write_log(tmp_path / "b.log", "14_ok.log")])
    buf = io.StringIO()
    print_diagnoses(ds, Console(file=buf, width=200, color_system=None))
    out = buf.getvalue()
    assert "a.log: oom" in out and "b.log: no_end" in out
    assert "advice: vLLM's share of the GPU" in out
    assert "a.log:7: inference-1" in out
