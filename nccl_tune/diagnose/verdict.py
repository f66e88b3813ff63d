"""One verdict route: ``decide(facts) -> Verdict``.

Every launcher (local, Ray, the in-process model) and ``nccl-tune diagnose`` reach a trial's
class through this one pure function of the facts: every log of the trial (by file name, read
from a path or given as lines), why supervision stopped, the exit status, the host-memory peak,
the Flight Recorder analysis, and the ranks' stacks taken at a stall. A launcher saves the facts
that are not in the logs as ``facts.json`` in the trial folder, so ``diagnose TRIAL_DIR`` replays
the same decision and agrees with ``result.json``. ``classify_log``/``classify_file`` take the same
route for one log and its exit status.

The rules, by stop reason:

- measured (the launcher stopped it after its measured steps): ``ok``;
- budget or early stop: ``budget``; interrupted: ``interrupted``; the command could not be
  started: ``config_error``;
- stall or start-up deadline: a root cause in the logs wins (an OOM that left the other ranks
  waiting), and so does a process's death (a segfault, a signal, a dead actor or engine: the
  rest waited for it, ``crash`` naming its rank); a logged exception alone is no death, since a
  process may print one and go on. Else ``hang`` naming the rank whose stack is elsewhere
  (``diagnose.stacks``) with its stack, the open phase and the last lines;
- the command exited (or the stop reason is unknown, e.g. a log given to ``diagnose``): the logs'
  verdict (``classify``: a failed exit status or a log ending in errors is never ``ok``); an exit
  0 before the measured steps is ``config_error`` when the command said training was done (its
  data ran out), else ``crash``; exit 126/127 with no better cause: ``config_error``;
- no stop reason and no exit status (a bare log): ``ok`` needs positive evidence of an end in the
  log, the trainer's end-of-training line (any preset's, ``Training done!``, ...) or a line printed
  as the program exits (a launcher's report of a clean exit, PyTorch's process-group destructor);
  without it the log is no evidence either way: ``no_end``, with its last progress line. A trial
  always has a stop reason, so a launcher never gets ``no_end``.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from nccl_tune.diagnose.advice import advice_for_space, advise
from nccl_tune.diagnose.flight_recorder import FlightRecorderSummary, analyse_dumps
from nccl_tune.diagnose.logfiles import feed_merged, is_gzip
from nccl_tune.diagnose.reader import READ_BYTES, LogClassifier
from nccl_tune.diagnose.stacks import StackFinding, StackReport, odd_rank, with_ranks
from nccl_tune.diagnose.wording import AdviceContext
from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import Cause, Evidence, FailureClass, Verdict, norm_signal, signal_from_exit
from nccl_tune.trial import MemoryKnob, ProgressRules, StopReason

OWN_SOURCE = "nccl-tune"
FR_SOURCE = "flight-recorder"
STACKS_SOURCE = "stacks.json"
HANG_TAIL_LINES = 8
FACTS_FILE = "facts.json"
ROOT_CAUSES = frozenset(
    {
        FailureClass.OOM,
        FailureClass.HOST_OOM,
        FailureClass.NCCL_ERROR,
        FailureClass.CUDA_ERROR,
        FailureClass.INIT_FAILURE,
        FailureClass.CONFIG_ERROR,
        FailureClass.COLLECTIVE_TIMEOUT,
        FailureClass.COLLECTIVE_MISMATCH,
    }
)
"""Classes found in the logs that explain a stall better than "hang"."""
DEATHS = frozenset(
    {
        "segfault",
        "killed",
        "signal_received",
        "torchrun_child_failed",
        "torchrun_root_cause",
        "launcher_exit",
        "dataloader_killed",
        "dataloader_bus_error",
        "ray_actor_died",
        "ray_node_died",
        "vllm_proc_died",
    }
)
"""Crash rules that say a process died (a signal, an exit status, a dead actor or engine): a stall
after one is its consequence, and the verdict is the crash. A crash the logs show only as an
exception is not among them: a process may log one and go on."""


@dataclass(frozen=True)
class LogFacts:
    """One log of a trial: its file name (as evidence names it) and where its text is."""

    name: str
    path: Path | None = None
    lines: Iterable[str] | None = None
    """Given instead of ``path`` (the model launcher's modelled lines); an iterator is read once."""
    upto: int | None = None
    """Lines the log held when supervision stopped a stalled trial: what the teardown made the
    ranks print afterwards (peers reset, SIGTERM tracebacks) does not decide the verdict."""


@dataclass(frozen=True)
class TrialFacts:
    """Everything known about how a run ended (see the module docstring); every field but the
    logs may be unknown (None), as for a log handed to ``nccl-tune diagnose``."""

    logs: tuple[LogFacts, ...] = ()
    stop_reason: StopReason | None = None
    stop_detail: str = ""
    """The supervisor's one line (``no progress for 240 s in 'policy_train'``)."""
    open_phase: str | None = None
    exit_code: int | None = None
    signal_name: str | None = None
    steps_done: int | None = None
    total_steps: int | None = None
    enough_steps: int | None = None
    """Steps (warm-up included) after which a command that ends by itself was measured all the same:
    fewer than ``total_steps`` when the tuner asked for more than the rule needs."""
    training_done: bool = False
    """The command printed its end-of-training line (the progress rules' ``training_done``)."""
    host_mem_peak_frac: float | None = None
    fr_summary: FlightRecorderSummary | None = field(default=None, compare=False)
    stacks: StackReport | None = None
    progress: ProgressRules | None = None
    """The space's progress rules: phases and steps in the verdict come from them."""
    rules_hint: str = ""
    """The step rule, named in the advice when no step line was ever seen."""
    memory_knobs: tuple[MemoryKnob, ...] = ()
    """The search space's parameters that move memory, with the trial's values (advice names them)."""
    trainer: str | None = None
    """The progress preset the output was read as (``skyrl``, ``megatron``, ...), when known."""
    notes: tuple[str, ...] = ()
    """The launcher's own findings, added to the evidence (survivors, a failed log reader)."""

    def to_json(self) -> dict[str, Any]:
        """The facts a trial folder does not hold otherwise (logs and dumps are files beside it)."""
        return {
            "logs": [log.name if log.upto is None else {"name": log.name, "upto": log.upto} for log in self.logs],
            "stop_reason": self.stop_reason.value if self.stop_reason else None,
            "stop_detail": self.stop_detail,
            "open_phase": self.open_phase,
            "exit_code": self.exit_code,
            "signal_name": self.signal_name,
            "steps_done": self.steps_done,
            "total_steps": self.total_steps,
            "enough_steps": self.enough_steps,
            "training_done": self.training_done,
            "host_mem_peak_frac": self.host_mem_peak_frac,
            "progress": _progress_json(self.progress),
            "rules_hint": self.rules_hint,
            "memory_knobs": [asdict(k) for k in self.memory_knobs],
            "trainer": self.trainer,
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], folder: Path, **extra: Any) -> TrialFacts:
        """Facts saved by a launcher, with the logs read from ``folder``."""
        logs = tuple(
            LogFacts(item, Path(folder) / item)
            if isinstance(item, str)
            else LogFacts(item["name"], Path(folder) / item["name"], upto=item.get("upto"))
            for item in data.get("logs") or ()
        )
        reason = data.get("stop_reason")
        progress = data.get("progress")
        return cls(
            logs=logs,
            stop_reason=StopReason(reason) if reason else None,
            stop_detail=str(data.get("stop_detail") or ""),
            open_phase=data.get("open_phase"),
            exit_code=data.get("exit_code"),
            signal_name=data.get("signal_name"),
            steps_done=data.get("steps_done"),
            total_steps=data.get("total_steps"),
            enough_steps=data.get("enough_steps"),
            training_done=bool(data.get("training_done")),
            host_mem_peak_frac=data.get("host_mem_peak_frac"),
            progress=ProgressRules(**progress) if isinstance(progress, Mapping) else None,
            rules_hint=str(data.get("rules_hint") or ""),
            memory_knobs=tuple(MemoryKnob(**k) for k in data.get("memory_knobs") or ()),
            trainer=data.get("trainer"),
            notes=tuple(data.get("notes") or ()),
            **extra,
        )


