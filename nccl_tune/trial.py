"""The data passed between the tuner and a launcher: what to run, and what happened.

All types are frozen dataclasses with units in field names. ``TrialSpec`` goes in,
``TrialResult`` comes out; both serialise to JSON (``to_json``/``from_json``) so a trial
folder and the study storage hold everything a report needs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from enum import Enum
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

from nccl_tune.failure import FailureClass, Verdict
from nccl_tune.stragglers import kept, stragglers

MARKER_ENV = "NCCL_TUNE_TRIAL"
"""Environment variable naming the trial (``<study>/<number>``) in every process it starts."""

ParamValue = Any  # int | float | str | bool
STARTUP_PHASE = "(start-up)"
"""The ``phase_max_s`` key of the time from launch to the first progress line (a name no log's
phase can take): measured like a phase, it shortens the start-up deadline (``Clocks.startup_deadline_s``)."""
SILENCE_PHASE = "(between lines)"
"""The ``phase_max_s`` key of the longest silence between two progress lines (after the first):
measured like a phase, it shortens the stall timeout between steps (``Clocks.stall_deadline_s``)."""


def _frozen_map(m: Mapping | None) -> Mapping:
    return MappingProxyType(dict(m or {}))


def longest_measured_s(phase: str, measured: Iterable[Mapping[str, float]]) -> float | None:
    """The longest of the durations measured for ``phase`` (None when it was never measured): the
    one rule by which what is known about a phase's duration grows, over trials and within one."""
    longest = None
    for phase_max_s in measured:
        seconds = phase_max_s.get(phase)
        if seconds is not None and (longest is None or seconds > longest):
            longest = seconds
    return longest


def fold_phase_max(*measured: Mapping[str, float]) -> dict[str, float]:
    """``longest_measured_s`` of every phase in ``measured`` (several trials' ``phase_max_s``)."""
    phases = dict.fromkeys(phase for phase_max_s in measured for phase in phase_max_s)
    return {phase: longest_measured_s(phase, measured) for phase in phases}  # type: ignore[misc]


