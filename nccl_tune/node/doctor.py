"""``nccl-tune doctor``: is this node fit to tune on?

Checks, each ``pass``, ``warn`` or ``fail`` with a fix: GPUs visible through NVML (count, model,
memory), processes already holding GPU memory, uncorrectable ECC errors, NVLink links down, the
NCCL / PyTorch variables set in the environment against the names and values their readers accept,
``ulimit -n``, ``/dev/shm``, and whether a local Ray cluster is running. Without a GPU it says so and
checks the rest. GPU facts come through ``nccl_tune.gpu.GpuProbe`` (NVML, or the fake in tests).
"""

from __future__ import annotations

import os
import resource
import shutil
import socket
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.markup import escape

from nccl_tune.gpu import GpuProbe, open_probe
from nccl_tune.node import env_catalog as E
from nccl_tune.node.nccl_clamps import clamps

NOFILE_RECOMMENDED = 65536
NOFILE_MINIMUM = 1024
SHM_RECOMMENDED_GIB = 1.0
GPU_IDLE_GIB = 1.0
"""GPU memory in use above this, by no listed process, is reported (another container, a leaked context)."""
GIB = float(1 << 30)


@dataclass(frozen=True)
class Check:
    """One check's outcome."""

    name: str
    status: str
    """``pass``, ``warn`` or ``fail``."""
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class DoctorReport:
    """All checks, in the order they ran."""

    checks: tuple[Check, ...]

    @property
    def exit_code(self) -> int:
        """1 when any check failed, else 0."""
        return 1 if any(c.status == "fail" for c in self.checks) else 0

    def to_json(self) -> dict[str, Any]:
        """``{"ok": bool, "exit_code": int, "checks": [{name, status, detail, fix}, ...]}``."""
        return {
            "ok": self.exit_code == 0,
            "exit_code": self.exit_code,
            "checks": [asdict(c) for c in self.checks],
        }


# --- GPUs ---------------------------------------------------------------------------------------


def _proc_desc(pid: int) -> str:
    try:
        p = psutil.Process(pid)
        return f"pid {pid} ({p.name()})"
    except psutil.NoSuchProcess:
        return f"pid {pid} (exited)"
    except psutil.AccessDenied:
        return f"pid {pid}"