def _progress_json(rules: ProgressRules | None) -> dict[str, Any] | None:
    if rules is None:
        return None
    out = {f.name: getattr(rules, f.name) for f in fields(rules)}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def _own(detail: str) -> Evidence:
    return Evidence(0, detail, OWN_SOURCE)


def decide(facts: TrialFacts) -> Verdict:
    """The verdict for a run (see the module docstring). Pure but for reading the logs the facts
    name; raises ``NcclTuneError`` naming a log that cannot be read."""
    verdict = _decide(facts)
    advice = advice_for_space(verdict.failure_class, verdict.advice, facts.memory_knobs, facts.trainer)
    if advice != verdict.advice:
        verdict = replace(verdict, advice=advice)
    if facts.notes:
        verdict = replace(verdict, evidence=verdict.evidence + tuple(_own(n) for n in facts.notes))
    return verdict


def classify_log(
    lines: Iterable[str],
    *,
    exit_code: int | None = None,
    signal_name: str | None = None,
    fr_dumps: Sequence[Path] = (),
    source: str = "",
    host_mem_peak_frac: float | None = None,
) -> Verdict:
    """The verdict for one log's lines with its exit status (``decide`` on those facts)."""
    return _decide_one(LogFacts(source, lines=lines), exit_code, signal_name, fr_dumps, host_mem_peak_frac)


