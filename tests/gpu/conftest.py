"""tests/gpu runs where a CUDA device is visible, and is skipped, with the reason, everywhere else.

Its tests read one run of ``benchmarks/gpu.py`` (the session fixture ``gpu_run``): a study of
examples/gpu_train.py, a pinned out-of-memory trial, a stalled rank and ``nccl-tune doctor`` on the
node, measured once: the run takes minutes of GPU time, not minutes per test. With
``NCCL_TUNE_GPU_OUT=DIR`` the run's JSON, log and trial folders are kept in DIR
(``benchmarks/gpu_run.sh`` points it into its ``$OUT``); docs/gpu.md has the command.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
BENCH = HERE.parents[1] / "benchmarks" / "gpu.py"
OUT_ENV = "NCCL_TUNE_GPU_OUT"
RUN_TIMEOUT_S = 390
"""The whole benchmark, on one H200 about 4 minutes; past this it is interrupted (gpu_run.sh allows
its pytest 8 minutes)."""


def _no_cuda() -> str | None:
    """Why these tests cannot run here (None: a CUDA device is visible)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        built = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU build"
        return f"no CUDA device visible (torch {torch.__version__}, {built}): tests/gpu runs on a GPU node, docs/gpu.md"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = _no_cuda()
    if reason is None:
        return
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def gpu_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The figures of one ``benchmarks/gpu.py`` run (its ``--json``), with ``out``: where its files are."""
    out = Path(os.environ[OUT_ENV]) if os.environ.get(OUT_ENV) else tmp_path_factory.mktemp("gpu")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu.json"
    with open(out / "benchmark.log", "w") as log:
        bench = subprocess.Popen(
            [sys.executable, str(BENCH), "--json", str(path), "--work", str(out / "work")], stdout=log, stderr=log
        )
        try:
            bench.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # as Ctrl-C: it stops its trials and keeps the stages done
            bench.send_signal(signal.SIGINT)
            bench.wait(60)
    tail = (out / "benchmark.log").read_text(errors="replace")[-3000:]
    assert path.is_file(), f"benchmarks/gpu.py wrote no figures (exit {bench.returncode}): {tail}"
    figures = json.loads(path.read_text())
    figures["out"] = str(out)
    return figures
