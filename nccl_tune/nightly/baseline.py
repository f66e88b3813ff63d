"""Where a night's baseline comes from: the series' previous good night on the same hardware,
or a tuned YAML written by ``nccl-tune export`` (``--baseline FILE``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nccl_tune.errors import NcclTuneError
from nccl_tune.nightly.night import Baseline, Night
from nccl_tune.search_spaces.space import UNSET, SearchSpace, Target
from nccl_tune.userfile import read_text, yaml_mapping


def previous_good_night(nights: Sequence[Night], hardware: str | None) -> Night | None:
    """The latest finished night with a stable best, on ``hardware`` (when both sides know it),
    that was not itself a regression: a slowdown stays a regression every night until the speed
    comes back (or a new baseline is given), instead of becoming the new normal overnight."""
    for night in reversed(nights):
        if not night.finished or not night.best_runs_per_s:
            continue
        if night.verdict is not None and night.verdict.regression:
            continue
        if hardware and night.fingerprint and night.fingerprint.hardware != hardware:
            continue
        return night
    return None


def baseline_of_night(night: Night, space: str) -> Baseline:
    return Baseline("series", night.study, dict(night.best_values), night.best_runs_per_s, space, night.unit)


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, Mapping):
        return {prefix[:-1]: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}{k}."))
    return out


def _read(path: Path) -> dict[str, Any]:
    """The tuned YAML at ``path``; one line for a file that cannot be read or is not one."""
    fix = "give a tuned YAML written by `nccl-tune export`"
    text = read_text(path, "--baseline", fix)
    doc = yaml_mapping(text, f"--baseline {path}", fix)
    if not isinstance(doc.get("overrides"), dict) or not isinstance(doc.get("study"), dict):
        raise NcclTuneError(
            f"--baseline {path}: not a tuned YAML (no 'overrides' and 'study' mappings); "
            "write one with `nccl-tune export -o FILE`"
        )
    for key, kind in (("env", dict), ("unset_env", list), ("metrics", dict)):
        if doc.get(key) is not None and not isinstance(doc[key], kind):
            raise NcclTuneError(
                f"--baseline {path}: '{key}' must be a {'mapping' if kind is dict else 'list'}, "
                f"got {type(doc[key]).__name__}; {fix}"
            )
    return doc


def _values(doc: Mapping[str, Any], space: SearchSpace, path: Path) -> dict[str, Any]:
    """The baseline's parameter values: ``study.params`` when the file has them, else read back
    from its overrides and env."""
    given = doc["study"].get("params")
    flat = _flatten(doc.get("overrides") or {})
    env, unset = doc.get("env") or {}, set(doc.get("unset_env") or ())
    values = {}
    for p in space.parameters:
        if isinstance(given, Mapping) and p.name in given:
            raw = given[p.name]
        elif p.target is Target.ENV:
            raw = UNSET if p.name in unset or p.name not in env else env[p.name]
        elif p.name in flat or p.command_key in flat:
            raw = flat.get(p.name, flat.get(p.command_key))
        else:
            raise NcclTuneError(
                f"--baseline {path}: has no value for parameter {p.name} of space {space.name}; "
                "was it tuned with another space?"
            )
        values[p.name] = p.coerce(raw, f"--baseline {path}")
    return values


def baseline_from_file(path: Path, space: SearchSpace) -> Baseline:
    """The baseline a tuned YAML describes; one-line errors for a file of another space."""
    doc = _read(path)
    tuned_for = doc["study"].get("space")
    if tuned_for and tuned_for != space.name:
        raise NcclTuneError(
            f"--baseline {path}: tuned for space {tuned_for!r}, but this run uses space {space.name!r}; "
            "give a tuned YAML of the same space (or the matching --space)"
        )
    metrics = doc.get("metrics") or {}
    runs = (
        metrics.get("runs_per_s")
        or [x for x in (metrics.get("throughput_per_s"), metrics.get("throughput_samples_per_s")) if x][:1]
    )
    try:
        runs = tuple(float(x) for x in runs)
    except (TypeError, ValueError):
        raise NcclTuneError(f"--baseline {path}: metrics.runs_per_s must be numbers, got {runs!r}") from None
    if not all(math.isfinite(x) and x > 0 for x in runs):
        raise NcclTuneError(f"--baseline {path}: metrics.runs_per_s must be throughputs above 0, got {list(runs)!r}")
    if not runs:
        raise NcclTuneError(f"--baseline {path}: no measured throughput (metrics.throughput_per_s) to compare with")
    return Baseline(
        "file",
        str(path),
        _values(doc, space, path),
        runs,
        space.name,
        str(metrics.get("throughput_unit") or "samples/s"),
    )
