"""``COMMAND --help``: what a training command says about its options, without running it.

The command runs with ``--help`` appended, in its own session with a marker of its own, stdin from
/dev/null, and is torn down like a trial (group, then every marked process) if it is still running
after the timeout: a program that ignores ``--help`` and starts training is stopped, not waited for.
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
    argv = [*command, "--help"]
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
                f"`{' '.join(argv)}` printed nothing in {timeout_s:g}s and was stopped; does the command pass --help to "
                "its program (argparse or Hydra)?"
            ) from None
    finally:
        if proc.poll() is None:
            terminate(marker, GRACE_S, pgid=proc.pid, leader=proc)
    return out[:MAX_HELP_BYTES].decode("utf-8", "replace")
