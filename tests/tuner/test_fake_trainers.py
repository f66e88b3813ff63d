"""``nccl-tune run`` on fake trainers that print what the real ones print (``scripts/fake_trainers.py``):
the throughput a user reads is the trainer's real rate, whatever shape its progress output has."""

from __future__ import annotations

import json
import re
import sys

import pytest

from tests.tuner.conftest import SCRIPTS, one_line_error, run_cli

pytestmark = pytest.mark.timeout(120)

FAKE = SCRIPTS / "fake_trainers.py"

SPACE = """
name: fake
parameters:
  - {name: micro, arg: --micro, kind: pow2, low: 1, high: 4, default: 1, memory: increasing}
trial:
  env: {PYTHONUNBUFFERED: 1}
stop: {warmup_steps: 1, measured_steps: 3}
clocks: {startup_timeout_s: 60, stall_timeout_s: 30, stall_floor_s: 10, trial_timeout_s: 60, grace_s: 2}
"""


def run_fake(tmp_path, preset: str, env: dict[str, str]):
    """One trial of the fake ``preset`` trainer through the CLI: its result line's throughput and unit,
    and its ``result.json``."""
    (tmp_path / "space.yaml").write_text(SPACE)
    proc = run_cli(
        [
            "run",
            "--space",
            "space.yaml",
            "--trials",
            "1",
            "--confirm",
            "0",
            "-o",
            "tuned.yaml",
            "--",
            sys.executable,
            str(FAKE),
            preset,
        ],
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert f"progress: the output reads as preset {preset}" in proc.stdout and (tmp_path / "tuned.yaml").is_file()
    m = re.search(r"trial 0 ok  ([\d,.]+) (\S+/s) ", proc.stdout)
    assert m, proc.stdout
    (result,) = tmp_path.glob("results/*/trial-0000/result.json")
    return float(m.group(1).replace(",", "")), m.group(2), json.loads(result.read_text())


@pytest.mark.parametrize("preset", ["hf-trainer", "lightning"])
def test_a_tqdm_bars_steps_are_timed_by_the_clock_not_by_its_averaged_rate(tmp_path, preset):
    # steps of 0.4 s after a warm-up of 0.8 s: 2.5 steps/s; the rate the bar prints averages the
    # warm-up in (the Trainer's moving average, Lightning's mean since the epoch started) and read
    # 2.0 and 1.9
    rate, unit, _ = run_fake(tmp_path, preset, {"FT_STEP_S": "0.4"})
    assert unit == "steps/s" and rate == pytest.approx(2.5, abs=0.15)


def test_ranks_interleaved_by_torchrun_tee_count_each_step_once(tmp_path):
    # rank 1's line one step behind rank 0's: each step number is one step; its rank-1 repeat once
    # counted as a new step, the warm-up's 20,480 tokens/s among the measured ones
    rate, unit, result = run_fake(tmp_path, "torchtitan", {"FT_STEP_S": "0.2", "FT_TEE_LAG": "1"})
    assert (rate, unit) == (40960.0, "tokens/s")
    log = next(tmp_path.glob("results/*/trial-0000/output.log")).read_text()
    printed = set(re.findall(r"\[rank0\]:.*?step:\s*(\d+)", log))
    counted = len(result["step_times_s"])
    assert 4 <= counted <= len(printed) and result["step_rates"][1:] == [40960.0] * (counted - 1)


def test_a_training_that_finishes_before_the_trials_steps_is_not_called_a_refusal(tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE)
    proc = run_cli(
        ["run", "--space", "space.yaml", "--trials", "2", "--", sys.executable, str(FAKE), "verl"],
        cwd=tmp_path,
        env={"FT_STEP_S": "0.2", "FT_STEPS": "2"},
    )
    line = one_line_error(
        proc, "trial 0 ended early: training finished by itself after 2 of 4 steps", "lower the batch size or --steps"
    )
    assert "refused" not in line
