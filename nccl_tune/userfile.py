"""Reading a file the user named (a space, a tuned YAML, a training config): one ``NcclTuneError``
line naming the file and the fix for a missing file, a folder, an unreadable file or one that is
not UTF-8 text, and for a YAML syntax error; never a traceback. Whether a folder the user
named could be created and written, asked without creating anything (``folder_problem``), and
writing a file the user named (``-o``), atomically (``write_output``).
"""

from __future__ import annotations

import os
import reprlib
import tempfile
from pathlib import Path
from typing import Any

import yaml

from nccl_tune.atomic import write_text_atomic
from nccl_tune.errors import NcclTuneError

_SNIFF_BYTES = 8192
"""A NUL byte this early means a binary file (an executable, an archive, a database)."""


def read_text(path: Path, what: str, fix: str) -> str:
    """The UTF-8 text of ``path``; ``what`` names the file in errors (``space file``, ``--baseline``)
    and ``fix`` says what to give instead."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise NcclTuneError(f"{what} {path} does not exist; {fix}") from None
    except IsADirectoryError:
        raise NcclTuneError(f"{what} {path} is a folder, not a file; {fix}") from None
    except OSError as exc:
        raise NcclTuneError(f"{what} {path}: cannot read it: {exc.strerror or exc}; {fix}") from None
    return decode_text(raw, path, what, fix)


def decode_text(raw: bytes, path: Path, what: str, fix: str) -> str:
    """``raw`` as UTF-8 text; one line naming ``path`` for binary content or other encodings."""
    if b"\0" in raw[:_SNIFF_BYTES]:
        raise NcclTuneError(f"{what} {path} is not a text file (binary content); {fix}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise NcclTuneError(
            f"{what} {path}: line {line} is not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the file as UTF-8"
        ) from None


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML syntax error in a few words, with its line when the parser knows it:
    ``line 3 YAML syntax error: did not find expected node content``."""
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1} " if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{where}YAML syntax error: {problem}"


def folder_problem(path: Path) -> str | None:
    """Why ``path`` cannot be created or written as a folder, or None; nothing is left behind (the
    nearest existing folder is probed with a temporary folder, removed at once)."""
    probe = path
    while not os.path.exists(probe):
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe != path and not probe.is_dir():
        return f"{probe} is not a folder"
    if probe == path and not path.is_dir():
        return "it is not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    try:  # the permission bits do not tell everything (root, read-only and special file systems)
        os.rmdir(tempfile.mkdtemp(prefix=".nccl-tune-check-", dir=probe))
    except OSError as exc:
        return f"{probe}: {exc.strerror or exc}"
    return None


def yaml_mapping(text: str, label: str, fix: str) -> dict[str, Any]:
    """The mapping of keys YAML ``text`` holds; one line naming ``label`` (``space file X``,
    ``--baseline X``) with ``fix`` for a syntax error, an empty document or one that holds anything
    else (a number, a list)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise NcclTuneError(f"{label}: {yaml_problem(exc)}") from None
    if data is None:
        raise NcclTuneError(f"{label} is empty; {fix}")
    if not isinstance(data, dict):
        raise NcclTuneError(
            f"{label} holds a single {type(data).__name__} ({reprlib.repr(data)}), not a YAML mapping of keys; {fix}"
        )
    return data


def refuse_non_file(path: Path) -> None:
    """One line when ``path`` names a folder, or lies under a file: writing there would fail, or (for
    the tuned file, whose predecessor is kept) move a whole folder aside."""
    if path.is_dir():
        raise NcclTuneError(f"cannot write {path}: it is a folder; give a file name, such as {path / 'tuned.yaml'}")
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise NcclTuneError(f"cannot write {path}: {parent} is a file, not a folder; choose a file in a folder")
            return


def check_writable(path: Path) -> None:
    """One-line error now when ``path`` could not be written later; nothing is created (its folder is
    made when the file is written)."""
    refuse_non_file(path)
    why = folder_problem(path.parent)
    if why is not None:
        raise NcclTuneError(f"cannot write {path} ({why}); choose a file in a folder you can write")


def write_output(path: Path, text: str) -> None:
    """Write a file the user named (``-o``) atomically; one-line error when it cannot be written."""
    refuse_non_file(path)
    try:
        write_text_atomic(path, text)
    except OSError as exc:
        raise NcclTuneError(
            f"cannot write {path} ({exc.strerror or exc}); choose a file in a folder you can write"
        ) from None
