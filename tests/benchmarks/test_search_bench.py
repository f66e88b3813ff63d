"""benchmarks/search.py, run as a user runs it (a real process) in its quick mode: every landscape
family, the three samplers side by side, the JSON with exact landscapes, studies judged against them
and the targets per family; a second run reuses the twin's cached landscape; bad options get a
one-line error."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "search.py"
SEEDS, TRIALS = 1, 4
PIN = ("--set", "trainer.micro_forward_batch_size_per_gpu=8")
"""On top of ``--quick``'s own pins: a smaller twin landscape (about 45 s of the fixture's CPU time, the studies the rest)."""
FAMILIES = ("twin", "enabler-trap", "comm-bound", "flat-top", "narrow-wall", "hang-region")


def run_bench(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> tuple[dict, Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("search") / "search.json"
    proc = run_bench("--quick", *PIN, "--seeds", str(SEEDS), "--trials", str(TRIALS), "--json", str(out))
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(out.read_text()), out, proc


def test_every_family_has_an_exact_best_and_a_small_target_region(quick):
    data, _, _ = quick
    assert tuple(data["families"]) == FAMILIES
    for name, fam in data["families"].items():
        (inst,) = fam["instances"]
        # The twin is SkyRL as it is: with NCCL weight sync its workers get NCCL_CUMEM_ENABLE=0 whatever the
        # trial sets, so no NCCL setting hangs in weight sync and its target region is wider than the
        # analytic families' (p 0.066 with these pins: 8 assignments, every NCCL_CUMEM_ENABLE value).
        p_max, median_min = (0.1, 10) if name == "twin" else (0.05, 14)
        assert inst["best_throughput"] > 0 and 0 < inst["p"] < p_max, name
        assert inst["implied_random_median"] >= median_min, name
    land = data["families"]["twin"]["landscape"]
    assert land["reduction_check"]["exact"] and land["best"]["failure"] is None
    assert data["families"]["twin"]["pins"] == {
        "trainer.train_batch_size": "256",
        "trainer.max_prompt_length": "4096",
        "trainer.micro_forward_batch_size_per_gpu": "8",
    }


def test_three_samplers_side_by_side_with_the_defined_measures(quick):
    data, _, proc = quick
    assert set(data["definitions"]) >= {
        "stable",
        "best",
        "trials_to_reach",
        "failed_gpu_frac",
        "saved_gpu_frac",
        "check_gpu_frac",
    }
    for name, fam in data["families"].items():
        assert set(fam["samplers"]) == {"tuner", "tpe", "random"}
        for studies in fam["studies"].values():
            (s,) = studies
            assert 1 <= s["trials_to_reach"] <= TRIALS + 1 and s["censored"] == (s["trials_to_reach"] == TRIALS + 1)
            assert s["launched"] >= TRIALS and s["gpu_s"] > 0
            assert 0.0 <= s["failed_gpu_frac"] <= 1.0 and 0.0 <= s["saved_gpu_frac"] < 1.0
            assert sum(s["statuses"].values()) == s["launched"]
            assert sum(s["failed_gpu_by_cause"].values()) == pytest.approx(s["failed_gpu_frac"])
            if name != "twin":  # every failure on an analytic landscape has the landscape's reason
                assert "nothing in the landscape" not in s["failed_gpu_by_cause"], s["failed_gpu_by_cause"]
        # random search: no re-runs, nothing predicted, nothing stopped early, no NCCL check
        (r,) = fam["studies"]["random"]
        assert r["launched"] == TRIALS and "predicted" not in r["outcomes"] and r["saved_gpu_frac"] == 0.0
        assert r["check_gpu_frac"] == 0.0
        (t,) = fam["studies"]["tuner"]  # the tuner checks NCCL values where the model runs the check
        assert (t["check_gpu_frac"] > 0.0) == (name != "twin"), (name, t["check_gpu_frac"])
    for word in ("enabler-trap", "hang-region", "tuner", "tpe", "random", "targets", "by cause"):
        assert word in proc.stdout


def test_targets_per_family_and_the_exit_code_follows_them(quick):
    data, _, proc = quick
    assert {t["family"] for t in data["targets"]} == set(FAMILIES)
    assert all(isinstance(t["met"], bool) for t in data["targets"])
    per_family = Counter(t["family"] for t in data["targets"])
    assert set(per_family.values()) <= {3, 4}, per_family  # + the odds' calibration where the tuner proposed
    odds = [t for t in data["targets"] if "rated >= 90%" in t["what"]]
    assert odds and all("Brier" in t["note"] for t in odds)
    for fam in data["families"].values():  # the reliability table's counts are the proposals judged
        cal = fam["samplers"]["tuner"]["calibration"]
        assert sum(b["n"] for b in cal["bands"]) == cal["n"] == sum(len(s["odds"]) for s in fam["studies"]["tuner"])
    assert data["all_met"] == all(t["met"] for t in data["targets"])
    assert proc.returncode == (0 if data["all_met"] else 1)


def test_second_run_reuses_the_cached_twin_landscape(quick, tmp_path):
    data, out, _ = quick
    copy = tmp_path / "again.json"
    copy.write_text(out.read_text())
    proc = run_bench(
        "--quick",
        *PIN,
        "--families",
        "twin",
        "--samplers",
        "tuner",
        "--seeds",
        "1",
        "--trials",
        "3",
        "--json",
        str(copy),
    )
    assert proc.returncode in (0, 1), proc.stderr
    assert "reused from" in proc.stdout
    again = json.loads(copy.read_text())
    assert again["families"]["twin"]["landscape"]["best"] == data["families"]["twin"]["landscape"]["best"]
    assert list(again["families"]) == ["twin"] and list(again["families"]["twin"]["samplers"]) == ["tuner"]


def test_first_seed_studies_held_out_instances(tmp_path):
    """Instances from ``--first-seed`` on, judged like the others and named by their seed."""
    out = tmp_path / "held-out.json"
    proc = run_bench(
        "--families",
        "narrow-wall",
        "--samplers",
        "random",
        "--first-seed",
        "24",
        "--seeds",
        "2",
        "--trials",
        "3",
        "--json",
        str(out),
    )
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(out.read_text())
    assert data["first_seed"] == 24
    fam = data["families"]["narrow-wall"]
    assert [i["seed"] for i in fam["instances"]] == [24, 25]
    assert [s["seed"] for s in fam["studies"]["random"]] == [24, 25]
    assert (
        fam["instances"][0]["best_values"] != fam["instances"][1]["best_values"]
        or fam["instances"][0]["best_throughput"] != fam["instances"][1]["best_throughput"]
    )


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--seeds", "0"], "--seeds 0: must be at least 1"),
        (["--first-seed", "-1"], "--first-seed -1: must be 0 or more"),
        (["--families", "twin,nope"], "unknown family 'nope'"),
        (["--samplers", "cma"], "unknown sampler 'cma'"),
        (["--quick", "--set", "trainer.nope=1"], "has no parameter or context value trainer.nope"),
        (["--quick", "--set", "trainer.micro_train_batch_size_per_gpu=3"], "is not a value of"),
    ],
)
def test_bad_options_get_one_line_errors(args, expected):
    proc = run_bench(*args, timeout=60)
    assert proc.returncode == 2
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_failed_trial_is_told_by_the_landscapes_reason_it_fails():
    """What the by-cause split of failed GPU time names: a failure every run meets, a chance per
    step of a hang (cuMem 1, and any config within 8% of the wall), running out of memory."""
    sys.path.insert(0, str(BENCH.parent))
    import search

    from twin.families import enumerate_configs, instance

    inst, ex = instance("hang-region", 0)
    cause = search.failure_cause(inst)
    best = dict(ex.best_values)
    assert cause(best) == "nothing in the landscape"
    assert cause({**best, "NCCL_ALGO": "NVLS", "NCCL_CUMEM_ENABLE": 0}).startswith("hang: NVLS without cuMem")
    assert cause({**best, "NCCL_CUMEM_ENABLE": 1}).startswith("hangs in 15% of steps: cuMem")
    largest = {**best, "train.micro_batch_size": 16, "train.gradient_checkpointing": False}
    assert inst.landscape(largest).peak_gib > inst.node.capacity_gib and cause(largest) == "out of memory"
    near_wall = [
        v
        for v in enumerate_configs(inst.space)
        if 0.92 <= inst.landscape(v).peak_gib / inst.node.capacity_gib <= 1.0 and cause(v).startswith("hangs")
    ]
    assert near_wall, "instance 0 has configs within 8% of the wall"
    for v in near_wall:
        assert "memory wall" in cause(v) or (v["NCCL_ALGO"], v["NCCL_PROTO"]) == ("Tree", "LL128"), v


def test_ctrl_c_stops_the_benchmark_not_only_the_study_it_is_in(tmp_path):
    """A study catches Ctrl-C and stops with its trials stored; the benchmark then stops too (exit
    130, one line), instead of going on to the next of its studies."""
    out, err_file = tmp_path / "never.json", tmp_path / "stderr.txt"
    with err_file.open("w") as err_out:
        proc = subprocess.Popen(
            [
                sys.executable,
                str(BENCH),
                "--families",
                "flat-top",
                "--samplers",
                "tuner",
                "--seeds",
                "50",
                "--trials",
                "30",
                "--json",
                str(out),
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=err_out,
            env={**os.environ, "TMPDIR": str(tmp_path)},
            preexec_fn=ctrl_c_as_typed,
        )
    deadline = time.monotonic() + 300
    while not told_trials(tmp_path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, err_file.read_text()
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=240)
    except subprocess.TimeoutExpired:
        stacks = subprocess.run(
            [str(Path(sys.executable).parent / "py-spy"), "dump", "--pid", str(proc.pid)],
            capture_output=True,
            text=True,
        ).stdout
        proc.kill()
        pytest.fail(f"still running 240 s after Ctrl-C:\n{stacks}")
    err = err_file.read_text()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("interrupted after ") and not out.exists()


def ctrl_c_as_typed() -> None:
    """SIGINT as a terminal delivers it: a job started in the background of a shell without job
    control (a CI script's ``cmd &``) inherits SIGINT ignored, and Python then raises no
    KeyboardInterrupt for it outside a study's own handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def told_trials(root: Path) -> int:
    """Trials told so far in the benchmark's study databases under ``root`` (0 while none exists;
    an enqueued baseline waits, and is not told)."""
    told = 0
    for db in root.glob("nccl-tune-search-*/*/*.db"):
        try:
            with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as con:
                told += con.execute(
                    "select count(*) from trials where state in ('COMPLETE', 'FAIL', 'PRUNED')"
                ).fetchone()[0]
        except sqlite3.Error:  # created, not yet holding optuna's tables
            pass
    return told
