"""examples/run_skyrl_sql_sim.sh: SkyRL's overrides, forwarded arguments, any working folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from nccl_tune.sim import skyrl_sql_overrides
from nccl_tune.sim.launcher import ModelLauncher

from .conftest import SCRIPT


def _argv_of_script(tmp_path: Path, *extra: str) -> list[str]:
    """Run the script with $PYTHON standing in for the interpreter; return the arguments it got."""
    record = tmp_path / "argv.json"
    fake = tmp_path / "fakepython"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/someone", "PYTHON": str(fake)}
    subprocess.run(["bash", str(SCRIPT), *extra], cwd=cwd, env=env, check=True, capture_output=True)
    return json.loads(record.read_text())


def test_the_script_passes_skyrls_overrides_then_its_arguments(tmp_path):
    argv = _argv_of_script(tmp_path, "trainer.micro_train_batch_size_per_gpu=4", "generator.sampling_params.stop=['x y']")
    assert argv[:2] == ["-m", "nccl_tune.sim.main_base"]
    assert argv[2:-2] == skyrl_sql_overrides("/home/someone")
    assert argv[-2:] == ["trainer.micro_train_batch_size_per_gpu=4", "generator.sampling_params.stop=['x y']"]


def test_the_model_launcher_starts_from_the_scripts_overrides():
    assert ModelLauncher(env={"HOME": "/home/someone"}).base_overrides == skyrl_sql_overrides("/home/someone")
