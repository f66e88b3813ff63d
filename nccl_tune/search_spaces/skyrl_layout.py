"""Which SkyRL a command runs, and what its refusal says about the layout.

SkyRL has two layouts: today's package ``skyrl.train`` (dataclass configs; run as
``python -m skyrl.train.entrypoints.main_base``) and the legacy ``skyrl_train`` (Hydra; removed
from SkyRL in March 2026). Their keys differ (``generator.inference_engine.num_engines`` vs
``generator.num_inference_engines``, ...), so each has its built-in space. The layout is read the
way SkyRL picks it, from the module the command runs: in the command line itself, or in the script
it runs (``bash run_skyrl_sql.sh``). When neither says, trial 0 does: today's SkyRL refuses a legacy
key with ``Invalid fields {...} for <Class>``, the legacy one refuses today's with Hydra's
``Could not override '<key>'``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from nccl_tune.errors import NcclTuneError
from nccl_tune.userfile import folder_problem

TODAY_SPACE = "skyrl-text2sql"
LEGACY_SPACE = "skyrl-text2sql-legacy"
DEFAULT_SPACE = TODAY_SPACE
"""The space ``run`` uses when ``--space`` is not given and the command names no SkyRL layout."""

_TODAY = re.compile(r"(?<![\w])skyrl\.train\.entrypoints\b|-m\s+skyrl\.train\b")
_LEGACY = re.compile(r"(?<![\w])skyrl_train\.entrypoints\b|-m\s+skyrl_train\b")
_SCRIPT_BYTES = 1 << 20
_DATACLASS_REFUSAL = re.compile(r"Invalid fields \{(?P<keys>[^}]*)\} for (?P<cls>\w+)")
_PLUS_REFUSAL = re.compile(r"The '\+' prefix for adding new config fields is not supported: '(?P<token>[^']*)'")
_HYDRA_REFUSAL = re.compile(r"Could not override '(?P<key>[^']+)'")


def _layout_of(text: str) -> str | None:
    code = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    today, legacy = bool(_TODAY.search(code)), bool(_LEGACY.search(code))
    if today == legacy:
        return None
    return "today" if today else "legacy"


def _scripts(command: Sequence[str], cwd: Path) -> list[Path]:
    found = []
    for token in command:
        if token.startswith("-") or "=" in token:
            continue
        path = Path(token) if Path(token).is_absolute() else cwd / token
        try:
            if path.is_file() and path.suffix in (".sh", ".bash", ".py", ""):
                found.append(path)
        except OSError:
            continue
    return found


def command_layout(command: Sequence[str], cwd: Path) -> str | None:
    """``today``, ``legacy`` or None: the SkyRL layout the command runs, from its own tokens or the
    scripts it names (read up to 1 MiB each, comments skipped)."""
    layout = _layout_of(" ".join(command))
    if layout is not None:
        return layout
    for script in _scripts(command, cwd):
        try:
            with open(script, "rb") as fh:
                text = fh.read(_SCRIPT_BYTES).decode("utf-8", "replace")
        except OSError:
            continue
        layout = _layout_of(text)
        if layout is not None:
            return layout
    return None


def space_for_command(command: Sequence[str], cwd: Path) -> tuple[str, str]:
    """(built-in space, why) for a ``run`` without ``--space``."""
    layout = command_layout(command, cwd)
    if layout == "today":
        return TODAY_SPACE, "the command runs today's SkyRL (skyrl.train)"
    if layout == "legacy":
        return LEGACY_SPACE, "the command runs the legacy SkyRL (skyrl_train)"
    return DEFAULT_SPACE, "the default space"


def chosen_space(space: str | None, command: Sequence[str], cwd: Path) -> tuple[str, str | None]:
    """(the space a run loads, why it was picked; None when ``--space`` named it)."""
    if space:
        return space, None
    name, why = space_for_command(command, cwd)
    return name, f"space {name}: {why} (--space to choose another)"


def refusal_line(space: str, texts: Iterable[str]) -> str | None:
    """One line for a configuration refused by SkyRL, naming the key and the fix (the other
    layout's space when the refusal shows the command runs the other SkyRL), or None."""
    for text in texts:
        m = _DATACLASS_REFUSAL.search(text)
        if m:
            keys = m.group("keys")
            if space == LEGACY_SPACE:
                return (
                    f"the command runs today's SkyRL (skyrl.train): its {m.group('cls')} has no field {keys}; "
                    f"use --space {TODAY_SPACE}"
                )
            return f"Invalid fields {{{keys}}} for {m.group('cls')}: the command has no such key; fix the space, the script or --set"
        m = _PLUS_REFUSAL.search(text)
        if m:
            return f"today's SkyRL refuses the '+' prefix ({m.group('token')}): drop the '+'"
        m = _HYDRA_REFUSAL.search(text)
        if m:
            if space == TODAY_SPACE:
                return (
                    f"the command runs the legacy SkyRL (skyrl_train): Hydra cannot override '{m.group('key')}'; "
                    f"use --space {LEGACY_SPACE}"
                )
            return f"Could not override '{m.group('key')}': the command has no such key; fix the space, the script or --set"
    return None


LOG_PATH_KEYS = ("trainer.log_path",)
"""Keys naming a folder SkyRL creates and writes its infra logs to before anything else."""


def check_log_paths(argv: Sequence[str]) -> None:
    """One-line error, before any trial, when the command's ``trainer.log_path`` (its last value on
    the command line) cannot be created or written: SkyRL would fail at start-up every trial."""
    for key in LOG_PATH_KEYS:
        values = [a.split("=", 1)[1] for a in argv if a.startswith(key + "=")]
        if not values:
            continue
        path = Path(os.path.expanduser(values[-1].strip("'\"")))
        why = folder_problem(path)
        if why:
            raise NcclTuneError(
                f"{key}={values[-1]}: SkyRL writes its infra logs there and cannot ({why}); "
                "give a writable folder in the space's trial overrides (or the command)"
            )
