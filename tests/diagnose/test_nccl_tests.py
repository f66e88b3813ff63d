"""nccl-tests' own failure prints (``host: Test NCCL failure file.cu:N '<NCCL's error string> / <last
error>'``, ``host: Test CUDA failure file.cu:N '<CUDA's error string>'``, its ``-T`` timeout and the
`` .. host pid N: Test failure`` lines relaying them) read as PyTorch's wording of the same errors
does; NCCL's warning that its socket got an address of no known family names the interface; a
healthy run with NCCL's harmless warnings stays ``ok``."""

from __future__ import annotations

import pytest

from nccl_tune.diagnose.verdict import classify_log
from nccl_tune.failure import FailureClass as F

HOST = "gpu-7"


def healthy(pid: int = 51234) -> list[str]:
    """An all_reduce_perf run over 2 GPUs, with the warnings NCCL prints on a node without InfiniBand."""
    lines = [
        "# nThread 1 nGpus 2 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0",
        "#",
        "# Using devices",
    ]
    lines += [
        f"#  Rank  {r} Group  0 Pid  {pid} on      {HOST} device  {r} [0x{27 + r:02x}] NVIDIA H100 80GB HBM3"
        for r in range(2)
    ]
    lines += [
        f"{HOST}:{pid}:{pid} [0] NCCL INFO Bootstrap : Using eth0:10.4.1.7<0>",
        f"{HOST}:{pid}:{pid + 40} [0] misc/ibvwrap.cc:98 NCCL WARN Failed to open libibverbs.so[.1]",
        f"{HOST}:{pid}:{pid + 40} [0] NCCL INFO NET/Socket : Using [0]eth0:10.4.1.7<0>",
        f"{HOST}:{pid}:{pid + 41} [1] NCCL INFO comm 0x5581f0 rank 1 nranks 2 cudaDev 1 busId 1c000 - Init COMPLETE",
    ]
    for size in (8, 1024, 1048576, 134217728):
        lines.append(
            f"{size:>12}  {size // 4:>12}     float     sum      -1    41.07    0.00    0.00      0    "
            "40.81    0.00    0.00      0"
        )
    return lines + ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 187.312", "#", ""]


def failing(*failure: str, pid: int = 51234) -> list[str]:
    """The run's start, then the failure and nccl-tests relaying it up as it exits."""
    return healthy(pid)[:9] + list(failure) + [f" .. {HOST} pid {pid}: Test failure common.cu:{n}" for n in (377, 1002)]


def test_a_healthy_run_with_harmless_warnings_is_ok() -> None:
    assert classify_log(healthy()).failure_class is F.OK


@pytest.mark.parametrize(
    ("message", "cls", "subtype"),
    [
        ("internal error - please report this issue to the NCCL developers / ", F.NCCL_ERROR, "nccl"),
        ("internal error / ", F.NCCL_ERROR, "nccl"),  # NCCL before 2.13's error strings, no last error
        (
            "unhandled system error (run with NCCL_DEBUG=INFO for details) / socketPollConnect: connect returned Connection "
            "refused",
            F.NCCL_ERROR,
            "system",
        ),
        ("invalid usage (run with NCCL_DEBUG=WARN for details) / ", F.NCCL_ERROR, "invalid_usage"),
        ("remote process exited or there was a network error / ", F.NCCL_ERROR, "remote"),
        (
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details) / Cuda failure 'invalid argument'",
            F.CUDA_ERROR,
            "nccl_cuda",
        ),
    ],
)
def test_a_test_nccl_failure_is_read_by_its_message(message: str, cls: F, subtype: str) -> None:
    v = classify_log(failing(f"{HOST}: Test NCCL failure common.cu:1131 '{message}'"))
    assert (v.failure_class, v.cause.subtype) == (cls, subtype)
    assert "Test NCCL failure" in v.evidence[0].text


@pytest.mark.parametrize(
    ("message", "cls"),
    [
        ("out of memory", F.OOM),
        ("an illegal memory access was encountered", F.CUDA_ERROR),
        ("invalid device ordinal", F.CUDA_ERROR),
        ("no CUDA-capable device is detected", F.CUDA_ERROR),
    ],
)
def test_a_test_cuda_failure_is_read_by_its_message(message: str, cls: F) -> None:
    v = classify_log(failing(f"{HOST}: Test CUDA failure common.cu:892 '{message}'"))
    assert v.failure_class is cls and "Test CUDA failure" in v.evidence[0].text


def test_the_failure_line_alone_is_enough() -> None:
    assert classify_log([f"{HOST}: Test NCCL failure common.cu:1131 'internal error / '"]).failure_class is F.NCCL_ERROR


def test_only_the_relayed_failure_is_a_crash() -> None:
    v = classify_log(failing())
    assert v.failure_class is F.CRASH and "Test failure" in v.evidence[0].text


def test_its_timeout_is_a_collective_timeout() -> None:
    v = classify_log(failing(f"{HOST}: Test timeout (30s) common.cu:441"))
    assert v.failure_class is F.COLLECTIVE_TIMEOUT and "-T" in v.advice


FAMILY = (
    f"{HOST}:51234:51290 [0] misc/socket.cc:411 NCCL WARN Net : connecting to address  with family 21845 "
    "is neither AF_INET(2) nor AF_INET6(10)"
)


def test_a_socket_address_of_no_known_family_names_the_interface() -> None:
    v = classify_log(
        failing(
            FAMILY,
            f"{HOST}:51234:51290 [0] NCCL INFO bootstrap.cc:211 -> 3",
            f"{HOST}: Test NCCL failure common.cu:1131 'internal error - please report this issue "
            "to the NCCL developers / '",
        )
    )
    assert (v.failure_class, v.cause.subtype) == (F.NCCL_ERROR, "socket_ifname")
    assert v.evidence[0].text == FAMILY and "NCCL_SOCKET_IFNAME" in v.advice


@pytest.mark.parametrize(
    "line",
    [
        FAMILY,
        # the same check in ncclSocketInit, and the bootstrap finding no interface at all
        "[rank1]: ncclSocketInit: connecting to address  with family 2 is neither AF_INET(2) nor AF_INET6(10)",
        f"{HOST}:51234:51234 [0] bootstrap.cc:96 NCCL WARN Bootstrap : no socket interface found",
    ],
)
def test_the_warning_alone_is_an_nccl_error(line: str) -> None:
    v = classify_log(healthy()[:8] + [line])
    assert (v.failure_class, v.cause.subtype) == (F.NCCL_ERROR, "socket_ifname")
