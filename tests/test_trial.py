"""Throughput of a trial from what its log gave: a rate, step durations, and the unit it is in."""

from __future__ import annotations

import pytest

from nccl_tune.failure import OK_VERDICT, FailureClass
from nccl_tune.trial import StopReason, TrialResult


def result(**kw) -> TrialResult:
    return TrialResult(number=0, status=FailureClass.OK, verdict=OK_VERDICT, stop_reason=StopReason.MEASURED,
                       warmup_steps=1, **kw)


@pytest.mark.parametrize(
    "kw, expected",
    [
        (dict(step_times_s=(9.0, 2.0, 4.0), samples_per_step=30), (10.0, "samples/s")),
        (dict(step_times_s=(9.0, 2.0, 2.0)), (0.5, "steps/s")),
        (dict(step_times_s=(9.0, 2.0, 4.0), step_rates=(1.0, 100.0, 200.0), rate_unit="tokens"), (150.0, "tokens/s")),
        (dict(step_times_s=(9.0, 2.0, 4.0), step_rates=(1.0, 0.5, 0.25), rate_unit="steps", samples_per_step=8),
         (3.0, "samples/s")),
        # a step whose line printed no rate (a progress bar showing s/it): the durations decide
        (dict(step_times_s=(9.0, 2.0, 4.0), step_rates=(1.0, None, 0.25), rate_unit="steps"), (1 / 3, "steps/s")),
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
