"""A trial's own Ray: a command that calls ``ray.init()`` with no address starts a private Ray
instead of joining a cluster already running on its node.

``ray.init()`` with no address takes ``RAY_ADDRESS``, then the address ``ray start`` recorded under
Ray's temp dir (``ray_current_cluster``), then starts a new local instance. ``RAY_ADDRESS=local``
selects the last; ``RAY_TMPDIR`` moves the temp dir (sessions, unix sockets, the address file) to
a folder of the trial's own, kept short because a unix socket path holds at most 107 bytes.
Variables Ray sets in its own workers (job id, raylet pid) are removed, so a trial started from a
Ray actor does not look like a Ray worker.
"""

from __future__ import annotations

import shutil
import tempfile

RAY_WORKER_VARS = ("RAY_JOB_ID", "RAY_RAYLET_PID", "RAY_CLIENT_MODE", "RAY_LD_PRELOAD_ON_WORKERS", "RAY_NODE_ID")
"""Set by Ray in its worker processes; never meant for a process the worker starts."""
TEMP_PREFIX = "ntr"
TEMP_ROOT = "/tmp"
"""Short on purpose: Ray puts ``ray/session_<date>_<pid>/sockets/plasma_store`` under it."""


def make_private_temp() -> str:
    """A new, short, empty folder for one trial's Ray (``/tmp/ntrXXXXXXXX``)."""
    return tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=TEMP_ROOT)


def private_ray_env(temp_dir: str) -> dict[str, str | None]:
    """Env overlay (None removes a variable) giving the trial's ``ray.init()`` a private Ray
    whose files live in ``temp_dir``."""
    overlay: dict[str, str | None] = {name: None for name in RAY_WORKER_VARS}
    overlay["RAY_ADDRESS"] = "local"
    overlay["RAY_TMPDIR"] = temp_dir
    return overlay


def remove_private_temp(temp_dir: str) -> None:
    """Delete a trial's Ray folder (after its processes are gone)."""
    shutil.rmtree(temp_dir, ignore_errors=True)
