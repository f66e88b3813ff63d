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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nccl_tune.diagnose.lines import LineCutter
from nccl_tune.diagnose.text import clean_message
from nccl_tune.failure import Evidence

READ_BYTES = 1 << 20

ERROR_LITERALS: tuple[bytes, ...] = (
    b"rror",  # Error, error, RuntimeError, "CUDA error", ...
    b"ERROR",
    b"Traceback",
    b"xception",
    b"Killed",
    b"imed out",  # Timed out, timed out
    b"not found",
    b"core dumped",
    b"Segmentation fault",
)
"""Substrings that make a line worth keeping as an early error line."""
_ERROR_RX = re.compile(b"|".join(re.escape(x) for x in ERROR_LITERALS))

_ANSI_BYTES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")


def clean_line(raw: str) -> str:
    """A log line as the parsers see it (``diagnose.text.clean_message``: no newline, the last
    carriage-return redraw only, no colour codes or their bare remnants, no Ray prefix)."""
    return clean_message(raw)


@dataclass(frozen=True)
class LogSummary:
    """What is known about a log without keeping it."""

    lines: int
    bytes: int
    tail: tuple[Evidence, ...]
    """The last lines, cleaned, with their line numbers."""
    first_errors: tuple[Evidence, ...]
    """The first error-looking lines, cleaned, with their line numbers."""
    parsed_lines: int
    """Lines that reached the parsers (the prefilter let them through)."""


LineHandler = Callable[[int, str, float], None]
"""Called with (1-based line number, cleaned text, arrival time from ``time.monotonic()``)."""


