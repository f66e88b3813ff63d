"""Opening the study storage: SQLite under ``results/`` by default, any Optuna RDB URL otherwise."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import socket
import sqlite3
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import optuna
import yaml
from optuna.samplers import BaseSampler

from nccl_tune.errors import NcclTuneError
from nccl_tune.tuner.records.storage_faults import hide_password, wait_unlocked
from nccl_tune.userfile import folder_problem

S_SPACE_NAME = "space_name"
S_SPACE_SOURCE = "space_source"
S_SPACE_TEXT = "space_text"
S_COMMAND = "command"
S_TOOL_VERSION = "nccl_tune_version"
S_STUDY_UID = "study_uid"
"""A random id given to a study when it is created: its trial folder names it, so that a folder is
never taken over by another study (same name in another or a re-created database)."""
S_SPACE_DIGEST = "space_digest"
"""A digest of the space's content: a study resumes only with the space it was created with."""
SQLITE_MAGIC = b"SQLite format 3\x00"
STUDY_FILE = "study.json"
"""In a study's folder: which study its trial folders belong to (name, storage, uid)."""
LOCK_FILE = ".lock"

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def default_study_name(space_name: str, command: tuple[str, ...], results: Path) -> str:
    """A stable name for (space, command, results folder): running the same command into the same
    ``--results`` again resumes its study; another folder is another study."""
    key = [list(command), str(Path(results).resolve())]
    digest = hashlib.sha1(json.dumps(key).encode()).hexdigest()[:8]
    return f"{space_name}-{digest}"


def marker_scope(study: str, storage_url: str) -> str:
    """What every process of ``study`` in ``storage_url`` carries in its marker: the name and a digest of
    the storage (a SQLite file by its absolute path), so that a study of the same name in another
    folder or database is neither swept nor waited on; the same study always gets the same scope, so a
    resumed run still finds its own orphans."""
    path = sqlite_path(storage_url)
    where = f"sqlite:///{path.resolve()}" if path is not None else storage_url
    return f"{study}@{hashlib.sha1(where.encode()).hexdigest()[:8]}"