@dataclass(frozen=True)
class Clocks:
    """The three clocks that supervise a trial, and teardown's grace period."""

    startup_timeout_s: float = 900.0
    """From launch to the first progress line (model loading, engine start-up), at most: once the
    study has measured a start-up, ``stall_multiplier`` times the longest measured (at least
    ``stall_floor_s``) when that is shorter (``startup_deadline_s``)."""
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
    phase_estimates_s: Mapping[str, float] = field(default_factory=dict)
    """The space's guess of a phase's longest duration, per phase name: it stands in for a phase
    until the phase has been measured."""
    phase_max_s: Mapping[str, float] = field(default_factory=dict)
    """Longest measured duration per phase name (``step`` included), over the trials measured so far."""
    silence_steps: int = 0
    """Steps the study's earlier runs got through (the most of any one run): the silences before
    them were measured (``SILENCE_PHASE``); past them, a checkpoint or an evaluation no run has
    reached may still come, and the stall timeout holds."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "phase_estimates_s", _frozen_map(self.phase_estimates_s))
        object.__setattr__(self, "phase_max_s", _frozen_map(self.phase_max_s))

    def learned(self, *measured: Mapping[str, float]) -> Clocks:
        """These clocks, knowing also the phase maxima in ``measured`` (the study's earlier trials)."""
        return replace(self, phase_max_s=fold_phase_max(self.phase_max_s, *measured))

    def longest_phase_s(self, phase: str | None, *measured: Mapping[str, float]) -> float | None:
        """The longest known duration of ``phase``: the longest measured (in ``phase_max_s`` or the
        further phase maxima ``measured``, e.g. the running trial's), else the space's estimate."""
        if phase is None:
            return None
        longest = longest_measured_s(phase, (self.phase_max_s, *measured))
        return longest if longest is not None else self.phase_estimates_s.get(phase)

    def startup_deadline_s(self) -> float:
        """Seconds from launch allowed before the first progress line: ``startup_timeout_s``, or
        less once start-ups were measured (``STARTUP_PHASE``): a run that hangs while it starts
        (NCCL's set-up, a rendezvous that never completes) is stopped after a few times the
        longest start-up the study has seen, not after the whole start-up timeout."""
        known = self.phase_max_s.get(STARTUP_PHASE)
        if known is None:
            return self.startup_timeout_s
        return min(self.startup_timeout_s, max(self.stall_floor_s, self.stall_multiplier * known))

    def stall_deadline_s(
        self, open_phase: str | None, *measured: Mapping[str, float], steps_done: int | None = None
    ) -> float:
        """Seconds of silence allowed while ``open_phase`` (innermost open phase) is running,
        ``measured`` being further phase maxima (the running trial's). With no phase open, after
        ``steps_done`` steps that earlier runs got past (``silence_steps``): a multiple of the
        longest silence or step measured (``between_steps_s``), never more than ``stall_timeout_s``."""
        known = self.longest_phase_s(open_phase, *measured)
        if known is None:
            between = self.between_steps_s(*measured) if open_phase is None and steps_done is not None else None
            if between is None or not 0 < steps_done < self.silence_steps:
                return self.stall_timeout_s
            return min(self.stall_timeout_s, max(self.stall_floor_s, self.stall_multiplier * between))
        return max(self.stall_floor_s, self.stall_multiplier * known)

    def between_steps_s(self, *measured: Mapping[str, float]) -> float | None:
        """The longest silence between two progress lines or step measured, over the study's runs
        and ``measured`` (None when none was): what a healthy run of the command was seen to need
        between steps, checkpoints and evaluations included where the runs reached them."""
        known = [longest_measured_s(p, (self.phase_max_s, *measured)) for p in (SILENCE_PHASE, "step")]
        return max((k for k in known if k is not None), default=None)


@dataclass(frozen=True)
class StopRule:
    """When a trial has measured enough."""

    warmup_steps: int = 1
    """Steps run first and not measured (the first step is slow: compilation, allocator warm-up)."""
    measured_steps: int = 2
    """Steps measured after the warm-up; the trial is stopped once they are done."""
    screen_steps: int = 0
    """Cheap screening (0: off): after the warm-up and this many measured steps, a trial not within
    reach of the incumbent is stopped; only promising ones run every measured step."""
    enough_steps: int | None = None
    """Measured steps that make a trial whose command ended by itself (exit 0 after its own last
    step) measured all the same: the space's or ``--steps``, when the noise asked for more (None:
    ``measured_steps``). Set by the tuner, never by a space file."""

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.measured_steps

    @property
    def least_measured_steps(self) -> int:
        """The measured steps a trial must have done to be measured (``enough_steps``)."""
        return min(self.measured_steps, self.enough_steps or self.measured_steps)


RATE_GROUPS: Mapping[str, str] = MappingProxyType(
    {
        "samples_per_s": "samples",
        "tokens_per_s": "tokens",
        "steps_per_s": "steps",
        "it_per_s": "steps",
        "tflops_per_gpu": "TFLOP/s/GPU",
    }
)
"""Groups of a step rule that carry a rate, and what the rate counts (``it/s`` of a progress bar
counts steps); a unit that names its own time (``TFLOP/s/GPU``, Megatron's) is carried as printed."""
DURATION_GROUPS: Mapping[str, float] = MappingProxyType({"seconds": 1.0, "ms": 1e-3})
"""Groups of a step or phase rule that carry a duration, and their factor to seconds."""
STEP_GROUPS = frozenset({*RATE_GROUPS, *DURATION_GROUPS, "step", "of", "samples_per_step"})
"""Every group a step rule may use (``step``: the step's number, as the trainer counts them; ``of``:
the count a progress bar runs to, which tells the training bar from an evaluation bar;
``samples_per_step``: samples the step processed, e.g. Megatron's global batch size)."""


def rate_unit_text(unit: str) -> str:
    """A rate's unit as shown: ``tokens`` -> ``tokens/s``; a unit with its own time as it is."""
    return unit if "/s" in unit else f"{unit}/s"


MEMORY_FIGURES: Mapping[str, float] = MappingProxyType({"gib": 1.0, "mib": 1.0 / 1024, "gb": 1e9 / 2**30})
"""Groups of a memory rule that carry the peak, and their factor to GiB (``gb``: 10^9 bytes, Composer's)."""
MEMORY_GROUPS = frozenset({*MEMORY_FIGURES, "pct", "total_gib", "rank", "gpu", "step"})
STEP_TOKENS_GROUPS = frozenset({"tokens", "step"})
PHASE_GROUPS = frozenset({"phase", *DURATION_GROUPS})


@dataclass(frozen=True)
class ProgressRules:
    """How progress is read from the command's output: regular expressions, matched after ANSI
    colours, Ray ``(name pid=N)`` prefixes and progress-bar redraws are stripped.

    ``step_end`` and ``memory`` hold alternatives. A trial uses the first step alternative its
    output matches for the rest of its run (a progress bar and a log line never both count); every
    line tries the memory alternatives in order. No step rule at all means: detect the preset from
    the output (``nccl_tune/presets.py``), with the rules given here replacing the preset's."""

    step_end: tuple[str, ...] = ()
    """A finished step. Its duration is group ``seconds`` (or ``ms``); else its rate is a group of
    ``RATE_GROUPS``; else the wall-clock time since the previous step line (divided by the step
    numbers between them when group ``step`` gives them)."""
    phase_start: str | None = None
    """A phase starts; group ``phase`` is its name."""
    phase_end: str | None = None
    """A phase ends; groups ``phase`` and ``seconds`` (or ``ms``)."""
    memory: tuple[str, ...] = ()
    """A memory figure the trainer prints: group ``gib``, ``mib`` or ``gb`` (peak; ``gb``: 10^9 bytes,
    Composer's), optional ``rank``/``gpu``,
    optional ``pct`` (percent of the GPU) or ``total_gib``, which give the GPU's total, optional
    ``step`` (the step it belongs to; else the step running when the line was read)."""
    training_done: str | None = None
    """Training finished: failures after this line happened during teardown."""
    step_rate: str | None = None
    """A line after a step's line that gives that step's rate (a group of ``RATE_GROUPS``), when the
    step line gives none: SkyRL's console dict after its step timer, torchtune's metric line after
    its bar (on the bar's line when it follows its text). With group ``step`` it gives that step's
    only: a line that names an earlier step (a burst of buffered lines) gives none."""
    not_training: str | None = None
    """A line of a loop that is not training (a validation bar): the step line right after it is no
    step (Lightning 1.x advances its training bar by validation batches too)."""
    step_tokens: str | None = None
    """The tokens a step carried (group ``tokens``; SkyRL's ``generate/max_num_tokens``): the step
    numbered by group ``step``, else the last finished step (trainers print a step's metrics after
    it). With the steps' memory figures it gives the worst case (``tuner.records.worst_case``)."""
    preset: str | None = None
    """The preset these rules come from (None: written in the space)."""

    def __post_init__(self) -> None:
        for name in ("step_end", "memory"):
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value or ()))

    @property
    def detect(self) -> bool:
        """True when the preset is to be recognised from the output."""
        return not self.step_end

    def throughput_units(self) -> frozenset[str]:
        """What the step alternatives can measure: ``samples``, ``tokens`` (a rate the trainer prints
        or its samples per step) or ``steps`` (durations only), and the rate a ``step_rate`` line
        gives them; empty while the preset is unknown. A line that may or may not carry a rate
        (Megatron prints TFLOP/s/GPU only where it counts FLOPs) measures what its samples per
        step give where it does not."""
        import re

        units = set()
        for pattern in (*self.step_end, *((self.step_rate,) if self.step_end and self.step_rate else ())):
            groups = set(re.compile(pattern).groupindex)
            rates = {RATE_GROUPS[g] for g in groups & set(RATE_GROUPS)} - {"steps"}
            units |= rates | ({"samples"} if "samples_per_step" in groups else set() if rates else {"steps"})
        return frozenset(units)


