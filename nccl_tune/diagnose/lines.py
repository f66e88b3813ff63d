"""Over-long log lines, cut in bounded memory.

A process can print hundreds of megabytes without a newline (a tensor, a base64 blob, a progress bar
that never ends its line). Read line by line, such a line would be held whole, several times over.
``LineCutter`` rewrites a byte stream so that no line is longer than ``MAX_LINE_BYTES``: the head of an
over-long line is kept and the rest replaced by `` [... N bytes cut]``. It works on chunks with
``bytes.find``/``rfind`` only (a few calls per chunk for ordinary logs, no copy when no line needs a
cut). The launcher's scanner and diagnose's block reader both cut through it.
"""

from __future__ import annotations

MAX_LINE_BYTES = 64 * 1024
"""The longest line kept whole; longer ones keep this many bytes and a cut marker."""


def cut_marker(n_bytes: int) -> bytes:
    return f" [... {n_bytes} bytes cut]".encode()


def _rfind(buf: bytes, lo: int, hi: int) -> int:
    """The last line break (``\\n``, or ``\\r`` of a progress bar's redraw) in ``buf[lo:hi]``, or -1."""
    return max(buf.rfind(b"\n", lo, hi), buf.rfind(b"\r", lo, hi))


def _find(buf: bytes, lo: int, hi: int | None = None) -> int:
    """The first line break in ``buf[lo:hi]``, or -1."""
    hi = len(buf) if hi is None else hi
    a, b = buf.find(b"\n", lo, hi), buf.find(b"\r", lo, hi)
    return a if b < 0 else b if a < 0 else min(a, b)


class LineCutter:
    """Stateful: ``cut(chunk)`` returns the chunk with over-long lines cut, ``flush()`` what an
    unfinished cut line still owes at the end of the stream (its marker). A carriage return ends a
    line here too: a progress bar redrawn a million times is many short lines, not one long one."""

    def __init__(self, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.max = max_line_bytes
        self._run = 0
        """Bytes of the current (unfinished) line already passed on."""
        self._cutting = False
        self._cut = 0
        self.lines_cut = 0

    def cut(self, chunk: bytes) -> bytes:
        if not chunk:
            return b""
        if not self._cutting and self._fits(chunk):
            return chunk  # the common case: no copy at all
        out: list[bytes] = []
        p = self._continue(chunk, out)
        n = len(chunk)
        while p < n:  # p starts a line
            if n - p <= self.max:
                tail_nl = _rfind(chunk, p, n)
                self._run = n - p if tail_nl < 0 else n - tail_nl - 1
                out.append(chunk[p:])
                break
            nl = _rfind(chunk, p, p + self.max + 1)
            if nl >= 0:  # every line in chunk[p:nl] is shorter than the limit
                out.append(chunk[p : nl + 1])
                p = nl + 1
                continue
            out.append(chunk[p : p + self.max])  # an over-long line starts at p
            p = self._skip(chunk, p + self.max, out)
        return b"".join(out)

    def _fits(self, chunk: bytes) -> bool:
        """True when no line of ``chunk`` needs a cut (then the chunk counts as passed on)."""
        n, p = len(chunk), 0
        limit = self.max - self._run  # the first newline may come at this offset at the latest
        while n - p > limit:
            nl = _rfind(chunk, p, p + limit + 1)
            if nl < 0:
                return False
            p, limit = nl + 1, self.max
        last = _rfind(chunk, 0, n)
        self._run = self._run + n if last < 0 else n - last - 1
        return True

    def _continue(self, chunk: bytes, out: list[bytes]) -> int:
        """Finish the line the previous chunk left open; the offset where the next line starts."""
        if self._cutting:
            return self._skip(chunk, 0, out)
        if not self._run:
            return 0
        room = self.max - self._run
        nl = _find(chunk, 0, room + 1)
        if nl >= 0:
            out.append(chunk[: nl + 1])
            self._run = 0
            return nl + 1
        if len(chunk) <= room:
            out.append(chunk)
            self._run += len(chunk)
            return len(chunk)
        out.append(chunk[:room])
        return self._skip(chunk, room, out)

    def _skip(self, chunk: bytes, start: int, out: list[bytes]) -> int:
        """Drop the rest of an over-long line from ``start``; the offset after its newline."""
        if not self._cutting:
            self._cutting, self._cut = True, 0
            self.lines_cut += 1
        nl = _find(chunk, start)
        if nl < 0:
            self._cut += len(chunk) - start
            return len(chunk)
        self._cut += nl - start
        out.append(cut_marker(self._cut) + chunk[nl : nl + 1])
        self._cutting, self._run = False, 0
        return nl + 1

    def flush(self) -> bytes:
        if self._cutting:
            self._cutting = False
            return cut_marker(self._cut)
        return b""
