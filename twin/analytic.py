"""Runs of an analytic landscape, shaped like the twin's: a config's noise-free behaviour
(``Truth``: step time, per-GPU peak, per phase too when the job's phases peak apart, the failure it
meets) becomes an ``evaluate.Outcome`` with timing noise, chance events and the log lines a real
failure prints, so that the model launcher (``ModelLauncher(cost=...)``) supervises it with the
same clocks and rules as the twin.

A landscape is any callable ``values -> Truth`` with the node's constants (``AnalyticNode``): the
search benchmark's synthetic families (``families.py``) are such callables. Everything here is
deterministic in the run seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any

from nccl_tune.failure import FailureClass
from nccl_tune.trial import TrialSpec
from twin import logfmt
from twin.cost_model import H100_CAPACITY_GIB
from twin.evaluate import Outcome, PhaseSpan, SimFailure, StepRecord, _mix

_NORMAL = NormalDist()
FIRST_STEP_FACTOR = 1.3
"""The first step is slower (compilation, allocator warm-up)."""
TRAIN_SHARE = 0.85
"""Share of a step spent in its ``policy_train`` phase (the rest: data, logging)."""
WATCHDOG_S = 180.0
"""A rank stuck in a collective is killed by the process-group timeout after this long."""
ABORT_S = 3.0
STEP_PHASES = ("generate", "policy_train")
"""The phases of a step a ``Truth`` may give peaks for, in order: ``generate`` takes the part of
the step before ``policy_train``."""


@dataclass(frozen=True)
class Truth:
    """A config's noise-free behaviour on the modelled node."""

    step_s: float
    """Steady-state step time (modelled seconds)."""
    peak_gib: float
    """Peak device memory of the busiest GPU (may exceed the capacity: then it runs out)."""
    failure: str | None = None
    """A failure every run meets: ``hang`` (a collective never completes), ``nccl_error`` (NCCL refuses
    the settings at start-up), ``crash``; ``oom`` is implied by ``peak_gib`` above the capacity."""
    hang_p: float = 0.0
    """Chance per step of a hang (near the memory wall, flaky settings)."""
    detail: str = ""
    """One line naming the cause (NCCL's refusal, the hang's trigger)."""
    nccl_failure: str | None = None
    """The part of ``failure`` that NCCL's settings cause without the trainer (``hang``, ``nccl_error``):
    a run of the collectives alone with the same variables (the NCCL check) meets it too."""
    nccl_hang_p: float = 0.0
    """The part of ``hang_p`` that NCCL's settings cause without the trainer, per round of the NCCL
    check (a round makes the collectives of a step)."""
    check_time_factor: float = 1.0
    """Time of the NCCL check's collectives (one node, no trainer) relative to NCCL's defaults: what
    a check measures of the NCCL settings, not what they do to the job's step (a job that hides its
    collectives behind compute gains little from faster ones; settings that act only between nodes
    leave a one-node check unchanged)."""
    phase_peak_gib: Mapping[str, float] = field(default_factory=dict, hash=False)
    """Peak of the busiest GPU per phase of ``STEP_PHASES``, for jobs whose phases peak apart (the
    largest is ``peak_gib``); empty for a job with one phase (``policy_train``), reported as none."""

    def __post_init__(self) -> None:
        if self.phase_peak_gib:
            unknown = set(self.phase_peak_gib) - set(STEP_PHASES)
            if unknown or max(self.phase_peak_gib.values()) != self.peak_gib:
                raise ValueError(
                    f"phase peaks {dict(self.phase_peak_gib)}: phases of {STEP_PHASES}, the largest peak_gib"
                )

    def stable(self, capacity_gib: float, min_headroom_frac: float) -> bool:
        """Finishes every step of every run with the headroom free."""
        return self.failure is None and self.hang_p == 0.0 and self.peak_gib <= (1.0 - min_headroom_frac) * capacity_gib


@dataclass(frozen=True)
class AnalyticNode:
    """The constants of one landscape instance that are not per config."""

    startup_s: float = 120.0
    step_noise: float = 0.02
    """Standard deviation of log step time, per step."""
    run_noise: float = 0.01
    """Standard deviation of a run's log step time offset (placement, thermals)."""
    gpus: int = 8
    capacity_gib: float = H100_CAPACITY_GIB


def _normal(*keys: int) -> float:
    return _NORMAL.inv_cdf(min(max(_mix(*keys), 1e-9), 1 - 1e-9))


