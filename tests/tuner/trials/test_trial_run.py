"""Whatever fails between asking Optuna for values and starting the command leaves a study that
resumes: the asked trial is told (FAIL, with the reason), never left RUNNING without a folder.
Through the CLI, with the twin and a fake NVML whose GPU memory does not come back."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from optuna.trial import TrialState

from nccl_tune.gpu_fake import h100_node, write_state
from tests.tuner.conftest import NCCL_TUNE, TWIN, TWIN_ENV, error_lines, run_twin, study_trials

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_a_gate_that_gives_up_leaves_the_asked_trial_told_and_the_study_resumes(workdir):
    state = workdir / "nvml.json"
    write_state(state, h100_node(2))
    env = {**os.environ, **TWIN_ENV, "COLUMNS": "200", "NCCL_TUNE_FAKE_NVML": str(state)}
    args = [
        "run",
        "--no-force-worst-case",
        "--trials",
        "2",
        "--confirm",
        "0",
        "--study",
        "g",
        "--gate-timeout",
        "5s",
        "--",
        "bash",
        str(TWIN),
    ]
    tuner = subprocess.Popen(
        [str(NCCL_TUNE), *args], cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    spec = workdir / "results" / "g" / "trial-0000" / "spec.json"
    deadline = time.monotonic() + 120
    while not spec.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    held = h100_node(2)
    held[0]["used_gib"] = 30.0  # something else takes GPU 0 while trial 0 runs, and keeps it
    write_state(state, held)
    _, stderr = tuner.communicate(timeout=300)
    assert tuner.returncode == 1, stderr
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert "GPU memory did not return to the baseline" in line and "GPU 0 30.0 GiB" in line
    trials = {t.number: t for t in study_trials(workdir, "g")}
    assert not [t for t in trials.values() if t.state is TrialState.RUNNING]
    asked = trials[1]
    assert asked.state is TrialState.FAIL and "GPU memory did not return" in asked.user_attrs["abandoned"]
    assert not (workdir / "results" / "g" / "trial-0001").exists()

    write_state(state, h100_node(2))  # the node is free again: the same command resumes
    again = run_twin(
        ["--trials", "1", "--confirm", "0", "--study", "g", "--json"],
        cwd=workdir,
        env={"NCCL_TUNE_FAKE_NVML": str(state)},
    )
    assert again.returncode == 0, again.stderr
    assert "resuming study g: 1 trials done" in again.stderr and "Traceback" not in again.stderr
    rows = {r["number"]: r for r in json.loads(again.stdout)["trials"]}
    assert rows[1]["outcome"] == "abandoned"
    retry = rows[2]  # the values the gate kept from running are asked for first
    assert retry["kind"] == "retry" and retry["params"] == rows[1]["params"] and retry["outcome"] == "launched"
    assert not error_lines(again)
