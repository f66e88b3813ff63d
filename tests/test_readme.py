"""The README's promises: it opens with the two commands, and both are what the Makefile and CI run."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def first_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```(?:bash)?\n(.*?)```", text, re.S)
    assert block and text.index("```") < 200, "README.md must open with its commands"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_make_demo_and_make_test_and_ci_runs_the_test_command():
    assert first_block() == ["make demo", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M)


@pytest.mark.timeout(300)
def test_make_demo_as_written_tunes_the_twin_and_writes_the_tuned_yaml(tmp_path):
    """`make demo`, shrunk to two trials through its variables, into a temporary results folder."""
    if not (ROOT / ".venv" / ".installed").exists():
        pytest.skip("make demo runs from the repository's .venv (created by make test / make demo)")
    env = {**os.environ, "COLUMNS": "160"}
    proc = subprocess.run(
        ["make", "-s", "demo", f"RESULTS={tmp_path}", "DEMO_TRIALS=2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 2), out  # 2: no stable config in two trials is an honest answer
    assert "trial 0 baseline" in out and "nccl-tune new study demo" in out  # a fresh results folder
    if proc.returncode == 0:
        doc = yaml.safe_load((tmp_path / "demo-tuned.yaml").read_text())
        assert doc["overrides"]["trainer"] and doc["study"]["name"] == "demo"
        assert f"tuned YAML: {tmp_path}/demo-tuned.yaml" in out.replace("\n", "")
    summary = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "nccl-tune"), "report", "--results", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    rows = json.loads(summary.stdout)["trials"]
    assert rows[0]["kind"] == "baseline" and rows[0]["status"] == "ok", rows[0]
