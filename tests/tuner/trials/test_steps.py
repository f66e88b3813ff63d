"""Measured steps that follow the measured noise: on records, through the trial's spec (``--steps``,
``{total_steps}``), and through a whole study on an analytic landscape whose steps scatter (its
re-runs, its export, its records read back as a resumed study reads them)."""

from __future__ import annotations

import dataclasses
import io
import math
import re
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from rich.console import Console

from nccl_tune.failure import FailureClass, Verdict
from nccl_tune.reporting.report import end_of_run
from nccl_tune.reporting.view import load_view, winner_reasons
from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.trial import StopReason, TrialResult
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.study_records import Outcome, TrialKind, TrialRecord
from nccl_tune.tuner.search.throughput_model import RUN_NOISE, pooled_step_spread
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.study.loop import run_study
from nccl_tune.tuner.trials.steps import MAX_MEASURED_STEPS, PRIOR_DOF, coarse_reading_note, next_measured_steps
from nccl_tune.tuner.trials.trial_builder import build_trial_spec
from nccl_tune.tuner.winner.export import tuned_document
from twin.analytic import AnalyticNode, Truth, analytic_cost
from twin.launcher import ModelLauncher

SPACE_YAML = """
name: rl
parameters:
  - {name: micro, kind: pow2, low: 1, high: 16, default: 2, memory: increasing}
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree], default: unset, memory: none}
trial:
  overrides: {trainer.max_training_steps: "{total_steps}"}
stop: {warmup_steps: 1, measured_steps: 3, screen_steps: 1}
clocks: {startup_timeout_s: 900, stall_timeout_s: 600, stall_floor_s: 60, trial_timeout_s: 7200, grace_s: 10}
throughput: {samples_per_step: 64}
"""
SPACE = parse_space(SPACE_YAML, source="test", label="rl")


def rec(number: int, scatter: float, step_s: float = 10.0, fixed_s: float = 1000.0, steps: int = 3) -> TrialRecord:
    """A finished trial: a warm-up step, then ``steps`` steps alternating ``step_s * exp(+-scatter)``
    (so their log spread is about ``scatter``), after ``fixed_s`` of start-up, warm-up and teardown."""
    measured = tuple(step_s * math.exp(scatter * (1 if i % 2 else -1)) for i in range(steps))
    result = TrialResult(
        number=number,
        status=FailureClass.OK,
        verdict=Verdict(FailureClass.OK),
        stop_reason=StopReason.MEASURED,
        step_times_s=(step_s * 1.3, *measured),
        warmup_steps=1,
        samples_per_step=64.0,
        wall_s=fixed_s + sum(measured),
    )
    return TrialRecord(
        number,
        TrialState.COMPLETE,
        {"micro": 2, "NCCL_ALGO": "unset"},
        TrialKind.SEARCH,
        Outcome.LAUNCHED,
        FailureClass.OK,
        result,
    )


def test_before_two_measured_steps_and_below_the_floor_the_space_steps_stand() -> None:
    assert next_measured_steps(3, [], 7200).steps == 3
    one_step = [rec(0, 0.10, steps=1), rec(1, 0.10, steps=1)]
    plan = next_measured_steps(3, one_step, 7200)
    assert (plan.steps, plan.step_noise) == (3, None)
    quiet = [rec(0, 0.01), rec(1, 0.012)]
    plan = next_measured_steps(3, quiet, 7200)
    assert plan.measured_noise is not None and plan.measured_noise < RUN_NOISE
    assert plan.wanted_steps is not None and plan.wanted_steps <= 3 and plan.steps == 3


