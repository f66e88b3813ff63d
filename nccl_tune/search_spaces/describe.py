"""A config in the space's own words: the shortest unambiguous name of each parameter, and a
config as ``name=value`` pairs (the live display and every report write configs this way)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nccl_tune.search_spaces.space import UNSET, SearchSpace
from nccl_tune.search_spaces.spelling import format_value


def short_names(space: SearchSpace) -> dict[str, str]:
    """Shortest unambiguous dotted suffix of each parameter name."""
    out: dict[str, str] = {}
    for p in space.parameters:
        parts = p.name.split(".")
        for k in range(1, len(parts) + 1):
            cand = ".".join(parts[-k:])
            clash = [q for q in space.parameters if q.name != p.name and q.name.endswith(cand)]
            if not clash:
                out[p.name] = cand
                break
        else:
            out[p.name] = p.name
    return out


def describe(space: SearchSpace, values: Mapping[str, Any], baseline: Mapping[str, Any] | None = None) -> str:
    """``name=value`` pairs, leaving out env variables left unset (and, given a baseline, unchanged values)."""
    names = short_names(space)
    parts = []
    for p in space.parameters:
        if p.name not in values:
            continue
        v = values[p.name]
        if baseline is not None and baseline.get(p.name) == v:
            continue
        if v == UNSET:
            continue
        parts.append(f"{names[p.name]}={format_value(v)}")
    return " ".join(parts) if parts else "(baseline values)"
