"""Every labelled real-world failure log is classified right, with its rank where the log shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from nccl_tune.diagnose.verdict import classify_log
from nccl_tune.failure import FailureClass

from .helpers import FIXTURES, SHARED_FIXTURES, fixture_paths, read_fixture

RANK_SHOWN = {
    # rank 0 is the one in REDUCE while ranks 2, 3 and 6 are in _ALLGATHER_BASE at the same SeqNum
    "01_collective_mismatch.log": 0,
    # torchrun: "failed (exitcode: -9) local_rank: 1"
    "10_crash.log": 1,
}

# (file, words the advice must contain, 1-based line of the first evidence line in the log part)
ADVICE = {
    "01_collective_mismatch.log": (["REDUCE", "_ALLGATHER_BASE", "same collectives"], 2),
    "02_nccl_error.log": (["/dev/shm", "NCCL_SHM_DISABLE=1"], 1),
    "03_nccl_error.log": (["peer process exited", "network"], 7),
    "04_host_oom.log": (["Host memory", "cpu_offload"], 2),
    "05_crash.log": (["Ray actor died"], 1),
    "06_collective_timeout.log": (["gloo", "SKYRL_WORKER_NCCL_TIMEOUT_IN_S"], 18),
    "07_cuda_error.log": (["ECC", "drain the node"], 6),
    "08_cuda_error.log": (["device-side assert", "indexSelectLargeIndex", "CUDA_LAUNCH_BLOCKING=1"], 1),
    "09_init_failure.log": (["Port 29500", "MASTER_PORT"], 5),
    "10_crash.log": (["SIGKILL", "OOM killer"], 23),
    "11_oom.log": (["generator.gpu_memory_utilization (now 0.10)", "raise it"], 2),
    "12_oom.log": (["syncing weights", "generator.gpu_memory_utilization"], 1),
    "13_collective_timeout.log": (["TORCH_FR_BUFFER_SIZE", "SKYRL_WORKER_NCCL_TIMEOUT_IN_S"], 1),
    "15_init_failure.log": (["rendezvous"], 5),
}


def test_every_fixture_is_present_and_labelled() -> None:
    paths = fixture_paths()
    assert len(paths) == 15
    labels = {read_fixture(p).label for p in paths}
    assert labels <= {c.value for c in FailureClass}


@pytest.mark.skipif(not SHARED_FIXTURES.is_dir(), reason="../shared/failure-logs is not beside this clone (CI)")
def test_the_copy_matches_the_shared_fixtures() -> None:
    shared = {p.name: p.read_bytes() for p in SHARED_FIXTURES.glob("*.log")}
    mine = {p.name: p.read_bytes() for p in FIXTURES.glob("*.log")}
    assert mine == shared


NO_END_SHOWN = {"14_ok.log"}
"""Healthy runs (label ``ok``, from their threads) whose log just stops: no end-of-training line, no
exit status. The log is no evidence either way: ``no_end``, with the last progress line."""


@pytest.mark.parametrize("path", fixture_paths(), ids=lambda p: p.name)
def test_fixture_class_and_rank(path: Path) -> None:
    fx = read_fixture(path)
    verdict = classify_log(fx.lines, source=fx.name)
    expected = "no_end" if fx.name in NO_END_SHOWN else fx.label
    assert verdict.failure_class.value == expected, [str(e) for e in verdict.evidence]
    assert verdict.rank == RANK_SHOWN.get(fx.name)
    if fx.label == "ok":
        assert fx.name in NO_END_SHOWN
        last = max(i for i, line in enumerate(fx.lines, start=1) if line.strip())
        assert verdict.evidence[-1].line_no == last and verdict.cause.details["last_progress_line"] == last
        assert "dmesg" in verdict.advice and "sacct" in verdict.advice
    else:
        assert verdict.evidence, "a failure verdict carries its evidence"
        assert verdict.advice


@pytest.mark.parametrize("name", sorted(ADVICE))
def test_fixture_advice_and_root_evidence(name: str) -> None:
    words, first_line = ADVICE[name]
    fx = read_fixture(FIXTURES / name)
    verdict = classify_log(fx.lines, source=name)
    for w in words:
        assert w in verdict.advice, (w, verdict.advice)
    root = verdict.evidence[0]
    assert root.line_no == first_line and root.source == name
    assert root.text == fx.lines[first_line - 1].rstrip("\n").replace("\x1b", "").replace("[36m", "").replace("[0m", "")


def test_fixture_read_as_a_file_with_its_exit_status(tmp_path: Path) -> None:
    """The same log, from a file, with the launcher's exit status: 10 (SIGKILL, no memory evidence)
    stays a crash, but with a host-memory climb sampled by the launcher it is host_oom."""
    from nccl_tune.diagnose.verdict import classify_file

    fx = read_fixture(FIXTURES / "10_crash.log")
    log = tmp_path / "output.log"
    log.write_text("".join(fx.lines))
    calm = classify_file(log, exit_code=1, host_mem_peak_frac=0.41)
    climb = classify_file(log, exit_code=1, host_mem_peak_frac=0.97)
    assert calm.failure_class is FailureClass.CRASH and calm.rank == 1
    assert climb.failure_class is FailureClass.HOST_OOM and climb.rank == 1
    assert "97%" in climb.advice and "97%" in str(climb.evidence[0])