def test_noisy_steps_raise_the_measured_steps_to_where_step_noise_meets_the_run_floor() -> None:
    noisy = [rec(0, 0.045), rec(1, 0.05)]
    plan = next_measured_steps(3, noisy, 7200)
    spread = pooled_step_spread(noisy)
    assert spread is not None and 0.04 < spread[0] < 0.06 and spread[1] == 4
    # the steps the measured spread asks for, weighed with the space's 3 steps (PRIOR_DOF of them)
    wanted = (spread[1] * (spread[0] / RUN_NOISE) ** 2 + PRIOR_DOF * 3) / (spread[1] + PRIOR_DOF)
    assert plan.wanted_steps == math.ceil(wanted - 1e-9)
    assert plan.steps == plan.wanted_steps and 3 < plan.steps < MAX_MEASURED_STEPS
    assert "run-to-run floor" in plan.why() and "capped" not in plan.why()
    # the same spread measured by one trial moves the steps less than when many trials agree on it
    one = next_measured_steps(3, noisy[:1], 7200).steps
    many = next_measured_steps(3, [rec(i, 0.05) for i in range(8)], 7200).steps
    assert 3 < one < plan.steps < many


def test_the_cost_cap_binds_when_steps_are_long_against_the_start_up() -> None:
    # fixed part 2.5 steps' worth (25 s of start-up, warm-up and teardown; 10 s steps): at most 2 extra steps
    long_steps = [rec(0, 0.08, fixed_s=25.0), rec(1, 0.08, fixed_s=24.0), rec(2, 0.08, fixed_s=30.0)]
    plan = next_measured_steps(3, long_steps, 7200)
    assert plan.wanted_steps is not None and plan.wanted_steps > 10
    assert (plan.steps, plan.cost_cap_steps) == (5, 5)
    assert "capped at 5" in plan.why() and "start-up and warm-up" in plan.why()


def test_the_trial_timeout_and_the_hard_maximum_cap_what_the_cost_allows() -> None:
    cheap_steps = [rec(0, 0.10, fixed_s=5000.0), rec(1, 0.10, fixed_s=5000.0)]
    assert next_measured_steps(3, cheap_steps, None).steps == MAX_MEASURED_STEPS
    # half of a 10,200 s timeout leaves the longest trial (5,000 s fixed, 10 s steps) room for 10 steps
    plan = next_measured_steps(3, cheap_steps, 10_200)
    assert (plan.steps, plan.timeout_cap_steps) == (10, 10)
    assert "trial timeout" in plan.why()


def test_runs_held_below_the_steps_their_noise_asks_for_are_told_how_finely_they_read() -> None:
    capped = [rec(0, 0.08, fixed_s=25.0), rec(1, 0.08, fixed_s=24.0), rec(2, 0.08, fixed_s=30.0)]
    plan = next_measured_steps(3, capped, 7200)
    wanted, noise = plan.wanted_steps, plan.step_noise
    note = coarse_reading_note(capped, 3)
    error = math.sqrt(noise**2 / 3 + RUN_NOISE**2)
    assert note is not None and note.startswith(
        f"one run read a config's throughput to about ±{error:.1%} "
        f"(steps scatter about {noise:.1%}, 3 measured per run)"
    ), note
    assert f"{wanted} measured steps would read to about ±2.1% (--steps {wanted}, each run then longer)" in note
    # runs that measured more steps than the (now better known) spread asks for read well enough
    enough = [rec(n, 0.08, fixed_s=25.0, steps=40) for n in range(3)]
    assert wanted < next_measured_steps(3, enough, 7200).wanted_steps <= 40
    assert coarse_reading_note(enough, 3) is None
    assert coarse_reading_note([rec(0, 0.005), rec(1, 0.005)], 3) is None
    # a count short of what the spread asks for, but by less than half, is not worth a note; half is
    short, half = [rec(n, 0.035, fixed_s=25.0) for n in range(3)], [rec(n, 0.04, fixed_s=25.0) for n in range(3)]
    assert (next_measured_steps(3, short, 7200).wanted_steps, next_measured_steps(3, half, 7200).wanted_steps) == (5, 6)
    assert coarse_reading_note(short, 3) is None and coarse_reading_note(half, 3) is not None
    assert coarse_reading_note([], 3) is None
    # runs at the hard maximum are not told to measure more, however their steps scatter
    at_max = [rec(n, 0.15, fixed_s=25.0, steps=MAX_MEASURED_STEPS) for n in range(3)]
    assert next_measured_steps(3, at_max, 7200).wanted_steps > 2 * MAX_MEASURED_STEPS
    assert coarse_reading_note(at_max, 3) is None
    far_under = [rec(n, 0.15, fixed_s=25.0) for n in range(3)]
    assert f"--steps {MAX_MEASURED_STEPS}, each run then longer" in coarse_reading_note(far_under, 3)


