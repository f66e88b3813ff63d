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

from typing import Iterable, Sequence

try:  # compiled multi-literal search; optional (the pure fallback is correct, only slower)
    import ahocorasick_rs as _ac
except ImportError:  # pragma: no cover - exercised when the package is absent
    _ac = None

BLOCK_BYTES = 1 << 18
"""Bytes of whole lines scanned at a time (memory stays bounded by a few blocks)."""

COVER_LITERALS: tuple[str, ...] = (
    # errors, exceptions, levels
    "rror", "ERROR", "xception", "CRITICAL", "Traceback", "Interrupt", "ssert", "Root Cause", "exitcode",
    "exits with return code", "xited with", "terminate called", "nconsistency", "Killing subprocess",
    # memory
    "emory", "EMORY", "bad_alloc", "KV cache", "kv_cache", "oom_reaper", "oom_kill", "OOMKilled", "ost RAM", "RAM u",
    # time-outs and hangs
    "imeout", "imed out", "atchdog", "Heartbeat", "dump signal", "dump debug info", "waitForInput", "for clients",
    "arrier",
    # failures, kills, signals
    "ailed", "ailure", "illed", "kill", "bort", "SIG", "by PID", "egmentation", "llegal", "isaligned",
    "The actor", "are busy", "is lost", "off the bus", "Xid", "ECC", "_STATUS_",
    # NCCL, network, rendezvous
    "NCCL WARN", "ncclInvalid", "nrecognized", "must have a prefix", "algorithm/protocol", "IBV_", "ibv_",
    "mlx5", "Got completion", "by peer", "by remote peer", "Broken pipe", "remote process", "to connect",
    "Connect to", "already in use", "INUSE", "closure", "ismatch", "node_ip_address", "lacement group", "socketProgress",
    # configuration refused
    "Could not", "not in struct", "viable", "not found",
    # progress and end of training (the default progress rules)
    "ed: '", "Training done", "Training complete", "raining finished", "train_runtime", "after training is done",
    "Finished training",
    # who is who
    "Init COMPLETE", "Init START", "[rank", "[Rank ", "rank=",
)
"""Hand-picked covers (see the module docstring); ``covers_for`` completes them."""


def covers_for(keys: Iterable[str], extra: Iterable[str] = ()) -> tuple[str, ...]:
    """``COVER_LITERALS`` plus every key (or extra literal) that contains none of them."""
    covers = list(COVER_LITERALS)
    for key in list(keys) + list(extra):
        if key and not any(c in key for c in covers):
            covers.append(key)
    return tuple(covers)


class CoverFinder:
    """Where the covers occur in a block: ``line_spans(buf)`` -> ``(start, end, rank_only)`` for
    every line holding one, in order (``end`` is the offset of the line's newline; ``rank_only``:
    the line's only cover is ``[rank``, a torchrun prefix that names the rank and nothing else)."""

    def __init__(self, covers: Sequence[str]) -> None:
        self.covers = tuple(covers)
        self._literals = [c.encode("utf-8") for c in self.covers]
        self._rank_index = self.covers.index("[rank") if "[rank" in self.covers else -1
        self._ac = _ac.BytesAhoCorasick(self._literals) if _ac is not None else None

    def _matches(self, buf: bytes) -> list[tuple[int, int]]:
        """(offset, cover index) of the covers found, in order of offset."""
        if self._ac is not None:
            return [(start, idx) for idx, start, _ in self._ac.find_matches_as_indexes(buf)]
        found: list[tuple[int, int]] = []
        for idx, lit in enumerate(self._literals):
            pos = buf.find(lit)
            while pos >= 0:
                found.append((pos, idx))
                end = buf.find(b"\n", pos)
                pos = buf.find(lit, end + 1) if end >= 0 else -1
        found.sort()
        return found

    def line_spans(self, buf: bytes) -> list[tuple[int, int, bool]]:
        spans: list[tuple[int, int, bool]] = []
        last_end = -1
        rank = self._rank_index
        for pos, idx in self._matches(buf):
            if pos <= last_end:
                if idx != rank and spans[-1][2]:
                    spans[-1] = (spans[-1][0], last_end, False)
                continue  # another cover on a line already taken
            start = buf.rfind(b"\n", 0, pos) + 1
            end = buf.find(b"\n", pos)
            if end < 0:
                end = len(buf)
            spans.append((start, end, idx == rank))
            last_end = end
        return spans


def whole_lines(chunks: Iterable[bytes], max_line_bytes: int) -> Iterable[bytes]:
    """Re-cut a byte stream into blocks that end at a newline (the last one may not); a line
    longer than ``max_line_bytes`` is cut (its head kept) so memory stays bounded."""
    rest = b""
    for chunk in chunks:
        if not chunk:
            continue
        if rest:
            nl = chunk.find(b"\n")
            if nl < 0:
                rest = (rest + chunk)[:max_line_bytes]
                continue
            yield rest + chunk[: nl + 1]
            chunk = chunk[nl + 1 :]
            rest = b""
        cut = chunk.rfind(b"\n") + 1
        if cut:
            yield chunk[:cut]
        rest = chunk[cut:][:max_line_bytes]
    if rest:
        yield rest + b"\n"
