"""What a run refuses before its first trial, through the real CLI: ``--dry-run`` refuses the same
inputs with the same line as the real run, and a refused run leaves nothing behind, but never
touches what an earlier run of the study recorded."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from tests.tuner.conftest import TINY_SPACE, TINY_TRAINER, one_line_error, read_only, run_cli

pytestmark = pytest.mark.timeout(300)
TINY_CMD = [sys.executable, str(TINY_TRAINER)]
RUN = ["run", "--space", str(TINY_SPACE), "--trials", "1", "--confirm", "0", "--seed", "1"]
FAST = {"TINY_STEP_S": "0.05"}


def _tree(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` with its content's digest ('' for folders)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        for p in sorted(folder.rglob("*"))
    }


def _prepare(where: Path) -> None:
    (where / "afile").write_text("mine\n")
    (where / "noexec.sh").write_text("#!/bin/sh\n")
    (where / "never.yaml").write_text(
        TINY_SPACE.read_text() + "\nconstraints:\n  - expr: trainer.micro > 100\n    message: micro above 100\n"
    )


REFUSED = {
    "results is a file": (["--results", "afile"], "--results afile: cannot create or write it (it is not a folder)"),
    "results under a file": (
        ["--results", "afile/r"],
        "--results afile/r: cannot create or write it (afile is not a folder)",
    ),
    "output is a folder": (["-o", "."], "cannot write .: it is a folder"),
    "output under a file": (["-o", "afile/t.yaml"], "cannot write afile/t.yaml: afile is a file, not a folder"),
    "storage it cannot create": (
        ["--storage", "sqlite:////proc/no/such/x.db"],
        "storage sqlite:////proc/no/such/x.db: cannot create",
    ),
    "baseline file missing": (["--baseline", "missing.yaml"], "--baseline missing.yaml does not exist"),
    "constraints nothing meets": (["--space", "never.yaml"], "no values satisfy its constraints"),
    "warm start with no earlier night": (
        ["--series", "n", "--warm-start"],
        "--warm-start: series 'n' has no earlier night",
    ),
    "unknown launcher": (["--launcher", "foo"], "--launcher 'foo' is unknown"),
    "bad --set": (["--set", "trainer.micro=3"], "'3' is not a value of trainer.micro"),
}


@pytest.mark.parametrize("extra, fragment", REFUSED.values(), ids=list(REFUSED))
def test_dry_run_refuses_what_the_run_refuses_and_neither_leaves_anything(tmp_path, extra, fragment):
    _same_refusal(tmp_path, extra, fragment, FAST)


def test_nccl_variables_on_an_existing_ray_cluster_are_refused_by_the_dry_run_too(tmp_path):
    _same_refusal(
        tmp_path, [], "RAY_ADDRESS=auto: trials run on that existing Ray cluster", {**FAST, "RAY_ADDRESS": "auto"}
    )


def _same_refusal(tmp_path: Path, extra: list[str], fragment: str, env: dict[str, str]) -> None:
    """The dry run and the real run refuse ``extra`` with one and the same line, and write nothing."""
    lines = []
    for mode in ("dry", "real"):
        where = tmp_path / mode
        where.mkdir()
        _prepare(where)
        before = _tree(where)
        flag = ["--dry-run"] if mode == "dry" else []
        lines.append(one_line_error(run_cli([*RUN, *flag, *extra, "--", *TINY_CMD], cwd=where, env=env, timeout=120)))
        assert fragment in lines[-1], lines[-1]
        assert _tree(where) == before, f"{mode}: a refused run left {set(_tree(where)) - set(before)}"
    assert lines[0] == lines[1]


@pytest.mark.parametrize(
    "command, fragment",
    [
        (["no-such-trainer-cmd"], "command 'no-such-trainer-cmd' not found"),
        (["./noexec.sh"], "command './noexec.sh' is not executable"),
    ],
    ids=["missing command", "not executable"],
)
def test_a_command_that_cannot_run_leaves_no_study_folder(tmp_path, command, fragment):
    for flag in (["--dry-run"], []):
        _prepare(tmp_path)
        line = one_line_error(run_cli([*RUN, *flag, "--", *command], cwd=tmp_path, timeout=120))
        assert fragment in line
        assert not (tmp_path / "results").exists(), _tree(tmp_path / "results")


def test_dry_run_refuses_a_results_folder_that_cannot_be_written(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    with read_only(ro):
        dry = one_line_error(
            run_cli([*RUN, "--dry-run", "--results", "ro", "--", *TINY_CMD], cwd=tmp_path, timeout=120)
        )
        real = one_line_error(run_cli([*RUN, "--results", "ro", "--", *TINY_CMD], cwd=tmp_path, env=FAST, timeout=120))
    assert dry == real and "--results ro: cannot create or write it" in dry and "choose a folder you can write" in dry
    assert list(ro.iterdir()) == []


def test_a_study_refused_on_resume_keeps_every_result(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(TINY_SPACE.read_text())
    args = ["run", "--space", "space.yaml", "--study", "s", "--trials", "1", "--confirm", "0", "--seed", "1"]
    first = run_cli([*args, "--", *TINY_CMD], cwd=tmp_path, env=FAST)
    assert first.returncode == 0, first.stderr
    kept = _tree(tmp_path / "results")
    assert "s/trial-0000/result.json" in kept and "s/study.json" in kept
    space.write_text(TINY_SPACE.read_text().replace("high: 8", "high: 4"))
    dry = one_line_error(run_cli([*args, "--dry-run", "--", *TINY_CMD], cwd=tmp_path))
    real = one_line_error(run_cli([*args, "--", *TINY_CMD], cwd=tmp_path, env=FAST))
    assert dry == real and "created with other content" in real
    after = _tree(tmp_path / "results")
    assert {k: v for k, v in after.items() if not k.endswith(".lock")} == {
        k: v for k, v in kept.items() if not k.endswith(".lock")
    }
