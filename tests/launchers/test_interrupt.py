"""Interrupting a driver of LocalLauncher mid-trial: SIGINT, SIGTERM, SIGKILL then resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from nccl_tune.failure import FailureClass
from nccl_tune.launchers.teardown import find_marked, study_match
from nccl_tune.launchers.trial_files import read_result

from .helpers import DRIVER, wait_for_json

LONG_TRIAL = ["--steps", "1000", "--step-s", "0.3", "--detach", "1", "--ignore-term"]


def _start_driver(study: str, results: Path, pidfile: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            str(DRIVER),
            "--study",
            study,
            "--results",
            str(results),
            *extra,
            "--",
            *LONG_TRIAL,
            "--pidfile",
            str(pidfile),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize(
    "sig, handlers",
    [(signal.SIGINT, False), (signal.SIGINT, True), (signal.SIGTERM, True)],
    ids=["sigint-keyboardinterrupt", "sigint-flag", "sigterm-flag"],
)
def test_a_signal_to_the_driver_tears_the_trial_down_and_exits_130(study: str, tmp_path: Path, sig, handlers) -> None:
    results, pidfile = tmp_path / "results", tmp_path / "pids.json"
    driver = _start_driver(study, results, pidfile, *(["--handlers"] if handlers else []))
    try:
        pids = wait_for_json(pidfile)  # trial 1 runs, with a detached child that ignores SIGTERM
        time.sleep(0.5)
        os.kill(driver.pid, sig)
        out, _ = driver.communicate(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 130, out
    assert read_result(results / "trial-0").status is FailureClass.OK  # the finished trial is kept
    interrupted = read_result(results / "trial-1")
    assert interrupted.status is FailureClass.INTERRUPTED, out
    assert interrupted.escaped_processes == 1 and interrupted.survivors == 0
    assert not _alive(pids["main"]) and not any(_alive(p) for p in pids["detached"])
    assert find_marked(study_match(study)) == []


def test_a_killed_driver_leaves_orphans_that_the_next_run_reaps_and_records(study: str, tmp_path: Path) -> None:
    results, pidfile = tmp_path / "results", tmp_path / "pids.json"
    driver = _start_driver(study, results, pidfile)
    pids = wait_for_json(pidfile)
    driver.kill()  # SIGKILL: no handler, no teardown
    driver.communicate(timeout=30)

    orphans = {p.pid for p in find_marked(study_match(study))}
    assert set(pids["detached"]) <= orphans  # they outlive the driver
    # the trainer itself may die of its broken stdout (its reader was the driver) before the scan
    assert pids["main"] in orphans or not _alive(pids["main"])
    assert read_result(results / "trial-1") is None

    resumed = subprocess.run(
        [sys.executable, str(DRIVER), "--study", study, "--results", str(results), "--trials", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, out
    reaped = [line for line in out.splitlines() if line.startswith("reaped pid ")]
    reaped_pids = {int(line.split()[2]) for line in reaped}
    # the trainer itself may have died of its broken stdout meanwhile; the detached child cannot
    assert set(pids["detached"]) <= reaped_pids <= orphans, out
    assert all(f"(trial {study}/1" in line for line in reaped)
    assert "recorded trial 1 as interrupted" in out
    assert not any(_alive(p) for p in orphans)
    assert read_result(results / "trial-0").status is FailureClass.OK  # nothing finished is lost
    assert read_result(results / "trial-1").status is FailureClass.INTERRUPTED
    assert read_result(results / "trial-2").status is FailureClass.OK  # the study goes on
    assert json.loads((results / "trial-1" / "spec.json").read_text())["marker"] == f"{study}/1"
