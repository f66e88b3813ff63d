"""Finding, in a block of log bytes, the few lines a rule could match.

A log is read as blocks of whole lines (bytes). One multi-literal search (Aho-Corasick, from
``ahocorasick_rs``; a loop of ``bytes.find`` when that package is missing) over each block finds
the *cover* literals: short substrings such that every key of every rule (and every literal the
progress rules need) contains at least one of them. Only lines holding a cover are decoded and
looked at in Python; every other line (an ``NCCL INFO`` flood, metrics, lines that never repeat)
costs its share of one scan in compiled code. The speed does not depend on lines repeating.

Covers are picked by hand to be short, rare in healthy output and shared by many keys; any key no
cover is part of becomes a cover itself, so adding a rule can never make the scan miss its lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from nccl_tune.diagnose.lines import MAX_LINE_BYTES, LineCutter

try:  # compiled multi-literal search; optional (the pure fallback is correct, only slower)
    import ahocorasick_rs as _ac
except ImportError:  # pragma: no cover - exercised when the package is absent
    _ac = None

BLOCK_BYTES = 1 << 18
"""Bytes of whole lines scanned at a time (memory stays bounded by a few blocks)."""

COVER_LITERALS: tuple[str, ...] = (
    # errors, exceptions, levels
    "rror",
    "ERROR",
    "xception",
    "CRITICAL",
    "Traceback",
    "Interrupt",
    "ssert",
    "Root Cause",
    "exitcode",
    "exits with return code",
    "xited with",
    "terminated with exit code",
    "terminate called",
    "nconsistency",
    "Killing subprocess",
    # memory
    "emory",
    "EMORY",
    "bad_alloc",
    "KV cache",
    "kv_cache",
    "oom_reaper",
    "RAM",
    # time-outs and hangs
    "imeout",
    "imed out",
    "atchdog",
    "signal",
    "dump debug info",
    "for clients",
    "arrier",
    # failures, kills, signals
    "ailed",
    "ailure",
    "illed",
    "kill",
    "bort",
    "SIG",
    "by PID",
    "egmentation",
    "llegal",
    "isaligned",
    "_ADDRESS",
    "The actor",
    "died unexpectedly",
    "are busy",
    "is lost",
    "off the bus",
    "Xid",
    "ECC",
    "_STATUS_",
    # NCCL, network, rendezvous
    "NCCL WARN",
    "ncclInvalid",
    "nrecognized",
    "must have a prefix",
    "IBV_",
    "ibv_",
    "mlx5",
    "Got completion",
    "peer",
    "Broken pipe",
    "remote process",
    "to connect",
    "Connect to",
    "already in use",
    "INUSE",
    "closure",
    "ismatch",
    "node_ip_address",
    "lacement group",
    "socketProgress",
    # configuration refused
    "Could not",
    "not in struct",
    "viable",
    "not found",
    "fields",
    # "No route to host", "No space left on device", Ray's "No available node types can fulfill"
    "No ",
    # progress and end of training (every preset's step and end lines, for a log of unknown origin)
    "ed: '",
    "raining",
    "train_runtime",
    "step",
    "time",
    # who is who, the program's exit, a launcher's report of a clean exit
    "Init ",
    "destroy",
    "ucce",
)
"""Hand-picked covers (see the module docstring); ``covers_for`` completes them."""
MAX_COVERS = 100
"""Covers the compiled search keeps its fast path for: past 100 literals ``ahocorasick_rs`` scans a
block of healthy lines about a third slower (508 -> 335 MB/s in one measurement). A key no cover is
part of becomes a cover of its own: pick a shared cover instead once the count nears this."""


def covers_for(keys: Iterable[str], extra: Iterable[str] = ()) -> tuple[str, ...]:
    """``COVER_LITERALS`` plus every key (or extra literal) that contains none of them."""
    covers = list(COVER_LITERALS)
    for key in list(keys) + list(extra):
        if key and not any(c in key for c in covers):
            covers.append(key)
    return tuple(covers)


class CoverFinder:
    """Where the covers occur in a block: ``line_spans(buf)`` -> the ``(start, end)`` byte offsets
    of every line holding one, in order (``end`` is the offset of the line's newline)."""

    def __init__(self, covers: Sequence[str]) -> None:
        self.covers = tuple(covers)
        self._literals = [c.encode("utf-8") for c in self.covers]
        self._ac = _ac.BytesAhoCorasick(self._literals) if _ac is not None else None

    def _positions(self, buf: bytes) -> list[int]:
        if self._ac is not None:
            return [start for _, start, _ in self._ac.find_matches_as_indexes(buf)]
        found: list[int] = []
        for lit in self._literals:
            pos = buf.find(lit)
            while pos >= 0:
                found.append(pos)
                end = buf.find(b"\n", pos)
                pos = buf.find(lit, end + 1) if end >= 0 else -1
        found.sort()
        return found

    def line_spans(self, buf: bytes) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        last_end = -1
        for pos in self._positions(buf):
            if pos <= last_end:
                continue  # another cover on a line already taken
            start = buf.rfind(b"\n", 0, pos) + 1
            end = buf.find(b"\n", pos)
            if end < 0:
                end = len(buf)
            spans.append((start, end))
            last_end = end
        return spans


_RANK_PREFIX = re.compile(rb"\[rank(\d+)\]:")
_RANK_PG = re.compile(rb"Rank (\d+)\]")
_PID_RANK = re.compile(
    rb"pid=(\d+)[^)\n]*\)(?:\x1b\[[\d;]*m|\[\d{1,3}(?:;\d{1,3})*m)*\s?(?:\[rank(\d+)\]|\[Rank (\d+)\]|rank=(\d+)\b)"
)


_PID_PG_RANK = re.compile(rb"pid=(\d+)[^)\n]*\)[^\n]*?[Ii]nitiali[sz]ed process group,? rank[ =:]?(\d+)")
"""A Ray worker announcing its rank: ``(Worker pid=N) ... Initialized process group rank 3/8``."""


def block_ranks(buf: bytes) -> tuple[set[int], dict[int, int]]:
    """Who is who in a block, read in compiled code: the ranks that print (``[rank3]:``, ``[Rank 3]``,
    ``[PG 0 Rank 3]``) and, for Ray workers that name their rank right after their prefix
    (``(Worker pid=N) [rank3]:`` / ``rank=3``), pid -> rank."""
    ranks: set[int] = set()
    pid_rank: dict[int, int] = {}
    if b"[rank" in buf:
        ranks.update(int(r) for r in set(_RANK_PREFIX.findall(buf)))
    if b"Rank " in buf:
        ranks.update(int(r) for r in set(_RANK_PG.findall(buf)))
    if b"pid=" in buf and (b"ank" in buf):
        for pid, a, b, c in set(_PID_RANK.findall(buf)):
            rank = int(a or b or c)
            pid_rank[int(pid)] = rank
            ranks.add(rank)
        if b"rocess group" in buf:
            for pid, rank_text in set(_PID_PG_RANK.findall(buf)):
                pid_rank.setdefault(int(pid), int(rank_text))
                ranks.add(int(rank_text))
    return ranks, pid_rank


def whole_lines(chunks: Iterable[bytes], max_line_bytes: int = MAX_LINE_BYTES) -> Iterable[bytes]:
    """Re-cut a byte stream into blocks that end at a newline (the last one may not); a line
    longer than ``max_line_bytes`` keeps its head and a ``[... N bytes cut]`` marker
    (``lines.LineCutter``), so memory stays bounded."""
    cutter = LineCutter(max_line_bytes)
    rest = b""
    for chunk in chunks:
        chunk = cutter.cut(chunk)
        if not chunk:
            continue
        if rest:
            nl = chunk.find(b"\n")
            if nl < 0:
                rest += chunk
                continue
            yield rest + chunk[: nl + 1]
            chunk = chunk[nl + 1 :]
            rest = b""
        cut = chunk.rfind(b"\n") + 1
        if cut:
            yield chunk[:cut]
        rest = chunk[cut:]
    rest += cutter.flush()
    if rest:
        yield rest + b"\n"
