"""Load a search space from YAML (a built-in name or a file path) and validate every key.

Every problem is one ``NcclTuneError`` line naming the file, the key and the fix. The file
is parsed with OmegaConf (so ``${...}`` interpolations work), then checked by hand so that the
messages say what a user should change.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from nccl_tune.errors import NcclTuneError
from nccl_tune.launchers.progress import check_rules
from nccl_tune.presets import PRESETS, apply_preset
from nccl_tune.search_spaces.expr import ExprError, parse_expr
from nccl_tune.search_spaces.render import is_env_name, is_flag
from nccl_tune.search_spaces.roles import memory_from_name
from nccl_tune.search_spaces.space import (
    UNSET,
    ArgStyle,
    BoolSpelling,
    Constraint,
    Derived,
    ForcedSetting,
    MemoryEffect,
    Parameter,
    ParamKind,
    SearchSpace,
    Target,
)
from nccl_tune.search_spaces.spelling import did_you_mean, format_value
from nccl_tune.trial import MARKER_ENV, Clocks, ProgressRules, StopRule
from nccl_tune.userfile import read_text, yaml_mapping, yaml_problem

_TOP_KEYS = {
    "name", "description", "command", "parameters", "context", "define", "derived", "constraints",
    "trial", "stop", "clocks", "progress", "throughput", "stability",
}  # fmt: skip
_PARAM_KEYS = {
    "name", "kind", "target", "low", "high", "step", "choices", "default", "memory", "host_memory", "phases",
    "semantic", "help", "arg", "arg_style", "enabled",
}  # fmt: skip
_TRIAL_KEYS = {"overrides", "env", "arg_style", "booleans"}
_STOP_KEYS = {f.name for f in dataclasses.fields(StopRule)} - {"enough_steps"}
_CLOCK_KEYS = {f.name for f in dataclasses.fields(Clocks)} - {"phase_max_s", "silence_steps"}  # measured, never given
_PROGRESS_KEYS = {f.name for f in dataclasses.fields(ProgressRules)}
_THROUGHPUT_KEYS = {"samples_per_step"}
_STABILITY_KEYS = {"min_headroom_frac", "worst_case_tokens", "force_worst_case", "every_step_longest"}
_MAX_CHOICES = 4096
_PROTECTED_ENV = {
    "PATH": "it decides which programs run",
    "LD_PRELOAD": "it injects libraries into every process",
    "LD_LIBRARY_PATH": "it decides which libraries load",
    "LD_AUDIT": "it injects libraries into every process",
    "PYTHONPATH": "it decides which Python code runs",
    "PYTHONHOME": "it decides which Python runs",
    MARKER_ENV: "nccl-tune sets it to find every process of a trial",
}
"""Variables a space may not set: they change what runs, not how it runs."""
_NAME_RX = re.compile(r"\+{0,2}[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
"""A name expressions can read (dotted identifiers); Hydra's ``+``/``++`` prefix is kept for the command."""
_FLAG_RX = re.compile(r"--?[A-Za-z0-9][A-Za-z0-9_.\-]*")
_HYDRA_KEY_RX = re.compile(r"\+{0,2}[A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z_0-9][A-Za-z0-9_\-]*)*")


def builtin_dir() -> Path:
    return Path(str(resources.files("nccl_tune.search_spaces")))


def builtin_names() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.yaml"))


def resolve(space: str) -> tuple[Path, str]:
    """Path and source label of ``space``: a built-in name or a YAML file."""
    if not space.strip():
        raise NcclTuneError(f"the space name is empty; give one of: {', '.join(builtin_names())}, or a YAML file path")
    candidate = Path(space).expanduser()
    if candidate.suffix in (".yaml", ".yml") or candidate.exists() or "/" in space:
        if not candidate.exists():
            raise NcclTuneError(
                f"space file {space} does not exist; give a YAML file or one of: {', '.join(builtin_names())}"
            )
        return candidate, str(candidate)
    path = builtin_dir() / f"{space}.yaml"
    if not path.is_file():
        raise NcclTuneError(
            f"unknown search space {space!r}; built-in spaces: {', '.join(builtin_names())} (or give a YAML file path)"
        )
    return path, f"builtin:{space}"


