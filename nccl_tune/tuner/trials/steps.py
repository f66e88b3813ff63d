"""How many steps a trial measures: as many as the study's measured step noise asks for.

A trial's throughput is the mean of its measured steps (stalled steps left out: ``stragglers``),
whose scatter is read without them too. Its noise has two parts: the per-step
spread ``s`` of log step time over ``sqrt(n)`` for ``n`` measured steps, and a run-to-run spread
(placement, thermals) that no number of steps removes, at least ``throughput_model.RUN_NOISE``.
On a job whose steps scatter 6-10% (generation-heavy RL), three measured steps leave one trial
about 5% of noise, more than the differences the search must tell apart, and single trials then
steer it wrong. So once a finished trial has measured two steps or more, the next trial measures

    n = ceil((s / RUN_NOISE) ** 2)

steps: there the step part has fallen to the run-to-run floor, and more steps would not make one
trial more telling. ``s`` is the spread pooled over the study's finished trials
(``throughput_model.pooled_step_spread``, the estimate the throughput model weighs trials by),
shrunk towards the spread at which the space's own steps are what the rule asks for
(``RUN_NOISE * sqrt(stop.measured_steps)``), that spread weighing as much as ``PRIOR_DOF`` measured
steps: one trial's three steps know the spread only within a factor of about two, and squared,
that alone would set the next trial's steps at random (``n`` is then the mean of the steps the
measured spread asks for and the space's steps, weighed by degrees of freedom against ``PRIOR_DOF``).
``n`` is never below the space's ``stop.measured_steps`` and never above any of:

- the cost cap: the extra steps cost at most about what a trial's fixed part costs. A finished
  trial's fixed part is its wall time less its measured steps (start-up, warm-up, teardown: what
  every trial pays whatever it measures), counted in its own mean measured step; the cap is the
  space's steps plus the median of that count over the study's finished trials, rounded down. A
  trial then costs at most about twice what it costs with the space's steps.
- the timeout cap: the longest finished trial, run with ``n`` measured steps, stays within
  ``TIMEOUT_SHARE`` of the trial timeout (room for a config with slower steps; a trial over the
  timeout is stopped as ``budget``).
- ``MAX_MEASURED_STEPS``;
- the command's own length: a command of a fixed length (its own step cap, one epoch of a small
  data set) runs only so many steps; once a trial has exited 0 by itself, the next ones measure at
  most the most measured steps such a run had (``command_steps``; a run that ran the steps its
  trial planned is none: the space may hand the command that count, ``{total_steps}``), and a run that ends there with
  the space's steps measured is measured and ranked (``StopRule.enough_steps``).

An explicit ``--steps`` fixes the count (``trial_builder.stop_for``). Screening is unchanged: its
rung comes after the same ``stop.screen_steps``, and only trials within reach run the rest. The
rule reads nothing but the study's records, so a confirmation re-run and a resumed study get the
count the same records give.

When the caps (or ``--steps``) held the study's runs to half the steps their noise asks for or
fewer, the end-of-run summary and the report say how finely one run read its config and what count
would read it as the rule aims (``coarse_reading_note``): the ranking of configs closer than that
rests partly on chance, and only the user can decide that longer runs are worth it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from nccl_tune.failure import FailureClass
from nccl_tune.stragglers import FACTOR, worst_stall
from nccl_tune.trial import StopReason, TrialResult
from nccl_tune.tuner.records.study_records import TrialRecord
from nccl_tune.tuner.search.throughput_model import RUN_NOISE, pooled_step_spread, run_variance

MAX_MEASURED_STEPS = 16
"""Measured steps per trial at most, whatever the noise: at 10% step noise (the noisiest jobs met,
generation-heavy RL) 16 steps leave one trial 2.5% of step noise, within twice the run-to-run floor;
longer runs also average in drift (learning-rate warm-up, responses that grow in RL) rather than noise."""
PRIOR_DOF = 12
"""Degrees of freedom the space's own steps weigh as, against the spread the study measured (the
module docstring): about what six finished trials of three measured steps give; the measured
spread decides once the study has measured more than that."""
TIMEOUT_SHARE = 0.5
"""Share of the trial timeout the longest finished trial may take with the raised steps."""


@dataclass(frozen=True)
class MeasuredSteps:
    """The measured steps of the study's next trial, and why."""

    steps: int
    space_steps: int
    step_noise: float | None = None
    """Spread of log step time the rule used: pooled over the finished trials, shrunk towards the
    space's (None: no finished trial has measured two steps yet)."""
    measured_noise: float | None = None
    """The spread pooled over the finished trials, before shrinking."""
    wanted_steps: int | None = None
    """Steps that bring the step part of a trial's noise to ``RUN_NOISE``."""
    fixed_steps: float | None = None
    """Median fixed part of a finished trial, in its own measured steps (None: none measured)."""
    cost_cap_steps: int | None = None
    timeout_cap_steps: int | None = None
    command_cap_steps: int | None = None
    """The most measured steps a trial that ended by itself had (``command_steps``; None: none did)."""

    @property
    def command_capped(self) -> bool:
        """The command's own length holds the count below what the noise asks for."""
        cap, wanted = self.command_cap_steps, self.wanted_steps
        return cap is not None and wanted is not None and cap < wanted and cap <= self.steps

    def why(self) -> str:
        """One sentence: the noise, what it asks for, and the cap that binds."""
        if self.step_noise is None or self.wanted_steps is None:
            return "no finished trial has measured two steps yet"
        text = (
            f"the finished trials' steps scatter {self.measured_noise or 0.0:.1%} (log step time; "
            f"{self.step_noise:.1%} weighed with the spread the space's {self.space_steps} steps allow); "
            f"{self.wanted_steps} steps bring one trial's step noise to the {RUN_NOISE:.1%} run-to-run floor"
        )
        if self.steps >= self.wanted_steps:
            return text
        caps = []
        if self.cost_cap_steps is not None and self.cost_cap_steps <= self.steps:
            caps.append(
                "no trial's start-up measured yet"
                if self.fixed_steps is None
                else f"extra steps cost at most the start-up and warm-up ({self.fixed_steps:.1f} steps' worth)"
            )
        if self.timeout_cap_steps is not None and self.timeout_cap_steps <= self.steps:
            caps.append(f"the longest trial stays within {TIMEOUT_SHARE:.0%} of the trial timeout")
        if MAX_MEASURED_STEPS <= self.steps:
            caps.append(f"at most {MAX_MEASURED_STEPS}")
        if self.command_capped:
            caps.append(
                f"the command ends by itself after {self.command_cap_steps} measured steps (its own length: "
                "give it more steps with its own step flag for a finer reading)"
            )
        return text + (f"; capped at {self.steps}: " + ", ".join(caps) if caps else "")


