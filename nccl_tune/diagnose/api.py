"""``diagnose_paths``: what ``nccl-tune diagnose`` runs on each path it is given.

A path is a log file (plain or ``.gz``), a Flight Recorder dump, a trial folder (its ``*.log``
files, ``result.json`` for the exit status, and dumps in it or in ``fr/``), or a folder of dumps.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator, Sequence

from nccl_tune.diagnose.classify import READ_BYTES, LogClassifier
from nccl_tune.diagnose.flight_recorder import FlightRecorderSummary, analyse_dumps, looks_like_dump
from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import Evidence, FailureClass, Verdict

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
        """``path``, ``class``, ``rank``, ``evidence``, ``advice``, ``phase``, ``after_training``,
        ``flight_recorder`` (the summary or null), ``inputs``, ``exit_code``, ``signal_name``."""
        out: dict[str, Any] = {"path": str(self.path)}
        out.update(self.verdict.to_json())
        out["flight_recorder"] = self.flight_recorder.to_json() if self.flight_recorder else None
        out["inputs"] = [str(p) for p in self.inputs]
        out["exit_code"] = self.exit_code
        out["signal_name"] = self.signal_name
        return out


def _open_binary(path: Path) -> IO[bytes]:
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")
    return open(path, "rb", buffering=0)


def _chunks(path: Path) -> Iterator[bytes]:
    try:
        with _open_binary(path) as fh:
            while chunk := fh.read(READ_BYTES):
                yield chunk
    except (OSError, EOFError) as exc:
        raise NcclTuneError(f"diagnose: cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc


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


def _dumps_in(folder: Path) -> list[Path]:
    found = [p for p in sorted(folder.iterdir()) if looks_like_dump(p)]
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        found += [p for p in sorted(sub.iterdir()) if looks_like_dump(p)]
    return found


def _logs_in(folder: Path) -> list[Path]:
    logs = [p for p in sorted(folder.iterdir()) if p.is_file() and p.name.endswith(LOG_SUFFIXES)]
    # the launcher's merged log first: its lines are in the order the events happened
    logs.sort(key=lambda p: (p.name != "output.log", p.name))
    return logs


def _fr_verdict(summary: FlightRecorderSummary) -> Verdict:
    """A verdict from dumps alone (no log)."""
    evidence = [Evidence(0, summary.note, FR_SOURCE)]
    if summary.library_verdict:
        evidence.append(Evidence(0, summary.library_verdict, FR_SOURCE))
    fr = summary.to_json()
    if summary.mismatch:
        cls = FailureClass.COLLECTIVE_MISMATCH
        advice = (
            f"Ranks disagree on {summary.op} #{summary.seq}: rank {summary.culprit_rank} issued a different collective "
            "or sizes; make every rank issue the same collectives in the same order (TORCH_DISTRIBUTED_DEBUG=DETAIL)"
        )
    else:
        cls = FailureClass.COLLECTIVE_TIMEOUT
        if summary.culprit_rank is not None:
            advice = (
                f"Rank {summary.culprit_rank} is behind ({summary.culprit_reason}) while the others wait in "
                f"{summary.op} #{summary.seq}: look at that rank's last log lines or `py-spy dump --pid <pid>`; lower "
                "SKYRL_WORKER_NCCL_TIMEOUT_IN_S to fail faster instead of raising it"
            )
        else:
            advice = (
                "Every rank reached the same collective and none is behind in the dumps: the collective itself is stuck "
                "(NCCL transport or network); rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"
            )
    return Verdict(cls, rank=summary.culprit_rank, evidence=tuple(evidence), advice=advice, flight_recorder=fr)


def _diagnose_logs(
    root: Path, logs: Sequence[Path], dumps: Sequence[Path], exit_code: int | None, signal_name: str | None
) -> Diagnosis:
    summary = analyse_dumps(dumps) if dumps else None
    if logs:
        clf = LogClassifier()
        for log in logs:
            clf.set_source(log.name)
            clf.feed_bytes(_chunks(log))
        verdict = clf.verdict(exit_code=exit_code, signal_name=signal_name, fr_summary=summary)
    elif summary is not None:
        if not summary.ranks_dumped:
            raise NcclTuneError(
                f"diagnose: no readable Flight Recorder dump in {root} ({'; '.join(summary.errors) or 'none found'})"
            )
        verdict = _fr_verdict(summary)
    else:
        raise NcclTuneError(
            f"diagnose: {root} holds no log file ({', '.join('*' + s for s in LOG_SUFFIXES[:4])}) and no Flight Recorder "
            "dump; pass a log file, a trial folder or a folder of dumps"
        )
    return Diagnosis(root, verdict, tuple(logs) + tuple(dumps), summary, exit_code, signal_name)


def diagnose_path(path: Path) -> Diagnosis:
    """Diagnose one path (see the module docstring); raises ``NcclTuneError`` for a path that does
    not exist, cannot be read, or holds nothing to diagnose."""
    path = Path(path)
    if not path.exists():
        raise NcclTuneError(f"diagnose: {path} does not exist; pass a log file, a trial folder or a folder of dumps")
    try:
        if path.is_dir():
            exit_code, signal_name = _status_from_result(path)
            return _diagnose_logs(path, _logs_in(path), _dumps_in(path), exit_code, signal_name)
        if looks_like_dump(path):
            return _diagnose_logs(path, [], [path], None, None)
        with open(path, "rb"):
            pass
        return _diagnose_logs(path, [path], [], None, None)
    except PermissionError as exc:
        raise NcclTuneError(f"diagnose: cannot read {exc.filename or path}: permission denied") from exc
    except (IsADirectoryError, NotADirectoryError, FileNotFoundError) as exc:
        raise NcclTuneError(f"diagnose: cannot read {exc.filename or path}: {exc.strerror}") from exc


def diagnose_paths(paths: Sequence[Path]) -> list[Diagnosis]:
    """One ``Diagnosis`` per path, in order."""
    return [diagnose_path(Path(p)) for p in paths]
