"""``COMMAND --help``: what a training command says about its options, without running it.

The command runs with ``--help`` appended (or as given, for a command that prints its config:
``printed``), in its own session with a marker of its own, stdin from /dev/null, and is torn down
like a trial (group, then every marked process) if it is still running after the timeout: a
program that ignores ``--help`` and starts training is stopped, not waited for.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from nccl_tune.errors import NcclTuneError
from nccl_tune.launchers.process import build_env, resolve_command, spawn
from nccl_tune.launchers.teardown import terminate

MAX_HELP_BYTES = 1 << 20
GRACE_S = 2.0


def help_text(command: Sequence[str], timeout_s: float = 30.0, cwd: Path | None = None) -> str:
    """The output (stdout and stderr) of ``command --help``; ``NcclTuneError`` when it cannot be
    started, or prints nothing before ``timeout_s`` seconds."""
    hint = "does the command pass --help to its program (argparse or Hydra)?"
    return printed([*command, "--help"], timeout_s, cwd, hint)


def printed(argv: Sequence[str], timeout_s: float, cwd: Path | None = None, hint: str = "") -> str:
    """The output (stdout and stderr) of ``argv``, a command that prints and exits (a help, a
    config), run and torn down as the module docstring says; ``hint`` ends the error of a command
    that printed nothing in time."""
    argv = list(argv)
    marker = f"nccl-tune-help/{os.getpid()}"
    env = build_env({"COLUMNS": "200"}, marker)
    resolve_command(argv, env, cwd)
    proc = spawn(argv, env, cwd)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        terminate(marker, GRACE_S, pgid=proc.pid, leader=proc)
        out, _ = proc.communicate()
        if not out.strip():
            raise NcclTuneError(
                f"`{' '.join(argv)}` printed nothing in {timeout_s:g}s and was stopped" + (f"; {hint}" if hint else "")
            ) from None
    finally:
        if proc.poll() is None:
            terminate(marker, GRACE_S, pgid=proc.pid, leader=proc)
    return out[:MAX_HELP_BYTES].decode("utf-8", "replace")
