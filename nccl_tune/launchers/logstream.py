"""Streaming a trial's output: to ``output.log`` as it arrives, and through the parsers line by
line, in bounded memory.

The reader works on raw byte chunks. A line is decoded and cleaned (ANSI colours, Ray's
``(Name pid=N)`` prefix, carriage-return redraws) only if the chunk holds one of the literals
the parsers need (``Finished: '``, ``memory: ``, ...) or an error-looking word on that line, found
with ``bytes.find``; every other line (the bulk of an ``NCCL_DEBUG=INFO`` flood) costs a share of
one ``count`` and never reaches Python code. What is kept: a tail of the last lines, counters,
and the first error-looking lines, never the whole log.
"""

from __future__ import annotations

import os
import re
import select
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from nccl_tune.failure import Evidence

READ_BYTES = 1 << 20
MAX_LINE_BYTES = 1 << 20
"""A line longer than this is cut: the rest of it is counted but not kept or parsed."""

ERROR_LITERALS: tuple[bytes, ...] = (
    b"rror",  # Error, error (ERROR below)
    b"ERROR",
    b"Traceback",
    b"xception",
    b"Killed",
    b"FAILED",
    b"Fatal",
    b"fatal",
    b"Abort",
    b"abort",
    b"imed out",  # Timed out, timed out
    b"out of memory",
    b"Segmentation fault",
    b"not found",
)
"""Substrings that make a line worth keeping as an early error line."""

_ANSI_BYTES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_ANSI_TEXT = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b")
_BARE_SGR = re.compile(r"\[(?:\d{1,3};)*\d{1,3}m")
_RAY_PREFIX = re.compile(r"^\((?:[\w.:\-]+(?: pid=\d+)?|pid=\d+)(?:, ip=[\w.:\-]+)?\)\s?")


def clean_line(raw: str) -> str:
    """A log line as the parsers see it: no trailing newline, the last carriage-return redraw
    only, ANSI colour codes (and bare remnants such as ``[36m``) removed, a leading Ray
    ``(Name pid=N)`` prefix removed."""
    text = raw.rstrip("\r\n")
    if "\r" in text:
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
    if "\x1b" in text:
        text = _ANSI_TEXT.sub("", text)
    if "m" in text and "[" in text:
        text = _BARE_SGR.sub("", text)
    if text.startswith("("):
        text = _RAY_PREFIX.sub("", text, count=1)
    return text


@dataclass(frozen=True)
class LogSummary:
    """What is known about a log without keeping it."""

    lines: int
    bytes: int
    tail: tuple[Evidence, ...]
    """The last lines, cleaned, with their line numbers."""
    first_errors: tuple[Evidence, ...]
    """The first error-looking lines, cleaned, with their line numbers."""
    error_hits: int
    """How many error-looking words were seen (lines with several count several times)."""
    parsed_lines: int
    """Lines that reached the parsers (the prefilter let them through)."""


LineHandler = Callable[[int, str, float], None]
"""Called with (1-based line number, cleaned text, arrival time from ``time.monotonic()``)."""


