"""The first error wins over the loudest: an error on one rank before the others time out is the
root cause, even when no rule names it (the verdict says so); the others' time-outs are evidence of
its consequence. Evidence is ordered by time, also across the logs of several ranks."""

from __future__ import annotations

from pathlib import Path

from nccl_tune.diagnose.verdict import LogFacts, TrialFacts, classify_log, decide
from nccl_tune.failure import FailureClass as F

UNNAMED = '[rank{r}]: RuntimeError: handles_.at(i) INTERNAL ASSERT FAILED at "/pytorch/c10/cuda/CUDACachingAllocator.cpp":412\n'


def step(n: int, r: int = 0) -> str:
    return f"[rank{r}]:[titan] 2026-02-13 21:02:44,101 - root - INFO - step: {n:3d}  loss:  3.1000  memory: 61.47GiB(64.71%)  tps: 6,112\n"


def watchdog(r: int, seq: int = 4411, op: str = "ALLREDUCE", stamp: str = "0213 21:32:44") -> str:
    return (
        f"[rank{r}]:[E{stamp}.000000000 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Watchdog caught "
        f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=8, NumelOut=8, Timeout(ms)=1800000) "
        "ran for 1800041 milliseconds before timing out.\n"
    )


def test_an_unnamed_error_on_one_rank_before_the_others_time_out_is_the_crash() -> None:
    lines = [step(1), step(2), UNNAMED.format(r=2), *(watchdog(r) for r in (0, 1, 3))]
    v = classify_log(lines, source="train.log")
    assert v.failure_class is F.CRASH and v.rank == 2
    assert v.cause.rule == "first_error" and v.cause.details["unnamed"] is True
    assert v.evidence[0].line_no == 3 and "INTERNAL ASSERT FAILED" in v.evidence[0].text
    assert sum("Watchdog caught" in e.text for e in v.evidence) >= 2  # the consequence, shown
    assert "no rule names" in v.advice and "Rank 2 failed first" in v.advice


def test_a_named_crash_first_keeps_its_own_advice() -> None:
    lines = [
        step(1),
        "[rank1]: *** SIGSEGV received at time=1772475493 on cpu 3 ***\n",
        *(watchdog(r) for r in (0, 2, 3)),
    ]
    v = classify_log(lines)
    assert v.failure_class is F.CRASH and v.rank == 1 and v.cause.subtype == "segfault"
    assert "segmentation fault" in v.advice


def test_an_error_on_a_rank_that_timed_out_itself_is_not_what_the_others_waited_for() -> None:
    lines = [step(1), UNNAMED.format(r=1), *(watchdog(r) for r in (0, 1, 2, 3))]
    assert classify_log(lines).failure_class is F.COLLECTIVE_TIMEOUT


def test_an_error_the_run_stepped_past_is_not_the_cause_of_a_later_time_out() -> None:
    lines = [step(1), UNNAMED.format(r=2), step(2), step(3), *(watchdog(r) for r in (0, 1, 3))]
    assert classify_log(lines).failure_class is F.COLLECTIVE_TIMEOUT


def test_a_lost_peer_before_the_time_outs_is_a_consequence() -> None:
    lost = "[rank2]: torch.distributed.DistBackendError: [2] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer\n"
    v = classify_log([step(1), lost, *(watchdog(r) for r in (0, 1, 3))])
    assert v.failure_class is not F.CRASH


def test_logs_of_several_ranks_are_ordered_by_time(tmp_path: Path) -> None:
    """Rank 1's log holds the error at 21:03; rank 0's, read first, its time-out at 21:33."""
    r0, r1 = tmp_path / "rank0.log", tmp_path / "rank1.log"
    r0.write_text(step(1, 0).replace("[rank0]:", "") + watchdog(0, stamp="0213 21:33:00").replace("[rank0]:", ""))
    r1.write_text(
        step(1, 1).replace("[rank1]:", "") + "[2026-02-13 21:03:00,002] ERROR rank 1: KeyError: 'attention_mask'\n"
    )
    v = decide(TrialFacts(logs=(LogFacts("rank0.log", r0), LogFacts("rank1.log", r1))))
    assert v.failure_class is F.CRASH and v.evidence[0].source == "rank1.log"
    assert any(e.source == "rank0.log" and "Watchdog caught" in e.text for e in v.evidence)


def test_a_connect_failure_before_the_first_step_is_an_init_failure_even_without_an_exception() -> None:
    lines = [
        "[W213 21:02:50.000118000 socket.cpp:755] [c10d] The client socket has failed to connect to [10.31.0.9]:41023 (errno: 110 - Connection timed out).\n",
        watchdog(0, seq=2, op="BROADCAST"),
    ]
    v = classify_log(lines)
    assert v.failure_class is F.INIT_FAILURE and "failed to connect" in v.evidence[0].text


def test_an_error_long_before_the_collective_began_is_not_what_the_others_waited_for() -> None:
    early = "[2026-02-13 19:00:00,001] [rank2] ERROR loading optional kernels: ImportError: flash_attn_3 not found\n"
    late = "[2026-02-13 21:02:00,001] [rank2] ERROR rollout worker: KeyError: 'attention_mask'\n"
    for line, cls in ((early, F.COLLECTIVE_TIMEOUT), (late, F.CRASH)):
        v = classify_log([step(1), line, *(watchdog(r, stamp="0213 21:32:44") for r in (0, 1, 3))])
        assert v.failure_class is cls, line


def test_connect_retries_a_group_got_past_are_no_failure() -> None:
    retry = "[W213 21:02:50.000118000 socket.cpp:755] [c10d] The client socket has failed to connect to [10.31.0.9]:41023 (errno: 111 - Connection refused).\n"
    assert classify_log([retry, watchdog(0, seq=2)]).failure_class is F.INIT_FAILURE
    assert classify_log([retry, watchdog(0, seq=30112)]).failure_class is F.COLLECTIVE_TIMEOUT
