"""A trainer that prints its memory in GiB alone (verl's console logger, DeepSpeed's
``MaxMemAllocated``), run on a node whose GPUs NVML cannot read: the run goes on, the trials say
their peak in GiB, and the study ends with a tuned file (it once stopped with a traceback, the
share of an unknown GPU size being NaN)."""

from __future__ import annotations

import sys

import pytest

from tests.tuner.conftest import run_cli

pytestmark = pytest.mark.timeout(240)

TRAINER = '''
import os, sys, time
micro = int(os.environ.get("MICRO", "2"))
step_s = 0.15 * (2 / micro) ** 0.5
print("(TaskRunner pid=7) step:0 - val-core/gsm8k/reward/mean@1:np.float64(0.2)", flush=True)
for step in range(1, 100):
    time.sleep(step_s * (2 if step == 1 else 1))
    print(f"(TaskRunner pid=7) step:{step} - training/global_step:{step} - "
          f"perf/max_memory_allocated_gb:np.float64({30 + 2.0 * micro}) - "
          f"perf/max_memory_reserved_gb:np.float64({34 + 2.0 * micro}) - "
          f"timing_s/step:np.float64({step_s:.3f}) - perf/throughput:np.float64({2048 / step_s:.1f})", flush=True)
'''

SPACE = """
name: gib-only
command: train
parameters:
  - {name: MICRO, kind: pow2, low: 1, high: 8, default: 2, memory: increasing}
stop: {warmup_steps: 1, measured_steps: 3}
clocks: {startup_timeout_s: 60, stall_timeout_s: 30, stall_floor_s: 10, trial_timeout_s: 120, grace_s: 2}
"""


def test_memory_lines_without_the_gpus_size_end_in_a_tuned_file(tmp_path):
    (tmp_path / "train.py").write_text(TRAINER)
    (tmp_path / "space.yaml").write_text(SPACE)
    proc = run_cli(["run", "--space", "space.yaml", "--trials", "2", "--confirm", "0", "-o", "tuned.yaml",
                    "--", sys.executable, "train.py"], cwd=tmp_path, env={"NCCL_TUNE_FAKE_NVML": ""})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "progress: the output reads as preset verl" in proc.stdout
    assert "trial 0 ok" in proc.stdout and " GiB" in proc.stdout and (tmp_path / "tuned.yaml").is_file()