@dataclass(frozen=True)
class MemoryKnob:
    """A parameter of the trial's search space that moves device memory or host RAM, and its value
    in the trial (advice for a memory failure names these, in the space's own terms). A parameter
    that moves both is two knobs."""

    name: str
    value: str
    """The value as the command received it."""
    effect: str
    """``increasing`` (memory grows with the value) or ``decreasing`` (e.g. offload on uses less)."""
    arg: str | None = None
    """How the command line spells it, when not by ``name``."""
    room: bool = True
    """The space has a value of it that uses less memory than this one."""
    host: bool = False
    """It moves host RAM (the space's ``host_memory``), not device memory (``memory``)."""


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
    memory_knobs: tuple[MemoryKnob, ...] = ()
    """The space's parameters that move memory, with this trial's values (for advice)."""
    scope: str = ""
    """What the markers of this study's processes start with: the study name and its storage (see
    ``tuner.records.storage.marker_scope``), so that a study of the same name in another storage is never
    swept or waited on; empty: the study name alone."""
    nccl_check: bool = False
    """True for the NCCL check of the trial (``launchers.nccl_check``: the collectives alone, with the
    trial's NCCL variables), False for the trial's own command."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", _frozen_map(self.params))
        object.__setattr__(self, "env", _frozen_map(self.env))
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "trial_dir", Path(self.trial_dir))
        object.__setattr__(self, "memory_knobs", tuple(self.memory_knobs))

    @property
    def marker_scope(self) -> str:
        """The prefix every process of this study carries in ``NCCL_TUNE_TRIAL`` (before ``/NUMBER``)."""
        return self.scope or self.study

    @property
    def marker(self) -> str:
        """Value of ``NCCL_TUNE_TRIAL`` for this trial."""
        return f"{self.marker_scope}/{self.number}"


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


OUTSIDE_PHASES = "(no phase)"
"""The ``MemoryReport.phase_peak_frac`` key of memory sampled while no phase was open (start-up,
the gaps between phases)."""


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
    phase_peak_frac: Mapping[str, float] = field(default_factory=dict)
    """Highest per-GPU peak (share of its GPU) while each phase was the innermost one open, from the
    progress rule's phase lines; samples taken with no phase open count under ``OUTSIDE_PHASES``.
    Empty when the source gives no per-sample figures or the trainer prints no phase lines. Its
    largest value is ``max_peak_frac`` (up to the sampling)."""
    phases_open_at_end: tuple[str, ...] = ()
    """The phases open when the last sample was taken, outermost first (``(OUTSIDE_PHASES,)`` when
    none was): in a run that failed, their figures are lower bounds, the others were measured whole."""
    step_peak_frac: tuple[float, ...] = ()
    """Per finished step, in order (aligned with ``TrialResult.step_times_s``): the highest per-GPU
    peak in it, as a share of the GPU; empty when the source gives no per-step figures. With
    ``TrialResult.step_tokens`` it gives the worst case (``tuner.records.worst_case``)."""
    forced_worst: bool = False
    """The trial ran its longest batches (the space's ``stability.force_worst_case``): its peak is
    the worst case, and its throughput is not comparable with normal trials'."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "gpus", tuple(self.gpus))
        object.__setattr__(self, "phase_peak_frac", _frozen_map(self.phase_peak_frac))
        object.__setattr__(self, "phases_open_at_end", tuple(self.phases_open_at_end))
        object.__setattr__(self, "step_peak_frac", tuple(self.step_peak_frac))

    @property
    def peak_gib(self) -> float | None:
        """Highest per-GPU peak; None when no GPU figure exists (no GPU was sampled and the trainer
        printed no memory line): the process tree's RSS is host memory, kept as ``peak_rss_gib``
        and never shown as a GPU's peak."""
        peak = max((g.peak_gib for g in self.gpus), default=0.0)
        return peak if peak > 0 else None

    @property
    def min_headroom_gib(self) -> float | None:
        return min(g.headroom_gib for g in self.gpus) if self.gpus else None

    @property
    def max_peak_frac(self) -> float | None:
        """The highest per-GPU peak as a share of its GPU; None when no GPU's size is known (a
        trainer's memory line in GiB alone, on a node NVML cannot read)."""
        fracs = [g.peak_frac for g in self.gpus if math.isfinite(g.peak_frac)]
        return max(fracs) if fracs else None

    def headroom_deficit(self, min_headroom_frac: float) -> float | None:
        """How far the highest peak came inside ``min_headroom_frac`` of its GPU (> 0: too close to
        the wall to call the config stable); None when no GPU's size is known."""
        frac = self.max_peak_frac
        return None if frac is None else min_headroom_frac - (1.0 - frac)

    def near_wall(self, min_headroom_frac: float) -> bool:
        """The highest peak came within ``min_headroom_frac`` of its GPU (False while no GPU's size
        is known): the rule every reader of a run's headroom applies."""
        deficit = self.headroom_deficit(min_headroom_frac)
        return deficit is not None and deficit > 0

    @property
    def peak_phase(self) -> str | None:
        """The phase whose figure is the highest, when the report has two phases or more (which one
        holds the peak says which knobs move it); None otherwise, or when the peak came outside
        every phase."""
        if sum(k != OUTSIDE_PHASES for k in self.phase_peak_frac) < 2:
            return None
        top = max(self.phase_peak_frac, key=self.phase_peak_frac.__getitem__)
        return top if top != OUTSIDE_PHASES else None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "gpus": [asdict(g) for g in self.gpus],
            "peak_rss_gib": self.peak_rss_gib,
            "phase_peak_frac": dict(self.phase_peak_frac),
            "phases_open_at_end": list(self.phases_open_at_end),
            "step_peak_frac": list(self.step_peak_frac),
            "forced_worst": self.forced_worst,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> MemoryReport | None:
        if not data:
            return None
        return cls(
            source=data["source"],
            gpus=tuple(GpuMemory(**g) for g in data.get("gpus") or ()),
            peak_rss_gib=data.get("peak_rss_gib"),
            phase_peak_frac={str(k): float(v) for k, v in (data.get("phase_peak_frac") or {}).items()},
            phases_open_at_end=tuple(data.get("phases_open_at_end") or ()),
            step_peak_frac=tuple(float(x) for x in data.get("step_peak_frac") or ()),
            forced_worst=bool(data.get("forced_worst")),
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
    """Duration of every finished step, warm-up included, in order (from the log, or the wall clock
    between step lines when the log gives none)."""
    step_rates: tuple[float | None, ...] = ()
    """The rate each step line printed (in ``rate_unit`` per second), aligned with ``step_times_s``;
    empty when the step rule reads no rate."""
    untimed_steps: tuple[int, ...] = ()
    """Indices (into ``step_times_s``) of steps whose lines came late (block-buffered output) with no
    time of their own, which the wall clock cannot time: their duration reads 0
    (``launchers.step_clock``)."""
    late_steps: int = 0
    """Step lines that arrived together with the previous one: the output looked block-buffered."""
    rate_unit: str | None = None
    """What ``step_rates`` count: ``samples``, ``tokens`` or ``steps``."""
    step_tokens: tuple[float | None, ...] = ()
    """The tokens each finished step carried as the trainer printed them (SkyRL's
    ``generate/max_num_tokens``), aligned with ``step_times_s``; empty when it printed none."""
    progress_preset: str | None = None
    """The progress preset the trial's output was read with (named by the space or recognised)."""
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
    gpu_s: float | None = None
    """GPU-seconds the trial held: its wall time times the GPUs the launcher saw it hold (NVML's on a
    real node, the modelled node's in a model); None where no GPU was seen."""
    nccl_check_s: float = 0.0
    """Wall seconds of the NCCL check that passed before the trial (``launchers.nccl_check``), not in
    ``wall_s``; 0 when none ran. A trial whose check failed is the check's result (its ``wall_s``)."""
    nccl_check_gpu_s: float | None = None
    """GPU-seconds of that check, counted as ``gpu_s`` is."""
    nccl_check_failed: bool = False
    """True when the trial ended in its NCCL check: its values failed on the collectives alone and its
    command never started (this result is the check's)."""
    nccl_env_seen: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Per rank (``host:pid [device]``), the NCCL variables NCCL reported reading and their values
    (``NCCL INFO NCCL_X set by environment to V``); empty when no rank reported."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "phase_max_s", _frozen_map(self.phase_max_s))
        object.__setattr__(self, "nccl_env_seen", _frozen_map({k: dict(v) for k, v in self.nccl_env_seen.items()}))
        object.__setattr__(self, "step_times_s", tuple(self.step_times_s))
        object.__setattr__(self, "step_rates", tuple(self.step_rates))
        object.__setattr__(self, "untimed_steps", tuple(self.untimed_steps))
        object.__setattr__(self, "step_tokens", tuple(self.step_tokens))
        object.__setattr__(self, "log_paths", tuple(Path(p) for p in self.log_paths))
        object.__setattr__(self, "fr_dumps", tuple(Path(p) for p in self.fr_dumps))

    @property
    def measured_step_times_s(self) -> tuple[float, ...]:
        return self.step_times_s[self.warmup_steps :]

    @property
    def timed(self) -> bool:
        """Every measured step has a duration (none is in ``untimed_steps``)."""
        return all(i < self.warmup_steps for i in self.untimed_steps)

    @cached_property
    def straggler_steps(self) -> tuple[int, ...]:
        """Indices into ``measured_step_times_s`` of the steps that stalled (``stragglers``): left out
        of the throughput. Read from the step durations, or from the printed rates where a step
        could not be timed."""
        times = self.measured_step_times_s
        if not (self.timed and times and min(times) > 0):
            rates = self.step_rates[self.warmup_steps :]
            if not rates or not all(r is not None and r > 0 for r in rates):
                return ()
            times = tuple(1.0 / r for r in rates)  # type: ignore[operator]
        return stragglers(times, self.step_tokens[self.warmup_steps :])

    @property
    def kept_step_times_s(self) -> tuple[float, ...]:
        """The measured step durations less the stragglers: what the throughput reads."""
        return kept(self.measured_step_times_s, self.straggler_steps)

    @property
    def kept_step_rates(self) -> tuple[float | None, ...]:
        """The rates the measured steps printed (``step_rates``), less the stragglers'."""
        return kept(self.step_rates[self.warmup_steps :], self.straggler_steps)  # type: ignore[arg-type]

    @property
    def mean_step_s(self) -> float | None:
        """Mean measured step time, stragglers left out; None when a measured step could not be timed
        or none lasted."""
        m = self.kept_step_times_s
        mean = sum(m) / len(m) if m else 0.0
        return mean if mean > 0 and self.timed else None

    @property
    def throughput(self) -> tuple[float | None, str]:
        """Throughput over the measured steps (stragglers left out) and its unit (``samples/s``,
        ``tokens/s``, ``steps/s``).

        The rate the trainer printed (a steps rate times the space's samples per step gives samples),
        when every measured step printed one, or every one from the first that did when none printed
        one before; the last step is left out when its rate alone is missing (Composer prints a
        block's rate after the line that ends its step, and the run may stop between the two).
        Otherwise from step durations: samples per step over the mean step time, or steps per second
        when the samples per step are unknown."""
        rates = self.kept_step_rates
        if all(r is None for r in self.step_rates[: self.warmup_steps]):  # a rate that starts late (DeepSpeed's
            rates = rates[next((i for i, r in enumerate(rates) if r is not None), len(rates)) :]  # timer: step 3)
        if len(rates) > 1 and rates[-1] is None and None not in rates[:-1]:
            rates = rates[:-1]  # the last step's rate, printed after its step line, was still on its way at the stop
        if rates and all(r is not None and r > 0 for r in rates) and self.rate_unit:
            mean_rate = sum(rates) / len(rates)  # type: ignore[arg-type]
            if self.rate_unit == "steps" and self.samples_per_step:
                return mean_rate * self.samples_per_step, "samples/s"
            return mean_rate, rate_unit_text(self.rate_unit)
        mean = self.mean_step_s
        if self.samples_per_step:
            return (self.samples_per_step / mean if mean else None), "samples/s"
        return (1.0 / mean if mean else None), "steps/s"

    @property
    def throughput_per_s(self) -> float | None:
        """The measured throughput, in ``throughput_unit``."""
        return self.throughput[0]

    @property
    def throughput_unit(self) -> str:
        return self.throughput[1]

    @property
    def peak_mem_gib(self) -> float | None:
        """The highest per-GPU peak; None when no GPU figure exists."""
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
        out["throughput_per_s"], out["throughput_unit"] = self.throughput
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialResult:
        return cls(
            number=int(data["number"]),
            status=FailureClass(data["status"]),
            verdict=Verdict.from_json(data["verdict"]),
            stop_reason=StopReason(data["stop_reason"]),
            exit_code=data.get("exit_code"),
            signal_name=data.get("signal_name"),
            step_times_s=tuple(data.get("step_times_s") or ()),
            step_rates=tuple(data.get("step_rates") or ()),
            untimed_steps=tuple(data.get("untimed_steps") or ()),
            late_steps=int(data.get("late_steps") or 0),
            rate_unit=data.get("rate_unit"),
            step_tokens=tuple(data.get("step_tokens") or ()),
            progress_preset=data.get("progress_preset"),
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
            gpu_s=data.get("gpu_s", data.get("modelled_gpu_s")),  # the key's name before 0.1's results
            nccl_check_s=float(data.get("nccl_check_s") or 0.0),
            nccl_check_gpu_s=data.get("nccl_check_gpu_s"),
            nccl_check_failed=bool(data.get("nccl_check_failed")),
            nccl_env_seen=data.get("nccl_env_seen") or {},
        )
