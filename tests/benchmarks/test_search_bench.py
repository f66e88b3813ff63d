"""benchmarks/search.py, run as a user runs it (a real process) on its quick subspace: the JSON it
writes holds a landscape whose best is consistent and exact, studies judged against it, and the
design targets; a second run reuses the cached landscape; bad options get a one-line error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "search.py"
SEEDS, TRIALS = 2, 8


def run_bench(*args: str, timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> tuple[dict, Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("search") / "search.json"
    proc = run_bench("--quick", "--seeds", str(SEEDS), "--trials", str(TRIALS), "--json", str(out))
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(out.read_text()), out, proc


def test_landscape_best_is_stable_exact_and_the_fastest(quick):
    data, _, _ = quick
    land = data["landscape"]
    best, base = land["best"], land["baseline"]
    assert data["pins"] == {"trainer.train_batch_size": "256", "trainer.max_prompt_length": "4096"}
    assert best["failure"] is None and base["failure"] is None
    assert best["values"]["trainer.train_batch_size"] == 256
    # throughput is samples per step over the noise-free step time: 256 prompts x 5 samples
    assert best["throughput_samples_per_s"] == pytest.approx(256 * 5 / best["step_s"])
    assert best["peak_mem_gib"] <= (1 - data["min_headroom_frac"]) * 79.15
    assert best["throughput_samples_per_s"] > base["throughput_samples_per_s"]
    assert all(t["throughput_samples_per_s"] <= best["throughput_samples_per_s"] for t in land["top"])
    assert land["target_throughput_samples_per_s"] == pytest.approx(best["throughput_samples_per_s"] * 0.98)
    check = land["reduction_check"]
    assert check["exact"] and check["pairs"] > 0 and check["faster_than_best"] == 0
    assert land["counts"]["nccl_classes_pareto"] < land["counts"]["nccl_classes"]
    region = land["target_region"]
    # the best itself is in the target region, and every NCCL setting of its class with it
    assert 1 <= region["assignments_within"] and region["configs_within"] >= 1
    assert region["p"] == pytest.approx(region["configs_within"] / region["configs_admissible"])
    assert region["configs_admissible"] == (
        land["counts"]["command_line_assignments_admissible"] * land["counts"]["nccl_combinations"]
    )


def test_studies_are_judged_per_seed_with_the_defined_measures(quick):
    data, _, _ = quick
    assert set(data["definitions"]) >= {"stable", "best", "trials_to_reach", "failed_gpu_frac"}
    for sampler in ("tuner", "random"):
        studies = data["studies"][sampler]
        assert [s["seed"] for s in studies] == list(range(SEEDS))
        for s in studies:
            assert 1 <= s["trials_to_reach"] <= TRIALS + 1
            assert s["censored"] == (s["trials_to_reach"] == TRIALS + 1)
            assert s["launched"] >= TRIALS and s["gpu_s"] > 0
            assert 0.0 <= s["failed_gpu_frac"] <= s["failed_or_stopped_gpu_frac"] <= 1.0
            assert sum(s["statuses"].values()) == s["launched"]
            fracs = [s["best_frac_after"][str(n)] for n in (5,)]
            assert all(0.0 < f <= 1.0 + 1e-9 for f in fracs)
        summary = data["samplers"][sampler]
        assert summary["censored"] == sum(s["censored"] for s in studies)
        assert summary["trials_to_reach"] == [s["trials_to_reach"] for s in studies]
    # random search: no re-runs, nothing predicted, nothing stopped early
    for s in data["studies"]["random"]:
        assert s["launched"] == TRIALS and "predicted" not in s["outcomes"] and "budget" not in s["statuses"]


def test_targets_reported_and_exit_code_follows_them(quick):
    data, _, proc = quick
    whats = [t["what"] for t in data["targets"]]
    assert len(whats) == 3 and all(isinstance(t["met"], bool) for t in data["targets"])
    assert proc.returncode == (0 if all(t["met"] for t in data["targets"]) else 1)
    assert "trials to reach" in proc.stdout and "targets" in proc.stdout


def test_second_run_reuses_the_cached_landscape(quick, tmp_path):
    data, out, _ = quick
    copy = tmp_path / "again.json"
    copy.write_text(out.read_text())
    proc = run_bench("--quick", "--seeds", "1", "--trials", "3", "--json", str(copy))
    assert proc.returncode in (0, 1), proc.stderr
    assert "reused from" in proc.stdout
    again = json.loads(copy.read_text())
    assert again["landscape"]["best"] == data["landscape"]["best"]
    assert len(again["studies"]["tuner"]) == 1


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--seeds", "0"], "--seeds 0: must be at least 1"),
        (["--quick", "--set", "trainer.nope=1"], "has no parameter or context value trainer.nope"),
        (["--quick", "--set", "trainer.micro_train_batch_size_per_gpu=3"], "is not a value of"),
    ],
)
def test_bad_options_get_one_line_errors(args, expected):
    proc = run_bench(*args, timeout=60)
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
