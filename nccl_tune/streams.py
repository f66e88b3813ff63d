"""The tuner's own output, kept from ever failing a run.

``nccl-tune run ... | head -3`` closes the pipe under the tuner's stdout after three lines; a
``tee`` that dies does the same, and a closed terminal (SIGHUP) turns every later write into
``EIO``. None of that is the trial's failure, nor the study's: ``guard_std_streams`` wraps
``sys.stdout`` and ``sys.stderr`` so that the first write that fails so points the stream's file
descriptor at ``/dev/null`` (later writes, and the interpreter's own flush at exit, then succeed),
says so once on the other stream while it still works, and the run goes on without printing.
Everything it would have printed is in the study's storage (``nccl-tune report``).
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any, TextIO

LOST_ERRNOS = frozenset({errno.EPIPE, errno.EIO, errno.ENXIO, errno.ECONNRESET})
"""A write to a reader that went away (broken pipe) or a terminal that closed (EIO, ENXIO)."""


class GuardedStream:
    """A text stream whose writes cannot fail once its reader has gone (the module docstring)."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self._stream = stream
        self._name = name
        self.lost: str | None = None
        """Why the stream's reader went away (``broken pipe``, ...), once it has."""
        self.other: GuardedStream | None = None
        """The other standard stream, told once when this one goes."""

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                return self._stream.write(text)
            except OSError as exc:
                self._lose(exc)
        return len(text)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self._stream.flush()
            except OSError as exc:
                self._lose(exc)

    def _lose(self, exc: OSError) -> None:
        if exc.errno not in LOST_ERRNOS:
            raise exc
        self.lost = "broken pipe" if exc.errno == errno.EPIPE else os.strerror(exc.errno or 0).lower()
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass
        if self.other is not None and self.other.lost is None:
            self.other.write(
                f"nccl-tune: {self._name} is gone ({self.lost}): the run goes on without printing there; "
                "`nccl-tune report` shows what it did\n"
            )
            self.other.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def guard_std_streams() -> tuple[GuardedStream, GuardedStream]:
    """Replace ``sys.stdout`` and ``sys.stderr`` with guarded ones (once); returns them."""
    if isinstance(sys.stdout, GuardedStream) and isinstance(sys.stderr, GuardedStream):
        return sys.stdout, sys.stderr
    out, err = GuardedStream(sys.stdout, "stdout"), GuardedStream(sys.stderr, "stderr")
    out.other, err.other = err, out
    sys.stdout, sys.stderr = out, err  # type: ignore[assignment]
    return out, err
