"""``diagnose_paths``: what ``nccl-tune diagnose`` runs on each path it is given.

A path is a log file (plain or ``.gz``), a Flight Recorder dump, a trial folder, or a folder of
dumps. A path that is no regular file (a named pipe, a device) is refused before anything opens
it, and so is a file given as a log that holds no text (empty, binary, an archive; a gzip'd log
is read through). A trial folder is decided from the facts its launcher saved (``facts.json``:
stop reason, exit status, steps, the logs it read; ``stacks.json``; the dumps in it or in
``fr/``) by the same ``verdict.decide`` the launcher used, so the answer is the one in its
``result.json``; a folder without them is decided from its ``*.log`` files and ``result.json``'s
exit status. A trial that ended in its NCCL check has no log of its own: its ``result.json``
names the check's, and the check's folder is diagnosed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nccl_tune.diagnose.flight_recorder import FlightRecorderSummary, analyse_dumps, looks_like_dump
from nccl_tune.diagnose.logfiles import OUTPUT_LOG, not_a_text_log, source_name, special_file, trial_log_files
from nccl_tune.diagnose.stacks import STACKS_FILE, StackReport
from nccl_tune.diagnose.verdict import FACTS_FILE, LogFacts, TrialFacts, decide
from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import Verdict

LOG_SUFFIXES = (".log", ".out", ".err", ".txt", ".log.gz", ".txt.gz")
FR_SOURCE = "flight-recorder"


@dataclass(frozen=True)
class Diagnosis:
    """The verdict for one input path, and what was read to reach it."""

    path: Path
    verdict: Verdict
    inputs: tuple[Path, ...]
    """Log files and dumps read, in the order they were read."""
    flight_recorder: FlightRecorderSummary | None = None
    exit_code: int | None = None
    signal_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        """``path``, ``class``, ``rank``, ``evidence`` (``file:line: text`` lines), ``advice``, ``phase``,
        ``after_training``, ``cause`` (rule, subtype, details), ``flight_recorder`` (the summary or
        null), ``inputs``, ``exit_code``, ``signal_name``."""
        out: dict[str, Any] = {"path": str(self.path)}
        out.update(self.verdict.to_json())
        out["evidence"] = [str(e) for e in self.verdict.evidence]  # lines, as people read them
        out["flight_recorder"] = self.flight_recorder.to_json() if self.flight_recorder else None
        out["inputs"] = [str(p) for p in self.inputs]
        out["exit_code"] = self.exit_code
        out["signal_name"] = self.signal_name
        return out


def _status_from_result(folder: Path) -> tuple[int | None, str | None]:
    result = folder / "result.json"
    if not result.is_file():
        return None, None
    try:
        data = json.loads(result.read_text())
    except (OSError, ValueError) as exc:
        raise NcclTuneError(f"diagnose: {result} is not valid JSON ({exc}); delete it or fix it") from exc
    code = data.get("exit_code")
    sig = data.get("signal_name")
    return (int(code) if isinstance(code, int) else None), (str(sig) if sig else None)


def _where_it_ran(folder: Path) -> Path:
    """``folder``, or, for a trial folder with no facts and no log of its own whose ``result.json``
    names its logs in one folder under it (a trial that ended in its NCCL check: the check's folder
    holds what ran), that folder."""
    if (folder / FACTS_FILE).is_file() or _logs_in(folder):
        return folder
    data = _read_json(folder / "result.json")
    named = [Path(p) for p in (data or {}).get("log_paths") or ()]
    parents = {p.parent for p in named if p.is_file()}
    if len(parents) == 1:
        (inner,) = parents
        if inner != folder and folder in inner.parents:
            return inner
    return folder


def _dumps_in(folder: Path) -> list[Path]:
    found = [p for p in sorted(folder.iterdir()) if looks_like_dump(p)]
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        found += [p for p in sorted(sub.iterdir()) if looks_like_dump(p)]
    return found


def _logs_in(folder: Path) -> list[Path]:
    """The folder's log files and the SkyRL infra logs anywhere under it (a trial folder's
    ``logs/infra-*.log``); the launcher's ``output.log`` first."""
    logs = [p for p in sorted(folder.iterdir()) if p.is_file() and p.name.endswith(LOG_SUFFIXES)]
    logs += [p for p in trial_log_files(folder) if p not in logs]
    logs.sort(key=lambda p: (p.name != OUTPUT_LOG, source_name(p, folder)))
    return logs


