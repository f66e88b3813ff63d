"""The gate between trials, against the fake NVML with real processes holding "GPU memory"."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from nccl_tune.errors import GpuGateError
from nccl_tune.gpu import NoGpuProbe, NvmlProbe
from nccl_tune.gpu_fake import FakeNvml, h100_node, write_state
from nccl_tune.launchers.gate import GpuGate
from nccl_tune.launchers.process import build_env

from .helpers import wait_until_marked


def _hold(state_path: Path, gpu: int, gib: float, seconds: float = 120, marker: str | None = None) -> subprocess.Popen:
    """A real process registered in the fake NVML as holding ``gib`` on ``gpu``."""
    env = build_env({}, marker) if marker else None
    proc = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"], env=env)
    gpus = h100_node(2, used_gib=0.5)
    gpus[gpu]["processes"] = [{"pid": proc.pid, "used_gib": gib}]
    write_state(state_path, gpus)
    return proc


def test_a_clean_node_opens_at_once(fake_gpus) -> None:
    _, probe = fake_gpus
    gate = GpuGate(probe, timeout_s=5)
    gate.take_baseline()
    assert gate.wait("some-study") < 1.0


def test_a_leftover_holder_stops_the_study_with_its_name(fake_gpus, study: str) -> None:
    state_path, probe = fake_gpus
    gate = GpuGate(probe, timeout_s=1.0, poll_s=0.1)
    gate.take_baseline()
    holder = _hold(state_path, 1, 40.0)
    try:
        with pytest.raises(GpuGateError) as info:
            gate.wait(study)
        msg = str(info.value)
        assert "\n" not in msg
        assert "GPU 1 40.5 GiB (baseline 0.5)" in msg
        assert f"pid {holder.pid} (" in msg and "time.sleep" in msg and "40.0 GiB on GPU 1" in msg
        assert f"kill {holder.pid}" in msg
    finally:
        holder.kill()
        holder.wait()
    assert gate.wait(study) < 1.0  # the driver freed it: the gate opens


def test_the_gate_waits_for_memory_to_come_back(fake_gpus, study: str) -> None:
    state_path, probe = fake_gpus
    gate = GpuGate(probe, timeout_s=30, poll_s=0.1)
    gate.take_baseline()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    gpus = h100_node(2, used_gib=0.5)
    gpus[0]["processes"] = [{"pid": holder.pid, "used_gib": 30.0}]
    write_state(state_path, gpus)
    reaper = threading.Thread(target=holder.wait)
    reaper.start()
    waited = gate.wait(study)
    reaper.join()
    assert 0.5 <= waited < 25


def test_memory_used_before_the_study_is_the_baseline(tmp_path: Path) -> None:
    state_path = tmp_path / "nvml.json"
    write_state(state_path, h100_node(2, used_gib=10.0))  # another tenant, there before the study
    gate = GpuGate(NvmlProbe(FakeNvml(state_path)), tolerance_gib=1.0, timeout_s=1)
    assert gate.take_baseline() == {0: pytest.approx(10.0), 1: pytest.approx(10.0)}
    assert gate.wait(None) < 1.0
    write_state(state_path, h100_node(2, used_gib=11.5))
    with pytest.raises(GpuGateError, match=r"GPU 0 11.5 GiB \(baseline 10.0\)"):
        gate.wait(None)


def test_a_live_process_of_the_study_keeps_the_gate_shut_without_gpus(study: str) -> None:
    gate = GpuGate(NoGpuProbe("no GPU"), timeout_s=0.5, poll_s=0.1)
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], env=build_env({}, f"{study}/5"), start_new_session=True
    )
    try:
        wait_until_marked(study, proc.pid)
        with pytest.raises(GpuGateError) as info:
            gate.wait(study)
        msg = str(info.value)
        assert "processes of the study are still alive" in msg
        assert f"pid {proc.pid}" in msg and f"[trial {study}/5]" in msg
        assert gate.wait("another-study") < 1.0
    finally:
        proc.kill()
        proc.wait()
    assert gate.wait(study) < 1.0