def classify_file(
    path: Path,
    *,
    exit_code: int | None = None,
    signal_name: str | None = None,
    fr_dumps: Sequence[Path] = (),
    source: str = "",
    host_mem_peak_frac: float | None = None,
) -> Verdict:
    """``classify_log`` over a file, read as a stream of byte blocks; raises ``NcclTuneError``
    naming the file when it cannot be read."""
    path = Path(path)
    return _decide_one(LogFacts(source or path.name, path), exit_code, signal_name, fr_dumps, host_mem_peak_frac)


def _decide_one(
    log: LogFacts,
    exit_code: int | None,
    signal_name: str | None,
    fr_dumps: Sequence[Path],
    host_mem_peak_frac: float | None,
) -> Verdict:
    """``decide`` on one log and its exit status: what ``classify_log`` and ``classify_file`` share."""
    return decide(
        TrialFacts(
            logs=(log,),
            exit_code=exit_code,
            signal_name=signal_name,
            host_mem_peak_frac=host_mem_peak_frac,
            fr_summary=analyse_dumps(list(fr_dumps)) if fr_dumps else None,
        )
    )


def _decide(facts: TrialFacts) -> Verdict:
    reason = facts.stop_reason
    if reason is StopReason.MEASURED:
        return Verdict(FailureClass.OK, cause=Cause("measured"))
    if reason in (StopReason.BUDGET, StopReason.EARLY_STOP):
        advice = (
            "alive and progressing, but slower than the best trial so far"
            if reason is StopReason.EARLY_STOP
            else "alive and progressing, but too slow for the trial budget (--trial-timeout)"
        )
        return Verdict(
            FailureClass.BUDGET,
            evidence=(_own(facts.stop_detail),),
            advice=advice,
            phase=facts.open_phase,
            cause=Cause(reason.value),
        )
    if reason is StopReason.INTERRUPTED:
        return Verdict(
            FailureClass.INTERRUPTED,
            evidence=(_own(facts.stop_detail),),
            advice="the tuner was interrupted; the trial runs again on resume",
            phase=facts.open_phase,
            cause=Cause("interrupted"),
        )
    if reason is StopReason.LAUNCH_ERROR:
        return Verdict(
            FailureClass.CONFIG_ERROR,
            evidence=(_own(facts.stop_detail),),
            advice="the command could not be started: fix the command line or its PATH",
            cause=Cause("launch_error", "command"),
        )
    if not facts.logs and facts.fr_summary is not None and facts.fr_summary.ranks_dumped:
        return _dumps_only(facts.fr_summary)
    clf = read_logs(facts.logs, facts.progress)
    if reason in (StopReason.STALL, StopReason.STARTUP):
        found = clf.verdict(fr_summary=facts.fr_summary, host_mem_peak_frac=facts.host_mem_peak_frac)
        return _stalled(facts, found, clf)
    sig = norm_signal(facts.signal_name) or signal_from_exit(facts.exit_code)
    found = clf.verdict(
        exit_code=facts.exit_code,
        signal_name=sig,
        fr_summary=facts.fr_summary,
        host_mem_peak_frac=facts.host_mem_peak_frac,
    )
    return _exited(facts, found, clf)


def read_logs(logs: Iterable[LogFacts], progress: ProgressRules | None = None) -> LogClassifier:
    """Every log through one classifier (evidence names each line's file): several files on disk
    merged in time order (``diagnose.logfiles``: a SkyRL trial's infra log next to its output),
    else in the order given."""
    clf = LogClassifier(progress=progress)
    logs = list(logs)
    for log in logs:
        if log.upto is not None:
            clf.limit(log.name, log.upto)
    if len(logs) > 1 and all(log.path is not None and log.lines is None for log in logs):
        try:
            feed_merged(clf, [log.path for log in logs], [log.name for log in logs])
        except (OSError, EOFError, zlib.error) as exc:
            where = getattr(exc, "filename", None) or ", ".join(str(log.path) for log in logs)
            raise _unreadable(where, exc) from exc
        return clf
    for log in logs:
        clf.set_source(log.name)
        if log.lines is not None:
            clf.feed(log.lines)
        elif log.path is not None:
            clf.feed_bytes(_chunks(log.path))
    return clf