def load_space(space: str) -> SearchSpace:
    """Load and validate a space by built-in name or file path."""
    path, source = resolve(space)
    text = read_text(path, "space file", "give a space YAML file (`nccl-tune spaces init -- COMMAND` writes one)")
    return parse_space(text, source=source, label=str(path))


def parse_space(text: str, source: str, label: str) -> SearchSpace:
    """Validate YAML ``text`` (``label`` names it in errors) into a ``SearchSpace``."""
    _check_top_level(text, label)
    try:
        cfg = OmegaConf.create(text)
        data = OmegaConf.to_container(cfg, resolve=True)
    except yaml.YAMLError as exc:
        raise NcclTuneError(f"space file {label}: {yaml_problem(exc)}") from None
    except OmegaConfBaseException as exc:
        raise NcclTuneError(f"space file {label}: {str(exc).splitlines()[0]}") from None
    return _build(data, source, label, text)


def _check_top_level(text: str, label: str) -> None:
    """One line for a file that is not a mapping of keys (empty, a scalar, a list), which OmegaConf
    would refuse with an assertion rather than a message, and for a parameter with more choices than
    a search can use (OmegaConf would refuse the file's size with a message about YAML aliases)."""
    data = yaml_mapping(
        text, f"space file {label}", "write name: and parameters: (see `nccl-tune spaces show skyrl-text2sql --yaml`)"
    )
    params = data.get("parameters")
    for i, p in enumerate(params if isinstance(params, list) else ()):
        choices = p.get("choices") if isinstance(p, dict) else None
        if isinstance(choices, list) and len(choices) > _MAX_CHOICES:
            where = f"parameters[{i}]" + (f" ({p['name']})" if p.get("name") else "")
            raise NcclTuneError(
                f"space file {label}: {where}: {len(choices)} choices, more than the {_MAX_CHOICES} a search can "
                "tell apart; for numbers use kind: int with low/high/step, else keep the choices worth trying"
            )


def _trial_booleans(raw: Any, label: str) -> BoolSpelling:
    """``trial.booleans``: how booleans reach the command line (``lower`` or ``python``)."""
    if raw is None:
        return BoolSpelling.LOWER
    if raw not in {b.value for b in BoolSpelling}:
        raise NcclTuneError(
            f"space file {label}: trial.booleans must be lower (--compile true) or python (--compile True, for a "
            f"parser that evaluates Python literals), got {raw!r}"
        )
    return BoolSpelling(raw)


def _trial_arg_style(raw: Any, label: str) -> ArgStyle:
    """``trial.arg_style``: how the trial's own flags carry their values (``separate`` or ``equals``)."""
    if raw is None:
        return ArgStyle.SEPARATE
    allowed = (ArgStyle.SEPARATE.value, ArgStyle.EQUALS.value)
    if raw not in allowed:
        raise NcclTuneError(
            f"space file {label}: trial.arg_style must be separate (--max-steps 8) or equals (--max_steps=8), got {raw!r}"
        )
    return ArgStyle(raw)


def _check_keys(section: Mapping[str, Any], allowed: set[str], where: str, label: str) -> None:
    """One line for a key ``section`` may not hold, with the key meant when it is a misspelling."""
    for key in section:
        if key not in allowed:
            raise NcclTuneError(
                f"space file {label}: unknown key {where}{key!r}{did_you_mean(key, allowed)}; "
                f"allowed here: {', '.join(sorted(allowed))}"
            )


def _mapping(data: Mapping[str, Any], key: str, label: str) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise NcclTuneError(f"space file {label}: '{key}' must be a mapping, got {type(value).__name__}")
    return value


def _expr(text: Any, where: str, label: str):
    try:
        return parse_expr(text, f"space file {label}: {where}")
    except ExprError:
        raise
    except Exception as exc:  # pragma: no cover - parse_expr raises ExprError itself
        raise NcclTuneError(f"space file {label}: {where}: {exc}") from None


