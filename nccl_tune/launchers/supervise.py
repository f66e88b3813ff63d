"""The three clocks of a running trial: start-up deadline, adaptive stall timeout, trial budget.

``Watch.check`` is a pure decision over a progress snapshot and the time, so the supervising
loop stays small and the rules are tested without processes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from nccl_tune.launchers.progress import ProgressState
from nccl_tune.trial import Clocks, StopReason, StopRule


@dataclass(frozen=True)
class Decision:
    """Stop the trial, and why (``detail`` is one line for the evidence)."""

    reason: StopReason
    detail: str
    open_phase: str | None = None
    silent_s: float | None = None
    """Seconds since the last progress line (stall), or since launch (start-up)."""


class Watch:
    """Decides when a trial must stop, from its progress and the clocks."""

    def __init__(self, clocks: Clocks, stop: StopRule, started_t: float) -> None:
        self.clocks = clocks
        self.stop = stop
        self.started_t = started_t

    def stall_deadline_s(self, state: ProgressState) -> float:
        """Seconds of silence allowed now: the clocks' rule for the innermost open phase, with
        the study's known phase durations raised by what this trial has already measured."""
        known = dict(self.clocks.known_phase_s)
        for phase, seconds in state.phase_max_s.items():
            known[phase] = max(seconds, known.get(phase, 0.0))
        return replace(self.clocks, known_phase_s=known).stall_deadline_s(state.open_phase)

    def check(self, state: ProgressState, now: float) -> Decision | None:
        """The reason to stop now, or None to keep watching."""
        steps = len(state.step_times_s)
        elapsed = now - self.started_t
        if steps >= self.stop.total_steps:
            return Decision(StopReason.MEASURED, f"all {self.stop.total_steps} steps done", state.open_phase)
        if elapsed >= self.clocks.trial_timeout_s:
            return Decision(
                StopReason.BUDGET,
                f"trial budget of {self.clocks.trial_timeout_s:g} s used up after {steps} of {self.stop.total_steps} steps",
                state.open_phase,
            )
        if state.last_progress_t is None:
            if elapsed >= self.clocks.startup_timeout_s:
                return Decision(
                    StopReason.STARTUP,
                    f"no progress line within the start-up deadline of {self.clocks.startup_timeout_s:g} s",
                    None,
                    elapsed,
                )
            return None
        silent = now - state.last_progress_t
        deadline = self.stall_deadline_s(state)
        if silent >= deadline:
            where = f" in phase '{state.open_phase}'" if state.open_phase else ""
            return Decision(
                StopReason.STALL,
                f"no progress for {silent:.1f} s{where} after {steps} of {self.stop.total_steps} steps "
                f"(stall timeout {deadline:g} s)",
                state.open_phase,
                silent,
            )
        return None
