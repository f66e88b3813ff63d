"""benchmarks/gpu.py where it can run without a GPU: the one line it exits with on a machine without
CUDA, and ``--show``/``--compare`` reading figures in the shape it writes them (the targets judged,
the table, what changed in the node). tests/gpu runs it for real on a GPU node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "gpu.py"

pytestmark = pytest.mark.timeout(120)


def run_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], cwd=REPO, capture_output=True, text=True, timeout=100)


def nccl(set_values: dict, reported: list[str]) -> dict:
    seen = {"gpu-node:4242 [0]": {n: str(set_values[n]) for n in reported}} if reported else {}
    return {
        "set": set_values,
        "seen": seen,
        "reported": reported,
        "differ": [],
        "set_not_reported": [n for n, v in set_values.items() if v is not None and n not in reported],
        "debug": {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV"},
    }


def trial(number: int, status: str, mbs: int, **more) -> dict:
    row = {
        "number": number,
        "kind": "search",
        "values": {"micro_batch_size": mbs, "seq_len": 4096, "activation_checkpointing": False},
        "status": status,
        "throughput": 250000.0 if status == "ok" else None,
        "nvml_peak_gib": 20.0 * mbs,
        "nvml_baseline_gib": 0.5,
        "gpu_total_gib": 139.8,
        "job_reserved_gib": 20.0 * mbs - 1.3,
        "outside_allocator_gib": 0.8,
        "nccl": nccl({"NCCL_ALGO": None, "NCCL_PROTO": None, "NCCL_BUFFSIZE": None}, []),
        "launched_at": 1000.0 + 20 * number,
        "ended_at": 1015.0 + 20 * number,
    }
    row.update(more)
    return row


def figures() -> dict:
    """Figures of a run on a GPU node that met every target, in the shape ``benchmarks/gpu.py`` writes."""
    fp = {
        "host": "gpu-node",
        "gpu_model": "NVIDIA H200",
        "gpu_count": 1,
        "gpu_memory_gib": 139.8,
        "driver_version": "580.82.07",
        "cuda_version": "13.0",
        "torch_version": "2.11.0+cu130",
        "nccl_version": "2.28.3",
        "python_version": "3.12.3",
        "trainer_package": None,
        "trainer_version": None,
        "trainer_commit": "0" * 40,
        "trainer_branch": "main",
        "nccl_tune_version": "0.1.0",
        "recorded_at": "2026-12-01T00:00:00+00:00",
    }
    oom = trial(
        0,
        "oom",
        32,
        values={
            "micro_batch_size": 32,
            "seq_len": 4096,
            "activation_checkpointing": False,
            "NCCL_ALGO": "Ring",
            "NCCL_PROTO": "Simple",
            "NCCL_BUFFSIZE": 4194304,
        },
        nccl=nccl({"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple", "NCCL_BUFFSIZE": "4194304"}, ["NCCL_BUFFSIZE"]),
        oom={"tried": "32.00 GiB", "tried_gib": 32.0, "needed_frac": 1.2, "capacity_gib": 139.8},
    )
    return {
        "benchmark": "gpu",
        "recorded_at": "2026-12-01T00:00:00+00:00",
        "hardware": {
            "fingerprint": fp,
            "summary": "1x NVIDIA H200, driver 580.82.07, CUDA 13.0, torch 2.11.0+cu130, NCCL 2.28.3",
            "torch": {"device": "NVIDIA H200", "cuda": "13.0", "nccl": "2.28.3"},
        },
        "doctor": {
            "exit_code": 0,
            "checks": [{"name": "gpu.visible", "status": "pass", "detail": "1 GPU(s): NVIDIA H200"}],
        },
        "study": {"trials": [trial(0, "ok", 2), trial(1, "ok", 4)], "dropped": {}, "wall_s": 100.0},
        "gate": [{"after": 0, "before": 1, "baseline_gib": 0.5, "peak_gib": 40.0, "back_at_launch": True}],
        "oom": {"trial": oom, "dropped": {}},
        "memory_model": {
            "per_trial": [{"number": 1, "predicted_frac": 0.6, "measured_frac": 0.57, "error_frac": 0.03}],
            "median_abs_error_frac": 0.03,
        },
        "hang": {
            "status": "hang",
            "detect_s": 10.1,
            "teardown_s": 1.2,
            "gpu_back_s": 1.3,
            "survivors": 0,
            "gpu_processes_after": [],
            "stack": {"frames": ["stall (/repo/examples/gpu_train.py:249)  # time.sleep(seconds)"]},
        },
    }


def test_without_cuda_it_says_so_in_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "gpu.json"
    done = run_bench("--json", str(out), "--work", str(tmp_path / "work"))
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "no CUDA device visible" in lines[0] and "docs/gpu.md" in lines[0]
    assert not out.exists() and not (tmp_path / "work").exists()


def test_show_judges_the_targets_and_compares_with_a_kept_run(tmp_path):
    now = tmp_path / "now.json"
    now.write_text(json.dumps(figures()))
    done = run_bench("--show", str(now))
    assert done.returncode == 0, done.stdout + done.stderr
    table = done.stdout.split("targets")[1]
    assert "1x NVIDIA H200, driver 580.82.07" in done.stdout
    assert table.count("│ yes ") == 9 and "│ no " not in table, table
    then = figures()
    then["hardware"]["fingerprint"]["driver_version"] = "570.1"
    for row in then["study"]["trials"]:
        row["throughput"] = 200000.0
    kept = tmp_path / "then.json"
    kept.write_text(json.dumps(then))
    done = run_bench("--show", str(now), "--compare", str(kept))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "against the run of" in done.stdout and "driver 570.1 -> 580.82.07" in done.stdout
    assert "200,000" in done.stdout and "250,000" in done.stdout


def test_show_exits_1_when_a_target_is_missed(tmp_path):
    missed = figures()
    missed["oom"]["trial"]["status"] = "crash"  # an OOM the tool did not recognise
    missed["gate"][0]["back_at_launch"] = False
    path = tmp_path / "missed.json"
    path.write_text(json.dumps(missed))
    done = run_bench("--show", str(path))
    assert done.returncode == 1
    table = done.stdout.split("targets")[1]
    assert "a CUDA OOM is classified oom" in table and "0/1 launches" in table


def test_a_missing_file_is_one_line(tmp_path):
    done = run_bench("--show", str(tmp_path / "none.json"))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "none.json" in done.stderr


def test_the_gpu_run_script_says_what_is_missing_in_one_line(tmp_path):
    script = REPO / "benchmarks" / "gpu_run.sh"
    env = {"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"), "WHEELS": str(tmp_path / "none")}
    done = subprocess.run(["bash", str(script)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert (
        done.stdout.strip()
        == f"gpu_run: no wheels in {tmp_path / 'none'}: run 'make gpu-wheels' and bring .whl with the checkout"
    )
    done = subprocess.run(
        ["bash", str(script)], cwd=REPO, env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True
    )
    assert done.returncode != 0 and "OUT must name the folder" in done.stderr