class LineScanner:
    """Turns byte chunks into the few lines that matter. Not thread-safe: one feeder.

    ``literals`` are substrings at least one of which every interesting line holds (from
    ``progress.required_literals``); None sends every line to ``on_line`` (slow, exact)."""

    def __init__(
        self,
        on_line: LineHandler,
        literals: Sequence[bytes] | None,
        *,
        source: str = "output.log",
        tail_lines: int = 50,
        first_error_lines: int = 20,
    ) -> None:
        self._on_line = on_line
        self._literals = tuple(literals) if literals is not None else None
        self._source = source
        self._tail: deque[Evidence] = deque(maxlen=tail_lines)
        self._first_errors: list[Evidence] = []
        self._max_errors = first_error_lines
        self._rest = b""
        self._rest_cut = False
        self.lines = 0
        self.bytes = 0
        self.error_hits = 0
        self.parsed_lines = 0
        self._lock = threading.Lock()

    def feed(self, chunk: bytes, now: float | None = None) -> None:
        """Take the next bytes of the stream."""
        if not chunk:
            return
        now = time.monotonic() if now is None else now
        self.bytes += len(chunk)
        data = self._rest + chunk if self._rest else chunk
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            if len(data) > MAX_LINE_BYTES:
                data = data[:MAX_LINE_BYTES]
                self._rest_cut = True
            self._rest = data
            return
        body, rest = data[:cut], data[cut:]
        if self._rest_cut:  # the head of an over-long line was kept; the end arrived now
            self._rest_cut = False
        if len(rest) > MAX_LINE_BYTES:
            rest = rest[:MAX_LINE_BYTES]
            self._rest_cut = True
        self._rest = rest
        self._scan(body, now)

    def finish(self, now: float | None = None) -> None:
        """The stream ended: a last line without newline is a line too."""
        if self._rest:
            rest, self._rest = self._rest, b""
            self._scan(rest + b"\n", time.monotonic() if now is None else now)

    def _line_starts(self, body: bytes, literals: Sequence[bytes]) -> set[int]:
        starts: set[int] = set()
        for lit in literals:
            pos = body.find(lit)
            while pos >= 0:
                start = body.rfind(b"\n", 0, pos) + 1
                starts.add(start)
                end = body.find(b"\n", pos)
                pos = body.find(lit, end + 1) if end >= 0 else -1
        return starts

    def _scan(self, body: bytes, now: float) -> None:
        base = self.lines
        if b"\x1b" in body:
            body = _ANSI_BYTES.sub(b"", body)
        if self._literals is None:
            wanted = set()
            pos = 0
            while pos < len(body):
                wanted.add(pos)
                pos = body.find(b"\n", pos) + 1
                if pos == 0:
                    break
        else:
            wanted = self._line_starts(body, self._literals)
        if len(self._first_errors) < self._max_errors:
            errors = self._line_starts(body, ERROR_LITERALS)
            self.error_hits += len(errors)
        else:
            errors = set()
            self.error_hits += sum(body.count(lit) for lit in ERROR_LITERALS)
        line_no, prev = base + 1, 0
        for start in sorted(wanted | errors):
            line_no += body.count(b"\n", prev, start)
            prev = start
            end = body.find(b"\n", start)
            text = clean_line(body[start:end].decode("utf-8", "replace"))
            if start in errors and len(self._first_errors) < self._max_errors and text.strip():
                with self._lock:
                    self._first_errors.append(Evidence(line_no, text, self._source))
            if start in wanted:
                self.parsed_lines += 1
                self._on_line(line_no, text, now)
        n = body.count(b"\n")
        tail_n = self._tail.maxlen or 0
        if tail_n:
            pieces = body.rsplit(b"\n", tail_n + 1)[-(tail_n + 1) : -1]
            first_no = base + n - len(pieces) + 1
            with self._lock:
                for i, piece in enumerate(pieces):
                    self._tail.append(Evidence(first_no + i, clean_line(piece.decode("utf-8", "replace")), self._source))
        self.lines = base + n

    def summary(self) -> LogSummary:
        """A snapshot (safe to call from another thread while feeding)."""
        with self._lock:
            return LogSummary(
                lines=self.lines,
                bytes=self.bytes,
                tail=tuple(self._tail),
                first_errors=tuple(self._first_errors),
                error_hits=self.error_hits,
                parsed_lines=self.parsed_lines,
            )


class LogPump(threading.Thread):
    """Reads a pipe until end of file (or until stopped), appends every byte to ``out_path`` and
    feeds the scanner. Runs as a daemon thread."""

    def __init__(
        self, fd: int, out_path: Path, scanner: LineScanner, *, poll_s: float = 0.2, drain_s: float = 1.0
    ) -> None:
        super().__init__(name=f"log-pump:{out_path}", daemon=True)
        self._fd = fd
        self._out_path = Path(out_path)
        self._scanner = scanner
        self._poll_s = poll_s
        self._drain_s = drain_s
        self._stop_at: float | None = None
        self._stop_event = threading.Event()
        self.error: BaseException | None = None
        self.eof = False

    def run(self) -> None:
        out = os.open(self._out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            while True:
                ready, _, _ = select.select([self._fd], [], [], self._poll_s)
                if self._stop_event.is_set():
                    if self._stop_at is None:
                        self._stop_at = time.monotonic()
                    if not ready or time.monotonic() - self._stop_at > self._drain_s:
                        break
                if not ready:
                    continue
                data = os.read(self._fd, READ_BYTES)
                if not data:
                    self.eof = True
                    break
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view) :]
                self._scanner.feed(data)
        except BaseException as exc:  # reported by the launcher; a reader must not die silently
            self.error = exc
        finally:
            try:
                self._scanner.finish()
            finally:
                os.close(out)

    def stop(self, timeout_s: float = 2.0) -> None:
        """Drain what is already in the pipe, then stop (even if a writer still holds it)."""
        self._stop_event.set()
        self.join(timeout_s)