def _choices(p: Mapping[str, Any], kind: ParamKind, where: str, label: str) -> tuple[Any, ...]:
    if kind is ParamKind.BOOL:
        if "choices" in p or "low" in p or "high" in p:
            raise NcclTuneError(f"space file {label}: {where}: a bool parameter takes no choices/low/high")
        return (False, True)
    if kind is ParamKind.CATEGORICAL:
        choices = p.get("choices")
        if not isinstance(choices, list) or not choices:
            raise NcclTuneError(
                f"space file {label}: {where}: a categorical parameter needs a non-empty 'choices' list"
            )
        if len({repr(c) for c in choices}) != len(choices):
            raise NcclTuneError(f"space file {label}: {where}: 'choices' has duplicates")
        for c in choices:
            if not isinstance(c, (int, float, str, bool)):
                raise NcclTuneError(f"space file {label}: {where}: choice {c!r} is not a number, string or bool")
        return tuple(choices)
    if "choices" in p:
        raise NcclTuneError(f"space file {label}: {where}: use low/high for kind {kind.value}, or kind: categorical")
    low, high = p.get("low"), p.get("high")
    if not isinstance(low, int) or not isinstance(high, int) or isinstance(low, bool) or isinstance(high, bool):
        raise NcclTuneError(f"space file {label}: {where}: kind {kind.value} needs integer 'low' and 'high'")
    if low > high:
        raise NcclTuneError(f"space file {label}: {where}: low {low} is above high {high}")
    if kind is ParamKind.POW2:
        if low < 1 or low & (low - 1) or high & (high - 1):
            raise NcclTuneError(f"space file {label}: {where}: pow2 bounds must be powers of two, got {low}..{high}")
        out, v = [], low
        while v <= high:
            out.append(v)
            v *= 2
        return tuple(out)
    step = p.get("step", 1)
    if not isinstance(step, int) or step < 1:
        raise NcclTuneError(f"space file {label}: {where}: 'step' must be a positive integer")
    if (high - low) // step + 1 > _MAX_CHOICES:
        raise NcclTuneError(f"space file {label}: {where}: range has more than {_MAX_CHOICES} values; raise 'step'")
    return tuple(range(low, high + 1, step))


def _parameter(p: Any, i: int, label: str) -> Parameter:
    if not isinstance(p, dict):
        raise NcclTuneError(f"space file {label}: parameters[{i}] must be a mapping with name:, kind:, ...")
    name = p.get("name")
    where = f"parameters[{i}]" + (f" ({name})" if name else "")
    _check_keys(p, _PARAM_KEYS, f"in {where}: ", label)
    if not isinstance(name, str) or not name:
        got = "" if name is None else f", got {name!r}"
        raise NcclTuneError(f"space file {label}: {where}: 'name' is required (a non-empty string{got})")
    kinds = ", ".join(k.value for k in ParamKind)
    if p.get("kind") is None:
        raise NcclTuneError(f"space file {label}: {where}: 'kind' is required; use one of: {kinds}")
    try:
        kind = ParamKind(p.get("kind"))
    except ValueError:
        guess = did_you_mean(str(p.get("kind")), [k.value for k in ParamKind])
        raise NcclTuneError(
            f"space file {label}: {where}: unknown kind {p.get('kind')!r}{guess}; use one of: {kinds}"
        ) from None
    default_target = "env" if name.isupper() and "." not in name else "override"
    try:
        target = Target(p.get("target", default_target))
    except ValueError:
        raise NcclTuneError(
            f"space file {label}: {where}: target must be 'override' or 'env', got {p.get('target')!r}"
        ) from None
    memory = _memory_effect(p, "memory", where, label)
    if target is Target.ENV:
        _check_env_name(name, where, label)
    choices = _choices(p, kind, where, label)
    if UNSET in choices and target is not Target.ENV:
        raise NcclTuneError(f"space file {label}: {where}: the choice 'unset' only makes sense for target: env")
    arg, arg_style = _arg(p, name, kind, target, where, label)
    host_memory = _memory_effect(p, "host_memory", where, label)
    named = dict(zip(("memory", "host_memory"), memory_from_name(name, arg, kind, choices, target)))
    from_name = tuple(k for k, guess in named.items() if k not in p and guess is not None)
    memory = named["memory"] if "memory" in from_name else memory
    host_memory = named["host_memory"] if "host_memory" in from_name else host_memory
    param = Parameter(
        name=name,
        kind=kind,
        target=target,
        choices=choices,
        memory=memory,
        host_memory=host_memory,
        memory_from_name=from_name,
        phases=_phases(p.get("phases"), memory, where, label),
        semantic=_bool(p.get("semantic", False), f"{where}: semantic", label),
        help=str(p.get("help", "")),
        arg=arg,
        arg_style=arg_style,
    )
    if p.get("default") is not None:
        param = dataclasses.replace(param, default=param.coerce(p["default"], f"space file {label}: {where} default"))
    return param


