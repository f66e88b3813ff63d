"""The tuned config as YAML (``overrides:`` ready for ``OmegaConf.merge``, ``env:``, ``args:``,
provenance), as ``key=value`` arguments or as shell ``export`` lines; and ``apply``, which
merges a tuned YAML into a training config."""

from __future__ import annotations

import datetime as dt
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from nccl_tune.errors import NcclTuneError
from nccl_tune.search_spaces.render import config_overrides, is_env_name, render_values
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.tuner.records.semantics import semantic_changes
from nccl_tune.tuner.records.speedup import speedup
from nccl_tune.tuner.records.stability import Candidate, faster_unfit
from nccl_tune.tuner.winner.headline import Choice, choices, confirmation_words
from nccl_tune.tuner.winner.study_view import StoredStudy, open_study
from nccl_tune.tuner.winner.worst_proof import (
    EVERY_STEP,
    FAILS,
    UNPROVEN,
    fails_at_worst,
    fails_why,
    stable_words,
    to_survive,
    unproven_why,
)
from nccl_tune.userfile import read_text, refuse_non_file, write_output, yaml_mapping
from nccl_tune.wording import fmt_tput

FORMATS = ("yaml", "args", "env")


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def _plain(value: Any) -> Any:
    """YAML-friendly scalar: numbers and booleans stay typed, the rest are strings."""
    return value if isinstance(value, (bool, int, float)) else str(value)


WINNER = "winner"
"""``study.choice`` of a tuned YAML: the study's winner."""
SPEED_ONLY_CHOICE = "speed_only"
"""``study.choice`` of a tuned YAML: the fastest stable config that keeps the training as the user runs it."""


MEMORY_NOTES = {
    "log": (
        "read from the trainer's own lines, which often count allocated tensors only (DeepSpeed's MaxMemAllocated, "
        "PyTorch's max_memory_allocated): the allocator's cache and NCCL's buffers, several GiB, are not in it, so "
        "the real headroom is smaller than min_headroom_gib; on a node NVML reads the whole device"
    ),
    "rss": "no GPU memory was read (no NVML, no memory line the progress rules match): peak and headroom are unknown",
}
"""What ``metrics.memory_note`` says of a memory source that does not read the whole device."""


def tuned_document(stored: StoredStudy, winner: Candidate, choice: str = WINNER) -> dict[str, Any]:
    """The tuned YAML of ``winner`` (a candidate of ``stored``) as a mapping; ``choice`` says which
    of the study's picks it is (``WINNER`` or ``SPEED_ONLY_CHOICE``). Parameters dropped during the study
    (their value never reached the program) are left out, listed under ``dropped``."""
    space, base = stored.space, stored.baseline
    values = {k: v for k, v in winner.values.items() if k not in stored.dropped}
    args, env_overlay = render_values(space, values)
    env = {k: v for k, v in env_overlay.items() if v is not None}
    unset_env = [k for k, v in env_overlay.items() if v is None]
    overrides = {k: _plain(v) for k, v in config_overrides(space, values).items()}
    training = semantic_changes(space, values, base.values if base else None)
    semantic = [str(c) for c in training]
    best = max(winner.ok_runs, key=lambda r: r.throughput or 0.0)
    metrics: dict[str, Any] = {
        "throughput_per_s": round(winner.throughput, 3),
        "throughput_unit": winner.throughput_unit,
        "mean_step_s": round(best.result.mean_step_s, 3) if best.result and best.result.mean_step_s else None,
        "runs": sum(not r.forced for r in winner.runs),
        "runs_per_s": [round(r.throughput, 3) for r in winner.ok_runs if r.throughput],
        "measured_steps_per_run": [
            len(r.result.measured_step_times_s) for r in winner.ok_runs if r.throughput and r.result
        ],
        "throughput_spread": round(winner.throughput_spread, 4),
        "peak_mem_gib": round(winner.peak_mem_gib, 2) if winner.peak_mem_gib is not None else None,
        "min_headroom_gib": round(winner.min_headroom_gib, 2) if winner.min_headroom_gib is not None else None,
        "memory_source": best.result.memory.source if best.result and best.result.memory else None,
        "memory_note": MEMORY_NOTES.get(best.result.memory.source) if best.result and best.result.memory else None,
        "confirmed": winner.confirmed,
        "confirmation": confirmation_words(winner),
        "worst_case": worst_case_summary(stored, winner),
    }
    metrics.update(_speedup_metrics(winner, base))
    # the side by side is the study's, whichever of its picks is written
    lead = stored.winner if stored.winner is not None else winner
    pair = choices(space, stored.records, lead, stored.speed_only, stored.with_training, base, stored.flaky)
    if pair is not None:
        metrics["speed_only"], metrics["with_training_changes"] = (_choice_json(c) for c in pair)
    return {
        "overrides": _nest(overrides),
        "env": env,
        "unset_env": unset_env,
        "args": args,
        "semantic_changes": semantic,
        "semantic_help": {c.name: space.param(c.name).help for c in training if space.param(c.name).help},
        "semantic_parameters": [p.name for p in space.parameters if p.semantic],
        "dropped": dict(stored.dropped),
        "metrics": metrics,
        "study": {
            "name": stored.name,
            "choice": choice,
            "storage": stored.storage_url,
            "space": space.name,
            "command": shlex.join(stored.command),
            "trial": winner.first.number,
            "trials": [r.number for r in winner.runs],
            "trials_in_study": len(stored.records),
            "failures": stored.failures,
            "confirmed": winner.confirmed,
            "params": {k: _plain(v) for k, v in values.items()},
            "exported": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        },
        "hardware": dict(stored.hardware) if stored.hardware is not None else None,
    }


