"""The incumbent as the study's throughput model estimates it, and the two rules that stop a
running trial against it: the bar a screened trial must clear (``stop.screen_steps``), and the
early stop.

The incumbent is the fastest of many configs, each measured with noise, so its own runs flatter
it: picking the largest of twenty noisy figures picks one that measured high by chance, by 1.5 to
2 standard deviations of a run. Against that figure, a candidate as fast or faster, measured over
one noisy step, falls short and is stopped. The throughput model pools every run (the incumbent's
neighbours' too, which share most of its values) and shrinks the lucky figure back; its remaining
uncertainty about the incumbent widens the screening reach. The early stop holds each measured step
of a trial against the same estimate (``IncumbentBar.incumbent_per_s``), not against the
incumbent's own step of that number, which carries that step's noise too; and each warm-up step
against the incumbent's warm-up, moved by the same correction."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import fmean

from nccl_tune.tuner.records.stability import Candidate
from nccl_tune.tuner.records.study_records import TrialRecord
from nccl_tune.tuner.search.throughput_model import RUN_NOISE, ThroughputModel

SCREEN_Z = 2.0
"""Standard deviations of the difference between a screened estimate and the incumbent's that
screening allows before it stops a trial."""
SCREEN_MIN_REACH = 0.03
"""The least reach, as a fraction, however quiet the study's steps."""


@dataclass(frozen=True)
class IncumbentBar:
    """What a running trial is held against: the incumbent as the study's model estimates it."""

    incumbent_per_s: float
    """The incumbent's throughput in samples per second over its mean step time (as screening
    measures a trial), shrunk to what the throughput model estimates for its config."""
    reach_frac: float
    """How far below ``incumbent_per_s``, as a fraction, a trial may measure over its screened steps
    and still run on: ``SCREEN_Z`` standard deviations of the difference (the screened steps' noise,
    the run-to-run spread, the model's uncertainty about the incumbent), at least ``SCREEN_MIN_REACH``."""
    warmup_per_s: tuple[float, ...] = ()
    """The incumbent's warm-up steps in samples per second (over its runs, each step's geometric
    mean), moved by the same correction: what the early stop holds a trial's warm-up steps against,
    so a config far slower to start is stopped before its measured steps."""

    @property
    def floor_per_s(self) -> float:
        """The least a screened trial may measure and run on."""
        return self.incumbent_per_s * (1.0 - self.reach_frac)

    def stops(self, measured_per_s: float) -> bool:
        """True when a trial that measured ``measured_per_s`` over its screened steps is out of reach."""
        return measured_per_s < self.floor_per_s


def incumbent_bar(model: ThroughputModel, incumbent: Candidate, screen_steps: int) -> IncumbentBar | None:
    """The bar against ``incumbent`` for a trial screened over ``screen_steps`` steps (the reach; the
    early stop uses the estimates alone); None when no run of the incumbent measured samples per step
    and step times (nothing to compare a step with).

    The model's estimate is in the unit the trials printed (a trainer's tokens per second, say);
    the rules time steps. So the bar is the incumbent's own step-timed throughput, moved by the
    model's correction to its measured one."""
    measured = {o.number: o.log_tput for o in model.obs}
    runs = [
        r
        for r in incumbent.ok_runs
        if r.number in measured and r.result and r.result.samples_per_step and r.result.mean_step_s
    ]
    if not runs:
        return None
    mean, sd = model.predict([incumbent.values])
    shrink = float(mean[0]) - fmean(measured[r.number] for r in runs)
    per_s = math.exp(fmean(math.log(r.result.samples_per_step / r.result.mean_step_s) for r in runs) + shrink)
    var = model.noise**2 / max(screen_steps, 1) + RUN_NOISE**2 + model.extra_var + float(sd[0]) ** 2
    return IncumbentBar(per_s, max(SCREEN_MIN_REACH, SCREEN_Z * math.sqrt(var)), _warmup_per_s(runs, shrink))


def _warmup_per_s(runs: list[TrialRecord], shrink: float) -> tuple[float, ...]:
    """Each warm-up step's throughput over ``runs`` (geometric mean of those that ran it), times
    ``exp(shrink)``."""
    out = []
    for i in range(max(r.result.warmup_steps for r in runs)):
        logs = [
            math.log(r.result.samples_per_step / r.result.step_times_s[i])
            for r in runs
            if i < r.result.warmup_steps and i < len(r.result.step_times_s) and r.result.step_times_s[i] > 0
        ]
        if not logs:
            break
        out.append(math.exp(fmean(logs) + shrink))
    return tuple(out)
