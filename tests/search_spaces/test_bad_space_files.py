"""A space file as a new user gets it wrong, read by the real CLI (`nccl-tune spaces show`): one line
on stderr naming the file and the key or value, exit 1, never a traceback or a silent default."""

from __future__ import annotations

import sys

import pytest

from tests.tuner.conftest import TINY_SPACE, TINY_TRAINER, one_line_error, run_cli

TINY = TINY_SPACE.read_text()

BAD = {
    "not UTF-8": (
        TINY.replace("description:", "description: caf\xe9 ").encode("latin-1"),
        "line 2 is not UTF-8 text (byte 0xe9)",
    ),
    "a number at the top": (
        b"42\n",
        "holds a single int (42), not a YAML mapping of keys; write name: and parameters:",
    ),
    "empty": (b"", "is empty; write name: and parameters:"),
    "comments only": (b"# a space, some day\n", "is empty; write name: and parameters:"),
    "stall timeout nan": (
        TINY.replace("stall_timeout_s: 10", "stall_timeout_s: .nan").encode(),
        "clocks.stall_timeout_s must be a finite number above 0, got nan",
    ),
    "trial timeout inf": (
        TINY.replace("trial_timeout_s: 60", "trial_timeout_s: .inf").encode(),
        "clocks.trial_timeout_s must be a finite number above 0, got inf",
    ),
    "stall timeout 0": (
        TINY.replace("stall_timeout_s: 10", "stall_timeout_s: 0").encode(),
        "clocks.stall_timeout_s must be a finite number above 0, got 0",
    ),
    "headroom above 1": (
        TINY.replace("min_headroom_frac: 0.05", "min_headroom_frac: 5").encode(),
        "stability.min_headroom_frac must be a fraction below 1",
    ),
    "semantic as a string": (
        TINY.replace("memory: increasing", "memory: increasing\n    semantic: 'no'").encode(),
        "parameters[0] (trainer.micro): semantic must be true or false, got 'no'",
    ),
    "misspelt parameter key": (
        TINY.replace("memory: increasing", "memroy: increasing").encode(),
        "unknown key in parameters[0] (trainer.micro): 'memroy' (did you mean 'memory'?)",
    ),
    "misspelt top key": (
        TINY.replace("stability:", "stabilty:").encode(),
        "unknown key 'stabilty' (did you mean 'stability'?)",
    ),
    "misspelt kind": (TINY.replace("kind: pow2", "kind: pow").encode(), "unknown kind 'pow' (did you mean 'pow2'?)"),
    "no kind": (TINY.replace("    kind: pow2\n", "").encode(), "parameters[0] (trainer.micro): 'kind' is required"),
    "every_step_longest a word": (
        TINY.replace("min_headroom_frac: 0.05", "min_headroom_frac: 0.05\n  every_step_longest: yes please").encode(),
        "stability.every_step_longest must be true or false, got 'yes please'",
    ),
    "every_step_longest with a forced batch": (
        TINY.replace(
            "min_headroom_frac: 0.05",
            "min_headroom_frac: 0.05\n  every_step_longest: true\n  force_worst_case:\n    --pad-to-max-length: null",
        ).encode(),
        "stability.every_step_longest is true and stability.force_worst_case is set",
    ),
    "every_step_longest with worst-case tokens": (
        TINY.replace(
            "min_headroom_frac: 0.05", "min_headroom_frac: 0.05\n  every_step_longest: true\n  worst_case_tokens: 4096"
        ).encode(),
        "none longer to force or predict; keep one of the two",
    ),
    "force_worst_case a list": (
        TINY.replace("min_headroom_frac: 0.05", "min_headroom_frac: 0.05\n  force_worst_case: [a=1]").encode(),
        "stability.force_worst_case must be a non-empty mapping: map each setting",
    ),
    "force_worst_case naming an unknown value": (
        TINY.replace(
            "min_headroom_frac: 0.05", "min_headroom_frac: 0.05\n  force_worst_case:\n    trainer.pad: trainer.longest"
        ).encode(),
        "stability.force_worst_case.trainer.pad names 'trainer.longest', which is not a parameter",
    ),
    "force_worst_case mapping for an env var": (
        TINY.replace(
            "min_headroom_frac: 0.05", "min_headroom_frac: 0.05\n  force_worst_case:\n    PAD_MAX: {a: 1}"
        ).encode(),
        "stability.force_worst_case.PAD_MAX is a mapping; only a config key takes a mapping",
    ),
    "force_worst_case a config key with no value": (
        TINY.replace(
            "min_headroom_frac: 0.05", "min_headroom_frac: 0.05\n  force_worst_case:\n    trainer.pad:"
        ).encode(),
        "stability.force_worst_case.trainer.pad has no value; only a --flag may stand alone",
    ),
    "force_worst_case a protected variable": (
        TINY.replace(
            "min_headroom_frac: 0.05", "min_headroom_frac: 0.05\n  force_worst_case:\n    LD_PRELOAD: 1"
        ).encode(),
        "stability.force_worst_case.LD_PRELOAD: a space may not set LD_PRELOAD",
    ),
    "a number as the name": (
        TINY.replace("name: tiny", "name: 5").encode(),
        "'name' is required (a short identifier such as my-space, got 5)",
    ),
}


@pytest.mark.parametrize("content, fragment", BAD.values(), ids=list(BAD))
def test_a_bad_space_file_is_one_line_naming_it(tmp_path, content, fragment):
    path = tmp_path / "space.yaml"
    path.write_bytes(content)
    proc = run_cli(["spaces", "show", str(path)], cwd=tmp_path, timeout=60)
    one_line_error(proc, fragment, str(path))


def test_a_folder_given_as_the_space_is_called_a_folder(tmp_path):
    (tmp_path / "space.yaml").mkdir()
    proc = run_cli(
        ["run", "--dry-run", "--space", "space.yaml", "--", sys.executable, str(TINY_TRAINER)], cwd=tmp_path, timeout=60
    )
    one_line_error(proc, "space file space.yaml is a folder, not a file", "space.yaml")


def test_an_empty_space_name_is_refused(tmp_path):
    proc = run_cli(["spaces", "show", ""], cwd=tmp_path, timeout=60)
    one_line_error(proc, "the space name is empty; give one of: skyrl-text2sql", "")


@pytest.mark.parametrize("timeout", ["0", "-1", "nan", "inf"])
def test_spaces_init_refuses_a_timeout_that_is_no_time(tmp_path, timeout):
    proc = run_cli(
        ["spaces", "init", "--timeout", timeout, "--", sys.executable, str(TINY_TRAINER)], cwd=tmp_path, timeout=60
    )
    one_line_error(proc, f"--timeout {timeout}: must be a number of seconds above 0", "")


def test_a_categorical_with_more_choices_than_a_search_can_use_says_so(tmp_path):
    choices = ", ".join(str(i) for i in range(10_000))
    (tmp_path / "big.yaml").write_text(
        f"name: big\nparameters:\n  - {{name: NCCL_X, kind: categorical, choices: [{choices}], default: 0}}\n"
    )
    proc = run_cli(["run", "--space", "big.yaml", "--dry-run", "--", sys.executable, "-c", "pass"], cwd=tmp_path)
    line = one_line_error(proc, "parameters[0] (NCCL_X): 10000 choices, more than the 4096 a search can tell apart")
    assert "alias" not in line
