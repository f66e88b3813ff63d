"""A trial's log files, and their lines merged in time order.

A trial's command writes ``output.log`` (its stdout and stderr, what the launcher streams); a
trainer may write more: today's SkyRL sends its workers' and engines' output to
``{trainer.log_path}/infra-YYMMDD_HHMMSS.log`` (the built-in spaces put ``trainer.log_path``
inside the trial folder), and the CUDA out-of-memory error, NCCL's lines and the Flight Recorder
notices are there, not on stdout. Everything that reads a trial (the classifier, the memory
reader, ``nccl-tune diagnose TRIAL_DIR``) reads every file :func:`trial_log_files` lists.

Several files are merged by the timestamps their lines carry (loguru's and Python logging's
``YYYY-MM-DD HH:MM:SS.mmm``): a line without one keeps the time of the last stamped line of its
file, except the lines after a file's last stamp (a traceback, an abort: what a process prints
as it fails), which take the file's last-modified time when that is later; lines before any stamp
come first, and equal times keep file order (``output.log`` first).
"""

from __future__ import annotations

import gzip
import heapq
import os
import re
import stat
import zlib
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO

OUTPUT_LOG = "output.log"
INFRA_PATTERN = "infra-*.log"
"""SkyRL's infra logs, found anywhere under the trial folder."""

_STAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_STAMP_SPAN = 200
"""Characters at the start of a line searched for its timestamp (after a Ray prefix, colours)."""
_NEVER = (0,)
_TAIL_BUFFER = 20000
"""Unstamped lines held back waiting for the next stamp; beyond this they keep the last stamp."""
GZIP_MAGIC = b"\x1f\x8b"
HEAD_BYTES = 8192
"""Bytes at the start of a log (after gzip) looked at to tell a text log from other data."""
_BINARY_SHARE = 0.10
"""Share of a head's bytes that are NULs, other control bytes or invalid UTF-8 above which it is
not text (a text log with a stray NUL or Latin-1 byte stays far below; executables, compressed
data, core dumps and UTF-16 text are far above)."""
_CONTROL = bytes(b for b in range(32) if b not in b"\t\n\v\f\r\b\x1b") + b"\x7f"
PICKLE_MAGICS = tuple(bytes((0x80, protocol)) for protocol in range(2, 6))
"""How a pickle of protocol 2-5 opens (the PROTO opcode, then its number), as ``torch.save`` and a
Flight Recorder dump do: a lone 0x80 byte opens one binary file in 256."""
_FORMATS: tuple[tuple[int, bytes | tuple[bytes, ...], str, str], ...] = (
    (257, b"ustar", "a tar archive", "extract it (`tar xf FILE`) and pass the logs or their folder"),
    (0, b"PK\x03\x04", "a zip archive", "extract it (`unzip FILE`) and pass the logs or their folder"),
    (0, b"\xfd7zXZ\x00", "xz-compressed data", "decompress it first (`xz -dk FILE`)"),
    (0, b"\x28\xb5\x2f\xfd", "zstd-compressed data", "decompress it first (`zstd -d FILE`)"),
    (0, b"BZh", "bzip2-compressed data", "decompress it first (`bunzip2 -k FILE`)"),
    (0, b"\xff\xfe", "UTF-16 text", "convert it first (`iconv -f UTF-16 -t UTF-8 FILE > run.log`)"),
    (0, b"\xfe\xff", "UTF-16 text", "convert it first (`iconv -f UTF-16 -t UTF-8 FILE > run.log`)"),
    (0, b"\x7fELF", "an executable (ELF)", "pass the log the run wrote, not a program or core dump"),
    (
        0,
        PICKLE_MAGICS,
        "a pickle",
        "a Flight Recorder dump is read as one when its name ends in its rank "
        "(`nccl_trace_rank_0`); else pass the run's text log",
    ),
)
"""Binary data worth naming: (offset, magic or its alternatives, what it is, how to get a text log
from it)."""


def trial_log_files(trial_dir: Path) -> tuple[Path, ...]:
    """``output.log`` (when present), then every ``infra-*.log`` under ``trial_dir``, sorted."""
    trial_dir = Path(trial_dir)
    out = [trial_dir / OUTPUT_LOG] if (trial_dir / OUTPUT_LOG).is_file() else []
    infra = sorted(p for p in trial_dir.rglob(INFRA_PATTERN) if p.is_file())
    return (*out, *infra)


def source_name(path: Path, root: Path | None) -> str:
    """How evidence names a file: its path inside the trial folder, else its name."""
    if root is not None:
        try:
            return str(Path(path).relative_to(root))
        except ValueError:
            pass
    return Path(path).name


def line_time(line: str) -> tuple[int, ...] | None:
    """The line's timestamp as a sortable tuple (year .. microsecond), or None."""
    head = line[:_STAMP_SPAN]
    if "\x1b" in head:
        head = _ANSI.sub("", head)
    m = _STAMP.search(head)
    if m is None:
        return None
    frac = m.group(7) or "0"
    return (*(int(m.group(i)) for i in range(1, 7)), int(frac.ljust(6, "0")))


def file_end_time(fh: IO[str]) -> tuple[int, ...] | None:
    """The open file's last-modified time, local and naive as the stamps in its lines."""
    try:
        when = datetime.fromtimestamp(os.fstat(fh.fileno()).st_mtime)
    except (OSError, ValueError, AttributeError):
        return None
    return (when.year, when.month, when.day, when.hour, when.minute, when.second, when.microsecond)


