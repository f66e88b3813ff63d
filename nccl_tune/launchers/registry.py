"""Launchers by ``--launcher`` name: which exist, and building one for a study."""

from __future__ import annotations

from nccl_tune.launchers.base import Launcher

LAUNCHERS = ("local", "ray")
"""Names ``make_launcher`` builds."""
_PLANNED: tuple[str, ...] = ()


def launcher_problem(name: str) -> str | None:
    """One line when ``--launcher name`` cannot be used (None when it can)."""
    if name in LAUNCHERS:
        return None
    if name in _PLANNED:
        return f"--launcher {name} is not available yet; use --launcher local"
    return f"--launcher {name!r} is unknown; use --launcher {' or '.join(LAUNCHERS)}"


def parallel_problem(name: str, parallel: int) -> str | None:
    """One line when ``--parallel parallel`` cannot be used with ``--launcher name``: one node
    runs one trial, so only the ray launcher (one trial per node) runs several at once."""
    if parallel > 1 and name != "ray":
        return f"--parallel {parallel} needs --launcher ray (one node runs one trial at a time); use --parallel 1"
    return None


def make_launcher(name: str, ray_address: str | None = None, gate_timeout_s: float | None = None) -> Launcher:
    """The launcher named ``name`` (checked by ``launcher_problem`` first); ``gate_timeout_s`` is how long
    the gate before a trial waits for a clean node (None: the launcher's default)."""
    kw = {} if gate_timeout_s is None else {"gate_timeout_s": gate_timeout_s}
    if name == "local":
        from nccl_tune.launchers.local import LocalLauncher

        return LocalLauncher(**kw)
    if name == "ray":
        from nccl_tune.launchers.ray_launcher import RayLauncher

        return RayLauncher(ray_address, **kw)
    raise ValueError(f"no launcher named {name!r}")
