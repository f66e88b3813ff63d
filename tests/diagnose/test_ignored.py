"""Python's "Exception ignored" blocks (``sys.unraisablehook``: a finalizer's or ``__del__``'s
exception, printed while the program goes on) are neither a crash nor a log ending in errors; a real
failure around them is still found, and a device or NCCL cause inside one still counts. These logs
have no exit status and no end line: with no failure found, they are ``no_end``, never ``ok``."""

from __future__ import annotations

import pytest

from nccl_tune.diagnose.ignored import ENDED, IN, OTHER, IgnoredBlock
from nccl_tune.diagnose.reader import TAIL_LINES
from nccl_tune.diagnose.scan import BLOCK_BYTES
from nccl_tune.diagnose.verdict import classify_log
from nccl_tune.failure import FailureClass as F

from .helpers import cuda_oom, finished, started, watchdog


def epoch(n: int, prefix: str = "") -> str:
    return f"{prefix}Epoch {n}/40: loss=0.{n:04d} lr=2e-05 samples/s=311.4\n"


def ignored_block(
    prefix: str = "",
    exception: str = "AssertionError: can only join a child process",
    frames: int = 3,
    bound: bool = False,
) -> list[str]:
    """The block the interpreter prints for an exception raised in a DataLoader iterator's ``__del__``."""
    what = (
        "<bound method _MultiProcessingDataLoaderIter.__del__ of <torch.utils.data.dataloader."
        "_MultiProcessingDataLoaderIter object at 0x7fa2c1d04e80>>"
        if bound
        else "<function _MultiProcessingDataLoaderIter.__del__ at 0x7fa2c1d04e80>"
    )
    lines = [f"{prefix}Exception ignored in: {what}\n", f"{prefix}Traceback (most recent call last):\n"]
    for i in range(frames):
        lines += [
            f'{prefix}  File "/opt/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", '
            f"line {1500 + 17 * i}, in _shutdown_workers\n",
            f"{prefix}    w.join(timeout=_utils.MP_STATUS_CHECK_INTERVAL)\n",
        ]
    return lines + ([f"{prefix}{exception}\n"] if exception else [])


def training(n: int = 3, prefix: str = "") -> list[str]:
    return [epoch(i, prefix) for i in range(1, n + 1)]


# --- the block itself --------------------------------------------------------------------------------


def test_the_block_follows_its_own_prefix_and_ends_after_its_exception_line() -> None:
    block = IgnoredBlock("[rank1]: ")
    said = [
        block.feed(t)
        for t in (
            "[rank1]: Traceback (most recent call last):",
            '[rank1]:   File "/x/dataloader.py", line 12, in __del__',
            "[rank0]: ValueError: a real failure on another rank",
            "[rank1]:     self._shutdown_workers()",
            "[rank1]: AssertionError: can only join a child process",
            "[rank1]: ",
            "[rank1]: During handling of the above exception, another exception occurred:",
            "[rank1]: Traceback (most recent call last):",
            '[rank1]:   File "/x/process.py", line 3, in join',
            "[rank1]: RuntimeError: DataLoader worker (pid 4411) exited unexpectedly",
            "[rank1]: Epoch 2/40: loss=0.1",
        )
    ]
    assert said == [IN, IN, OTHER, IN, IN, IN, IN, IN, IN, IN, ENDED]


def test_a_header_right_after_a_header_ends_the_first_block() -> None:
    block = IgnoredBlock("")
    assert block.feed("Exception ignored in: <function _ConnectionBase.__del__ at 0x7f11>") == ENDED


def test_a_block_cut_short_ends_at_a_line_no_traceback_holds() -> None:
    for line in ("ERROR launcher: job step aborted", "Traceback (most recent call last):"):
        block = IgnoredBlock("")
        assert [
            block.feed(t) for t in ("Traceback (most recent call last):", '  File "/x/a.py", line 3, in f', line)
        ] == [IN, IN, ENDED]


def test_a_block_whose_process_prints_nothing_more_is_given_up() -> None:
    """A prefix that changes from line to line (a time stamp) finds no line of its own: the block is
    given up after a few lines instead of being followed through the rest of the log."""
    block = IgnoredBlock("2026-03-02T10:11:12.000001Z ")
    for n in range(2, 200):
        said = block.feed(f"2026-03-02T10:11:12.{n:06d}Z Traceback (most recent call last):")
        if block.exhausted:
            break
    assert said == OTHER and n < 100


# --- the verdict -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bound", [False, True])
def test_an_ignored_exception_the_training_went_on_after_is_ok(bound: bool) -> None:
    lines = training() + ignored_block(bound=bound) + training(2)
    assert classify_log(lines).failure_class is F.NO_END


@pytest.mark.parametrize(
    "exception",
    [
        "AssertionError: can only join a child process",
        "RuntimeError: DataLoader worker (pid 30117) is killed by signal: Killed. ",
        "",  # the log stops inside the block
    ],
)
def test_a_log_that_ends_in_an_ignored_exception_is_ok(exception: str) -> None:
    assert classify_log(training() + ignored_block(exception=exception)).failure_class is F.NO_END


