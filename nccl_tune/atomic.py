"""Atomic file writes: a reader (or a tuner killed half-way) sees the old file or the new one,
never a part of one.

The content goes to a hidden temporary file next to the target (same file system), is flushed to
disk, and is renamed over the target. The parent folder is created when missing.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Replace ``path`` with ``data`` in one rename; return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "xb") as fh:  # the umask's mode, like any file the user writes
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.filename is None:  # a failed write names no file: name the one it was for
            raise OSError(exc.errno, exc.strerror, str(target)) from exc
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Replace ``path`` with ``text`` (UTF-8) in one rename; return the path."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> Path:
    """Replace ``path`` with ``data`` as indented JSON (values JSON cannot hold as their ``str``)."""
    return write_text_atomic(path, json.dumps(data, indent=2, default=str) + "\n")
