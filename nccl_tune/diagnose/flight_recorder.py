"""Reading PyTorch Flight Recorder dumps: which rank is behind, in which collective, and whether
the ranks disagree on it.

A dump is the per-rank pickle PyTorch writes to ``<TORCH_FR_DUMP_TEMP_FILE><rank>`` (on an NCCL
watchdog timeout with ``TORCH_NCCL_DUMP_ON_TIMEOUT=1``, or on demand through
``torch._C._distributed_c10d._dump_fr_trace()``; gloo collectives are recorded too). Two analyses:

- the library's own (``torch.distributed.flight_recorder.components``), run in-process on a
  normalised copy of the dumps when every rank dumped; its findings (``Culprit rank 1; Error type:
  COLLECTIVE_TYPE_MISMATCH``, ``Not all ranks joining collective``) are kept verbatim;
- ours, which also works when some dumps are missing (the library then only says it cannot decide):
  the last collective each rank entered and completed per process group, the ranks that never
  entered the collective the others wait in, ranks that entered a different collective or sizes
  at the same sequence number, and the ranks whose dump is missing (the likely culprits).

Dumps are read with an unpickler that refuses every global, so a dump cannot run code. The user's
files are never modified; normalisation works on copies in memory.
"""

from __future__ import annotations

import argparse
import ast
import copy
import logging
import pickle
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from nccl_tune.diagnose.logfiles import PICKLE_MAGICS

_TRAILING_RANK = re.compile(r"(\d+)$")
_LIB_LOCK = threading.Lock()


@dataclass(frozen=True)
class RankState:
    """What one rank's dump says about one process group."""

    rank: int
    process_group: str
    last_entered_seq: int | None
    """Highest collective sequence number the rank enqueued in this group."""
    last_completed_seq: int | None
    """Highest sequence number the rank saw complete (``pg_status`` when present, else entry states)."""
    last_op: str | None
    """The collective it entered last (``all_reduce``, ``_allgather_base``, ...)."""
    entries: int


@dataclass(frozen=True)
class FlightRecorderSummary:
    """The verdict of the Flight Recorder dumps of one run."""

    dumps: tuple[str, ...] = ()
    ranks_dumped: tuple[int, ...] = ()
    ranks_expected: tuple[int, ...] = ()
    ranks_missing: tuple[int, ...] = ()
    """Members of the process groups with no dump: a rank that died or hung too hard to dump."""
    analysis: str = "none"
    """``library`` (every rank dumped, torch's analysis ran), ``partial`` (ours only) or ``none``."""
    culprit_rank: int | None = None
    culprit_ranks: tuple[int, ...] = ()
    culprit_reason: str = ""
    """``never entered``, ``different collective``, ``different sizes``, ``missing dump``."""
    op: str | None = None
    seq: int | None = None
    process_group: str | None = None
    input_sizes: Any = None
    output_sizes: Any = None
    backend: str | None = None
    mismatch: bool = False
    mismatch_kind: str | None = None
    library_verdict: str = ""
    """The library's finding, one line (empty when it did not run or found nothing)."""
    library_log: tuple[str, ...] = ()
    per_rank: tuple[RankState, ...] = ()
    errors: tuple[str, ...] = ()
    """Dumps that could not be read, and why."""
    note: str = ""
    """One line for a person: what the dumps show."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists)."""
        out = asdict(self)
        out["per_rank"] = [asdict(r) for r in self.per_rank]
        for k, v in list(out.items()):
            if isinstance(v, tuple):
                out[k] = list(v)
        return out


# --- reading ----------------------------------------------------------------------------------


