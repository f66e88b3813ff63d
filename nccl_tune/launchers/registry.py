"""Launchers by ``--launcher`` name: which exist, and building one for a study."""

from __future__ import annotations

from nccl_tune.launchers.base import Launcher

LAUNCHERS = ("local",)
"""Names ``make_launcher`` builds."""
_PLANNED = ("ray",)


def launcher_problem(name: str) -> str | None:
    """One line when ``--launcher name`` cannot be used (None when it can)."""
    if name in LAUNCHERS:
        return None
    if name in _PLANNED:
        return f"--launcher {name} is not available yet; use --launcher local"
    return f"--launcher {name!r} is unknown; use --launcher {' or '.join(LAUNCHERS)}"


def make_launcher(name: str) -> Launcher:
    """The launcher named ``name`` (checked by ``launcher_problem`` first)."""
    if name == "local":
        from nccl_tune.launchers.local import LocalLauncher

        return LocalLauncher()
    raise ValueError(f"no launcher named {name!r}")
