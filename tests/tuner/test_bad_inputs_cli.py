"""Bad input to the tuner's commands, as a user types it into the real CLI: one line on stderr naming
the option, file, key or value and the fix, exit 1, never a traceback, and nothing of the user's
moved or lost."""

from __future__ import annotations

import sys

import pytest

from tests.tuner.conftest import TINY_SPACE, TINY_TRAINER, one_line_error, run_cli

pytestmark = pytest.mark.timeout(300)
TINY_CMD = [sys.executable, str(TINY_TRAINER)]
RUN = ["run", "--space", str(TINY_SPACE), "--trials", "1", "--confirm", "0", "--seed", "1"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A folder with a finished study ``s`` (one trial) in ``results/``."""
    where = tmp_path_factory.mktemp("bad-inputs")
    proc = run_cli([*RUN, "--study", "s", "--", *TINY_CMD], cwd=where, env={"TINY_STEP_S": "0.05"})
    assert proc.returncode == 0, proc.stderr
    return where


def test_a_key_set_twice_with_two_values_is_refused(tmp_path):
    proc = run_cli(
        [
            "run",
            "--dry-run",
            "--space",
            str(TINY_SPACE),
            "--set",
            "trainer.micro=2",
            "--set",
            "trainer.micro=4",
            "--",
            *TINY_CMD,
        ],
        cwd=tmp_path,
        timeout=60,
    )
    one_line_error(proc, "--set trainer.micro is given twice (trainer.micro=2 and trainer.micro=4); keep one of them")


def test_a_misspelt_set_key_names_the_key_meant(tmp_path):
    proc = run_cli(
        ["run", "--dry-run", "--space", str(TINY_SPACE), "--set", "trainer.mikro=2", "--", *TINY_CMD],
        cwd=tmp_path,
        timeout=60,
    )
    one_line_error(proc, "--set trainer.mikro=2", "(did you mean 'trainer.micro'?)")


def test_constraints_nothing_satisfies_name_the_file_and_the_rule(tmp_path):
    space = tmp_path / "never.yaml"
    space.write_text(
        TINY_SPACE.read_text() + "\nconstraints:\n  - expr: trainer.micro > 100\n    message: micro above 100\n"
    )
    proc = run_cli(["run", "--dry-run", "--space", str(space), "--", *TINY_CMD], cwd=tmp_path, timeout=120)
    one_line_error(
        proc, f"space tiny ({space}): no values satisfy its constraints", "'micro above 100'", "loosen that constraint"
    )


def test_output_naming_a_folder_is_refused_and_the_folder_left_alone(tmp_path):
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine\n")
    proc = run_cli([*RUN, "-o", "keep", "--", *TINY_CMD], cwd=tmp_path, env={"TINY_STEP_S": "0.05"})
    one_line_error(proc, "cannot write keep: it is a folder; give a file name, such as keep/tuned.yaml")
    assert (keep / "notes.txt").read_text() == "mine\n" and not (tmp_path / "keep.prev.yaml").exists()
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("trial-*"))


def test_output_under_a_file_names_the_file(tmp_path):
    (tmp_path / "afile").write_text("x\n")
    proc = run_cli([*RUN, "-o", "afile/tuned.yaml", "--", *TINY_CMD], cwd=tmp_path)
    one_line_error(proc, "cannot write afile/tuned.yaml: afile is a file, not a folder")


def test_export_and_plots_into_the_wrong_kind_of_path(study):
    (study / "afile").write_text("x\n")
    one_line_error(
        run_cli(["export", "-o", "afile/t.yaml"], cwd=study), "cannot write afile/t.yaml: afile is a file, not a folder"
    )
    one_line_error(run_cli(["report", "--plots", "afile"], cwd=study), "--plots afile: it is a file, not a folder")


def test_report_with_a_study_that_is_not_a_night_of_the_series(study):
    proc = run_cli(["report", "--study", "s", "--series", "nightly"], cwd=study)
    one_line_error(proc, "--study s is not a night of series 'nightly'; give --study or --series, not both")


@pytest.mark.parametrize(
    "tail, fragment",
    [
        ("env: [1]\n", "'env' must map variable names to values, got list"),
        ("unset_env: 5\n", "'unset_env' must be a list of variable names, got int"),
        ("env:\n  'BAD NAME': 1\n", "'BAD NAME' is not an environment variable name"),
        ("env:\n  NCCL_ALGO: [Ring]\n", "env.NCCL_ALGO must be a single value"),
    ],
    ids=["env-list", "unset-int", "env-name", "env-value-list"],
)
def test_apply_refuses_an_environment_no_shell_could_take(tmp_path, tail, fragment):
    (tmp_path / "tuned.yaml").write_text("overrides:\n  trainer:\n    micro: 2\n" + tail)
    (tmp_path / "cfg.yaml").write_text("trainer:\n  micro: 1\n")
    proc = run_cli(["apply", "tuned.yaml", "--into", "cfg.yaml"], cwd=tmp_path, timeout=60)
    one_line_error(proc, f"tuned file tuned.yaml: {fragment}")
    assert proc.stdout == ""


def test_apply_environment_comment_stays_one_line_on_a_narrow_terminal(tmp_path):
    (tmp_path / "tuned.yaml").write_text("overrides:\n  trainer:\n    micro: 2\nunset_env: [NCCL_ALGO]\n")
    (tmp_path / "cfg.yaml").write_text("trainer:\n  micro: 1\n")
    proc = run_cli(["apply", "tuned.yaml", "--into", "cfg.yaml"], cwd=tmp_path, env={"COLUMNS": "40"}, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "# speed only (the training stays as it was):",
        "#   trainer.micro: 1 -> 2",
        "# tuned.yaml also sets the environment; run before the training command:",
        "unset NCCL_ALGO",
    ], proc.stderr


def test_an_unreadable_study_claim_says_how_to_go_on(tmp_path):
    proc = run_cli([*RUN, "--study", "c", "--", *TINY_CMD], cwd=tmp_path, env={"TINY_STEP_S": "0.05"})
    assert proc.returncode == 0, proc.stderr
    claim = tmp_path / "results" / "c" / "study.json"
    claim.write_text("{not json")
    proc = run_cli([*RUN, "--study", "c", "--", *TINY_CMD], cwd=tmp_path, env={"TINY_STEP_S": "0.05"})
    one_line_error(
        proc, "results/c/study.json cannot be read", "restore it from a copy, or run into another --results folder"
    )