def sqlite_path(url: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` URL (None for other storages)."""
    if not url.startswith("sqlite:///"):
        return None
    rest = url[len("sqlite:///") :]
    if rest in ("", ":memory:"):  # an in-memory database has no file (and no lock file next to one)
        return None
    if rest.startswith("file:"):  # already a URI form: sqlite:///file:PATH?mode=ro&uri=true
        rest = unquote(rest[len("file:") :].split("?", 1)[0])
    return Path(rest)


def check_sqlite(path: Path, url: str, *, must_exist: bool, write: bool = False) -> None:
    """One-line errors for a SQLite database nccl-tune cannot use, read without writing to it: missing
    (when ``must_exist``), empty (0 bytes, when ``must_exist``), not a database, corrupt, or one without
    Optuna's tables (when ``must_exist``). A database another process holds locked against reading it
    (or, ``write``, writing it) is waited for first, with a line, then refused (``wait_unlocked``)."""
    wait_unlocked(path, url, write=write)
    if path.is_dir():
        raise NcclTuneError(f"storage {url}: {path} is a folder, not a database file")
    if not path.exists():
        if must_exist:
            raise NcclTuneError(
                f"storage {url}: no such database; run `nccl-tune run` first, or point --results/--storage at one"
            )
        return
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise NcclTuneError(f"storage {url}: cannot read {path}: {exc.strerror}") from None
    if not head:
        if must_exist:
            raise NcclTuneError(
                f"storage {url}: the database is empty (0 bytes): no study was recorded in it; "
                "point --results/--storage at the database of your study"
            )
        return
    if head != SQLITE_MAGIC:
        raise _corrupt(url, "not a SQLite database")
    tables, problem = _inspect_sqlite(path)
    if problem is not None:
        raise _corrupt(url, problem)
    if must_exist and not {"studies", "trials"} <= tables:
        raise NcclTuneError(f"storage {url}: a SQLite database without Optuna's tables: no study was recorded in it")


def _inspect_sqlite(path: Path) -> tuple[set[str], str | None]:
    """(table names, None) for a sound database, or (set(), what is wrong); opened read-only."""
    try:
        con = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True, timeout=60)
    except sqlite3.Error as exc:
        return set(), str(exc)
    try:
        check = con.execute("PRAGMA quick_check").fetchone()
        if not check or check[0] != "ok":
            return set(), str(check[0] if check else "integrity check failed")
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}, None
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc):  # a run is writing: sound as far as we can tell
            return {"studies", "trials"}, None
        return set(), str(exc)
    except sqlite3.DatabaseError as exc:
        return set(), str(exc)
    finally:
        con.close()


def _corrupt(url: str, detail: str) -> NcclTuneError:
    return NcclTuneError(
        f"storage {url}: the database is corrupt ({detail}); every trial's result is still in its trial folder "
        "(result.json, output.log): move the database aside and start a new study with --study NEW, or restore a copy"
    )


def open_storage(url: str, create: bool = True) -> optuna.storages.BaseStorage:
    """An Optuna storage for ``url``; one-line error when it cannot be used. ``create=False`` (report,
    export) never writes: a SQLite file is checked first, then opened read-only, and a missing or
    empty one is an error. ``create=True`` (run) makes the folder and the schema, one process at a time."""
    path = sqlite_path(url)
    if path is not None:
        check_sqlite(path, url, must_exist=not create, write=create)
    if path is not None and not create:
        return _rdb(f"sqlite:///file:{quote(str(path.resolve()))}?mode=ro&uri=true", url, skip_table_creation=True)
    if path is None:
        return _rdb(url, url)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NcclTuneError(f"storage {url}: cannot create folder {path.parent}: {exc.strerror}") from None
    with exclusive(path.parent / f".{path.name}.lock", f"storage {url}", wait=True):  # one schema creator at a time
        return _rdb(url, url)


_DRIVERS = {
    "postgresql": ("psycopg2", "pip install psycopg2-binary"),
    "mysql": ("MySQLdb", "pip install mysqlclient (or PyMySQL with mysql+pymysql://)"),
}
"""The driver SQLAlchemy loads for a plain ``postgresql://`` or ``mysql://`` URL, and how to install it."""


def _rdb(url: str, shown: str, **kwargs: Any) -> optuna.storages.RDBStorage:
    if url.startswith("sqlite"):
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
    logging.getLogger("sqlalchemy").setLevel(logging.ERROR)
    try:
        return optuna.storages.RDBStorage(url, **kwargs)
    except Exception as exc:  # sqlalchemy's errors vary by driver; all mean "cannot use this URL"
        shown = hide_password(shown)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        scheme = url.split(":", 1)[0]
        if "import DB access module" in first and scheme in _DRIVERS:
            module, install = _DRIVERS[scheme]
            raise NcclTuneError(
                f"storage {shown}: its database driver {module} is not installed ({install} in this environment)"
            ) from None
        raise NcclTuneError(
            f"storage {shown}: cannot open it ({hide_password(first)}); give a reachable Optuna storage URL with "
            "--storage (e.g. sqlite:///results/nccl-tune.db or postgresql://user@host/db)"
        ) from None


def _locked(lock_path: Path, what: str, *, wait: bool) -> int:
    """An open descriptor of ``lock_path`` holding its ``flock``. A lock file removed by its last holder
    while this process waited (``hold_study`` removes the lock of a refused run) is opened again."""
    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise NcclTuneError(
                f"{what}: cannot write {lock_path} ({exc.strerror}); choose a folder you can write with --results"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            who = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another nccl-tune"
            os.close(fd)
            raise NcclTuneError(f"{what} is being run by {who}; wait for it to finish or use another --study") from None
        if _same_file(fd, lock_path):
            return fd
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    """True when ``path`` still names the file open as ``fd``."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


@contextmanager
def exclusive(lock_path: Path, what: str, *, wait: bool, holder: str = "") -> Iterator[int]:
    """Hold an exclusive ``flock`` on ``lock_path`` (created if needed) for the body. The kernel releases
    it when the holder exits, however it exits, so a lock of a dead process is simply free. With
    ``wait=False`` a held lock is a one-line error naming its holder (what the holder wrote in the file);
    ``holder`` is written into the file while it is held."""
    fd = _locked(lock_path, what, wait=wait)
    try:
        if holder:
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder.encode(), 0)
        yield fd
    finally:
        if holder:
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass
        os.close(fd)  # releases the lock


def study_names(storage: optuna.storages.BaseStorage) -> list[str]:
    return [s.study_name for s in optuna.study.get_all_study_summaries(storage, include_best_trial=False)]


def load_existing(storage: optuna.storages.BaseStorage, url: str, name: str | None) -> optuna.Study:
    """An existing study by name, or the only study in the storage when ``name`` is None."""
    names = study_names(storage)
    if name is None:
        if len(names) == 1:
            name = names[0]
        elif not names:
            raise NcclTuneError(f"storage {url} holds no study yet; run `nccl-tune run -- COMMAND` first")
        else:
            raise NcclTuneError(f"storage {url} holds several studies; choose one with --study: {', '.join(names)}")
    elif name not in names:
        shown = ", ".join(names) if names else "none"
        raise NcclTuneError(f"no study named {name!r} in {url}; studies there: {shown}")
    return optuna.load_study(study_name=name, storage=storage)


def name_problem(name: str, option: str = "--study") -> str | None:
    """Why ``name`` cannot name a study (its folder under ``--results`` is named after it), or None: a
    name is one folder name, never a path."""
    if not name or not name.strip():
        return f"{option} {name!r}: a study name cannot be empty"
    bad = next((c for c in ("/", "\\", "\0") if c in name), None)
    if bad is not None or name in (".", "..") or name != name.strip():
        why = (
            f"holds {bad!r}"
            if bad is not None
            else "is not a folder name"
            if name in (".", "..")
            else "has spaces around it"
        )
        return (
            f"{option} {name!r}: a study name is a name, not a path ({why}); its trial folders go under --results, "
            "choose where with --results (e.g. --results runs/x --study mystudy)"
        )
    return None


def study_folder(results: Path, study: str) -> Path:
    """The folder of ``study``'s trial folders under ``results``; refused when ``study`` is not a name
    (``name_problem``), so that nothing is written outside ``results``."""
    problem = name_problem(study)
    if problem is not None:
        raise NcclTuneError(problem)
    return results / study


def space_digest(text: str) -> str:
    """A digest of a space's content (its parsed YAML: comments and layout do not count)."""
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError:
        data = text
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


@contextmanager
def hold_study(folder: Path, name: str) -> Iterator[None]:
    """Run study ``name`` alone: an exclusive lock in its folder for the body, so that a second run of
    the same study started at the same moment gets a one-line error naming the first. Folders made
    here (the study folder, a new ``--results``) are removed again when the run left nothing in them
    (it was refused before the study was created); a folder that holds anything else is kept."""
    made = missing_folders(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise NcclTuneError(
            f"cannot create the study folder {folder} ({exc.strerror}); choose a folder you can write with --results"
        ) from None
    holder = f"nccl-tune pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}"
    try:
        with exclusive(folder / LOCK_FILE, f"study {name!r}", wait=False, holder=holder):
            try:
                yield
            finally:
                if made:
                    _drop_lone_lock(folder)
    finally:
        remove_empty(made)


def missing_folders(folder: Path) -> list[Path]:
    """``folder`` and those of its parents that do not exist yet, deepest first."""
    missing = []
    for path in (folder, *folder.parents):
        if os.path.lexists(path):
            break
        missing.append(path)
    return missing


def _drop_lone_lock(folder: Path) -> None:
    """Remove the study lock (still held) when it is all ``folder`` holds."""
    try:
        if [p.name for p in folder.iterdir()] == [LOCK_FILE]:
            (folder / LOCK_FILE).unlink()
    except OSError:
        pass


def remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (deepest first) while they are empty; stop at the first that is not."""
    for path in folders:
        try:
            path.rmdir()
        except OSError:
            return


def _read_claim(folder: Path) -> dict[str, Any] | None:
    path = folder / STUDY_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict) or not data.get(S_STUDY_UID):
        raise NcclTuneError(
            f"{path} cannot be read (it names the study its trial folders belong to); restore it from a copy, "
            "or run into another --results folder"
        )
    return data


def claim_folder(folder: Path, url: str, name: str, uid: str | None, existed: bool) -> None:
    """Refuse to put ``name``'s trials (``uid``, None for a study not created yet) into a folder that
    holds another study's: the same name in another, an emptied or a re-created database."""
    claim = _read_claim(folder)
    if claim is not None:
        if uid is not None and claim[S_STUDY_UID] == uid:
            return
        where = (
            f"an earlier study {claim.get('study')!r} that {url} no longer holds (emptied or re-created?)"
            if claim.get("storage") == url
            else f"study {claim.get('study')!r} of {claim.get('storage')}, not of {url}"
        )
        raise NcclTuneError(
            f"{folder} holds the trials of {where}; nothing was overwritten: use another --study or --results, "
            "or --storage with the database that holds that study"
        )
    if not existed and any(folder.glob("trial-[0-9]*")):
        raise NcclTuneError(
            f"{folder} already holds trial folders of a study that {url} does not hold; nothing was overwritten: "
            "use another --study or --results, or --storage with the database that holds it"
        )


def _write_claim(folder: Path, url: str, name: str, uid: str) -> None:
    path = folder / STUDY_FILE
    tmp = folder / f".{STUDY_FILE}.tmp{os.getpid()}"
    tmp.write_text(json.dumps({"study": name, "storage": url, S_STUDY_UID: uid}, indent=2) + "\n")
    os.replace(tmp, path)


def _check_resumable(
    attrs: dict[str, Any], name: str, space_name: str, space_text: str, command: tuple[str, ...]
) -> None:
    """One-line errors when an existing study was created for another command or space."""
    if attrs.get(S_COMMAND) not in (None, list(command)):
        raise NcclTuneError(
            f"study {name!r} was created for the command {' '.join(attrs[S_COMMAND])!r}; "
            f"use another --study for {' '.join(command)!r}"
        )
    if attrs.get(S_SPACE_NAME) not in (None, space_name):
        raise NcclTuneError(
            f"study {name!r} was created with the space {attrs[S_SPACE_NAME]!r}, not {space_name!r}; "
            "use another --study or the same --space"
        )
    stored = attrs.get(S_SPACE_DIGEST) or (space_digest(attrs[S_SPACE_TEXT]) if attrs.get(S_SPACE_TEXT) else None)
    if stored is not None and stored != space_digest(space_text):
        raise NcclTuneError(
            f"study {name!r} was created with other content for the space {space_name!r} "
            f"({attrs.get(S_SPACE_SOURCE, '?')}): resuming would mix trials of two spaces; use --study NEW for "
            "this content, or restore the original file"
        )


def check_results(results: Path) -> None:
    """One-line error when ``--results`` cannot be created or written; nothing is created."""
    why = folder_problem(results)
    if why is not None:
        raise NcclTuneError(
            f"--results {results}: cannot create or write it ({why}); choose a folder you can write with --results"
        )


def check_storage_writable(url: str) -> None:
    """One-line error when a SQLite storage could not be created, or is not a sound database; nothing
    is created (other storages are servers: only opening them tells)."""
    path = sqlite_path(url)
    if path is None:
        return
    check_sqlite(path, url, must_exist=False)
    why = None if path.exists() else folder_problem(path.parent)
    if why is not None:
        raise NcclTuneError(
            f"storage {url}: cannot create the database ({why}); choose a folder you can write with "
            "--results, or another --storage"
        )


def peek_storage(url: str) -> optuna.storages.BaseStorage | None:
    """The storage as it is now, for checks, with nothing written: a SQLite database read-only, an empty
    storage when its file does not exist yet or holds no study, None for other storages."""
    path = sqlite_path(url)
    if path is None:
        return None
    check_sqlite(path, url, must_exist=False)
    if not path.exists() or path.stat().st_size == 0 or not {"studies", "trials"} <= _inspect_sqlite(path)[0]:
        return optuna.storages.InMemoryStorage()
    return open_storage(url, create=False)


def check_study(
    storage: optuna.storages.BaseStorage,
    url: str,
    name: str,
    *,
    space_name: str,
    space_text: str,
    command: tuple[str, ...],
    folder: Path,
) -> tuple[bool, dict[str, Any]]:
    """Whether study ``name`` exists, and its attributes; refused when it was created for another command
    or space content, or when ``folder`` holds another study's trials. Reads only."""
    existed = name in study_names(storage)
    attrs = optuna.load_study(study_name=name, storage=storage).user_attrs if existed else {}
    if existed:
        _check_resumable(attrs, name, space_name, space_text, command)
    claim_folder(folder, url, name, attrs.get(S_STUDY_UID), existed)
    return existed, attrs


def create_or_resume(
    storage: optuna.storages.BaseStorage,
    url: str,
    name: str,
    sampler: BaseSampler,
    *,
    space_name: str,
    space_source: str,
    space_text: str,
    command: tuple[str, ...],
    folder: Path,
) -> tuple[optuna.Study, bool]:
    """Open study ``name`` (creating it if needed) whose trial folders go under ``folder``; True when it
    already existed. Refused, before anything is written, when the study was created for another
    command or space content, or when ``folder`` holds another study's trials."""
    existed, attrs = check_study(
        storage, url, name, space_name=space_name, space_text=space_text, command=command, folder=folder
    )
    uid = attrs.get(S_STUDY_UID)
    study = optuna.create_study(
        study_name=name, storage=storage, sampler=sampler, direction="maximize", load_if_exists=True
    )
    if not existed:
        from nccl_tune import __version__

        study.set_user_attr(S_SPACE_NAME, space_name)
        study.set_user_attr(S_SPACE_SOURCE, space_source)
        study.set_user_attr(S_SPACE_TEXT, space_text)
        study.set_user_attr(S_COMMAND, list(command))
        study.set_user_attr(S_TOOL_VERSION, __version__)
    if S_SPACE_DIGEST not in attrs:
        study.set_user_attr(S_SPACE_DIGEST, space_digest(space_text))
    if uid is None:  # a new study, or one created before studies had an id: its folder is its own from now
        uid = uuid.uuid4().hex
        study.set_user_attr(S_STUDY_UID, uid)
    _write_claim(folder, url, name, uid)
    return study, existed
