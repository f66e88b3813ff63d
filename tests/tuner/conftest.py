"""Fixtures for the tuner's end-to-end tests: the tiny trainer (a real command) and its space."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
SCRIPTS = HERE / "scripts"
TINY_SPACE = SCRIPTS / "tiny.yaml"
TINY_TRAINER = SCRIPTS / "tiny_trainer.py"
NCCL_TUNE = Path(sys.executable).parent / "nccl-tune"


@pytest.fixture
def tiny_command() -> list[str]:
    return [sys.executable, str(TINY_TRAINER)]


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_cli(args: list[str], cwd: Path, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    """``nccl-tune ARGS`` as a user runs it: a real process, its exit code, stdout and stderr."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [str(NCCL_TUNE), *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


@contextlib.contextmanager
def read_only(path: Path):
    """``path`` (a folder or file) cannot be written for the body, even by root: ``chattr +i`` as root
    (mode bits do not stop root), mode bits otherwise."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(path)], check=True)
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", str(path)], check=True)
    else:
        mode = path.stat().st_mode
        path.chmod(mode & ~0o222)
        try:
            yield
        finally:
            path.chmod(mode)


def run_cli_peak_rss(args: list[str], cwd: Path, env: dict | None = None, timeout: float = 240) -> tuple[subprocess.CompletedProcess, float]:
    """``run_cli``, and the peak resident memory (MiB) of the ``nccl-tune`` process itself (its
    children not counted), sampled every 20 ms."""
    import psutil

    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    out, err = cwd / ".stdout", cwd / ".stderr"
    with open(out, "w") as fo, open(err, "w") as fe:
        proc = subprocess.Popen([str(NCCL_TUNE), *args], cwd=cwd, env=full_env, stdout=fo, stderr=fe, text=True)
        me, peak, deadline = psutil.Process(proc.pid), 0, time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                peak = max(peak, me.memory_info().rss)
            except psutil.Error:
                pass
            time.sleep(0.02)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    done = subprocess.CompletedProcess(args, proc.returncode, out.read_text(), err.read_text())
    return done, peak / float(1 << 20)