def _measured(records: Sequence[TrialRecord]) -> list[TrialResult]:
    """Results of the finished trials that measured at least one step with a wall time beyond them."""
    out = []
    for r in records:
        res = r.result
        if res is None or r.status is not FailureClass.OK or r.forced:
            continue
        steps = res.measured_step_times_s
        if steps and min(steps) > 0 and res.wall_s > sum(steps):
            out.append(res)
    return out


def command_steps(records: Sequence[TrialRecord]) -> int | None:
    """The most measured steps of a trial whose command exited 0 by itself (its own last step)
    before the steps the trial was to run: what the command has shown it runs; None when every
    trial was stopped, failed or ran all its steps. A run that ended at its own planned steps says
    nothing of the command's length: the space may pass that count to it (``{total_steps}``)."""
    runs = [
        len(res.step_times_s) - res.warmup_steps
        for r in records
        if not r.forced  # a forced trial runs two steps by design
        and (res := r.result) is not None
        and res.stop_reason is StopReason.EXITED
        and res.exit_code == 0
        and len(res.step_times_s) > res.warmup_steps
        and (r.planned_steps is None or len(res.step_times_s) < r.planned_steps)
    ]
    return max(runs) if runs else None


def _fixed_s(res: TrialResult) -> float:
    """A trial's wall time less its measured steps: start-up, warm-up and teardown."""
    return res.wall_s - sum(res.measured_step_times_s)


