"""What a finished trial's other log files say: the memory lines a trainer's workers wrote to
their own logs (SkyRL's ``infra-*.log``), and what each rank's NCCL reported reading from its
environment (in any of the files, ``output.log`` included).

The live output (``output.log``) is parsed as it streams, for the clocks and the display; the
other files are read once, after teardown, by :func:`scan_trial_logs`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from nccl_tune.diagnose.nccl_seen import parse_seen
from nccl_tune.launchers.logstream import clean_line
from nccl_tune.launchers.progress import ProgressTracker

MAX_LINE_BYTES = 1 << 16
"""A longer line is read in pieces of this size (a 300 MB line costs no more than its pieces)."""


def _lines(path: Path):
    """The file's lines, each at most ``MAX_LINE_BYTES`` (longer ones come in pieces), decoded."""
    try:
        with open(path, "rb", buffering=1 << 20) as fh:
            while piece := fh.readline(MAX_LINE_BYTES):
                yield piece.decode("utf-8", "replace")
    except OSError:
        return


def count_lines(path: Path) -> int:
    """Lines a file holds now (0 when it cannot be read)."""
    n = 0
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                n += chunk.count(b"\n")
    except OSError:
        return 0
    return n


def scan_trial_logs(paths: Sequence[Path], live: Path, tracker: ProgressTracker) -> Mapping[str, Mapping[str, str]]:
    """Read every file of ``paths``: the memory lines of those other than ``live`` go to
    ``tracker`` (whose memory figures then cover every file); returns, per rank, the NCCL
    variables NCCL reported reading (``diagnose.nccl_seen.parse_seen``)."""
    seen: dict[str, dict[str, str]] = {}
    literals = tuple(x.decode() for x in tracker.current_literals() or ())
    for path in paths:
        extra = Path(path) != Path(live)
        for n, raw in enumerate(_lines(path), 1):
            if "set by environment" in raw:
                parse_seen((raw,), seen)
            elif extra and (not literals or any(lit in raw for lit in literals)):
                tracker.feed_memory(n, clean_line(raw), 0.0)
    return seen