class _NoGlobalsUnpickler(pickle.Unpickler):
    """Unpickles plain containers only: a dump needs no class, so none may be loaded."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102 - pickle hook
        raise pickle.UnpicklingError(f"a Flight Recorder dump holds no objects, found {module}.{name}")


def rank_from_name(path: Path) -> int | None:
    """The rank a dump file is for: the digits its name ends with (``nccl_trace_rank_3`` -> 3)."""
    m = _TRAILING_RANK.search(path.name)
    return int(m.group(1)) if m else None


def looks_like_dump(path: Path) -> bool:
    """True for a file named ``<prefix><rank>`` that starts like a pickle (the dump format)."""
    if rank_from_name(path) is None or not path.is_file():
        return False
    try:
        with open(path, "rb") as fh:
            return fh.read(2).startswith(PICKLE_MAGICS)
    except OSError:
        return False


def load_dump(path: Path) -> dict[str, Any]:
    """One dump as a dict with ``entries``, ``version`` and ``pg_config``; raises ``ValueError``."""
    try:
        with open(path, "rb") as fh:
            data = _NoGlobalsUnpickler(fh).load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError) as exc:
        raise ValueError(f"{path}: not a readable Flight Recorder dump ({exc})") from exc
    if not isinstance(data, dict) or "entries" not in data:
        raise ValueError(f"{path}: not a Flight Recorder dump (no 'entries')")
    data.setdefault("pg_config", {})
    data.setdefault("version", "")
    return data


def _ranks_of(pg: Any) -> list[int]:
    ranks = pg.get("ranks") if isinstance(pg, dict) else None
    if isinstance(ranks, str):
        try:
            ranks = ast.literal_eval(ranks)
        except (ValueError, SyntaxError):
            return []
    return [int(r) for r in ranks or []]


def _pg_label(entry: dict[str, Any]) -> str:
    name, desc = (list(entry.get("process_group") or ("?", "")) + [""])[:2]
    return f"{name}:{desc}" if desc and desc != "undefined" else str(name)


def _op(entry: dict[str, Any]) -> tuple[str | None, str]:
    backend, _, name = str(entry.get("profiling_name", "")).partition(":")
    return (backend or None), name.split(" ")[0]


def normalise(dump: dict[str, Any]) -> dict[str, Any]:
    """A copy whose ``pg_config`` names its groups the way its entries do.

    torch 2.13's gloo dumps name the default group ``''`` in ``pg_config`` while their entries say
    ``'0'``; the library then cannot match them. The unreferenced config entry is renamed to the
    unresolved name when the pairing is unambiguous."""
    out = copy.deepcopy(dump)
    cfg = out.get("pg_config") or {}
    used = {str((e.get("process_group") or ("",))[0]) for e in out.get("entries") or ()}
    unresolved = sorted(used - set(cfg))
    unreferenced = [k for k in cfg if k not in used]
    if len(unresolved) == 1 and len(unreferenced) == 1 and _ranks_of(cfg[unreferenced[0]]):
        old, new = unreferenced[0], unresolved[0]
        desc = next(
            (e["process_group"][1] for e in out["entries"] if str(e["process_group"][0]) == new),
            cfg[old].get("desc", ""),
        )
        cfg[new] = dict(cfg.pop(old), name=new, desc=desc)
        out["pg_config"] = cfg
    return out


def normalise_all(dumps: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Copies of every rank's dump made consistent with each other for the library's matcher.

    Beyond ``normalise``: a group the entries use but ``pg_config`` lacks (gloo dumps of a job with
    ``new_group`` list only ``''`` with no ranks) gets the ranks whose entries use it, across all
    dumps; unreferenced groups with no ranks are dropped. A member that never issued a collective
    in such a group cannot be seen, which the matcher then reports as a mismatch of membership."""
    out = {rank: normalise(d) for rank, d in dumps.items()}
    users: dict[str, set[int]] = defaultdict(set)
    descs: dict[str, str] = {}
    for rank, d in out.items():
        for e in d["entries"]:
            name = str(e["process_group"][0])
            users[name].add(rank)
            descs.setdefault(name, str(e["process_group"][1]))
    for rank, d in out.items():
        cfg = d.setdefault("pg_config", {})
        for name in [k for k in cfg if k not in users and not _ranks_of(cfg[k])]:
            del cfg[name]
        for name, ranks in users.items():
            if rank in ranks and (name not in cfg or not _ranks_of(cfg[name])):
                cfg[name] = {"name": name, "desc": descs[name], "ranks": str(sorted(ranks))}
    return out


# --- our own analysis -------------------------------------------------------------------------


