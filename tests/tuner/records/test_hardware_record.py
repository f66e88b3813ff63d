"""The hardware is recorded in the study when `run` starts; `export` and `report` read it from
there and never probe the machine they run on."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from nccl_tune.gpu_fake import h100_node, write_state
from tests.tuner.conftest import TINY_SPACE, run_cli


def test_export_names_the_gpus_the_study_ran_on_not_the_exporting_machines(workdir, tiny_command):
    state = workdir / "nvml.json"
    write_state(state, h100_node(2), driver_version="550.54.15", cuda_driver_version=12040)
    run = run_cli(
        ["run", "--space", str(TINY_SPACE), "--study", "h", "--trials", "1", "--confirm", "0", "--", *tiny_command],
        cwd=workdir,
        env={"NCCL_TUNE_FAKE_NVML": str(state)},
    )
    assert run.returncode == 0, run.stderr
    state.unlink()  # the exporting machine has no GPU (and the fake NVML file is gone)
    exported = run_cli(["export", "--study", "h"], cwd=workdir)
    assert exported.returncode == 0, exported.stderr
    hardware = yaml.safe_load(exported.stdout)["hardware"]
    assert hardware["gpus"] == "2x NVIDIA H100 80GB HBM3 (80 GiB)" and hardware["host"]
    # the run-time fingerprint: driver and CUDA from NVML, the trainer's commit from its checkout
    assert (hardware["driver"], hardware["cuda"]) == ("550.54.15", "12.4")
    fp = hardware["fingerprint"]
    assert (fp["gpu_count"], fp["gpu_model"]) == (2, "NVIDIA H100 80GB HBM3") and fp["recorded_at"]
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=Path(tiny_command[1]).parent, capture_output=True, text=True
    )
    assert fp["trainer_commit"] == head.stdout.strip() and hardware["trainer"].startswith("git ")
    report = run_cli(["report", "--study", "h", "--json"], cwd=workdir)
    assert json.loads(report.stdout)["hardware"] == hardware
