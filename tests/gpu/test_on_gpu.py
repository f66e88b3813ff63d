"""The tool on a real GPU, from one run of benchmarks/gpu.py (``gpu_run``): real CUDA OOMs, NVML
next to the job's ``max_memory_reserved``, the gate between trials, NCCL's own ``set by
environment`` report, the hardware record, the memory model against measured peaks, a stalled
rank, ``nccl-tune doctor``. Skipped without a CUDA device (conftest.py)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(600)

OUTSIDE_ALLOCATOR_MAX_GIB = 4.0
"""CUDA's context, NCCL's buffers and what the driver holds for the process, outside PyTorch's
allocator: under a GiB on an H100; more means NVML and the job disagree about the peak."""
MEDIAN_ERROR_MAX = 0.25
"""The memory model's median miss, as a share of the GPU, that would make its OOM predictions useless."""


def stage(gpu_run, name):
    assert name in gpu_run, f"stage {name} did not run: {(gpu_run.get('errors') or {}).get(name)}"
    return gpu_run[name]


def ran(gpu_run):
    """Every launched trial: the study's and the pinned OOM trial."""
    oom = (gpu_run.get("oom") or {}).get("trial")
    return stage(gpu_run, "study")["trials"] + ([oom] if oom else [])


def test_the_study_ran_real_cuda_trials_measured_through_nvml(gpu_run):
    study = stage(gpu_run, "study")
    ok = [r for r in study["trials"] if r["status"] == "ok"]
    assert ok, [(r["number"], r["status"]) for r in study["trials"]]
    for r in ok:
        assert r["memory_source"] == "nvml" and r["throughput_unit"] == "tokens/s" and r["throughput"] > 0
        assert r["nvml_peak_gib"] > r["nvml_baseline_gib"] + 1.0  # a billion parameters in AdamW
        # torch's and NVML's sizes of the one GPU agree (the job's percentage gives torch's)
        assert r["job_total_gib"] == pytest.approx(r["gpu_total_gib"], rel=0.03)
    assert study["best"] is not None and study["best"]["throughput_unit"] == "tokens/s"


def test_a_real_cuda_oom_is_classified_oom_with_the_size_pytorch_asked_for(gpu_run):
    trial = stage(gpu_run, "oom")["trial"]
    assert trial["status"] == "oom", trial
    oom = trial["oom"]
    assert oom["tried_gib"] and oom["tried_gib"] > 0
    assert "out of memory" in oom["evidence"].lower()
    # the tool read the demand from PyTorch's message: more than the GPU holds
    assert oom["needed_frac"] > 1.0 and oom["capacity_gib"] == pytest.approx(trial["gpu_total_gib"], rel=0.03)
    assert "micro_batch_size" in oom["advice"] or "activation_checkpointing" in oom["advice"]
    assert trial["wall_s"] < 90  # seconds after start-up, not a long run
    for r in stage(gpu_run, "study")["trials"]:
        if r["status"] == "oom":
            assert r["oom"]["tried_gib"] and r["oom"]["needed_frac"] > 1.0, r


def test_nvml_s_peak_sits_just_above_the_job_s_max_memory_reserved(gpu_run):
    rows = [r for r in stage(gpu_run, "study")["trials"] if r["status"] == "ok"]
    outside = [r["outside_allocator_gib"] for r in rows]
    assert rows and None not in outside, rows
    assert all(0.0 <= x <= OUTSIDE_ALLOCATOR_MAX_GIB for x in outside), outside


def test_the_gate_saw_memory_come_back_before_every_launch(gpu_run):
    gaps = stage(gpu_run, "gate")
    assert gaps and all("note" not in g for g in gaps), gaps
    assert all(g["back_at_launch"] for g in gaps), gaps
    # a trial that held tens of GiB gave them back before the next launch
    assert any(g["peak_gib"] > g["baseline_gib"] + 10 for g in gaps)


