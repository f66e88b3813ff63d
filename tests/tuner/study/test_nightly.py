"""Nights end to end: the twin (examples/run_skyrl_sql_sim.sh) run as a series, a night slowed by
SIM_FAULT=slow:1.2 is a regression (exit 3), an unchanged night is not (noise is not a
regression); a baseline config that now runs out of memory is a regression with its verdict;
the fingerprint is recorded when the night runs; bad nightly input is one line before any trial."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import optuna
import pytest

from tests.tuner.conftest import TINY_SPACE, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TWIN = Path(__file__).resolve().parents[3] / "examples" / "run_skyrl_sql_sim.sh"
NIGHT = ["run", "--no-force-worst-case", "--series", "twin", "--steps", "2", "--json"]
TWIN_ENV = {"SIM_RANKS": "1"}  # one trainer process: the nights' numbers, at two thirds of the time


def night(root: Path, *extra: str, env: dict | None = None):
    proc = run_cli([*NIGHT, *extra, "--", "bash", str(TWIN)], cwd=root, env={**TWIN_ENV, **(env or {})}, timeout=600)
    data = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else None
    return proc, data


@pytest.fixture(scope="module")
def series(tmp_path_factory) -> Path:
    """The series' first night: one run of the space's defaults (the later nights' warm starts
    measure the noise)."""
    root = tmp_path_factory.mktemp("nights")
    proc, data = night(root, "--trials", "1", "--confirm", "0")
    assert proc.returncode == 0, proc.stderr
    assert data["night"]["verdict"] is None and len(data["night"]["best_runs_per_s"]) == 1
    return root


def _last_line(proc) -> str:
    return [line for line in proc.stderr.splitlines() if line.strip()][-1]


def test_a_night_slowed_by_a_fifth_is_a_regression(series):
    proc, data = night(
        series, "--warm-start", "--fail-on-regression", "10", "--trials", "0", env={"SIM_FAULT": "slow:1.2"}
    )
    assert proc.returncode == 3, proc.stderr[-3000:]
    v = data["night"]["verdict"]
    assert v["regression"] and v["kind"] == "slower" and -0.25 < v["change_frac"] < -0.10
    assert _last_line(proc) == v["summary"] and v["summary"].startswith("regression: best ")
    # the baseline config ran first, three times, as the warm start
    warm = [r for r in data["trials"] if r["kind"] == "warm_start"]
    assert [r["number"] for r in warm] == [0, 1, 2] and all(r["status"] == "ok" for r in warm)
    assert data["night"]["baseline"]["source"] == "series"


def test_an_unchanged_night_is_not_a_regression(series):
    proc, data = night(series, "--warm-start", "--fail-on-regression", "10", "--trials", "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = data["night"]["verdict"]
    assert not v["regression"] and v["kind"] in ("within_threshold", "within_noise")
    assert abs(v["change_frac"]) < 0.10 and _last_line(proc) == v["summary"]
    # compared with the first night, not with the slowed one (a regression is never a baseline)
    first = sorted(s.study_name for s in optuna.get_all_study_summaries(f"sqlite:///{series}/results/nccl-tune.db"))[0]
    assert data["night"]["baseline"]["origin"] == first


def test_the_fingerprint_is_recorded_when_the_night_runs_and_history_shows_the_series(series):
    url = f"sqlite:///{series}/results/nccl-tune.db"
    studies = optuna.get_all_study_summaries(url)
    assert len(studies) >= 1
    for s in studies:
        fp = s.user_attrs["hardware"]["fingerprint"]
        assert fp["host"] and fp["torch_version"] and fp["recorded_at"] and fp["trainer_commit"]
        assert s.user_attrs["series"] == "twin" and s.study_name.startswith("twin.")
    proc = run_cli(["history", "--json"], cwd=series)
    assert proc.returncode == 0, proc.stderr
    nights = json.loads(proc.stdout)["nights"]
    assert len(nights) == len(studies) and nights[0]["verdict"] is None


def test_a_baseline_config_that_now_runs_out_of_memory_is_a_regression(workdir, tiny_command):
    tuned = workdir / "tuned.yaml"
    tuned.write_text(
        "overrides: {trainer: {micro: 8, offload: false}}\nenv: {}\nunset_env: [NCCL_ALGO]\n"
        "metrics: {throughput_per_s: 800.0}\nstudy: {name: old, space: tiny}\n"
    )
    proc = run_cli(
        [
            "run",
            "--no-force-worst-case",
            "--space",
            str(TINY_SPACE),
            "--study",
            "n",
            "--baseline",
            str(tuned),
            "--warm-start",
            "--fail-on-regression",
            "5",
            "--trials",
            "1",
            "--confirm",
            "0",
            "--json",
            "--",
            *tiny_command,
        ],
        cwd=workdir,
    )
    assert proc.returncode == 3, proc.stderr
    v = json.loads(proc.stdout)["night"]["verdict"]
    assert v["kind"] == "baseline_fails" and v["failure_class"] == "oom" and v["failed_trial"] == 0
    assert _last_line(proc) == v["summary"]
    assert v["summary"].startswith("regression: the baseline config (trial 0) now fails: oom")
    assert "CUDA out of memory" in v["summary"]
    # one run was enough: an OOM is not repeated, and the search went on as usual
    rows = json.loads(proc.stdout)["trials"]
    assert [r["kind"] for r in rows if r["outcome"] == "launched"][:2] == ["warm_start", "search"]


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--series", "new", "--fail-on-regression", "5"], "--fail-on-regression: series 'new' has no earlier night"),
        (["--fail-on-regression", "5"], "--fail-on-regression 5: no baseline to compare with"),
        (["--series", "a/b"], "--series 'a/b': not a plain name"),
        (
            ["--baseline", "other.yaml", "--warm-start"],
            "tuned for space 'skyrl-text2sql', but this run uses space 'tiny'",
        ),
    ],
)
def test_bad_nightly_input_is_one_line_before_any_trial(workdir, tiny_command, args, fragment):
    (workdir / "other.yaml").write_text(
        "overrides: {trainer: {micro_train_batch_size_per_gpu: 2}}\n"
        "metrics: {throughput_per_s: 1.0}\nstudy: {space: skyrl-text2sql}\n"
    )
    proc = run_cli(
        ["run", "--no-force-worst-case", "--space", str(TINY_SPACE), *args, "--", *tiny_command],
        cwd=workdir,
        timeout=60,
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and fragment in lines[0], proc.stderr
    db = workdir / "results" / "nccl-tune.db"
    assert not db.exists() or sqlite3.connect(db).execute("select count(*) from trials").fetchone()[0] == 0
    assert not any((workdir / "results").rglob("trial-*"))


def test_an_exported_tuned_yaml_is_a_baseline_for_a_later_night(workdir, tiny_command):
    first = run_cli(
        [
            "run",
            "--no-force-worst-case",
            "--space",
            str(TINY_SPACE),
            "--study",
            "day",
            "--trials",
            "3",
            "--seed",
            "1",
            "-o",
            "tuned.yaml",
            "--",
            *tiny_command,
        ],
        cwd=workdir,
    )
    assert first.returncode == 0, first.stderr
    proc = run_cli(
        [
            "run",
            "--no-force-worst-case",
            "--space",
            str(TINY_SPACE),
            "--study",
            "night",
            "--baseline",
            "tuned.yaml",
            "--warm-start",
            "--fail-on-regression",
            "30",
            "--trials",
            "0",
            "--json",
            "--",
            *tiny_command,
        ],
        cwd=workdir,
    )
    assert proc.returncode == 0, proc.stderr
    night = json.loads(proc.stdout)["night"]
    tuned = __import__("yaml").safe_load((workdir / "tuned.yaml").read_text())
    assert night["baseline"]["values"] == tuned["study"]["params"] and night["baseline"]["source"] == "file"
    assert night["baseline"]["runs_per_s"] == tuned["metrics"]["runs_per_s"] and len(night["best_runs_per_s"]) == 3
    assert not night["verdict"]["regression"] and night["series"] == ""