def _stamped(fh: IO[str], index: int, end: tuple[int, ...] | None) -> Iterator[tuple[tuple[int, ...], int, int, str]]:
    last = _NEVER
    held: list[tuple[int, str]] = []
    for n, line in enumerate(fh, 1):
        t = line_time(line)
        if t is None:
            held.append((n, line))
            if len(held) >= _TAIL_BUFFER:
                yield from ((last, index, m, text) for m, text in held)
                held = []
            continue
        yield from ((last, index, m, text) for m, text in held)
        held = []
        last = t
        yield last, index, n, line
    tail = end if end is not None and last != _NEVER and end > last else last
    for m, text in held:
        yield tail, index, m, text


def merged_lines(handles: Sequence[IO[str]]) -> Iterator[tuple[int, int, str]]:
    """(file index, 1-based line number, line) of every line of ``handles``, merged in time order."""
    if len(handles) == 1:
        for n, line in enumerate(handles[0], 1):
            yield 0, n, line
        return
    streams = (_stamped(fh, i, file_end_time(fh)) for i, fh in enumerate(handles))
    for _, index, n, line in heapq.merge(*streams):
        yield index, n, line


def runs(handles: Sequence[IO[str]]) -> Iterator[tuple[int, int, list[str]]]:
    """The merged lines as runs of consecutive lines of one file: (file index, first line number, lines)."""
    current: tuple[int, int] | None = None
    chunk: list[str] = []
    for index, n, line in merged_lines(handles):
        if current is not None and (index != current[0] or n != current[1] + len(chunk)):
            yield current[0], current[1], chunk
            chunk = []
            current = None
        if current is None:
            current = (index, n)
        chunk.append(line)
        if len(chunk) >= 4096:
            yield current[0], current[1], chunk
            current, chunk = (index, n + 1), []
    if current is not None and chunk:
        yield current[0], current[1], chunk


def special_file(path: Path) -> str | None:
    """What ``path`` is when it exists but is no regular file (a named pipe, a device, a socket:
    reading one may block forever or never end), else None. Never opens it."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def not_a_text_log(path: Path, *, empty_ok: bool = False) -> str | None:
    """Why the regular file ``path`` cannot be read as a log (one line: what it is and how to get
    the log), or None when it can: binary data (an executable, a core dump, an archive, compressed
    data other than gzip, UTF-16 text), a gzip file that does not decompress, and, unless
    ``empty_ok``, a log with no text at all (empty, or blank lines only). A gzip-compressed log is
    judged by what it holds. ``OSError`` when the file cannot be opened."""
    with open(path, "rb") as fh:
        raw = fh.read(HEAD_BYTES)
    gz = raw[:2] == GZIP_MAGIC
    head, whole = raw, len(raw) < HEAD_BYTES
    if gz:
        try:
            with gzip.open(path, "rb") as fh:
                head = fh.read(HEAD_BYTES)
                whole = len(head) < HEAD_BYTES
        except (OSError, EOFError, zlib.error) as exc:
            return f"{path} is a damaged or truncated gzip file ({exc}); copy it again from where it was kept"
    if not empty_ok and whole and not head.strip():
        if gz:
            what = "is an empty gzip file" if not head else "holds only blank lines (inside gzip)"
        else:
            what = "is empty" if not head else "holds only blank lines"
        return (
            f"{path} {what}: a log with no lines says nothing about the run; pass the log the run "
            "wrote (its stdout and stderr)"
        )
    if not head or not _binary(head):
        return None
    inside = " (inside gzip)" if gz else ""
    for offset, magic, what, fix in _FORMATS:
        if head.startswith(magic, offset):
            return f"{path} is {what}{inside}, not a text log; {fix.replace('FILE', str(path))}"
    return (
        f"{path} is binary data{inside} (NUL or control bytes in its first {HEAD_BYTES // 1024} KiB), not a "
        "text log; pass the log the run wrote, not a program, core dump, checkpoint or archive"
    )


def _binary(head: bytes) -> bool:
    odd = len(head) - len(head.translate(None, _CONTROL))
    odd += head.decode("utf-8", "replace").count("\ufffd")
    return odd > _BINARY_SHARE * len(head)


def is_gzip(path: Path) -> bool:
    """True when ``path`` starts with gzip's magic bytes: a compressed log, read through."""
    with open(path, "rb") as probe:
        return probe.read(2) == GZIP_MAGIC


def open_text(path: Path) -> IO[str]:
    """A log as text (gzip-compressed logs read through; undecodable bytes replaced)."""
    if is_gzip(path):
        return gzip.open(path, "rt", encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace", buffering=1 << 20)


def feed_merged(clf, paths: Sequence[Path], names: Sequence[str]) -> None:
    """Feed ``LogClassifier`` ``clf`` the lines of ``paths`` merged in time order, each run of lines
    under its file's name (``names``) and real line numbers (evidence says which file a line came
    from). ``OSError`` when a file cannot be read."""
    handles: list[IO[str]] = []
    try:
        for p in paths:
            handles.append(open_text(p))
        for index, first, lines in runs(handles):
            clf.set_source(names[index], first - 1)
            clf.feed(lines)
    finally:
        for fh in handles:
            fh.close()
