"""Helpers for launcher tests (importable from test modules; fixtures live in conftest.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

SCRIPTS = Path(__file__).parent / "scripts"
FAKE_TRAINER = SCRIPTS / "fake_trainer.py"
DRIVER = SCRIPTS / "driver.py"


def trainer_argv(*args: str) -> list[str]:
    """Command line of the fake trainer with ``args``."""
    return [sys.executable, str(FAKE_TRAINER), *args]


def wait_for_json(path: Path, timeout_s: float = 30.0) -> dict:
    """The JSON content of ``path`` once it exists."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return json.loads(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")