def _gpu_checks(probe: GpuProbe) -> Iterator[Check]:
    if not probe.available:
        yield Check(
            "gpu.visible",
            "warn",
            f"no GPU visible through NVML ({probe.reason or 'unknown reason'}); the other checks still ran",
            "run on a GPU node with the NVIDIA driver loaded (`nvidia-smi`); the synthetic twin needs no GPU",
        )
        return
    devices = probe.devices()
    models = sorted({d.name for d in devices})
    sizes = sorted({round(d.total_gib, 1) for d in devices})
    desc = ", ".join(f"{sum(d.name == m for d in devices)} x {m}" for m in models)
    yield Check("gpu.visible", "pass", f"{len(devices)} GPU(s): {desc}; {'/'.join(f'{s:g}' for s in sizes)} GiB each")
    if len(models) > 1 or len(sizes) > 1:
        yield Check(
            "gpu.uniform",
            "warn",
            f"mixed GPUs ({desc}): the slowest or smallest sets the pace and the memory wall",
            "tune on a node with identical GPUs, or restrict CUDA_VISIBLE_DEVICES to one kind",
        )

    holders: dict[int, list[str]] = {}
    for proc in probe.processes():
        used = f"{proc.used_gib:.1f} GiB" if proc.used_gib is not None else "memory unknown"
        holders.setdefault(proc.gpu_index, []).append(f"{_proc_desc(proc.pid)} {used}")
    unlisted = []
    for u in probe.usage():
        if u.index not in holders and u.used_gib > GPU_IDLE_GIB:
            unlisted.append(f"GPU {u.index}: {u.used_gib:.1f} GiB in use by no listed process")
    if holders or unlisted:
        parts = [f"GPU {i}: {'; '.join(h)}" for i, h in sorted(holders.items())] + unlisted
        pids = sorted({p.pid for p in probe.processes()})
        fix = (
            f"stop them (`kill {' '.join(map(str, pids))}`) before a study"
            if pids
            else "find the holder (`nvidia-smi`, another container) and stop it"
        )
        yield Check(
            "gpu.memory",
            "warn",
            "GPU memory already held: " + " | ".join(parts),
            fix + "; otherwise trials hit an early OOM and the GPU gate waits on them",
        )
    else:
        peak = max((u.used_gib for u in probe.usage()), default=0.0)
        yield Check("gpu.memory", "pass", f"no process holds GPU memory (at most {peak:.1f} GiB in use)")

    health = probe.health()
    vol = [(h.index, h.ecc_uncorrected_volatile) for h in health if h.ecc_uncorrected_volatile]
    agg = [(h.index, h.ecc_uncorrected_aggregate) for h in health if h.ecc_uncorrected_aggregate]
    off = [h.index for h in health if h.ecc_enabled is False]
    if vol:
        yield Check(
            "gpu.ecc",
            "fail",
            "uncorrectable ECC errors since the driver loaded: " + ", ".join(f"GPU {i}: {n}" for i, n in vol),
            "drain the node and reset or replace those GPUs (`nvidia-smi -q -d ECC`); results there are not trustworthy",
        )
    elif agg:
        yield Check(
            "gpu.ecc",
            "warn",
            "uncorrectable ECC errors in the GPUs' lifetime: " + ", ".join(f"GPU {i}: {n}" for i, n in agg),
            "check retired pages and row remapping (`nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT`)",
        )
    elif all(h.ecc_enabled is None for h in health):
        yield Check("gpu.ecc", "pass", "ECC not reported by NVML on these GPUs")
    else:
        extra = f"; ECC disabled on GPU {', '.join(map(str, off))}" if off else ""
        yield Check(
            "gpu.ecc",
            "warn" if off else "pass",
            f"no uncorrectable ECC errors{extra}",
            "enable ECC (`nvidia-smi -e 1`, then reboot)" if off else "",
        )

    links = [(h.index, h.nvlink_active, h.nvlink_total) for h in health if h.nvlink_total]
    down = [(i, a, t) for i, a, t in links if (a or 0) < t]
    if down:
        yield Check(
            "gpu.nvlink",
            "fail",
            "NVLink links down: " + ", ".join(f"GPU {i}: {a}/{t} up" for i, a, t in down),
            "reset the GPUs or drain the node (`nvidia-smi nvlink -s`); NCCL falls back to slower paths and "
            "tuning results would not carry over",
        )
    elif links:
        yield Check("gpu.nvlink", "pass", f"all NVLink links up ({links[0][2]} per GPU)")
    else:
        yield Check("gpu.nvlink", "pass", "no NVLink reported (PCIe-only GPUs)")


# --- environment ----------------------------------------------------------------------------------


def _env_checks(env: Mapping[str, str]) -> Iterator[Check]:
    names = sorted(n for n in env if E.relevant(n))
    flagged = 0
    for name in names:
        value = env[name]
        if name in E.NOBODY_READS:
            detail, fix = E.NOBODY_READS[name]
            flagged += 1
            yield Check(f"env.{name}", "warn", f"{name}={value}: {detail}", fix)
            continue
        if name in E.RENAMED:
            new = E.RENAMED[name]
            problem = E.check_value(name, value)
            clash = f"; {new}={env[new]} is also set and wins" if new in env and env[new] != value else ""
            flagged += 1
            status = "fail" if problem and problem.severity == "fail" else "warn"
            detail = f"{name} is the deprecated spelling of {new}{clash}"
            if problem:
                detail += f"; {problem.detail}"
            yield Check(f"env.{name}", status, detail, f"rename it: export {new}={value} and unset {name}")
            continue
        if name in E.NCCL_RETIRED:
            new, how = E.NCCL_RETIRED[name]
            flagged += 1
            fix = f"use {new} instead" if new else f"unset {name}"
            yield Check(f"env.{name}", "warn", f"{name} was {how} in NCCL: current releases ignore it", fix)
            continue
        if name in E.TORCH_DEPRECATED_NOOP:
            flagged += 1
            yield Check(f"env.{name}", "warn", f"{name}: {E.TORCH_DEPRECATED_NOOP[name]}", f"unset {name}")
            continue
        if name not in E.known_names() and name not in E.VALUE_CHECKS and name not in E.NOT_NCCL_LIBRARY:
            guess = E.close_match(name)
            reader = "NCCL" if name.startswith("NCCL_") else "PyTorch"
            flagged += 1
            yield Check(
                f"env.{name}",
                "warn",
                f"{name} is not a variable {reader} reads" + (f" (did you mean {guess}?)" if guess else ""),
                f"rename it to {guess}" if guess else f"unset {name}",
            )
            continue
        problem = E.check_value(name, value)
        if problem:
            flagged += 1
            yield Check(f"env.{name}", problem.severity, problem.detail, problem.fix)
    yield from _env_consistency(env)
    if not flagged:
        shown = ", ".join(names) if names else "none set"
        yield Check("env.nccl", "pass", f"NCCL/PyTorch variables: {shown}")


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on", "y"}


