"""Python's "Exception ignored" blocks: a traceback the interpreter printed and then went on.

An exception raised where it cannot propagate (a finalizer or ``__del__``, an atexit callback,
garbage collection, interpreter shutdown) goes to ``sys.unraisablehook``, which prints a header
(``Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f...>``, older
Pythons ``<bound method ...>``; ``Exception ignored in atexit callback``, ``Exception ignored
while ...``), usually ``Traceback (most recent call last):`` with its frames, and the exception line
(``AssertionError: can only join a child process``); chained exceptions (``During handling of the
above exception ...``) continue the block. The program is not stopped by it.

``IgnoredBlock`` follows one such block line by line (cleaned lines, ``text.clean``): which lines
belong to it. Lines of the block carry the header's prefix (``[rank3]:``, a Ray worker's
``(Worker pid=12)``); a line with another prefix is another process's and neither belongs to the
block nor ends it. The block ends at its exception line (or its last chained one): the first
line after it that is neither blank nor a chain's separator is not part of it, nor is a line that
is neither a traceback's line nor an exception line (``ERROR ...`` after a block cut short). A
block cut short is only expected at the end of a log (an excerpt, a killed process): the hook
prints a block in one go. What the block's lines mean for a verdict is decided in ``classify``
(``_Decision``).

A library that catches an exception, logs it with its traceback and goes on prints the same kind
of block under a message of its own (``HANDLED``: math_verify's grader logs ``Error during
comparison`` and scores the answer 0, in most math RL runs); its block carries the process prefix
only (a Ray worker's, ``[rankN]:``), not the logger's.
"""

from __future__ import annotations

import re

HEADER = "Exception ignored "
"""How ``sys.unraisablehook``'s header starts (``in:``, ``in atexit callback:``, ``while ...``)."""
MAX_PREFIX = 160
"""A header further into its line than this is text that quotes one, not a header."""
MAX_LINES = 1000
"""Lines a block may span (its own and other processes' lines between them): a block still open
after them is closed, so that a header with no traceback after it cannot hide a log's rest."""
MAX_OTHERS = 48
"""Other processes' lines in a row after which a block is given up: its process printed nothing
more, or its prefix changes from line to line (a time stamp), so no line would be found its own;
following it further would only cost time."""

HANDLED: tuple[str, ...] = ("Error during comparison",)
"""Messages a library logs with the traceback of an exception it caught (module docstring)."""
HEADS = (HEADER, *HANDLED)
"""What a line that opens a block holds."""
_PROCESS_PREFIX = re.compile(r"^(?:\s*\([^()\s]+(?: pid=\d+)?(?:, ip=[^)]*)?\)\s?)?(?:\[rank\d+\]:\s?)?")

_TRACEBACK = "Traceback (most recent call last)"
_EXCEPTION_LINE = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*[a-z]\w*(?:\([\w.]*\))?(?::\s|:?\s*$)")
"""An exception line: a class name (``AssertionError``, ``torch.OutOfMemoryError``,
``ray.exceptions.RayTaskError(ValueError)``), then its message after ``: `` or nothing."""
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")

_HEAD, _FRAMES, _EXCEPTION, _CHAINED = range(4)
"""After the header; inside a traceback; after an exception line; after a chain's separator."""

IN, OTHER, ENDED = "in", "other", "ended"
"""What ``IgnoredBlock.feed`` says of a line: part of the block, another process's line, or the
first line after the block (not part of it)."""


def header_prefix(text: str) -> str | None:
    """The prefix before an ``Exception ignored`` header in a cleaned line (a ``HANDLED`` message's:
    the process prefix before its logger's), or None when the line is not a header."""
    at = text.find(HEADER)
    if 0 <= at <= MAX_PREFIX:
        return text[:at]
    if any(h in text[: MAX_PREFIX + 40] for h in HANDLED) and "Traceback" not in text:
        return _PROCESS_PREFIX.match(text).group(0)
    return None


class IgnoredBlock:
    """One block, fed the cleaned lines after its header (see the module docstring)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._state = _HEAD
        self.lines_seen = 0
        self._others = 0
        """Other processes' lines since the block's last own line."""

    @property
    def exhausted(self) -> bool:
        return self.lines_seen >= MAX_LINES or self._others >= MAX_OTHERS

    def feed(self, text: str) -> str:
        """``IN``, ``OTHER`` or ``ENDED`` for the next cleaned line (see the module docstring)."""
        self.lines_seen += 1
        if not text.startswith(self.prefix):
            self._others += 1
            return OTHER
        self._others = 0
        rest = text[len(self.prefix) :]
        if not rest.strip():
            return IN  # blank lines separate chained tracebacks
        state = self._state
        if state == _FRAMES and rest[0].isspace():
            return IN  # a frame, its source line, its ``^^^`` markers
        if state == _EXCEPTION:
            if rest.startswith(_CHAIN):
                self._state = _CHAINED
                return IN
            return ENDED
        if state != _FRAMES and rest.startswith(_TRACEBACK):
            self._state = _FRAMES
            return IN
        if _EXCEPTION_LINE.match(rest):
            self._state = _EXCEPTION  # with or without a traceback before it
            return IN
        return ENDED  # not a traceback's line: the block was cut short before its exception line