def run_outcome(truth: Truth, node: AnalyticNode, seed: int, steps: int, samples_per_step: float) -> Outcome:
    """One run of ``steps`` steps (deterministic in ``seed``): phases, memory, the failure."""
    phases: list[PhaseSpan] = []
    records: list[StepRecord] = []
    memory: dict[int, tuple[float, ...]] = {}
    phase_memory: dict[int, dict[str, float]] = {}
    offset = math.exp(node.run_noise * _normal(seed, 1))
    t = node.startup_s * math.exp(0.05 * _normal(seed, 2))
    factors = _gpu_factors(node, seed)
    gpu_peaks = [truth.peak_gib * f for f in factors]
    failure = None
    if truth.failure == "nccl_error":
        failure = _failure(truth, node, 0, t * 0.9, "nccl_error")
    for step in range(1, steps + 1 if failure is None else 1):
        planned = truth.step_s * offset * math.exp(node.step_noise * _normal(seed, 3, step))
        planned *= FIRST_STEP_FACTOR if step == 1 else 1.0
        kind = _fails_in(truth, node, seed, step)
        memory[step] = tuple(min(p, node.capacity_gib) for p in gpu_peaks)
        failing = None if kind is None else _failing_phase(truth, node, kind)
        spans, fail_at = _step_spans(truth, step, t, planned, failing)
        phases += spans
        if truth.phase_peak_gib:  # each phase that ran, with the per-GPU peaks' spread
            phase_memory[step] = {
                s.name: max(min(truth.phase_peak_gib[s.name] * f, node.capacity_gib) for f in factors)
                for s in spans
                if s.name in truth.phase_peak_gib
            }
        if failing is not None:
            failure = _failure(truth, node, step, fail_at, kind, failing)
            break
        records.append(StepRecord(step, planned, memory[step]))
        t = t + planned
    return Outcome(
        samples_per_step=int(samples_per_step),
        total_steps=10_000,
        steps_planned=steps,
        startup_s=node.startup_s,
        phases=tuple(phases),
        steps=tuple(records),
        step_s=truth.step_s,
        first_step_s=truth.step_s * FIRST_STEP_FACTOR,
        phase_s={
            "step": truth.step_s,
            "policy_train": truth.step_s * TRAIN_SHARE,
            **({"generate": truth.step_s * (1 - TRAIN_SHARE)} if "generate" in truth.phase_peak_gib else {}),
        },
        gpu_capacity_gib=node.capacity_gib,
        gpu_peak_gib=tuple(max((m[g] for m in memory.values()), default=0.0) for g in range(node.gpus)),
        failure=failure,
        end_s=failure.exit_s if failure is not None else t,
        step_memory_gib=memory,
        step_phase_memory_gib=phase_memory,
    )


def _gpu_factors(node: AnalyticNode, seed: int) -> list[float]:
    """Each GPU's peak as a share of the busiest one's: 1 for the busiest, a little below for the others."""
    star = int(_mix(seed, 4) * node.gpus)
    return [1.0 if g == star else 0.93 + 0.05 * _mix(seed, 5, g) for g in range(node.gpus)]


def _failing_phase(truth: Truth, node: AnalyticNode, kind: str) -> str:
    """The phase a failure of ``kind`` happens in: out of memory, the first whose peak exceeds the
    capacity; the others in ``policy_train``."""
    if kind != "oom" or not truth.phase_peak_gib:
        return "policy_train"
    return next(p for p in STEP_PHASES if truth.phase_peak_gib.get(p, 0.0) > node.capacity_gib)


def _step_spans(
    truth: Truth, step: int, t: float, planned: float, failing: str | None
) -> tuple[list[PhaseSpan], float]:
    """One step from ``t``: ``step`` around ``generate`` (when the truth gives its peak) and
    ``policy_train``, up to ``failing`` (left open, as the step); and when the step fails or ends."""
    train_start = t + (1 - TRAIN_SHARE) * planned
    end = t + planned
    bounds = {"generate": (t, train_start), "policy_train": (train_start, end)}
    names = [p for p in STEP_PHASES if p == "policy_train" or p in truth.phase_peak_gib]
    if failing is None:
        return [PhaseSpan(step, "step", t, end, 0, planned)] + [PhaseSpan(step, p, *bounds[p], 1) for p in names], end
    names = names[: names.index(failing) + 1]
    spans = [PhaseSpan(step, "step", t, None, 0)]
    spans += [PhaseSpan(step, p, bounds[p][0], None if p == failing else bounds[p][1], 1) for p in names]
    at = (
        train_start + 0.5 * TRAIN_SHARE * planned
        if failing == "policy_train"
        else t + 0.5 * (1 - TRAIN_SHARE) * planned
    )
    return spans, at


