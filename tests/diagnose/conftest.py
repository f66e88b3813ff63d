"""Fixtures for diagnose tests: Flight Recorder dumps produced by a real gloo job."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"
WORLD = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class GlooRun:
    """One finished gloo job: its folder, per-rank dumps and the merged output of its ranks."""

    folder: Path
    dumps: tuple[Path, ...]
    log: Path
    mode: str


def start_gloo_job(folder: Path, mode: str) -> list[subprocess.Popen]:
    """Start ``scripts/fr_job.py`` on WORLD real processes; rank 1 stalls or mismatches."""
    (folder / "fr").mkdir(parents=True, exist_ok=True)
    prefix = str(folder / "fr" / "nccl_trace_rank_")
    port = str(free_port())
    env = dict(os.environ, TORCH_FR_BUFFER_SIZE="2000", FR_JOB_TIMEOUT_S="3", OMP_NUM_THREADS="1")
    return [
        subprocess.Popen(
            [sys.executable, str(SCRIPTS / "fr_job.py"), str(r), str(WORLD), port, mode, prefix],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for r in range(WORLD)
    ]


def finish_gloo_job(folder: Path, mode: str, procs: list[subprocess.Popen]) -> GlooRun:
    """Wait for the ranks, write their merged output to ``output.log``, return the run."""
    outputs = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=120)
            outputs.append(out)
            assert p.returncode == 0, out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    log = folder / "output.log"
    log.write_text("".join(outputs))
    dumps = tuple(sorted((folder / "fr").iterdir()))
    assert len(dumps) == WORLD, f"expected {WORLD} dumps, got {dumps}: {outputs}"
    return GlooRun(folder, dumps, log, mode)


@pytest.fixture(scope="session")
def gloo_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, GlooRun]:
    """A stalled-rank run and a mismatched-collective run of a real 3-rank gloo job (run side by
    side, once per session)."""
    base = tmp_path_factory.mktemp("gloo")
    started = {mode: start_gloo_job(base / mode, mode) for mode in ("stall", "mismatch")}
    return {mode: finish_gloo_job(base / mode, mode, procs) for mode, procs in started.items()}
