"""Cleaning log lines and reading who printed them.

Training logs arrive wrapped: ANSI colours (sometimes only their remnants, ``[36m`` without the
escape byte, after a copy and paste), Ray's ``(ActorName pid=N, ip=A)`` prefixes, docker-compose's
``service-1  | `` prefixes, torchrun's ``[rank3]:`` prefixes and tqdm's carriage returns. These
helpers strip what hides the message and extract the rank, pid or GPU the line speaks for. This is
the one home of line cleaning: the launcher's log reader (``launchers/logstream``) calls it too.
"""

from __future__ import annotations

import re

from nccl_tune.patterns import TORCHRUN_PREFIX

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b|\[(?:\d{1,3};)*\d{1,3}m")
"""Escape sequences (CSI, OSC ended by BEL or ST, a stray ESC), and bare colour remnants such as
``[36m``/``[0m`` left after the ESC byte was lost (digits required: ``[model]`` stays)."""

_WORKER = r"\((?P<name>[^()\s]+)(?: pid=(?P<pid>\d+)){}(?:, ip=[^)]*)?\)"
"""The shape of Ray's worker prefix; ``{}`` makes the pid optional (``?``) or required (empty)."""
_RAY_PREFIX = re.compile(r"^\s*" + _WORKER.format("?") + r"\s?")
"""Ray's worker prefix: ``(FSDPPolicyWorkerBase pid=959049)``, ``(raylet)``, ``(pid=12, ip=10.0.0.1)``."""

_RAY_REPEAT = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")

_GLUED_PREFIX = re.compile(_WORKER.format(""))
"""A Ray worker prefix inside a line that does not start with one: another writer's unfinished
output (``faulthandler`` writing a traceback straight to the file) glued in front of a worker's line."""

_NCCL_PREFIX = re.compile(r"^\s*(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:[\w./-]+:\d+ )?NCCL ")
"""NCCL's own line prefix ``host:pid:tid [cudaDev] NCCL INFO ...`` (WARN lines put ``file.cc:line`` before ``NCCL``)."""

_RANK_STRICT = re.compile(
    r"\[rank(?P<a>\d+)\]:"  # torchrun / c10 log prefix: [rank3]:
    r"|\[(?:PG[^\]]*? )?Rank (?P<b>\d+)\]"  # [Rank 3], [PG 0 Rank 3], [PG ID 0 PG GUID 0(default_pg) Rank 3]
    r"|\brank=(?P<c>\d+)\b"  # DTensorPolicyWorkerV2[rank=5]
)


_TORCHRUN_PREFIX = re.compile(TORCHRUN_PREFIX)


def torchrun_prefix(text: str) -> str | None:
    """The torchrun prefix a line starts with (``[rank3]:``), or None: which rank's output it is."""
    m = _TORCHRUN_PREFIX.match(text) if text[:1] == "[" else None
    return m.group() if m else None


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences or their bare remnants (``[36m``)."""
    if "[" not in text and "\x1b" not in text:
        return text
    return _ANSI.sub("", text)


def clean(line: str) -> str:
    """The line as evidence: no trailing newline, no colours, no Ray repeat suffix, no other
    writer's fragment glued in front of a worker's line (``unglued``); the last carriage-return
    segment that has text (a tqdm bar rewrites itself with ``\\r``)."""
    text = line.rstrip("\r\n")
    if "\r" in text:
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
    text = strip_ansi(text)
    if "pid=" in text:
        text = unglued(text)
    if "repeated" in text:
        text = _RAY_REPEAT.sub("", text)
    return text


def unglued(text: str) -> str:
    """``text`` from its last Ray worker prefix on, when the line does not start with one: several
    processes write to one file, and a writer that does not end its lines (a traceback written
    straight to the file descriptor) leaves its fragment in front of the next worker's line, which
    would otherwise be nobody's. A line that starts with a prefix is one whole worker line (a
    prefix quoted inside it is its text)."""
    if _RAY_PREFIX.match(text):
        return text
    glued = None
    for glued in _GLUED_PREFIX.finditer(text):  # noqa: B007 - the last match is wanted
        pass
    return text[glued.start() :] if glued else text


def message(text: str) -> str:
    """A cleaned line without the Ray prefix in front of it (rules and progress rules match on this)."""
    m = _RAY_PREFIX.match(text) if "(" in text[:2] or text[:1].isspace() else None
    return text[m.end() :] if m else text


def clean_message(line: str) -> str:
    """``message(clean(line))``: what the progress rules and the rules read."""
    return message(clean(line))


def ray_pid(text: str) -> int | None:
    """The pid in a Ray worker prefix, if the line has one."""
    m = _RAY_PREFIX.match(text)
    if m and m.group("pid"):
        return int(m.group("pid"))
    return None


_TASK_PID = re.compile(r"\bray::[\w.]+\(\) \(pid=(?P<pid>\d+)")


def task_pid(text: str) -> int | None:
    """The worker pid in Ray's re-raised task error: ``RayTaskError(...): ray::Worker.method() (pid=N, ...)``."""
    m = _TASK_PID.search(text) if "ray::" in text else None
    return int(m.group("pid")) if m else None


def nccl_pid(text: str) -> int | None:
    """The pid in NCCL's ``host:pid:tid [dev] NCCL`` prefix, if the line has one."""
    m = _NCCL_PREFIX.match(text)
    return int(m.group("pid")) if m else None


def rank_of(text: str) -> int | None:
    """The rank a line speaks for: ``[rank3]:``, ``[Rank 3]``, ``[PG 0 Rank 3]``, ``rank=3``."""
    m = _RANK_STRICT.search(text)
    if m:
        return int(m.group("a") or m.group("b") or m.group("c"))
    return None


_NCCL_INIT = re.compile(r"\bNCCL INFO .*?\brank (?P<rank>\d+) nranks (?P<n>\d+)\b")


def nccl_init_rank(text: str) -> tuple[int, int, int] | None:
    """``(pid, rank, nranks)`` from NCCL's ``... rank 3 nranks 8 cudaDev 3 ... Init COMPLETE`` line."""
    pid = nccl_pid(text)
    m = _NCCL_INIT.search(text)
    if pid is None or not m:
        return None
    return pid, int(m.group("rank")), int(m.group("n"))
