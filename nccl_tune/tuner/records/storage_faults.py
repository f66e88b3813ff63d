"""Storage that fails under a run: one line naming the file and the cause, never a traceback.

A full disk, a database deleted or replaced while a run used it, and a database another process
holds locked reach the tuner as Optuna's ``StorageInternalError`` ("exceeding max length") over
SQLAlchemy's ``OperationalError`` over SQLite's own message. ``storage_failure`` reads the chain
for the cause and says it in one line. A SQLite database locked by another writer is waited for
before it is used (``wait_unlocked``): a line names the holder (from ``/proc/locks``) and the
wait, and after ``LOCK_WAIT_S`` the command is refused.
"""

from __future__ import annotations

import errno
import os
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from nccl_tune.errors import NcclTuneError

LOCK_WAIT_S = 20.0
"""How long a command waits for another process's lock on the database before it is refused."""
LOCK_POLL_S = 0.25
LOCK_SAY_AFTER_S = 1.0
"""A lock held briefly (another run telling a trial) is waited for without a word."""

_CAUSES = (
    ("database or disk is full", "the disk is full"),
    ("no such table", "the database was deleted or replaced while the run used it"),
    ("unable to open database file", "the database file or its folder is gone or cannot be opened"),
    ("readonly database", "the database was deleted, replaced or made read-only while the run used it"),
    ("database is locked", "another process holds the database locked"),
    ("disk i/o error", "a disk I/O error (the file was removed, or the disk failed)"),
    ("database disk image is malformed", "the database is corrupt"),
)


_FULL = {
    errno.ENOSPC: "no space left on the device (the disk is full)",
    errno.EDQUOT: "the disk quota is used up",
    errno.EFBIG: "the file size limit is reached (ulimit -f)",
}


def hide_password(url: str) -> str:
    """``url`` with the password of its ``user:password@`` part shown as ``***``."""
    return re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", url)


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return out


def storage_failure(exc: BaseException, url: str, path: Path | None) -> NcclTuneError | None:
    """The one-line error for ``exc`` when it (or what caused it) is the storage or the disk failing;
    None for anything else. ``path``: the SQLite file of ``url`` (None for a server)."""
    where = f"storage {hide_password(url)}" + (f" ({path})" if path is not None else "")
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            name = e.filename or (f"the results folder {path.parent}" if path is not None else "the results folder")
            return NcclTuneError(
                f"{name}: {_FULL[e.errno]}; free space there (or use --results "
                "elsewhere) and run the same command again to resume the study"
            )
        if isinstance(e, sqlite3.Error) or type(e).__module__.startswith("sqlalchemy"):
            text = str(getattr(e, "orig", None) or e).lower()
            for needle, cause in _CAUSES:
                if needle in text:
                    return NcclTuneError(f"{where}: {cause} ({needle}); {_advice(needle, path)}")
    return None


def _advice(needle: str, path: Path | None) -> str:
    if needle == "database or disk is full":
        return "free space there and run the same command again: the study resumes from what was recorded"
    if needle == "database is locked":
        holder = lock_holder(path) if path is not None else None
        return (f"held by {holder}; " if holder else "") + "wait for it to finish, or stop it, and run again"
    if needle == "database disk image is malformed":
        return "every trial's result is still in its trial folder (result.json): start a new study with --study NEW"
    return (
        "the trials run so far keep their results in their trial folders (result.json); restore the database, "
        "or start a new study with --study NEW"
    )


def lock_holder(path: Path) -> str | None:
    """Who holds a lock on ``path`` (``pid N (COMMAND)``), read from ``/proc/locks``; None if unknown."""
    try:
        st = os.stat(path)
        locks = Path("/proc/locks").read_text()
    except OSError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in locks.splitlines():
        parts = line.split()
        if dev in parts and parts.index(dev) >= 1:
            pid = parts[parts.index(dev) - 1]
            if pid.isdigit() and int(pid) != os.getpid():
                return f"pid {pid} ({_command(int(pid))})"
    return None


def _command(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return " ".join(" ".join(a.decode(errors="replace").split()) for a in argv if a)[:80] or "?"
    except OSError:
        return "?"


def _locked(path: Path, write: bool) -> bool:
    """True when another process's lock keeps this one from reading (or, ``write``, writing) ``path``."""
    mode = "rw" if write else "ro"
    try:
        con = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode={mode}", uri=True, timeout=0)
    except sqlite3.Error:
        return False  # what is wrong with the file is said by the checks that follow
    try:
        if write:
            con.execute("BEGIN IMMEDIATE")
            con.rollback()
        else:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return False
    except sqlite3.OperationalError as exc:
        return "locked" in str(exc) or "busy" in str(exc)
    except sqlite3.Error:
        return False
    finally:
        con.close()


def wait_unlocked(
    path: Path, url: str, *, write: bool, wait_s: float = LOCK_WAIT_S, say: Callable[[str], None] | None = None
) -> None:
    """Return once no other process holds ``path`` locked against this use; after ``LOCK_SAY_AFTER_S``
    a line says who holds it, and after ``wait_s`` a one-line error refuses."""
    if not path.is_file() or not _locked(path, write):
        return
    say = say or (lambda line: (sys.stderr.write(line + "\n"), sys.stderr.flush()))
    start = time.monotonic()
    told = False
    while _locked(path, write):
        waited = time.monotonic() - start
        holder = lock_holder(path) or "another process"
        if waited >= wait_s:
            raise NcclTuneError(
                f"storage {url}: {path} has been locked by {holder} for {waited:.0f}s (database is locked); "
                "wait for it to finish, or stop it, and run again"
            )
        if not told and waited >= LOCK_SAY_AFTER_S:
            say(f"storage {url}: {path} is locked by {holder}; waiting up to {wait_s:.0f}s for it")
            told = True
        time.sleep(LOCK_POLL_S)


@contextmanager
def storage_errors(url: str, path: Path | None) -> Iterator[None]:
    """Turn the storage or the disk failing in the body into ``storage_failure``'s one line."""
    try:
        yield
    except NcclTuneError:
        raise
    except Exception as exc:
        failure = storage_failure(exc, url, path)
        if failure is None:
            raise
        raise failure from None
