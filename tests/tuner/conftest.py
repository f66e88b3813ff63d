"""Fixtures for the tuner's end-to-end tests: the tiny trainer (a real command) and its space."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import loopback_ray_cluster

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


def one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    """The one line a refused command wrote to stderr (exit 1, no traceback), holding every one of
    ``fragments``: what the project promises for bad input."""
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert all(f in lines[0] for f in fragments), lines[0]
    return lines[0]


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


def run_cli_peak_rss(
    args: list[str], cwd: Path, env: dict | None = None, timeout: float = 240
) -> tuple[subprocess.CompletedProcess, float]:
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


# The synthetic twin of SkyRL's run (examples/run_skyrl_sql_sim.sh), fast: one rank process (what these tests
# read is the tuner's, not a cascade across ranks: tests/launchers and tests/diagnose run those), 1/500 of the
# modelled time. A trial takes a few seconds.
REPO = HERE.parents[1]
TWIN = REPO / "examples" / "run_skyrl_sql_sim.sh"
TWIN_ENV = {"SIM_TIME_SCALE": "0.002", "SIM_RANKS": "1"}
TWIN_PINS_SPEED_ONLY = (
    "--set",
    "trainer.micro_train_batch_size_per_gpu=1",
    "--set",
    "trainer.micro_forward_batch_size_per_gpu=8",
    "--set",
    "trainer.policy.fsdp_config.cpu_offload=false",
    "--set",
    "trainer.ref.fsdp_config.cpu_offload=true",
    "--set",
    "NCCL_ALGO=unset",
    "--set",
    "NCCL_PROTO=unset",
    "--set",
    "NCCL_MIN_NCHANNELS=unset",
    "--set",
    "NCCL_NVLS_ENABLE=unset",
    "--set",
    "NCCL_CUMEM_ENABLE=unset",
    "--set",
    "NCCL_BUFFSIZE=unset",
)
"""Pins that leave only the semantic parameters (batch sizes, prompt length) to the search."""


def twin_space_text() -> str:
    """The built-in skyrl-text2sql space's YAML, to write variants of."""
    from nccl_tune.search_spaces.loader import load_space

    return load_space("skyrl-text2sql").text


def twin_space_unjudged(text: str | None = None) -> str:
    """``text`` (the built-in space's, by default) without ``stability.worst_case_tokens``: its
    worst case is not judged. For tests of other things: a worst case predicted from a few steps
    spans tens of percent of the GPU, and under load it has set a test's only winner aside."""
    text, judged = re.subn(r"\n  worst_case_tokens: >-\n(    .*\n)+", "\n", text or twin_space_text())
    assert judged == 1
    return text


def run_twin(
    args: list[str], cwd: Path, env: dict | None = None, extra: tuple[str, ...] = (), timeout: float = 400
) -> subprocess.CompletedProcess:
    """``nccl-tune run ARGS -- bash examples/run_skyrl_sql_sim.sh EXTRA`` with the fast twin, without
    forced trials (``tests/tuner/study/test_forcing.py`` runs them)."""
    return run_cli(
        ["run", "--no-force-worst-case", *args, "--", "bash", str(TWIN), *extra],
        cwd=cwd,
        env={**TWIN_ENV, **(env or {})},
        timeout=timeout,
    )


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith("error:")]


def study_trials(workdir: Path, study: str | None = None, results: str = "results"):
    """The trials of the (only) study in ``workdir/results``, read with Optuna."""
    import optuna

    storage = f"sqlite:///{workdir / results / 'nccl-tune.db'}"
    if study is None:
        (summary,) = optuna.study.get_all_study_summaries(storage, include_best_trial=False)
        study = summary.study_name
    return optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)


@pytest.fixture(scope="package")
def ray_cluster():
    """The loopback Ray cluster of this package's tests (shut down after its last test, so later
    packages see no Ray running)."""
    with loopback_ray_cluster() as cluster:
        yield cluster
