"""A trial's own Ray: a command that calls ``ray.init()`` with no address starts a private Ray
instead of joining a cluster already running on its node.

``ray.init()`` with no address takes ``RAY_ADDRESS``, then the address ``ray start`` recorded under
Ray's temp dir (``ray_current_cluster``; the temp dir is ``RAY_TMPDIR``, else ``TMPDIR``, else
``/tmp``), then starts a new local instance. Only a new instance's workers inherit the trial's
environment (its NCCL variables); a cluster started earlier keeps its own. ``RAY_ADDRESS=local``
selects the new instance; ``RAY_TMPDIR`` moves the temp dir (sessions, unix sockets, the address
file) to a folder of the trial's own: in the trial folder when Ray's socket paths fit there (a unix
socket path holds at most 107 bytes), else a short folder under ``/tmp``. Variables Ray sets in its
own workers (job id, raylet pid) are removed, so a trial started from a Ray actor does not look
like a Ray worker.

A user who sets ``RAY_ADDRESS`` (other than ``local``) for a local trial means an existing cluster
(SkyRL's multi-node scripts run on one): the trial then uses it, its environment does not reach
that cluster's workers, and the tuner refuses NCCL parameters (``refuse_nccl_params``).
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from nccl_tune.errors import NcclTuneError

RAY_WORKER_VARS = ("RAY_JOB_ID", "RAY_RAYLET_PID", "RAY_CLIENT_MODE", "RAY_LD_PRELOAD_ON_WORKERS", "RAY_NODE_ID")
"""Set by Ray in its worker processes; never meant for a process the worker starts."""
TEMP_PREFIX = "ntr"
TEMP_ROOT = "/tmp"
"""Short on purpose: Ray puts ``ray/session_<date>_<pid>/sockets/plasma_store`` under it."""
SOCKET_PATH_MAX = 107
"""Longest unix socket path Linux accepts (``sun_path`` is 108 bytes with its NUL)."""
SESSION_SOCKET_TAIL = len("/ray/session_2026-08-22_10-11-12_123456_4194304/sockets/plasma_store")
"""What Ray appends to its temp dir for its longest socket (a date, a time, microseconds and a PID
of up to 7 digits)."""
TRIAL_SUBDIR = "ray"


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


def wants_existing_cluster(env: Mapping[str, str | None]) -> str | None:
    """The user's ``RAY_ADDRESS`` when it names an existing cluster (not ``local``), else None."""
    address = (env.get("RAY_ADDRESS") or "").strip()
    return address if address and address != "local" else None


def temp_dir_for(trial_dir: Path, marker: str) -> Path:
    """A local trial's Ray temp dir: inside its folder when Ray's socket paths fit, else a short
    folder under ``/tmp`` named after the trial's marker."""
    inside = Path(trial_dir).resolve() / TRIAL_SUBDIR
    if len(str(inside).encode()) + SESSION_SOCKET_TAIL <= SOCKET_PATH_MAX:
        return inside
    return Path(TEMP_ROOT) / (TEMP_PREFIX + "-" + hashlib.sha1(marker.encode()).hexdigest()[:12])


def trial_ray_env(env: Mapping[str, str | None], trial_dir: Path, marker: str) -> dict[str, str | None]:
    """A local trial's Ray overlay (``env``: the tuner's environment with the trial's overlay): a
    private instance in the trial's temp dir, or nothing when the user points at an existing cluster."""
    if wants_existing_cluster(env):
        return {}
    return private_ray_env(str(temp_dir_for(trial_dir, marker)))


def prepare(overlay: Mapping[str, str | None]) -> None:
    """Create the trial's Ray temp dir (``OSError`` when it cannot be)."""
    tmp = overlay.get("RAY_TMPDIR")
    if tmp and overlay.get("RAY_ADDRESS") == "local":
        Path(tmp).mkdir(parents=True, exist_ok=True)


def cleanup(overlay: Mapping[str, str | None], trial_dir: Path) -> None:
    """Remove the trial's Ray temp dir when it is the short one outside the trial folder (the one
    inside keeps Ray's logs of the trial)."""
    tmp = overlay.get("RAY_TMPDIR")
    if tmp and overlay.get("RAY_ADDRESS") == "local" and Path(trial_dir).resolve() not in Path(tmp).parents:
        if Path(tmp).name.startswith(TEMP_PREFIX):
            remove_private_temp(tmp)


def refuse_nccl_params(env: Mapping[str, str | None], names: Iterable[str]) -> None:
    """One-line error when NCCL parameters are to be tuned on an existing Ray cluster."""
    address = wants_existing_cluster(env)
    names = list(names)
    if address and names:
        raise NcclTuneError(
            f"RAY_ADDRESS={address}: trials run on that existing Ray cluster, whose workers keep the cluster's "
            f"environment, so {', '.join(names)} would never reach NCCL; unset RAY_ADDRESS to give each trial a "
            "private Ray on this node, or hold them with --set NAME=unset"
        )
