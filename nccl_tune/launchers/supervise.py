"""The three clocks of a running trial: start-up deadline, adaptive stall timeout, trial budget.

``Watch`` is a pure decision over a progress snapshot and a time, so the same rules serve the
local launcher (which polls with the wall clock) and the model launcher (which jumps from one
modelled event to the next and asks ``Watch.due`` when the next clock would fire), and they are
tested without processes. The observer's answer to ``should_stop`` becomes a ``Decision`` here too.
"""

from __future__ import annotations

from dataclasses import dataclass

from nccl_tune.launchers.base import TrialObserver, TrialProgress
from nccl_tune.launchers.progress import ProgressState
from nccl_tune.trial import STARTUP_PHASE, Clocks, StopReason, StopRule, TrialSpec

_OBSERVER_REASONS = (StopReason.INTERRUPTED, StopReason.EARLY_STOP)


@dataclass(frozen=True)
class Decision:
    """Stop the trial, and why (``detail`` is one line for the evidence)."""

    reason: StopReason
    detail: str
    open_phase: str | None = None
    silent_s: float | None = None
    """Seconds since the last progress line (stall), or since launch (start-up)."""
    steps_kept: int | None = None
    """The finished steps that are the trial's: those read when the stop was decided (for a trial
    that measured its steps, up to the end of the step line that completed them). A step line read
    while the trial is torn down is not one of its steps. None: every step read (the command ended,
    or the tuner was interrupted)."""


class Watch:
    """Decides when a trial must stop, from its progress and the clocks."""

    def __init__(self, clocks: Clocks, stop: StopRule, started_t: float) -> None:
        self.clocks = clocks
        self.stop = stop
        self.started_t = started_t
        self._due: tuple[ProgressState, tuple[float, StopReason]] | None = None

    def stall_deadline_s(self, state: ProgressState) -> float:
        """Seconds of silence allowed now: the clocks' rule for the innermost open phase, with
        what this trial has measured so far."""
        return self.clocks.stall_deadline_s(state.open_phase, state.phase_max_s, steps_done=len(state.step_times_s))

    def startup_deadline_text(self) -> str:
        """The start-up deadline as the stop detail gives it, with where it comes from when the
        study's measured start-ups shortened it."""
        c = self.clocks
        deadline, known = c.startup_deadline_s(), c.phase_max_s.get(STARTUP_PHASE)
        if known is None or deadline >= c.startup_timeout_s:
            return f"{deadline:g} s"
        return f"{deadline:.3g} s ({c.stall_multiplier:g}x the longest start-up measured, {known:.3g} s)"

    def due(self, state: ProgressState) -> tuple[float, StopReason]:
        """When the first clock fires if no further progress comes, and which one (on a tie,
        the budget)."""
        if self._due is not None and self._due[0] is state:  # asked again about the same snapshot
            return self._due[1]
        budget_t = self.started_t + self.clocks.trial_timeout_s
        if state.last_progress_t is None:
            fire_t, reason = self.started_t + self.clocks.startup_deadline_s(), StopReason.STARTUP
        else:
            fire_t, reason = state.last_progress_t + self.stall_deadline_s(state), StopReason.STALL
        due = (budget_t, StopReason.BUDGET) if budget_t <= fire_t else (fire_t, reason)
        self._due = (state, due)
        return due

    def check(self, state: ProgressState, now: float) -> Decision | None:
        """The reason to stop now, or None to keep watching."""
        steps, total = len(state.step_times_s), state.warmup_for(self.stop.warmup_steps) + self.stop.measured_steps
        if steps >= total:
            kept = state.line_end_at(total)
            return Decision(StopReason.MEASURED, f"all {total} steps done", state.open_phase, steps_kept=kept)
        due_t, reason = self.due(state)
        if now < due_t:
            return None
        of_steps = f"{steps} of {total} steps"
        if reason is StopReason.BUDGET:
            detail = f"trial budget of {self.clocks.trial_timeout_s:g} s used up after {of_steps}"
            return Decision(reason, detail, state.open_phase, steps_kept=steps)
        if reason is StopReason.STARTUP:
            detail = f"no progress line within the start-up deadline of {self.startup_deadline_text()}"
            return Decision(reason, detail, None, now - self.started_t, steps_kept=0)
        silent = now - (state.last_progress_t or 0.0)
        where = f" in phase '{state.open_phase}'" if state.open_phase else ""
        detail = (
            f"no progress for {silent:.1f} s{where} after {of_steps} (stall timeout {self.stall_deadline_text(state)})"
        )
        return Decision(reason, detail, state.open_phase, silent, steps_kept=steps)

    def stall_deadline_text(self, state: ProgressState) -> str:
        """The stall deadline as the stop detail gives it, with where it comes from when the
        silences and steps the study measured between steps shortened it."""
        c, deadline = self.clocks, self.stall_deadline_s(state)
        between = c.between_steps_s(state.phase_max_s)
        if state.open_phase is not None or between is None or deadline >= c.stall_timeout_s:
            return f"{deadline:g} s"
        rule = f"{c.stall_multiplier:g}x the longest wait between steps measured, {between:.3g} s"
        return f"{deadline:.3g} s, " + (f"the floor over {rule}" if deadline <= c.stall_floor_s else rule)


def observer_decision(
    observer: TrialObserver, spec: TrialSpec, progress: TrialProgress, state: ProgressState
) -> Decision | None:
    """The observer's answer to ``should_stop`` as a decision (None: keep watching)."""
    asked = observer.should_stop(spec, progress)
    if asked is None:
        return None
    reason = StopReason(asked)
    if reason not in _OBSERVER_REASONS:
        raise ValueError(
            f"should_stop returned {reason.value!r}; an observer may only ask for interrupted or early_stop"
        )
    if reason is StopReason.INTERRUPTED:
        return Decision(reason, "the tuner was interrupted", state.open_phase)
    steps = len(state.step_times_s)
    why = observer.stop_detail() or "slower than the best trial so far"
    return Decision(reason, f"stopped early after {steps} steps: {why}", state.open_phase, steps_kept=steps)
