"""The ranks' Python stacks at a stall, and which rank is elsewhere.

When a trial stops making progress, the launcher (``launchers/stacks.py``) takes every Python
process's stacks with ``py-spy dump`` before teardown. This module is the pure half: the stacks as
data (``StackReport``, saved as ``stacks.json`` in the trial folder) and ``odd_rank``, which names
the rank whose main thread is not where the others are: in ``time.sleep``, loading data, outside
any collective, in a different collective, or at another call of the same collective (one behind).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

STACKS_FILE = "stacks.json"
SHOWN_FRAMES = 6
_COLLECTIVE_FILES = ("torch/distributed/distributed_c10d.py", "torch/distributed/_functional_collectives.py")
_LAUNCHER_FILES = ("torch/distributed/elastic/", "torch/distributed/run.py", "torch/distributed/launch")
_DATA_FILES = ("torch/utils/data/",)
_WRAPPERS = {"wrapper", "_fn", "inner"}


@dataclass(frozen=True)
class Frame:
    """One Python frame: function, file, line, and the source line when it could be read."""

    function: str
    file: str
    line: int
    code: str = ""

    def __str__(self) -> str:
        code = f"  # {self.code.strip()}" if self.code.strip() else ""
        return f"{self.function} ({self.file}:{self.line}){code}"


@dataclass(frozen=True)
class ThreadStack:
    name: str
    active: bool
    frames: tuple[Frame, ...]
    """Innermost first, as py-spy prints them."""
    main: bool = False


@dataclass(frozen=True)
class ProcessStack:
    pid: int
    rank: int | None
    command: str
    threads: tuple[ThreadStack, ...] = ()
    error: str = ""
    """Why the stacks could not be read (empty when they were)."""

    @property
    def main_thread(self) -> ThreadStack | None:
        return next((t for t in self.threads if t.main), self.threads[0] if self.threads else None)


@dataclass(frozen=True)
class StackReport:
    """Every Python process of a trial at one moment (a stall), or why they could not be read."""

    processes: tuple[ProcessStack, ...] = ()
    note: str = ""
    """One line for the evidence when the stacks could not be taken (ptrace denied, no py-spy)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "note": self.note,
            "processes": [
                {
                    "pid": p.pid,
                    "rank": p.rank,
                    "command": p.command,
                    "error": p.error,
                    "threads": [
                        {
                            "name": t.name,
                            "active": t.active,
                            "main": t.main,
                            "frames": [[f.function, f.file, f.line, f.code] for f in t.frames],
                        }
                        for t in p.threads
                    ],
                }
                for p in self.processes
            ],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> StackReport | None:
        if not data:
            return None
        procs = []
        for p in data.get("processes") or ():
            threads = tuple(
                ThreadStack(
                    str(t.get("name") or ""),
                    bool(t.get("active")),
                    tuple(
                        Frame(str(f[0]), str(f[1]), int(f[2]), str(f[3]) if len(f) > 3 else "")
                        for f in t.get("frames") or ()
                    ),
                    bool(t.get("main")),
                )
                for t in p.get("threads") or ()
            )
            procs.append(
                ProcessStack(
                    int(p["pid"]), p.get("rank"), str(p.get("command") or ""), threads, str(p.get("error") or "")
                )
            )
        return cls(tuple(procs), str(data.get("note") or ""))


@dataclass(frozen=True)
class StackFinding:
    """The rank whose stack is elsewhere, where it is, and its stack."""

    rank: int | None
    pid: int
    where: str
    """``in time.sleep (job.py:21)``, ``loading data``, ``in broadcast``, ``at another all_reduce call``, ..."""
    others: str
    """Where the other ranks are: ``ranks 0, 1, 3 wait in all_reduce (job.py:30)``."""
    stack: tuple[str, ...]

    @property
    def who(self) -> str:
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"

    @property
    def headline(self) -> str:
        return f"{self.who} is {self.where} while {self.others}"


@dataclass(frozen=True)
class _State:
    kind: str
    """``collective``, ``sleep``, ``data``, ``elsewhere``."""
    op: str
    site: str
    """The first frame outside torch: the user's call."""

    @property
    def describe(self) -> str:
        if self.kind == "collective":
            return f"in {self.op} ({self.site})" if self.site else f"in {self.op}"
        if self.kind == "sleep":
            return f"in time.sleep ({self.site})"
        if self.kind == "data":
            return f"loading data ({self.site})"
        return f"outside any collective ({self.site})"


def _is_torch(frame: Frame) -> bool:
    return "/torch/" in frame.file or frame.file.startswith("torch/")


