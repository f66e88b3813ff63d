"""The NCCL sweep: each single NCCL change from the baseline timed on the collectives alone, before
any trial tries it.

A trial of an NCCL value costs a start-up of the trainer and its measured steps (10 to 30 minutes
on a real node); the NCCL check (``launchers.nccl_check``) of the same value costs its ranks'
start-up and a few rounds of the collectives a step makes (under a minute). Once the baseline has
finished a trial, the sweep checks the baseline's NCCL values, then every value of every tuned NCCL
variable on its own (the rest at the baseline's), and keeps each check's median round time in the
study (``A_SWEEP``, one entry per check as it ends: a killed tuner resumes the sweep where it
stopped; ``nccl_sweep_run`` runs it). The search reads it back (``load``):

- ``Sweep.speeds``: per variable and value, the log speed-up of the collectives over the baseline's
  (positive: faster), 0 where the two checks differ within their noise. The throughput model takes
  it as a feature whose effect on a step it learns (``ThroughputModel``: a step gains a share of
  its collectives' speed-up, the share fitted to the study's trials): the values whose collectives
  ran faster are tried first, and once trials show that the job's step does not follow its
  collectives (a compute-bound job), none of them promises much.
- ``Sweep.failed``: values whose check failed (NCCL refused them, or the collectives hung) next to
  the baseline's: no trial runs that set of NCCL values.

A one-node check cannot time what acts only between nodes (the network transport, sockets:
``node.nccl_scope``): those variables are not swept, and the search learns their effect from
trials as before. The
sweep runs only with the NCCL check (``--nccl-check``), for the default sampler.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna

from nccl_tune.failure import FailureClass
from nccl_tune.node.nccl_scope import between_nodes_only
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.tuner.records import dropped

A_SWEEP = "nccl_sweep"
"""Study user attribute: the sweep's checks, ``{key: entry}`` (``BASELINE_KEY`` or ``NAME=VALUE``)."""
BASELINE_KEY = "baseline"
NUMBER_BASE = 1_000_000
"""Numbers of the sweep's checks (their process markers and folders): apart from any trial's."""
CHECK_RUN_NOISE = 0.02
"""Spread of log round time between two checks of the same values (placement, clocks) that their
rounds do not show, at least."""
NOISE_Z = 2.0
"""Standard deviations of the difference between two checks within which they count as equally fast."""


@dataclass(frozen=True)
class SweepEntry:
    """One check of the sweep."""

    status: str
    """``FailureClass`` value of the check."""
    round_s: tuple[float, ...] = ()
    """Its timed rounds (the first, which sets up the communicators, left out)."""
    wall_s: float = 0.0
    gpu_s: float | None = None
    """GPU-seconds of the check on the modelled node (model launchers), else None."""
    values: Mapping[str, Any] = field(default_factory=dict)
    """The tuned NCCL variables' values it ran with."""

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "round_s": list(self.round_s),
            "wall_s": self.wall_s,
            "gpu_s": self.gpu_s,
            "values": dict(self.values),
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> SweepEntry:
        return SweepEntry(
            str(data.get("status", "")),
            tuple(float(x) for x in data.get("round_s") or ()),
            float(data.get("wall_s") or 0.0),
            data.get("gpu_s"),
            dict(data.get("values") or {}),
        )

    @property
    def ok(self) -> bool:
        return self.status == FailureClass.OK.value and bool(self.round_s)


@dataclass(frozen=True)
class Sweep:
    """What the sweep measured, as the search uses it (``load``)."""

    speeds: Mapping[str, Mapping[Any, float]] = field(default_factory=dict)
    """Per NCCL variable and value: log speed-up of the collectives over the baseline's values."""
    failed: Mapping[tuple[str, Any], str] = field(default_factory=dict)
    """(variable, value) whose check failed next to the baseline's values: the failure class."""
    gpu_s: float = 0.0
    """GPU-seconds the sweep's checks took (model launchers)."""
    baseline: Mapping[str, Any] = field(default_factory=dict)
    """The tuned NCCL variables' values of the baseline's check (every change is from these)."""

    def refused(self, values: Mapping[str, Any]) -> str | None:
        """Why ``values`` are not to run, or None: their NCCL values are the baseline's with one
        change, whose check failed in the sweep (a trial would fail at its own check)."""
        diffs = [(n, values.get(n)) for n in self.baseline if values.get(n) != self.baseline[n]]
        if len(diffs) != 1 or diffs[0] not in self.failed:
            return None
        name, value = diffs[0]
        return (
            f"{name}={value} failed its check in the NCCL sweep ({self.failed[diffs[0]]}) with the rest of the "
            "NCCL values at the baseline's"
        )