def _memory_effect(p: dict[str, Any], key: str, where: str, label: str) -> MemoryEffect:
    """A parameter's ``memory`` or ``host_memory``: ``unknown`` when left out (``_parameter`` then
    asks the parameter's name, ``roles.memory_from_name``)."""
    try:
        return MemoryEffect(p.get(key, "unknown"))
    except ValueError:
        raise NcclTuneError(
            f"space file {label}: {where}: {key} must be one of {', '.join(m.value for m in MemoryEffect)}, "
            f"got {p.get(key)!r}"
        ) from None


def _phases(raw: Any, memory: MemoryEffect, where: str, label: str) -> tuple[str, ...]:
    """A parameter's ``phases``: the names of the phases whose memory peak it moves."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, (list, tuple)) or not raw or not all(isinstance(x, str) and x.strip() for x in raw):
        raise NcclTuneError(
            f"space file {label}: {where}: phases must be a list of phase names as the trainer logs them "
            f"(e.g. [policy_train]), got {raw!r}"
        )
    if not memory.signed:
        raise NcclTuneError(
            f"space file {label}: {where}: phases needs memory: increasing or decreasing (it says which "
            f"phases' peak the value moves), got memory: {memory.value}"
        )
    return tuple(x.strip() for x in raw)


def _arg(
    p: Mapping[str, Any], name: str, kind: ParamKind, target: Target, where: str, label: str
) -> tuple[str | None, ArgStyle]:
    """The parameter's ``arg`` and ``arg_style``, checked; and its ``name`` when it has no ``arg``."""
    arg = p.get("arg")
    if arg is not None and (not isinstance(arg, str) or not (_FLAG_RX.fullmatch(arg) or _HYDRA_KEY_RX.fullmatch(arg))):
        raise NcclTuneError(
            f"space file {label}: {where}: arg {arg!r} is neither a flag (--batch-size) nor a Hydra key (trainer.batch_size)"
        )
    if arg is not None and target is Target.ENV:
        raise NcclTuneError(
            f"space file {label}: {where}: an env parameter takes no arg; remove arg or set target: override"
        )
    if arg is None and target is not Target.ENV and not _NAME_RX.fullmatch(name):
        hint = re.sub(r"[^A-Za-z0-9_.]+", "_", name.lstrip("-")).strip("_.") or "my_param"
        raise NcclTuneError(
            f"space file {label}: {where}: name {name!r} is not an identifier expressions can use; "
            f"write name: {hint} and arg: {name}"
        )
    if arg is not None and not _NAME_RX.fullmatch(name):
        raise NcclTuneError(
            f"space file {label}: {where}: name {name!r} must be an identifier (letters, digits, _ and dots) such as "
            f"{re.sub(r'[^A-Za-z0-9_.]+', '_', name.lstrip('-')).strip('_.') or 'my_param'}"
        )
    styles = ", ".join(s.value for s in ArgStyle)
    try:
        style = ArgStyle(p.get("arg_style", ArgStyle.SEPARATE.value))
    except ValueError:
        raise NcclTuneError(
            f"space file {label}: {where}: arg_style must be one of {styles}, got {p.get('arg_style')!r}"
        ) from None
    if "arg_style" in p and (arg is None or not is_flag(arg)):
        raise NcclTuneError(f"space file {label}: {where}: arg_style applies to a flag only (arg: --name)")
    if style is ArgStyle.SWITCH and kind is not ParamKind.BOOL:
        raise NcclTuneError(
            f"space file {label}: {where}: arg_style switch needs kind: bool (the flag is present when true)"
        )
    return arg, style