def _state(thread: ThreadStack) -> _State:
    frames = thread.frames
    user = next((f for f in frames if not _is_torch(f)), frames[0] if frames else None)
    site = f"{user.file.rsplit('/', 1)[-1]}:{user.line}" if user else ""
    for f in frames:
        if any(k in f.file for k in _COLLECTIVE_FILES) and f.function not in _WRAPPERS:
            return _State("collective", f.function, site)
    if frames and ("sleep(" in frames[0].code or frames[0].function == "sleep"):
        return _State("sleep", "sleep", site)
    if any(any(k in f.file for k in _DATA_FILES) for f in frames):
        return _State("data", "", site)
    return _State("elsewhere", frames[0].function if frames else "", site)


def _ranks(procs: list[ProcessStack]) -> str:
    ids = sorted((p.rank if p.rank is not None else p.pid) for p in procs)
    label = "ranks" if len(ids) > 1 else "rank"
    if all(p.rank is None for p in procs):
        label = "pids" if len(ids) > 1 else "pid"
    return f"{label} {', '.join(map(str, ids))}"


def _program(command: str) -> tuple[str, ...]:
    """What a process runs, for telling a job's ranks from its driver or launcher: the program's
    file name and its next two arguments (``python -m pkg.worker``, ``python -u train.py``)."""
    words = command.split()
    return tuple([words[0].rsplit("/", 1)[-1]] + words[1:3]) if words else ()


def _trainers(report: StackReport) -> list[ProcessStack]:
    """The ranks: processes with a rank when at least two have one; else the processes that run
    the same program as one found in a collective (the driver and launcher agents run another);
    else every readable process that is not a launcher agent."""
    readable = [p for p in report.processes if p.main_thread is not None and p.main_thread.frames]
    ranked = [p for p in readable if p.rank is not None]
    if len(ranked) >= 2:
        return ranked
    programs = {_program(p.command) for p in readable if _state(p.main_thread).kind == "collective"}
    same = [p for p in readable if _program(p.command) in programs]
    if len(same) >= 2:
        return same
    return [p for p in readable if not any(any(k in f.file for k in _LAUNCHER_FILES) for f in p.main_thread.frames)]


def with_ranks(report: StackReport | None, rank_of_pid: Mapping[int, int]) -> StackReport | None:
    """``report`` with the ranks the logs give for pids the process environments did not name."""
    if report is None or not rank_of_pid:
        return report
    procs = tuple(
        ProcessStack(p.pid, rank_of_pid[p.pid], p.command, p.threads, p.error)
        if p.rank is None and p.pid in rank_of_pid
        else p
        for p in report.processes
    )
    return StackReport(procs, report.note)


def odd_rank(report: StackReport | None) -> StackFinding | None:
    """The one rank whose main thread is elsewhere than the others' (see the module docstring),
    or None when no single rank stands out."""
    if report is None:
        return None
    procs = _trainers(report)
    if len(procs) < 2:
        return None
    states = {p.pid: _state(p.main_thread) for p in procs}
    counts = Counter(states.values())
    majority, size = counts.most_common(1)[0]
    if size < 2:  # no two alike: one rank outside every collective while the others are in one still counts
        outside = [p for p in procs if states[p.pid].kind != "collective"]
        inside = [p for p in procs if states[p.pid].kind == "collective"]
        if len(outside) != 1 or not inside:
            return None
        majority = states[inside[0].pid]
    odd = [p for p in procs if states[p.pid] != majority]
    if not odd:
        return None
    if len(odd) > 1:  # several stand out: the one outside any collective is the one the others wait for
        outside = [p for p in odd if states[p.pid].kind != "collective"]
        if len(outside) != 1:
            return None
        odd = outside
    culprit = odd[0]
    st, maj = states[culprit.pid], majority
    where = st.describe
    if st.kind == maj.kind == "collective":
        where = (
            f"in a different collective, {st.op} ({st.site})"
            if st.op != maj.op
            else f"at another {st.op} call ({st.site}), a collective behind or ahead"
        )
    waiting = [p for p in procs if states[p.pid] == majority]
    verb = "wait" if len(waiting) > 1 else "waits"
    others = (
        f"{_ranks(waiting)} {verb} {maj.describe}"
        if maj.kind == "collective"
        else f"{_ranks(waiting)} are {maj.describe}"
    )
    stack = tuple(str(f) for f in culprit.main_thread.frames[:SHOWN_FRAMES])
    return StackFinding(culprit.rank, culprit.pid, where, others, stack)
