"""Step lines that come late (block-buffered output): their own timestamps time them, or nothing does."""

from __future__ import annotations

import pytest

from nccl_tune.launchers.progress import ProgressTracker
from nccl_tune.launchers.step_clock import StepClock, line_stamp
from nccl_tune.trial import ProgressRules

RULES = ProgressRules(step_end=(r"train step (?P<step>\d+) done",))


@pytest.mark.parametrize(
    ("a", "b", "gap"),
    [
        ("2026-08-01 12:34:56.100 | INFO | x", "2026-08-01 12:34:57.350 | INFO | x", 1.25),
        ("2026-08-01 23:59:59,500 - root - x", "2026-08-02 00:00:00,250 - root - x", 0.75),
        ("[2024-05-01T10:00:00] iteration", "[2024-05-01T10:00:02] iteration", 2.0),
        ("I0801 12:00:00.500000 123 x.cc] s", "I0801 12:00:01.000000 123 x.cc] s", 0.5),
        ("INFO 08-01 12:00:00 ppo_trainer.py:1] s", "INFO 08-01 12:00:03 ppo_trainer.py:1] s", 3.0),
        ("12:00:00.250 step", "12:00:01.000 step", 0.75),
    ],
)
def test_a_line_s_own_timestamp_is_read(a, b, gap):
    assert line_stamp(b) - line_stamp(a) == pytest.approx(gap)


@pytest.mark.parametrize(
    "text", ["train step 3 done", "  5%| | 10/200 [00:05<01:30,  2.10it/s]", "2026-13-45 12:00:00 x"]
)
def test_a_line_without_a_timestamp_has_none(text):
    assert line_stamp(text) is None


def test_lines_as_written_keep_the_wall_clock():
    tracker = ProgressTracker(RULES, start_t=0.0)
    for i, t in enumerate([1.0, 1.5, 2.5], start=1):
        tracker.feed(i, f"2026-08-01 12:00:0{i}.000 train step {i} done", t)
    state = tracker.snapshot()
    assert state.step_times_s == (1.0, 0.5, 1.0) and state.untimed_steps == () and state.late_steps == 0


def test_lines_that_came_together_are_timed_by_their_timestamps():
    tracker = ProgressTracker(RULES, start_t=0.0)
    for i in range(1, 5):  # all read at once, at exit
        tracker.feed(i, f"2026-08-01 12:00:0{i}.{i * 100:03d} | INFO | train step {i} done", 9.0)
    state = tracker.snapshot()
    assert state.late_steps == 3 and state.untimed_steps == (0,), "the first line has none before it"
    assert state.step_times_s[1:] == pytest.approx((1.1, 1.1, 1.1))


def test_lines_that_came_together_without_a_time_are_untimed():
    tracker = ProgressTracker(RULES, start_t=0.0)
    for i in range(1, 5):
        tracker.feed(i, f"train step {i} done", 5.0 if i < 3 else 9.0)  # two bursts
    state = tracker.snapshot()
    assert len(state.step_times_s) == 4, "late lines are still steps"
    assert state.untimed_steps == (0, 1, 2, 3) and state.step_times_s == (0.0, 0.0, 0.0, 0.0)
    assert state.late_steps == 2


def test_a_step_numbered_past_a_gap_splits_its_stamped_time():
    clock = StepClock()  # three lines in one burst; the second stands for steps 11 and 12
    clock.take(0, 3.0, "2026-08-01 12:00:00.000 step 10", 1)
    clock.take(1, 3.0, "2026-08-01 12:00:04.000 step 12", 2)
    clock.take(3, 3.0, "2026-08-01 12:00:05.000 step 13", 1)
    assert clock.retime([3.0, 0.0, 0.0, 0.0]).step_times_s == (0.0, 2.0, 2.0, 1.0)


def test_a_progress_bar_whose_redraws_now_and_then_share_a_read_keeps_the_wall_clock():
    clock = StepClock()
    for index, t in enumerate((2.0, 2.0, 4.0, 6.0, 8.0)):  # one read held two redraws
        clock.take(index, t, f"{index + 1}/20 [00:0{index}<00:22,  1.31it/s]", 1)
    assert not clock.buffered
    assert clock.retime([2.0, 0.0, 2.0, 2.0, 2.0]).step_times_s == (2.0, 0.0, 2.0, 2.0, 2.0)


def test_late_lines_of_steps_the_stop_did_not_keep_are_not_counted():
    tracker = ProgressTracker(RULES, start_t=0.0)
    for i in range(1, 5):  # one burst; the stop kept the first two steps, the teardown read two more
        tracker.feed(i, f"2026-08-01 12:00:0{i}.000 | INFO | train step {i} done", 9.0)
    state = tracker.snapshot()
    assert state.late_step_indices == (1, 2, 3)
    kept = state.upto(2)
    assert kept.late_steps == 1 and kept.late_step_indices == (1,) and len(kept.step_times_s) == 2
