"""`nccl-tune history`: a series over time from the storage, steps dated, fingerprint changes next to throughput."""

from __future__ import annotations

import json
import re

import optuna
import pytest

from nccl_tune.errors import NcclTuneError
from nccl_tune.tuner.records.series import load_history
from tests.tuner.conftest import run_cli
from tests.tuner.nights import fingerprint, store_nights


def _url(tmp_path):
    (tmp_path / "results").mkdir()
    return f"sqlite:///{tmp_path}/results/nccl-tune.db"


def test_history_dates_a_step_and_shows_what_changed_that_night(tmp_path):
    url = _url(tmp_path)
    old, new = fingerprint(), fingerprint(torch_version="2.13.0")
    store_nights(url, "sql", [100, 101, 99, 100.5, 100, 82, 81, 82.5], [old] * 5 + [new] * 3)
    store_nights(url, "other", [50, 50])
    proc = run_cli(["history", "--series", "sql", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [n["study"] for n in data["nights"]] == [f"sql.{i}" for i in range(8)]
    (step,) = data["steps"]
    assert step["study"] == "sql.5" and step["change_frac"] < -0.15
    assert data["nights"][5]["fingerprint_changes"] == ["torch 2.12.0 -> 2.13.0"]
    assert data["nights"][5]["change_frac"] < -0.15 and data["nights"][5]["verdict"]["regression"]
    assert data["summary"] == [
        f"step {step['change_frac']:+.1%} starting 2026-08-06T02:00 (study sql.5); changed that night: torch 2.12.0 -> 2.13.0"
    ]
    text = run_cli(["history", "--series", "sql"], cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "torch 2.12.0 -> 2.13.0" in text.stdout and "step -18" in text.stdout and "slower" in text.stdout


def test_history_of_the_only_series_and_a_pending_shift(tmp_path):
    url = _url(tmp_path)
    store_nights(url, "only", [100, 100, 99, 101, None, 80])
    data = json.loads(run_cli(["history", "--json"], cwd=tmp_path).stdout)
    assert data["series"] == "only" and data["steps"] == []
    assert data["pending_shift"]["study"] == "only.5"
    assert data["nights"][4]["best_per_s"] is None


def test_history_errors_are_one_line(tmp_path):
    assert "no such database" in run_cli(["history"], cwd=tmp_path).stderr
    url = _url(tmp_path)
    optuna.create_study(study_name="plain", storage=url)
    with pytest.raises(NcclTuneError, match="holds no series yet"):
        load_history(url, None)
    store_nights(url, "a", [1.0])
    store_nights(url, "b", [1.0])
    for series, fragment in ((None, "several series; choose one with --series: a, b"), ("c", "no series named 'c'")):
        with pytest.raises(NcclTuneError, match=re.escape(fragment)):
            load_history(url, series)
    proc = run_cli(["history", "--series", "../x"], cwd=tmp_path)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1 and len(lines) == 1 and "--series '../x': not a plain name" in lines[0], proc.stderr
