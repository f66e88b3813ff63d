"""`nccl-tune doctor` as a user runs it: a real process, with the fake NVML standing in for the GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nccl_tune.gpu import FAKE_NVML_ENV
from nccl_tune.gpu_fake import h100_node, write_state

NCCL_TUNE = Path(sys.executable).parent / "nccl-tune"
TUNING_VARS = ("NCCL_", "TORCH_NCCL_", "TORCH_FR_", "TORCH_DISTRIBUTED_DEBUG", "SKYRL_WORKER_NCCL_TIMEOUT_IN_S")


def doctor(*args: str, env: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(TUNING_VARS)}
    base.update(RAY_TMPDIR=str(tmp_path), COLUMNS="200")
    return subprocess.run(
        [str(NCCL_TUNE), "doctor", *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


def test_json_flags_bad_variables_and_exits_1(tmp_path: Path) -> None:
    state = tmp_path / "nvml.json"
    write_state(state, h100_node(8))
    env = {
        FAKE_NVML_ENV: str(state),
        "NCCL_TIMEOUT": "1800",
        "NCCL_PROTO": "LL,Simpel",
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
    }
    r = doctor("--json", env=env, tmp_path=tmp_path)
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert report["ok"] is False and report["exit_code"] == 1
    assert checks["gpu.visible"]["status"] == "pass" and "8 x NVIDIA H100" in checks["gpu.visible"]["detail"]
    assert checks["env.NCCL_PROTO"]["status"] == "fail"
    assert checks["env.NCCL_TIMEOUT"]["status"] == "warn"
    assert "TORCH_FR_BUFFER_SIZE" in checks["env.TORCH_NCCL_TRACE_BUFFER_SIZE"]["detail"]


def test_healthy_fake_node_exits_0_with_a_readable_table(tmp_path: Path) -> None:
    state = tmp_path / "nvml.json"
    write_state(state, h100_node(8))
    r = doctor(env={FAKE_NVML_ENV: str(state), "NCCL_DEBUG": "WARN"}, tmp_path=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "gpu.nvlink" in r.stdout and "all NVLink links up" in r.stdout
    assert "failed" in r.stdout.splitlines()[-1]


def test_ecc_errors_fail_the_node(tmp_path: Path) -> None:
    state = tmp_path / "nvml.json"
    gpus = h100_node(8)
    gpus[6]["ecc"]["uncorrected_volatile"] = 4
    write_state(state, gpus)
    r = doctor("--json", env={FAKE_NVML_ENV: str(state)}, tmp_path=tmp_path)
    assert r.returncode == 1
    ecc = next(c for c in json.loads(r.stdout)["checks"] if c["name"] == "gpu.ecc")
    assert ecc["status"] == "fail" and "GPU 6: 4" in ecc["detail"]
