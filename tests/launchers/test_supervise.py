"""The three clocks as decisions over progress snapshots."""

from __future__ import annotations

import dataclasses

import pytest

from nccl_tune.launchers.base import TrialObserver, TrialProgress
from nccl_tune.launchers.progress import ProgressLedger, ProgressState
from nccl_tune.launchers.supervise import Watch, observer_decision
from nccl_tune.trial import SILENCE_PHASE, STARTUP_PHASE, Clocks, StopReason, StopRule

CLOCKS = Clocks(startup_timeout_s=100, stall_timeout_s=50, stall_floor_s=20, stall_multiplier=3, trial_timeout_s=1000)


def state(**kw) -> ProgressState:
    return ProgressState(**kw)


@pytest.mark.parametrize(
    "snapshot, now, expected",
    [
        (state(), 99, None),
        (state(), 100, StopReason.STARTUP),
        (state(step_times_s=(1.0, 1.0, 1.0), last_progress_t=5), 6, StopReason.MEASURED),
        (state(last_progress_t=990), 1000, StopReason.BUDGET),
        (state(last_progress_t=10, open_phases=("step",)), 59, None),
        (state(last_progress_t=10, open_phases=("step",)), 60, StopReason.STALL),
    ],
)
def test_clock_decisions(snapshot: ProgressState, now: float, expected: StopReason | None) -> None:
    decision = Watch(CLOCKS, StopRule(1, 2), started_t=0).check(snapshot, now)
    assert (decision.reason if decision else None) is expected


@pytest.mark.parametrize(
    "snapshot, kept",
    [
        # one line per step: the stop keeps warm-up plus measured steps, not the two read past them
        (state(step_times_s=(1.0,) * 5, step_line_ends=(1, 2, 3, 4, 5), last_progress_t=5), 3),
        # a line every 4th step: the line that completed them stands for all its 4 steps
        (state(step_times_s=(1.0,) * 8, step_line_ends=(4, 8), last_progress_t=5), 8),
    ],
)
def test_a_measured_stop_keeps_the_steps_it_counted(snapshot: ProgressState, kept: int) -> None:
    decision = Watch(CLOCKS, StopRule(1, 2), started_t=0).check(snapshot, 6)
    assert decision is not None and decision.reason is StopReason.MEASURED
    assert decision.steps_kept == kept
    cut = snapshot.upto(decision.steps_kept)
    assert len(cut.step_times_s) == kept and cut.step_line_ends[-1] == kept


def test_a_state_cut_to_its_first_steps_cuts_every_per_step_field() -> None:
    full = state(
        step_times_s=(2.0, 1.0, 1.1, 0.9),
        step_line_ends=(1, 2, 3, 4),
        step_rates=(5.0, 9.0, 8.0, 10.0),
        untimed_steps=(1, 3),
        step_tokens=(100.0, None, 120.0, 130.0),
        step_peak_frac=(0.5, 0.6, 0.7, 0.9),
    )
    cut = full.upto(3)
    assert cut.step_times_s == (2.0, 1.0, 1.1) and cut.step_line_ends == (1, 2, 3)
    assert cut.step_rates == (5.0, 9.0, 8.0) and cut.untimed_steps == (1,)
    assert cut.step_tokens == (100.0, None, 120.0) and cut.step_peak_frac == (0.5, 0.6, 0.7)
    assert full.upto(None) is full and full.upto(9) is full


@pytest.mark.parametrize(
    "known, trial_max, open_phases, deadline",
    [
        ({}, {}, ("step", "generate"), 50),  # unknown phase: the plain stall timeout
        ({"generate": 1200}, {}, ("step", "generate"), 3600),  # slow generate known from the study
        ({"generate": 1}, {}, ("step", "generate"), 20),  # never below the floor
        ({}, {"generate": 400}, ("step", "generate"), 1200),  # learned in this very trial
        ({"generate": 100}, {"generate": 400}, ("step", "generate"), 1200),  # the larger of the two
        ({"generate": 1200}, {}, ("step", "policy_train"), 50),  # only the open phase counts
        ({"generate": 1200}, {}, (), 50),
    ],
)
def test_adaptive_stall_deadline(known, trial_max, open_phases, deadline) -> None:
    clocks = Clocks(stall_timeout_s=50, stall_floor_s=20, stall_multiplier=3, trial_timeout_s=1e6, phase_max_s=known)
    watch = Watch(clocks, StopRule(), started_t=0)
    snap = state(phase_max_s=trial_max, open_phases=open_phases, last_progress_t=0)
    assert watch.stall_deadline_s(snap) == deadline
    assert watch.check(snap, deadline - 0.01) is None
    decision = watch.check(snap, deadline)
    assert decision.reason is StopReason.STALL
    assert (decision.open_phase is None) == (not open_phases)
    if open_phases:
        assert f"in phase '{open_phases[-1]}'" in decision.detail


@pytest.mark.parametrize(
    "snapshot, due",
    [
        (state(), (100, StopReason.STARTUP)),
        (state(last_progress_t=10, open_phases=("step",)), (60, StopReason.STALL)),
        (state(last_progress_t=960, open_phases=("step",)), (1000, StopReason.BUDGET)),
        (state(last_progress_t=950, open_phases=("step",)), (1000, StopReason.BUDGET)),  # a tie: the budget
    ],
)
def test_due_says_when_the_first_clock_fires_and_check_agrees(snapshot: ProgressState, due) -> None:
    watch = Watch(CLOCKS, StopRule(1, 2), started_t=0)
    assert watch.due(snapshot) == due
    assert watch.check(snapshot, due[0] - 0.01) is None
    assert watch.check(snapshot, due[0]).reason is due[1]