def _check_command_keys(params: tuple[Parameter, ...], label: str) -> None:
    """Two parameters must not set the same thing on the command line."""
    owner: dict[str, str] = {}
    for p in params:
        if p.target is Target.ENV:
            continue
        key = p.command_key
        if key in owner:
            raise NcclTuneError(
                f"space file {label}: parameter {p.name} sets {key}, which parameter {owner[key]} already sets; "
                "give each parameter its own arg"
            )
        owner[key] = p.name


def _build(data: dict[str, Any], source: str, label: str, text: str) -> SearchSpace:
    _check_keys(data, _TOP_KEYS, "", label)
    name = data.get("name")
    if not isinstance(name, str) or not name:
        got = "" if name is None else f", got {name!r}"
        raise NcclTuneError(f"space file {label}: 'name' is required (a short identifier such as my-space{got})")
    raw_params = data.get("parameters")
    if not isinstance(raw_params, list) or not raw_params:
        raise NcclTuneError(f"space file {label}: 'parameters' must be a non-empty list")
    params = tuple(_parameter(p, i, label) for i, p in enumerate(raw_params) if _enabled(p, i, label))
    if not params:
        raise NcclTuneError(f"space file {label}: every parameter has enabled: false; enable at least one")
    seen: set[str] = set()
    for p in params:
        if p.name in seen:
            raise NcclTuneError(f"space file {label}: parameter {p.name} is defined twice")
        seen.add(p.name)
    _check_command_keys(params, label)

    context, context_args = _context(_mapping(data, "context", label), label)
    for key in context:
        if key in seen:
            raise NcclTuneError(f"space file {label}: context key {key} is also a parameter; keep it in one place")
    known = set(seen) | set(context)

    defines = []
    for key, text_expr in _mapping(data, "define", label).items():
        ex = _expr(text_expr, f"define.{key}", label)
        _check_names(ex.names, known, f"define.{key}", label)
        defines.append((key, ex))
        known.add(key)

    derived = []
    for key, spec in _mapping(data, "derived", label).items():
        target = Target.ENV if key.isupper() and "." not in key else Target.OVERRIDE
        if target is Target.ENV:
            _check_env_name(key, f"derived.{key}", label)
        arg = None
        if isinstance(spec, dict):
            _check_keys(spec, {"expr", "arg"}, f"in derived.{key}: ", label)
            arg, spec = spec.get("arg"), spec.get("expr")
            if not isinstance(arg, str) or not _FLAG_RX.fullmatch(arg):
                raise NcclTuneError(f"space file {label}: derived.{key}.arg must be a flag such as --eval-batch-size")
        ex = _expr(spec, f"derived.{key}", label)
        _check_names(ex.names, known | {key}, f"derived.{key}", label)
        if key in seen:
            raise NcclTuneError(f"space file {label}: derived key {key} is also a parameter; remove one of them")
        derived.append(Derived(key, ex, target, arg))
    known |= {d.key for d in derived}

    constraints = []
    raw_constraints = data.get("constraints") or []
    if not isinstance(raw_constraints, list):
        raise NcclTuneError(f"space file {label}: 'constraints' must be a list of {{expr:, message:}}")
    for i, c in enumerate(raw_constraints):
        if isinstance(c, str):
            c = {"expr": c}
        if not isinstance(c, dict):
            raise NcclTuneError(f"space file {label}: constraints[{i}] must be a mapping with expr: and message:")
        _check_keys(c, {"expr", "message"}, f"in constraints[{i}]: ", label)
        ex = _expr(c.get("expr"), f"constraints[{i}]", label)
        _check_names(ex.names, known, f"constraints[{i}]", label)
        constraints.append(Constraint(ex, str(c.get("message") or f"constraint violated: {ex.text}")))

    trial = _mapping(data, "trial", label)
    _check_keys(trial, _TRIAL_KEYS, "in trial: ", label)
    trial_overrides = {
        str(k): None if v is None and is_flag(str(k)) else _scalar(v, f"trial.overrides.{k}", label)
        for k, v in (trial.get("overrides") or {}).items()
    }
    trial_env = {str(k): _scalar(v, f"trial.env.{k}", label) for k, v in (trial.get("env") or {}).items()}
    trial_arg_style = _trial_arg_style(trial.get("arg_style"), label)
    trial_booleans = _trial_booleans(trial.get("booleans"), label)
    for key in trial_env:
        _check_env_name(key, f"trial.env.{key}", label)

    stop_raw = _mapping(data, "stop", label)
    _check_keys(stop_raw, _STOP_KEYS, "in stop: ", label)
    stop = StopRule(**{k: _int(v, f"stop.{k}", label, minimum=0) for k, v in stop_raw.items()})
    if stop.measured_steps < 1:
        raise NcclTuneError(f"space file {label}: stop.measured_steps must be at least 1")
    if stop.screen_steps >= stop.measured_steps:
        raise NcclTuneError(
            f"space file {label}: stop.screen_steps {stop.screen_steps} must be below stop.measured_steps "
            f"({stop.measured_steps}); use 0 to turn screening off"
        )

    clocks_raw = _mapping(data, "clocks", label)
    _check_keys(clocks_raw, _CLOCK_KEYS, "in clocks: ", label)
    estimates = clocks_raw.pop("phase_estimates_s", None) or {}
    if not isinstance(estimates, dict):
        raise NcclTuneError(f"space file {label}: clocks.phase_estimates_s must map phase names to seconds")
    clocks = Clocks(
        **{k: _clock(k, v, label) for k, v in clocks_raw.items()},
        phase_estimates_s={
            str(k): _float(v, f"clocks.phase_estimates_s.{k}", label, above_zero=True) for k, v in estimates.items()
        },
    )

    progress = _progress(_mapping(data, "progress", label), label)

    throughput = _mapping(data, "throughput", label)
    _check_keys(throughput, _THROUGHPUT_KEYS, "in throughput: ", label)
    samples = None
    if throughput.get("samples_per_step") is not None:
        samples = _expr(str(throughput["samples_per_step"]), "throughput.samples_per_step", label)
        _check_names(samples.names, known, "throughput.samples_per_step", label)

    stability = _mapping(data, "stability", label)
    _check_keys(stability, _STABILITY_KEYS, "in stability: ", label)
    min_headroom = _fraction(stability.get("min_headroom_frac", 0.05), "stability.min_headroom_frac", label)
    worst = None
    if stability.get("worst_case_tokens") is not None:
        worst = _expr(str(stability["worst_case_tokens"]), "stability.worst_case_tokens", label)
        _check_names(worst.names, known, "stability.worst_case_tokens", label)
    forcing = _force_worst_case(stability.get("force_worst_case"), known, label)
    every_step = _every_step_longest(stability, label)

    space = SearchSpace(
        name=name,
        description=str(data.get("description") or ""),
        source=source,
        text=text,
        parameters=params,
        context=context,
        context_args=context_args,
        defines=tuple(defines),
        derived=tuple(derived),
        constraints=tuple(constraints),
        trial_overrides=trial_overrides,
        trial_arg_style=trial_arg_style,
        trial_booleans=trial_booleans,
        trial_env=trial_env,
        samples_per_step=samples,
        stop=stop,
        clocks=clocks,
        progress=progress,
        min_headroom_frac=min_headroom,
        worst_case_tokens=worst,
        force_worst_case=forcing,
        every_step_longest=every_step,
    )
    _check_defaults(space, label)
    return space


