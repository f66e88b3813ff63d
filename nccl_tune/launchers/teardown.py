"""Stopping a trial so that nothing of it is left: its process group, then every process on the
machine that carries its marker.

Processes started with ``setsid``, daemons and Ray workers leave the trial's process group, but
they inherit its environment, so ``NCCL_TUNE_TRIAL=<study>/<number>`` finds them
(``psutil.Process.environ()``). One that also drops its environment (``env -i setsid daemon``) is
found by ancestry instead: the trial's leader's descendants, and, because the tuner makes itself a
child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)`` on Linux), every orphan of the trial, which the
kernel re-parents to the tuner instead of to init. A zombie counts as gone: it holds no memory, only
a table entry; the orphans the tuner adopted are reaped by it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

from nccl_tune.trial import MARKER_ENV

PR_SET_CHILD_SUBREAPER = 36
POLL_S = 0.05
RESCAN_S = 0.5
KILL_WAIT_S = 2.0
"""After SIGKILL, how long to wait for the kernel to take the processes away."""


@dataclass(frozen=True)
class MarkedProcess:
    """A process found by its marker."""

    pid: int
    marker: str
    command: str
    rss_gib: float | None = None

    def describe(self) -> str:
        rss = f", {self.rss_gib:.2f} GiB RSS" if self.rss_gib is not None else ""
        return f"pid {self.pid} (trial {self.marker}{rss}): {self.command}"


@dataclass(frozen=True)
class TeardownReport:
    """What teardown found and did."""

    in_group: int
    """Live processes in the trial's process group when teardown began."""
    escaped: int
    """Processes carrying the marker found outside the process group (and killed)."""
    killed: int
    """Processes that ignored SIGTERM for the grace period and got SIGKILL."""
    survivors: int
    """Processes of the trial still alive at the end (should be 0)."""
    elapsed_s: float
    escaped_pids: tuple[int, ...] = ()
    survivor_pids: tuple[int, ...] = ()
    adopted: int = 0
    """Of ``escaped``: processes without the marker, found by ancestry (the leader's descendants, or
    orphans re-parented to this process as a child subreaper)."""
    survivor_commands: tuple[str, ...] = ()