def _completed_seq(dump: dict[str, Any], pg_name: str, entries: list[dict[str, Any]]) -> int | None:
    status = (dump.get("pg_status") or {}).get(pg_name)
    if isinstance(status, dict) and isinstance(status.get("last_completed_collective"), int):
        return status["last_completed_collective"]
    done = [e["collective_seq_id"] for e in entries if e.get("state") == "completed"]
    return max(done) if done else None


def _states(dumps: dict[int, dict[str, Any]]) -> list[RankState]:
    out = []
    for rank in sorted(dumps):
        dump = dumps[rank]
        by_pg: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for e in dump["entries"]:
            if not e.get("is_p2p"):
                by_pg[str(e["process_group"][0])].append(e)
        for pg_name, entries in sorted(by_pg.items()):
            last = max(entries, key=lambda e: e.get("collective_seq_id", -1))
            out.append(
                RankState(
                    rank=rank,
                    process_group=_pg_label(last),
                    last_entered_seq=last.get("collective_seq_id"),
                    last_completed_seq=_completed_seq(dump, pg_name, entries),
                    last_op=_op(last)[1],
                    entries=len(entries),
                )
            )
    return out


@dataclass
class _Finding:
    culprits: list[int] = field(default_factory=list)
    reason: str = ""
    op: str | None = None
    seq: int | None = None
    pg: str | None = None
    input_sizes: Any = None
    output_sizes: Any = None
    backend: str | None = None
    mismatch: bool = False
    mismatch_kind: str | None = None


def _own_analysis(dumps: dict[int, dict[str, Any]], expected: set[int]) -> _Finding:
    """Mismatch at a shared sequence number first, then the ranks behind the others."""
    # (pg, seq) -> rank -> entry
    table: dict[tuple[str, int], dict[int, dict[str, Any]]] = defaultdict(dict)
    for rank, dump in dumps.items():
        for e in dump["entries"]:
            if e.get("is_p2p"):
                continue
            table[(str(e["process_group"][0]), int(e["collective_seq_id"]))][rank] = e
    for pg, seq in sorted(table, key=lambda k: (k[1], k[0])):
        at = table[(pg, seq)]
        if len(at) < 2:
            continue
        sig = {r: (_op(e)[1], repr(e.get("input_sizes"))) for r, e in at.items()}
        counts = Counter(sig.values())
        if len(counts) > 1:
            majority = counts.most_common(1)[0][0]
            odd = sorted(r for r, s in sig.items() if s != majority)
            ref = next(e for r, e in at.items() if sig[r] == majority)
            kinds = {"different collective" if sig[r][0] != majority[0] else "different sizes" for r in odd}
            kind = "different collective" if "different collective" in kinds else "different sizes"
            return _Finding(
                culprits=odd,
                reason=kind,
                op=_op(ref)[1],
                seq=seq,
                pg=_pg_label(ref),
                input_sizes=ref.get("input_sizes"),
                output_sizes=ref.get("output_sizes"),
                backend=_op(ref)[0],
                mismatch=True,
                mismatch_kind="COLLECTIVE_TYPE_MISMATCH"
                if kind == "different collective"
                else "SIZE_OR_SYNTAX_MISMATCH",
            )
    # ranks behind: per group, the highest sequence number anyone entered
    members: dict[str, set[int]] = defaultdict(set)
    for dump in dumps.values():
        for name, cfg in (dump.get("pg_config") or {}).items():
            members[str(name)].update(_ranks_of(cfg))
    best: _Finding | None = None
    for pg in sorted({k[0] for k in table}):
        seqs = {}
        for rank in dumps:
            mine = [s for (p, s), at in table.items() if p == pg and rank in at]
            if mine:
                seqs[rank] = max(mine)
        if not seqs:
            continue
        top = max(seqs.values())
        behind = sorted(r for r, s in seqs.items() if s < top)
        ref_rank = next(r for r, s in seqs.items() if s == top)
        ref = table[(pg, top)][ref_rank]
        group = members.get(pg) or members.get("") or expected
        missing = sorted(set(group) - set(dumps)) if group else []
        finding = _Finding(
            culprits=behind or missing,
            reason="never entered" if behind else ("missing dump" if missing else ""),
            op=_op(ref)[1],
            seq=top,
            pg=_pg_label(ref),
            input_sizes=ref.get("input_sizes"),
            output_sizes=ref.get("output_sizes"),
            backend=_op(ref)[0],
        )
        if best is None or (finding.culprits and not best.culprits):
            best = finding
    return best or _Finding()


