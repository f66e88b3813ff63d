"""Each trainer's output, as their own code prints it (``fixtures/trainers``: built from each
trainer's format strings at a release tag, or captured from a tiny CPU run), read as the trainer
means it: steps by the trainer's own count, the rate in the trainer's unit, the memory it printed.

Each fixture is read twice: through the named preset's reader on a simulated clock (fast, exact),
and through ``nccl-tune run`` with no preset named, replayed by a real process paced in time."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import yaml

from nccl_tune.failure import FailureClass, Verdict
from nccl_tune.launchers.logstream import LineScanner
from nccl_tune.launchers.progress import ProgressTracker
from nccl_tune.presets import PRESETS
from nccl_tune.trial import ProgressRules, StopReason, TrialResult
from tests.tuner.conftest import SCRIPTS, run_cli
from tests.tuner.scripts.replay import pieces

FIXTURES = Path(__file__).parent / "fixtures" / "trainers"
EXPECT = yaml.safe_load((FIXTURES / "expect.yaml").read_text())
WARMUP = 1
PACE_S = 0.4
"""The replay's wait before a step line when the fixture names none."""


def read_until_stop(name: str, rules: ProgressRules):
    """The fixture's pieces fed to the tracker on a simulated clock (``pace_s`` before each paced
    piece), up to the trial's stop (with what the trainer wrote at the same moment, before its next
    paced piece): the state then, and the result it makes."""
    import re

    spec = EXPECT[name]
    pace, pace_s = re.compile(spec["pace"]), spec.get("pace_s", PACE_S)
    tracker = ProgressTracker(rules, start_t=0.0)
    scanner = LineScanner(tracker.feed, tracker.current_literals)
    t, stopped = 0.0, False
    for piece in pieces((FIXTURES / f"{name}.log").read_bytes()):
        if pace.search(piece.decode("utf-8", "replace")):
            if stopped:
                break
            t += pace_s
        scanner.feed(piece, now=t)
        state = tracker.snapshot()
        stopped = stopped or len(state.step_times_s) >= state.warmup_for(WARMUP) + spec["measured"]
    scanner.finish(now=t)
    state = tracker.snapshot()
    result = TrialResult(
        number=0,
        status=FailureClass.OK,
        verdict=Verdict(FailureClass.OK),
        stop_reason=StopReason.MEASURED,
        step_times_s=state.step_times_s,
        step_rates=state.step_rates,
        rate_unit=state.rate_unit,
        warmup_steps=state.warmup_for(WARMUP),
        samples_per_step=state.samples_per_step,
    )
    peaks = state.memory_peak_gib
    return state, result, (max(peaks.values()) if peaks else None)


def assert_as_expected(
    name: str, steps: int, rate: float | None, unit: str, memory_gib: float | None, *, exact: bool = False
) -> None:
    """``exact``: read on the simulated clock, where a rate from the wall clock is exact too."""
    want = EXPECT[name]["expect"]
    value, want_unit, rel = want["rate"]
    rel = min(rel, 0.01) if exact else rel
    if exact:
        assert steps == want["steps"], (name, steps)
    else:  # a paced run is stopped on a real clock: one more line may land while the stop is under way
        assert want["steps"] <= steps <= want["steps"] + 1, (name, steps)
    assert unit == want_unit and rate == pytest.approx(value, rel=rel), (name, rate, unit)
    if want["memory_gib"] is None:
        assert memory_gib is None, (name, memory_gib)
    else:
        assert memory_gib == pytest.approx(want["memory_gib"], abs=0.001), (name, memory_gib)


@pytest.mark.parametrize("named", [True, False], ids=["preset-named", "recognised"])
@pytest.mark.parametrize("name", sorted(EXPECT))
def test_each_trainers_output_reads_as_the_trainer_means_it(name, named):
    rules = PRESETS[EXPECT[name]["preset"]] if named else ProgressRules()
    state, result, memory = read_until_stop(name, rules)
    assert state.preset == EXPECT[name]["preset"]
    rate, unit = result.throughput
    assert_as_expected(name, len(state.step_times_s), rate, unit, memory, exact=True)


SPACE = """
name: replay
parameters:
  - {name: micro, arg: --micro, kind: pow2, low: 1, high: 2, default: 1}
stop: {warmup_steps: 1, measured_steps: 3}
clocks: {startup_timeout_s: 60, stall_timeout_s: 30, stall_floor_s: 10, trial_timeout_s: 90, grace_s: 2}
"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("name", sorted(EXPECT))
def test_each_trainers_output_through_the_cli(tmp_path, name):
    spec = EXPECT[name]
    (tmp_path / "space.yaml").write_text(SPACE)
    replay = [sys.executable, str(SCRIPTS / "replay.py"), str(FIXTURES / f"{name}.log")]
    command = [*replay, str(spec.get("pace_s", PACE_S)), spec["pace"]]
    proc = run_cli(
        ["run", "--space", "space.yaml", "--trials", "1", "--confirm", "0", "--steps", str(spec["measured"])]
        + ["--json", "-o", "tuned.yaml", "--", *command],
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    (path,) = tmp_path.glob("results/*/trial-0000/result.json")
    result = TrialResult.from_json(json.loads(path.read_text()))
    assert result.status is FailureClass.OK and result.progress_preset == spec["preset"], result.verdict
    rate, unit = result.throughput
    assert_as_expected(name, len(result.step_times_s), rate, unit, result.peak_mem_gib)
    # the memory every output shows is the trainer's or none: never the host memory of the replay
    shown = json.loads(proc.stdout)["trials"][0]["peak_mem_gib"]
    metrics = yaml.safe_load((tmp_path / "tuned.yaml").read_text())["metrics"]
    for figure in (shown, metrics["peak_mem_gib"]):
        if spec["expect"]["memory_gib"] is None:
            assert figure is None
        else:
            assert math.isclose(figure, spec["expect"]["memory_gib"], abs_tol=0.01)