def _env_consistency(env: Mapping[str, str]) -> Iterator[Check]:
    size = env.get("TORCH_FR_BUFFER_SIZE", env.get("TORCH_NCCL_TRACE_BUFFER_SIZE", ""))
    if _truthy(env.get("TORCH_NCCL_DUMP_ON_TIMEOUT")) and not (size.strip().isdigit() and int(size) > 0):
        yield Check(
            "env.flight_recorder",
            "warn",
            "TORCH_NCCL_DUMP_ON_TIMEOUT=1 but TORCH_FR_BUFFER_SIZE is not set: nothing is recorded, no dump is written",
            "export TORCH_FR_BUFFER_SIZE=2000",
        )
    dump = env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    if dump and not Path(dump).parent.is_dir():
        yield Check(
            "env.flight_recorder_dir",
            "warn",
            f"the Flight Recorder dump prefix {dump} points into a missing directory",
            f"mkdir -p {Path(dump).parent}",
        )
    for clamp in clamps(env):
        yield Check(
            f"env.{clamp.name}",
            "warn",
            f"{clamp.describe()}: NCCL warns and runs with {clamp.runs_as}",
            f"set {clamp.name}={clamp.runs_as}",
        )
    ifname = env.get("NCCL_SOCKET_IFNAME")
    if ifname:
        names = sorted(psutil.net_if_addrs())
        hits = E.interfaces_matching(ifname, names)
        if not hits:
            yield Check(
                "env.NCCL_SOCKET_IFNAME",
                "fail",
                f"NCCL_SOCKET_IFNAME={ifname} matches no interface here ({', '.join(names)}): NCCL cannot bootstrap",
                "set it to an existing interface prefix (`ip -br addr`) or unset it",
            )


# --- host -------------------------------------------------------------------------------------------


def _nofile_check() -> Check:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    shown = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
    if soft != resource.RLIM_INFINITY and soft < NOFILE_MINIMUM:
        return Check(
            "limits.nofile",
            "fail",
            f"ulimit -n is {shown}: Ray and NCCL run out of file descriptors",
            f"ulimit -n {NOFILE_RECOMMENDED} (raise the hard limit in /etc/security/limits.conf if needed)",
        )
    if soft != resource.RLIM_INFINITY and soft < NOFILE_RECOMMENDED:
        if hard != resource.RLIM_INFINITY and hard < NOFILE_RECOMMENDED:
            fix = (
                f"raise the hard limit to {NOFILE_RECOMMENDED} (/etc/security/limits.conf, or docker --ulimit "
                f"nofile={NOFILE_RECOMMENDED}:{NOFILE_RECOMMENDED}), then ulimit -n {NOFILE_RECOMMENDED}"
            )
        else:
            fix = f"ulimit -n {NOFILE_RECOMMENDED}"
        return Check(
            "limits.nofile",
            "warn",
            f"ulimit -n is {shown} (hard {hard}); Ray recommends at least {NOFILE_RECOMMENDED}",
            fix,
        )
    return Check("limits.nofile", "pass", f"ulimit -n is {shown}")


def _shm_check(path: str = "/dev/shm") -> Check:
    try:
        total = shutil.disk_usage(path).total / GIB
    except OSError:
        return Check(
            "host.shm",
            "warn",
            f"{path} is missing: NCCL's shared-memory transport cannot work",
            "mount a tmpfs on /dev/shm, or set NCCL_SHM_DISABLE=1",
        )
    if total < SHM_RECOMMENDED_GIB:
        return Check(
            "host.shm",
            "warn",
            f"{path} is {total * 1024:.0f} MiB: NCCL's shared-memory segments and Ray's object store need more",
            "run the container with --shm-size=16g or --ipc=host (or set NCCL_SHM_DISABLE=1, slower)",
        )
    return Check("host.shm", "pass", f"{path} is {total:.1f} GiB")


def _ray_temp_dir(env: Mapping[str, str]) -> Path:
    base = env.get("RAY_TMPDIR") or env.get("TMPDIR") or "/tmp"
    return Path(base) / "ray"


