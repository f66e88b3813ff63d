"""Values as they reach the command: argv elements and environment variables.

The one home for where a value goes (its text is ``spelling.format_value``). A parameter without
``arg:`` is a Hydra override ``name=value`` (``+name=value`` when the name carries Hydra's ``+``);
with ``arg: --batch-size`` it is a flag, passed as two argv elements (``--batch-size 32``), as one
(``--batch-size=32``) with ``arg_style: equals``, or present/absent with ``arg_style: switch``
(booleans). An ``arg:`` that is not a flag (``arg: +trainer.seed``) is a Hydra key. Booleans on the
command line are ``true``/``false``, or ``True``/``False`` under ``trial.booleans: python``.
Environment parameters set (or, for ``unset``, remove) a variable. Values are argv elements, never
spliced into a shell string.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from nccl_tune.search_spaces.space import UNSET, ArgStyle, BoolSpelling, Parameter, SearchSpace, Target
from nccl_tune.search_spaces.spelling import format_value

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_env_name(name: str) -> bool:
    """True for a name a shell can ``export`` (letters, digits and _, not starting with a digit)."""
    return isinstance(name, str) and _ENV_NAME.fullmatch(name) is not None


def is_flag(key: str) -> bool:
    """True for a command-line option (``--batch-size``, ``-b``), False for a Hydra key."""
    return key.startswith("-")


def key_argv(
    key: str, value: Any, style: ArgStyle = ArgStyle.SEPARATE, booleans: BoolSpelling = BoolSpelling.LOWER
) -> list[str]:
    """``key`` set to ``value`` on the command line. A flag's value ``None`` (or a switch that is
    on) is the bare flag; a switch that is off is nothing at all."""
    text = format_value(value, python_bools=booleans is BoolSpelling.PYTHON)
    if not is_flag(key):
        return [f"{key}={text}"]
    if style is ArgStyle.SWITCH:
        return [key] if value else []
    if value is None:
        return [key]
    if style is ArgStyle.EQUALS:
        return [f"{key}={text}"]
    return [key, text]


def env_text(value: Any) -> str | None:
    """A value as an environment variable holds it; None removes the variable (``unset``)."""
    return None if value == UNSET else format_value(value)


def param_argv(p: Parameter, value: Any, booleans: BoolSpelling = BoolSpelling.LOWER) -> list[str]:
    """The argv elements that give parameter ``p`` the value ``value`` (never for env parameters)."""
    return key_argv(p.arg or p.name, value, p.arg_style, booleans)


def render_values(space: SearchSpace, values: Mapping[str, Any]) -> tuple[list[str], dict[str, str | None]]:
    """The trial's own argv elements and env overlay for ``values`` (parameters, then derived values)."""
    args: list[str] = []
    env: dict[str, str | None] = {}
    for p in space.parameters:
        if p.name not in values:
            continue
        if p.target is Target.ENV:
            env[p.name] = env_text(values[p.name])
        else:
            args += param_argv(p, values[p.name], space.trial_booleans)
    derived = space.derived_values(values)
    for d in space.derived:
        value = derived[d.key]
        if d.target is Target.ENV:
            env[d.key] = format_value(value)
        else:
            args += key_argv(d.arg or d.key, value, booleans=space.trial_booleans)
    return args, env


def config_overrides(space: SearchSpace, values: Mapping[str, Any]) -> dict[str, Any]:
    """The command-line values of ``values`` as typed config entries by name (parameters, then
    derived values): what the tuned YAML's ``overrides:`` merges into a training config."""
    out = {p.name: values[p.name] for p in space.parameters if p.name in values and p.target is not Target.ENV}
    derived = space.derived_values(values)
    out.update({d.key: derived[d.key] for d in space.derived if d.target is not Target.ENV})
    return out


def fixed_argv(space: SearchSpace, overrides: Mapping[str, str], pins: Mapping[str, Any]) -> list[str]:
    """The argv elements every trial gets before its own: the space's trial overrides (already
    expanded), then context values changed with ``--set``, their flags in ``trial.arg_style``."""
    args: list[str] = []
    for key, value in overrides.items():
        args += key_argv(key, value, space.trial_arg_style, space.trial_booleans)
    for key, value in pins.items():
        args += key_argv(space.context_args.get(key, key), value, space.trial_arg_style, space.trial_booleans)
    return args


def hydra_mapping(entries: Mapping[str, Any]) -> str:
    """A mapping as a Hydra override value: ``{min_tokens:3000,ignore_eos:true}``."""
    return "{" + ",".join(f"{k}:{format_value(v)}" for k, v in entries.items()) + "}"


def forced_values(space: SearchSpace, values: Mapping[str, Any]) -> tuple[list[str], dict[str, str | None]]:
    """The argv elements and env overlay that force a trial of ``values`` to the longest batch its
    config allows (the space's ``stability.force_worst_case``); empty when the space names none."""
    args: list[str] = []
    env: dict[str, str | None] = {}
    for setting, value in space.forced_settings(values):
        if setting.target is Target.ENV:
            env[setting.key] = env_text(value)
        elif isinstance(value, Mapping):
            args.append(f"{setting.key}={hydra_mapping(value)}")
        else:
            args += key_argv(setting.key, value, booleans=space.trial_booleans)
    return args, env
