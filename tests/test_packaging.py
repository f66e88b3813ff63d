"""What a user installs: the wheel holds the nccl_tune package and its built-in spaces, and nothing of
the twin (``twin/``: the repository's test fixture and demo, with its mirrors of SkyRL's modules)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_ships_the_package_and_its_spaces_and_no_twin(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            str(ROOT),
            "-w",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
        timeout=240,
    )
    (wheel,) = tmp_path.glob("nccl_tune-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"nccl_tune", next(t for t in tops if t.endswith(".dist-info"))}, tops
    assert "nccl_tune/search_spaces/skyrl-text2sql.yaml" in names and "nccl_tune/cli.py" in names
    assert not [n for n in names if "/sim/" in n or "skyrl_train" in n or "/skyrl/" in n or "twin" in n]
