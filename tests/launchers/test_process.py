"""Starting a trial: environment overlay, command resolution, new session, merged output."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from nccl_tune.errors import NcclTuneError
from nccl_tune.launchers.process import build_env, resolve_command, spawn
from nccl_tune.trial import MARKER_ENV


def test_env_overlay_sets_removes_and_marks() -> None:
    base = {"KEEP": "1", "DROP": "x", MARKER_ENV: "other/1", "PATH": "/bin"}
    env = build_env({"DROP": None, "NEW": "2", "NCCL_ALGO": "Ring", MARKER_ENV: "spoof/9"}, "s/3", base)
    assert env == {"KEEP": "1", "NEW": "2", "NCCL_ALGO": "Ring", MARKER_ENV: "s/3", "PATH": "/bin"}
    assert base["DROP"] == "x"  # the base is not modified


def _script(tmp_path: Path, name: str, mode: int) -> Path:
    p = tmp_path / name
    p.write_text("#!/bin/sh\necho hi\n")
    p.chmod(mode)
    return p


def test_resolve_finds_commands_on_the_trial_path(tmp_path: Path) -> None:
    tool = _script(tmp_path, "mytool", 0o755)
    assert resolve_command(["mytool"], {"PATH": str(tmp_path)}) == str(tool)
    assert resolve_command(["./mytool"], {"PATH": ""}, cwd=tmp_path) == str(tmp_path / "mytool")
    assert resolve_command([str(tool)], {"PATH": ""}) == str(tool)


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "the trial command is empty"),
        (["no-such-tool-xyz"], "command 'no-such-tool-xyz' not found on the trial's PATH"),
        (["./missing.sh"], "command './missing.sh' not found"),
        (["./plain.sh"], "command './plain.sh' is not executable: `chmod +x"),
        (["./adir/"], "is not executable"),
    ],
)
def test_resolve_refuses_with_one_line(tmp_path: Path, argv: list[str], message: str) -> None:
    _script(tmp_path, "plain.sh", 0o644)
    (tmp_path / "adir").mkdir()
    with pytest.raises(NcclTuneError) as info:
        resolve_command(argv, {"PATH": str(tmp_path)}, cwd=tmp_path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_resolve_refuses_a_missing_working_directory(tmp_path: Path) -> None:
    with pytest.raises(NcclTuneError, match="working directory .* does not exist"):
        resolve_command(["sh"], {"PATH": os.defpath}, cwd=tmp_path / "nope")


def test_spawn_new_session_merged_output_in_order(tmp_path: Path) -> None:
    code = (
        "import os, sys\n"
        "print('out1', flush=True); print('err1', file=sys.stderr, flush=True); print('out2', flush=True)\n"
        f"print(os.getsid(0), os.getpgid(0), os.environ['{MARKER_ENV}'], flush=True)\n"
    )
    proc = spawn([sys.executable, "-c", code], build_env({}, "s/0"), tmp_path)
    out, _ = proc.communicate(timeout=30)
    lines = out.decode().splitlines()
    assert lines[:3] == ["out1", "err1", "out2"]
    sid, pgid, marker = lines[3].split()
    assert int(sid) == proc.pid and int(pgid) == proc.pid  # its own session and process group
    assert os.getsid(0) != proc.pid
    assert marker == "s/0"
