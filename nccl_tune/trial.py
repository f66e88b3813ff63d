"""The data passed between the tuner and a launcher: what to run, and what happened.

All types are frozen dataclasses with units in field names. ``TrialSpec`` goes in,
``TrialResult`` comes out; both serialise to JSON (``to_json``/``from_json``) so a trial
folder and the study storage hold everything a report needs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from nccl_tune.failure import FailureClass, Verdict

MARKER_ENV = "NCCL_TUNE_TRIAL"
"""Environment variable naming the trial (``<study>/<number>``) in every process it starts."""

ParamValue = Any  # int | float | str | bool


def _frozen_map(m: Mapping | None) -> Mapping:
    return MappingProxyType(dict(m or {}))


@dataclass(frozen=True)
class Clocks:
    """The three clocks that supervise a trial, and teardown's grace period."""

    startup_timeout_s: float = 900.0
    """From launch to the first progress line (model loading, engine start-up)."""
    stall_timeout_s: float = 300.0
    """No progress line for this long while the current phase's duration is unknown: ``hang``."""
    stall_floor_s: float = 20.0
    """The adaptive stall timeout never goes below this."""
    stall_multiplier: float = 3.0
    """Adaptive stall timeout: this multiple of the longest known duration of the open phase."""
    trial_timeout_s: float = 3600.0
    """Whole-trial budget: a trial still running after this is stopped as ``budget``."""
    grace_s: float = 10.0
    """SIGTERM to the process group, then SIGKILL after this many seconds."""
    known_phase_s: Mapping[str, float] = field(default_factory=dict)
    """Longest duration seen so far in the study, per phase name (``step`` included)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "known_phase_s", _frozen_map(self.known_phase_s))

    def stall_deadline_s(self, open_phase: str | None) -> float:
        """Seconds of silence allowed while ``open_phase`` (innermost open phase) is running."""
        known = self.known_phase_s.get(open_phase) if open_phase else None
        if known is None:
            return self.stall_timeout_s
        return max(self.stall_floor_s, self.stall_multiplier * known)


@dataclass(frozen=True)
class StopRule:
    """When a trial has measured enough."""

    warmup_steps: int = 1
    """Steps run first and not measured (the first step is slow: compilation, allocator warm-up)."""
    measured_steps: int = 2
    """Steps measured after the warm-up; the trial is stopped once they are done."""

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.measured_steps


@dataclass(frozen=True)
class ProgressRules:
    """How progress is read from the command's output (regular expressions, matched after
    ANSI colours and Ray ``(name pid=N)`` prefixes are stripped)."""

    step_end: str = r"Finished: 'step', time cost: (?P<seconds>\d+(?:\.\d+)?)s"
    """A finished training step; group ``seconds`` is its duration."""
    phase_start: str = r"Started: '(?P<phase>[^']+)'"
    """A phase starts; group ``phase`` is its name."""
    phase_end: str = r"Finished: '(?P<phase>[^']+)', time cost: (?P<seconds>\d+(?:\.\d+)?)s"
    """A phase ends; groups ``phase`` and ``seconds``."""
    memory: str | None = (
        r"(?:rank[ =:]*(?P<rank>\d+)\b.*?)?memory: (?P<gib>\d+(?:\.\d+)?)GiB(?:\s*\((?P<pct>\d+(?:\.\d+)?)%\))?"
    )
    """A memory line the trainer prints: group ``gib`` (peak GiB), optional ``rank``/``gpu``, optional
    ``pct`` (percent of the GPU's total, which gives the total)."""
    training_done: str | None = r"Training done!"
    """Training finished: failures after this line happened during teardown."""


@dataclass(frozen=True)
class TrialSpec:
    """Everything needed to run one trial."""

    study: str
    number: int
    params: Mapping[str, ParamValue]
    """The trial's parameter values, by the space's parameter names."""
    argv: tuple[str, ...]
    """The full command line: the user's command, fixed overrides, then the trial's overrides."""
    env: Mapping[str, str | None]
    """Overlay on the tuner's environment; ``None`` removes a variable (a parameter set to "unset")."""
    trial_dir: Path
    clocks: Clocks = field(default_factory=Clocks)
    stop: StopRule = field(default_factory=StopRule)
    progress: ProgressRules = field(default_factory=ProgressRules)
    samples_per_step: float | None = None
    """Samples a step processes (e.g. train batch x samples per prompt): turns step time into throughput."""
    cwd: Path | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", _frozen_map(self.params))
        object.__setattr__(self, "env", _frozen_map(self.env))
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "trial_dir", Path(self.trial_dir))

    @property
    def marker(self) -> str:
        """Value of ``NCCL_TUNE_TRIAL`` for this trial."""
        return f"{self.study}/{self.number}"


class StopReason(str, Enum):
    """Why the launcher stopped watching the trial."""

    MEASURED = "measured"
    """All measured steps done; we stopped it (success path)."""
    EXITED = "exited"
    """The command exited on its own."""
    STALL = "stall"
    """No progress for the stall timeout."""
    STARTUP = "startup"
    """No first progress line before the start-up deadline."""
    BUDGET = "budget"
    """The trial budget ran out."""
    EARLY_STOP = "early_stop"
    """The tuner asked to stop it (already slower than the incumbent)."""
    INTERRUPTED = "interrupted"
    """The tuner itself was interrupted."""
    LAUNCH_ERROR = "launch_error"
    """The command could not be started at all."""
    PREDICTED = "predicted"
    """Not launched: predicted to fail from earlier trials (e.g. dominates a known OOM)."""


