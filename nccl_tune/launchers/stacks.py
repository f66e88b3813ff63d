"""Taking every rank's Python stack at a stall, before teardown.

When the stall clock fires, PyTorch has dumped nothing yet (it dumps only when its own watchdog
fires, minutes later). ``collect_stacks`` runs ``py-spy dump --json`` on every Python process of
the trial (its process group and every process carrying its marker), each with its own timeout,
in parallel, and returns a ``diagnose.stacks.StackReport`` (the verdict names the rank whose stack
is elsewhere). A process's rank comes from its ``RANK`` variable (torchrun and most launchers set
it). py-spy reads other processes through ptrace: when the kernel refuses, the report says so in
one line, with the fix.
"""

from __future__ import annotations

import json
import linecache
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

from nccl_tune.diagnose.stacks import Frame, ProcessStack, StackReport, ThreadStack
from nccl_tune.launchers.teardown import command_of, scan

PER_PROCESS_TIMEOUT_S = 5.0
MAX_PROCESSES = 64
PTRACE_FIX = (
    "py-spy could not read the ranks' stacks: the kernel does not allow ptrace here; allow it with "
    "`sysctl kernel.yama.ptrace_scope=0` or give the tuner CAP_SYS_PTRACE"
)
_DENIED = ("Permission denied", "Operation not permitted", "ptrace", "elevated permissions")


def py_spy_path() -> str | None:
    """The ``py-spy`` executable: next to this Python (its venv), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file():
        return str(beside)
    return shutil.which("py-spy")


def _is_python(proc: psutil.Process) -> bool:
    """True when ``proc`` runs a Python interpreter: by its name, its first argument or its
    executable (a Ray worker retitles itself ``ray::Class.method``, name and command line both)."""
    names = []
    for read in (proc.name, lambda: proc.cmdline()[:1], proc.exe):
        try:
            got = read()
        except (psutil.Error, OSError):
            continue
        names += got if isinstance(got, list) else [got]
    return any("python" in Path(n).name.lower() for n in names if n)


def _rank(proc: psutil.Process) -> int | None:
    try:
        value = proc.environ().get("RANK")
    except (psutil.Error, OSError):
        return None
    return int(value) if value is not None and value.isdigit() else None


def trial_python_processes(marker: str, pgid: int | None) -> list[psutil.Process]:
    """The trial's Python processes: its process group and every process with its marker."""
    group, marked = scan(lambda m: m == marker, pgid=pgid)
    seen: dict[int, psutil.Process] = {}
    for proc in group + marked:
        if proc.pid not in seen and _is_python(proc):
            seen[proc.pid] = proc
    return sorted(seen.values(), key=lambda p: p.pid)[:MAX_PROCESSES]


def _frames(raw: list[dict[str, Any]]) -> tuple[Frame, ...]:
    out = []
    for f in raw:
        path, line = str(f.get("filename") or ""), int(f.get("line") or 0)
        code = linecache.getline(path, line).strip() if path and line > 0 else ""
        out.append(Frame(str(f.get("name") or "?"), path, line, code))
    return tuple(out)


def _parse(pid: int, text: str) -> tuple[ThreadStack, ...]:
    threads = []
    for t in json.loads(text):
        main = t.get("os_thread_id") == pid or t.get("thread_name") == "MainThread"
        name = str(t.get("thread_name") or t.get("os_thread_id") or t.get("thread_id") or "")
        threads.append(ThreadStack(name, bool(t.get("active")), _frames(t.get("frames") or []), main))
    return tuple(threads)


def dump_process(py_spy: Sequence[str], proc: psutil.Process, timeout_s: float) -> ProcessStack:
    """One process's stacks (``error`` says why not, for a process py-spy could not read);
    ``py_spy`` is the command that runs py-spy (its path, possibly behind a privilege wrapper)."""
    rank, command = _rank(proc), command_of(proc)
    try:
        done = subprocess.run(
            [*py_spy, "dump", "--json", "--full-filenames", "--pid", str(proc.pid)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return ProcessStack(proc.pid, rank, command, error=f"py-spy took longer than {timeout_s:g} s")
    except OSError as exc:
        return ProcessStack(proc.pid, rank, command, error=f"py-spy could not run: {exc}")
    if done.returncode != 0:
        lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
        return ProcessStack(proc.pid, rank, command, error=lines[0] if lines else f"py-spy exited {done.returncode}")
    try:
        return ProcessStack(proc.pid, rank, command, _parse(proc.pid, done.stdout))
    except (ValueError, TypeError, KeyError) as exc:
        return ProcessStack(proc.pid, rank, command, error=f"unreadable py-spy output: {exc}")


def collect_stacks(
    marker: str, pgid: int | None, timeout_s: float = PER_PROCESS_TIMEOUT_S, py_spy: Sequence[str] | None = None
) -> StackReport:
    """Every Python process of the trial, dumped in parallel (see the module docstring)."""
    if py_spy is None:
        found = py_spy_path()
        if found is None:
            return StackReport(note="py-spy is not installed, so the ranks' stacks were not taken: pip install py-spy")
        py_spy = (found,)
    procs = trial_python_processes(marker, pgid)
    if not procs:
        return StackReport(note="no Python process of the trial was left to read stacks from")
    with ThreadPoolExecutor(max_workers=min(8, len(procs))) as pool:
        stacks = tuple(pool.map(lambda p: dump_process(py_spy, p, timeout_s), procs))
    denied = [s for s in stacks if s.error and any(d in s.error for d in _DENIED)]
    note = PTRACE_FIX if denied and len(denied) == len([s for s in stacks if s.error]) else ""
    return StackReport(stacks, note)
