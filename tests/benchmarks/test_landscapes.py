"""benchmarks/landscapes: each landscape's command prints what its space's progress rules read, and
the harness judges a study's records against the instance."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from nccl_tune.diagnose.verdict import classify_log
from nccl_tune.failure import FailureClass
from nccl_tune.launchers.progress import ProgressTracker
from nccl_tune.presets import candidates
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.trial import STARTUP_PHASE
from nccl_tune.tuner.records.study_records import Outcome, TrialKind, TrialRecord

# How late a loaded machine may deliver a line that a sleep ended on time.
LATE_LINE_S = 0.1
BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
_SPEC = importlib.util.spec_from_file_location("bench_landscapes", BENCH / "landscapes.py")
bench = sys.modules.setdefault("bench_landscapes", importlib.util.module_from_spec(_SPEC))
_SPEC.loader.exec_module(bench)
shapes = sys.modules["shapes"]
_TRAINER = importlib.util.spec_from_file_location("bench_trainer", BENCH / "landscapes" / "trainer.py")
trainer = importlib.util.module_from_spec(_TRAINER)
_TRAINER.loader.exec_module(trainer)


def run_trainer(name: str, seed: int, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(BENCH / "landscapes" / "trainer.py"), name, *args],
        env={**os.environ, shapes.SEED_ENV: str(seed), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def timed_output(name: str, seed: int, *args: str) -> list[tuple[str, float]]:
    """The command's lines, stderr with stdout as a trial's log holds them (a bar redraws on stderr
    with carriage returns), each with the monotonic time it came at."""
    proc = subprocess.Popen(
        [sys.executable, str(BENCH / "landscapes" / "trainer.py"), name, *args],
        env={**os.environ, shapes.SEED_ENV: str(seed)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    out, rest = [], b""
    while chunk := os.read(proc.stdout.fileno(), 65536):
        t = time.monotonic()
        *done, rest = re.split(rb"[\r\n]", rest + chunk)
        out += [(seg.decode(), t) for seg in done if seg.strip()]
    assert proc.wait(timeout=60) == 0, out
    proc.stdout.close()
    return out + ([(rest.decode(), time.monotonic())] if rest.strip() else [])


def flags(ls, config) -> list[str]:
    out = []
    for name, value in config.items():
        if name.isupper():
            continue
        if isinstance(value, bool):
            out += [f"--{name.replace('_', '-')}"] if value else []
        else:
            out += [f"--{name.replace('_', '-')}", str(value)]
    return out


@pytest.mark.parametrize("name", sorted(shapes.LANDSCAPES))
def test_the_command_prints_steps_and_memory_its_space_reads(name):
    ls = shapes.LANDSCAPES[name]
    space = load_space(str(BENCH / "landscapes" / f"{name}.yaml"))
    assert {p.name for p in space.parameters} == set(ls.params)
    lines = timed_output(name, 2, "--max-steps", "4")
    states = []
    for rules in candidates(space.progress):  # the space's rules, or each preset when it names none
        tracker = ProgressTracker(rules)
        for i, (line, t) in enumerate(lines):
            tracker.feed(i, line, t)
        states.append(tracker.snapshot())
    state = next(s for s in states if len(s.step_times_s) == 4)
    outcome = ls.instance(2).outcome(ls.default)
    assert outcome.kind == "ok"
    if state.step_rates and state.step_rates[-1] and state.rate_unit == "samples":  # DeepSpeed: the job's samples
        assert state.step_rates[-1] == pytest.approx(ls.samples_per_step / outcome.step_s / shapes.TIME_SCALE, rel=0.1)
    elif state.step_rates and state.step_rates[-1]:  # torchtitan, verl: tokens per second per GPU
        assert state.step_rates[-1] == pytest.approx(
            ls.samples_per_step * ls.tokens_per_sample / ls.gpus / outcome.step_s / shapes.TIME_SCALE, rel=0.1
        )
    elif name in trainer.HF_FLAGS:  # the bar is timed as its lines come, and a loaded machine may
        # deliver one late (36 ms once, against a 41 ms step), which also shortens the step after it
        modelled_s = outcome.step_s * shapes.TIME_SCALE
        assert modelled_s * 0.5 <= statistics.median(state.step_times_s[1:]) <= modelled_s * 1.1 + LATE_LINE_S
    else:  # each line prints its own step time; flat adds 5% noise and stragglers
        assert state.step_times_s[-1] == pytest.approx(outcome.step_s * shapes.TIME_SCALE, rel=0.25)
    if name in trainer.HF_FLAGS:  # the Hugging Face Trainer prints no memory
        assert not state.memory_peak_gib
    else:
        assert max(state.memory_peak_gib.values()) == pytest.approx(outcome.printed_gib, rel=0.01)
    assert state.training_done


def test_a_config_that_runs_out_of_memory_prints_a_cuda_oom_and_fails():
    ls = shapes.LANDSCAPES["offload-trap"]
    config = {**ls.default, "micro_batch": 64}
    assert ls.instance(0).outcome(config).kind == "oom"
    out = run_trainer("offload-trap", 0, *flags(ls, config))
    assert out.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in out.stdout


def test_the_batch_rule_refuses_at_start_up_before_any_step():
    out = run_trainer("minefield", 0, "--micro-batch", "8", "--tensor-parallel", "1")
    assert out.returncode == 1
    assert "is not divisible by micro batch size (8)" in out.stdout
    assert "iter=" not in out.stdout


def test_nccl_reports_the_variables_it_read_when_asked():
    out = run_trainer("minefield", 0, env={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV", "NCCL_PROTO": "LL"})
    assert out.stdout.count("NCCL INFO NCCL_PROTO set by environment to LL") == 8


def test_the_seed_changes_the_instance():
    ls = shapes.LANDSCAPES["pairs"]
    assert ls.instance(0).outcome(ls.default).step_s != ls.instance(1).outcome(ls.default).step_s
    assert ls.instance(1).outcome(ls.default) == ls.instance(1).outcome(ls.default)


def record(number: int, values: dict, status: FailureClass, odds: float | None, steps: int = 3) -> TrialRecord:
    result = SimpleNamespace(step_times_s=(1.0,) * steps) if status is FailureClass.OK else None  # what judge reads
    return TrialRecord(
        number=number,
        state=None,
        values=values,
        kind=TrialKind.SEARCH,
        outcome=Outcome.LAUNCHED,
        status=status,
        result=result,
        predicted_fits=odds,
    )


def test_a_study_is_judged_against_the_instance():
    ls = shapes.LANDSCAPES["minefield"]
    inst = ls.instance(0)
    best = max((c for c in ls.configs() if inst.outcome(c).stable), key=inst.throughput)
    refused = {**ls.default, "micro_batch": 8, "tensor_parallel": 1}
    recs = [
        record(0, dict(ls.default), FailureClass.OK, None),
        record(1, refused, FailureClass.CONFIG_ERROR, 0.95),
        record(2, best, FailureClass.OK, 0.9),
    ]
    run = {"exit_code": 0, "stopped_by": "", "json": {"best": {"params": best}}, "wall_s": 1.0}
    got = bench.judge(inst, "tuner", recs, 24, run)
    assert got.trials_to_reach == 3 and not got.censored and got.best_found_frac == pytest.approx(1.0)
    assert got.winner_frac == pytest.approx(1.0) and got.winner_stable
    assert got.failed_gpu_frac == pytest.approx(
        bench.REFUSAL_S
        / (bench.REFUSAL_S + 2 * bench.STARTUP_S + 3 * inst.outcome(best).step_s + 3 * inst.outcome(ls.default).step_s)
    )
    assert [f for _, f in got.odds] == [bench.fits(inst, refused), True]
    never = bench.judge(inst, "random", recs[:2], 24, {**run, "json": None})
    assert never.trials_to_reach == 25 and never.censored and never.winner_frac is None
    assert never.best_found_frac == pytest.approx(inst.throughput(ls.default) / inst.throughput(best))


def test_a_hang_costs_what_a_real_run_waits_before_calling_it():
    """In the first step no progress line has come, so the start-up deadline calls the hang (a
    multiple of a start-up and first step: ``Clocks.startup_deadline_s``); later, the stall deadline,
    a multiple of a step (``Clocks.stall_deadline_s``)."""
    first = shapes.LANDSCAPES["two-node"]
    inst = first.instance(0)
    ll128 = {**first.default, "NCCL_PROTO": "LL128"}
    out = inst.outcome(ll128)
    assert out.fail_step == 1
    clocks = bench.REAL_CLOCKS
    rec = record(1, ll128, FailureClass.HANG, None)
    assert bench.modelled_s(inst, rec) == clocks.startup_timeout_s  # no start-up measured yet
    base = inst.outcome(first.default)
    start_s = bench.STARTUP_S + shapes.FIRST_STEP_SLOWER * base.step_s
    assert bench.start_s(base) == pytest.approx(start_s)
    measured = dataclasses.replace(clocks, phase_max_s={STARTUP_PHASE: start_s})
    assert bench.modelled_s(inst, rec, start_s) == pytest.approx(measured.startup_deadline_s())
    assert bench.modelled_s(inst, rec, start_s) == pytest.approx(clocks.stall_multiplier * start_s)
    later = shapes.LANDSCAPES["pipeline"].instance(0)
    hung = next(c for c in later.landscape.configs() if later.outcome(c).kind == "hang")
    out = later.outcome(hung)
    assert out.fail_step == 2
    waited = bench.modelled_s(later, record(2, hung, FailureClass.HANG, None)) - bench.STARTUP_S - out.step_s
    assert waited == pytest.approx(
        max(bench.REAL_CLOCKS.stall_floor_s, bench.REAL_CLOCKS.stall_multiplier * out.step_s)
    )
    assert waited < bench.REAL_CLOCKS.stall_timeout_s


def test_the_harness_runs_the_cli_and_judges_what_it_stored(tmp_path):
    """One short study of the real ``nccl-tune run`` on one landscape: its trials are read back from
    the SQLite storage and judged; the JSON holds the targets and the study."""
    out = tmp_path / "out.json"
    code = bench.main(
        ["--landscapes", "offload-trap", "--seeds", "1", "--trials", "3", "--samplers", "tuner", "--json", str(out)]
    )
    import json

    got = json.loads(out.read_text())
    (study,) = got["studies"]
    assert study["exit_code"] in (0, 2) and study["launched"] >= 3
    assert study["judged"][0].startswith("0 ok / ok")  # the baseline: the user's own values run
    assert {t["what"] for t in got["targets"]} >= {"tuner median trials to reach", "tuner median failed GPU time"}
    assert code == (0 if all(t["met"] for t in got["targets"]) else 1)


RL = "actor_rollout_ref.rollout."


def test_an_engine_share_too_small_for_one_sequence_is_refused_for_want_of_memory():
    ls = shapes.LANDSCAPES["rl-colocate"]
    config = {**ls.default, RL + "gpu_memory_utilization": 0.3, RL + "tensor_model_parallel_size": 1}
    outcome = ls.instance(0).outcome(config)
    assert outcome.kind == "refused" and not outcome.fits  # a low peak, and still no fit
    assert outcome.peak_gib < 0.95 * shapes.GPU_GIB
    out = run_trainer("rl-colocate", 0, *(f"{k}={v}" for k, v in config.items() if not k.isupper()))
    assert out.returncode == 1
    assert "No available memory for the cache blocks" in out.stdout and "step:" not in out.stdout


def test_the_engine_runs_out_waking_up_next_to_the_actors_states_which_verl_does_not_print():
    ls = shapes.LANDSCAPES["rl-colocate"]
    inst = ls.instance(0)
    high = {**ls.default, RL + "gpu_memory_utilization": 0.8}
    assert inst.outcome(high).kind == "oom"
    offloaded = {**high, "actor_rollout_ref.actor.fsdp_config.optimizer_offload": True}
    assert inst.outcome(offloaded).kind == "ok"
    assert inst.outcome(offloaded).printed_gib < inst.outcome(offloaded).peak_gib  # the engine's pool is not printed
    out = run_trainer("rl-colocate", 0, f"{RL}gpu_memory_utilization=0.8", "trainer.total_training_steps=2")
    assert out.returncode == 1
    assert "in wake_up" in out.stdout and "CUDA out of memory" in out.stdout


def test_a_hydra_job_refuses_a_key_it_does_not_have():
    out = run_trainer("rl-colocate", 0, "actor_rollout_ref.rollout.gpu_memory_utilisation=0.5")
    assert out.returncode == 2 and "key not in the config" in out.stderr


def test_under_a_fake_nvml_the_command_holds_its_device_peak_while_it_runs(tmp_path):
    from nccl_tune.gpu import FAKE_NVML_ENV
    from nccl_tune.gpu_fake import FakeNvml, h100_node, write_state

    state = tmp_path / "nvml.json"
    write_state(state, [{**g, "total_gib": shapes.GPU_GIB, "used_gib": 0.0} for g in h100_node()])
    ls = shapes.LANDSCAPES["rl-colocate"]
    proc = subprocess.Popen(
        [sys.executable, str(BENCH / "landscapes" / "trainer.py"), "rl-colocate", "trainer.total_training_steps=2"],
        env={**os.environ, shapes.SEED_ENV: "0", FAKE_NVML_ENV: str(state)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert "step:1 " in proc.stdout.readline() + proc.stdout.readline()  # the config line, then the first step
    nvml = FakeNvml(state)
    held = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(7)).used / 2**30
    # the device's peak, the engine's pool included, which verl's printed line leaves out
    assert held == pytest.approx(ls.instance(0).outcome(ls.default).peak_gib, abs=0.01)
    assert held > ls.instance(0).outcome(ls.default).printed_gib + 10
    proc.communicate(timeout=60)
    assert nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(7)).used == 0  # released at exit


@pytest.mark.parametrize("module", ["trainer.py", "shapes.py"])
def test_the_users_command_imports_nothing_of_the_tool(module):
    import ast

    tree = ast.parse((BENCH / "landscapes" / module).read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [n for n in names if n.split(".")[0] == "nccl_tune"]  # run by any Python, as a user's script is


def test_zero3_over_two_nodes_prints_the_allocators_peak_and_not_ncclS_buffers():
    ls = shapes.LANDSCAPES["two-node"]
    inst = ls.instance(0)
    config = {**ls.default, "micro_batch": 2}
    more_channels = {**config, "NCCL_MIN_NCHANNELS": "32"}
    a, b = inst.outcome(config), inst.outcome(more_channels)
    assert a.kind == b.kind == "ok"
    assert a.printed_gib < a.peak_gib  # MaxMemAllocated: not the allocator's cache, the context, NCCL's buffers
    assert b.printed_gib == a.printed_gib and b.peak_gib > a.peak_gib
    assert b.step_s < a.step_s  # more channels: faster inter-node collectives at this micro-batch


def test_two_nodes_fail_as_nccl_fails_there():
    ls = shapes.LANDSCAPES["two-node"]
    inst = ls.instance(0)
    assert inst.outcome({**ls.default, "NCCL_PROTO": "LL128"}).kind == "hang"
    queue_pairs = {"NCCL_IB_QPS_PER_CONNECTION": "8", "NCCL_MIN_NCHANNELS": "32"}
    out = run_trainer("two-node", 0, "--max-steps", "4", env=queue_pairs)
    assert out.returncode == 1 and "step=1," not in out.stdout
    verdict = classify_log(out.stdout.splitlines(keepends=True), exit_code=1)
    assert verdict.failure_class is FailureClass.INIT_FAILURE  # PyTorch's Last error names the verbs call
    assert "NCCL_IB_QPS_PER_CONNECTION" in verdict.advice