def _mean_step_s(res: TrialResult) -> float:
    return sum(res.measured_step_times_s) / len(res.measured_step_times_s)


def next_measured_steps(
    space_steps: int, records: Sequence[TrialRecord], trial_timeout_s: float | None
) -> MeasuredSteps:
    """The measured steps of the study's next trial (the module docstring), from its ``records``;
    ``space_steps``: the space's ``stop.measured_steps``; ``trial_timeout_s``: the trial budget."""
    spread = pooled_step_spread(records)
    command_cap = command_steps(records)
    if spread is None:
        return MeasuredSteps(space_steps, space_steps, command_cap_steps=command_cap)
    measured, dof = spread
    noise = math.sqrt((dof * measured**2 + PRIOR_DOF * space_steps * RUN_NOISE**2) / (dof + PRIOR_DOF))
    wanted = math.ceil((noise / RUN_NOISE) ** 2 - 1e-9)
    results = _measured(records)
    fixed = median(_fixed_s(r) / _mean_step_s(r) for r in results) if results else None
    cost_cap = space_steps + math.floor(fixed) if fixed is not None else space_steps
    timeout_cap = None
    if trial_timeout_s and results:
        timeout_cap = min(
            math.floor((TIMEOUT_SHARE * trial_timeout_s - _fixed_s(r)) / _mean_step_s(r)) for r in results
        )
    caps = [wanted, cost_cap, MAX_MEASURED_STEPS] + [c for c in (timeout_cap, command_cap) if c is not None]
    steps = max(space_steps, min(caps))
    return MeasuredSteps(steps, space_steps, noise, measured, wanted, fixed, cost_cap, timeout_cap, command_cap)


def coarse_reading_note(records: Sequence[TrialRecord], space_steps: int) -> str | None:
    """At a study's end, when its finished runs measured half the steps their noise asks for or
    fewer (the cost or timeout cap held the count down, or ``--steps`` fixed it): how finely one
    run read its config, and the count that would read it as the rule aims, at most
    ``MAX_MEASURED_STEPS`` (both from the rule's estimate of the step spread). None when the runs
    measured more: a count a step or two short, as the estimate of the spread firms up during the
    study, reads nearly as well, and steps beyond the maximum average in drift."""
    rule = next_measured_steps(space_steps, records, None)
    counts = [len(res.measured_step_times_s) for res in _measured(records)]
    if rule.wanted_steps is None or rule.step_noise is None or not counts:
        return None
    steps, aim = max(1, int(median(counts))), min(rule.wanted_steps, MAX_MEASURED_STEPS)
    if 2 * steps > aim:
        return None
    error, better = (math.sqrt(run_variance(rule.step_noise, n)) for n in (steps, aim))
    cap = rule.command_cap_steps
    how = (
        f"the command ends by itself after {cap}: give it more steps with its own step flag"
        if cap is not None and cap < aim
        else f"--steps {aim}, each run then longer"
    )
    return (
        f"one run read a config's throughput to about ±{error:.1%} (steps scatter about {rule.step_noise:.1%}, "
        f"{steps} measured per run): configs closer than that may be ranked in the wrong order; {aim} "
        f"measured steps would read to about ±{better:.1%} ({how})"
    )


def stalled_steps_note(records: Sequence[TrialRecord]) -> str | None:
    """At a study's end, when some finished runs had a measured step that stalled
    (``TrialResult.straggler_steps``, left out of their throughput): how many, and how long the
    longest stall was against its run's median step. None when no run stalled."""
    runs = _measured(records)  # every measured step timed
    stalls = [worst_stall(r.measured_step_times_s, r.straggler_steps) for r in runs if r.straggler_steps]
    if not stalls:
        return None
    return (
        f"{len(stalls)} of {len(runs)} finished runs had a measured step over {FACTOR}x their "
        f"median (up to {max(stalls):.1f}x: a garbage collection, a checkpoint, an evaluation, a slow data "
        "fetch), left out of their throughput; stalls that come with every config cost the training "
        "whichever config it runs"
    )