def _reachable(address: str, timeout_s: float = 0.5) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


_SWALLOW = (
    "a command that calls ray.init() without an address joins it, and its Ray workers keep that cluster's "
    "environment: NCCL variables set for the run never reach them"
)


def _ray_check(env: Mapping[str, str]) -> Check:
    """A Ray cluster that would swallow a run's variables: ``RAY_ADDRESS``, a local Ray head (its
    ``gcs_server`` process, not a zombie one whose parent never reaped it) or the address file ``ray
    start`` leaves; no Ray import, no cluster started."""
    gcs = [
        p.info["pid"]
        for p in psutil.process_iter(["name", "pid", "status"])
        if p.info.get("name") == "gcs_server" and p.info.get("status") != psutil.STATUS_ZOMBIE  # a dead head
    ]
    address_file = _ray_temp_dir(env) / "ray_current_cluster"
    address = None
    try:
        address = address_file.read_text().strip() or None
    except OSError:
        pass
    ray_address = (env.get("RAY_ADDRESS") or "").strip()
    if ray_address and ray_address != "local":
        answers = ray_address == "auto" or _reachable(ray_address.split("://")[-1])
        if not answers:
            return Check(
                "ray", "warn", f"RAY_ADDRESS={ray_address} does not answer", "start the cluster or unset RAY_ADDRESS"
            )
        return Check(
            "ray",
            "warn",
            f"RAY_ADDRESS={ray_address}: trials run on that cluster, and {_SWALLOW}; nccl-tune refuses to "
            "tune NCCL variables there",
            "unset RAY_ADDRESS to give each trial a private Ray on this node (multi-node runs: hold the NCCL "
            "parameters with --set NAME=unset)",
        )
    running = bool(gcs) or (address is not None and _reachable(address))
    if running:
        where = f" at {address}" if address else ""
        pids = f" (gcs_server pid {', '.join(map(str, gcs))})" if gcs else f" (from {address_file})"
        return Check(
            "ray",
            "warn",
            f"a Ray cluster is running{where}{pids}: {_SWALLOW}; nccl-tune's trials each start a private Ray "
            "(RAY_ADDRESS=local, their own RAY_TMPDIR) and do not join it, runs outside nccl-tune do",
            "`ray stop` if it is left over (its workers may also hold GPU memory)",
        )
    if address:
        return Check(
            "ray",
            "warn",
            f"{address_file} names {address} but no Ray is running there (a stale file)",
            f"`ray stop --force` or delete {address_file}",
        )
    return Check("ray", "pass", "no local Ray cluster running (each trial starts a private one if it needs one)")


# --- entry points -----------------------------------------------------------------------------------


def run_doctor(env: Mapping[str, str] | None = None, probe: GpuProbe | None = None) -> DoctorReport:
    """Run every check; ``env`` defaults to the process environment, ``probe`` to ``open_probe()``."""
    env = dict(os.environ if env is None else env)
    own_probe = probe is None
    probe = open_probe() if probe is None else probe
    try:
        checks = list(_gpu_checks(probe))
    finally:
        if own_probe:
            probe.close()
    checks += list(_env_checks(env))
    checks.append(_nofile_check())
    checks.append(_shm_check())
    checks.append(_ray_check(env))
    return DoctorReport(tuple(checks))


_MARK = {"pass": "[green]pass[/]", "warn": "[yellow]warn[/]", "fail": "[bold red]FAIL[/]"}


def print_doctor(report: DoctorReport, console: Console) -> None:
    """One line per check (status, name, what was found), its fix below it, then a summary line."""
    width = max((len(c.name) for c in report.checks), default=0)
    for c in report.checks:
        console.print(
            f"{_MARK[c.status]}  {escape(c.name):<{width}}  {escape(c.detail)}", highlight=False, soft_wrap=True
        )
        if c.fix and c.status != "pass":
            console.print(f"{'':6}{'':<{width}}  [cyan]fix:[/] {escape(c.fix)}", highlight=False, soft_wrap=True)
    fails = sum(c.status == "fail" for c in report.checks)
    warns = sum(c.status == "warn" for c in report.checks)
    verdict = (
        "[bold red]not fit to tune on[/]"
        if fails
        else ("[yellow]usable, with warnings[/]" if warns else "[green]ready[/]")
    )
    console.print(
        f"{verdict}: {fails} failed, {warns} warning(s), {len(report.checks) - fails - warns} passed", highlight=False
    )
