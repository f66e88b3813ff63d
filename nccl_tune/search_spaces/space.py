"""The ``SearchSpace`` data model: parameters, constraints, fixed trial settings, stop rule.

A space is plain data (frozen dataclasses). ``loader.py`` builds one from YAML; ``tuner/``
samples it; ``render.py`` turns a parameter assignment into the argv elements and env overlay
a trial runs with. Only safe expressions (``expr.py``) are evaluated.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any

from nccl_tune.errors import NcclTuneError
from nccl_tune.search_spaces.expr import Expr
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.trial import Clocks, ProgressRules, StopRule

UNSET = "unset"
"""Choice meaning "do not set this environment variable" (and remove it if the user's env has it)."""


class ParamKind(str, Enum):
    INT = "int"
    """Integers from ``low`` to ``high`` in steps of ``step``."""
    POW2 = "pow2"
    """Powers of two from ``low`` to ``high``."""
    CATEGORICAL = "categorical"
    """One of ``choices`` (numbers, strings, booleans; ``unset`` for env variables)."""
    BOOL = "bool"
    """true or false."""


class Target(str, Enum):
    OVERRIDE = "override"
    """Passed on the command line: ``key=value`` (Hydra-style), or a flag when the parameter has ``arg``."""
    ENV = "env"
    """Set in the trial's environment (``unset`` removes it)."""


class ArgStyle(str, Enum):
    """How a flag (``arg: --batch-size``) carries its value."""

    SEPARATE = "separate"
    """Two argv elements: ``--batch-size 32``."""
    EQUALS = "equals"
    """One argv element: ``--batch-size=32``."""
    SWITCH = "switch"
    """Booleans only: ``--flag`` when true, nothing when false (argparse ``store_true``)."""


class BoolSpelling(str, Enum):
    """How the command line spells a boolean value (``trial.booleans``)."""

    LOWER = "lower"
    """``true``/``false``: Hydra and OmegaConf, argparse's string-to-bool helpers."""
    PYTHON = "python"
    """``True``/``False``: a parser that evaluates Python literals (nanoGPT's configurator, Fire)."""


class MemoryEffect(str, Enum):
    """How a parameter moves memory (device memory: lets the tuner predict OOM from a known OOM;
    host RAM: names the parameters to move when the host runs out)."""

    INCREASING = "increasing"
    """Memory grows with the value (in choice order for categoricals; true > false for bools)."""
    DECREASING = "decreasing"
    """Memory shrinks as the value grows (e.g. CPU offload: true uses less)."""
    NONE = "none"
    """No material effect on memory."""
    SMALL = "small"
    """A small effect (NCCL buffers): ignored when predicting an OOM from a known one."""
    UNKNOWN = "unknown"
    """Unknown: two configs are comparable only if they agree on this parameter."""

    @property
    def signed(self) -> bool:
        """Increasing or decreasing: the memory model can order configs by it."""
        return self in (MemoryEffect.INCREASING, MemoryEffect.DECREASING)


@dataclass(frozen=True)
class Parameter:
    """One tunable knob."""

    name: str
    """What expressions, ``--set``, reports and the tuned YAML call it: a config key
    (``trainer.micro_train_batch_size_per_gpu``), an identifier (``batch_size``) or an environment
    variable (``NCCL_ALGO``)."""
    kind: ParamKind
    target: Target
    choices: tuple[Any, ...]
    """Every admissible value, in order (ranges are expanded at load time)."""
    default: Any = None
    """The value the user's command runs with today; tried first as the baseline."""
    memory: MemoryEffect = MemoryEffect.UNKNOWN
    """How the value moves device memory."""
    host_memory: MemoryEffect = MemoryEffect.UNKNOWN
    """How the value moves host RAM (data-loader workers, CPU offload): advice for a host out of
    memory names the parameters that declare it."""
    memory_from_name: tuple[str, ...] = ()
    """Which of ``memory`` and ``host_memory`` the space left out and the parameter's name filled in
    (``search_spaces.roles``): ``spaces show`` and ``run`` say so."""
    phases: tuple[str, ...] = ()
    """The phases whose memory peak the value moves, named as the trainer's log names them
    (``policy_train``); empty: any phase. An out-of-memory error in a phase not listed here is not
    this parameter's doing: the memory model fences off the failing config's other values whatever
    this parameter is set to."""
    semantic: bool = False
    """True when the value changes the training itself (batch sizes, prompt filtering), not only speed."""
    help: str = ""
    arg: str | None = None
    """How the command line spells it when that is not ``name``: a flag (``--batch-size``) or a Hydra key."""
    arg_style: ArgStyle = ArgStyle.SEPARATE

    @property
    def command_key(self) -> str:
        """The key the command sees (``arg`` or ``name``), without Hydra's ``+``/``++`` prefix."""
        return (self.arg or self.name).lstrip("+")

    def coerce(self, raw: Any, where: str) -> Any:
        """The admissible value that ``raw`` (a string from ``--set`` or a YAML value) denotes."""
        for c in self.choices:
            if raw == c and type(raw) is type(c):
                return c
        text = format_value(raw).strip().lower() if not isinstance(raw, str) else raw.strip().lower()
        for c in self.choices:
            if format_value(c).lower() == text:
                return c
        if self.kind is ParamKind.BOOL and text in ("1", "yes", "on", "0", "no", "off"):
            return text in ("1", "yes", "on")
        if self.kind in (ParamKind.INT, ParamKind.POW2):
            try:
                as_num = float(text)
            except ValueError:
                as_num = math.nan
            if as_num in self.choices:
                return int(as_num)
        shown = ", ".join(format_value(c) for c in self.choices[:12])
        more = ", ..." if len(self.choices) > 12 else ""
        raise NcclTuneError(
            f"{where}: {format_value(raw)!r} is not a value of {self.name}; choose one of: {shown}{more}"
        )

    def memory_rank(self, value: Any, effect: MemoryEffect | None = None) -> int:
        """Position of ``value`` in the order of growing memory (for dominance checks), by
        ``effect`` (the device-memory one when None)."""
        effect = self.memory if effect is None else effect
        idx = int(bool(value)) if self.kind is ParamKind.BOOL else self.choices.index(value)
        return idx if effect is MemoryEffect.INCREASING else -idx


def ordered_choices(kind: ParamKind, choices: tuple[Any, ...]) -> bool:
    """Values in an order memory may follow: a bool, an int or power-of-two range, a categorical of
    numbers in ascending order (a categorical's words are in the space's order, not memory's)."""
    if kind is not ParamKind.CATEGORICAL:
        return True
    nums = [c for c in choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
    return len(nums) == len(choices) and nums == sorted(nums)


@dataclass(frozen=True)
class Constraint:
    """A rule every trial's values must satisfy; violated combinations are never launched."""

    expr: Expr
    message: str


@dataclass(frozen=True)
class Derived:
    """A command-line value computed from the others (e.g. keep ``generator.max_input_length`` consistent)."""

    key: str
    expr: Expr
    target: Target = Target.OVERRIDE
    arg: str | None = None
    """How the command line spells it when that is not ``key`` (a flag such as ``--eval-batch-size``)."""


@dataclass(frozen=True)
class ForcedSetting:
    """One setting of ``stability.force_worst_case``: with all of them, a trial runs the longest batch
    its config allows (for SkyRL, vLLM's ``min_tokens`` at ``max_generate_length``)."""

    key: str
    """A config key (a Hydra override), a flag (``--pad-to-max-length``) or an environment variable."""
    target: Target
    value: Expr | None = None
    """Its value, an expression over the trial's values (None: a bare flag, or a mapping in ``fields``)."""
    fields: tuple[tuple[str, Expr], ...] = ()
    """The entries of a mapping value (Hydra's ``{min_tokens:3000}``), each an expression."""


def _frozen(m: Mapping | None) -> Mapping:
    return MappingProxyType(dict(m or {}))


@dataclass(frozen=True)
class SearchSpace:
    name: str
    description: str
    source: str
    """Where the space came from: ``builtin:<name>`` or a file path."""
    text: str
    """The YAML it was loaded from (stored with the study so export/report work elsewhere)."""
    parameters: tuple[Parameter, ...]
    context: Mapping[str, Any] = field(default_factory=dict)
    """Values of the user's command the expressions read but the search does not change."""
    context_args: Mapping[str, str] = field(default_factory=dict)
    """How the command line spells a context value changed with ``--set``, when not by its name."""
    defines: tuple[tuple[str, Expr], ...] = ()
    """Named intermediate values (in order), visible to constraints and derived values."""
    derived: tuple[Derived, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    trial_overrides: Mapping[str, str | None] = field(default_factory=dict)
    """Overrides added to every trial (short, harmless runs): ``key=value``, or a flag and its value
    (None: the bare flag); ``{trial_dir}`` etc. expand."""
    trial_arg_style: ArgStyle = ArgStyle.SEPARATE
    """How the flags of ``trial_overrides`` and of the values ``--set`` changes carry their values:
    ``--max-steps 8`` (``separate``) or ``--max_steps=8`` (``equals``, nanoGPT's configurator)."""
    trial_booleans: BoolSpelling = BoolSpelling.LOWER
    """How every boolean value reaches the command line (parameters, derived values, ``--set``)."""
    trial_env: Mapping[str, str] = field(default_factory=dict)
    """Environment added to every trial (tight timeouts, Flight Recorder dumps)."""
    samples_per_step: Expr | None = None
    stop: StopRule = field(default_factory=StopRule)
    clocks: Clocks = field(default_factory=Clocks)
    progress: ProgressRules = field(default_factory=ProgressRules)
    min_headroom_frac: float = 0.05
    """A config whose peak memory leaves less than this fraction of the GPU free is not called stable."""

    worst_case_tokens: Expr | None = None
    """The most tokens a step can carry under a config, in the units of the step's token figure the
    trainer prints (SkyRL: the longest response, ``generate/max_num_tokens``): where a trial's
    peak is extrapolated to (``tuner.records.worst_case``). None: the space does not say."""

    force_worst_case: tuple[ForcedSetting, ...] = ()
    """How a trial is made to run the longest batch its config allows (``stability.force_worst_case``):
    the winner-to-be runs once so (``tuner.study.forcing``). Empty: the space does not say."""

    every_step_longest: bool = False
    """Every step carries the longest batch its config allows (``stability.every_step_longest``:
    sequences packed or padded to a fixed length, as Megatron-LM's and torchtitan's pre-training
    run): a trial's own steps are its worst case, with nothing to force or predict."""

    def __post_init__(self) -> None:
        for name in ("context", "context_args", "trial_overrides", "trial_env"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    # -- lookups -------------------------------------------------------------------------
    def param(self, name: str) -> Parameter:
        for p in self.parameters:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.parameters if p.default is not None}

    def baseline(self, held: Mapping[str, Any]) -> dict[str, Any]:
        """The user's own config: the defaults, with the values ``held`` (``--set``) over them."""
        return {**self.defaults(), **held}

    def free(self, pinned: Collection[str]) -> list[Parameter]:
        """The parameters a search varies: not ``pinned`` (``--set``), with more than one choice."""
        return [p for p in self.parameters if p.name not in pinned and len(p.choices) > 1]

    # -- evaluation ----------------------------------------------------------------------
    def scope(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Context, parameter values and defines: everything an expression may read."""
        env: dict[str, Any] = dict(self.context)
        env.update(values)
        for name, ex in self.defines:
            env[name] = ex(env)
        return env

    def violations(self, values: Mapping[str, Any]) -> list[str]:
        """Messages of the constraints ``values`` break (empty when admissible)."""
        env = self.scope(values)
        return [c.message for c in self.constraints if not c.expr(env)]

    def derived_values(self, values: Mapping[str, Any]) -> dict[str, Any]:
        env = self.scope(values)
        out = {}
        for d in self.derived:
            out[d.key] = d.expr(env)
            env[d.key] = out[d.key]
        return out

    def samples(self, values: Mapping[str, Any]) -> float | None:
        if self.samples_per_step is None:
            return None
        env = self.scope(values)
        env.update(self.derived_values(values))
        return float(self.samples_per_step(env))

    def worst_tokens(self, values: Mapping[str, Any]) -> float | None:
        """``worst_case_tokens`` for ``values`` (None when the space does not say)."""
        if self.worst_case_tokens is None:
            return None
        env = self.scope(values)
        env.update(self.derived_values(values))
        return float(self.worst_case_tokens(env))

    def forced_settings(self, values: Mapping[str, Any]) -> list[tuple[ForcedSetting, Any]]:
        """Each ``force_worst_case`` setting with its value for ``values`` (a dict for a mapping, None
        for a bare flag)."""
        env = self.scope(values)
        env.update(self.derived_values(values))
        out: list[tuple[ForcedSetting, Any]] = []
        for f in self.force_worst_case:
            if f.fields:
                out.append((f, {k: ex(env) for k, ex in f.fields}))
            else:
                out.append((f, f.value(env) if f.value is not None else None))
        return out

    # -- ranking ---------------------------------------------------------------------------
    def ranking_problem(self, pinned: Collection[str], units: Collection[str]) -> str | None:
        """Why trials measured in ``units`` (``ProgressRules.throughput_units``: ``samples``,
        ``tokens``, ``steps``) cannot be ranked, or None. Steps per second compare trials only when
        every trial does the same work per step: not when a semantic parameter (a batch size) varies
        and the space does not say how many samples a step processes."""
        if set(units) != {"steps"} or self.samples_per_step is not None:
            return None
        varying = [p.name for p in self.free(pinned) if p.semantic]
        if not varying:
            return None
        example = " * ".join(varying[:3])
        return (
            f"space {self.name}: throughput would be steps per second (the progress rule reads no samples or tokens "
            f"rate), but {', '.join(varying)} change how much a step does, so trials cannot be ranked; add "
            f"throughput.samples_per_step (e.g. {example}), read a samples_per_s or tokens_per_s rate from the log, "
            "or pin them with --set"
        )
