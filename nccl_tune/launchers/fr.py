"""PyTorch Flight Recorder dumps of a trial.

The search space's trial env asks for them (``TORCH_FR_BUFFER_SIZE``,
``TORCH_NCCL_DUMP_ON_TIMEOUT=1``); this module points ``TORCH_FR_DUMP_TEMP_FILE`` (a path prefix
to which each rank appends its rank number) into ``<trial_dir>/fr/`` so trials never mix their
dumps, and lists the dumps a trial left for the diagnosis.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

FR_PATH_ENV = "TORCH_FR_DUMP_TEMP_FILE"
FR_DIR = "fr"
DEFAULT_PREFIX = "nccl_trace_rank_"
TRIAL_DIR_PLACEHOLDER = "{trial_dir}"
"""A search space may write ``TORCH_FR_DUMP_TEMP_FILE: "{trial_dir}/fr/trace_"``."""

_TRAILING_INT = re.compile(r"(\d+)$")


def fr_prefix(env_overlay: Mapping[str, str | None], trial_dir: Path) -> Path | None:
    """Where the trial's ranks dump: the overlay's ``TORCH_FR_DUMP_TEMP_FILE`` with
    ``{trial_dir}`` resolved (a relative path is taken from the trial folder), or
    ``<trial_dir>/fr/nccl_trace_rank_`` when the overlay does not set it; None when the
    overlay unsets it on purpose. The prefix's folder is created."""
    trial_dir = Path(trial_dir)
    if FR_PATH_ENV in env_overlay:
        value = env_overlay[FR_PATH_ENV]
        if value is None:
            return None
        value = str(value).replace(TRIAL_DIR_PLACEHOLDER, str(trial_dir))
        prefix = Path(value)
        if not prefix.is_absolute():
            prefix = trial_dir / prefix
    else:
        prefix = trial_dir / FR_DIR / DEFAULT_PREFIX
    prefix.parent.mkdir(parents=True, exist_ok=True)
    return prefix


def fr_env(env_overlay: Mapping[str, str | None], trial_dir: Path) -> dict[str, str | None]:
    """The overlay with the dump path resolved (see ``fr_prefix``)."""
    out = dict(env_overlay)
    prefix = fr_prefix(env_overlay, trial_dir)
    if prefix is not None:
        out[FR_PATH_ENV] = str(prefix)
    return out


def _rank_key(path: Path) -> tuple[int, str]:
    m = _TRAILING_INT.search(path.name)
    return (int(m.group(1)) if m else 1 << 30, path.name)


def collect_dumps(prefix: Path | None) -> tuple[Path, ...]:
    """The non-empty dump files written under ``prefix`` (``<prefix><rank>``), in rank order."""
    if prefix is None or not prefix.parent.is_dir():
        return ()
    found = [
        p for p in prefix.parent.iterdir() if p.name.startswith(prefix.name) and p.is_file() and p.stat().st_size > 0
    ]
    return tuple(sorted(found, key=_rank_key))


def clear_dumps(prefix: Path | None) -> int:
    """Remove dumps an earlier attempt of the same trial left under ``prefix``; return how many."""
    if prefix is None or not prefix.parent.is_dir():
        return 0
    stale = [p for p in prefix.parent.iterdir() if p.name.startswith(prefix.name) and p.is_file()]
    for p in stale:
        p.unlink(missing_ok=True)
    return len(stale)