def test_an_ignored_exception_without_a_traceback_is_ok() -> None:
    lines = training() + [
        "Exception ignored in atexit callback: <function _exit_function at 0x7f3a>\n",
        "BrokenPipeError: [Errno 32] Broken pipe\n",
    ]
    assert classify_log(lines).failure_class is F.NO_END


def test_chained_ignored_exceptions_are_one_block() -> None:
    second = ignored_block(exception="RuntimeError: DataLoader worker (pid(s) 30117) exited unexpectedly")[1:]
    lines = (
        training()
        + ignored_block()
        + ["\n", "During handling of the above exception, another exception occurred:\n", "\n"]
        + second
    )
    assert classify_log(lines).failure_class is F.NO_END


def test_ray_and_torchrun_prefixes_are_followed() -> None:
    lines = training(prefix="(TrainWorker pid=8812) ") + ignored_block("(TrainWorker pid=8812) ")
    assert classify_log(lines).failure_class is F.NO_END
    lines = training(prefix="[rank3]: ") + ignored_block("[rank3]: ", frames=12)
    assert classify_log(lines).failure_class is F.NO_END


def test_a_real_traceback_after_an_ignored_one_is_the_crash() -> None:
    real = [
        "Traceback (most recent call last):\n",
        '  File "/work/train.py", line 88, in <module>\n',
        "    main()\n",
        "KeyError: 'input_ids'\n",
    ]
    v = classify_log(training() + ignored_block() + training(1) + real)
    assert v.failure_class is F.CRASH
    assert "KeyError" in v.evidence[0].text
    assert not any("can only join" in e.text for e in v.evidence)


def test_a_real_failure_after_a_block_cut_short_is_found() -> None:
    real = [
        "Traceback (most recent call last):\n",
        '  File "/work/train.py", line 88, in <module>\n',
        "KeyError: 'input_ids'\n",
    ]
    for after in (real, ["ERROR launcher: job step aborted\n"]):
        v = classify_log(training() + ignored_block(exception="") + after)
        assert v.failure_class is F.CRASH and after[-1].strip() in [e.text for e in v.evidence]


def test_another_rank_failing_inside_the_block_is_the_crash() -> None:
    block = ignored_block("[rank1]: ")
    lines = training() + block[:3] + ["[rank0]: ValueError: labels and logits differ in length\n"] + block[3:]
    v = classify_log(lines)
    assert v.failure_class is F.CRASH and v.rank == 0
    assert "labels and logits" in v.evidence[0].text


def test_many_ignored_blocks_leave_room_for_the_real_exception() -> None:
    lines = []
    for _ in range(30):
        lines += training(1) + ignored_block()
    v = classify_log(lines + ["PermissionError: [Errno 13] Permission denied: '/ckpt/step_30'\n"])
    assert v.failure_class is F.CRASH and "PermissionError" in v.evidence[0].text


def test_an_error_line_before_a_long_ignored_block_at_the_end_is_not_ok() -> None:
    lines = training() + ["FATAL: checkpoint shard 3 could not be written\n"] + ignored_block(frames=TAIL_LINES)
    v = classify_log(lines, exit_code=0)
    assert v.failure_class is F.CRASH and "checkpoint shard" in v.evidence[1].text


def test_a_watchdog_timeout_after_an_ignored_block_is_found() -> None:
    lines = training() + ignored_block() + [watchdog(r, 4120) for r in (1, 2, 3)]
    assert classify_log(lines).failure_class is F.COLLECTIVE_TIMEOUT


def test_a_cuda_oom_inside_an_ignored_block_still_counts() -> None:
    oom = cuda_oom(2)[-1].removeprefix("[rank2]: ")
    lines = training() + ignored_block(exception=oom)
    assert classify_log(lines).failure_class is F.OOM


def test_a_cuda_oom_inside_an_ignored_block_the_training_stepped_past_is_not_the_cause() -> None:
    oom = cuda_oom(2)[-1].removeprefix("[rank2]: ")
    lines = [started("step"), finished("step")] + ignored_block(exception=oom) + [started("step"), finished("step")]
    assert classify_log(lines).failure_class is F.NO_END


@pytest.mark.parametrize("shift", range(0, 900, 25))
def test_a_block_cut_by_a_byte_block_boundary_is_followed_across_it(shift: int) -> None:
    block = ignored_block(frames=4)  # 827 bytes: every line of it comes to end a byte block at some shift
    room = BLOCK_BYTES - 850 + shift
    filler = ["step metrics: " + "x" * 185 + "\n"] * (room // 200)
    pad = "pad " + "y" * max(0, room % 200 - 5) + "\n"
    assert classify_log([pad] + filler + block).failure_class is F.NO_END
