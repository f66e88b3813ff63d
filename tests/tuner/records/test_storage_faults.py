"""Storage that fails under a real run: a file system that fills, the database deleted mid-run, the
database locked by another process. Each is one line naming the file and the cause, and the study
resumes once the cause is gone."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tuner.conftest import NCCL_TUNE, TINY_SPACE, TINY_TRAINER

pytestmark = pytest.mark.timeout(300)

BIG = """
name: big
parameters:
  - {name: trainer.micro, kind: pow2, low: 1, high: 8, default: 1, memory: increasing}
trial:
  overrides: {trainer.mode: bigline}
  env: {PYTHONUNBUFFERED: 1, TINY_BIGLINE_MB: "5"}
stop: {warmup_steps: 1, measured_steps: 2}
clocks: {startup_timeout_s: 30, stall_timeout_s: 10, stall_floor_s: 3, trial_timeout_s: 60, grace_s: 2}
"""


def tuner_argv(space: Path | str, study: str, results: Path, trials: int) -> list[str]:
    return [str(NCCL_TUNE), "run", "--space", str(space), "--study", study, "--results", str(results)] + [
        "--trials",
        str(trials),
        "--confirm",
        "0",
        "--seed",
        "0",
        "--",
        sys.executable,
        str(TINY_TRAINER),
    ]


def one_error_line(stderr: str, *fragments: str) -> str:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and all(f in errors[0] for f in fragments), stderr
    return errors[0]


@contextlib.contextmanager
def small_disk(where: Path, size: str):
    """A file system of ``size`` at ``where``: a tmpfs when this process may mount one (root), else
    None (the caller limits file sizes with RLIMIT_FSIZE instead)."""
    where.mkdir()
    mounted = (
        os.geteuid() == 0
        and subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)]).returncode == 0
    )
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(where)], check=False)


def _fsize_limit(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill, as a shell's ulimit -f gives
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_disk_that_fills_under_the_results_is_one_line_and_the_study_resumes(tmp_path):
    """Trial 0 prints 5 MB into a 2 MB tmpfs: one line naming the file, then the study resumes."""
    (tmp_path / "big.yaml").write_text(BIG)
    with small_disk(tmp_path / "disk", "2m") as mounted:
        if not mounted:
            pytest.skip("no tmpfs can be mounted here (not root); the file size limit test stands in")
        results = tmp_path / "disk" / "r"
        proc = subprocess.run(tuner_argv(tmp_path / "big.yaml", "full", results, 2), capture_output=True, text=True)
        line = one_error_line(proc.stderr, str(results), "no space left on the device")
        assert proc.returncode == 1 and "run the same command again to resume the study" in line, line
        subprocess.run(["mount", "-o", "remount,size=40m", str(tmp_path / "disk")], check=True)
        again = subprocess.run(tuner_argv(tmp_path / "big.yaml", "full", results, 1), capture_output=True, text=True)
        assert again.returncode == 0 and "resuming study full" in again.stdout, again.stdout + again.stderr
        assert "trial 0 baseline interrupted" in again.stdout and "trial 1 baseline ok" in again.stdout


def test_a_log_that_cannot_be_written_to_the_end_is_cut_and_the_trial_still_read(tmp_path):
    """The tuner runs under a 2 MB file size limit (RLIMIT_FSIZE, SIGXFSZ ignored: EFBIG, as a full
    disk gives ENOSPC) and trial 0 prints 5 MB: the trial is not blamed for the tuner's own file."""
    (tmp_path / "big.yaml").write_text(BIG)
    argv = tuner_argv(tmp_path / "big.yaml", "cut", tmp_path / "r", 1)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=200, preexec_fn=_fsize_limit(2 << 20))
    assert proc.returncode == 0 and "trial 0 ok" in proc.stdout, proc.stdout + proc.stderr
    (facts,) = (tmp_path / "r" / "cut").glob("trial-0000/facts.json")
    assert "output.log could not be written to the end (File too large)" in facts.read_text()


def test_a_database_deleted_mid_run_is_one_line(tmp_path):
    results = tmp_path / "r"
    tuner = subprocess.Popen(
        tuner_argv(TINY_SPACE, "gone", results, 6),
        env={**os.environ, "TINY_STEP_S": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (results / "gone" / "trial-0001").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in results.glob("nccl-tune.db*"):
        p.unlink()
    out, err = tuner.communicate(timeout=200)
    assert tuner.returncode == 1, out + err
    line = one_error_line(err, str(results / "nccl-tune.db"))
    assert "deleted" in line and "trial folders" in line, line


@contextlib.contextmanager
def locked(db: Path):
    """A second process holding a write lock on ``db`` until the body ends."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sqlite3,sys,time\nc=sqlite3.connect({str(db)!r})\nc.execute('BEGIN EXCLUSIVE')\n"
            "print('held', flush=True)\ntime.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    try:
        yield holder
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture(scope="module")
def a_study(tmp_path_factory) -> Path:
    results = tmp_path_factory.mktemp("locked") / "r"
    proc = subprocess.run(tuner_argv(TINY_SPACE, "held", results, 1), capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return results


@pytest.mark.parametrize("command", ["report", "run"])
def test_a_database_locked_by_another_process_is_waited_for_with_a_line_then_refused(a_study, command):
    argv = (
        tuner_argv(TINY_SPACE, "held", a_study, 1)
        if command == "run"
        else [str(NCCL_TUNE), "report", "--study", "held", "--results", str(a_study)]
    )
    with locked(a_study / "nccl-tune.db") as holder:
        start = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        took = time.monotonic() - start
    assert proc.returncode == 1 and took < 40, (took, proc.stdout, proc.stderr)
    waiting = [line for line in proc.stderr.splitlines() if "waiting up to" in line]
    assert len(waiting) == 1 and f"locked by pid {holder.pid}" in waiting[0], proc.stderr
    one_error_line(proc.stderr, f"locked by pid {holder.pid}", "database is locked", str(a_study / "nccl-tune.db"))


def test_a_lock_released_while_waited_for_lets_the_command_go_on(a_study):
    with locked(a_study / "nccl-tune.db"):
        report = subprocess.Popen(
            [str(NCCL_TUNE), "report", "--study", "held", "--results", str(a_study)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        said = report.stderr.readline()  # the lock is let go once the command says it waits
    out, err = report.communicate(timeout=60)
    assert "is locked by pid" in said and "waiting up to" in said, said + err
    assert report.returncode == 0 and "trial 0" in out, out + err
    assert "error" not in err, err


def test_a_server_url_never_shows_its_password_and_names_a_missing_driver(tmp_path):
    proc = subprocess.run(
        [str(NCCL_TUNE), "report", "--storage", "postgresql://bob:s3cret@127.0.0.1:9/db"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    line = one_error_line(proc.stderr, "postgresql://bob:***@127.0.0.1:9/db")
    assert proc.returncode == 1 and "s3cret" not in proc.stderr + proc.stdout
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        assert "its database driver psycopg2 is not installed (pip install psycopg2-binary" in line, line
