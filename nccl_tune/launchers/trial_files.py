"""The files a trial leaves in its folder: ``spec.json`` before launch, ``result.json`` at the end,
and beside it ``facts.json`` (what the verdict was decided from, so ``nccl-tune diagnose`` on the
folder replays the same decision) and ``stacks.json`` (the ranks' stacks taken at a stall).

Both are written atomically (a temporary file, then a rename), so a tuner killed at any moment
leaves either the old file or the new one, never half of one. A folder with ``spec.json`` and
no ``result.json`` is a trial whose tuner died while it ran.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from nccl_tune.atomic import write_json_atomic
from nccl_tune.diagnose.stacks import STACKS_FILE
from nccl_tune.diagnose.verdict import FACTS_FILE, LogFacts, TrialFacts, decide
from nccl_tune.errors import NcclTuneError
from nccl_tune.trial import StopReason, TrialResult, TrialSpec

SPEC_FILE = "spec.json"
RESULT_FILE = "result.json"
LOG_FILE = "output.log"


def spec_record(spec: TrialSpec, env_overlay: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """What ``spec.json`` holds: enough to rerun the trial by hand or to recognise it on resume."""
    return {
        "study": spec.study,
        "number": spec.number,
        "marker": spec.marker,
        "argv": list(spec.argv),
        "env": dict(spec.env if env_overlay is None else env_overlay),
        "params": dict(spec.params),
        "cwd": str(spec.cwd) if spec.cwd else None,
        "clocks": {
            f.name: (dict(v) if isinstance(v := getattr(spec.clocks, f.name), Mapping) else v)
            for f in fields(spec.clocks)
        },
        "stop": asdict(spec.stop),
        "samples_per_step": spec.samples_per_step,
        "progress_preset": spec.progress.preset,
        "memory_knobs": [asdict(k) for k in spec.memory_knobs],
        "written_at": time.time(),
    }


def write_spec(spec: TrialSpec, env_overlay: Mapping[str, str | None] | None = None) -> Path:
    """Write ``<trial_dir>/spec.json`` and remove a ``result.json`` left by an earlier attempt."""
    spec.trial_dir.mkdir(parents=True, exist_ok=True)
    for name in (RESULT_FILE, FACTS_FILE, STACKS_FILE):
        (spec.trial_dir / name).unlink(missing_ok=True)
    path = spec.trial_dir / SPEC_FILE
    write_json_atomic(path, spec_record(spec, env_overlay))
    return path


def write_result(result: TrialResult, trial_dir: Path) -> Path:
    """Write ``<trial_dir>/result.json``."""
    path = Path(trial_dir) / RESULT_FILE
    write_json_atomic(path, result.to_json())
    return path


def write_facts(facts: TrialFacts, trial_dir: Path) -> None:
    """Write ``facts.json`` (and ``stacks.json`` when stacks were taken) into the trial folder."""
    write_json_atomic(Path(trial_dir) / FACTS_FILE, facts.to_json())
    if facts.stacks is not None:
        write_json_atomic(Path(trial_dir) / STACKS_FILE, facts.stacks.to_json())


def read_result(trial_dir: Path) -> TrialResult | None:
    """The trial's recorded result, or None when it never finished. ``NcclTuneError`` when the
    file exists but cannot be read."""
    path = Path(trial_dir) / RESULT_FILE
    if not path.exists():
        return None
    try:
        return TrialResult.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise NcclTuneError(f"{path} is not a readable trial result ({exc}): delete it to rerun the trial") from None


def interrupted_result(trial_dir: Path, number: int, detail: str, *, escaped_processes: int = 0) -> TrialResult:
    """Record a trial whose tuner was killed while it ran (found on resume) as ``interrupted``,
    unless it has a result already; return the recorded result."""
    trial_dir = Path(trial_dir)
    existing = read_result(trial_dir)
    if existing is not None:
        return existing
    log = trial_dir / LOG_FILE
    facts = TrialFacts(
        logs=(LogFacts(LOG_FILE, log),) if log.exists() else (), stop_reason=StopReason.INTERRUPTED, stop_detail=detail
    )
    verdict = decide(facts)
    write_facts(facts, trial_dir)
    result = TrialResult(
        number=number,
        status=verdict.failure_class,
        verdict=verdict,
        stop_reason=StopReason.INTERRUPTED,
        trial_dir=trial_dir,
        log_paths=(log,) if log.exists() else (),
        escaped_processes=escaped_processes,
    )
    write_result(result, trial_dir)
    return result