def test_the_spec_measures_the_steps_the_history_calls_for_and_steps_on_the_command_line_win(tmp_path) -> None:
    noisy = [rec(0, 0.045), rec(1, 0.05)]
    settings = RunSettings(command=("train",), results=tmp_path)
    spec = build_trial_spec(
        SPACE, settings, study="s", number=2, values=SPACE.defaults(), context_pins={}, history=noisy
    )
    wanted = next_measured_steps(3, noisy, spec.clocks.trial_timeout_s).steps
    assert wanted > 3 and spec.stop.measured_steps == wanted and spec.stop.screen_steps == 1
    assert f"trainer.max_training_steps={1 + wanted}" in spec.argv
    first = build_trial_spec(SPACE, settings, study="s", number=0, values=SPACE.defaults(), context_pins={})
    assert first.stop.measured_steps == 3 and "trainer.max_training_steps=4" in first.argv
    assert first.clocks.silence_steps == 0  # no run yet: between steps, the stall timeout holds
    assert spec.clocks.silence_steps == max(len(r.result.step_times_s) for r in noisy) > 0
    fixed = RunSettings(command=("train",), results=tmp_path, steps=2)
    spec = build_trial_spec(SPACE, fixed, study="s", number=2, values=SPACE.defaults(), context_pins={}, history=noisy)
    assert (spec.stop.measured_steps, spec.stop.screen_steps) == (2, 1)
    assert "trainer.max_training_steps=3" in spec.argv


def landscape(v) -> Truth:
    """An RL job with 8% step noise: larger micro-batches are faster until 8, NCCL does nothing."""
    return Truth(
        step_s=60.0 * (1.0 + 2.0 / v["micro"]) * (1.1 if v["micro"] == 16 else 1.0), peak_gib=20.0 + 3.0 * v["micro"]
    )


def test_a_whole_study_measures_more_steps_once_its_trials_have_measured_the_noise(tmp_path: Path) -> None:
    space_file = tmp_path / "rl.yaml"
    space_file.write_text(SPACE_YAML)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    settings = RunSettings(
        command=("train",),
        space=str(space_file),
        results=tmp_path,
        storage=storage,
        study="rl",
        trials=8,
        seed=0,
        confirm=1,
    )
    node = AnalyticNode(startup_s=240.0, step_noise=0.08, run_noise=0.01)
    out_text = io.StringIO()
    out = run_study(
        settings,
        console=Console(file=out_text, width=300),
        launcher=ModelLauncher(env={"HOME": str(tmp_path)}, cost=analytic_cost(landscape, node)),
    )
    launched = sorted((r for r in out.records if r.outcome is Outcome.LAUNCHED and r.result), key=lambda r: r.number)
    full = [r for r in launched if r.result.stop_reason is StopReason.MEASURED]
    assert launched[0].kind is TrialKind.BASELINE and len(launched[0].result.measured_step_times_s) == 3
    for r in full:  # every full run, the confirmation re-run too, measured what the records before it called for
        before = [x for x in out.records if x.number < r.number]
        assert len(r.result.measured_step_times_s) == next_measured_steps(3, before, 7200).steps
    assert any(r.kind is TrialKind.RERUN for r in full)
    assert max(len(r.result.measured_step_times_s) for r in full) > 3
    assert len(re.findall(r"each trial measures \d+ steps instead of 3", out_text.getvalue())) == 1
    runs = [len(r.result.measured_step_times_s) for r in out.winner.ok_runs]
    assert tuned_document(out.stored, out.winner)["metrics"]["measured_steps_per_run"] == runs
    # a resumed study reads the same records back from its storage, so its next trial gets the same count
    stored = R.records(optuna.load_study(study_name="rl", storage=storage))
    assert next_measured_steps(3, stored, 7200) == next_measured_steps(3, out.records, 7200)


