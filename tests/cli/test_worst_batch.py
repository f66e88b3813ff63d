"""A winner at the worst batch, as a user reads it: where every step carries the longest batch
(``stability.every_step_longest``), the tuned YAML says proven with the peak the runs saw; where the
space names no way to reach it, it says unproven and names the key that would prove it."""

from __future__ import annotations

import sys

import pytest
import yaml

from tests.tuner.conftest import TINY_SPACE, TINY_TRAINER, run_cli

pytestmark = pytest.mark.timeout(300)


def _tuned(tmp_path, space_text: str) -> tuple[str, dict]:
    space = tmp_path / "space.yaml"
    space.write_text(space_text)
    proc = run_cli(
        ["run", "--space", str(space), "--trials", "2", "--confirm", "0", "--seed", "1", "-o", "tuned.yaml", "--"]
        + [sys.executable, str(TINY_TRAINER)],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "tuned.yaml").read_text()
    return text.splitlines()[0], yaml.safe_load(text)["metrics"]["worst_case"]


def test_a_space_whose_every_step_is_the_longest_exports_a_proven_winner(tmp_path):
    text = TINY_SPACE.read_text()
    assert "every_step_longest" not in text
    first, worst = _tuned(tmp_path, text + "  every_step_longest: true\n")
    assert "UNPROVEN" not in first, first
    assert worst["stable"] == "proven at the worst batch" and worst["how"] == "every step", worst
    assert "to_prove" not in worst
    assert 0 < worst["worst_peak_frac"] == worst["peak_seen_frac"] < 1, worst
    assert worst["headroom_worst_frac"] == pytest.approx(1 - worst["worst_peak_frac"], abs=1e-4)


def test_a_space_that_names_no_way_to_the_worst_batch_says_how_to_prove_it(tmp_path):
    first, worst = _tuned(tmp_path, TINY_SPACE.read_text())
    assert "UNPROVEN AT THE WORST BATCH" in first, first
    assert worst["stable"] == "unproven at the worst batch" and worst["how"] is None, worst
    assert "stability.every_step_longest: true" in worst["to_prove"], worst
