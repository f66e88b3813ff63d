"""The bar a screened trial must clear (``stop.screen_steps``): the incumbent's throughput as the
study's throughput model estimates it, and how far below it a trial's first measured steps may
fall and still run every measured step.

The incumbent is the fastest of many configs, each measured with noise, so its own runs flatter
it: picking the largest of twenty noisy figures picks one that measured high by chance, by 1.5 to
2 standard deviations of a run. Against that figure, a candidate as fast or faster, measured over
one noisy step, falls short and is stopped. The throughput model pools every run (the incumbent's
neighbours' too, which share most of its values) and shrinks the lucky figure back; its remaining
uncertainty about the incumbent widens the reach."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import fmean

from nccl_tune.tuner.stability import Candidate
from nccl_tune.tuner.throughput_model import RUN_NOISE, ThroughputModel

SCREEN_Z = 2.0
"""Standard deviations of the difference between a screened estimate and the incumbent's that
screening allows before it stops a trial."""
SCREEN_MIN_REACH = 0.03
"""The least reach, as a fraction, however quiet the study's steps."""


@dataclass(frozen=True)
class ScreenBar:
    incumbent_per_s: float
    """The incumbent's throughput in samples per second over its mean step time (as screening
    measures a trial), shrunk to what the throughput model estimates for its config."""
    reach_frac: float
    """How far below ``incumbent_per_s``, as a fraction, a trial may measure over its screened steps
    and still run on: ``SCREEN_Z`` standard deviations of the difference (the screened steps' noise,
    the run-to-run spread, the model's uncertainty about the incumbent), at least ``SCREEN_MIN_REACH``."""

    @property
    def floor_per_s(self) -> float:
        """The least a screened trial may measure and run on."""
        return self.incumbent_per_s * (1.0 - self.reach_frac)

    def stops(self, measured_per_s: float) -> bool:
        """True when a trial that measured ``measured_per_s`` over its screened steps is out of reach."""
        return measured_per_s < self.floor_per_s


def screen_bar(model: ThroughputModel, incumbent: Candidate, screen_steps: int) -> ScreenBar | None:
    """The bar against ``incumbent`` for a trial screened over ``screen_steps`` steps; None when no
    run of the incumbent measured samples per step and step times (nothing to compare a step with).

    The model's estimate is in the unit the trials printed (a trainer's tokens per second, say);
    screening times steps. So the bar is the incumbent's own step-timed throughput, moved by the
    model's correction to its measured one."""
    measured = {o.number: o.log_tput for o in model.obs}
    pairs = [
        (measured[r.number], math.log(r.result.samples_per_step / r.result.mean_step_s))
        for r in incumbent.ok_runs
        if r.number in measured and r.result and r.result.samples_per_step and r.result.mean_step_s
    ]
    if not pairs:
        return None
    mean, sd = model.predict([incumbent.values])
    shrink = float(mean[0]) - fmean(m for m, _ in pairs)
    per_s = math.exp(fmean(s for _, s in pairs) + shrink)
    var = model.noise**2 / max(screen_steps, 1) + RUN_NOISE**2 + model.extra_var + float(sd[0]) ** 2
    return ScreenBar(per_s, max(SCREEN_MIN_REACH, SCREEN_Z * math.sqrt(var)))