def _speedup_metrics(winner: Candidate, base: Candidate | None) -> dict[str, Any]:
    """The speed-up over the baseline (``records.speedup``), and whether it is like for like."""
    gain = speedup(winner, base)
    if gain is None:
        if base is None or not base.throughput:
            return {}
        return {"baseline_throughput_per_s": round(base.throughput, 3), "speedup_vs_baseline": 1.0}
    out: dict[str, Any] = {
        "baseline_throughput_per_s": round(gain.baseline_per_s, 3),
        "speedup_vs_baseline": round(gain.ratio, 3),
        "baseline_measured_steps_per_run": list(gain.baseline_steps),
        "speedup_like_for_like": gain.matched,
    }
    if not gain.matched:
        out["speedup_caveat"] = gain.caveat()
    return out


def _choice_json(choice: Choice) -> dict[str, Any]:
    """One side of the speed-only / training-changes pair (``headline.choices``) as YAML."""
    c = choice.candidate
    return {
        "trial": c.first.number if c is not None else None,
        "throughput_per_s": round(c.throughput, 3) if c is not None else None,
        "speedup_vs_baseline": round(choice.speedup.ratio, 3) if choice.speedup is not None else None,
        "speedup_like_for_like": choice.speedup.matched if choice.speedup is not None else None,
        "semantic_changes": [str(x) for x in choice.changes],
        "note": choice.note,
        "params": {k: _plain(v) for k, v in c.values.items()} if c is not None else None,
    }


def worst_case_summary(stored: StoredStudy, winner: Candidate) -> dict[str, Any]:
    """The winner's memory at the peak it saw and at the longest batch its config allows (forced,
    predicted with its range, or the peak it saw where every step carries that batch), the headroom
    against each (shares of the GPU), and the faster configs passed over because their worst case
    does not fit."""
    w = winner.worst_case
    gpu = [g.total_gib for r in winner.runs if r.result and r.result.memory for g in r.result.memory.gpus]
    total = max(gpu) if gpu and all(t == t for t in gpu) else None  # NaN: a size no source gave
    fracs = [r.result.memory.max_peak_frac for r in winner.runs if r.result and r.result.memory and not r.forced]
    seen = max((f for f in fracs if f is not None), default=None)
    why = unproven_why(stored.space, winner)
    every_step = stored.space.every_step_longest
    out: dict[str, Any] = {
        "stable": stable_words(stored.space, winner),
        "how": EVERY_STEP if every_step else w.how if w is not None else None,
        "judged": w.judged if w is not None else False,
        "peak_seen_frac": round(seen, 4) if seen is not None else None,
        "headroom_seen_frac": round(1.0 - seen, 4) if seen is not None else None,
        "min_headroom_frac": stored.space.min_headroom_frac,
    }
    if why is not None:
        out["to_prove"] = why
    if fails_at_worst(winner):
        out["fails"] = fails_why(winner)
        out["to_survive"] = to_survive(stored.space, winner)
    if winner.forced_run is not None:
        out["forced_trial"] = winner.forced_run.number
    if w is not None:
        out.update(
            worst_peak_frac=round(w.peak_frac, 4),
            worst_peak_range_frac=[round(w.lower_frac, 4), round(w.upper_frac, 4)],
            headroom_worst_frac=round(1.0 - w.peak_frac, 4),
            tokens_seen=w.tokens_seen,
            tokens_worst=w.tokens_worst,
        )
        if total is not None:
            out["worst_peak_gib"] = round(w.peak_frac * total, 2)
    elif every_step and seen is not None:
        out.update(worst_peak_frac=round(seen, 4), headroom_worst_frac=round(1.0 - seen, 4))
        if total is not None:
            out["worst_peak_gib"] = round(seen * total, 2)
    passed = faster_unfit(stored.records, winner)
    out["faster_not_fitting"] = [
        {
            "trial": c.first.number,
            "throughput_per_s": round(c.throughput, 3),
            "worst_peak_frac": round(c.worst_case.peak_frac, 4) if c.worst_case else None,
            "params": {k: _plain(v) for k, v in c.values.items()},
        }
        for c in passed
    ]
    return out