def _facts_for_folder(folder: Path, dumps: Sequence[Path]) -> TrialFacts:
    """The facts the launcher saved (``facts.json``), else what ``result.json`` and the folder's
    logs say; with the Flight Recorder analysis and the stacks taken at a stall."""
    summary = analyse_dumps(dumps) if dumps else None
    stacks = _read_json(folder / STACKS_FILE)
    extra = dict(fr_summary=summary, stacks=StackReport.from_json(stacks))
    saved = _read_json(folder / FACTS_FILE)
    if saved is not None:
        return TrialFacts.from_json(saved, folder, **extra)
    exit_code, signal_name = _status_from_result(folder)
    logs = tuple(LogFacts(source_name(p, folder), p) for p in _logs_in(folder))
    return TrialFacts(logs=logs, exit_code=exit_code, signal_name=signal_name, **extra)


def _read_json(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise NcclTuneError(f"diagnose: {path} is not valid JSON ({exc}); delete it or fix it") from exc


def _refuse_special(path: Path) -> None:
    what = special_file(path)
    if what is not None:
        raise NcclTuneError(
            f"diagnose: {path} is {what}, not a log file; diagnose reads regular files only: save the output to a "
            "file first (`... > run.log 2>&1`) and pass that"
        )


def _check_folder_logs(folder: Path, facts: TrialFacts, dumps: Sequence[Path]) -> None:
    """Refuse a folder whose logs would be misread: one that is no regular file (``facts.json`` may
    name any path); in a folder read by its file names (no ``facts.json``, whose logs the launcher
    itself wrote and read), a ``*.log`` that is binary, and logs with no line at all when nothing
    else (an exit status, a dump) tells how the run ended. An empty log next to others (an empty
    ``.err``) is normal."""
    paths = [log.path for log in facts.logs if log.path is not None]
    for p in paths:
        _refuse_special(p)
    if (folder / FACTS_FILE).is_file() or not paths:
        return
    for p in paths:
        problem = not_a_text_log(p, empty_ok=True)
        if problem is not None:
            raise NcclTuneError(f"diagnose: {problem} (move it out of {folder}, or pass the log files one by one)")
    if facts.exit_code is None and facts.signal_name is None and not dumps:
        if all(not_a_text_log(p) is not None for p in paths):
            names = ", ".join(source_name(p, folder) for p in paths)
            raise NcclTuneError(
                f"diagnose: the logs in {folder} ({names}) hold no lines and it has no result.json exit status: "
                "nothing says how the run ended; pass the folder or log the run wrote its output to"
            )


def _diagnose(root: Path, facts: TrialFacts, dumps: Sequence[Path]) -> Diagnosis:
    summary = facts.fr_summary
    if not facts.logs:
        if summary is None:
            raise NcclTuneError(
                f"diagnose: {root} holds no log file ({', '.join('*' + s for s in LOG_SUFFIXES[:4])}) and no Flight "
                "Recorder dump; pass a log file, a trial folder or a folder of dumps"
            )
        if not summary.ranks_dumped:
            raise NcclTuneError(
                f"diagnose: no readable Flight Recorder dump in {root} ({'; '.join(summary.errors) or 'none found'})"
            )
    verdict = decide(facts)
    inputs = tuple(log.path for log in facts.logs if log.path is not None) + tuple(dumps)
    return Diagnosis(root, verdict, inputs, summary, facts.exit_code, facts.signal_name)


def diagnose_path(path: Path) -> Diagnosis:
    """Diagnose one path (see the module docstring); raises ``NcclTuneError`` for a path that does
    not exist, cannot be read, or holds nothing to diagnose."""
    path = Path(path)
    if not path.exists():
        raise NcclTuneError(f"diagnose: {path} does not exist; pass a log file, a trial folder or a folder of dumps")
    _refuse_special(path)
    try:
        if path.is_dir():
            path = _where_it_ran(path)
            dumps = _dumps_in(path)
            facts = _facts_for_folder(path, dumps)
            _check_folder_logs(path, facts, dumps)
            return _diagnose(path, facts, dumps)
        if looks_like_dump(path):
            return _diagnose(path, TrialFacts(fr_summary=analyse_dumps([path])), [path])
        problem = not_a_text_log(path)
        if problem is not None:
            raise NcclTuneError(f"diagnose: {problem}")
        return _diagnose(path, TrialFacts(logs=(LogFacts(path.name, path),)), [])
    except PermissionError as exc:
        raise NcclTuneError(f"diagnose: cannot read {exc.filename or path}: permission denied") from exc
    except (IsADirectoryError, NotADirectoryError, FileNotFoundError) as exc:
        raise NcclTuneError(f"diagnose: cannot read {exc.filename or path}: {exc.strerror}") from exc


def diagnose_paths(paths: Sequence[Path]) -> list[Diagnosis]:
    """One ``Diagnosis`` per path, in order."""
    return [diagnose_path(Path(p)) for p in paths]
