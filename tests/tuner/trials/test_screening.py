"""Cheap screening (``stop.screen_steps``): a candidate runs its warm-up and one measured step; one
not within reach of the incumbent is stopped there, one within reach runs every measured step.
Whole studies through the model launcher with an analytic cost, the loop's own observer deciding."""

from __future__ import annotations

import dataclasses
import io
import math
from pathlib import Path

import pytest
from optuna.trial import TrialState
from rich.console import Console

from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import FailureClass, Verdict
from nccl_tune.reporting.report import end_of_run
from nccl_tune.reporting.terminal import early_stop_sentence
from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.trial import StopReason, TrialResult
from nccl_tune.tuner.records.early_stops import early_stops
from nccl_tune.tuner.records.stability import candidates
from nccl_tune.tuner.records.study_records import Outcome, TrialKind, TrialRecord
from nccl_tune.tuner.search.throughput_model import ThroughputModel
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.study.loop import run_study
from nccl_tune.tuner.trials.screening import IncumbentBar, incumbent_bar
from twin.analytic import AnalyticNode, Truth, analytic_cost
from twin.launcher import ModelLauncher

SPACE = """
name: screening
parameters:
  - {name: mode, kind: categorical, choices: [fast, close, slow], default: fast, memory: none}
stop: {warmup_steps: 1, measured_steps: 3, screen_steps: %d}
throughput: {samples_per_step: 100}
"""
STEP_S = {"fast": 10.0, "close": 10.2, "slow": 11.8}
"""The slow mode is 15% slower: above the early stop's 0.7, beyond screening's reach."""


def screened_study(tmp_path: Path, screen_steps: int, screening: bool = True) -> tuple[dict, str, str]:
    """(records by mode, what the run printed, the storage URL) of a three-trial study."""
    folder = tmp_path / f"screen{screen_steps}-{screening}"  # a study's folder belongs to one study
    folder.mkdir()
    space_file = folder / "screening.yaml"
    space_file.write_text(SPACE % screen_steps)
    url = f"sqlite:///{folder}/nccl-tune.db"
    settings = RunSettings(
        command=("true",),
        space=str(space_file),
        results=folder,
        storage=url,
        study="screening",
        trials=3,
        seed=0,
        confirm=0,
        screening=screening,
    )
    cost = analytic_cost(lambda v: Truth(STEP_S[v["mode"]], 40.0), AnalyticNode(startup_s=60.0, step_noise=0.005))
    printed = io.StringIO()
    console = Console(file=printed, width=400)
    out = run_study(settings, console=console, launcher=ModelLauncher(env={}, cost=cost))
    end_of_run(out, console, console, as_json=False)
    return {r.values["mode"]: r for r in out.records}, printed.getvalue(), url


def study(tmp_path: Path, screen_steps: int, screening: bool = True) -> dict:
    return screened_study(tmp_path, screen_steps, screening)[0]


def test_a_slow_candidate_is_stopped_after_one_measured_step_and_a_close_one_runs_on(tmp_path):
    runs = study(tmp_path, screen_steps=1)
    assert set(runs) == {"fast", "close", "slow"}
    slow, close, fast = runs["slow"].result, runs["close"].result, runs["fast"].result
    assert len(fast.step_times_s) == 4 and runs["fast"].status is FailureClass.OK
    assert len(close.step_times_s) == 4 and runs["close"].status is FailureClass.OK
    # warm-up + one measured step, then stopped: the GPU time of two steps saved
    assert len(slow.step_times_s) == 2 and slow.stop_reason is StopReason.EARLY_STOP
    assert runs["slow"].status is FailureClass.BUDGET
    assert slow.wall_s < fast.wall_s - 1.5 * STEP_S["slow"]


