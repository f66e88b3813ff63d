"""The fingerprint of a run: the hardware and software a study ran on, read when it runs.

GPU model, count and memory, driver and CUDA versions come from NVML (``nccl_tune.gpu``; the fake
NVML in tests). torch and NCCL versions are read from package metadata: of the virtual
environment the command's own interpreter belongs to when the command starts one directly
(``/path/venv/bin/python -m trainer ...``), else of the environment nccl-tune runs in (NCCL as
the ``nvidia-nccl-cu*`` wheel torch depends on). The trainer is identified by the git commit of
the checkout holding its script (or the working folder) and, for ``python -m PACKAGE``, by that
package's version. Nothing here starts a process: git's files are read directly.
"""

from __future__ import annotations

import datetime as dt
import platform
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from importlib import metadata
from pathlib import Path
from typing import Any

from nccl_tune.gpu import GpuProbe, open_probe

NCCL_WHEELS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11")
_LAUNCHERS = re.compile(r"(python[\d.]*|bash|sh|zsh|dash|env|uv|torchrun|accelerate|deepspeed)")


@dataclass(frozen=True)
class Fingerprint:
    host: str
    gpu_model: str | None
    gpu_count: int
    gpu_memory_gib: float | None
    driver_version: str | None
    cuda_version: str | None
    """The CUDA version the driver supports (NVML)."""
    torch_version: str | None
    nccl_version: str | None
    python_version: str
    trainer_package: str | None
    trainer_version: str | None
    trainer_commit: str | None
    """Full hash of the trainer checkout's HEAD."""
    trainer_branch: str | None
    nccl_tune_version: str
    recorded_at: str
    """ISO time (UTC) of the probe."""

    @property
    def hardware(self) -> str:
        """``8x NVIDIA H100 80GB HBM3`` (or ``no GPU``): nights are compared on the same hardware."""
        return f"{self.gpu_count}x {self.gpu_model}" if self.gpu_count and self.gpu_model else "no GPU"

    @property
    def trainer(self) -> str | None:
        parts = []
        if self.trainer_package:
            parts.append(f"{self.trainer_package} {self.trainer_version or '?'}")
        if self.trainer_commit:
            branch = f" ({self.trainer_branch})" if self.trainer_branch else ""
            parts.append(f"git {self.trainer_commit[:12]}{branch}")
        return ", ".join(parts) or None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fingerprint:
        names = {f.name for f in fields(cls)}
        return cls(**{k: data.get(k) for k in names})

    def summary(self) -> str:
        """One line, e.g. ``8x NVIDIA H100 80GB HBM3, driver 550.54.15, CUDA 12.4, torch 2.13.0, ...``."""
        items = [self.hardware] + [f"{label} {value}" for label, value in self.labelled() if value and label != "GPUs"]
        return ", ".join(items)

    def labelled(self) -> list[tuple[str, str | None]]:
        """The facts that make nights differ, with the labels ``changes`` uses."""
        return [
            ("GPUs", self.hardware),
            ("driver", self.driver_version),
            ("CUDA", self.cuda_version),
            ("torch", self.torch_version),
            ("NCCL", self.nccl_version),
            ("trainer", self.trainer),
            ("host", self.host),
        ]


def changes(before: Fingerprint | None, after: Fingerprint | None) -> tuple[str, ...]:
    """What differs between two fingerprints, e.g. ``("driver 550.54.15 -> 555.42.02",)``."""
    if before is None or after is None:
        return ()
    old = dict(before.labelled())
    return tuple(
        f"{label} {old[label] or '?'} -> {value or '?'}" for label, value in after.labelled() if old[label] != value
    )


# -- the trainer's checkout ----------------------------------------------------------------------
def _git_dir(start: Path) -> Path | None:
    """The git directory of the checkout holding ``start`` (worktrees and submodules included)."""
    for d in [start, *start.parents]:
        g = d / ".git"
        if g.is_dir():
            return g
        if g.is_file():
            text = g.read_text(errors="replace").strip()
            if text.startswith("gitdir:"):
                p = Path(text[len("gitdir:") :].strip())
                return p if p.is_absolute() else (d / p).resolve()
    return None