def format_tuned(doc: dict[str, Any], fmt: str) -> str:
    """The tuned document as text: ``yaml``, ``args`` (one shell line) or ``env`` (export lines)."""
    if fmt == "yaml":
        return _yaml_head(doc) + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    if fmt == "args":
        return " ".join(shlex.quote(a) for a in doc["args"]) + "\n"
    if fmt == "env":
        lines = [f"# not exported: {reason}" for reason in doc.get("dropped", {}).values()]
        lines += [f"export {k}={shlex.quote(str(v))}" for k, v in doc["env"].items()]
        lines += [f"unset {k}" for k in doc["unset_env"]]
        if not doc["env"] and not doc["unset_env"]:
            lines.append(f"# the best stable config of study {doc['study']['name']} sets no environment variable")
        return "\n".join(lines) + "\n"
    raise NcclTuneError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")


def _yaml_head(doc: dict[str, Any]) -> str:
    """The tuned YAML's comment lines: the config, whether it is confirmed, its speed-up and, when
    the training is at stake, the speed-only best next to the best with training changes."""
    m = doc["metrics"]
    said = str(m.get("confirmation") or "")
    unconfirmed = "" if m["confirmed"] else f", {said}" if said.startswith("NOT") else ", NOT confirmed by a re-run"
    if (m.get("worst_case") or {}).get("stable") == UNPROVEN:
        unconfirmed += f", {UNPROVEN.upper()}: see metrics.worst_case.to_prove"
    fails = (m.get("worst_case") or {}).get("stable") == FAILS
    if fails:
        unconfirmed += f", {FAILS.upper()}: see metrics.worst_case.fails and to_survive"
    what = "fastest config that passed its own trials" if fails else "fastest stable config"
    keeps = ", keeping the training as you run it" if doc["study"].get("choice") == SPEED_ONLY_CHOICE else ""
    runs = len(m["runs_per_s"])
    mean = f", mean of {runs} runs" if runs > 1 else ""
    lines = [
        f"nccl-tune: {what} of study {doc['study']['name']}{keeps} "
        f"({fmt_tput(m['throughput_per_s'], m['throughput_unit'])}{mean}{unconfirmed})"
    ]
    if m.get("speedup_vs_baseline") is not None:
        caveat = f" (not like for like: {m['speedup_caveat']})" if m.get("speedup_caveat") else ""
        lines.append(f"speed-up: {m['speedup_vs_baseline']}x the baseline{caveat}")
    for key, label in (
        ("speed_only", "speed only (the training as you run it)"),
        ("with_training_changes", "with training changes"),
    ):
        side = m.get(key)
        if side is None:
            continue
        gain = f", {side['speedup_vs_baseline']}x the baseline" if side["speedup_vs_baseline"] is not None else ""
        changes = f"; changes {', '.join(side['semantic_changes'])}" if side["semantic_changes"] else ""
        note = f" ({side['note']})" if side["note"] else ""
        trial = f"trial {side['trial']}" if side["trial"] is not None else "none"
        lines.append(f"{label}: {trial}{gain}{changes}{note}")
    lines += [
        "overrides: merge into the training config (OmegaConf.merge) or pass `args` on the command line (argv elements);",
        "env: export before the run; unset_env: make sure these are not set.",
    ]
    return "".join(f"# {line}\n" for line in lines)