@dataclass(frozen=True)
class GpuMemory:
    """Memory of one GPU over a trial, in GiB."""

    index: int
    total_gib: float
    peak_gib: float
    baseline_gib: float = 0.0
    """Used before the study started (other tenants, the display)."""

    @property
    def headroom_gib(self) -> float:
        return self.total_gib - self.peak_gib

    @property
    def peak_frac(self) -> float:
        return self.peak_gib / self.total_gib if self.total_gib else math.nan


@dataclass(frozen=True)
class MemoryReport:
    """Peak memory of a trial, from the best source available."""

    source: str
    """``nvml`` (sampled per GPU), ``log`` (lines the trainer printed), ``rss`` (process tree), ``model``."""
    gpus: tuple[GpuMemory, ...] = ()
    peak_rss_gib: float | None = None
    """Peak resident memory of the trial's process tree (always sampled)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", tuple(self.gpus))

    @property
    def peak_gib(self) -> float | None:
        """Highest per-GPU peak, or the process tree's RSS when no GPU figure exists."""
        if self.gpus:
            return max(g.peak_gib for g in self.gpus)
        return self.peak_rss_gib

    @property
    def min_headroom_gib(self) -> float | None:
        return min(g.headroom_gib for g in self.gpus) if self.gpus else None

    @property
    def max_peak_frac(self) -> float | None:
        return max(g.peak_frac for g in self.gpus) if self.gpus else None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "gpus": [asdict(g) for g in self.gpus],
            "peak_rss_gib": self.peak_rss_gib,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> "MemoryReport | None":
        if not data:
            return None
        return cls(
            source=data["source"],
            gpus=tuple(GpuMemory(**g) for g in data.get("gpus") or ()),
            peak_rss_gib=data.get("peak_rss_gib"),
        )


@dataclass(frozen=True)
class TrialResult:
    """What happened in one trial."""

    number: int
    status: FailureClass
    verdict: Verdict
    stop_reason: StopReason
    exit_code: int | None = None
    """Exit code of the command's top process; None when it was killed by a signal or never started."""
    signal_name: str | None = None
    """The signal that ended the command's top process (``SIGABRT``, ``SIGKILL``, ...), if any."""
    step_times_s: tuple[float, ...] = ()
    """Duration of every finished step, warm-up included, in order."""
    warmup_steps: int = 0
    phase_max_s: Mapping[str, float] = field(default_factory=dict)
    """Longest duration per phase name seen in this trial."""
    samples_per_step: float | None = None
    memory: MemoryReport | None = None
    wall_s: float = 0.0
    """From launch to the end of teardown."""
    trial_dir: Path | None = None
    log_paths: tuple[Path, ...] = ()
    fr_dumps: tuple[Path, ...] = ()
    """Flight Recorder dumps the trial left (one per rank that dumped)."""
    escaped_processes: int = 0
    """Processes of the trial found and killed outside its process group (setsid children, Ray workers)."""
    survivors: int = 0
    """Processes of the trial still alive after teardown (should always be 0)."""
    modelled_gpu_s: float | None = None
    """GPU-seconds the trial would cost on the real node (set by model-based launchers)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "phase_max_s", _frozen_map(self.phase_max_s))
        object.__setattr__(self, "step_times_s", tuple(self.step_times_s))
        object.__setattr__(self, "log_paths", tuple(Path(p) for p in self.log_paths))
        object.__setattr__(self, "fr_dumps", tuple(Path(p) for p in self.fr_dumps))

    @property
    def measured_step_times_s(self) -> tuple[float, ...]:
        return self.step_times_s[self.warmup_steps :]

    @property
    def mean_step_s(self) -> float | None:
        m = self.measured_step_times_s
        return sum(m) / len(m) if m else None

    @property
    def throughput_samples_per_s(self) -> float | None:
        """Samples per second over the measured steps (None without measured steps or batch size)."""
        mean = self.mean_step_s
        if not mean or not self.samples_per_step:
            return None
        return self.samples_per_step / mean

    @property
    def peak_mem_gib(self) -> float | None:
        return self.memory.peak_gib if self.memory else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Enum):
                v = v.value
            elif isinstance(v, Verdict):
                v = v.to_json()
            elif isinstance(v, MemoryReport):
                v = v.to_json()
            elif isinstance(v, Path):
                v = str(v)
            elif isinstance(v, tuple):
                v = [str(x) if isinstance(x, Path) else x for x in v]
            elif isinstance(v, Mapping):
                v = dict(v)
            out[f.name] = v
        out["throughput_samples_per_s"] = self.throughput_samples_per_s
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "TrialResult":
        return cls(
            number=int(data["number"]),
            status=FailureClass(data["status"]),
            verdict=Verdict.from_json(data["verdict"]),
            stop_reason=StopReason(data["stop_reason"]),
            exit_code=data.get("exit_code"),
            signal_name=data.get("signal_name"),
            step_times_s=tuple(data.get("step_times_s") or ()),
            warmup_steps=int(data.get("warmup_steps") or 0),
            phase_max_s=data.get("phase_max_s") or {},
            samples_per_step=data.get("samples_per_step"),
            memory=MemoryReport.from_json(data.get("memory")),
            wall_s=float(data.get("wall_s") or 0.0),
            trial_dir=Path(data["trial_dir"]) if data.get("trial_dir") else None,
            log_paths=tuple(data.get("log_paths") or ()),
            fr_dumps=tuple(data.get("fr_dumps") or ()),
            escaped_processes=int(data.get("escaped_processes") or 0),
            survivors=int(data.get("survivors") or 0),
            modelled_gpu_s=data.get("modelled_gpu_s"),
        )
