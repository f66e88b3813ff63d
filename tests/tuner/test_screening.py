"""Cheap screening (``stop.screen_steps``): a candidate runs its warm-up and one measured step; one
not within reach of the incumbent is stopped there, one within reach runs every measured step.
Whole studies through the model launcher with an analytic cost, the loop's own observer deciding."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import FailureClass
from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.sim.analytic import AnalyticNode, Truth, analytic_cost
from nccl_tune.sim.launcher import ModelLauncher
from nccl_tune.trial import StopReason
from nccl_tune.tuner.loop import run_study
from nccl_tune.tuner.settings import RunSettings

SPACE = """
name: screening
parameters:
  - {name: mode, kind: categorical, choices: [fast, close, slow], default: fast, memory: none}
stop: {warmup_steps: 1, measured_steps: 3, screen_steps: %d}
throughput: {samples_per_step: 100}
"""
STEP_S = {"fast": 10.0, "close": 10.2, "slow": 11.8}
"""The slow mode is 15% slower: above the early stop's 0.7, beyond screening's reach."""


def study(tmp_path: Path, screen_steps: int, screening: bool = True) -> dict:
    folder = tmp_path / f"screen{screen_steps}-{screening}"  # a study's folder belongs to one study
    folder.mkdir()
    space_file = folder / "screening.yaml"
    space_file.write_text(SPACE % screen_steps)
    settings = RunSettings(command=("true",), space=str(space_file), results=folder, storage="sqlite:///:memory:",
                           study="screening", trials=3, seed=0, confirm=0, screening=screening)
    cost = analytic_cost(lambda v: Truth(STEP_S[v["mode"]], 40.0), AnalyticNode(startup_s=60.0, step_noise=0.005))
    out = run_study(settings, console=Console(file=io.StringIO()), launcher=ModelLauncher(env={}, cost=cost))
    return {r.values["mode"]: r for r in out.records}


def test_a_slow_candidate_is_stopped_after_one_measured_step_and_a_close_one_runs_on(tmp_path):
    runs = study(tmp_path, screen_steps=1)
    assert set(runs) == {"fast", "close", "slow"}
    slow, close, fast = runs["slow"].result, runs["close"].result, runs["fast"].result
    assert len(fast.step_times_s) == 4 and runs["fast"].status is FailureClass.OK
    assert len(close.step_times_s) == 4 and runs["close"].status is FailureClass.OK
    # warm-up + one measured step, then stopped: the GPU time of two steps saved
    assert len(slow.step_times_s) == 2 and slow.stop_reason is StopReason.EARLY_STOP
    assert runs["slow"].status is FailureClass.BUDGET
    assert slow.wall_s < fast.wall_s - 1.5 * STEP_S["slow"]


def test_without_screening_the_slow_candidate_runs_every_step(tmp_path):
    runs = study(tmp_path, screen_steps=1, screening=False)
    assert len(runs["slow"].result.step_times_s) == 4 and runs["slow"].status is FailureClass.OK
    runs = study(tmp_path, screen_steps=0)
    assert len(runs["slow"].result.step_times_s) == 4


def test_screen_steps_must_leave_measured_steps_to_screen_for(tmp_path):
    with pytest.raises(NcclTuneError, match="screen_steps 3 must be below stop.measured_steps"):
        parse_space(SPACE % 3, source="test", label="screening.yaml")
