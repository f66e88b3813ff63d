"""examples/run_skyrl_sql_sim.sh: SkyRL's overrides, forwarded arguments, any working folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from twin import skyrl_sql_overrides
from twin.launcher import ModelLauncher
from twin.layout import Layout

from .conftest import LEGACY_SCRIPT, REPO, SCRIPT


def _argv_of_script(tmp_path: Path, *extra: str, script: Path = SCRIPT) -> list[str]:
    """Run the script with $PYTHON standing in for the interpreter; return the arguments it got."""
    record = tmp_path / "argv.json"
    fake = tmp_path / "fakepython"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\nopen({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
    )
    fake.chmod(0o755)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/someone", "PYTHON": str(fake)}
    subprocess.run(["bash", str(script), *extra], cwd=cwd, env=env, check=True, capture_output=True)
    return json.loads(record.read_text())


@pytest.mark.parametrize(
    "script, layout, module",
    [
        (SCRIPT, Layout.TODAY, "twin.skyrl.train.entrypoints.main_base"),
        (LEGACY_SCRIPT, Layout.LEGACY, "twin.skyrl_train.entrypoints.main_base"),
    ],
    ids=["today", "legacy"],
)
def test_the_script_passes_skyrls_overrides_then_its_arguments(tmp_path, script, layout, module):
    argv = _argv_of_script(
        tmp_path, "trainer.micro_train_batch_size_per_gpu=4", "generator.sampling_params.stop=['x y']", script=script
    )
    assert argv[:2] == ["-m", module]
    assert argv[2:-2] == skyrl_sql_overrides("/home/someone", layout)
    assert argv[-2:] == ["trainer.micro_train_batch_size_per_gpu=4", "generator.sampling_params.stop=['x y']"]


def _override_lines(text: str) -> list[str]:
    """The ``key=value`` lines of a script's command (continuation lines), without their values."""
    return [
        ln.strip().split("=", 1)[0]
        for ln in text.splitlines()
        if ln.startswith("  ") and "=" in ln and ln.rstrip().endswith("\\")
    ]


def test_the_script_mirrors_skyrls_current_script_line_for_line():
    """The keys, in order, of SkyRL's examples/train/text_to_sql/run_skyrl_sql.sh (August 2026)."""
    keys = _override_lines(SCRIPT.read_text())
    assert keys == [t.split("=", 1)[0] for t in skyrl_sql_overrides("/h")]
    assert "-m twin.skyrl.train.entrypoints.main_base" in SCRIPT.read_text()
    assert (
        keys[keys.index("generator.eval_sampling_params.stop") + 1]
        == "generator.eval_sampling_params.max_generate_length"
    )
    assert "generator.async_engine" not in keys and "trainer.strategy" in keys
    legacy = _override_lines(LEGACY_SCRIPT.read_text())
    assert legacy == [t.split("=", 1)[0] for t in skyrl_sql_overrides("/h", Layout.LEGACY)]
    assert (REPO / "examples" / "run_skyrl_sql_sim_legacy.sh").is_file()


def test_the_model_launcher_starts_from_the_scripts_overrides():
    assert ModelLauncher(env={"HOME": "/home/someone"}).base_overrides == skyrl_sql_overrides("/home/someone")
