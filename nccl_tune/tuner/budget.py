"""The run's wall-clock budget (``--budget``): no new trial starts after it."""

from __future__ import annotations

import time


class Budget:
    """The deadline of one run (None: no budget)."""

    def __init__(self, budget_s: float | None, now: float | None = None) -> None:
        start = time.monotonic() if now is None else now
        self.deadline = start + budget_s if budget_s else None

    def spent(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline
