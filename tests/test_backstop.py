"""The backstop (``tests/backstop.py``) ends a test that pytest-timeout's signal cannot reach."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

BLOCKED = """
import signal, time
import pytest

@pytest.mark.timeout(1)
def test_blocked_in_c():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # as if stuck in C: the handler never runs
    time.sleep(60)
"""


@pytest.mark.timeout(120)
def test_a_test_the_timeout_signal_cannot_reach_is_ended_with_its_stacks(tmp_path: Path) -> None:
    (tmp_path / "test_blocked.py").write_text(BLOCKED)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "tests.backstop", "-o", "backstop_grace_s=2"]
    start = time.monotonic()
    proc = subprocess.run(
        [*argv, "-p", "no:cacheprovider", str(tmp_path / "test_blocked.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    took_s = time.monotonic() - start
    assert proc.returncode != 0
    assert took_s < 50, f"the blocked test ran {took_s:.0f} s: the backstop did not end it"
    assert "Timeout" in proc.stderr and "test_blocked_in_c" in proc.stderr, proc.stderr[-2000:]
