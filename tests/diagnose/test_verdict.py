"""``verdict.decide``: one pure function of a run's facts, whatever launcher or command asks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from nccl_tune.diagnose.stacks import StackReport
from nccl_tune.diagnose.verdict import LogFacts, TrialFacts, decide
from nccl_tune.failure import FailureClass as F
from nccl_tune.failure import Verdict
from nccl_tune.trial import ProgressRules, StopReason

from .helpers import cuda_oom, finished, skyrl, started, watchdog

HEALTHY = [skyrl("init done"), started("step"), finished("step", 12.0), started("step"), finished("step", 11.0)]


def facts(*lines: str, **kw) -> TrialFacts:
    return TrialFacts(logs=(LogFacts("output.log", lines=tuple(lines)),), **kw)


@pytest.mark.parametrize(
    ("reason", "cls", "rule"),
    [
        (StopReason.MEASURED, F.OK, "measured"),
        (StopReason.BUDGET, F.BUDGET, "budget"),
        (StopReason.EARLY_STOP, F.BUDGET, "early_stop"),
        (StopReason.INTERRUPTED, F.INTERRUPTED, "interrupted"),
        (StopReason.LAUNCH_ERROR, F.CONFIG_ERROR, "launch_error"),
    ],
)
def test_stop_reasons_the_launcher_decided(reason: StopReason, cls: F, rule: str) -> None:
    v = decide(facts(*HEALTHY, *cuda_oom(1), stop_reason=reason, stop_detail="detail line"))
    assert (v.failure_class, v.cause.rule) == (cls, rule)


def test_a_stall_with_a_root_cause_in_the_log_is_that_cause() -> None:
    v = decide(facts(*HEALTHY, started("step"), *cuda_oom(3), stop_reason=StopReason.STALL, stop_detail="no progress"))
    assert (v.failure_class, v.rank, v.cause.rule) == (F.OOM, 3, "cuda_oom")


def test_a_stall_without_one_is_a_hang_with_the_detail_and_last_lines() -> None:
    v = decide(
        facts(
            *HEALTHY,
            started("step"),
            stop_reason=StopReason.STALL,
            stop_detail="no progress for 9 s",
            open_phase="step",
        )
    )
    assert v.failure_class is F.HANG and v.phase == "step"
    assert v.evidence[0].text == "no progress for 9 s" and v.evidence[-1].source == "output.log"
    assert "in 'step'" in v.advice


@pytest.mark.parametrize("reason", [StopReason.STALL, StopReason.STARTUP])
def test_a_stall_after_a_process_died_is_the_crash_of_its_rank(reason: StopReason) -> None:
    died = ("[rank3]:Fatal Python error: Segmentation fault", "[rank3]:Thread 0x00007f3a (most recent call first):")
    v = decide(facts(*HEALTHY, started("step"), *died, stop_reason=reason, stop_detail="no progress for 9 s"))
    assert (v.failure_class, v.rank, v.cause.rule) == (F.CRASH, 3, "segfault")
    assert v.evidence[0].text == died[0] and v.evidence[-1].text == "then no progress for 9 s"
    assert "segmentation fault" in v.advice


def test_a_stall_after_a_logged_exception_stays_a_hang_and_shows_it_once() -> None:
    # a process may log an exception and go on: the silence after it is the failure
    logged = (
        "[rank1]:Traceback (most recent call last):",
        '[rank1]:  File "x.py", line 3, in f',
        "[rank1]:ValueError: x",
    )
    v = decide(facts(*HEALTHY, started("step"), *logged, stop_reason=StopReason.STALL, stop_detail="no progress"))
    assert v.failure_class is F.HANG and v.evidence[0].text == "no progress"
    texts = [e.text for e in v.evidence]
    assert texts.count("[rank1]:ValueError: x") == 1, texts


def test_exit_zero_before_the_measured_steps() -> None:
    early = decide(facts(*HEALTHY, exit_code=0, steps_done=2, total_steps=3, stop_reason=StopReason.EXITED))
    assert (early.failure_class, early.cause.rule) == (F.CRASH, "exited_early")
    done = decide(
        facts(
            *HEALTHY,
            skyrl("Training done!"),
            exit_code=0,
            steps_done=2,
            total_steps=3,
            training_done=True,
            stop_reason=StopReason.EXITED,
        )
    )
    assert (done.failure_class, done.cause.rule) == (F.CONFIG_ERROR, "too_few_steps")
    assert decide(facts(*HEALTHY, exit_code=0, steps_done=3, total_steps=3, stop_reason=StopReason.EXITED)).ok


def test_a_command_of_a_fixed_length_that_ran_enough_steps_is_measured() -> None:
    # asked for 16 steps (the tuner's, for the noise), the command ran its own 6: 4 were enough
    ended = dict(exit_code=0, total_steps=16, enough_steps=4, training_done=True, stop_reason=StopReason.EXITED)
    v = decide(facts(*HEALTHY, skyrl("Training done!"), steps_done=6, **ended))
    assert v.ok and "ended by itself after 6 steps, of the 16 asked" in v.evidence[0].text
    short = decide(facts(*HEALTHY, skyrl("Training done!"), steps_done=3, **ended))
    assert (short.failure_class, short.cause.rule) == (F.CONFIG_ERROR, "too_few_steps")


def test_a_program_that_cannot_run_is_a_config_error() -> None:
    v = decide(facts("run.sh: line 3: uvx: command not found", exit_code=127, stop_reason=StopReason.EXITED))
    assert v.failure_class is F.CONFIG_ERROR


def test_notes_are_added_to_any_verdict() -> None:
    v = decide(facts(*HEALTHY, stop_reason=StopReason.MEASURED, notes=("1 process(es) survived teardown: pid 7",)))
    assert v.ok and v.evidence[-1].text.startswith("1 process(es) survived")


def test_the_earliest_cause_across_several_logs_by_their_time_stamps() -> None:
    """The driver's log is read first, but the worker's infra log shows the first failure."""
    driver = [
        "2026-03-02 10:04:30.100 | ERROR    | trainer:train:88 - RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    infra = [
        "2026-03-02 10:04:05.000 | INFO     | worker:step:12 - step 4",
        "node-1:7001:7090 [3] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer node-2<41877>",
    ]
    logs = (LogFacts("output.log", lines=tuple(driver)), LogFacts("infra-260302_100000.log", lines=tuple(infra)))
    v = decide(TrialFacts(logs=logs))
    assert v.failure_class is F.NCCL_ERROR and v.evidence[0].source == "infra-260302_100000.log"
    unstamped = (
        LogFacts("output.log", lines=("RuntimeError: CUDA error: an illegal memory access was encountered",)),
        LogFacts("infra.log", lines=(infra[1],)),
    )
    assert decide(TrialFacts(logs=unstamped)).failure_class is F.CUDA_ERROR  # no stamps: the order of reading


def test_phases_and_steps_come_from_the_spaces_progress_rules() -> None:
    """A Megatron-style log: a connect time-out after the first iteration is not an init failure."""
    rules = ProgressRules(
        step_end=r"iteration\s+\d+/\s*\d+ \|.*elapsed time per iteration \(ms\): (?P<seconds>[\d.]+)",
        phase_start=None,
        phase_end=None,
        memory=None,
        training_done=None,
    )
    lines = (
        " iteration        1/     100 | elapsed time per iteration (ms): 1200.0 |",
        "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect to (10.0.0.2, 29500).",
    )
    with_rules = decide(TrialFacts(logs=(LogFacts("output.log", lines=lines),), progress=rules))
    assert with_rules.failure_class is F.COLLECTIVE_TIMEOUT
    other_rules = replace(rules, step_end=(r"Finished: 'step', time cost: (?P<seconds>[\d.]+)s",))
    never_stepped = decide(TrialFacts(logs=(LogFacts("output.log", lines=lines),), progress=other_rules))
    assert never_stepped.failure_class is F.INIT_FAILURE  # these rules never saw a step
    # a log of unknown origin is read with every preset's step lines: Megatron's iteration line is a step
    unknown = decide(TrialFacts(logs=(LogFacts("output.log", lines=lines),)))
    assert unknown.failure_class is F.COLLECTIVE_TIMEOUT


def test_facts_round_trip_through_json(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text("".join(HEALTHY) + "".join(cuda_oom(2)))
    f = TrialFacts(
        logs=(LogFacts("output.log", log),),
        stop_reason=StopReason.EXITED,
        stop_detail="ended",
        exit_code=1,
        steps_done=2,
        total_steps=3,
        host_mem_peak_frac=0.5,
        progress=ProgressRules(),
        rules_hint="step_end=...",
        notes=("n",),
        stacks=StackReport(note="x"),
    )
    back = TrialFacts.from_json(f.to_json(), tmp_path, stacks=f.stacks)
    assert back == f and decide(back) == decide(f)
    assert decide(back).failure_class is F.OOM


def test_verdict_json_keeps_evidence_and_cause_structured() -> None:
    v = decide(facts(*HEALTHY, watchdog(1, 77), watchdog(2, 77)))
    data = v.to_json()
    assert data["evidence"][0] == {"file": "output.log", "line": 6, "text": v.evidence[0].text}
    assert data["cause"]["rule"] == "nccl_watchdog_timeout" and data["cause"]["details"]["seq"] == 77
    assert Verdict.from_json(data) == v
    legacy = dict(data, evidence=[str(e) for e in v.evidence], cause=None)  # result.json before structured evidence
    assert Verdict.from_json(legacy).evidence == v.evidence


def test_what_teardown_makes_a_stalled_run_print_does_not_decide() -> None:
    """Killing a stalled job makes its peers print transport errors; the stall is judged on what
    came before the launcher stopped it."""
    before = (*HEALTHY, started("step"))
    after = (
        "node-1:7001:7090 [3] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer node-2<4187>",
        "Traceback (most recent call last):",
        "KeyboardInterrupt",
    )
    stall = dict(stop_reason=StopReason.STALL, stop_detail="no progress for 9 s", open_phase="step")
    cut = decide(TrialFacts(logs=(LogFacts("output.log", lines=before + after, upto=len(before)),), **stall))
    assert cut.failure_class is F.HANG and all(
        e.line_no <= len(before) for e in cut.evidence if e.source == "output.log"
    )
    whole = decide(TrialFacts(logs=(LogFacts("output.log", lines=before + after),), **stall))
    assert whole.failure_class is F.NCCL_ERROR
    saved = TrialFacts(logs=(LogFacts("output.log", Path("/x/output.log"), upto=7),)).to_json()
    assert saved["logs"] == [{"name": "output.log", "upto": 7}]
    assert TrialFacts.from_json(saved, Path("/x")).logs[0].upto == 7