def test_the_run_says_why_a_trial_was_screened_out_and_how_much_time_screening_saved(tmp_path):
    """The slow trial's line says what it measured against what bar. It was to run four steps and ran two: the two it did not run, at its own mean
    step time, are what screening saved, against what the three trials would have taken."""
    runs, printed, _ = screened_study(tmp_path, screen_steps=1)
    slow = runs["slow"]
    assert slow.planned_steps == 4 and all(r.planned_steps == 4 for r in runs.values())
    assert slow.stopped_early and not runs["fast"].stopped_early and runs["fast"].unspent_s == 0.0
    assert slow.unspent_s == pytest.approx(2 * sum(slow.result.step_times_s) / 2)
    stops = early_stops(runs.values())
    launched_s = sum(r.result.wall_s for r in runs.values())
    assert stops.trials == (slow.number,) and stops.spent_s == slow.result.wall_s and stops.unknown == 0
    assert stops.saved_s == pytest.approx(slow.unspent_s)
    assert stops.saved_share == pytest.approx(slow.unspent_s / (launched_s + slow.unspent_s))
    stopped = next(x for x in printed.splitlines() if x.startswith(f"trial {slow.number} budget"))
    assert "stopped early after 2 steps: " in stopped and "samples/s over 1 screened step, under the bar of" in stopped
    assert "as modelled, less" in stopped
    line = next(x for x in printed.splitlines() if x.startswith("stopping early:"))
    assert "1 trial stopped as slower than the incumbent" in line
    assert f"saved about {stops.saved_s:.0f} s, {stops.saved_share:.0%} of what the launched trials" in line


def test_a_trial_recorded_without_its_planned_steps_is_counted_apart():
    """A study recorded before the planned steps were stored: its stopped trials are named, their
    time saved is unknown, not made up."""
    slow = TrialRecord(
        1,
        TrialState.COMPLETE,
        {"mode": "slow"},
        TrialKind.SEARCH,
        Outcome.LAUNCHED,
        FailureClass.BUDGET,
        TrialResult(
            number=1,
            status=FailureClass.BUDGET,
            verdict=Verdict(FailureClass.BUDGET),
            stop_reason=StopReason.EARLY_STOP,
            step_times_s=(12.0, 11.8),
            wall_s=90.0,
        ),
    )
    assert slow.unspent_s is None
    stops = early_stops([slow])
    assert (stops.trials, stops.saved_s, stops.unknown, stops.saved_share) == ((1,), 0.0, 1, 0.0)
    assert "(1 recorded without their planned steps, not counted)" in early_stop_sentence(stops)


def test_without_screening_the_slow_candidate_runs_every_step(tmp_path):
    runs, printed, _ = screened_study(tmp_path, screen_steps=1, screening=False)
    assert len(runs["slow"].result.step_times_s) == 4 and runs["slow"].status is FailureClass.OK
    assert early_stops(runs.values()) is None and "stopping early" not in printed
    runs = study(tmp_path, screen_steps=0)
    assert len(runs["slow"].result.step_times_s) == 4


def test_screen_steps_must_leave_measured_steps_to_screen_for(tmp_path):
    with pytest.raises(NcclTuneError, match="screen_steps 3 must be below stop.measured_steps"):
        parse_space(SPACE % 3, source="test", label="screening.yaml")


# -- the bar: the incumbent as the study's model estimates it -------------------------------------

BAR_SPACE = parse_space(
    """
name: bar
parameters:
  - {name: micro, kind: pow2, low: 1, high: 8, default: 2, memory: increasing}
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree, NVLS], default: unset, memory: none}
throughput: {samples_per_step: 64}
""",
    source="test",
    label="bar",
)


def noisy_run(
    number: int, algo: str, step_s: float, noise: float, tokens_per_sample: float | None = None
) -> TrialRecord:
    """A finished run of ``NCCL_ALGO=algo`` (micro 2) whose measured steps scatter by ``noise``
    around ``step_s`` (mean ``step_s``); with ``tokens_per_sample``, each step line printed a token rate."""
    times = (step_s * 1.3, step_s * (1 + noise), step_s * (1 - noise), step_s * (1 + noise), step_s * (1 - noise))
    rates = tuple(64 * tokens_per_sample / t for t in times) if tokens_per_sample else ()
    result = TrialResult(
        number=number,
        status=FailureClass.OK,
        verdict=Verdict(FailureClass.OK),
        stop_reason=StopReason.MEASURED,
        step_times_s=times,
        warmup_steps=1,
        samples_per_step=64.0,
        step_rates=rates,
        rate_unit="tokens" if rates else None,
    )
    return TrialRecord(
        number,
        TrialState.COMPLETE,
        {"micro": 2, "NCCL_ALGO": algo},
        TrialKind.SEARCH,
        Outcome.LAUNCHED,
        FailureClass.OK,
        result,
    )


