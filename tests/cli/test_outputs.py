"""What nccl-tune writes or merges, as a user runs it: a read-only target or a config that is not a
mapping is one line (exit 1), never a traceback; `apply` says which environment the tuned config needs."""

from __future__ import annotations

import json
import sys

import pytest
import yaml

from tests.tuner.conftest import TINY_SPACE, TINY_TRAINER, one_line_error, read_only, run_cli

pytestmark = pytest.mark.timeout(300)
RUN = ["run", "--space", str(TINY_SPACE), "--trials", "2", "--confirm", "0", "--seed", "1"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A folder with a finished study and its tuned YAML (tuned.yaml)."""
    where = tmp_path_factory.mktemp("outputs")
    proc = run_cli([*RUN, "--study", "o", "-o", "tuned.yaml", "--", sys.executable, str(TINY_TRAINER)], cwd=where)
    assert proc.returncode == 0, proc.stderr
    return where


def test_writing_into_a_read_only_folder_is_one_line(study):
    ro = study / "ro"
    ro.mkdir(exist_ok=True)
    with read_only(ro):
        one_line_error(run_cli(["export", "-o", "ro/t.yaml"], cwd=study), "cannot write ro/t.yaml")
        one_line_error(run_cli(["report", "--plots", "ro/plots"], cwd=study), "--plots ro/plots: cannot write")
        (study / "cfg.yaml").write_text("trainer:\n  micro: 1\n  offload: true\n")
        one_line_error(
            run_cli(["apply", "tuned.yaml", "--into", "cfg.yaml", "-o", "ro/x.yaml"], cwd=study),
            "cannot write ro/x.yaml",
        )
        # run -o is checked before any trial, not after the study
        proc = run_cli([*RUN, "--study", "o2", "-o", "ro/t.yaml", "--", sys.executable, str(TINY_TRAINER)], cwd=study)
        one_line_error(proc, "cannot write ro/t.yaml")
    assert not (study / "results" / "o2").exists()


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"\x7fELF\x02\x01\x01\x00\x00\x00\xf0\x9f", "is not a text file"),
        (b"5\n", "holds a single int (5), not a YAML mapping"),
        (b"- a\n- b\n", "holds a single list (['a', 'b']), not a YAML mapping"),
        (b"", "is empty; expected a YAML mapping"),
        (b"# only a comment\n", "is empty; expected a YAML mapping"),
    ],
    ids=["binary", "scalar", "list", "empty", "comment-only"],
)
def test_apply_into_a_config_that_is_not_a_mapping_is_one_line(study, content, fragment):
    (study / "bad.yaml").write_bytes(content)
    one_line_error(
        run_cli(["apply", "tuned.yaml", "--into", "bad.yaml"], cwd=study), f"config file bad.yaml {fragment}"
    )


def test_apply_prints_the_environment_to_set_on_stderr(study):
    (study / "cfg.yaml").write_text("trainer:\n  micro: 1\n  offload: true\n")
    proc = run_cli(["apply", "tuned.yaml", "--into", "cfg.yaml"], cwd=study)
    assert proc.returncode == 0, proc.stderr
    tuned = yaml.safe_load((study / "tuned.yaml").read_text())
    assert yaml.safe_load(proc.stdout)["trainer"] == tuned["overrides"]["trainer"]  # stdout: the config only
    expected = [f"export {k}={v}" for k, v in tuned["env"].items()] + [f"unset {k}" for k in tuned["unset_env"]]
    assert expected, tuned  # the tiny space tunes NCCL_ALGO: set or unset, it is in the tuned file
    lines = proc.stderr.splitlines()
    head = next(i for i, line in enumerate(lines) if "run before the training command" in line)
    assert lines[head + 1 :] == expected, proc.stderr
    # before it, what the merge changes in this config: speed only here (the tiny space has no semantic parameter)
    assert lines[0] == "# speed only (the training stays as it was):", proc.stderr
    before = {"micro": 1, "offload": True}
    changed = {k: v for k, v in tuned["overrides"]["trainer"].items() if before[k] != v}
    assert changed and lines[1:head] == [
        f"#   trainer.{k}: {json.dumps(before[k])} -> {json.dumps(v)}" for k, v in changed.items()
    ]