class Asks(TrialObserver):
    """An observer that asks for ``reason``, saying ``why``."""

    def __init__(self, reason: StopReason | None, why: str | None = None) -> None:
        self.reason, self.why = reason, why

    def should_stop(self, spec, progress):
        return self.reason

    def stop_detail(self):
        return self.why


def test_the_observer_answer_becomes_a_decision(make_spec) -> None:
    spec = make_spec()
    snap = state(step_times_s=(1.0,), open_phases=("step",))
    progress = TrialProgress(elapsed_s=5.0, step_times_s=(1.0,), open_phase="step", last_progress_s=0.1)

    def decide(observer: TrialObserver):
        return observer_decision(observer, spec, progress, snap)

    assert decide(Asks(None)) is None
    early = decide(Asks(StopReason.EARLY_STOP))
    assert early.reason is StopReason.EARLY_STOP and early.open_phase == "step"
    assert early.detail == "stopped early after 1 steps: slower than the best trial so far"
    why = decide(Asks(StopReason.EARLY_STOP, "7.0 samples/s over 1 screened step, under the bar of 7.5"))
    assert why.detail == "stopped early after 1 steps: 7.0 samples/s over 1 screened step, under the bar of 7.5"
    assert decide(Asks(StopReason.INTERRUPTED)).reason is StopReason.INTERRUPTED
    with pytest.raises(ValueError, match="may only ask for interrupted or early_stop"):
        decide(Asks(StopReason.MEASURED))


@pytest.mark.parametrize(
    "startup_s, deadline",
    [
        (None, 100),  # no start-up measured yet: the start-up timeout
        (10, 30),  # three times the longest start-up measured
        (2, 20),  # never below the floor
        (60, 100),  # never above the start-up timeout
    ],
)
def test_a_measured_startup_shortens_the_startup_deadline(startup_s, deadline) -> None:
    known = {} if startup_s is None else {STARTUP_PHASE: startup_s}
    watch = Watch(CLOCKS.learned(known), StopRule(1, 2), started_t=0)
    assert watch.check(state(), deadline - 0.01) is None
    decision = watch.check(state(), deadline)
    assert decision.reason is StopReason.STARTUP and f"start-up deadline of {deadline:g} s" in decision.detail
    assert ("longest start-up measured" in decision.detail) == (deadline < 100)


def test_the_first_progress_line_measures_the_startup_when_the_launch_time_is_known() -> None:
    ledger = ProgressLedger(launch_t=100.0)
    ledger.phase_started("generate", 142.5)
    ledger.step_finished(3.0, 150.0)
    assert ledger.snapshot().phase_max_s[STARTUP_PHASE] == 42.5
    unknown = ProgressLedger()
    unknown.step_finished(3.0, 150.0)
    assert STARTUP_PHASE not in unknown.snapshot().phase_max_s


def test_the_ledger_measures_the_longest_silence_between_progress_lines() -> None:
    ledger = ProgressLedger(launch_t=0.0)
    for t in (40.0, 42.0, 44.5, 45.0):  # the first line ends the start-up, not a silence
        ledger.step_finished(2.0, t)
    assert ledger.snapshot().phase_max_s[SILENCE_PHASE] == 2.5


@pytest.mark.parametrize(
    "earlier_steps, steps_done, deadline",
    [
        (0, 1, 50),  # no earlier run: the stall timeout
        (4, 1, 24),  # 3x the longest silence of the earlier runs (8 s), above the floor
        (4, 3, 24),
        (4, 4, 50),  # past the steps the earlier runs reached: a checkpoint may come
        (4, 0, 50),  # before the first step
    ],
)
def test_between_steps_the_stall_timeout_follows_the_silences_earlier_runs_measured(
    earlier_steps, steps_done, deadline
) -> None:
    clocks = dataclasses.replace(CLOCKS.learned({SILENCE_PHASE: 8.0, "step": 2.0}), silence_steps=earlier_steps)
    snap = state(step_times_s=(3.0,) * steps_done, last_progress_t=10.0)
    watch = Watch(clocks, StopRule(1, 8), started_t=0)
    assert watch.check(snap, 10 + deadline - 0.01) is None
    decision = watch.check(snap, 10 + deadline)
    assert decision.reason is StopReason.STALL
    assert ("stall timeout 24 s, 3x the longest wait between steps measured, 8 s" in decision.detail) == (deadline < 50)
    floored = dataclasses.replace(clocks, stall_floor_s=30.0)
    if deadline < 50:  # the floor over a shorter multiple says so
        assert (
            "stall timeout 30 s, the floor over 3x the longest wait"
            in Watch(floored, StopRule(1, 8), 0).check(snap, 40.0).detail
        )
    slow = state(step_times_s=(3.0,) * steps_done, last_progress_t=10.0, phase_max_s={"step": 12.0})
    assert watch.stall_deadline_s(slow) == (min(50, 36) if deadline < 50 else 50)  # its own slow steps count
    with_phase = state(step_times_s=(3.0,) * steps_done, last_progress_t=10.0, open_phases=("generate",))
    assert watch.stall_deadline_s(with_phase) == 50  # an open phase of unknown length: the stall timeout
