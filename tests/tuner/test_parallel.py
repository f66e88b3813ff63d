"""The study loop with --launcher ray --parallel 2 on the launcher tests' loopback cluster: trials
overlap in time, each is told, the study ends with a winner."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from nccl_tune.tuner.loop import run_study
from nccl_tune.tuner.settings import RunSettings

from .conftest import TINY_SPACE

pytest.importorskip("ray")


def test_two_slots_run_trials_at_once(ray_cluster, tiny_command, workdir) -> None:
    settings = RunSettings(
        command=tuple(tiny_command), space=str(TINY_SPACE), study="par", results=workdir / "r", trials=4,
        seed=3, sampler="random", launcher="ray", parallel=2, confirm=0,
    )
    outcome = run_study(settings, Console(stderr=True, quiet=True))
    assert outcome.launched == 4 and not outcome.interrupted
    spans = []
    for folder in sorted((workdir / "r").rglob("result.json")):
        result = json.loads(folder.read_text())
        spans.append((folder.stat().st_mtime - result["wall_s"], folder.stat().st_mtime))
    assert len(spans) == 4
    assert any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(spans) for b in spans[i + 1:]), spans
