"""Atomic writes: the old file or the new one, never a part; no temporary file left behind."""

from __future__ import annotations

import json
import os
import stat

import pytest

from nccl_tune.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic


def test_writes_replace_the_file_and_leave_no_temporary(tmp_path):
    target = tmp_path / "deep" / "er" / "result.json"
    write_json_atomic(target, {"a": 1, "path": tmp_path})
    assert json.loads(target.read_text()) == {"a": 1, "path": str(tmp_path)}
    write_text_atomic(target, "second\n")
    assert target.read_text() == "second\n"
    assert os.listdir(target.parent) == ["result.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "tuned.yaml"
    write_text_atomic(target, "old: 1\n")
    with pytest.raises(TypeError):
        write_bytes_atomic(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_text() == "old: 1\n"
    assert os.listdir(tmp_path) == ["tuned.yaml"]


def test_the_file_gets_the_umask_mode_like_any_file_the_user_writes(tmp_path):
    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "a.yaml", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.yaml").stat().st_mode) == 0o644