def export_study(storage_url: str, study_name: str | None, fmt: str = "yaml", speed_only: bool = False) -> str:
    """The winner of a stored study (with ``speed_only``, the fastest stable config that keeps every
    semantic parameter as the user runs it: the report's "speed only" line), as ``fmt``; exit code 2
    when it has no such trial."""
    if fmt not in FORMATS:
        raise NcclTuneError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    stored = open_study(storage_url, study_name)
    if stored.winner is None:
        n_ok = sum(r.ok for r in stored.records)
        raise NcclTuneError(
            f"study {stored.name!r} has no stable trial yet ({len(stored.records)} trials, {n_ok} ok); "
            "run more trials with `nccl-tune run` or see `nccl-tune report`",
            exit_code=2,
        )
    if not speed_only:
        return format_tuned(tuned_document(stored, stored.winner), fmt)
    if stored.speed_only is None:
        raise NcclTuneError(
            f"study {stored.name!r} has no stable config that keeps the training as you run it; run more trials "
            "with `nccl-tune run`, or pin the semantic parameters there with --set KEY=VALUE to tune speed only",
            exit_code=2,
        )
    return format_tuned(tuned_document(stored, stored.speed_only, SPEED_ONLY_CHOICE), fmt)


def kept_name(path: Path) -> Path:
    """Where a tuned file already at ``path`` is kept: ``NAME.prev.yaml`` next to it."""
    return path.with_name(f"{path.stem}.prev{path.suffix or '.yaml'}")


def write_tuned(path: Path, stored: StoredStudy, winner: Candidate) -> Path | None:
    """Write ``winner``'s tuned YAML to ``path``; a file already there is kept as ``NAME.prev.yaml``
    (returned), never replaced silently."""
    text = format_tuned(tuned_document(stored, winner), "yaml")
    previous = None
    refuse_non_file(path)
    if path.exists():
        previous = kept_name(path)
        try:
            os.replace(path, previous)
        except OSError as exc:
            raise NcclTuneError(
                f"cannot keep the previous {path} as {previous} ({exc.strerror}): move it away"
            ) from None
    write_output(path, text)
    return previous


def _load_yaml(path: Path, what: str) -> DictConfig:
    """A YAML mapping from ``path``; one-line errors for a missing, binary, empty or non-mapping file."""
    text = read_text(path, what, "give a YAML file")
    data = yaml_mapping(text, f"{what} {path}", "expected a YAML mapping of keys")
    try:
        return OmegaConf.create(data)
    except OmegaConfBaseException as exc:
        raise NcclTuneError(f"{what} {path}: cannot read it: {str(exc).splitlines()[0]}") from None


@dataclass(frozen=True)
class Applied:
    """``nccl-tune apply``'s result: the merged config, and the environment the tuned config needs,
    as shell lines (a config file cannot carry it)."""

    config_yaml: str
    env_lines: tuple[str, ...]
    notes: tuple[str, ...] = ()
    """What the merge changed that a reader would not guess: interpolations replaced, comments not kept."""
    training: tuple[str, ...] = ()
    """Each value the merge changes that changes the training itself (a semantic parameter):
    ``key: old -> new (what it means, as the space says)``."""
    speed_only: tuple[str, ...] = ()
    """Each other value the merge changes in the config: ``key: old -> new``."""


