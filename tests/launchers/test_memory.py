"""Memory sampling: NVML per GPU (through the fake NVML), trainer memory lines, process-tree RSS."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import pytest

from nccl_tune.gpu import NoGpuProbe
from nccl_tune.gpu_fake import h100_node, write_state
from nccl_tune.launchers.memory import MemorySampler, baseline_of, build_report
from nccl_tune.launchers.process import build_env, spawn
from nccl_tune.launchers.progress import ProgressState
from nccl_tune.launchers.teardown import terminate
from nccl_tune.trial import OUTSIDE_PHASES

from .helpers import trainer_argv, wait_for_json


def _sample_until(sampler: MemorySampler, ok, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not ok():
        time.sleep(0.05)
    sampler.stop()


def test_nvml_peak_baseline_and_headroom_per_gpu(study: str, tmp_path: Path, fake_gpus) -> None:
    state_path, probe = fake_gpus
    baseline = baseline_of(probe.usage())
    pidfile = tmp_path / "pids.json"
    proc = spawn(
        trainer_argv(
            "--steps",
            "1000",
            "--step-s",
            "1",
            "--pidfile",
            str(pidfile),
            "--gpu-state",
            str(state_path),
            "--gpu-gib",
            "40",
        ),
        build_env({}, f"{study}/0"),
    )
    try:
        wait_for_json(pidfile)
        sampler = MemorySampler(probe, proc.pid, f"{study}/0", interval_s=0.05)
        sampler.start()
        _sample_until(sampler, lambda: sampler.gpu_peak_gib.get(0, 0) > 40)
    finally:
        terminate(f"{study}/0", 1.0, pgid=proc.pid, leader=proc)
    report = build_report(sampler, ProgressState(), baseline)
    assert report.source == "nvml"
    gpu0, gpu1 = report.gpus
    assert gpu0.peak_gib == pytest.approx(40.5, abs=0.01) and gpu0.baseline_gib == pytest.approx(0.5)
    assert gpu0.headroom_gib == pytest.approx(79.65 - 40.5, abs=0.01)
    assert gpu1.peak_gib == pytest.approx(0.5, abs=0.01)
    assert report.peak_gib == pytest.approx(40.5, abs=0.01)
    assert report.peak_rss_gib and report.peak_rss_gib > 0
    # the trainer is gone: the fake driver no longer counts its memory
    assert probe.usage()[0].used_gib == pytest.approx(0.5, abs=0.01)


def test_trainer_memory_lines_when_no_gpu_is_readable() -> None:
    progress = ProgressState(memory_peak_gib={0: 61.2, 3: 70.0}, memory_total_gib={0: 79.65, 3: 79.65})
    report = build_report(None, progress, {})
    assert report.source == "log"
    assert [(g.index, g.peak_gib, g.total_gib) for g in report.gpus] == [(0, 61.2, 79.65), (3, 70.0, 79.65)]
    assert report.min_headroom_gib == pytest.approx(9.65)


def test_memory_lines_without_a_total_say_so() -> None:
    report = build_report(None, ProgressState(memory_peak_gib={None: 12.0}), {})
    assert report.gpus[0].index == 0 and math.isnan(report.gpus[0].total_gib)


def test_memory_lines_without_a_rank_give_the_phases_when_no_line_has_one() -> None:
    progress = ProgressState(
        memory_peak_gib={None: 12.0},
        memory_total_gib={None: 80.0},
        memory_phase_peak_frac={None: {"generate": 0.15, OUTSIDE_PHASES: 0.05}},
        memory_phases_last={None: ("step", "generate")},
    )
    report = build_report(None, progress, {})
    assert dict(report.phase_peak_frac) == {"generate": 0.15, OUTSIDE_PHASES: 0.05}
    assert report.phases_open_at_end == ("step", "generate")


H100_GIB = 79.65


def _sample_at(sampler: MemorySampler, state_path: Path, used_gib: tuple[float, float]) -> None:
    """Set what the two fake GPUs hold, then take one sample."""
    gpus = h100_node(2)
    for gpu, used in zip(gpus, used_gib):
        gpu["used_gib"] = used
    write_state(state_path, gpus)
    sampler.sample()


def test_gpu_peaks_count_under_the_innermost_phase_open_at_each_sample(study: str, fake_gpus) -> None:
    state_path, probe = fake_gpus
    stack: list[str] = []
    sampler = MemorySampler(probe, os.getpid(), f"{study}/0", phase_of=lambda: tuple(stack))
    for phases, used in [
        ((), (0.5, 0.5)),  # start-up
        (("step", "generate"), (60.0, 10.0)),  # the engine's pool on GPU 0
        (("step", "generate"), (20.0, 8.0)),  # lower: the phase keeps its peak
        (("step",), (30.0, 50.0)),  # between the step's phases: the step is the innermost
        (("step", "policy_train"), (12.0, 70.0)),  # the trainer on GPU 1
        ((), (40.0, 40.0)),  # between steps
        (("step", "generate"), (5.0, 45.0)),  # the last sample
    ]:
        stack[:] = phases
        _sample_at(sampler, state_path, used)
    report = build_report(sampler, ProgressState(), {})
    assert report.source == "nvml"
    assert dict(report.phase_peak_frac) == pytest.approx(
        {
            OUTSIDE_PHASES: 40.0 / H100_GIB,
            "generate": 60.0 / H100_GIB,
            "step": 50.0 / H100_GIB,
            "policy_train": 70.0 / H100_GIB,
        }
    )
    assert report.phases_open_at_end == ("step", "generate")
    assert max(report.phase_peak_frac.values()) == pytest.approx(report.max_peak_frac)
    assert [g.peak_gib for g in report.gpus] == [pytest.approx(60.0), pytest.approx(70.0)]  # per GPU, as before

    stack.clear()
    _sample_at(sampler, state_path, (1.0, 1.0))
    assert sampler.phases_at_last_sample == (OUTSIDE_PHASES,)
    assert sampler.phase_peak_frac[OUTSIDE_PHASES] == pytest.approx(40.0 / H100_GIB)


def test_without_phase_of_no_phase_is_recorded(study: str, fake_gpus) -> None:
    state_path, probe = fake_gpus
    sampler = MemorySampler(probe, os.getpid(), f"{study}/0")
    _sample_at(sampler, state_path, (30.0, 50.0))
    report = build_report(sampler, ProgressState(open_phases=("step",)), {})
    assert report.source == "nvml" and [g.peak_gib for g in report.gpus] == [pytest.approx(30.0), pytest.approx(50.0)]
    assert dict(report.phase_peak_frac) == {} and report.phases_open_at_end == ()


def test_a_failing_phase_of_costs_the_sample_its_phase_only(study: str, fake_gpus) -> None:
    state_path, probe = fake_gpus

    def broken() -> tuple[str, ...]:
        raise RuntimeError("progress reader gone")

    sampler = MemorySampler(probe, os.getpid(), f"{study}/0", phase_of=broken)
    _sample_at(sampler, state_path, (30.0, 50.0))
    assert sampler.gpu_peak_gib == {0: pytest.approx(30.0), 1: pytest.approx(50.0)}
    assert sampler.phase_peak_frac == {} and sampler.phases_at_last_sample == ()


def test_process_tree_rss_includes_marked_processes_outside_the_tree(study: str, tmp_path: Path) -> None:
    child_code = (
        "import os, sys, time\nblock = bytearray(int(sys.argv[1]) << 20)\n"
        "for i in range(0, len(block), 4096): block[i] = 1\n"
        f"open({str(tmp_path / 'child.ready')!r}, 'w').close()\ntime.sleep(120)\n"
    )
    parent_code = (
        "import subprocess, sys, time\nblock = bytearray(100 << 20)\n"
        "for i in range(0, len(block), 4096): block[i] = 1\n"
        f"subprocess.Popen([sys.executable, '-c', {child_code!r}, '200'], start_new_session=True)\n"
        "time.sleep(120)\n"
    )
    proc = spawn([sys.executable, "-c", parent_code], build_env({}, f"{study}/0"))
    try:
        ready = tmp_path / "child.ready"
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists()
        sampler = MemorySampler(NoGpuProbe("test"), proc.pid, f"{study}/0", interval_s=0.05)
        sampler.start()
        _sample_until(sampler, lambda: sampler.peak_rss_gib > 0.28)
    finally:
        report_td = terminate(f"{study}/0", 1.0, pgid=proc.pid, leader=proc)
    assert report_td.escaped == 1
    report = build_report(sampler, ProgressState(), {})
    assert report.source == "rss" and report.gpus == ()
    assert report.peak_rss_gib > 0.28  # 100 MiB in the tree + 200 MiB in the escaped child
    assert report.peak_gib is None  # host memory is no GPU's peak
    assert 0 < sampler.host_peak_frac < 1
