"""Teardown of real process trees: the group, escaped setsid children, stubborn processes."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from nccl_tune.launchers.process import build_env, spawn
from nccl_tune.launchers.teardown import find_marked, is_gone, kill_marked, study_match, terminate

from .helpers import trainer_argv, wait_for_json

GRACE_S = 1.0
MARGIN_S = 4.0  # other test suites share the two cores: assert behaviour, with room for timing


def _gone(pid: int) -> bool:
    try:
        return is_gone(psutil.Process(pid))
    except psutil.NoSuchProcess:
        return True


def _tree(study: str, tmp_path: Path, number: int, *args: str) -> tuple[subprocess.Popen, dict]:
    pidfile = tmp_path / f"pids{number}.json"
    argv = trainer_argv("--steps", "1000", "--step-s", "1", "--pidfile", str(pidfile), *args)
    proc = spawn(argv, build_env({}, f"{study}/{number}"), tmp_path)
    return proc, wait_for_json(pidfile)


@pytest.mark.parametrize("stubborn", [False, True], ids=["polite", "ignores-sigterm"])
def test_group_and_escaped_children_all_go(study: str, tmp_path: Path, stubborn: bool) -> None:
    extra = ("--ignore-term",) if stubborn else ()
    proc, pids = _tree(study, tmp_path, 0, "--detach", "2", *extra)
    detached = pids["detached"]
    assert all(os.getsid(p) == p for p in detached)  # they really left the session

    t0 = time.monotonic()
    report = terminate(f"{study}/0", GRACE_S, pgid=proc.pid, leader=proc)
    elapsed = time.monotonic() - t0

    assert report.survivors == 0 and report.survivor_pids == ()
    assert report.escaped == 2 and set(report.escaped_pids) == set(detached)
    assert report.in_group >= 1
    assert report.killed >= 2  # the detached children ignore SIGTERM
    assert proc.returncode is not None
    assert _gone(pids["main"]) and all(_gone(p) for p in detached)
    assert elapsed <= GRACE_S + MARGIN_S
    assert find_marked(study_match(study)) == []


def test_a_polite_tree_is_gone_well_before_the_grace_period(study: str, tmp_path: Path) -> None:
    proc, pids = _tree(study, tmp_path, 0)
    report = terminate(f"{study}/0", 30.0, pgid=proc.pid, leader=proc)
    assert report.killed == 0 and report.survivors == 0
    assert report.elapsed_s < 15  # far below the 30 s grace: nothing waited for it
    assert proc.returncode == -signal.SIGTERM


def test_teardown_leaves_other_trials_alone(study: str, tmp_path: Path) -> None:
    ours, _ = _tree(study, tmp_path, 0, "--detach", "1")
    theirs, their_pids = _tree(study, tmp_path, 1, "--detach", "1")
    try:
        report = terminate(f"{study}/0", GRACE_S, pgid=ours.pid, leader=ours)
        assert report.survivors == 0 and report.escaped == 1
        assert not _gone(their_pids["main"]) and not any(_gone(p) for p in their_pids["detached"])
    finally:
        terminate(f"{study}/1", GRACE_S, pgid=theirs.pid, leader=theirs)


def test_marked_processes_without_a_group(study: str, tmp_path: Path) -> None:
    """A tuner killed earlier left only escaped processes: the marker alone finds them."""
    proc, pids = _tree(study, tmp_path, 3, "--detach", "2")
    proc.kill()
    proc.wait()
    report = terminate(f"{study}/3", GRACE_S)
    assert report.escaped == 2 and report.survivors == 0
    assert all(_gone(p) for p in pids["detached"])


def test_kill_marked_takes_a_whole_study_and_nothing_else(study: str, tmp_path: Path) -> None:
    procs = [_tree(study, tmp_path, n, "--detach", "1") for n in (1, 2)]
    lookalike = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env=build_env({}, f"{study}x/1"),
        start_new_session=True,
    )
    try:
        found = kill_marked(study_match(study), GRACE_S)
        expected = {p["main"] for _, p in procs} | {d for _, p in procs for d in p["detached"]}
        assert {f.pid for f in found} == expected
        assert all(f.marker.startswith(f"{study}/") for f in found)
        assert all("fake_trainer.py" in f.command or "-c" in f.command for f in found)
        assert all("\n" not in f.describe() for f in found)  # multi-line `python -c` commands too
        for proc, _ in procs:
            proc.wait(10)
        assert all(_gone(pid) for pid in expected)
        assert lookalike.poll() is None  # "<study>x/1" is another study
    finally:
        lookalike.kill()
        lookalike.wait()


def test_this_process_is_never_signalled_even_if_marked(study: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_TUNE_TRIAL", f"{study}/0")  # only affects children: /proc/self/environ is fixed
    report = terminate(f"{study}/0", 0.2)
    assert report.survivors == 0


@pytest.mark.parametrize("shape", ["( {daemon} & ) ;", "{daemon} &"], ids=["orphaned-at-once", "child-of-the-trainer"])
def test_a_daemon_that_drops_group_and_marker_is_found_and_killed(tmp_path: Path, shape: str) -> None:
    """`env -i setsid`: a daemon in its own session, without the trial's marker. Orphaned at once (a
    subshell that exits) the tuner, a child subreaper, adopts it; still a descendant of the trainer
    it is found under the trial's leader. Either way teardown kills it and counts it."""
    from tests.tuner.conftest import TINY_SPACE, TINY_TRAINER, run_cli

    token = f"{300 + random.random() * 100:.6f}"
    daemon = shape.format(daemon=f"env -i setsid sleep {token}") + ' exec "$0" "$@"'
    command = ["bash", "-c", daemon, sys.executable, str(TINY_TRAINER)]

    def left() -> list[psutil.Process]:
        return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", token]]

    try:
        proc = run_cli(
            ["run", "--space", str(TINY_SPACE), "--study", "d", "--trials", "1", "--confirm", "0", "--", *command],
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
        assert left() == []
        result = json.loads((tmp_path / "results/d/trial-0000/result.json").read_text())
        assert result["escaped_processes"] >= 1 and result["survivors"] == 0, result
    finally:
        for p in left():
            p.kill()
