"""``--baseline FILE`` as a user gets it wrong, given to the real CLI: one line naming the file and
what is wrong with it, exit 1, before any trial."""

from __future__ import annotations

import sys

import pytest

from tests.tuner.conftest import TINY_SPACE, TINY_TRAINER, one_line_error, run_cli

TUNED = "overrides:\n  trainer:\n    micro: 2\nstudy:\n  space: tiny\n"


@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"\x7fELF\x02\x01\x01\x00\x00\x00", "--baseline base.yaml is not a text file (binary content)"),
        (TUNED.encode() + b"# caf\xe9\n", "--baseline base.yaml: line 6 is not UTF-8 text (byte 0xe9)"),
        (TUNED.encode() + b"env: [1]\n", "--baseline base.yaml: 'env' must be a mapping, got list"),
        (TUNED.encode() + b"unset_env: NCCL_ALGO\n", "--baseline base.yaml: 'unset_env' must be a list, got str"),
        (
            TUNED.encode() + b"metrics: {runs_per_s: [.nan, 5]}\n",
            "metrics.runs_per_s must be throughputs above 0, got [nan, 5.0]",
        ),
    ],
    ids=["binary", "not-utf8", "env-list", "unset-str", "nan-throughput"],
)
def test_a_bad_baseline_file_is_one_line_naming_it(tmp_path, content, fragment):
    (tmp_path / "base.yaml").write_bytes(content)
    proc = _run_with_baseline(tmp_path, "base.yaml")
    one_line_error(proc, fragment)
    assert "trial 0" not in proc.stdout


def test_a_folder_as_the_baseline_is_called_a_folder(tmp_path):
    (tmp_path / "base.yaml").mkdir()
    one_line_error(_run_with_baseline(tmp_path, "base.yaml"), "--baseline base.yaml is a folder, not a file")


def _run_with_baseline(where, baseline: str):
    return run_cli(
        [
            "run",
            "--space",
            str(TINY_SPACE),
            "--series",
            "nightly",
            "--warm-start",
            "--baseline",
            baseline,
            "--trials",
            "1",
            "--",
            sys.executable,
            str(TINY_TRAINER),
        ],
        cwd=where,
        timeout=120,
    )