def _chunks(path: Path) -> Iterator[bytes]:
    """A log's bytes (gzip-compressed logs are read through)."""
    try:
        with gzip.open(path, "rb") if is_gzip(path) else open(path, "rb", buffering=0) as fh:
            while chunk := fh.read(READ_BYTES):
                yield chunk
    except (OSError, EOFError, zlib.error) as exc:
        raise _unreadable(path, exc) from exc


def _unreadable(where: object, exc: BaseException) -> NcclTuneError:
    """A log that cannot be read to its end: the reason, and for a gzip'd one that breaks off or
    fails its check part way, what to do."""
    text = f"cannot read the log {where}: {getattr(exc, 'strerror', None) or exc}"
    if isinstance(exc, (EOFError, zlib.error, gzip.BadGzipFile)):
        text += " (a truncated or damaged gzip file: copy it again from where it was kept)"
    return NcclTuneError(text)


def _dumps_only(summary: FlightRecorderSummary) -> Verdict:
    """A verdict from Flight Recorder dumps alone (no log)."""
    evidence = [Evidence(0, summary.note, FR_SOURCE)]
    if summary.library_verdict:
        evidence.append(Evidence(0, summary.library_verdict, FR_SOURCE))
    if summary.mismatch:
        cls = FailureClass.COLLECTIVE_MISMATCH
        advice = (
            f"Ranks disagree on {summary.op} #{summary.seq}: rank {summary.culprit_rank} issued a different collective "
            "or sizes; make every rank issue the same collectives in the same order (TORCH_DISTRIBUTED_DEBUG=DETAIL)"
        )
    elif summary.culprit_rank is not None:
        cls = FailureClass.COLLECTIVE_TIMEOUT
        advice = (
            f"Rank {summary.culprit_rank} is behind ({summary.culprit_reason}) while the others wait in "
            f"{summary.op} #{summary.seq}: look at that rank's last log lines or `py-spy dump --pid <pid>`; lower "
            "SKYRL_WORKER_NCCL_TIMEOUT_IN_S to fail faster instead of raising it"
        )
    else:
        cls = FailureClass.COLLECTIVE_TIMEOUT
        advice = (
            "Every rank reached the same collective and none is behind in the dumps: the collective itself is stuck "
            "(NCCL transport or network); rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"
        )
    return Verdict(
        cls,
        rank=summary.culprit_rank,
        evidence=tuple(evidence),
        advice=advice,
        flight_recorder=summary.to_json(),
        cause=Cause("flight_recorder", "mismatch" if summary.mismatch else ""),
    )


def _stalled(facts: TrialFacts, found: Verdict, clf: LogClassifier) -> Verdict:
    if found.failure_class in ROOT_CAUSES:
        return found
    if found.failure_class is FailureClass.CRASH and found.cause is not None and found.cause.rule in DEATHS:
        then = _own(f"then {facts.stop_detail}")
        return replace(found, evidence=(*found.evidence, then), phase=found.phase or facts.open_phase)
    finding = odd_rank(with_ranks(facts.stacks, clf.pid_ranks))
    evidence = (_own(facts.stop_detail),)
    if finding is not None:
        evidence += (Evidence(0, finding.headline, STACKS_SOURCE),)
        evidence += tuple(Evidence(0, line, STACKS_SOURCE) for line in finding.stack)
    elif facts.stacks is not None and facts.stacks.note:
        evidence += (_own(facts.stacks.note),)
    evidence += clf.tail_evidence(HANG_TAIL_LINES)
    if found.failure_class is FailureClass.CRASH:  # an exception logged before the silence
        evidence += tuple(e for e in found.evidence[:3] if e not in evidence)
    rank = finding.rank if finding is not None else found.rank
    return Verdict(
        FailureClass.HANG,
        rank,
        evidence,
        _hang_advice(facts, finding),
        phase=facts.open_phase,
        cause=Cause(
            facts.stop_reason.value if facts.stop_reason else "stall",
            "stacks" if finding is not None else "",
            {"where": finding.where} if finding is not None else {},
        ),
    )