# --- the library's analysis -------------------------------------------------------------------


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(record.getMessage())
        except Exception:  # a malformed record must not break the analysis
            pass


@contextmanager
def _captured_library_log() -> Iterator[_ListHandler]:
    """Route the library's ``Flight Recorder`` logger (which prints to stderr) into a list."""
    from torch.distributed.flight_recorder.components.fr_logger import FlightRecorderLogger

    FlightRecorderLogger()  # the singleton attaches its stderr handler on first use: let it, then swap
    lg = logging.getLogger("Flight Recorder")
    handler = _ListHandler()
    saved, saved_level, saved_prop = lg.handlers[:], lg.level, lg.propagate
    lg.handlers = [handler]
    lg.setLevel(logging.INFO)
    lg.propagate = False
    try:
        yield handler
    finally:
        lg.handlers, lg.propagate = saved, saved_prop
        lg.setLevel(saved_level)


def _library_analysis(dumps: dict[int, dict[str, Any]], incomplete: bool) -> tuple[_Finding | None, list[str], str]:
    """Run torch's matcher on normalised copies; (finding, log lines, error text)."""
    with _LIB_LOCK, _captured_library_log() as log:
        try:
            from torch.distributed.flight_recorder.components.builder import build_db
        except ImportError as exc:
            return None, [], f"torch's Flight Recorder analysis is unavailable: {exc}"
        details = {}
        version = ""
        for rank, norm in sorted(normalise_all(dumps).items()):
            version = version or str(norm.get("version", ""))
            details[f"rank_{rank}"] = {
                "host_name": f"host_rank{rank}",
                "rank": rank,
                "entries": norm["entries"],
                "version": norm.get("version", ""),
                "pg_config": norm.get("pg_config") or {},
            }
        args = argparse.Namespace(
            verbose=False,
            just_print_entries=False,
            allow_incomplete_ranks=incomplete,
            mismatch_cap=10,
            selected_ranks=None,
            pg_filters=None,
            print_stack_trace=False,
            transform_ft=False,
            group_world_size=None,
            output=None,
        )
        try:
            db = build_db(details, args, version)
        except (AssertionError, KeyError, ValueError, IndexError, TypeError) as exc:
            return None, list(log.lines), f"torch's Flight Recorder analysis failed: {exc}"
        lines = list(log.lines)
    bad = [c for c in db.collectives if not c.pass_check]
    if not bad:
        return _Finding(), lines, ""
    first = bad[0]
    backend, _, op = str(first.collective_name).partition(":")
    finding = _Finding(
        op=op.split(" ")[0],
        seq=first.collective_seq_id,
        pg=first.pg_desc,
        input_sizes=first.input_sizes,
        output_sizes=first.output_sizes,
        backend=backend or None,
    )
    if first.mismatch_collectives:
        finding.culprits = sorted(int(r) for r in first.mismatch_collectives)
        kinds = [getattr(c.type_of_mismatch, "state", None) for c in first.mismatch_collectives.values()]
        names = sorted({k.name for k in kinds if k is not None})
        finding.mismatch_kind = names[0] if names else "MISMATCH"
        finding.mismatch = finding.mismatch_kind != "COLLECTIVE_STATE_MISMATCH"
        finding.reason = "different collective" if "COLLECTIVE_TYPE_MISMATCH" in names else "mismatch"
    elif first.missing_ranks:
        finding.culprits = sorted(int(r) for r in first.missing_ranks)
        finding.reason = "never entered"
    return finding, lines, ""


def _verdict_line(lines: list[str]) -> str:
    keep = [
        ln.strip()
        for ln in lines
        if ln.strip()
        and not ln.startswith(("tabulate", "internal record id", "collective stack trace"))
        and " at " not in ln
    ]
    head = [
        ln
        for ln in keep
        if ln.startswith(("Not all ranks", "Collective sequence number", "We cannot decide", "No errors found"))
    ]
    detail = [ln for ln in keep if ln.startswith(("error msg:", "missing ranks:", "collective:", "group info:"))]
    return "; ".join(head[:1] + detail[:3]) if head else ""


