"""Fixtures for the synthetic twin: run the real program (``examples/run_skyrl_sql_sim.sh``) as a
process tree, read its output the way the tuner does, and make sure no process outlives a test."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from nccl_tune.trial import MARKER_ENV

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "run_skyrl_sql_sim.sh"
"""Today's SkyRL layout (``skyrl.train``)."""
LEGACY_SCRIPT = REPO / "examples" / "run_skyrl_sql_sim_legacy.sh"
"""The legacy ``skyrl_train`` layout."""
ANSI = re.compile(r"\x1b\[[0-9;]*m")
RAY_PREFIX = re.compile(r"^\((?P<actor>[\w.\-]+) pid=(?P<pid>\d+)\) ")

# Short runs: one epoch of SkyRL-SQL-653 at train_batch_size 256 is 2 steps; no evaluation.
SHORT = ("trainer.epochs=1", "trainer.eval_before_train=false", "trainer.eval_interval=-1")


def clean(line: str) -> str:
    """A line as the tuner matches it: ANSI colours and the Ray prefix removed."""
    return RAY_PREFIX.sub("", ANSI.sub("", line))


@dataclass
class TwinRun:
    """A finished (or stopped) run of the twin."""

    returncode: int
    raw_lines: list[str]
    lines: list[str]
    """Cleaned lines (see :func:`clean`)."""
    wall_s: float
    infra_lines: list[str] = field(default_factory=list)
    """Cleaned lines of the infra logs the run wrote (today's layout, ``trainer.log_path``)."""

    def grep(self, text: str) -> list[str]:
        return [ln for ln in self.lines if text in ln]

    def index(self, text: str) -> int:
        """Index of the first cleaned line containing ``text`` (-1 if none)."""
        return next((i for i, ln in enumerate(self.lines) if text in ln), -1)

    def actor_lines(self, text: str) -> list[tuple[str, int, str]]:
        """(actor, pid, cleaned line) of raw lines containing ``text``."""
        out = []
        for raw in self.raw_lines:
            plain = ANSI.sub("", raw)
            m = RAY_PREFIX.match(plain)
            if m and text in plain:
                out.append((m.group("actor"), int(m.group("pid")), clean(raw)))
        return out


def _marked(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid != os.getpid() and p.environ().get(MARKER_ENV) == marker:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture
def marker() -> str:
    """A marker for the processes of one test; any left when the test ends fails it (and is killed)."""
    value = f"simtest-{uuid.uuid4().hex[:10]}/0"
    yield value
    left = _marked(value)
    for p in left:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    if left:
        pytest.fail(f"processes of the twin outlived the test: {[p.pid for p in left]}")


@pytest.fixture
def twin_env(marker: str, tmp_path: Path) -> dict[str, str]:
    """The environment of a twin run: this interpreter, a marker, Flight Recorder dumps in tmp_path."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SIM_", "NCCL_", "TORCH_NCCL", "TORCH_FR", "SKYRL_"))
    }
    env.update(
        {
            "PYTHON": sys.executable,
            MARKER_ENV: marker,
            "TORCH_FR_BUFFER_SIZE": "2000",
            "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "fr" / "nccl_trace_rank_"),
            "HOME": str(tmp_path / "home"),
        }
    )
    return env


@pytest.fixture
def run_twin(twin_env: dict[str, str], tmp_path: Path) -> Callable[..., TwinRun]:
    """``run_twin(*overrides, env={...}, timeout_s=90, legacy=False)``: run the twin script (today's
    layout, or the legacy one) to its end from a folder that is not the repository (the script must
    work from any cwd). Today's layout writes its infra logs under ``tmp_path/logs``."""

    def run(
        *overrides: str, env: dict[str, str] | None = None, timeout_s: float = 90.0, legacy: bool = False
    ) -> TwinRun:
        cwd = tmp_path / "cwd"
        cwd.mkdir(exist_ok=True)
        full_env = {**twin_env, **(env or {})}
        logs = tmp_path / "logs"
        if not legacy:
            overrides = (f"trainer.log_path={logs}", *overrides)
        start = time.monotonic()
        proc = subprocess.Popen(
            ["bash", str(LEGACY_SCRIPT if legacy else SCRIPT), *overrides],
            cwd=cwd,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            pytest.fail(f"the twin did not finish in {timeout_s} s")
        raw = out.decode("utf-8", "replace").splitlines()
        infra = [clean(x) for f in sorted(logs.glob("infra-*.log")) for x in f.read_text(errors="replace").splitlines()]
        return TwinRun(proc.returncode, raw, [clean(x) for x in raw], time.monotonic() - start, infra)

    return run
