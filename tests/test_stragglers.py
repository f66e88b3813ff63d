"""Straggler steps: told from the run's median, excused by a longer batch, never the run's own pace."""

from __future__ import annotations

import json
import sys

import pytest

from nccl_tune.failure import FailureClass, Verdict
from nccl_tune.stragglers import FACTOR, kept, stragglers, worst_stall
from nccl_tune.trial import StopReason, TrialResult
from nccl_tune.wording import fmt_steps
from tests.tuner.conftest import TINY_SPACE, TINY_TRAINER, run_cli


def test_a_step_twice_the_median_is_a_straggler_and_one_within_the_factor_is_not():
    steps = [1.0, 1.02, 0.98, 2.0, 1.01, 1.0 * FACTOR * 0.99, 1.0, 0.99]
    assert stragglers(steps) == (3,)
    assert kept(steps, (3,)) == tuple(s for i, s in enumerate(steps) if i != 3)


def test_of_two_steps_far_apart_the_slower_one_stalled():
    assert stragglers([1.0, 2.0]) == (1,) and worst_stall([1.0, 2.0], (1,)) == 2.0
    assert stragglers([1.4, 1.0]) == ()
    assert stragglers([2.0]) == ()
    assert stragglers([1.0, 1.0, 2.0]) == (2,)


def test_slow_steps_that_common_are_the_runs_pace():
    # three of eight steps (over a third) twice as long: a loader that cannot keep up, not a stall
    assert stragglers([1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 1.0]) == ()
    assert stragglers([1.0, 2.0, 1.0, 2.0, 1.0, 1.0, 1.0, 1.0]) == (1, 3)


def test_slow_steps_at_one_even_spacing_are_the_jobs_rhythm():
    # an optimizer step every fourth micro-batch (a trainer that counts micro-batches)
    rhythm = [1.0, 1.0, 1.0, 1.8] * 4
    assert stragglers(rhythm) == ()
    assert stragglers(rhythm[:8]) == (3, 7)  # two slow steps show no rhythm yet
    assert stragglers([1.0, 1.8, 1.0, 1.0, 1.0, 1.8, 1.0, 1.0, 1.0, 1.0, 1.8, 1.0]) == (1, 5, 10)
    # slow steps in a row are one stall: a line that stands for three steps gave each its time
    assert stragglers([1.0] * 6 + [3.0] * 3 + [1.0] * 3) == (6, 7, 8)


def test_a_slow_step_with_more_tokens_than_the_median_is_a_longer_batch():
    steps = [1.0, 1.0, 2.2, 1.0, 2.1, 1.0, 1.0, 1.0]
    tokens = [500, 480, 1900, 510, 490, 505, 495, 500]
    assert stragglers(steps, tokens) == (4,)  # step 2 carried four times the tokens
    assert stragglers(steps, tokens[:3]) == (2, 4)  # tokens of some steps only: by time alone


def test_an_untimed_step_tells_nothing():
    assert stragglers([1.0, 0.0, 1.0, 3.0]) == ()


def _result(step_times_s, step_rates=(), rate_unit=None, warmup=1) -> TrialResult:
    return TrialResult(
        number=3,
        status=FailureClass.OK,
        verdict=Verdict(FailureClass.OK),
        stop_reason=StopReason.MEASURED,
        step_times_s=tuple(step_times_s),
        step_rates=tuple(step_rates),
        rate_unit=rate_unit,
        warmup_steps=warmup,
        samples_per_step=100.0,
    )


def test_a_trials_throughput_leaves_its_straggler_out_and_says_so():
    res = _result([3.0, 0.5, 0.5, 1.0, 0.5, 0.5])
    assert res.straggler_steps == (2,)
    assert res.kept_step_times_s == (0.5, 0.5, 0.5, 0.5)
    assert res.throughput_per_s == pytest.approx(200.0)
    assert fmt_steps(res) == "5 (1 straggler, 2.0x the median, left out)"
    assert fmt_steps(_result([3.0, 0.5, 0.5, 0.5])) == "3"


def test_printed_rates_leave_out_the_steps_that_stalled_too():
    # the step lines came in one burst (no durations): the printed rates tell the stall
    res = _result([3.0, 0.0, 0.0, 0.0, 0.0], step_rates=[50.0, 200.0, 190.0, 80.0, 210.0], rate_unit="samples")
    assert res.straggler_steps == (2,)
    assert res.throughput_per_s == pytest.approx(200.0)
    assert fmt_steps(res) == "4 (1 straggler left out)"


def test_a_stalled_step_of_a_real_command_is_left_out_and_the_trial_line_says_so(tmp_path):
    args = [
        "run",
        "--no-force-worst-case",
        "--space",
        str(TINY_SPACE),
        "--trials",
        "1",
        "--confirm",
        "0",
        "--steps",
        "5",
    ]
    command = [sys.executable, str(TINY_TRAINER)]
    proc = run_cli([*args, "--json", "--", *command], cwd=tmp_path, env={"TINY_STALL_STEP": "4"})
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.startswith("trial 0 ok"))
    (trial,) = json.loads(proc.stdout)["trials"]
    # 5 steps, even when the trainer's next step line (0.15 s later) is read before the teardown ends it
    assert trial["measured_steps"] == 5 and trial["straggler_steps"] == [2], trial  # step 4: the third measured
    assert "steps 5 (1 straggler, " in line and "x the median, left out)" in line, line
    # the tiny trainer's steps take 0.15 s at micro 1 and carry 8 samples: the stall is not in its rate
    assert trial["throughput_per_s"] == pytest.approx(8 / 0.15, rel=0.15)
    summary = "1 of 1 finished runs had a measured step over 1.5x their median (up to "
    assert f"stalled steps: {summary}" in proc.stderr
    stall = float(proc.stderr.split(summary)[1].split("x:")[0])
    assert 2.5 <= stall <= 3.5, stall  # three times a step
    report = run_cli(["report", "--format", "md"], cwd=tmp_path)
    assert report.returncode == 0 and summary in report.stdout, report.stderr