# --- entry point ------------------------------------------------------------------------------


def analyse_dumps(paths: Sequence[Path]) -> FlightRecorderSummary:
    """Analyse one run's per-rank dumps (pure: reads the files, changes nothing)."""
    paths = [Path(p) for p in paths]
    dumps: dict[int, dict[str, Any]] = {}
    errors: list[str] = []
    for p in sorted(paths):
        rank = rank_from_name(p)
        if rank is None:
            errors.append(f"{p}: the file name does not end with a rank number")
            continue
        try:
            dumps[rank] = load_dump(p)
        except ValueError as exc:
            errors.append(str(exc))
    if not dumps:
        return FlightRecorderSummary(
            dumps=tuple(map(str, paths)), errors=tuple(errors), note="no readable Flight Recorder dump"
        )
    expected: set[int] = set()
    for dump in dumps.values():
        for cfg in (dump.get("pg_config") or {}).values():
            expected.update(_ranks_of(cfg))
    expected |= set(range(max(dumps) + 1))  # global ranks are 0..N-1: a gap is a rank that did not dump
    missing = sorted(expected - set(dumps))
    states = _states(dumps)
    own = _own_analysis(dumps, expected)

    lib, lib_lines, lib_error = (None, [], "")
    if not missing:
        lib, lib_lines, lib_error = _library_analysis(dumps, incomplete=False)
    if lib_error:
        errors.append(lib_error)

    analysis = "library" if lib is not None else "partial"
    finding = own
    if lib is not None and (lib.culprits or lib.mismatch):
        finding = lib
        # the library names sizes and groups the way it matched them; keep our op names when it has none
        finding.op = finding.op or own.op
    elif lib is not None and not (own.culprits or own.mismatch):
        finding = lib
    if missing and not finding.culprits:
        finding.culprits, finding.reason = missing, "missing dump"
    culprit = finding.culprits[0] if len(finding.culprits) == 1 else None
    summary = FlightRecorderSummary(
        dumps=tuple(str(p) for p in sorted(paths)),
        ranks_dumped=tuple(sorted(dumps)),
        ranks_expected=tuple(sorted(expected)),
        ranks_missing=tuple(missing),
        analysis=analysis,
        culprit_rank=culprit,
        culprit_ranks=tuple(finding.culprits),
        culprit_reason=finding.reason,
        op=finding.op,
        seq=finding.seq,
        process_group=finding.pg,
        input_sizes=finding.input_sizes,
        output_sizes=finding.output_sizes,
        backend=finding.backend,
        mismatch=finding.mismatch,
        mismatch_kind=finding.mismatch_kind,
        library_verdict=_verdict_line(lib_lines),
        library_log=tuple(ln for ln in lib_lines if ln.strip())[:40],
        per_rank=tuple(states),
        errors=tuple(errors),
    )
    return _with_note(summary)


def _with_note(s: FlightRecorderSummary) -> FlightRecorderSummary:
    where = f"{s.op} #{s.seq}" if s.op and s.seq is not None else "the last collective"
    if s.process_group:
        where += f" (pg {s.process_group})"
    who = ", ".join(map(str, s.culprit_ranks))
    if s.mismatch:
        note = f"ranks disagree at {where}: rank(s) {who} made a call with {s.culprit_reason or 'a mismatch'}"
    elif s.culprit_reason == "never entered":
        note = f"rank(s) {who} never entered {where}; the others wait in it"
    elif s.culprit_reason == "missing dump":
        note = f"no dump from rank(s) {who}, the likely culprit(s); the others reached {where}"
    elif s.ranks_dumped:
        note = f"every rank reached {where}; no rank is behind in the dumps"
    else:
        note = "no readable Flight Recorder dump"
    if s.ranks_missing and s.culprit_reason != "missing dump":
        note += f"; no dump from rank(s) {', '.join(map(str, s.ranks_missing))}"
    note += f" [{s.analysis} analysis of {len(s.ranks_dumped)} dump(s)]"
    return replace(s, note=note)