def test_nccl_reports_the_variables_the_trials_set(gpu_run):
    rows = ran(gpu_run)
    for r in rows:
        assert r["nccl"]["debug"]["NCCL_DEBUG"] == "INFO" and "ENV" in r["nccl"]["debug"]["NCCL_DEBUG_SUBSYS"]
        assert r["nccl"]["differ"] == [], r["nccl"]
    pinned = gpu_run["oom"]["trial"]["nccl"]
    assert pinned["seen"], "NCCL reported no variable of the pinned trial's environment"
    assert pinned["reported"], pinned
    dropped = {**stage(gpu_run, "study")["dropped"], **gpu_run["oom"]["dropped"]}
    reported = {n for r in rows for n in r["nccl"]["reported"]}
    assert not reported & set(dropped), dropped


def test_the_hardware_record_names_gpu_driver_cuda_and_nccl(gpu_run):
    hw = stage(gpu_run, "hardware")
    fp, facts = hw["fingerprint"], hw["torch"]
    assert fp["gpu_count"] >= 1 and fp["gpu_model"] == facts["device"]
    assert fp["driver_version"] and fp["cuda_version"] and fp["nccl_version"] == facts["nccl"]
    assert int(fp["cuda_version"].split(".")[0]) >= int(facts["cuda"].split(".")[0])  # the driver runs torch's CUDA
    record = stage(gpu_run, "study")["hardware_record"]
    assert fp["gpu_model"] in record["gpus"] and record["nccl"] == fp["nccl_version"]
    assert record["driver"] == fp["driver_version"] and record["cuda"] == fp["cuda_version"]


def test_the_memory_model_is_measured_against_every_launched_peak(gpu_run):
    mm = stage(gpu_run, "memory_model")
    rows = mm["per_trial"]
    assert [r["number"] for r in rows] == [r["number"] for r in stage(gpu_run, "study")["trials"]]
    judged = [r for r in rows if r["error_frac"] is not None]
    assert judged, rows
    assert all(math.isfinite(r["predicted_frac"]) and 0 < r["measured_frac"] < 1 for r in judged)
    assert statistics.median(abs(r["error_frac"]) for r in judged) <= MEDIAN_ERROR_MAX, judged
    assert mm["oom_stage_config"]["predicted_frac"] is not None
    if mm["first_oom"] is not None:
        assert mm["first_oom"]["p_fits"] is not None


def test_a_stalled_rank_is_a_hang_with_py_spy_s_stack_and_nothing_is_left_on_the_gpu(gpu_run):
    h = stage(gpu_run, "hang")
    assert h["status"] == "hang" and h["stop_reason"] == "stall", h
    assert h["detect_s"] <= h["stall_timeout_s"] + 2.0
    rank0 = [p for p in h["stack"]["processes"] if p["rank"] == 0]
    assert rank0 and "gpu_train.py" in rank0[0]["command"] and not rank0[0]["error"], h["stack"]
    assert h["stack"]["frames"][0].startswith("stall (") and "gpu_train.py" in h["stack"]["frames"][0]
    assert h["baseline_gib"] is not None and h["peak_gib"] > h["baseline_gib"] + 10  # it held its memory as it slept
    assert h["survivors"] == 0 and h["teardown_s"] <= h["grace_s"] + 2.0
    assert h["gpu_back_s"] is not None and h["gpu_back_s"] <= h["grace_s"] + 2.0
    assert h["gpu_processes_after"] == [] and h["used_after_gib"] <= h["baseline_gib"] + 1.0


def test_doctor_on_a_real_node(gpu_run):
    doctor = stage(gpu_run, "doctor")
    checks = {c["name"]: c for c in doctor["checks"]}
    model = gpu_run["hardware"]["fingerprint"]["gpu_model"]
    assert checks["gpu.visible"]["status"] == "pass" and model in checks["gpu.visible"]["detail"]
    assert "gpu.memory" in checks and not [
        n for n, c in checks.items() if n.startswith("gpu.") and c["status"] == "fail"
    ]


def test_the_figures_are_kept_beside_the_run(gpu_run):
    out = Path(gpu_run["out"])
    assert (out / "gpu.json").is_file() and (out / "benchmark.log").is_file()
    assert not gpu_run.get("errors"), gpu_run.get("errors")
