"""Starting a trial's command: its environment, a check that it can run, and the spawn itself.

The command starts in a new session (so its whole process group can be signalled at once) with
stdout and stderr merged onto one pipe (so the order of events is kept) and the trial's marker
``NCCL_TUNE_TRIAL=<study>/<number>`` in its environment, which every process it starts inherits.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from nccl_tune.errors import NcclTuneError
from nccl_tune.trial import MARKER_ENV

INTERPRETERS = frozenset({"bash", "sh", "zsh", "dash", "python", "python3"})
"""Commands whose first argument, unless an option, is a script file they run."""
PIPE_SIZE_BYTES = 1 << 20
"""Requested size of the output pipe: a large pipe lets a flooding command run ahead of the reader."""
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def build_env(overlay: Mapping[str, str | None], marker: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The trial's environment: ``base`` (the tuner's own by default), then ``overlay`` (a None
    value removes the variable), then the marker, which always wins."""
    env = dict(os.environ if base is None else base)
    for key, value in overlay.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    env[MARKER_ENV] = marker
    return env


def resolve_command(argv: Sequence[str], env: Mapping[str, str], cwd: Path | None = None) -> str:
    """The executable ``argv[0]`` names, found the way the trial will find it (the trial's PATH,
    relative paths from ``cwd``); raise ``NcclTuneError`` with a one-line fix if it cannot run,
    or if it is an interpreter (``bash``, ``python``) given a script file that does not exist."""
    if not argv:
        raise NcclTuneError("the trial command is empty: give it after `--`, e.g. `nccl-tune run -- bash train.sh`")
    if cwd is not None and not Path(cwd).is_dir():
        raise NcclTuneError(f"working directory {cwd} does not exist: create it or run from another directory")
    found = _executable(argv[0], env, cwd)
    if Path(argv[0]).name in INTERPRETERS and len(argv) > 1 and not argv[1].startswith("-"):
        script = Path(argv[1]) if os.path.isabs(argv[1]) or cwd is None else Path(cwd) / argv[1]
        if not script.exists():
            where = cwd if cwd is not None else Path.cwd()
            raise NcclTuneError(f"{argv[0]} cannot run {argv[1]!r}: no such file (from {where})")
    return found


def _executable(name: str, env: Mapping[str, str], cwd: Path | None) -> str:
    if os.sep in name:
        path = Path(name) if os.path.isabs(name) or cwd is None else Path(cwd) / name
        if not path.exists():
            raise NcclTuneError(f"command {name!r} not found ({path} does not exist): check the path")
        if path.is_dir() or not os.access(path, os.X_OK):
            raise NcclTuneError(
                f"command {name!r} is not executable: `chmod +x {path}` or run it through its interpreter (bash {name})"
            )
        return str(path)
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    if found is None:
        raise NcclTuneError(
            f"command {name!r} not found on the trial's PATH: install it, fix PATH, or give its full path"
        )
    return found


def tuner_alive(pid: int) -> bool:
    """True when ``pid`` is a live nccl-tune process other than this one (a tuner running a study)."""
    if pid == os.getpid():
        return False
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and "nccl" in " ".join(proc.cmdline())
    except (psutil.Error, OSError):
        return False


def spawn(argv: Sequence[str], env: Mapping[str, str], cwd: Path | None = None) -> subprocess.Popen:
    """Start ``argv`` in a new session, stdin from /dev/null, stdout+stderr on one binary pipe."""
    proc = subprocess.Popen(
        list(argv),
        env=dict(env),
        cwd=str(cwd) if cwd is not None else None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        bufsize=0,
        close_fds=True,
    )
    assert proc.stdout is not None
    try:
        fcntl.fcntl(proc.stdout.fileno(), _F_SETPIPE_SZ, PIPE_SIZE_BYTES)
    except OSError:  # pipe-max-size lower than asked: the default pipe still works
        pass
    return proc
