"""A trainer that prints its memory in GiB alone (verl's console logger, DeepSpeed's
``MaxMemAllocated``), run on a node whose GPUs NVML cannot read: the run goes on, the trials say
their peak in GiB, and the study ends with a tuned file (it once stopped with a traceback, the
share of an unknown GPU size being NaN)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.tuner.conftest import run_cli

pytestmark = pytest.mark.timeout(240)

TRAINER = """
import os, sys, time
micro = int(os.environ.get("MICRO", "2"))
step_s = 0.15 * (2 / micro) ** 0.5
peak_gib = PEAK_GIB
print("(TaskRunner pid=7) step:0 - val-core/gsm8k/reward/mean@1:np.float64(0.2)", flush=True)
if peak_gib > 79.15:
    sys.exit("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity "
             "of 79.15 GiB of which 1.15 GiB is free. Including non-PyTorch memory, this process has 78.00 GiB "
             "memory in use.")
for step in range(1, 100):
    time.sleep(step_s * (2 if step == 1 else 1))
    print(f"(TaskRunner pid=7) step:{step} - training/global_step:{step} - "
          f"perf/max_memory_allocated_gb:np.float64({peak_gib}) - "
          f"perf/max_memory_reserved_gb:np.float64({peak_gib + 4}) - "
          f"timing_s/step:np.float64({step_s:.3f}) - perf/throughput:np.float64({2048 / step_s:.1f})", flush=True)
"""

SPACE = """
name: gib-only
command: train
parameters:
  - {name: MICRO, kind: pow2, low: 1, high: HIGH, default: 2, memory: increasing}
stop: {warmup_steps: 1, measured_steps: 3}
clocks: {startup_timeout_s: 60, stall_timeout_s: 30, stall_floor_s: 10, trial_timeout_s: 120, grace_s: 2}
"""


def tune(tmp_path, peak_gib: str, high: int, *args: str) -> subprocess.CompletedProcess:
    """``nccl-tune run ARGS`` on the trainer whose peak is ``peak_gib`` (of ``micro``), MICRO up to
    ``high``, on a node NVML cannot read."""
    (tmp_path / "train.py").write_text(TRAINER.replace("PEAK_GIB", peak_gib))
    (tmp_path / "space.yaml").write_text(SPACE.replace("HIGH", str(high)))
    return run_cli(
        ["run", "--space", "space.yaml", "--confirm", "0", *args, "--", sys.executable, "train.py"],
        cwd=tmp_path,
        env={"NCCL_TUNE_FAKE_NVML": ""},
    )


def test_memory_lines_without_the_gpus_size_end_in_a_tuned_file(tmp_path):
    proc = tune(tmp_path, "30 + 2.0 * micro", 8, "--trials", "2", "-o", "tuned.yaml")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "progress: the output reads as preset verl" in proc.stdout
    assert "trial 0 ok" in proc.stdout and " GiB" in proc.stdout and (tmp_path / "tuned.yaml").is_file()


def test_once_an_oom_names_the_gpus_size_every_run_in_gib_alone_reads_as_a_share_of_it(tmp_path):
    """The memory model works in shares of the GPU: until a run names the size, every move has even
    odds to fit. PyTorch's out-of-memory message names it; from then on the study reads every run's
    peak against it, those before the OOM included."""
    proc = tune(tmp_path, "12.0 * micro", 16, "--trials", "4", "--seed", "0")
    out = proc.stdout
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, out + proc.stderr
    assert "trial 0 ok" in out and "mem 28.0 GiB log" in out, out  # reserved; no size known yet
    assert " oom " in out and "total capacity of 79.15 GiB" in out, out
    summary = out[out.index("\ntrials:") :]
    assert "trial 0 baseline ok" in summary and "mem 28.0 GiB (35%)" in summary, summary
    assert "MICRO=16" not in out, out  # dominates the OOM: never launched