def _fails_in(truth: Truth, node: AnalyticNode, seed: int, step: int) -> str | None:
    if truth.peak_gib > node.capacity_gib:
        return "oom"
    if truth.failure in ("hang", "crash"):
        return truth.failure
    if truth.hang_p > 0 and _mix(seed, 6, step) < truth.hang_p:
        return "hang"
    return None


def _failure(
    truth: Truth, node: AnalyticNode, step: int, at: float, kind: str, phase: str = "policy_train"
) -> SimFailure:
    worker = f"({logfmt.POLICY_ACTOR} pid=400103) "
    timeout = worker + logfmt.watchdog_timeout_line(
        4, 1200 + step, "_ALLGATHER_BASE", 1 << 20, 1 << 23, int(WATCHDOG_S * 1000)
    )
    if kind == "oom":
        used = node.capacity_gib - 0.05
        msg = logfmt.cuda_oom_message(
            gpu=3,
            tried_gib=max(truth.peak_gib - used, 0.1) * 0.6 + 0.02,
            capacity_gib=node.capacity_gib,
            free_gib=0.05,
            process_gib=used - 0.6,
            allocated_gib=used * 0.9,
            reserved_unallocated_gib=used * 0.05,
        )
        return SimFailure(
            FailureClass.OOM,
            "oom",
            3,
            step,
            phase,
            at,
            at + WATCHDOG_S + ABORT_S,
            evidence=(worker + "torch.OutOfMemoryError: " + msg, timeout),
            advice=f"GPU 3 needed {truth.peak_gib:.1f} of {node.capacity_gib:.2f} GiB: lower the batch or add an enabler",
        )
    if kind == "nccl_error":
        warn = logfmt.nccl_warn_line(0, 400100, truth.detail or "Invalid NCCL setting", host="node-0")
        return SimFailure(
            FailureClass.NCCL_ERROR,
            "nccl_error",
            0,
            0,
            None,
            at,
            at + ABORT_S,
            evidence=(worker + warn, worker + "torch.distributed.DistBackendError: NCCL error: invalid usage"),
            advice=f"NCCL refused the settings: {truth.detail}",
        )
    if kind == "crash":
        return SimFailure(
            FailureClass.CRASH,
            "crash",
            3,
            step,
            "policy_train",
            at,
            at + ABORT_S,
            evidence=(worker + "Fatal Python error: Segmentation fault",),
            advice=truth.detail or "crashed",
        )
    return SimFailure(
        FailureClass.HANG,
        "hang",
        3,
        step,
        "policy_train",
        at,
        at + WATCHDOG_S + ABORT_S,
        evidence=(timeout,),
        advice=truth.detail or "a collective never completed",
    )


Landscape = Callable[[Mapping[str, Any]], Truth]

CHECK_NODE = AnalyticNode(startup_s=25.0, step_noise=0.05, run_noise=0.02)
"""The NCCL check on the modelled node: its ranks start and set up NCCL in about 25 s."""
CHECK_ROUND_S = 0.5
CHECK_PEAK_GIB = 2.0


def check_truth(truth: Truth) -> Truth:
    """What the NCCL check (``launchers.nccl_check``) of a config meets: the failures its NCCL
    settings cause alone, on rounds of collectives that take ``CHECK_ROUND_S`` at NCCL's defaults
    (``Truth.check_time_factor`` times that with the config's NCCL settings)."""
    return Truth(
        CHECK_ROUND_S * truth.check_time_factor, CHECK_PEAK_GIB, truth.nccl_failure, truth.nccl_hang_p, truth.detail
    )


def analytic_cost(landscape: Landscape, node: AnalyticNode) -> Callable[[TrialSpec, int, int], Outcome]:
    """The ``ModelLauncher`` cost function of a landscape: the trial's own parameter values in, a run out."""

    check_node = replace(CHECK_NODE, gpus=node.gpus, capacity_gib=node.capacity_gib)

    def cost(spec: TrialSpec, seed: int, steps: int) -> Outcome:
        if spec.nccl_check:  # its own draws: the check's rounds are not the trial's steps
            return run_outcome(check_truth(landscape(spec.params)), check_node, seed ^ 0x9E3779B9, steps, 1.0)
        return run_outcome(landscape(spec.params), node, seed, steps, spec.samples_per_step or 1.0)

    return cost
