"""Every command, its output piped as ``| tee`` or ``| grep`` takes it: whole lines, never broken
mid-word at the width ``COLUMNS`` names. A command prints the same lines at 80 columns as at 300,
and the lines longer than 80 that it has show that nothing was cut to fit."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from tests.reporting.conftest import tiny_study  # noqa: F401  (the study every command reads)
from tests.tuner.conftest import TINY_SPACE, TINY_TRAINER, run_cli

pytestmark = pytest.mark.timeout(900)
FAILURE_LOGS = Path(__file__).resolve().parents[1] / "diagnose" / "fixtures" / "failure-logs"

COMMANDS = {
    "report": ["report", "--study", "t"],
    "report-md": ["report", "--study", "t", "--format", "md"],
    "history": ["history"],
    "export": ["export", "--study", "t"],
    "spaces-list": ["spaces", "list"],
    "spaces-show": ["spaces", "show", "skyrl-text2sql"],
    "diagnose": ["diagnose", str(FAILURE_LOGS / "02_nccl_error.log"), str(FAILURE_LOGS / "04_host_oom.log")],
    "doctor": ["doctor"],
}


MACHINE_STATE = re.compile(r"^\s*(exported:|\w+\s+ray\s)")
"""Lines that may change between two runs of a command: the time of writing, and doctor's Ray check
(the Ray tests start and stop clusters in another worker meanwhile)."""


def _piped(args: list[str], cwd: Path, columns: int) -> list[str]:
    proc = run_cli(args, cwd=cwd, env={"COLUMNS": str(columns)})
    assert proc.returncode in (0, 1, 2), proc.stderr
    lines = proc.stdout.splitlines() + proc.stderr.splitlines()
    return [line for line in lines if not MACHINE_STATE.match(line)]


@pytest.mark.parametrize("name", COMMANDS)
def test_a_piped_command_prints_whole_lines(name, tiny_study):  # noqa: F811
    narrow = _piped(COMMANDS[name], tiny_study, 80)
    assert narrow, f"{name} printed nothing"
    assert narrow == _piped(COMMANDS[name], tiny_study, 300), f"{name} breaks its lines at the terminal's width"
    if name not in ("spaces-list", "doctor"):  # these two may have only short lines on some machines
        assert max(map(len, narrow)) > 80, f"{name}: no line longer than 80 columns to show it whole"


def test_a_piped_study_prints_whole_lines(tmp_path):
    args = ["run", "--space", str(TINY_SPACE), "--study", "p", "--trials", "3", "--confirm", "0", "--seed", "2"]
    proc = run_cli([*args, "--", sys.executable, str(TINY_TRAINER)], cwd=tmp_path, env={"COLUMNS": "80"})
    assert proc.returncode in (0, 2), proc.stderr
    lines = proc.stdout.splitlines()
    assert max(map(len, lines)) > 80
    ended = [line for line in lines if line.startswith("trial ") and " ok " in line]
    assert ended, proc.stdout
    for line in ended:  # one line per finished trial: its figures, unbroken
        assert re.search(r" steps \d+ ", line), line
    assert "best so far: trial " in ended[0], ended[0]  # and the incumbent, on the same line


def test_export_env_says_when_the_winner_sets_no_variable(tmp_path):
    """A space with no environment variable: ``export --format env`` says so instead of printing nothing."""
    space = yaml.safe_load(TINY_SPACE.read_text())
    space["parameters"] = [p for p in space["parameters"] if not p["name"].startswith("NCCL_")]
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    args = ["run", "--space", "space.yaml", "--study", "e", "--trials", "2", "--confirm", "0", "--seed", "1"]
    assert run_cli([*args, "--", sys.executable, str(TINY_TRAINER)], cwd=tmp_path).returncode == 0
    proc = run_cli(["export", "--format", "env"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# ") and "sets no environment variable" in proc.stdout, proc.stdout
    assert "export " not in proc.stdout and "unset " not in proc.stdout
