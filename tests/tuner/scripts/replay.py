"""Replays a trainer's captured output as the trainer wrote it: byte for byte, each redraw (``\\r``)
and line (``\\n``) flushed on its own, paced in time.

    python replay.py FIXTURE PACE_S PACE_REGEX

Before each piece whose text matches ``PACE_REGEX`` (a training step's line or bar redraw) the
replay sleeps ``PACE_S`` seconds; every other piece follows at once. It exits 0 after the last
piece, as a trainer does after its last step.
"""

from __future__ import annotations

import re
import sys
import time


def pieces(data: bytes) -> list[bytes]:
    """``data`` cut after every ``\\r`` and ``\\n`` (a ``\\r\\n`` stays one ending)."""
    return [p for p in re.split(rb"(?<=\r(?!\n))|(?<=\n)", data) if p]


def main() -> int:
    path, pace_s, pace = sys.argv[1], float(sys.argv[2]), re.compile(sys.argv[3])
    with open(path, "rb") as f:
        data = f.read()
    out = sys.stdout.buffer
    for piece in pieces(data):
        if pace.search(piece.decode("utf-8", "replace")):
            time.sleep(pace_s)
        out.write(piece)
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
