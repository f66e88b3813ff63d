"""Which rank's stack is elsewhere: pure cases over stacks as py-spy reports them."""

from __future__ import annotations

import pytest

from nccl_tune.diagnose.stacks import Frame, ProcessStack, StackReport, ThreadStack, odd_rank

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
LOGGER = "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py"
LOADER = "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py"
AGENT = "/venv/lib/python3.11/site-packages/torch/distributed/elastic/agent/server/api.py"


def _proc(rank: int | None, *frames: Frame, pid: int | None = None) -> ProcessStack:
    return ProcessStack(
        pid or 1000 + (rank or 0),
        rank,
        "python train.py",
        (ThreadStack("MainThread", False, tuple(frames), main=True),),
    )


def in_collective(rank: int, op: str = "all_reduce", line: int = 40) -> ProcessStack:
    return _proc(
        rank,
        Frame(op, C10D, 2801),
        Frame("wrapper", LOGGER, 83),
        Frame("train_step", "/work/train.py", line, f"dist.{op}(x)"),
        Frame("<module>", "/work/train.py", 90),
    )


def sleeping(rank: int) -> ProcessStack:
    return _proc(
        rank, Frame("wait_for_peer", "/work/train.py", 22, "time.sleep(30)"), Frame("<module>", "/work/train.py", 90)
    )


def loading(rank: int) -> ProcessStack:
    return _proc(
        rank, Frame("_next_data", LOADER, 1327), Frame("__next__", LOADER, 631), Frame("<module>", "/work/train.py", 88)
    )


@pytest.mark.parametrize(
    ("odd", "rank", "where"),
    [
        (sleeping(2), 2, "in time.sleep (train.py:22)"),
        (loading(1), 1, "loading data (train.py:88)"),
        (in_collective(3, "broadcast"), 3, "in a different collective, broadcast (train.py:40)"),
        (in_collective(0, "all_reduce", line=37), 0, "at another all_reduce call (train.py:37)"),
    ],
)
def test_the_rank_elsewhere_is_named(odd: ProcessStack, rank: int, where: str) -> None:
    others = [in_collective(r) for r in range(4) if r != odd.rank]
    finding = odd_rank(StackReport(tuple(others + [odd])))
    assert finding is not None and finding.rank == rank
    assert finding.where.startswith(where)
    assert "wait in all_reduce (train.py:40)" in finding.others
    assert finding.stack[0].startswith(odd.main_thread.frames[0].function)


def test_every_rank_in_the_same_collective_names_none() -> None:
    assert odd_rank(StackReport(tuple(in_collective(r) for r in range(4)))) is None


def test_two_ranks_elsewhere_the_one_outside_any_collective_is_named() -> None:
    procs = [in_collective(0), in_collective(1), in_collective(2, "broadcast"), sleeping(3)]
    finding = odd_rank(StackReport(tuple(procs)))
    assert finding is not None and finding.rank == 3


def test_the_launcher_agent_is_not_a_rank_when_ranks_are_unknown() -> None:
    agent = ProcessStack(
        7,
        None,
        "torchrun",
        (
            ThreadStack(
                "MainThread", False, (Frame("_invoke_run", AGENT, 894, "time.sleep(monitor_interval)"),), main=True
            ),
        ),
    )
    ranks = [ProcessStack(p.pid, None, p.command, p.threads) for p in (in_collective(0), in_collective(1), sleeping(2))]
    finding = odd_rank(StackReport(tuple(ranks) + (agent,)))
    assert finding is not None and finding.pid == 1002 and finding.rank is None
    assert finding.headline.startswith("pid 1002 is in time.sleep")


def test_unreadable_or_too_few_stacks_name_none() -> None:
    assert odd_rank(None) is None
    assert odd_rank(StackReport((in_collective(0),))) is None
    assert odd_rank(StackReport((ProcessStack(5, 0, "python", error="Permission Denied"), sleeping(1)))) is None


def test_the_report_round_trips_through_json() -> None:
    report = StackReport((in_collective(0), sleeping(1)), note="")
    assert StackReport.from_json(report.to_json()) == report


def test_two_ranks_one_asleep_one_waiting() -> None:
    finding = odd_rank(StackReport((in_collective(0), sleeping(1))))
    assert finding is not None and finding.rank == 1 and finding.others == "rank 0 waits in all_reduce (train.py:40)"