def _every_step_longest(stability: dict[str, Any], label: str) -> bool:
    """``stability.every_step_longest``; true leaves no longer batch for the other two keys to reach."""
    where = "stability.every_step_longest"
    every_step = _bool(stability.get("every_step_longest", False), where, label)
    other = [k for k in ("worst_case_tokens", "force_worst_case") if stability.get(k) is not None]
    if every_step and other:
        raise NcclTuneError(
            f"space file {label}: {where} is true and stability.{other[0]} is set: a job whose every step "
            "carries its longest batch has none longer to force or predict; keep one of the two"
        )
    return every_step


def _check_env_name(name: str, where: str, label: str) -> None:
    """One-line error for an environment variable a space may not set."""
    if not is_env_name(name):
        raise NcclTuneError(
            f"space file {label}: {where}: {name!r} is not a valid environment variable name "
            "(letters, digits and _, not starting with a digit)"
        )
    if name in _PROTECTED_ENV:
        raise NcclTuneError(
            f"space file {label}: {where}: a space may not set {name} ({_PROTECTED_ENV[name]}); "
            "set it in the environment you run nccl-tune from"
        )


_FORCE_HINT = (
    "map each setting (a config key, a --flag or an ENV_VAR) to its value, an expression over the "
    "parameters and context (e.g. generator.sampling_params.additional_kwargs: "
    "{min_tokens: generator.sampling_params.max_generate_length})"
)