@pytest.mark.parametrize("step_noise, noted", [(0.08, True), (0.005, False)])
def test_a_study_whose_steps_stay_too_few_for_their_noise_says_so_in_its_summary_and_report(
    tmp_path: Path, step_noise, noted
) -> None:
    """Steps a minute long after a 20 s start-up: the cost cap holds a trial to a few more steps
    than the space's 3, far below what 8% step noise asks for."""
    space_file = tmp_path / "rl.yaml"
    space_file.write_text(SPACE_YAML)
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    settings = RunSettings(
        command=("train",),
        space=str(space_file),
        results=tmp_path,
        storage=storage,
        study="rl",
        trials=4,
        seed=0,
        confirm=0,
    )
    node = AnalyticNode(startup_s=20.0, step_noise=step_noise, run_noise=0.001)
    out_text = io.StringIO()
    console = Console(file=out_text, width=300)
    launcher = ModelLauncher(env={"HOME": str(tmp_path)}, cost=analytic_cost(landscape, node))
    end_of_run(run_study(settings, console=console, launcher=launcher), console, console, as_json=False)
    said = [line for line in winner_reasons(load_view(storage, "rl")) if line.startswith("one run read a config's")]
    assert ("coarse measurement: one run read a config's throughput" in out_text.getvalue()) is noted, (
        out_text.getvalue()
    )
    assert bool(said) is noted, said


def test_a_command_of_a_fixed_length_is_never_asked_for_more_steps_than_it_ran() -> None:
    noisy = [rec(0, 0.10, fixed_s=5000.0), rec(1, 0.10, fixed_s=5000.0)]
    assert next_measured_steps(3, noisy, None).steps == MAX_MEASURED_STEPS
    # a trial that exited 0 by itself after its own last step: a warm-up and 5 measured steps
    ended = rec(2, 0.10, fixed_s=5000.0, steps=5)
    ended = dataclasses.replace(
        ended, result=dataclasses.replace(ended.result, stop_reason=StopReason.EXITED, exit_code=0)
    )
    plan = next_measured_steps(3, [*noisy, ended], None)
    assert (plan.steps, plan.command_cap_steps) == (5, 5) and plan.command_capped
    assert "the command ends by itself after 5 measured steps" in plan.why()
    note = coarse_reading_note([*noisy, ended], 3)
    assert note is not None and "its own step flag" in note and "--steps" not in note
    # a run that failed or that the tuner stopped tells nothing of the command's length
    crashed = dataclasses.replace(ended, result=dataclasses.replace(ended.result, exit_code=1))
    assert next_measured_steps(3, [*noisy, crashed], None).command_cap_steps is None
    # a run that ended at the steps its trial planned ran what it was told ({total_steps}), not its own length
    told = dataclasses.replace(ended, planned_steps=6)
    assert next_measured_steps(3, [*noisy, told], None).command_cap_steps is None
    assert next_measured_steps(3, [*noisy, dataclasses.replace(ended, planned_steps=9)], None).command_cap_steps == 5
    # never below the space's own steps: a command shorter than those is the space's to fix
    short = dataclasses.replace(ended, result=dataclasses.replace(ended.result, step_times_s=(10.0, 10.0, 11.0)))
    assert next_measured_steps(3, [*noisy, short], None).steps == 3
