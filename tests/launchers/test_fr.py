"""Flight Recorder dump paths and collection."""

from __future__ import annotations

from pathlib import Path

import pytest

from nccl_tune.launchers.fr import FR_PATH_ENV, clear_dumps, collect_dumps, fr_env, fr_prefix


@pytest.mark.parametrize(
    "value, expected",
    [
        ("<absent>", "{t}/fr/nccl_trace_rank_"),
        ("{trial_dir}/fr/trace_", "{t}/fr/trace_"),
        ("dumps/rank_", "{t}/dumps/rank_"),
        ("{tmp}/elsewhere/x_", "{tmp}/elsewhere/x_"),
    ],
)
def test_prefix(tmp_path: Path, value: str, expected: str) -> None:
    trial = tmp_path / "trial"
    overlay = {} if value == "<absent>" else {FR_PATH_ENV: value.replace("{tmp}", str(tmp_path))}
    prefix = fr_prefix(overlay, trial)
    assert str(prefix) == expected.format(t=trial, tmp=tmp_path)
    assert prefix.parent.is_dir()
    assert fr_env(overlay, trial)[FR_PATH_ENV] == str(prefix)


def test_an_overlay_that_unsets_the_path_is_respected(tmp_path: Path) -> None:
    assert fr_prefix({FR_PATH_ENV: None}, tmp_path) is None
    assert fr_env({FR_PATH_ENV: None}, tmp_path) == {FR_PATH_ENV: None}


def test_collect_in_rank_order_skipping_empty_and_foreign_files(tmp_path: Path) -> None:
    prefix = fr_prefix({}, tmp_path)
    for rank in (10, 2, 0, 1):
        Path(f"{prefix}{rank}").write_bytes(b"pickle")
    Path(f"{prefix}3").write_bytes(b"")  # a rank that died while dumping
    (prefix.parent / "other.txt").write_text("x")
    assert [p.name for p in collect_dumps(prefix)] == [f"nccl_trace_rank_{r}" for r in (0, 1, 2, 10)]


def test_nothing_to_collect(tmp_path: Path) -> None:
    assert collect_dumps(None) == ()
    assert collect_dumps(tmp_path / "missing" / "x_") == ()


def test_stale_dumps_of_an_earlier_attempt_are_cleared(tmp_path: Path) -> None:
    prefix = fr_prefix({}, tmp_path)
    Path(f"{prefix}0").write_bytes(b"old")
    (prefix.parent / "notes.txt").write_text("kept")
    assert clear_dumps(prefix) == 1
    assert collect_dumps(prefix) == () and (prefix.parent / "notes.txt").exists()
