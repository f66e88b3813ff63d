"""`nccl-tune diagnose` as a user runs it: a real process, JSON for scripts, text for people."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.diagnose.helpers import FIXTURES, fixture_paths, read_fixture

NCCL_TUNE = Path(sys.executable).parent / "nccl-tune"


def nccl_tune(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(NCCL_TUNE), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


@pytest.fixture
def logs(tmp_path: Path) -> dict[str, Path]:
    """Every labelled fixture's log part, as the file a user would pass."""
    out = {}
    for p in fixture_paths():
        fx = read_fixture(p)
        target = tmp_path / p.name
        target.write_text("".join(fx.lines))
        out[fx.label + ":" + p.name] = target
    return out


def test_json_one_object_per_input_line(tmp_path: Path, logs: dict[str, Path]) -> None:
    keys = sorted(logs)
    r = nccl_tune("diagnose", "--json", *[str(logs[k]) for k in keys], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == len(keys)
    for key, line in zip(keys, lines):
        obj = json.loads(line)
        assert obj["path"] == str(logs[key])
        label = key.split(":")[0]
        # a healthy run's log that just stops (no end line, no exit status) is no evidence either way
        assert obj["class"] == ("no_end" if label == "ok" else label)
        assert {"rank", "evidence", "advice", "flight_recorder", "phase", "after_training"} <= set(obj)
    by_name = {Path(json.loads(line)["path"]).name: json.loads(line) for line in lines}
    assert by_name["10_crash.log"]["rank"] == 1
    assert by_name["02_nccl_error.log"]["evidence"][0].startswith("02_nccl_error.log:1: ")


def test_text_output_for_a_person(tmp_path: Path, logs: dict[str, Path]) -> None:
    r = nccl_tune("diagnose", str(logs["oom:12_oom.log"]), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "12_oom.log: oom" in r.stdout
    assert "advice:" in r.stdout and "generator.gpu_memory_utilization" in r.stdout
    assert "12_oom.log:1: torch.OutOfMemoryError" in r.stdout


def test_trial_folder_with_result_json(tmp_path: Path) -> None:
    trial = tmp_path / "trials" / "0003"
    trial.mkdir(parents=True)
    (trial / "output.log").write_text("".join(read_fixture(FIXTURES / "14_ok.log").lines))
    (trial / "result.json").write_text(json.dumps({"exit_code": None, "signal_name": "SIGKILL"}))
    r = nccl_tune("diagnose", "--json", str(trial), cwd=tmp_path)
    obj = json.loads(r.stdout)
    assert obj["class"] == "crash" and obj["signal_name"] == "SIGKILL"


@pytest.mark.parametrize("what", ["missing", "empty"])
def test_bad_path_is_one_line_and_exit_1(tmp_path: Path, what: str) -> None:
    target = tmp_path / ("nope.log" if what == "missing" else "empty")
    if what == "empty":
        target.mkdir()
    r = nccl_tune("diagnose", str(target), cwd=tmp_path)
    assert r.returncode == 1
    err = r.stderr.strip()
    assert err.startswith("error: diagnose:") and str(target) in err
    assert "\n" not in err and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_a_300_mb_line_is_cut_and_memory_stays_bounded(tmp_path: Path) -> None:
    from tests.tuner.conftest import run_cli_peak_rss

    small, big = tmp_path / "small.log", tmp_path / "big.log"
    tail = b"\n[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
    small.write_bytes(b"x" * 100 + tail)
    with open(big, "wb") as fh:
        blob = b"x" * (1 << 20)
        for _ in range(300):
            fh.write(blob)
        fh.write(tail)
    done_small, peak_small = run_cli_peak_rss(["diagnose", "--json", str(small)], cwd=tmp_path)
    done_big, peak_big = run_cli_peak_rss(["diagnose", "--json", str(big)], cwd=tmp_path)
    assert done_small.returncode == 0 and done_big.returncode == 0, done_big.stderr
    verdict = json.loads(done_big.stdout)
    assert verdict["class"] == json.loads(done_small.stdout)["class"] == "cuda_error"
    assert any("illegal memory access" in e for e in verdict["evidence"]), verdict
    print(f"diagnose peak RSS: {peak_small:.0f} MiB on a small log, {peak_big:.0f} MiB with a 300 MiB line")
    assert peak_big - peak_small < 200, (peak_small, peak_big)


def test_a_bare_log_that_stops_without_an_end_is_no_end_never_ok(tmp_path: Path) -> None:
    """No failure and no end: ``no_end`` with the last progress line and where to look; an end line,
    a launcher's report of a clean exit or an exit status 0 make it ``ok``."""
    steps = "".join(
        f"(TaskRunner pid=812) step:{i} - actor/pg_loss:0.{i}1 - perf/throughput:1200.{i}\n" for i in range(1, 4)
    )
    stopped = tmp_path / "stopped.log"
    stopped.write_text(steps + "(TaskRunner pid=812) INFO 02-11 09:38:40 generating rollouts for step 4\n")
    ended = tmp_path / "ended.log"
    ended.write_text(
        steps + "[rank0]:[W1125 03:10:11.000000 ProcessGroupNCCL.cpp:1250] Warning: WARNING: "
        "destroy_process_group() was not called before program exit, which can leak resources.\n"
    )
    finished = tmp_path / "finished.log"
    finished.write_text(steps + "(TaskRunner pid=812) Final validation metrics: {'val/score': 0.61}\n")
    launcher = tmp_path / "launcher.log"
    launcher.write_text(
        steps + "I0215 11:48:09.201000 7711 torch/distributed/elastic/agent/server/api.py:879] [default] worker "
        "group successfully finished. Waiting 300 seconds for other agents to finish.\n"
    )
    r = nccl_tune("diagnose", str(stopped), str(ended), str(finished), str(launcher), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    said = r.stdout.split("\n\n")
    assert said[0].startswith(f"{stopped}: no_end") and "dmesg" in said[0] and "sacct" in said[0]
    assert "stopped.log:3: (TaskRunner pid=812) step:3" in said[0]  # the last progress line
    for text, path in zip(said[1:], (ended, finished, launcher)):
        assert text.startswith(f"{path}: ok"), text
    r = nccl_tune("diagnose", "--json", str(stopped), str(finished), cwd=tmp_path)
    got = [json.loads(line) for line in r.stdout.splitlines()]
    assert [g["class"] for g in got] == ["no_end", "ok"]
    assert got[0]["cause"]["rule"] == "no_end_seen" and got[0]["cause"]["details"]["last_progress_line"] == 3
    trial = tmp_path / "trial"
    trial.mkdir()
    (trial / "output.log").write_text(stopped.read_text())
    (trial / "result.json").write_text(json.dumps({"exit_code": 0}))
    r = nccl_tune("diagnose", "--json", str(trial), cwd=tmp_path)
    assert json.loads(r.stdout)["class"] == "ok"  # the exit status is the evidence
