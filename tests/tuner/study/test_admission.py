"""Values that break the space's rules are not launched; a space expression that fails on a
sampled value (a division by zero) is a broken rule for those values, not a stuck study.
Through the CLI, with the twin; configs NCCL runs alike (a setting past its limit) are one run."""

from __future__ import annotations

import io
import json

import optuna
import pytest
from optuna.trial import TrialState
from rich.console import Console

from nccl_tune.search_spaces.loader import load_space
from nccl_tune.tuner.records.held import HeldParameters
from nccl_tune.tuner.study.admission import MAX_REFUSED_IN_A_ROW, Admission
from nccl_tune.tuner.trials.display import Display
from tests.tuner.conftest import error_lines, run_cli, run_twin, study_trials, twin_space_text
from tests.tuner.search.test_forced_bound import FORWARD, FORWARD_8, OFFLOAD, _oom_line, forced_oom

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

RULE = (
    "constraints:\n  - expr: 100 // (1 if trainer.micro_train_batch_size_per_gpu == 1 else 0) != 12345\n"
    "    message: a rule that divides by zero when micro_train_batch_size_per_gpu is above 1\n"
)


def test_an_expression_failing_on_a_sampled_value_rejects_it_and_the_study_goes_on(workdir):
    space = workdir / "space.yaml"
    space.write_text(twin_space_text().replace("constraints:\n", RULE, 1))
    # the local sampler's first moves raise the one free micro-batch size above 1
    args = [
        "--space",
        str(space),
        "--trials",
        "2",
        "--confirm",
        "0",
        "--study",
        "e",
        "--json",
        "--seed",
        "1",
        "--set",
        "trainer.micro_forward_batch_size_per_gpu=8",
        "--set",
        "trainer.max_prompt_length=6000",
        "--set",
        "trainer.micro_train_batch_size_per_gpu=2",
    ]
    # pinned to the value the expression fails on: refused before anything starts, in one line
    pinned = run_twin(args, cwd=workdir)
    assert pinned.returncode == 1 and "integer division or modulo by zero" in error_lines(pinned)[0]
    assert not list(workdir.rglob("trial-*"))

    proc = run_twin(args[:-2] + ["--study", "e2"], cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert "an expression of the space fails on these values" in proc.stderr
    rows = json.loads(proc.stdout)["trials"]
    rejected = [r for r in rows if r["params"].get("trainer.micro_train_batch_size_per_gpu") != 1]
    assert rejected and all(r["outcome"] == "rejected" for r in rejected)
    assert "division or modulo by zero" in rejected[0]["violations"][0]
    assert sum(r["outcome"] == "launched" for r in rows) == 2
    assert not [t for t in study_trials(workdir, "e2") if t.state is TrialState.RUNNING]
    again = run_twin(args[:-2] + ["--study", "e2", "--trials", "1"], cwd=workdir)
    assert again.returncode == 0 and "resuming study e2" in again.stderr


SOCKETS_SPACE = """
name: tiny-sockets
description: The tiny trainer with NCCL's socket variables, one pair of them past NCCL's limit.
parameters:
  - {name: trainer.micro, kind: pow2, low: 1, high: 2, default: 1, memory: increasing}
  - {name: NCCL_SOCKET_NTHREADS, kind: categorical, choices: [8, 16], default: 16, memory: none}
  - {name: NCCL_NSOCKS_PERTHREAD, kind: categorical, choices: [4, 8], default: 4, memory: none}
trial:
  overrides:
    trainer.ckpt_path: "{trial_dir}/ckpt"
stop: {warmup_steps: 1, measured_steps: 2}
clocks: {startup_timeout_s: 30, stall_timeout_s: 10, stall_floor_s: 3, trial_timeout_s: 60, grace_s: 2}
throughput: {samples_per_step: 8 * trainer.micro}
stability: {min_headroom_frac: 0.05}
"""


def test_a_config_nccl_clamps_to_a_measured_one_is_not_launched_again_and_the_study_ends_when_none_is_left(
    workdir, tiny_command
):
    """16 threads x 8 sockets is past NCCL's 64 sockets: NCCL runs it as 16 x 4, the baseline's run. Of
    the four configs three are runs of their own: after them the study ends at once, not after the
    sampler has proposed measured configs fifty times in a row."""
    space = workdir / "sockets.yaml"
    space.write_text(SOCKETS_SPACE)
    proc = run_cli(
        [
            "run",
            "--no-force-worst-case",
            "--space",
            str(space),
            "--study",
            "s",
            "--trials",
            "10",
            "--sampler",
            "random",
            "--seed",
            "1",
            "--confirm",
            "0",
            "--set",
            "trainer.micro=1",
            "--json",
            "--",
            *tiny_command,
        ],
        cwd=workdir,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["trials"]
    launched = [r["params"] for r in rows if r["outcome"] == "launched"]
    clamped = [
        r for r in rows if r["params"]["NCCL_SOCKET_NTHREADS"] == 16 and r["params"]["NCCL_NSOCKS_PERTHREAD"] == 8
    ]
    assert len(launched) == 3 and {(p["NCCL_SOCKET_NTHREADS"], p["NCCL_NSOCKS_PERTHREAD"]) for p in launched} == {
        (16, 4),
        (8, 4),
        (8, 8),
    }
    assert clamped and all(r["outcome"] == "duplicate" for r in clamped)
    assert (
        "NCCL runs NCCL_NSOCKS_PERTHREAD=8 as 4 (NCCL_SOCKET_NTHREADS=16 x 8 sockets is more than 64): "
        "the run of trial 0"
    ) in proc.stderr
    assert "every config of the space has been run or is ruled out: the search is complete" in proc.stderr
    assert len(study_trials(workdir, "s")) < 20, "the study asked on long after its last config ran"


def test_a_sampler_whose_every_proposal_is_refused_converges_rather_than_asking_forever():
    """The shipped SkyRL space is too large to list; once a forced run of the forward micro-batch 8
    asked more than the whole GPU, every proposal holding it (offloaded or not) is refused, and a
    sampler that keeps proposing such configs ends the search after ``MAX_REFUSED_IN_A_ROW``."""
    space = load_space("skyrl-text2sql")
    history = [forced_oom(7, 3, FORWARD_8, "fwd_logprobs_values_reward", _oom_line(116.0, 77.3))]
    console = Console(file=io.StringIO(), width=200)
    admission = Admission(space, Display(console, space), predict_oom=True)
    study = optuna.create_study(direction="maximize")
    for n in range(MAX_REFUSED_IN_A_ROW):
        assert not admission.converged, f"converged after {n} refusals"
        assert not admission.admit(study, study.ask(), {**FORWARD_8, OFFLOAD: True}, "search", [], history)
    assert admission.converged
    assert f"the sampler's last {MAX_REFUSED_IN_A_ROW} proposals were all refused" in console.file.getvalue()


def test_a_space_too_large_to_list_is_complete_when_every_memory_value_left_failed_forced():
    """With the micro-batches and prompt length held, the free parameters that move memory are the two
    offloads (4 combinations, with NCCL's variables thousands of configs): once the forward micro-batch 8
    forced asked more than the whole GPU, no offload and no NCCL value makes a config stable, and the
    first refusal ends the search. Held at nothing, the forward micro-batch 4 offloaded is left."""
    space = load_space("skyrl-text2sql")
    history = [forced_oom(7, 3, FORWARD_8, "fwd_logprobs_values_reward", _oom_line(116.0, 77.3))]
    held = {k: FORWARD_8[k] for k in ("trainer.micro_train_batch_size_per_gpu", FORWARD, "trainer.max_prompt_length")}
    for pins, ends in ((held, True), ({}, False)):
        console = Console(file=io.StringIO(), width=200)
        admission = Admission(space, Display(console, space), True, HeldParameters.of_values(space, pins))
        study = optuna.create_study(direction="maximize")
        assert not admission.admit(
            study, study.ask(), {**FORWARD_8, OFFLOAD: True, "NCCL_ALGO": "Tree"}, "search", [], history
        )
        assert admission.converged is ends, pins
        assert ("every config of the space has been run or is ruled out" in console.file.getvalue()) is ends


def test_a_proposal_holding_one_nccl_change_whose_sweep_check_failed_is_refused_and_counted_apart():
    """The planner does not propose an NCCL value whose check failed in the sweep next to the
    baseline's values, nor does TPE's fallback while another draw is left; a proposal that holds one
    anyway (every fallback draw refused) is refused here, told as such, and the summary counts it
    apart from the rules."""
    from nccl_tune.reporting.terminal import _not_launched
    from nccl_tune.tuner.records.nccl_sweep import A_SWEEP, BASELINE_KEY, SweepEntry
    from nccl_tune.tuner.records.study_records import Outcome, records

    space = load_space("skyrl-text2sql")
    base = space.baseline({})
    nccl, TREE = {n: base[n] for n in ("NCCL_ALGO", "NCCL_PROTO")}, "allreduce:Tree"
    study = optuna.create_study(direction="maximize")
    study.set_user_attr(
        A_SWEEP,
        {
            BASELINE_KEY: SweepEntry("ok", (0.5, 0.5, 0.5), 30.0, values=nccl).to_json(),
            "NCCL_ALGO=allreduce:Tree": SweepEntry("hang", (), 60.0, values={**nccl, "NCCL_ALGO": TREE}).to_json(),
        },
    )
    console = Console(file=io.StringIO(), width=200)
    admission = Admission(space, Display(console, space), predict_oom=True)
    assert not admission.admit(study, study.ask(), {**base, "NCCL_ALGO": TREE}, "search", [], [])
    assert admission.admit(study, study.ask(), {**base, "NCCL_ALGO": "Ring"}, "search", [], [])
    (told,) = [r for r in records(study) if r.outcome is Outcome.REJECTED]
    assert told.sweep_refused and f"NCCL_ALGO={TREE} failed its check in the NCCL sweep (hang)" in told.violations[0]
    _not_launched(console, records(study))
    assert "not launched: 1 with NCCL values that failed the NCCL sweep" in console.file.getvalue()