def _force_worst_case(raw: Any, known: set[str], label: str) -> tuple[ForcedSetting, ...]:
    """``stability.force_worst_case``: settings -> values (expressions; a mapping of expressions for a
    config key whose value is a mapping; null for a bare flag)."""
    where = "stability.force_worst_case"
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not raw:
        raise NcclTuneError(f"space file {label}: {where} must be a non-empty mapping: {_FORCE_HINT}")
    out = []
    for key, value in raw.items():
        key, at = str(key), f"{where}.{key}"
        flag, env = is_flag(key), key.isupper() and "." not in key and not is_flag(key)
        if env:
            _check_env_name(key, at, label)
        elif flag and not _FLAG_RX.fullmatch(key) or not flag and not _HYDRA_KEY_RX.fullmatch(key):
            raise NcclTuneError(
                f"space file {label}: {at}: {key!r} is not a config key, flag or ENV_VAR; {_FORCE_HINT}"
            )
        target = Target.ENV if env else Target.OVERRIDE
        if value is None:
            if not flag:
                raise NcclTuneError(f"space file {label}: {at} has no value; only a --flag may stand alone")
            out.append(ForcedSetting(key, target))
            continue
        if isinstance(value, list) or isinstance(value, dict) and (flag or env or not value):
            what = "a list" if isinstance(value, list) else "a mapping"
            raise NcclTuneError(
                f"space file {label}: {at} is {what}; only a config key takes a mapping ({{name: expression}}); "
                f"give one value"
            )
        if isinstance(value, dict):
            fields = []
            for name, text in value.items():
                if not isinstance(text, (str, int, float, bool)) or not _NAME_RX.fullmatch(str(name)):
                    raise NcclTuneError(f"space file {label}: {at}.{name} must be a name with one value; {_FORCE_HINT}")
                ex = _expr(str(text), f"{at}.{name}", label)
                _check_names(ex.names, known, f"{at}.{name}", label)
                fields.append((str(name), ex))
            out.append(ForcedSetting(key, target, fields=tuple(fields)))
            continue
        ex = _expr(str(value), at, label)
        _check_names(ex.names, known, at, label)
        out.append(ForcedSetting(key, target, ex))
    return tuple(out)


def _progress(raw: Mapping[str, Any], label: str) -> ProgressRules:
    """The space's progress rules: a preset's with the space's own replacing them, the space's own,
    or (no preset and no step rule) the space's own over whichever preset the output matches."""
    _check_keys(raw, _PROGRESS_KEYS, "in progress: ", label)
    preset = raw.get("preset")
    if preset is not None and preset not in PRESETS:
        raise NcclTuneError(
            f"space file {label}: progress.preset {preset!r} is unknown; presets: {', '.join(PRESETS)} "
            "(or leave it out to recognise the trainer from its output)"
        )
    if "step_end" in raw and not raw["step_end"]:
        raise NcclTuneError(
            f"space file {label}: progress.step_end is empty, so no step is ever measured and no trial can be ranked; "
            "remove it (the preset's step rule applies) or give a regular expression"
        )
    given: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "preset" or value is None:
            continue
        if key in ("step_end", "memory"):
            value = [value] if isinstance(value, str) else value
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise NcclTuneError(
                    f"space file {label}: progress.{key} must be a regular expression or a list of them"
                )
            value = tuple(value)
        elif not isinstance(value, str):
            raise NcclTuneError(f"space file {label}: progress.{key} must be a regular expression string")
        given[key] = value
    rules = ProgressRules(**given)
    check_rules(rules, f"space file {label}: progress")
    return apply_preset(rules, preset)


