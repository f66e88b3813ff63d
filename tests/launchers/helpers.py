"""Helpers for launcher tests (importable from test modules; fixtures live in conftest.py)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from nccl_tune.launchers.base import TrialObserver
from nccl_tune.trial import StopReason

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


class RecordingObserver(TrialObserver):
    """A TrialObserver that records every callback with its time, and can ask to stop."""

    def __init__(
        self,
        stop_after_steps: int | None = None,
        answer: StopReason = StopReason.EARLY_STOP,
        raise_on_poll: int | None = None,
        raise_after_steps: int = 0,
    ):
        """``raise_on_poll``: raise ``KeyboardInterrupt`` from that poll on, once ``raise_after_steps``
        steps are done."""
        self.calls: list[tuple[float, str, object]] = []
        self.polls = 0
        self.stop_after_steps = stop_after_steps
        self.answer = answer
        self.raise_on_poll = raise_on_poll
        self.raise_after_steps = raise_after_steps
        self.last_progress: object = None

    def _rec(self, kind: str, value: object) -> None:
        self.calls.append((time.monotonic(), kind, value))

    def on_start(self, spec, pid):
        self._rec("start", pid)

    def on_phase(self, spec, phase, seconds):
        self._rec("phase", (phase, seconds))

    def on_step(self, spec, step_index, seconds):
        self._rec("step", (step_index, seconds))

    def on_memory(self, spec, peak_gib):
        self._rec("memory", peak_gib)

    def should_stop(self, spec, progress):
        self.polls += 1
        self.last_progress = progress
        if (
            self.raise_on_poll is not None
            and self.polls >= self.raise_on_poll
            and len(progress.step_times_s) >= self.raise_after_steps
        ):
            raise KeyboardInterrupt
        if self.stop_after_steps is not None and len(progress.step_times_s) >= self.stop_after_steps:
            return self.answer
        return None

    def on_stopping(self, spec, reason, detail):
        self._rec("stopping", reason)

    def on_end(self, spec, result):
        self._rec("end", result.status)

    def kinds(self, kind: str) -> list[object]:
        return [v for _, k, v in self.calls if k == kind]

    def last_time(self, *kinds: str) -> float:
        return max(t for t, k, _ in self.calls if k in kinds)


def wait_until_marked(study: str, pid: int, timeout_s: float = 10.0) -> None:
    """Wait until process ``pid`` shows its marker of ``study``: a process just past ``exec()`` may
    show an empty environment for a moment, and a test's precondition is a process that carries it."""
    from nccl_tune.launchers.teardown import find_marked, study_match

    deadline = time.monotonic() + timeout_s
    while pid not in {p.pid for p in find_marked(study_match(study))}:
        if time.monotonic() > deadline:
            raise AssertionError(f"pid {pid} never showed a marker of study {study}")
        time.sleep(0.05)