def _hang_advice(facts: TrialFacts, finding: StackFinding | None) -> str:
    if facts.stop_reason is StopReason.STARTUP:
        hint = f" ({facts.rules_hint})" if facts.rules_hint and not facts.steps_done else ""
        lead = (
            "no progress line before the start-up deadline: the command is stuck starting (engines, rendezvous) "
            f"or prints no line the progress rules match{hint}; raise --startup-timeout if start-up is just slow"
        )
    else:
        phase = f" in '{facts.open_phase}'" if facts.open_phase else ""
        lead = (
            f"the command stopped making progress{phase}; `nccl-tune diagnose` on the trial folder reads its Flight "
            "Recorder dumps for the rank behind; raise --stall-timeout (or the space's clocks.stall_floor_s, where the "
            "timeout was a multiple of a measured wait) only if this phase is legitimately that slow"
        )
    if finding is None:
        return lead
    return (
        f"{finding.headline}: that rank is the one the others wait for; its stack is in the evidence (why it is "
        f"there: a sleep, a slow data loader, a rank-only branch); {lead}"
    )


NO_END_SEEN = "no_end_seen"
"""The cause of ``no_end``: a bare log (no supervision, no exit status) with no failure in it and no
end-of-training or program-exit line (``LogClassifier.end_seen``): nothing in the text tells a run
that finished from one that hung, still runs or was killed without a word."""
NO_END_TAIL_LINES = 3


def _exited(facts: TrialFacts, found: Verdict, clf: LogClassifier) -> Verdict:
    code, sig = facts.exit_code, norm_signal(facts.signal_name)
    if (
        found.failure_class is FailureClass.OK
        and code is None
        and sig is None
        and facts.stop_reason is None
        and not (facts.training_done or clf.end_seen)
    ):
        return _no_end(clf)
    done, total = facts.steps_done, facts.total_steps
    if code == 0 and sig is None and done is not None and total is not None and done < total:
        if found.failure_class is not FailureClass.OK:
            return found
        if facts.enough_steps is not None and done >= facts.enough_steps:  # a command of a fixed length
            line = _own(f"the command ended by itself after {done} steps, of the {total} asked: enough to measure")
            return replace(found, evidence=(line, *found.evidence))
        return _exited_early(facts, clf)
    how = f"killed by {sig}" if sig else f"exited with code {code}"
    if code in (126, 127) and found.failure_class in (FailureClass.OK, FailureClass.CRASH):
        words = ("not found", "Permission denied", "cannot execute")
        lines = [e for e in clf.tail_evidence(16) if any(w in e.text for w in words)]
        return Verdict(
            FailureClass.CONFIG_ERROR,
            evidence=(_own(f"{how}: a program the command runs could not be started"),) + tuple(lines[:3]),
            advice="the command could not run a program (exit 126/127): fix the command, its PATH or its permissions",
            cause=Cause("exit_126_127", "command", {"exit_code": code}),
        )
    return found


def _no_end(clf: LogClassifier) -> Verdict:
    """No failure and no end in a bare log: no evidence either way, with the last progress line
    and the last lines."""
    tail = clf.tail_evidence(NO_END_TAIL_LINES)
    last = clf.last_progress
    evidence = (_own("no failure in the log, and no end: no end-of-training line, no clean exit, no exit status"),)
    if last is not None and all((e.source, e.line_no) != (last.source, last.line_no) for e in tail):
        evidence += (last,)
    details = {"last_progress_line": last.line_no} if last is not None else {}
    reading = clf.reading()
    return Verdict(
        FailureClass.NO_END,
        evidence=evidence + tail,
        advice=advise(AdviceContext(FailureClass.NO_END)),
        phase=reading.phase,
        cause=Cause(NO_END_SEEN, "", details),
    )


def _exited_early(facts: TrialFacts, clf: LogClassifier) -> Verdict:
    done, total = facts.steps_done, facts.total_steps
    if facts.training_done:
        return Verdict(
            FailureClass.CONFIG_ERROR,
            evidence=(_own(f"training finished by itself after {done} of {total} steps"),) + clf.tail_evidence(3),
            advice="with these values the run has fewer steps than a trial measures (e.g. a train batch larger "
            "than the prompts the data keeps): lower the batch size or --steps",
            cause=Cause("too_few_steps", "validation", {"steps_done": done, "total_steps": total}),
        )
    if not done and facts.rules_hint:
        advice = f"no step line was recognised: check the search space's progress rules ({facts.rules_hint})"
    else:
        advice = (
            f"the command ended by itself after {done} of {total} steps, before the measured steps: let it "
            "run more steps (its own step cap, epochs, data) or lower --steps"
        )
    return Verdict(
        FailureClass.CRASH,
        evidence=(_own(f"exited with code 0 after {done} of {total} steps"),) + clf.tail_evidence(5),
        advice=advice,
        cause=Cause("exited_early", "", {"steps_done": done, "total_steps": total}),
    )