def _context(raw: Mapping[str, Any], label: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Context values, and the flags of those given as ``{value: V, arg: --flag}``."""
    values: dict[str, Any] = {}
    args: dict[str, str] = {}
    for key, v in raw.items():
        if isinstance(v, dict):
            _check_keys(v, {"value", "arg"}, f"in context.{key}: ", label)
            arg = v.get("arg")
            if not isinstance(arg, str) or not (_FLAG_RX.fullmatch(arg) or _HYDRA_KEY_RX.fullmatch(arg)):
                raise NcclTuneError(f"space file {label}: context.{key}.arg must be a flag (--nproc) or a Hydra key")
            v = v.get("value")
            args[key] = arg
        if isinstance(v, (dict, list)) or v is None:
            raise NcclTuneError(f"space file {label}: context.{key} must be a single value (or {{value:, arg:}})")
        if not _NAME_RX.fullmatch(key):
            raise NcclTuneError(
                f"space file {label}: context key {key!r} is not an identifier; name it and give arg: {key}"
            )
        values[key] = v
    return values, args


def _enabled(p: Any, i: int, label: str) -> bool:
    """``enabled: false`` keeps an optional parameter out of the search (it is still validated)."""
    if not isinstance(p, dict) or "enabled" not in p:
        return True
    if not isinstance(p["enabled"], bool):
        raise NcclTuneError(f"space file {label}: parameters[{i}] ({p.get('name')}): enabled must be true or false")
    if not p["enabled"]:
        _parameter({k: v for k, v in p.items() if k != "enabled"}, i, label)
    return p["enabled"]


def _check_names(names: frozenset[str], known: set[str], where: str, label: str) -> None:
    for n in sorted(names):
        if n not in known:
            raise NcclTuneError(
                f"space file {label}: {where} names {n!r}, which is not a parameter, context value or define; "
                f"known names: {', '.join(sorted(known))}"
            )


def _check_defaults(space: SearchSpace, label: str) -> None:
    """Evaluate every expression once on the defaults, so a type error shows at load time."""
    values = {p.name: (p.default if p.default is not None else p.choices[0]) for p in space.parameters}
    try:
        space.violations(values)
        space.derived_values(values)
        space.samples(values)
        space.worst_tokens(values)
        space.forced_settings(values)
    except ExprError as exc:
        raise NcclTuneError(f"space file {label}: {exc}") from None


def _scalar(v: Any, where: str, label: str) -> str:
    if isinstance(v, (dict, list)):
        raise NcclTuneError(f"space file {label}: {where} must be a single value, not a {type(v).__name__}")
    return format_value(v)


def _int(v: Any, where: str, label: str, minimum: int = 0) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise NcclTuneError(f"space file {label}: {where} must be an integer >= {minimum}, got {v!r}")
    return v


def _float(v: Any, where: str, label: str, above_zero: bool = False) -> float:
    """A finite number, at least 0 (above 0 when ``above_zero``)."""
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or not math.isfinite(v)
        or v < 0
        or (above_zero and v == 0)
    ):
        rule = "a finite number above 0" if above_zero else "a finite number, 0 or more"
        raise NcclTuneError(f"space file {label}: {where} must be {rule}, got {v!r}")
    return float(v)


_CLOCKS_THAT_MAY_BE_ZERO = frozenset({"stall_floor_s", "grace_s"})
"""A zero floor is no floor and a zero grace is SIGKILL at once; a zero timeout or multiplier
would call every trial hung."""


def _clock(key: str, v: Any, label: str) -> float:
    """A clock of the space's ``clocks:``: finite, and above 0 unless zero means something."""
    return _float(v, f"clocks.{key}", label, above_zero=key not in _CLOCKS_THAT_MAY_BE_ZERO)


def _fraction(v: Any, where: str, label: str) -> float:
    """A number from 0 up to (not including) 1."""
    value = _float(v, where, label)
    if value >= 1:
        raise NcclTuneError(f"space file {label}: {where} must be a fraction below 1 (0.05 keeps 5% free), got {v!r}")
    return value


def _bool(v: Any, where: str, label: str) -> bool:
    """``true`` or ``false``: a string such as ``"no"`` would otherwise count as true."""
    if not isinstance(v, bool):
        raise NcclTuneError(f"space file {label}: {where} must be true or false, got {v!r}")
    return v
