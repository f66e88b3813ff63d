"""Throughput of a trial from what its log gave (a rate, step durations, and the unit it is in), and the
clocks' one rule for what is known about a phase's duration."""

from __future__ import annotations

import pytest

from nccl_tune.failure import OK_VERDICT, FailureClass
from nccl_tune.trial import OUTSIDE_PHASES, Clocks, GpuMemory, MemoryReport, StopReason, TrialResult, fold_phase_max


def result(**kw) -> TrialResult:
    return TrialResult(
        number=0, status=FailureClass.OK, verdict=OK_VERDICT, stop_reason=StopReason.MEASURED, warmup_steps=1, **kw
    )


@pytest.mark.parametrize(
    "kw, expected",
    [
        (dict(step_times_s=(9.0, 2.5, 3.5), samples_per_step=30), (10.0, "samples/s")),
        (dict(step_times_s=(9.0, 2.0, 2.0)), (0.5, "steps/s")),
        (dict(step_times_s=(9.0, 2.5, 3.5), step_rates=(1.0, 100.0, 200.0), rate_unit="tokens"), (150.0, "tokens/s")),
        (
            dict(step_times_s=(9.0, 2.5, 3.5), step_rates=(1.0, 0.5, 0.25), rate_unit="steps", samples_per_step=8),
            (3.0, "samples/s"),
        ),
        # a step whose line printed no rate (a progress bar showing s/it): the durations decide
        (dict(step_times_s=(9.0, 2.5, 3.5), step_rates=(1.0, None, 0.25), rate_unit="steps"), (1 / 3, "steps/s")),
        # the last step's rate still on its way when the run stopped: the steps that printed one decide
        (
            dict(step_times_s=(9.0, 2.5, 3.5, 4.0), step_rates=(None, 100.0, 200.0, None), rate_unit="samples"),
            (150.0, "samples/s"),
        ),
        (
            dict(step_times_s=(9.0, 2.5, 3.5, 4.0), step_rates=(None, 100.0, None, None), rate_unit="samples"),
            (0.3, "steps/s"),
        ),
        (dict(step_times_s=(9.0,)), (None, "steps/s")),
    ],
)
def test_throughput_and_its_unit(kw, expected):
    value, unit = result(**kw).throughput
    assert unit == expected[1] and value == (pytest.approx(expected[0]) if expected[0] else None)


def test_result_json_keeps_rates_unit_and_preset():
    r = result(step_times_s=(1.0, 2.0), step_rates=(5.0, 6.0), rate_unit="samples", progress_preset="deepspeed")
    data = r.to_json()
    assert data["throughput_per_s"] == 6.0 and data["throughput_unit"] == "samples/s"
    back = TrialResult.from_json(data)
    assert back.step_rates == (5.0, 6.0) and back.progress_preset == "deepspeed" and back.throughput == r.throughput


def test_measurements_fold_by_their_longest_duration_per_phase() -> None:
    folded = fold_phase_max(
        {"generate": 300.0, "step": 400.0}, {"generate": 500.0}, {}, {"policy_train": 60.0, "step": 350.0}
    )
    assert folded == {"generate": 500.0, "step": 400.0, "policy_train": 60.0}
    assert fold_phase_max() == {}


@pytest.mark.parametrize(
    "estimates, study, trial, phase, longest",
    [
        ({"generate": 1200.0}, [], [], "generate", 1200.0),  # the space's estimate until measured
        ({"generate": 1200.0}, [{"generate": 300.0}], [], "generate", 300.0),  # a measurement replaces it
        ({"generate": 1200.0}, [], [{"generate": 300.0}], "generate", 300.0),  # also this trial's own
        ({}, [{"generate": 300.0}, {"generate": 500.0}], [{"generate": 400.0}], "generate", 500.0),  # the longest
        ({"generate": 1200.0}, [{"step": 9.0}], [], "policy_train", None),  # unknown
        ({"generate": 1200.0}, [], [], None, None),  # no open phase
    ],
)
def test_the_longest_known_duration_of_a_phase(estimates, study, trial, phase, longest) -> None:
    clocks = Clocks(phase_estimates_s=estimates).learned(*study).learned(*trial)
    assert clocks.longest_phase_s(phase) == longest


def test_the_stall_deadline_follows_the_longest_known_duration() -> None:
    clocks = Clocks(stall_timeout_s=900, stall_floor_s=120, stall_multiplier=5, phase_estimates_s={"generate": 1200.0})
    assert clocks.stall_deadline_s("generate") == 6000
    assert clocks.learned({"generate": 300.0}).stall_deadline_s("generate") == 1500
    assert clocks.learned({"generate": 10.0}).stall_deadline_s("generate") == 120  # the floor
    assert clocks.stall_deadline_s("policy_train") == clocks.stall_deadline_s(None) == 900
    assert clocks.learned({"x": 1.0}).phase_estimates_s == clocks.phase_estimates_s  # estimates are kept
    assert (
        clocks.learned({"generate": 300.0}).stall_deadline_s("generate", {"generate": 400.0}) == 2000
    )  # and the trial's own


@pytest.mark.parametrize(
    "phases, expected",
    [
        ({"generate": 0.61, "policy_train": 0.79, OUTSIDE_PHASES: 0.05}, "policy_train"),
        ({"generate": 0.91, "policy_train": 0.79}, "generate"),
        ({"generate": 0.61, "policy_train": 0.79, OUTSIDE_PHASES: 0.95}, None),  # the peak came outside every phase
        ({"step": 0.78, OUTSIDE_PHASES: 0.05}, None),  # one phase: nothing to tell apart
        ({}, None),
    ],
)
def test_the_phase_holding_the_peak_is_named_when_phases_differ(phases, expected) -> None:
    report = MemoryReport(
        "nvml", gpus=(GpuMemory(0, 80.0, 80.0 * max(phases.values(), default=0.5)),), phase_peak_frac=phases
    )
    assert report.peak_phase == expected


def test_a_gpu_of_unknown_size_gives_no_share_of_the_gpu():
    """A trainer's memory line in GiB alone (verl's, DeepSpeed's) on a node NVML cannot read: the
    peak is known, the share of the GPU is not, and nothing downstream may see NaN."""
    report = MemoryReport("log", gpus=(GpuMemory(0, float("nan"), 38.0),))
    assert report.peak_gib == 38.0 and report.max_peak_frac is None
    mixed = MemoryReport("log", gpus=(GpuMemory(0, float("nan"), 38.0), GpuMemory(1, 80.0, 40.0)))
    assert mixed.max_peak_frac == 0.5
