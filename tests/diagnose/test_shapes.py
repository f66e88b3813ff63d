"""The failure shapes real logs showed (fixtures in ``fixtures/shapes``, several per shape with
different surrounding output): each is classified by its root cause, on the rank that caused it,
and a failed run is never ``ok``; a log is ``ok`` only with positive evidence of its end, else
``no_end`` (shape ``end``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from nccl_tune.diagnose.verdict import classify_file, classify_log
from nccl_tune.failure import FailureClass

SHAPES = Path(__file__).parent / "fixtures" / "shapes"
MIN_PER_SHAPE = 3


@dataclass(frozen=True)
class ShapeLog:
    name: str
    shape: str
    label: str
    rank: int | None
    exit_code: int | None
    after_training: bool | None
    lines: list[str]


def _opt_int(value: str) -> int | None:
    return None if value in ("none", "") else int(value)


def read_shape(path: Path) -> ShapeLog:
    lines = path.read_text().splitlines(keepends=True)
    cut = next(i for i, ln in enumerate(lines) if ln.startswith("# ---"))
    head = dict(ln[2:].split(":", 1) for ln in lines[:cut] if ln.startswith("# ") and ":" in ln)
    head = {k.strip(): v.strip() for k, v in head.items()}
    after = head.get("after-training")
    return ShapeLog(
        path.name,
        head["shape"],
        head["label"],
        _opt_int(head["rank"]),
        _opt_int(head["exit"]),
        None if after is None else after == "true",
        lines[cut + 1 :],
    )


def shape_paths() -> list[Path]:
    return sorted(SHAPES.glob("*.log"))


def test_every_shape_has_several_fixtures() -> None:
    counts = Counter(read_shape(p).shape for p in shape_paths())
    assert set(counts) == {
        "never_ok",
        "desync",
        "init",
        "transport",
        "after_end",
        "engine_args",
        "end",
        "kill",
        "first_error",
        "placement",
        "refusal",
        "ib_setup",
    }
    assert min(counts.values()) >= MIN_PER_SHAPE, counts


@pytest.mark.parametrize("path", shape_paths(), ids=lambda p: p.name)
def test_shape_class_rank_and_timing(path: Path) -> None:
    fx = read_shape(path)
    v = classify_log(fx.lines, exit_code=fx.exit_code, source=fx.name)
    shown = [str(e) for e in v.evidence]
    assert v.failure_class.value == fx.label, shown
    assert v.rank == fx.rank, shown
    if fx.after_training is not None:
        assert v.after_training is fx.after_training
    if fx.label == "ok":
        assert v.ok and v.cause is not None
    else:
        assert v.evidence and v.advice
        assert not v.ok


@pytest.mark.parametrize("path", shape_paths(), ids=lambda p: p.name)
def test_shape_read_from_a_file_agrees(path: Path, tmp_path: Path) -> None:
    """The same log as a file (byte blocks) gives the same verdict as its lines."""
    fx = read_shape(path)
    log = tmp_path / fx.name
    log.write_text("".join(fx.lines))
    a = classify_file(log, exit_code=fx.exit_code)
    b = classify_log(fx.lines, exit_code=fx.exit_code, source=fx.name)
    assert (a.failure_class, a.rank, a.evidence) == (b.failure_class, b.rank, b.evidence)


def test_desync_names_the_gap_in_the_advice() -> None:
    fx = read_shape(SHAPES / "desync__seq_far_behind_torchrun.log")
    v = classify_log(fx.lines)
    assert "1187" in v.advice and "48213" in v.advice and "rank 3" in v.advice


def test_transport_error_evidence_leads_with_the_transport_line() -> None:
    fx = read_shape(SHAPES / "transport__ib_completion_then_watchdogs.log")
    v = classify_log(fx.lines)
    assert "Got completion" in v.evidence[0].text
    assert any("Watchdog caught" in e.text for e in v.evidence[1:])


def test_placement_group_advice_names_the_resources() -> None:
    fx = read_shape(SHAPES / "init__ray_placement_group_skyrl.log")
    v = classify_log(fx.lines, exit_code=1)
    assert "placement group" in v.advice and "SKYRL_RAY_PG_TIMEOUT_IN_S" in v.advice


def test_host_readout_names_its_line() -> None:
    fx = read_shape(SHAPES / "never_ok__deepspeed_return_code_minus9_host_ram.log")
    v = classify_log(fx.lines, source=fx.name)
    assert v.failure_class is FailureClass.HOST_OOM
    assert "96.2%" in v.evidence[0].text and "96%" in v.advice


def test_a_log_that_stops_names_its_last_progress_line() -> None:
    fx = read_shape(SHAPES / "end__skyrl_stops_in_generate.log")
    v = classify_log(fx.lines, source=fx.name)
    assert v.failure_class is FailureClass.NO_END and v.phase == "generate"
    progress = [e for e in v.evidence if "Started: 'generate'" in e.text]
    assert progress and progress[0].line_no == v.cause.details["last_progress_line"]
    assert "Engine 000" in v.evidence[-1].text  # the log's last line


def test_no_cause_found_says_so_with_the_last_error_lines() -> None:
    fx = read_shape(SHAPES / "never_ok__last_lines_fatal.log")
    v = classify_log(fx.lines)
    assert v.failure_class is FailureClass.CRASH
    assert "no cause found" in v.evidence[0].text
    assert v.evidence[-1].text.startswith("FATAL: shard reader stopped")


def test_a_loopback_peer_named_only_by_last_error_says_which_interface_to_set() -> None:
    fx = read_shape(SHAPES / "init__socket_connect_named_by_last_error_only.log")
    v = classify_log(fx.lines, exit_code=fx.exit_code, source=fx.name)
    assert v.failure_class is FailureClass.INIT_FAILURE and v.cause is not None and v.cause.subtype == "nccl_connect"
    assert "127.0.0.1, a loopback address" in v.advice and "NCCL_SOCKET_IFNAME" in v.advice
    assert "NCCL_DEBUG=INFO" not in v.advice
    other = read_shape(SHAPES / "init__nccl_bootstrap_connect.log")
    assert "loopback" not in classify_log(other.lines, source=other.name).advice
