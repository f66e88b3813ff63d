"""Files the user names, read by the real CLI: a folder, another encoding, a YAML syntax error are one
line naming the file, the same way for every command that reads one."""

from __future__ import annotations

import pytest

from tests.tuner.conftest import run_cli

TUNED = "overrides:\n  trainer:\n    micro: 2\n"


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda p: p.mkdir(), "config file cfg.yaml is a folder, not a file; give a YAML file"),
        (
            lambda p: p.write_bytes(b"trainer:\n  name: caf\xe9\n"),
            "config file cfg.yaml: line 2 is not UTF-8 text (byte 0xe9)",
        ),
        (lambda p: p.write_bytes(b"trainer: [\n"), "config file cfg.yaml: line 2 YAML syntax error"),
    ],
    ids=["folder", "latin-1", "syntax"],
)
def test_a_config_file_that_cannot_be_read_is_one_line(tmp_path, make, fragment):
    (tmp_path / "tuned.yaml").write_text(TUNED)
    make(tmp_path / "cfg.yaml")
    proc = run_cli(["apply", "tuned.yaml", "--into", "cfg.yaml"], cwd=tmp_path, timeout=60)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in proc.stderr, proc.stderr