def apply_tuned(tuned: Path, into: Path, allow_new_keys: bool = False) -> Applied:
    """``into`` with the tuned ``overrides`` merged in, as YAML text, and the tuned ``env``/``unset_env``
    as ``export``/``unset`` lines; refuses keys ``into`` lacks (Hydra would refuse them too) unless
    ``allow_new_keys``. Interpolations (``${...}``, ``???``) are merged as written, never resolved."""
    doc = _load_yaml(tuned, "tuned file")
    if not isinstance(doc.get("overrides"), DictConfig):
        raise NcclTuneError(f"tuned file {tuned}: no 'overrides' mapping; is it a file written by `nccl-tune export`?")
    base = _load_yaml(into, "config file")
    overrides = doc.overrides
    raw = OmegaConf.to_container(base, resolve=False)
    notes: list[str] = []
    changed: list[tuple[str, Any, Any]] = []
    for key, value in _flatten(OmegaConf.to_container(overrides, resolve=False)).items():
        found, blocked = _raw_lookup(raw, key)
        if blocked is not None and _is_interpolation(_raw_lookup_value(raw, blocked)):
            raise NcclTuneError(
                f"config file {into}: {blocked} is the interpolation {_raw_lookup_value(raw, blocked)} and {tuned} "
                f"sets {key} inside it; set {key} where {blocked} points, or write {blocked} out in {into}"
            )
        if not found and not allow_new_keys:
            raise NcclTuneError(
                f"config file {into}: has no key {key} from {tuned}; Hydra would refuse it "
                "(use --allow-new-keys to add it anyway)"
            )
        old = _raw_lookup_value(raw, key) if found else None
        if _is_interpolation(old):
            notes.append(f"{into}: {key} was {old}; it is now {format_value(value)}")
        if not found or old != value:
            changed.append((key, old if found else "(not set)", value))
    try:
        merged = OmegaConf.merge(base, overrides)
        text = OmegaConf.to_yaml(merged)
    except OmegaConfBaseException as exc:
        raise NcclTuneError(
            f"config file {into}: {tuned} cannot be merged into it ({str(exc).splitlines()[0]})"
        ) from None
    plain = OmegaConf.to_container(doc, resolve=False)
    if any(line.lstrip().startswith("#") or " #" in line for line in into.read_text().splitlines()):
        notes.append(f"the comments of {into} are not in the merged config (YAML is rewritten from its values)")
    training, speed = _split_changes(plain, changed)
    return Applied(text, _env_lines(plain, tuned), tuple(notes), training, speed)


def _split_changes(doc: dict[str, Any], changed: list[tuple[str, Any, Any]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``changed`` (key, old, new) as lines, those of semantic parameters (``semantic_parameters``, or
    the names in ``semantic_changes`` in a file written before it was kept) with what they mean."""
    named = [str(c).split(": ", 1)[0] for c in doc.get("semantic_changes") or []]
    semantic = set(doc.get("semantic_parameters") or []) | set(named)
    helps = doc.get("semantic_help") or {}
    training, speed = [], []
    for key, old, new in changed:
        line = f"{key}: {format_value(old)} -> {format_value(new)}"
        if key in semantic:
            training.append(line + (f" ({helps[key]})" if helps.get(key) else ""))
        else:
            speed.append(line)
    return tuple(training), tuple(speed)


def _raw_lookup(raw: Any, key: str) -> tuple[bool, str | None]:
    """Whether dotted ``key`` is in ``raw`` (the config unresolved), and the part of it that holds a
    value where a mapping should be (None when none does)."""
    node, parts = raw, key.split(".")
    for i, part in enumerate(parts):
        if isinstance(node, dict):
            if part not in node:
                return False, None
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, ".".join(parts[:i])
    return True, None


def _raw_lookup_value(raw: Any, key: str) -> Any:
    node = raw
    for part in key.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _is_interpolation(value: Any) -> bool:
    return isinstance(value, str) and ("${" in value or value == "???")


def _env_lines(doc: dict[str, Any], tuned: Path) -> tuple[str, ...]:
    """The tuned file's ``env`` and ``unset_env`` as ``export``/``unset`` lines; one line naming the
    key for a value a shell could not take (a list for ``env``, a name that is no variable)."""
    env, unset = doc.get("env") or {}, doc.get("unset_env") or []
    if not isinstance(env, dict):
        raise NcclTuneError(f"tuned file {tuned}: 'env' must map variable names to values, got {type(env).__name__}")
    if not isinstance(unset, list):
        raise NcclTuneError(
            f"tuned file {tuned}: 'unset_env' must be a list of variable names, got {type(unset).__name__}"
        )
    for name in [*env, *unset]:
        if not is_env_name(name):
            raise NcclTuneError(
                f"tuned file {tuned}: {name!r} is not an environment variable name (letters, digits and _); "
                "fix it or export the file again with `nccl-tune export`"
            )
    for name, value in env.items():
        if isinstance(value, (dict, list)) or value is None:
            raise NcclTuneError(f"tuned file {tuned}: env.{name} must be a single value, got {value!r}")
    return tuple([f"export {k}={shlex.quote(format_value(v))}" for k, v in env.items()] + [f"unset {k}" for k in unset])


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = d
    return out