def _resolve_ref(git_dir: Path, ref: str) -> str | None:
    common = git_dir
    if (git_dir / "commondir").is_file():
        common = (git_dir / (git_dir / "commondir").read_text().strip()).resolve()
    for base in (git_dir, common):
        loose = base / ref
        if loose.is_file():
            return loose.read_text().strip() or None
    packed = common / "packed-refs"
    if packed.is_file():
        for line in packed.read_text(errors="replace").splitlines():
            sha, _, name = line.partition(" ")
            if name.strip() == ref and not line.startswith(("#", "^")):
                return sha
    return None


def git_head(start: Path) -> tuple[str | None, str | None]:
    """(commit, branch) of the checkout holding ``start``, read from git's files; Nones outside one."""
    try:
        git_dir = _git_dir(start.resolve())
        if git_dir is None:
            return None, None
        head = (git_dir / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head or None, None
        ref = head[len("ref:") :].strip()
        return _resolve_ref(git_dir, ref), ref.removeprefix("refs/heads/")
    except OSError:
        return None, None


# -- package versions ----------------------------------------------------------------------------
def _site_packages(command: Sequence[str]) -> list[str] | None:
    """The site-packages of the virtual environment the command's interpreter belongs to, if the
    command starts a Python interpreter of a virtual environment directly."""
    if not command or not Path(command[0]).name.startswith("python"):
        return None
    exe = Path(command[0])
    root = exe.parent.parent if exe.is_absolute() or "/" in command[0] else None
    if root is None or not (root / "pyvenv.cfg").is_file():
        return None
    found = sorted(str(p) for p in root.glob("lib/python*/site-packages"))
    return found or None


def _version(dist: str, paths: list[str] | None) -> str | None:
    try:
        if paths is None:
            return metadata.version(dist)
        for d in metadata.distributions(name=dist, path=paths):
            return d.version
    except metadata.PackageNotFoundError:
        return None
    return None


def _module_package(command: Sequence[str], paths: list[str] | None) -> tuple[str | None, str | None]:
    """(distribution, version) of the package run with ``-m PACKAGE.module``."""
    args = list(command)
    if "-m" not in args or args.index("-m") + 1 >= len(args):
        return None, None
    top = args[args.index("-m") + 1].split(".")[0]
    dists = metadata.packages_distributions() if paths is None else _dists_in(paths)
    for dist in dists.get(top, []):
        return dist, _version(dist, paths)
    return top, None


def _dists_in(paths: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for d in metadata.distributions(path=paths):
        top = (d.read_text("top_level.txt") or "").split() or [d.metadata["Name"].replace("-", "_")]
        for name in top:
            out.setdefault(name, []).append(d.metadata["Name"])
    return out


def _script_dir(command: Sequence[str], cwd: Path) -> Path:
    """The folder of the command's script (the first argument that is a file), else ``cwd``. An
    argument that cannot be a path (``python -c`` code longer than a file name may be) is skipped."""
    for arg in list(command)[:3]:
        p = Path(arg) if Path(arg).is_absolute() else cwd / arg
        try:
            is_script = p.is_file() and not _LAUNCHERS.fullmatch(p.name)
        except OSError:
            continue
        if is_script:
            return p.parent
    return cwd


def probe_fingerprint(command: Sequence[str], cwd: Path | None = None, probe: GpuProbe | None = None) -> Fingerprint:
    """The fingerprint of this node and of ``command`` (run from ``cwd``), now."""
    from nccl_tune import __version__

    cwd = cwd or Path.cwd()
    own = probe is None
    probe = probe or open_probe()
    try:
        devices, system = probe.devices(), probe.system()
    finally:
        if own:
            probe.close()
    paths = _site_packages(command)
    package, package_version = _module_package(command, paths)
    commit, branch = git_head(_script_dir(command, cwd))
    return Fingerprint(
        host=platform.node(),
        gpu_model=devices[0].name if devices else None,
        gpu_count=len(devices),
        gpu_memory_gib=round(devices[0].total_gib, 2) if devices else None,
        driver_version=system.driver_version,
        cuda_version=system.cuda_driver_version,
        torch_version=_version("torch", paths),
        nccl_version=next((v for v in (_version(w, paths) for w in NCCL_WHEELS) if v), None),
        python_version=platform.python_version()
        if paths is None
        else Path(paths[0]).parent.name.removeprefix("python"),
        trainer_package=package,
        trainer_version=package_version,
        trainer_commit=commit,
        trainer_branch=branch,
        nccl_tune_version=__version__,
        recorded_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    )