def bar_of(records: list[TrialRecord], leader: str) -> tuple[IncumbentBar, ThroughputModel]:
    model = ThroughputModel.of_study(BAR_SPACE, {}, records)
    incumbent = next(c for c in candidates(records) if c.values["NCCL_ALGO"] == leader)
    return incumbent_bar(model, incumbent, screen_steps=1), model


def test_the_bar_is_the_incumbents_modelled_throughput_not_its_lucky_run():
    """Four NCCL values measured alike, one of them 8% faster once under 8% step noise: the
    fastest by its run, and the incumbent. Its run flatters it; the model pooled with the three
    others sets the bar lower, so a candidate as fast as the rest, measured slow over one noisy
    step, runs on instead of being stopped against the lucky figure."""
    records = [
        noisy_run(0, "unset", 10.0, 0.08),
        noisy_run(1, "Ring", 10.05, 0.08),
        noisy_run(2, "Tree", 9.95, 0.08),
        noisy_run(3, "NVLS", 9.2, 0.08),
    ]
    bar, model = bar_of(records, "NVLS")
    lucky = 64 / 9.2
    mean, _ = model.predict([{"micro": 2, "NCCL_ALGO": "NVLS"}])
    assert bar.incumbent_per_s == pytest.approx(math.exp(float(mean[0])))
    assert 64 / 10.0 < bar.incumbent_per_s < 0.99 * lucky
    # a candidate as fast as the others (10 s a step) whose one screened step took 11.8 s runs on;
    # against the lucky figure, with the same reach, it would have been stopped
    assert not bar.stops(64 / 11.8) and 64 / 11.8 < lucky * (1 - bar.reach_frac)
    assert bar.stops(64 / 10.0 * 0.7)


def test_the_reach_follows_the_steps_noise():
    quiet = [noisy_run(n, algo, 10.0, 0.005) for n, algo in enumerate(("unset", "Ring", "Tree", "NVLS"))]
    noisy = [noisy_run(n, algo, 10.0, 0.08) for n, algo in enumerate(("unset", "Ring", "Tree", "NVLS"))]
    quiet_bar, noisy_bar = bar_of(quiet, "unset")[0], bar_of(noisy, "unset")[0]
    assert quiet_bar.reach_frac < 0.06 < 0.15 < noisy_bar.reach_frac
    assert quiet_bar.stops(64 / 10.0 * 0.9) and not noisy_bar.stops(64 / 10.0 * 0.9)


def test_the_bar_is_in_step_timed_samples_whatever_unit_the_trainer_printed():
    """The trainer printed tokens per second (what the model fits); screening times a trial's steps
    in samples per second, so the bar is in those."""
    records = [noisy_run(n, algo, 10.0, 0.01, tokens_per_sample=512.0) for n, algo in enumerate(("unset", "Ring"))]
    assert records[0].throughput_unit == "tokens/s" and records[0].throughput > 3000
    bar = bar_of(records, "unset")[0]
    assert bar.incumbent_per_s == pytest.approx(6.4, rel=0.03)


def test_no_bar_without_a_run_that_timed_its_steps():
    run = noisy_run(0, "unset", 10.0, 0.01)
    bare = dataclasses.replace(run, result=dataclasses.replace(run.result, samples_per_step=None))
    model = ThroughputModel.of_study(BAR_SPACE, {}, [bare])
    assert incumbent_bar(model, candidates([bare])[0], 1) is None


def test_the_warm_up_is_the_incumbents_moved_by_the_models_correction():
    """The incumbent's runs' warm-up (1.3x its mean step) at the same shrunk level as its throughput."""
    records = [
        noisy_run(0, "unset", 10.0, 0.08),
        noisy_run(1, "Ring", 10.05, 0.08),
        noisy_run(2, "Tree", 9.95, 0.08),
        noisy_run(3, "NVLS", 9.2, 0.08),
    ]
    bar, _ = bar_of(records, "NVLS")
    (warm,) = bar.warmup_per_s
    assert warm == pytest.approx(bar.incumbent_per_s / 1.3)