def become_subreaper() -> bool:
    """Make this process a child subreaper (Linux): orphans of its descendants are re-parented to it,
    not to init, so that teardown finds what left a trial with neither its group nor its marker.
    False where that is not available (then such a process can escape)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _kin(leader_pid: int | None, since: float | None, marker: str) -> set[int]:
    """Pids that belong to the trial by ancestry: descendants of its leader, and (with ``since``, the
    trial's start as a ``time.time()``) children this process adopted since then, from another
    session, that carry no other trial's marker, with their descendants."""
    roots: list[psutil.Process] = []
    if leader_pid is not None:
        try:
            roots.append(psutil.Process(leader_pid))
        except psutil.Error:
            pass
    if since is not None:
        me = os.getsid(0)
        try:
            children = psutil.Process().children()
        except psutil.Error:
            children = []
        for child in children:
            try:
                if child.pid == leader_pid or child.create_time() < since - 1.0 or os.getsid(child.pid) == me:
                    continue
            except (psutil.Error, OSError):
                continue
            if _marker(child) in (None, marker):
                roots.append(child)
    pids = {p.pid for p in roots if p.pid != leader_pid}
    for root in roots:
        try:
            pids.update(p.pid for p in root.children(recursive=True))
        except psutil.Error:
            pass
    return pids


def _reap(pids: Iterable[int]) -> None:
    """Collect the exit status of those of ``pids`` that are this process's (adopted) children."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass


def _protected_pids() -> frozenset[int]:
    """This process and its ancestors: never signalled, even if they carry a marker."""
    pids = {os.getpid()}
    try:
        for parent in psutil.Process().parents():
            pids.add(parent.pid)
    except psutil.Error:
        pass
    return frozenset(pids)


def is_gone(proc: psutil.Process) -> bool:
    """True when ``proc`` no longer runs (exited, reaped, or a zombie)."""
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def command_of(proc: psutil.Process, limit: int = 160) -> str:
    """The process's command line as one line (its name when the command line is hidden)."""
    try:
        cmd = " ".join(" ".join(proc.cmdline()).split()) or proc.name()
    except psutil.Error:
        cmd = "?"
    return cmd if len(cmd) <= limit else cmd[: limit - 3] + "..."


def _marker(proc: psutil.Process) -> str | None:
    try:
        return proc.environ().get(MARKER_ENV)
    except (psutil.Error, OSError):
        return None


def scan(
    match: Callable[[str], bool], pgid: int | None = None, kin: frozenset[int] | set[int] = frozenset()
) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """One pass over the machine's processes: (members of process group ``pgid``, processes whose
    marker satisfies ``match`` or whose pid is in ``kin``). Zombies, this process and its ancestors
    are left out."""
    protected = _protected_pids()
    group: list[psutil.Process] = []
    marked: list[psutil.Process] = []
    for proc in psutil.process_iter():
        if proc.pid in protected:
            continue
        in_group = False
        if pgid is not None:
            try:
                in_group = os.getpgid(proc.pid) == pgid
            except OSError:
                continue
        marker = _marker(proc)
        is_marked = (marker is not None and match(marker)) or proc.pid in kin
        if (in_group or is_marked) and not is_gone(proc):
            (group if in_group else marked).append(proc)
            if in_group and is_marked:
                marked.append(proc)
    return group, marked


def find_marked(match: Callable[[str], bool]) -> list[MarkedProcess]:
    """Live processes whose marker satisfies ``match``, described."""
    out = []
    for proc in scan(match)[1]:
        try:
            rss = proc.memory_info().rss / float(1 << 30)
        except psutil.Error:
            rss = None
        out.append(MarkedProcess(proc.pid, _marker(proc) or "?", command_of(proc), rss))
    return out


def study_match(study: str) -> Callable[[str], bool]:
    """Marker predicate for every trial of ``study``."""
    prefix = f"{study}/"
    return lambda marker: marker.startswith(prefix)


def _signal(procs: Iterable[psutil.Process], sig: int) -> None:
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass


def _killpg(pgid: int | None, sig: int) -> None:
    if pgid is None:
        return
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def terminate(
    marker: str,
    grace_s: float,
    *,
    pgid: int | None = None,
    leader: subprocess.Popen | None = None,
    since: float | None = None,
) -> TeardownReport:
    """SIGTERM to process group ``pgid`` and to every process outside it that carries ``marker`` or
    descends from the trial (see ``_kin``; ``since`` is the trial's start as a ``time.time()``); after
    ``grace_s`` seconds SIGKILL to whatever is left; then sweep again (processes started during the
    grace period) and SIGKILL them. ``leader`` (the group's top process, our child) is reaped on the
    way so it does not linger as a zombie, and so are the orphans this process adopted. Never raises
    for a process that disappears meanwhile."""
    t0 = time.monotonic()
    match = marker.__eq__
    leader_pid = leader.pid if leader is not None else pgid
    by_kin: set[int] = set()

    def look() -> tuple[list[psutil.Process], list[psutil.Process]]:
        kin = _kin(leader_pid, since, marker)
        group, marked = scan(match, pgid, kin)
        by_kin.update(p.pid for p in marked if p.pid in kin and _marker(p) != marker)
        return group, marked

    group, marked = look()
    tracked: dict[int, psutil.Process] = {p.pid: p for p in group}
    group_pids = set(tracked)
    escaped: dict[int, psutil.Process] = {p.pid: p for p in marked if p.pid not in group_pids}
    tracked.update(escaped)
    in_group = len(group)

    _killpg(pgid, signal.SIGTERM)
    _signal(escaped.values(), signal.SIGTERM)

    def refresh(sig: int) -> None:
        more_group, more_marked = look()
        fresh = [p for p in more_group + more_marked if p.pid not in tracked]
        more_group_pids = {p.pid for p in more_group}
        for proc in more_marked:
            if proc.pid not in tracked and proc.pid not in more_group_pids:
                escaped[proc.pid] = proc
        group_pids.update(more_group_pids)
        tracked.update({p.pid: p for p in fresh})
        _signal(fresh, sig)

    deadline = t0 + grace_s
    last_scan = t0
    while time.monotonic() < deadline:
        if leader is not None:
            leader.poll()
        now = time.monotonic()
        if all(is_gone(p) for p in tracked.values()):
            refresh(signal.SIGTERM)  # nothing new started meanwhile?
            last_scan = now
            if all(is_gone(p) for p in tracked.values()):
                break
        elif now - last_scan >= RESCAN_S:
            refresh(signal.SIGTERM)
            last_scan = now
        time.sleep(POLL_S)

    stubborn = [p for p in tracked.values() if not is_gone(p)]
    if any(p.pid in group_pids for p in stubborn):  # the group still exists: its id cannot be another's
        _killpg(pgid, signal.SIGKILL)
    _signal(stubborn, signal.SIGKILL)
    refresh(signal.SIGKILL)
    kill_deadline = time.monotonic() + KILL_WAIT_S
    while True:
        if leader is not None:
            leader.poll()
        left = [p for p in tracked.values() if not is_gone(p)]
        if not left or time.monotonic() >= kill_deadline:
            break
        time.sleep(POLL_S)
        refresh(signal.SIGKILL)
    if leader is not None:
        try:
            leader.wait(timeout=max(0.0, kill_deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    _reap(pid for pid in tracked if pid != leader_pid)
    left = [p for p in tracked.values() if not is_gone(p)]
    return TeardownReport(
        in_group=in_group,
        escaped=len(escaped),
        killed=len(stubborn),
        survivors=len(left),
        elapsed_s=time.monotonic() - t0,
        escaped_pids=tuple(sorted(escaped)),
        survivor_pids=tuple(sorted(p.pid for p in left)),
        adopted=len(by_kin & set(escaped)),
        survivor_commands=tuple(command_of(p) for p in left),
    )


def kill_marked(match: Callable[[str], bool], grace_s: float) -> list[MarkedProcess]:
    """SIGTERM every process whose marker satisfies ``match``, SIGKILL what is left after
    ``grace_s``; return the processes found (described before they were signalled)."""
    found = find_marked(match)
    if not found:
        return []
    procs = []
    for item in found:
        try:
            procs.append(psutil.Process(item.pid))
        except psutil.NoSuchProcess:
            pass
    _signal(procs, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and not all(is_gone(p) for p in procs):
        time.sleep(POLL_S)
    _signal([p for p in procs if not is_gone(p)], signal.SIGKILL)
    later = scan(match)[1]
    _signal(later, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline and not all(is_gone(p) for p in procs + later):
        time.sleep(POLL_S)
    return found
