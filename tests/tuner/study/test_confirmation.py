"""The confirmation re-runs, end to end against the tiny trainer: two runs of a config that measure
further apart than their steps' noise allows confirm nothing, and a third run settles it; and the
baseline is re-run at the winner's step count before a speed-up is quoted."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
import yaml

from tests.tuner.conftest import TINY_SPACE, TINY_TRAINER, run_cli

pytestmark = pytest.mark.timeout(300)


def tiny(workdir, command, *extra):
    args = ["run", "--space", str(TINY_SPACE), "--study", "t", "--seed", "3", "--json", *extra, "--", *command]
    return run_cli(args, cwd=workdir)


def test_two_runs_that_disagree_confirm_nothing_and_a_third_run_settles_it(workdir):
    # the second launch of micro=4 runs its steps 35% slower (a neighbour's job, a throttled GPU)
    wrapper = workdir / "second_run_slow.py"
    wrapper.write_text(
        textwrap.dedent(
            f"""
            import os, sys
            counter = {str(workdir / "launches")!r}
            if "trainer.micro=4" in sys.argv[1:]:
                with open(counter, "a") as f:
                    f.write("x")
                if os.path.getsize(counter) == 2:
                    os.environ["TINY_STEP_S"] = str(0.15 * 1.35)
            os.execv(sys.executable, [sys.executable, {str(TINY_TRAINER)!r}, *sys.argv[1:]])
            """
        )
    )
    pins = ["--set", "trainer.offload=false", "--set", "NCCL_ALGO=unset"]
    proc = tiny(
        workdir,
        [sys.executable, str(wrapper)],
        "--trials",
        "4",
        "--steps",
        "4",
        "--confirm",
        "1",
        *pins,
        "-o",
        "tuned.yaml",
    )
    assert proc.returncode == 0, proc.stderr
    best = json.loads(proc.stdout)["best"]
    assert best["params"]["trainer.micro"] == 4 and len(best["trials"]) == 3, best
    first, slow, third = best["trials"]
    assert f"not confirmed: trials {first} and {slow} measured" in proc.stderr
    assert f"one more run of trial {first}'s config" in proc.stderr
    assert best["confirmed"]
    metrics = yaml.safe_load((workdir / "tuned.yaml").read_text())["metrics"]
    assert metrics["confirmation"] == "confirmed: 2 runs agree within their steps' noise; 1 of 3 runs off"
    assert "confirmed by a re-run" not in proc.stderr


def test_the_baseline_is_re_run_at_the_winners_step_count_before_a_speed_up_is_quoted(workdir, tiny_command):
    pins = ["--set", "trainer.offload=false", "--set", "NCCL_ALGO=unset"]
    first = tiny(workdir, tiny_command, "--trials", "1", "--steps", "2", "--confirm", "0", *pins)
    assert first.returncode == 0, first.stderr
    # resumed with 4 measured steps a trial: the baseline's 2 are not the same measurement
    proc = tiny(workdir, tiny_command, "--trials", "3", "--steps", "4", "--confirm", "1", *pins, "-o", "tuned.yaml")
    assert proc.returncode == 0, proc.stderr
    assert "re-running it at 4 measured steps before quoting a speed-up" in proc.stderr
    rows = json.loads(proc.stdout)["trials"]
    again = [r for r in rows if r["kind"] == "rerun" and r["params"]["trainer.micro"] == 1]
    assert len(again) == 1 and again[0]["status"] == "ok"
    text = (workdir / "tuned.yaml").read_text()
    metrics = yaml.safe_load(text)["metrics"]
    assert metrics["baseline_measured_steps_per_run"] == [4] and metrics["speedup_like_for_like"] is True
    assert metrics["baseline_throughput_per_s"] == pytest.approx(again[0]["throughput_per_s"], rel=1e-3)
    assert "not like for like" not in text


def test_without_re_runs_the_speed_up_over_a_baseline_measured_otherwise_carries_a_caveat(workdir, tiny_command):
    pins = ["--set", "trainer.offload=false", "--set", "NCCL_ALGO=unset"]
    assert tiny(workdir, tiny_command, "--trials", "1", "--steps", "2", "--confirm", "0", *pins).returncode == 0
    proc = tiny(workdir, tiny_command, "--trials", "3", "--steps", "4", "--confirm", "0", *pins, "-o", "tuned.yaml")
    assert proc.returncode == 0, proc.stderr
    text = (workdir / "tuned.yaml").read_text()
    assert yaml.safe_load(text)["metrics"]["speedup_like_for_like"] is False
    head = [line for line in text.splitlines() if line.startswith("# speed-up:")]
    assert head and "not like for like: the baseline measured 2 steps a run and this config 4" in head[0]
    assert "x the baseline's" in proc.stderr and "; not like for like: the baseline measured 2 steps" in proc.stderr


def test_a_re_run_left_over_confirms_the_fastest_config_that_keeps_the_training(workdir, tiny_command):
    # the tiny trainer's step time, read from the environment, stands for a training change (a shorter
    # prompt limit): the space calls it semantic, and 0.1 s steps beat every micro-batch at 0.15 s
    space = workdir / "space.yaml"
    space.write_text(_with_semantic_step(TINY_SPACE.read_text()))
    pins = ["--set", "trainer.offload=false", "--set", "NCCL_ALGO=unset"]

    def run(confirm: str, study: str) -> tuple[dict, str]:
        args = ["run", "--space", str(space), "--study", study, "--seed", "3", "--json", "--trials", "3"]
        proc = run_cli([*args, "--confirm", confirm, *pins, "--", *tiny_command], cwd=workdir)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout), proc.stderr

    out, err = run("2", "left-over")
    assert out["best"]["params"]["TINY_STEP_S"] == 0.1 and out["best"]["confirmed"], out["best"]
    plain = out["speed_only"]
    assert plain["params"]["trainer.micro"] == 4 and plain["params"]["TINY_STEP_S"] == 0.15 and plain["confirmed"]
    first, again = plain["trials"]
    assert f"a re-run is left: confirming trial {first}, the fastest config that keeps the training" in err
    assert f"trial {again} started (re-run of trial {first}, speed only)" in err
    assert f"speed only (the training as you run it): trial {first}," in err
    assert "confirmed: 2 runs agree within their steps' noise)" in err.split("speed only (the training")[1]
    # one re-run only: the winner takes it, and the speed-only line says its config ran once
    out, err = run("1", "one")
    assert out["best"]["confirmed"] and not out["speed_only"]["confirmed"]
    assert len(out["speed_only"]["trials"]) == 1 and "a re-run is left" not in err
    assert "(not confirmed by a re-run)" in err.split("speed only (the training")[1]


def _with_semantic_step(text: str, slow: float = 0.15, fast: float = 0.1) -> str:
    """The tiny space with micro-batches up to 4 (all fit) and the step time as a semantic parameter
    (``slow``, the user's, or ``fast``)."""
    assert "high: 8" in text and text.count("trial:") == 1
    step = f"  - {{name: TINY_STEP_S, kind: categorical, choices: [{slow}, {fast}], default: {slow}, semantic: true}}\n"
    return text.replace("high: 8", "high: 4").replace("trial:", step + "trial:", 1)


def test_a_re_run_that_brings_a_config_with_fewer_training_changes_within_the_noise_confirms_that_one(workdir):
    # a shorter step stands for a training change: 0.96 s steps against the user's 1.00 s, 4.2% faster,
    # beyond the 3% noise assumed before any re-run; its re-run steps 0.99 s, so its mean is 2.6% faster
    # and its runs 3.1% apart: the user's run, within that noise and changing nothing, becomes the pick,
    # and the one re-run left over goes to it (the steps print the times they were meant to take)
    space = workdir / "space.yaml"
    space.write_text(_with_semantic_step(TINY_SPACE.read_text(), slow=1.0, fast=0.96))
    wrapper = workdir / "rerun_slower.py"
    wrapper.write_text(
        textwrap.dedent(
            f"""
            import os, sys
            counter = {str(workdir / "launches")!r}
            if os.environ.get("TINY_STEP_S") == "0.96":
                with open(counter, "a") as f:
                    f.write("x")
                if os.path.getsize(counter) == 2:
                    os.environ["TINY_STEP_S"] = "0.99"
            os.execv(sys.executable, [sys.executable, {str(TINY_TRAINER)!r}, *sys.argv[1:]])
            """
        )
    )
    pins = ["--set", "trainer.offload=false", "--set", "NCCL_ALGO=unset", "--set", "trainer.micro=1"]
    args = ["run", "--space", str(space), "--study", "t", "--json", "--trials", "2", "--steps", "2", "--confirm", "1"]
    command = ["--", sys.executable, str(wrapper)]
    proc = run_cli([*args, *pins, "-o", "tuned.yaml", *command], cwd=workdir, env={"TINY_EXACT_TIMES": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "the re-run of trial 1 moved the pick to trial 0, which no run has confirmed: one more re-run" in proc.stderr
    best = json.loads(proc.stdout)["best"]
    assert best["params"]["TINY_STEP_S"] == 1.0 and best["confirmed"] and best["trials"] == [0, 3], proc.stderr
    metrics = yaml.safe_load((workdir / "tuned.yaml").read_text())["metrics"]
    assert metrics["confirmed"] is True
    # no NVML here: the memory is the trainer's printed figure, and the export says what it leaves out
    assert metrics["memory_source"] == "log" and "allocator's cache" in metrics["memory_note"]