def key_of(name: str, value: Any) -> str:
    return f"{name}={value}"


def planned(space: SearchSpace, held: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The sweep's single changes: each value of each NCCL variable not held, other than the
    baseline's, except variables that act only between nodes (``node.nccl_scope``: a one-node
    check cannot time them)."""
    base = space.baseline(held)
    tuned = {n for n in dropped.nccl_params(space) if not between_nodes_only(n)} - set(held)
    return [(p.name, c) for p in space.parameters if p.name in tuned for c in p.choices if c != base[p.name]]


def entries(study: optuna.Study) -> dict[str, SweepEntry]:
    return {k: SweepEntry.from_json(v) for k, v in (study.user_attrs.get(A_SWEEP) or {}).items()}


def log_speedup(base: Sequence[float], other: Sequence[float]) -> float:
    """Log of the baseline's median round time over ``other``'s; 0 when the difference is within
    ``NOISE_Z`` standard deviations (the rounds' spread over their count, and ``CHECK_RUN_NOISE``)."""
    lb, lo = [math.log(x) for x in base if x > 0], [math.log(x) for x in other if x > 0]
    if not lb or not lo:
        return 0.0
    diff = statistics.median(lb) - statistics.median(lo)
    spread = [statistics.stdev(xs) if len(xs) > 1 else 0.0 for xs in (lb, lo)]
    sd = math.sqrt(spread[0] ** 2 / len(lb) + spread[1] ** 2 / len(lo) + 2 * CHECK_RUN_NOISE**2)
    return diff if abs(diff) > NOISE_Z * sd else 0.0


def load(study: optuna.Study, space: SearchSpace) -> Sweep:
    """The study's sweep as the search uses it (empty before the baseline's check is stored)."""
    done = entries(study)
    base = done.get(BASELINE_KEY)
    gpu = sum(e.gpu_s or 0.0 for e in done.values())
    if base is None or not base.ok:
        return Sweep(gpu_s=gpu)
    speeds: dict[str, dict[Any, float]] = {}
    failed: dict[tuple[str, Any], str] = {}
    for p in space.parameters:
        for c in p.choices:
            entry = done.get(key_of(p.name, c))
            if entry is None:
                continue
            if entry.ok:
                speeds.setdefault(p.name, {})[c] = log_speedup(base.round_s, entry.round_s)
            elif entry.status != FailureClass.INTERRUPTED.value:
                failed[(p.name, c)] = entry.status
    return Sweep(speeds, failed, gpu, dict(base.values))


@dataclass(frozen=True)
class SweepLine:
    """One check of the sweep, as the run prints it and the report shows it."""

    change: str
    """``NAME=VALUE``, or ``BASELINE_KEY`` for the baseline's NCCL values."""
    status: str
    round_ms: float | None
    """Median timed round, None when the check failed."""
    speed: float | None
    """Speed of the collectives relative to the baseline's (1.0: within noise); None for the
    baseline's own check, a failed one, or when the baseline's failed."""

    @property
    def speed_text(self) -> str:
        """The speed as the reports' tables give it (empty where there is none)."""
        if self.speed is None:
            return ""
        return "within noise" if self.speed == 1.0 else f"{self.speed:.2f}x"

    def text(self) -> str:
        what = "the baseline's NCCL values" if self.change == BASELINE_KEY else self.change
        if self.round_ms is None:
            return f"NCCL sweep: {what}: the check failed ({self.status}); no trial will run it next to the baseline's values"
        if self.speed is None:
            return f"NCCL sweep: {what}: a round of the collectives in {self.round_ms:.1f} ms"
        verdict = "within noise of the baseline's" if self.speed == 1.0 else f"{self.speed:.2f}x the baseline's speed"
        return f"NCCL sweep: {what}: a round in {self.round_ms:.1f} ms, {verdict}"


def line_of(key: str, entry: SweepEntry, base: SweepEntry | None) -> SweepLine:
    if not entry.ok:
        return SweepLine(key, entry.status, None, None)
    round_ms = statistics.median(entry.round_s) * 1e3
    if base is None or not base.ok or key == BASELINE_KEY:
        return SweepLine(key, entry.status, round_ms, None)
    return SweepLine(key, entry.status, round_ms, math.exp(log_speedup(base.round_s, entry.round_s)))


def report(study: optuna.Study) -> tuple[SweepLine, ...]:
    """Every check of the study's sweep, the baseline's first."""
    done = entries(study)
    base = done.get(BASELINE_KEY)
    order = sorted(done, key=lambda k: k != BASELINE_KEY)
    return tuple(line_of(k, done[k], base) for k in order)
