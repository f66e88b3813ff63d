"""`nccl-tune spaces init -- COMMAND`: a starter space file from the command's --help."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.tuner.conftest import TINY_SPACE, run_cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ddp_train.py"


def test_init_writes_a_space_that_loads_and_never_overwrites(tmp_path):
    proc = run_cli(["spaces", "init", "-o", "space.yaml", "--", sys.executable, str(EXAMPLE)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "space.yaml").read_text()
    assert "arg: --batch-size" in text and "# check:" in text
    shown = run_cli(["spaces", "show", "space.yaml"], cwd=tmp_path)
    assert shown.returncode == 0 and "arg --gradient-checkpointing (switch)" in shown.stdout
    again = run_cli(["spaces", "init", "-o", "space.yaml", "--", sys.executable, str(EXAMPLE)], cwd=tmp_path)
    assert again.returncode == 1 and "already exists" in again.stderr and (tmp_path / "space.yaml").read_text() == text


def test_init_needs_a_command_after_dashdash(tmp_path):
    proc = run_cli(["spaces", "init"], cwd=tmp_path)
    assert proc.returncode == 1 and "usage: nccl-tune spaces init" in proc.stderr
    stray = run_cli(["spaces", "init", sys.executable, str(EXAMPLE)], cwd=tmp_path)
    assert stray.returncode == 1 and "comes before --" in stray.stderr


def test_show_names_a_rate_that_carries_its_own_time_once(tmp_path):
    """Megatron's preset reads TFLOP/s/GPU where the line prints it, else samples per second from
    its global batch size: ``spaces show`` names both, neither as ``TFLOP/s/GPU/s``."""
    space = Path(__file__).resolve().parents[2] / "benchmarks" / "landscapes" / "pipeline.yaml"
    shown = run_cli(["spaces", "show", str(space)], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "throughput in TFLOP/s/GPU or samples/s" in shown.stdout and "GPU/s" not in shown.stdout


def test_show_says_how_a_winner_is_proven_at_the_worst_batch(tmp_path):
    """``spaces show`` names the space's way to the longest batch, or that it names none."""
    (tmp_path / "packed.yaml").write_text(TINY_SPACE.read_text() + "  every_step_longest: true\n")
    shown = {}
    for name in ("packed.yaml", str(TINY_SPACE), "skyrl-text2sql"):
        proc = run_cli(["spaces", "show", name], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        shown[name] = next(line for line in proc.stdout.splitlines() if line.startswith("worst batch:"))
    assert "every step carries it" in shown["packed.yaml"]
    assert "names no way to reach it: a winner reads unproven there" in shown[str(TINY_SPACE)]
    skyrl = shown["skyrl-text2sql"]
    assert "runs once with generator.sampling_params.additional_kwargs" in skyrl and "extrapolated to min(" in skyrl
