"""``--set KEY=VALUE``: hold parameters (or the space's context values) fixed for a run."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nccl_tune.errors import NcclTuneError
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.search_spaces.spelling import did_you_mean


@dataclass(frozen=True)
class Pins:
    params: Mapping[str, Any]
    """Parameters held at one value (passed to every trial, never sampled)."""
    context: Mapping[str, Any]
    """Context values changed from the space's (also passed to every trial as overrides)."""


def parse_pin(text: str) -> tuple[str, str]:
    """Split ``KEY=VALUE``; one-line error otherwise."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise NcclTuneError(f"--set {text!r}: expected KEY=VALUE, e.g. --set trainer.train_batch_size=256")
    return key.strip(), value.strip()


def _coerce_context(old: Any, raw: str, key: str) -> Any:
    if isinstance(old, bool):
        low = raw.lower()
        if low in ("true", "1", "yes", "on", "false", "0", "no", "off"):
            return low in ("true", "1", "yes", "on")
        raise NcclTuneError(f"--set {key}={raw}: {key} is a boolean; use true or false")
    if isinstance(old, int):
        try:
            return int(raw)
        except ValueError:
            raise NcclTuneError(f"--set {key}={raw}: {key} is an integer") from None
    if isinstance(old, float):
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise NcclTuneError(f"--set {key}={raw}: {key} is a finite number, such as {old!r}") from None
        return value
    return raw


def _refuse_conflicts(pairs: tuple[tuple[str, str], ...]) -> None:
    """One line for a key given twice with different values: the run cannot hold both, and taking the
    last one silently would tune something other than what the user meant."""
    first: dict[str, str] = {}
    for key, raw in pairs:
        if key in first and first[key] != raw:
            raise NcclTuneError(f"--set {key} is given twice ({key}={first[key]} and {key}={raw}); keep one of them")
        first.setdefault(key, raw)


def apply_pins(space: SearchSpace, pairs: tuple[tuple[str, str], ...]) -> tuple[SearchSpace, Pins]:
    """Validate ``pairs`` against ``space``; return the space with its context updated, and the pins."""
    _refuse_conflicts(pairs)
    params: dict[str, Any] = {}
    context: dict[str, Any] = {}
    for key, raw in pairs:
        if key in space.names:
            params[key] = space.param(key).coerce(raw, f"--set {key}={raw}")
        elif key in space.context:
            context[key] = _coerce_context(space.context[key], raw, key)
        else:
            guess = did_you_mean(key, [*space.names, *space.context])
            raise NcclTuneError(
                f"--set {key}={raw}: space {space.name} has no parameter or context value {key}{guess}; "
                f"parameters: {', '.join(space.names)}"
            )
    if context:
        space = dataclasses.replace(space, context={**space.context, **context})
    return space, Pins(params=params, context=context)


def baseline_values(space: SearchSpace, held: Mapping[str, Any]) -> dict[str, Any] | None:
    """The user's own config: the space's defaults with the held values; None when the defaults do
    not name every parameter or break the space's rules."""
    values = space.baseline(held)
    if set(values) != set(space.names):
        return None
    return values if not space.violations(values) else None