class LineScanner:
    """Turns byte chunks into the few lines that matter. Not thread-safe: one feeder.

    ``literals`` are substrings at least one of which every interesting line holds (from
    ``progress.required_literals``), or a callable giving the current ones (they narrow once a
    tracker has recognised its preset); None sends every line to ``on_line`` (slow, exact)."""

    def __init__(
        self,
        on_line: LineHandler,
        literals: Sequence[bytes] | None | Callable[[], Sequence[bytes] | None],
        *,
        source: str = "output.log",
        tail_lines: int = 50,
        first_error_lines: int = 20,
    ) -> None:
        self._on_line = on_line
        self._literals_of = literals if callable(literals) else None
        self._literals = tuple(literals) if literals is not None and not callable(literals) else None
        self._source = source
        self._tail: deque[tuple[int, bytes]] = deque(maxlen=tail_lines)
        self._first_errors: list[Evidence] = []
        self._max_errors = first_error_lines
        self._rest = b""
        self._cutter = LineCutter()
        """Over-long lines keep their head and a ``[... N bytes cut]`` marker (bounded memory)."""
        self._redrawn: bytes | None = None
        """The last progress-bar redraw of the open line already given to ``on_line``."""
        self.lines = 0
        self.bytes = 0
        self.parsed_lines = 0
        self._lock = threading.Lock()

    def feed(self, chunk: bytes, now: float | None = None) -> None:
        """Take the next bytes of the stream."""
        if not chunk:
            return
        now = time.monotonic() if now is None else now
        self.bytes += len(chunk)
        chunk = self._cutter.cut(chunk)
        start = 0
        if self._rest:  # finish the line the previous chunk left open
            nl = chunk.find(b"\n")
            if nl < 0:
                self._rest += chunk
                self._redraws(now)
                return
            head = self._rest + chunk[: nl + 1]
            self._rest = b""
            redrawn, self._redrawn = self._redrawn, None
            self._scan(head, 0, len(head), now, redrawn)
            start = nl + 1
        self._redrawn = None
        cut = chunk.rfind(b"\n", start) + 1
        if cut > start:
            self._scan(chunk, start, cut, now)
        else:
            cut = start
        self._rest = chunk[cut:]
        self._redraws(now)

    def _update_literals(self) -> None:
        if self._literals_of is not None:
            found = self._literals_of()
            self._literals = tuple(found) if found is not None else None

    def _redraws(self, now: float) -> None:
        """A progress bar (tqdm) redraws one line with carriage returns and ends it only when it
        closes: hand each redraw to the parsers as it arrives, and keep only the last one."""
        rest = self._rest
        if rest.rfind(b"\r") < 0:
            return
        self._update_literals()
        segs = rest.split(b"\r")
        keep = max((i for i, seg in enumerate(segs) if seg.strip()), default=0)
        self._parse_redraws(rest, self.lines + 1, now, self._redrawn)
        self._redrawn = segs[keep] if segs[keep].strip() else self._redrawn
        self._rest = (b"\r" if keep else b"") + b"\r".join(segs[keep:])  # the last redraw, for the tail

    def _parse_redraws(self, raw: bytes, line_no: int, now: float, seen: bytes | None) -> None:
        """Hand every redraw of ``raw`` to the parsers, except a first one equal to ``seen``."""
        segs = [seg for seg in raw.rstrip(b"\r\n").split(b"\r") if seg.strip()]
        if seen is not None and segs and segs[0] == seen:
            segs = segs[1:]
        for seg in segs:
            if self._literals is None or any(lit in seg for lit in self._literals):
                self.parsed_lines += 1
                self._on_line(line_no, clean_line(seg.decode("utf-8", "replace")), now)

    def finish(self, now: float | None = None) -> None:
        """The stream ended: a last line without newline is a line too."""
        self._rest += self._cutter.flush()
        if self._rest:
            rest, self._rest = self._rest + b"\n", b""
            now = time.monotonic() if now is None else now
            redrawn, self._redrawn = self._redrawn, None
            self._scan(rest, 0, len(rest), now, redrawn)

    @staticmethod
    def _line_starts(buf: bytes, lo: int, hi: int, literals: Sequence[bytes]) -> set[int]:
        starts: set[int] = set()
        for lit in literals:
            pos = buf.find(lit, lo, hi)
            while pos >= 0:
                starts.add(max(lo, buf.rfind(b"\n", lo, pos) + 1))
                end = buf.find(b"\n", pos, hi)
                pos = buf.find(lit, end + 1, hi) if end >= 0 else -1
        return starts

    @staticmethod
    def _error_starts(buf: bytes, lo: int, hi: int, limit: int) -> list[int]:
        starts: list[int] = []
        m = _ERROR_RX.search(buf, lo, hi)
        while m is not None and len(starts) < limit:
            pos = m.start()
            starts.append(max(lo, buf.rfind(b"\n", lo, pos) + 1))
            end = buf.find(b"\n", pos, hi)
            m = _ERROR_RX.search(buf, end + 1, hi) if end >= 0 else None
        return starts

    def _scan(self, buf: bytes, lo: int, hi: int, now: float, redrawn: bytes | None = None) -> None:
        """Parse the complete lines in ``buf[lo:hi]`` (which ends with a newline); ``redrawn`` is
        the first line's progress-bar redraw the parsers have already seen."""
        base = self.lines
        self._update_literals()
        if buf.find(b"\x1b", lo, hi) >= 0:
            buf = _ANSI_BYTES.sub(b"", buf[lo:hi])
            lo, hi = 0, len(buf)
        if self._literals is None:
            wanted: set[int] = set()
            pos = lo
            while pos < hi:
                wanted.add(pos)
                pos = buf.find(b"\n", pos, hi) + 1
                if pos == 0:
                    break
        else:
            wanted = self._line_starts(buf, lo, hi, self._literals)
        missing = self._max_errors - len(self._first_errors)
        errors = set(self._error_starts(buf, lo, hi, missing)) if missing > 0 else set()
        line_no, prev = base + 1, lo
        for start in sorted(wanted | errors):
            line_no += buf.count(b"\n", prev, start)
            prev = start
            end = buf.find(b"\n", start, hi)
            text = clean_line(buf[start:end].decode("utf-8", "replace"))
            if start in errors and len(self._first_errors) < self._max_errors and text.strip():
                with self._lock:
                    self._first_errors.append(Evidence(line_no, text, self._source))
            if start in wanted:
                raw = buf[start:end]
                if b"\r" in raw.rstrip(b"\r"):
                    self._parse_redraws(raw, line_no, now, redrawn if start == lo else None)
                else:
                    self.parsed_lines += 1
                    self._on_line(line_no, text, now)
        n = buf.count(b"\n", lo, hi)
        self.lines = base + n
        tail_n = self._tail.maxlen or 0
        if tail_n:
            ends: list[int] = []
            pos = hi - 1  # the newline ending the last line
            while len(ends) < tail_n and pos >= lo:
                ends.append(pos)
                pos = buf.rfind(b"\n", lo, pos)
            pieces = []
            for end in reversed(ends):
                start = buf.rfind(b"\n", lo, end) + 1 if end > lo else lo
                pieces.append(buf[max(start, lo) : end])
            first_no = base + n - len(pieces) + 1
            with self._lock:  # kept raw; cleaned only when someone asks for the summary
                self._tail.extend((first_no + i, piece) for i, piece in enumerate(pieces))

    def summary(self) -> LogSummary:
        """A snapshot (safe to call from another thread while feeding)."""
        with self._lock:
            return LogSummary(
                lines=self.lines,
                bytes=self.bytes,
                tail=tuple(
                    Evidence(no, clean_line(raw.decode("utf-8", "replace")), self._source) for no, raw in self._tail
                ),
                first_errors=tuple(self._first_errors),
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
        self.write_error: OSError | None = None
        """Why ``out_path`` could not be written on (a full disk, a file size limit): the pipe is still
        read and parsed to its end, the file is cut there."""
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
                if out >= 0:
                    out = self._append(out, data)
                self._scanner.feed(data)
        except BaseException as exc:  # reported by the launcher; a reader must not die silently
            self.error = exc
        finally:
            try:
                self._scanner.finish()
            finally:
                if out >= 0:
                    os.close(out)

    def _append(self, out: int, data: bytes) -> int:
        """Append ``data`` to the open ``out``; -1 (closed) once a write fails (``write_error``)."""
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(out, view) :]
        except OSError as exc:
            self.write_error = exc
            os.close(out)
            return -1
        return out

    def stop(self, timeout_s: float = 2.0) -> None:
        """Drain what is already in the pipe, then stop (even if a writer still holds it)."""
        self._stop_event.set()
        self.join(timeout_s)
