"""A command of a fixed length, tuned end to end: a user's ``torchrun`` script (argparse flags, the
Hugging Face Trainer's bar and log dicts, ``--steps 6``) whose steps scatter enough that the noise
asks for more measured steps than the script runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from tests.tuner.conftest import SCRIPTS, run_cli

pytestmark = pytest.mark.timeout(240)

SPACE = """
name: user
parameters:
  - {name: batch_size, arg: --batch-size, kind: pow2, low: 4, high: 32, default: 8}
trial:
  env: {PYTHONUNBUFFERED: 1}
stop: {warmup_steps: 1, measured_steps: 3}
clocks: {startup_timeout_s: 60, stall_timeout_s: 30, stall_floor_s: 10, trial_timeout_s: 90, grace_s: 2}
"""


def test_a_fixed_length_torchrun_job_is_measured_ranked_and_told_once(tmp_path):
    (tmp_path / "space.yaml").write_text(SPACE)
    torchrun = Path(sys.executable).parent / "torchrun"
    command = [str(torchrun), "--nproc_per_node", "1", str(SCRIPTS / "user_train.py"), "--steps", "6"]
    proc = run_cli(
        ["run", "--space", "space.yaml", "--trials", "4", "--confirm", "0", "-o", "tuned.yaml", "--", *command],
        cwd=tmp_path,
        env={"UT_STEP_S": "0.15", "UT_JITTER": "0.2"},
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    out = proc.stdout
    assert "config_error" not in out and "looks broken" not in out + proc.stderr, out
    # the noise asked for more than the script's 6 steps: said once, with what changes it
    told = [line for line in out.splitlines() if line.startswith("the steps scatter enough")]
    assert len(told) == 1 and "the command ends by itself after 5" in told[0] and "its own step flag" in told[0], out
    # and the summary's reading of the noise names the command's length, not a --steps it cannot run
    (coarse,) = [line for line in out.splitlines() if line.startswith("coarse measurement")]
    assert "the command ends by itself after 5" in coarse and "--steps" not in coarse
    results = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("results/*/trial-*/result.json"))]
    assert len(results) >= 3 and all(r["status"] == "ok" for r in results), [r["status"] for r in results]
    # once a run has ended by itself after 6 steps, no trial asks for more than those
    asked = [r["verdict"]["evidence"][0]["text"] for r in results if r["stop_reason"] == "exited"]
    assert asked and all("after 6 steps" in text for text in asked), asked
    assert all(len(r["step_times_s"]) <= 6 for r in results)
    tuned = yaml.safe_load((tmp_path / "tuned.yaml").read_text())
    assert tuned["args"] == ["--batch-size", "32"] and tuned["metrics"]["peak_mem_gib"] is None, tuned
