"""examples/ddp_train.py, a real torchrun (gloo) job with argparse flags and Hugging Face Trainer-style
lines, tuned end to end through `nccl-tune run` with its user-style space (flags, a preset, no
throughput section)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from tests.tuner.conftest import run_cli

pytestmark = pytest.mark.timeout(600)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
JOB = [
    str(Path(sys.executable).parent / "torchrun"),
    "--standalone",
    "--nproc-per-node",
    "2",
    str(EXAMPLES / "ddp_train.py"),
]
SPACE = str(EXAMPLES / "ddp_train.yaml")
# A narrower, shallower model than the example's default: each micro-batch costs mostly its fixed
# overhead, so fewer, larger micro-batches are 1.7x (4) and 2.4x (8) faster than the baseline's 2
# alone, an effect that the suite's other workers on the same two cores cannot hide (with the default
# model, 1.4x and 1.6x alone, a load burst measured the batch of 4 slower than the baseline in 1 of 8
# runs, and the search kept the baseline)
SMALL_MODEL = ["--seq-len", "4", "--hidden", "16", "--layers", "12", "--vocab", "64"]


def test_dry_run_shows_the_flags_as_separate_argv_elements(tmp_path):
    proc = run_cli(["run", "--space", SPACE, "--dry-run", "--json", "--", *JOB], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(proc.stdout)["argv"]
    assert argv[: len(JOB)] == JOB and argv[len(JOB) :] == ["--batch-size", "2", "--grad-accum", "8"]


def test_the_example_is_tuned_to_a_faster_config_than_its_baseline(tmp_path):
    # 20 measured steps (about 0.4 s at the baseline) average over the other workers' bursts
    proc = run_cli(
        [
            "run",
            "--space",
            SPACE,
            "--trials",
            "3",
            "--confirm",
            "1",
            "--seed",
            "1",
            "--steps",
            "20",
            "--warmup-steps",
            "2",
            "--json",
            "-o",
            "tuned.yaml",
            "--",
            *JOB,
            *SMALL_MODEL,
        ],
        cwd=tmp_path,
        timeout=540,
    )
    summary = json.loads(proc.stdout)
    best, base = summary["best"], summary["baseline"]
    # next to the rest of the suite on two cores, runs of one config may measure further apart than
    # their steps' noise allows (2,790, 4,489 and 1,789 samples/s once): then nothing is confirmed,
    # the run says which runs disagree and exits 2 (the best left may then be a config that ran
    # once, when the re-run put the one it re-ran below it); the tuning itself is what this test checks
    if proc.returncode == 2:
        said = ("NOT confirmed: trials", "not confirmed by a re-run")
        assert not best["confirmed"] and best["confirmation"].startswith(said), best
        assert "no confirmed config; best unconfirmed:" in proc.stderr
    else:
        assert proc.returncode == 0 and best["confirmed"], proc.stderr[-3000:]
    assert best["throughput_unit"] == base["throughput_unit"] == "samples/s"
    assert best["params"]["batch_size"] > 2
    # 2.2x and more in 8 runs next to a busy test process on the same two cores
    assert best["throughput_per_s"] > 1.3 * base["throughput_per_s"], (best, base)
    assert "progress: the output reads" not in proc.stderr  # the space names its preset
    doc = yaml.safe_load((tmp_path / "tuned.yaml").read_text())
    b = best["params"]["batch_size"]
    assert doc["args"] == ["--batch-size", str(b), "--grad-accum", str(16 // b)]
    assert doc["overrides"] == {
        "batch_size": b,
        "checkpointing": best["params"]["checkpointing"],
        "grad_accum": 16 // b,
    }
    assert doc["metrics"]["throughput_unit"] == "samples/s"
    spec = json.loads(next(tmp_path.glob("results/*/trial-0000/spec.json")).read_text())
    assert spec["argv"][len(JOB) :] == [*SMALL_MODEL, "--batch-size", "2", "--grad-accum", "8"]


def test_a_memory_failure_is_advised_in_the_spaces_own_flags(tmp_path):
    proc = run_cli(
        [
            "run",
            "--space",
            SPACE,
            "--set",
            "batch_size=16",
            "--set",
            "checkpointing=false",
            "--trials",
            "1",
            "--confirm",
            "0",
            "--json",
            "--",
            *JOB,
        ],
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]  # no stable config: the only trial ran out of memory
    (row,) = json.loads(proc.stdout)["trials"]
    assert row["status"] == "oom" and row["params"] == {"batch_size": 16, "checkpointing": False}
    assert row["advice"] == (
        "Out of GPU memory: lower batch_size (--batch-size, now 16), or turn on checkpointing "
        "(--gradient-checkpointing, now false)"
    )
