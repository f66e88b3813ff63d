"""Classify a run from the events its logs gave: root cause over cascades.

The reader (``reader.LogClassifier``) turns the lines rules match into events (``Event``) and hands
them over with what else it saw (``LogReading``); ``root_cause`` picks the verdict. Each event
weighs as its rule's ``Kind``; the verdict is, in order:

1. the earliest specific cause wins: device or host OOM, CUDA error, NCCL error, refused config,
   explicit mismatch (a configuration refused after a training step finished is a crash instead,
   and an IB verbs failure before one, while NCCL sets a communicator up, an init failure: the reader
   gives such a line its rule's ``once_training``), Ray placement groups never ready (also Ray's bare ``GetTimeoutError`` when its
   traceback waits on ``pg.ready()``), and rendezvous/connect failures that happen before the first
   training step; an NCCL "remote" error is only a consequence when something failed before it;
2. otherwise collective timeouts, unless an error on one rank came first (``_first_error``): the
   first error wins over the loudest. A crash line of any wording on a rank that did not time out
   itself (the generic exception rule's too: ``crash`` with the cause ``first_error``, saying no
   rule names it), or a connect failure (before the first step, also c10d's retry warnings alone:
   ``init_failure``), printed before the first time-out in the step the others waited in, is the
   root cause and the time-outs its consequence; a lost peer's wording is not. Otherwise
   ``collective_mismatch`` when ranks time out at the same sequence number in different
   collectives or sizes (or the Flight Recorder says so), else ``collective_timeout``; an NCCL
   ``WARN`` error before the first timeout names the cause instead;
3. otherwise the first crash (exception, signal, actor death). A SIGKILL (a launcher's ``exitcode:
   -9``, ``return code = -9``, ``Signal 9 (SIGKILL)``, exit status 137, a shell's ``Killed`` in any
   locale) is ``host_oom`` when host memory shows it (``pressure``: a peak at ``HOST_OOM_PEAK_FRAC``
   in the launcher's samples or the log's readouts, readouts climbing; and, for a silent kill, a
   memory-heavy phase in the last lines before it or a memory limit the run lives under); a silent
   kill (no exception of the killed process's own before it) with none of these was sent from
   outside (``crash``, advice naming where kills are recorded); an NCCL remote or transport error in
   the step a rank was killed in is its consequence, printed before the kill report or after;
4. otherwise the exit status: ``ok`` for 0 or unknown, ``crash`` for anything else (``verdict``
   then asks an unknown status for positive evidence of an end: without it a bare log is
   ``no_end``).

Events of several logs are taken in the order they happened where their time stamps allow
(``_time_ordered``). Lines of an "Exception ignored" block (the interpreter went on) are flagged by
the reader; what they still count for is decided in ``_counts``. The verdict's advice is the
rule's, within its class's (``advice.advise``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from nccl_tune.diagnose.advice import advise
from nccl_tune.diagnose.flight_recorder import FlightRecorderSummary
from nccl_tune.diagnose.rules import Kind, Rule
from nccl_tune.diagnose.wording import AdviceContext
from nccl_tune.failure import OK_VERDICT, Cause, Evidence, FailureClass, Verdict, norm_signal, signal_from_exit

HOST_OOM_PEAK_FRAC = 0.90
"""Host RAM peak (fraction of total) above which a silent SIGKILL is called ``host_oom``."""
MAX_EVIDENCE = 6
OWN_SOURCE = "nccl-tune"
TRAINED_THROUGH_STEPS = 2
"""Training steps finished after an exception line that say the run went on past it (a logged,
handled exception: not what ended the run); one is not enough, since other ranks may log the end
of the step the exception broke."""
NCCL_DETAIL_LINES = 4
"""Lines after a generic NCCL error within which a specific one (``Last error:`` and the warning it
repeats) tells the same failure."""
WEIGHT_SYNC_HINTS = ("sync_weights", "sync_model", "broadcast_to_inference_engines", "update_weights", "weight_sync")
"""Words that say weights are being synced to the inference engines (near an OOM: what it ran out in)."""
_P2P_OPS = {"SEND", "RECV", "send", "recv"}
"""Point-to-point operations: their sequence numbers legitimately differ between ranks."""
_NCCL_WARN_CAUSES = (
    "failure",
    "Failure",
    "failed",
    "Failed",
    "rror",
    "imeout",
    "timed out",
    "No space",
    "reset",
    "closed",
)
_NCCL_WARN_BENIGN = (
    "No device found",
    "Could not find",
    "Unable to open",
    "Failed to open lib",
    "not supported",
    "Not supported",
)
"""Warnings NCCL prints where it goes on without the thing (no InfiniBand library, no device)."""


@dataclass
class Event:
    """A line a rule matched, as the reader saw it."""

    order: int
    line_no: int
    source: str
    text: str
    rule: Rule
    rank: int | None
    details: dict[str, Any]
    phase: str | None
    before_first_step: bool
    after_training: bool
    vllm_context: bool = False
    vllm_stepping: bool = False
    weight_sync_context: bool = False
    pid: int | None = None
    """The Ray worker or NCCL process that printed the line (its rank may be learnt later in the log)."""
    steps_done: int = 0
    """Training steps finished when the line was printed."""
    ignored: bool = False
    """The line is part of an "Exception ignored" block (``ignored``): the program went on."""
    stamp: tuple[int, ...] | None = None
    """When the line says it was printed (month, day, h, m, s, microseconds), if it says; else the
    last time stamp printed shortly before it (``own_stamp`` False: a lower bound)."""
    own_stamp: bool = False
    """``stamp`` is the line's own."""
    heavy: tuple[str, Evidence] | None = None
    """For a SIGKILL: the memory-heavy phase the lines before it announce (``pressure.heavy_phase``)."""

    @property
    def kind(self) -> Kind:
        return self.rule.kind

    @property
    def failure_class(self) -> FailureClass:
        return self.rule.failure_class

    def evidence(self) -> Evidence:
        return Evidence(self.line_no, self.text, self.source)


@dataclass(frozen=True)
class LogReading:
    """What the reader saw of a run, as far as the decision needs it."""

    events: list[Event]
    """The events kept, in the order they were read (the decision fills in ranks and reorders)."""
    steps_finished: int
    phase: str | None
    """The open training phase at the end (``None``: none known)."""
    after_training: bool
    """Training had finished (its end line, or the final checkpoint) when the logs ended."""
    training_done: bool
    """A log said training finished."""
    pid_rank: Mapping[int, int]
    """Which rank each process that printed is, as far as the logs say."""
    world: frozenset[int]
    """Every rank of the run, as far as the logs say (NCCL's ``nranks``, else the ranks seen)."""
    host_peak: tuple[float, Evidence] | None
    """The highest host-memory readout in the logs (fraction of RAM) and its line."""
    tail_errors: tuple[Evidence, ...]
    """The error lines the logs end with (``LogClassifier.tail_errors``)."""
    last_lines: tuple[Evidence, ...]
    """The last three non-blank lines of the log read last."""
    host_climb: Evidence | None = None
    """The last of the host-memory readouts that climbed (``pressure.HostMemory.climb``)."""
    memory_limit: Evidence | None = None
    """A line naming a memory limit the run lives under (a cgroup's, a container's, a job's)."""
    heavy_at_end: tuple[str, Evidence] | None = None
    """The memory-heavy phase the log's last lines announce (for a SIGKILL only the exit status tells)."""


def root_cause(
    log: LogReading,
    *,
    exit_code: int | None = None,
    signal_name: str | None = None,
    host_mem_peak_frac: float | None = None,
    fr_summary: FlightRecorderSummary | None = None,
) -> Verdict:
    """The verdict for what the reader saw, the exit status and the Flight Recorder's analysis."""
    sig = norm_signal(signal_name) or signal_from_exit(exit_code)
    fr = fr_summary.to_json() if fr_summary is not None and fr_summary.ranks_dumped else None
    return _Decision(log, exit_code, sig, host_mem_peak_frac, fr_summary, fr).decide()


def _time_ordered(events: list[Event]) -> list[Event]:
    """Events of several logs in the order they happened, when time stamps allow: within a log an
    event without a stamp takes the one of the event before it (or after it, at the start); a log
    with no stamped event at all keeps every log in the order they were read. ``order`` is
    rewritten to match."""
    by_source: dict[str, list[Event]] = {}
    for e in events:
        by_source.setdefault(e.source, []).append(e)
    if len(by_source) < 2:
        return events
    keys: dict[int, tuple[int, ...]] = {}
    for evs in by_source.values():
        stamps = [e.stamp for e in evs]
        if all(st is None for st in stamps):
            return events
        last = next(st for st in stamps if st is not None)
        for e in evs:
            last = e.stamp or last
            keys[id(e)] = last
    ordered = sorted(events, key=lambda e: (keys[id(e)], e.order))
    for i, e in enumerate(ordered):
        e.order = i
    return ordered


_NO_MORE_THAN_AN_EXCEPTION = frozenset({"exception", "engine_dead", "engine_died"})
"""Crash subtypes that tell no more than an exception before them: vLLM's engine death (its engine's own
error, printed first, is the cause)."""

_HANDLED_IF_TRAINED_PAST = frozenset({"exception", "config_mid_run"})
"""Crash subtypes of an exception a run may log, handle and train past (``TRAINED_THROUGH_STEPS``)."""
_MEMORY = (FailureClass.OOM, FailureClass.HOST_OOM)
_COUNT_WHEN_IGNORED = frozenset(
    {
        FailureClass.OOM,
        FailureClass.HOST_OOM,
        FailureClass.CUDA_ERROR,
        FailureClass.NCCL_ERROR,
        FailureClass.COLLECTIVE_TIMEOUT,
        FailureClass.COLLECTIVE_MISMATCH,
    }
)


_LOST_PEER = r"[Cc]onnection (?:reset|closed)|Broken pipe|remote process|[Pp]eer"
_CONSEQUENCE = re.compile(
    _LOST_PEER + r"|DistBackendError|DistNetworkError|ProcessGroup|NCCL|ChildFailedError|SignalException"
)
"""An exception's wording that says another process went away or failed (what a kill or a time-out
leaves behind), not an error of the process's own."""
_LOST = re.compile(_LOST_PEER)


FIRST_COLLECTIVES = 8
"""A time-out at most this far into its group's collectives (``SeqNum``) is one of the group's first:
connect retries before it may be why it never completed."""
FIRST_ERROR_SLACK_S = 300.0
"""How long before the collective the others waited in began (its line's time stamp less its
``Timeout(ms)``) an error may have been printed and still be what they waited for."""


def _seconds(stamp: tuple[int, ...]) -> float:
    """A time stamp (month, day, h, m, s, microseconds) in seconds, months taken as 31 days."""
    month, day, h, m, sec, micro = stamp
    return ((((month * 31 + day) * 24 + h) * 60 + m) * 60) + sec + micro / 1e6


def _long_before(e: Event, timeout: Event) -> bool:
    """``e`` was printed longer before the timed-out collective began than ``FIRST_ERROR_SLACK_S``
    (by its own time stamp: one borrowed from a line before it is only a lower bound)."""
    ran = timeout.details.get("timeout_ms")
    if not e.own_stamp or timeout.stamp is None or ran is None:
        return False
    began = _seconds(timeout.stamp) - float(ran) / 1000.0
    return _seconds(e.stamp) < began - FIRST_ERROR_SLACK_S


def _is_kill(e: Event) -> bool:
    return e.kind is Kind.CRASH and e.details.get("signal") == "SIGKILL"


def _raised_before(kill: Event, crashes: Sequence[Event]) -> bool:
    """The killed process (the kill's rank, or any when it is not known) raised an exception of its
    own before the kill was reported: the kill is not what ended it first."""
    return any(
        e.order < kill.order
        and e.rule.subtype == "exception"
        and not e.details.get("signal")
        and not _CONSEQUENCE.search(e.text)
        and (kill.rank is None or e.rank is None or e.rank == kill.rank)
        for e in crashes
    )


def _trained_past(e: Event, steps_finished: int, steps: int = 1) -> bool:
    """Training finished at least ``steps`` steps after ``e`` was printed: the run went on past it,
    so it is not what ended the run."""
    return steps_finished >= e.steps_done + steps


def _counts(e: Event, steps_finished: int) -> bool:
    """Whether an event takes part in the decision. A line of an "Exception ignored" block (the
    interpreter printed the exception and went on) is no crash, refused config or rendezvous
    failure; a device, host-memory or NCCL cause in it still counts (it tells about the machine),
    unless training finished a step after it."""
    if not e.ignored:
        return True
    return e.failure_class in _COUNT_WHEN_IGNORED and not _trained_past(e, steps_finished)


class _Decision:
    """Root-cause selection over the events of one reading (see the module docstring)."""

    def __init__(
        self,
        log: LogReading,
        exit_code: int | None,
        sig: str | None,
        host_mem_peak_frac: float | None,
        fr_summary: FlightRecorderSummary | None,
        fr: dict[str, Any] | None,
    ) -> None:
        self.log = log
        self.steps_finished = log.steps_finished
        self.events = [e for e in _time_ordered(log.events) if _counts(e, self.steps_finished)]
        self.exit_code = exit_code
        self.sig = sig
        self.host_peak = host_mem_peak_frac
        self.fr_summary = fr_summary
        self.fr = fr

    # helpers
    def _of(self, *kinds: Kind) -> list[Event]:
        return [e for e in self.events if e.kind in kinds]

    def _failed_status(self) -> bool:
        return bool(self.sig) or (self.exit_code not in (None, 0))

    def decide(self) -> Verdict:
        for e in self.events:
            if e.rank is None and e.pid is not None and e.pid in self.log.pid_rank:
                e.rank = self.log.pid_rank[e.pid]  # the worker named its rank later in the log
        timeouts = self._timeouts()
        strong = [e for e in timeouts if e.rule.subtype != "nccl_generic"]
        roots = self._roots(strong[0].order if strong else None)
        if roots:
            return self._root(roots[0])
        if timeouts:
            first = self._first_error(timeouts)
            if first is not None:
                return self._first_error_verdict(first, timeouts)
            return self._timeout(strong or timeouts, timeouts)
        return self._without_root()

    def _first_error(self, timeouts: list[Event]) -> Event | None:
        """An error on one rank before the first collective time-out, in the step the others then
        waited in: what they waited for. A crash line of any wording (the generic exception rule
        included: one no rule names), a connect failure, or before the first step a connect
        retry's warning while the group had run at most ``FIRST_COLLECTIVES`` collectives (retries
        a group then got past are no failure); not a lost peer or NCCL's own wording of the
        time-out (a consequence), not on a rank that timed out itself, and not printed longer
        before the collective the others waited in began than ``FIRST_ERROR_SLACK_S`` (when both
        lines say when)."""
        waits = [e for e in timeouts if e.kind is Kind.TIMEOUT]
        if not waits:
            return None
        first = waits[0]
        waiting = {e.rank for e in waits if e.rank is not None}
        seq = first.details.get("seq")
        for e in self.events:
            if e.order >= first.order:
                return None
            if e.steps_done != first.steps_done or (e.rank is not None and e.rank in waiting):
                continue
            if _long_before(e, first):
                continue
            crash = e.kind is Kind.CRASH and not _CONSEQUENCE.search(e.text)
            retry = (
                e.kind is Kind.SUPPORT
                and e.failure_class is FailureClass.INIT_FAILURE
                and e.before_first_step
                and (seq is None or seq <= FIRST_COLLECTIVES)
            )
            connect = (e.kind is Kind.INIT or retry) and not _LOST.search(e.text)
            if crash or connect:
                return e
        return None

    def _first_error_verdict(self, first: Event, timeouts: list[Event]) -> Verdict:
        """The first error is the root cause; the time-outs after it are its consequence. A connect
        failure before the first step is an init failure; any other first error a crash, and one no
        rule names says so (its line is the evidence's first)."""
        waits = [e for e in timeouts if e.kind is Kind.TIMEOUT]
        evidence = self._evidence(first, waits[:3])
        details = {**first.details, "first_error_line": first.line_no, "named_by": first.rule.name}
        if first.failure_class is FailureClass.INIT_FAILURE and first.before_first_step:
            return self._make(FailureClass.INIT_FAILURE, first, evidence, details=details)
        if first.rule.name == "exception" or first.failure_class is not FailureClass.CRASH:
            return self._make(
                FailureClass.CRASH,
                first,
                evidence,
                subtype="first_error",
                rule="first_error",
                details={**details, "unnamed": first.rule.name == "exception"},
            )
        return self._make(FailureClass.CRASH, first, evidence, details=details)

    def _timeouts(self) -> list[Event]:
        """Collectives that did not complete, and connect failures after the first step (a rank
        that died or hung leaves the others waiting); NCCL's own connect failures after the first
        step are transport errors, not time-outs."""
        out = self._of(Kind.TIMEOUT) + [
            e for e in self._of(Kind.INIT) if not e.before_first_step and e.rule.subtype != "nccl_connect"
        ]
        return sorted(out, key=lambda e: e.order)

    def _roots(self, first_timeout: int | None) -> list[Event]:
        """Specific causes in order; an NCCL error after a time-out, a transport or remote error
        after another failure or in the step a rank ran out of memory in (the rank that died closed
        its sockets; a survivor may print that first), and an NCCL error the run trained through
        are consequences."""
        roots = []
        for e in self.events:
            transport_late = e.kind is Kind.INIT and not e.before_first_step and e.rule.subtype == "nccl_connect"
            if not (e.kind is Kind.ROOT or (e.kind is Kind.INIT and e.before_first_step) or transport_late):
                continue
            if e.failure_class is FailureClass.NCCL_ERROR or transport_late:
                if first_timeout is not None and first_timeout < e.order:
                    continue
                if _trained_past(e, self.steps_finished):
                    continue
                if (transport_late or e.rule.subtype in ("remote", "transport")) and any(
                    x.order < e.order
                    and x.kind in (Kind.ROOT, Kind.CRASH)
                    and x.failure_class is not FailureClass.NCCL_ERROR
                    or x.kind is Kind.ROOT
                    and x.failure_class in _MEMORY
                    and x.steps_done == e.steps_done
                    or _is_kill(x)
                    and x.steps_done == e.steps_done
                    for x in self.events
                ):
                    continue
            roots.append(e)
        return roots

    def _without_root(self) -> Verdict:
        """No specific cause and no time-out: a crash, the exit status, or the last lines decide;
        ``ok`` needs a clean (or unknown) exit status and a log that does not end in errors."""
        failed = self._failed_status()
        tail_errors = self.log.tail_errors
        crashes = [
            e
            for e in self._of(Kind.CRASH)
            if e.rule.subtype not in _HANDLED_IF_TRAINED_PAST
            or not _trained_past(e, self.steps_finished, TRAINED_THROUGH_STEPS)
        ]
        if crashes and (failed or self.exit_code is None or tail_errors):
            return self._crash(crashes)
        symptoms = self._of(Kind.SYMPTOM)
        if symptoms and (failed or self.exit_code is None) and not self.log.training_done:
            return self._crash(symptoms)
        if failed:
            return self._status_only()
        if tail_errors:
            return self._no_cause(tail_errors)
        return OK_VERDICT

    # --- building the verdict ---------------------------------------------------------------

    def _evidence(
        self, root: Event | None, extra: Sequence[Event] = (), prefix: Sequence[Evidence] = ()
    ) -> tuple[Evidence, ...]:
        out: list[Evidence] = list(prefix)
        seen = {(e.source, e.line_no) for e in out}

        def push(ev: Event) -> None:
            key = (ev.source, ev.line_no)
            if key not in seen and len(out) < MAX_EVIDENCE:
                seen.add(key)
                out.append(ev.evidence())

        if root is not None:
            push(root)
        for ev in extra:
            push(ev)
        if root is not None:
            others = [e for e in self.events if e is not root and e.kind is not Kind.SUPPORT]
            others.sort(key=lambda e: (0 if e.failure_class is root.failure_class else 1, e.order))
            shown: set[tuple[str, int | None]] = set()
            for ev in others:
                key2 = (ev.rule.name, ev.rank)
                if key2 in shown:
                    continue
                shown.add(key2)
                push(ev)
        return tuple(out)

    def _ctx(self, cls: FailureClass, ev: Event | None, **kw: Any) -> AdviceContext:
        base = dict(
            failure_class=cls,
            subtype=(ev.details.get("subtype") or ev.rule.subtype) if ev else "",
            phase=ev.phase if ev else None,
            before_first_step=ev.before_first_step if ev else False,
            vllm_context=ev.vllm_context if ev else False,
            vllm_stepping=ev.vllm_stepping if ev else False,
            weight_sync_context=ev.weight_sync_context if ev else False,
            after_training=ev.after_training if ev else self.log.after_training,
            rank=ev.rank if ev else None,
            details=dict(ev.details) if ev else {},
            signal_name=self.sig,
            exit_code=self.exit_code,
            host_mem_peak_frac=self.host_peak,
            fr=self.fr,
        )
        base.update(kw)
        return AdviceContext(**base)

    def _make(self, cls: FailureClass, ev: Event | None, evidence: tuple[Evidence, ...], **kw: Any) -> Verdict:
        """The verdict; its cause names ``rule`` (default: the event's rule), the subtype and the
        values the advice used."""
        rule = kw.pop("rule", None) or (ev.rule.name if ev is not None else "exit_status")
        ctx = self._ctx(cls, ev, **kw)
        rank = kw.get("rank", ctx.rank)
        details = {k: v for k, v in ctx.details.items() if k != "subtype"}
        return Verdict(
            failure_class=cls,
            rank=rank,
            evidence=evidence,
            advice=advise(ctx),
            phase=ctx.phase,
            after_training=ctx.after_training,
            flight_recorder=self.fr,
            cause=Cause(rule, ctx.subtype, details),
        )

    def _nccl_warn_before(self, failure: Event) -> Event | None:
        """An NCCL ``WARN`` error printed before ``failure`` with no training step finished in
        between (a warning the run then trained through was not fatal)."""
        for e in self.events:
            if e.order >= failure.order:
                return None
            if (
                e.rule.name == "nccl_warn"
                and e.steps_done == failure.steps_done
                and any(c in e.text for c in _NCCL_WARN_CAUSES)
                and not any(b in e.text for b in _NCCL_WARN_BENIGN)
            ):
                return e
        return None

    def _unresolved_host_before(self, failure: Event) -> Event | None:
        """c10d's warning that the store's host name did not resolve, before a rendezvous or connect
        failure that names the same host: the name is the cause."""
        if failure.failure_class is not FailureClass.INIT_FAILURE or failure.rule.subtype not in (
            "rendezvous",
            "connect",
        ):
            return None
        return next(
            (
                e
                for e in self.events
                if e.order < failure.order
                and e.rule.name == "c10d_unresolved_host"
                and f"{e.details.get('host')}, {e.details.get('port')}" in failure.text
            ),
            None,
        )

    def _rank_of_the_error_after(self, warn: Event) -> int | None:
        """The rank of the error PyTorch raises within a few lines after an NCCL warning of the same
        log (NCCL's own line names its process and device, not its rank)."""
        return next(
            (
                e.rank
                for e in self.events
                if e.source == warn.source
                and e.rank is not None
                and 0 < e.line_no - warn.line_no <= 2 * NCCL_DETAIL_LINES
                and e.failure_class is FailureClass.NCCL_ERROR
            ),
            None,
        )

    def _detail_after(self, error: Event, tells: Callable[[Event], bool]) -> Event | None:
        """The first event of the same log within ``NCCL_DETAIL_LINES`` lines after ``error`` that
        ``tells`` accepts: what PyTorch's generic wording of an NCCL failure goes on to name."""
        return next(
            (
                e
                for e in self.events
                if e.order > error.order
                and e.source == error.source
                and 0 < e.line_no - error.line_no <= NCCL_DETAIL_LINES
                and tells(e)
            ),
            None,
        )

    def _nccl_detail_after(self, error: Event) -> Event | None:
        """The specific NCCL error printed after a generic one (PyTorch's ``NCCL error ... Last
        error:`` then the line NCCL warned): one failure, told best by the specific line. Without
        ``NCCL_DEBUG`` NCCL prints no warning, and PyTorch's ``Last error:`` is all that names what
        failed: a set-up failure there (an IB verbs call while the communicator was set up; a socket
        NCCL could not connect before the first step) is that failure, ``init_failure``, as its
        warning would have been."""
        return self._detail_after(
            error,
            lambda e: (
                e.failure_class in (FailureClass.NCCL_ERROR, FailureClass.INIT_FAILURE)
                and (e.kind is Kind.ROOT or e.kind is Kind.INIT and e.before_first_step)
                and e.rule.name != "nccl_error"
            ),
        )

    def _oom_named_after(self, error: Event) -> Event | None:
        """The device running out of memory, named after NCCL's ``unhandled cuda error`` (``Last
        error: Cuda failure 'out of memory'``): NCCL could not allocate its buffers, the failure it
        would have warned of with ``NCCL_DEBUG`` set, which reads as an OOM there (``cuda_oom`` is
        tried before NCCL's own rules)."""
        return self._detail_after(error, lambda e: e.failure_class is FailureClass.OOM)

    def _root(self, root: Event) -> Verdict:
        cls = root.failure_class
        if root.rank is None and self.fr_summary is not None and self.fr_summary.culprit_rank is not None:
            # the rank that failed is the one the others waited for in the Flight Recorder
            root.rank = self.fr_summary.culprit_rank
        if root.rank is None and root.rule.subtype == "ib_verbs":
            root.rank = self._rank_of_the_error_after(root)
        if root.rule.name == "nccl_error":
            detail = self._nccl_detail_after(root)
            if detail is not None:
                return self._make(
                    detail.failure_class,
                    root,
                    self._evidence(root, [detail]),
                    subtype=detail.rule.subtype,
                    details={**root.details, **detail.details},
                )
        if root.rule.name == "nccl_unhandled_cuda":
            oom = self._oom_named_after(root)
            if oom is not None:
                rank = root.rank if root.rank is not None else oom.rank
                return self._make(FailureClass.OOM, oom, self._evidence(oom, [root]), rank=rank)
        if cls is FailureClass.NCCL_ERROR or cls is FailureClass.CUDA_ERROR and root.rule.subtype == "nccl_cuda":
            warn = self._nccl_warn_before(root)
            if warn is not None:
                sub = warn.details.get("subtype") or root.details.get("subtype") or root.rule.subtype
                ev = self._evidence(warn, [root])
                return self._make(cls, root, ev, subtype=sub, rank=root.rank if root.rank is not None else warn.rank)
        unresolved = self._unresolved_host_before(root)
        if unresolved is not None:
            return self._make(
                cls,
                root,
                self._evidence(unresolved, [root]),
                subtype="unresolved_host",
                details={**root.details, **unresolved.details},
            )
        if cls is FailureClass.OOM and not root.weight_sync_context:
            after = [e for e in self.events if root.order < e.order <= root.order + 5]
            if any(h in e.text for e in after for h in WEIGHT_SYNC_HINTS):
                return self._make(cls, root, self._evidence(root), weight_sync_context=True)
        return self._make(cls, root, self._evidence(root))

    def _timeout(self, timeouts: list[Event], reported: list[Event]) -> Verdict:
        """``timeouts``: the ones that decide; ``reported``: every time-out, the generic ones too."""
        first = timeouts[0]
        warn = self._nccl_warn_before(first)
        if warn is not None:
            sub = warn.details.get("subtype") or "nccl"
            return self._make(FailureClass.NCCL_ERROR, warn, self._evidence(warn, timeouts[:2]), subtype=sub)
        # group NCCL watchdog timeouts by (pg, seq): different ops or sizes at one seq = mismatch (a line
        # that names the seq without its collective, "Timeout at NCCL work: N", tells no op apart)
        groups: dict[tuple[str, int], dict[tuple[Any, Any, Any], set[int | None]]] = {}
        for e in timeouts:
            if "seq" in e.details and e.details.get("op") is not None:
                sig = (e.details.get("op"), e.details.get("numel_in"), e.details.get("numel_out"))
                groups.setdefault((self._group(e), e.details["seq"]), {}).setdefault(sig, set()).add(e.rank)
        for (pg, seq), sigs in groups.items():
            if len(sigs) > 1:
                return self._mismatch(timeouts, pg, seq, sigs)
        desync = self._seq_desync(timeouts)
        if desync is not None:
            return desync
        fr = self.fr_summary
        if fr is not None and fr.mismatch:
            return self._make(
                FailureClass.COLLECTIVE_MISMATCH,
                first,
                self._evidence(first, timeouts[1:3]),
                rank=fr.culprit_rank,
                details={**first.details, "groups": fr.note},
                rule="flight_recorder_mismatch",
            )
        rank = None
        if fr is not None and fr.culprit_rank is not None:
            rank = fr.culprit_rank
        else:
            explicit = [c for e in timeouts for c in e.details.get("culprits", [])]
            if len(set(explicit)) == 1:
                rank = explicit[0]
            else:
                rank = self._rank_behind(reported)
        # the first NCCL watchdog line names op, seq and sizes best
        best = next((e for e in timeouts if "seq" in e.details), first)
        extra = [best] + [e for e in timeouts if e.rank != best.rank][:3]
        return self._make(FailureClass.COLLECTIVE_TIMEOUT, best, self._evidence(first, extra), rank=rank)

    def _group(self, e: Event) -> str:
        """The process group of time-out ``e``: the one its line names, else the one the watchdog's
        next line on its rank names for the same work (``[PG ID 11 PG GUID 119 Rank 1] Exception ...
        detected by watchdog at work: 216``), else the one group the log's time-outs name, if one,
        else the default group. Sequence numbers count within a group: ranks of two groups waiting
        at different numbers are not out of step."""
        if "pg" in e.details:
            return str(e.details["pg"])
        named = self._groups_named
        groups = set(named.values())
        only = next(iter(groups)) if len(groups) == 1 else "0"
        return named.get((e.rank, e.details.get("seq")), only)

    @cached_property
    def _groups_named(self) -> dict[tuple[int | None, int | None], str]:
        """The group each (rank, sequence number) of a time-out or a watchdog's caught work is named in."""
        named: dict[tuple[int | None, int | None], str] = {}
        for e in self.events:
            work = e.details.get("at_work", e.details.get("seq"))
            if work is not None and "pg" in e.details:
                named[(e.rank, work)] = str(e.details["pg"])
        return named

    def _seq_desync(self, timeouts: list[Event]) -> Verdict | None:
        """Ranks of one process group that time out at different sequence numbers are out of step
        (a collective completes on all ranks or none): ``collective_mismatch``, naming the rank
        behind (the one lowest sequence number), else the odd collective out."""
        by_pg: dict[str, dict[int, Event]] = {}
        seqs_of: dict[tuple[str, int], set[int]] = {}
        for e in timeouts:
            if "seq" in e.details and e.rank is not None and e.details.get("op") not in _P2P_OPS:
                pg = self._group(e)
                first = by_pg.setdefault(pg, {})
                seqs_of.setdefault((pg, e.rank), set()).add(e.details["seq"])
                if e.rank not in first or e.details["seq"] < first[e.rank].details["seq"]:
                    first[e.rank] = e
        for pg, ranks in by_pg.items():
            seqs = sorted({e.details["seq"] for e in ranks.values()})
            if len(seqs) < 2 or any(len(seqs_of[(pg, r)]) > 1 for r in ranks):
                continue  # a rank waiting at two sequence numbers: lines that name no group mix several
            lowest = [r for r, e in ranks.items() if e.details["seq"] == seqs[0]]
            ops = Counter(e.details.get("op") for e in ranks.values())
            odd = [r for r, e in ranks.items() if len(ops) > 1 and ops[e.details.get("op")] == 1]
            culprit = lowest[0] if len(lowest) == 1 else (odd[0] if len(odd) == 1 else None)
            if self.fr_summary is not None and self.fr_summary.culprit_rank is not None:
                culprit = self.fr_summary.culprit_rank
            parts = []
            for seq in seqs:
                at = sorted(r for r, e in ranks.items() if e.details["seq"] == seq)
                op = "/".join(sorted({str(ranks[r].details["op"]) for r in at if ranks[r].details.get("op")}))
                parts.append(
                    f"rank{'s' if len(at) > 1 else ''} {','.join(map(str, at))} at SeqNum {seq}"
                    + (f" ({op})" if op else "")
                )
            reps = sorted(ranks.values(), key=lambda e: (e.details["seq"] != seqs[0], e.order))
            root = ranks[culprit] if culprit in ranks else reps[0]
            others = [e for e in reps if e is not root][:3]
            return self._make(
                FailureClass.COLLECTIVE_MISMATCH,
                root,
                self._evidence(root, others),
                rank=culprit,
                subtype="seq_desync",
                rule="seq_desync",
                details={**root.details, "groups": "; ".join(parts)},
            )
        return None

    def _rank_behind(self, reported: list[Event]) -> int | None:
        """The rank behind: one that reported no time-out, while every other rank (at least two)
        reported it was waiting before it reported anything (it reached the collective once the
        others had given up, or never did). A rank waiting may report a lost peer instead of its own
        time-out (a rank that timed out first died under it), as long as one rank timed out; a rank
        whose watchdog reported only that it caught an error or a timeout reported one."""
        lost = [e for e in self._of(Kind.SYMPTOM) if e.rule.subtype == "peer_gone"]
        first: dict[int, int] = {}
        for e in sorted(reported + lost, key=lambda e: e.order):
            if e.rank is not None:
                first.setdefault(e.rank, e.order)
        timed_out = {e.rank for e in reported if e.rank is not None}
        world = self.log.world
        if len(world) < 3 or not timed_out or not set(first) <= world:
            return None
        last = max(world, key=lambda r: first.get(r, float("inf")))
        others = world - {last}
        return None if last in timed_out or not others <= set(first) else last

    def _mismatch(
        self, timeouts: list[Event], pg: str, seq: int, sigs: dict[tuple[Any, Any, Any], set[int | None]]
    ) -> Verdict:
        ordered = sorted(sigs.items(), key=lambda kv: (len(kv[1]), str(kv[0])))
        minority = ordered[0][1]
        rank = next(iter(minority)) if len(minority) == 1 and len(ordered[0][1]) < len(ordered[-1][1]) else None
        if self.fr_summary is not None and self.fr_summary.culprit_rank is not None:
            rank = self.fr_summary.culprit_rank
        parts = []
        for (op, nin, _nout), ranks in sorted(sigs.items(), key=lambda kv: str(kv[0])):
            who = ",".join(str(r) for r in sorted(r for r in ranks if r is not None)) or "?"
            size = f" NumelIn={nin}" if nin is not None else ""
            parts.append(f"rank {who}: {op}{size}")
        detail = f"SeqNum {seq}: " + "; ".join(parts)
        at_seq = [e for e in timeouts if e.details.get("seq") == seq]
        reps: list[Event] = []
        seen_sig: set[tuple[Any, Any, Any]] = set()
        for e in sorted(
            at_seq,
            key=lambda e: (
                len(sigs[(e.details.get("op"), e.details.get("numel_in"), e.details.get("numel_out"))]),
                e.order,
            ),
        ):
            s = (e.details.get("op"), e.details.get("numel_in"), e.details.get("numel_out"))
            if s not in seen_sig:
                seen_sig.add(s)
                reps.append(e)
        root = reps[0]
        return self._make(
            FailureClass.COLLECTIVE_MISMATCH,
            root,
            self._evidence(root, reps[1:]),
            rank=rank,
            details={**root.details, "groups": detail},
            rule="same_seq_mismatch",
        )

    def _crash(self, crashes: list[Event]) -> Verdict:
        root = crashes[0]
        # a more telling crash line than a generic exception: a signal, a child dead of one, an actor
        # (a child that exited with a code of its own, after the exception, tells less than the exception;
        # a kill after an exception of the killed process's own is not what ended it first)
        specific = [
            e
            for e in crashes
            if e.rule.subtype not in _NO_MORE_THAN_AN_EXCEPTION
            and not (e.rule.subtype == "child_exit" and (e.details.get("exit_code") or 0) > 0)
        ]
        if root.rule.subtype == "exception" and specific and not _raised_before(specific[0], crashes):
            root = specific[0]
        if root.rank is None and self.fr_summary is not None and self.fr_summary.culprit_rank is not None:
            root.rank = self.fr_summary.culprit_rank  # a rank that died leaves no dump; the others name it
        sig = root.details.get("signal") or self.sig
        # a process that ended by a signal of its own first (torchrun's root cause: rank 0 aborted)
        # was not killed: a kill after it is the launcher stopping the others
        ended_otherwise = root.details.get("signal") not in (None, "SIGKILL")
        kills = [e for e in crashes if _is_kill(e) and not (ended_otherwise and e.order > root.order)]
        if sig == "SIGKILL" or kills:
            # silent: the killed process raised nothing of its own first (only the exit status said
            # SIGKILL: the first crash line is no exception)
            silent = not _raised_before(kills[0], crashes) if kills else root.rule.subtype != "exception"
            found = self._memory_pressure(kills, silent)
            if found is not None:
                subtype, note, extra = found
                return self._make(
                    FailureClass.HOST_OOM,
                    root,
                    self._evidence(root, prefix=[note]),
                    subtype=subtype,
                    rule=subtype,
                    details={**root.details, **extra},
                    host_mem_peak_frac=extra.get("host_mem_peak_frac"),
                )
            if silent:  # killed from outside with no sign of why: the advice says where it is recorded
                ranked = [e.rank for e in kills if e.rank is not None]
                rank = root.rank if root.rank is not None or not ranked else ranked[0]
                return self._make(
                    FailureClass.CRASH, root, self._evidence(root, kills[:1]), signal_name="SIGKILL", rank=rank
                )
        last_exc = [e for e in crashes if e.rule.subtype == "exception"]
        extra_ev = last_exc[-1:] if last_exc else []
        ranked = [e.rank for e in crashes if e.rank is not None and e.rule.subtype == "child_exit"]
        rank = root.rank if root.rank is not None or not ranked else ranked[0]  # the launcher names the rank
        return self._make(FailureClass.CRASH, root, self._evidence(root, extra_ev), signal_name=sig, rank=rank)

    def _memory_pressure(self, kills: Sequence[Event], silent: bool) -> tuple[str, Evidence, dict[str, Any]] | None:
        """What the log (or the launcher) says about host memory before a SIGKILL (``pressure``): a
        peak at ``HOST_OOM_PEAK_FRAC``, readouts climbing, and, for a silent kill, a memory-heavy
        phase right before it or a memory limit the run lives under; as ``(subtype, line, details)``."""
        peak, note = self._host_peak()
        if peak is not None and peak >= HOST_OOM_PEAK_FRAC and note is not None:
            return "sigkill_after_climb", note, {"host_mem_peak_frac": peak}
        if self.log.host_climb is not None:
            return "sigkill_memory_climbing", self.log.host_climb, {}
        if not silent:
            return None
        heavy = next((e.heavy for e in kills if e.heavy is not None), None)
        if heavy is None and not kills:
            heavy = self.log.heavy_at_end  # only the exit status said SIGKILL: the log's last lines
        if heavy is not None:
            return "sigkill_in_heavy_phase", heavy[1], {"heavy_phase": heavy[0]}
        if self.log.memory_limit is not None:
            return "sigkill_under_limit", self.log.memory_limit, {}
        return None

    def _host_peak(self) -> tuple[float | None, Evidence | None]:
        """The host-memory peak: the launcher's sample or the log's own readout, whichever is higher."""
        read = self.log.host_peak
        if read is not None and (self.host_peak is None or read[0] >= self.host_peak):
            return read[0], read[1]
        if self.host_peak is None:
            return None, None
        return self.host_peak, Evidence(
            0, f"host memory peaked at {self.host_peak:.0%} of RAM before SIGKILL", OWN_SOURCE
        )

    def _status_only(self) -> Verdict:
        tail = self.log.tail_errors or self.log.last_lines
        sig = self.sig
        found = self._memory_pressure((), silent=True) if sig == "SIGKILL" else None
        if found is not None:
            subtype, note, extra = found
            return self._make(
                FailureClass.HOST_OOM,
                None,
                (note, *tail),
                subtype=subtype,
                rule=subtype,
                phase=self.log.phase,
                details=extra,
                host_mem_peak_frac=extra.get("host_mem_peak_frac"),
            )
        what = f"ended by {sig}" if sig else f"exited with code {self.exit_code}"
        note = Evidence(0, f"the command {what}; no cause found in the log", OWN_SOURCE)
        return self._make(
            FailureClass.CRASH,
            None,
            (note, *tail),
            subtype="signal" if sig else "no_cause",
            rule="exit_status",
            phase=self.log.phase,
        )

    def _no_cause(self, tail_errors: tuple[Evidence, ...]) -> Verdict:
        """The log ends in error lines no rule knows: never ``ok``."""
        note = Evidence(0, "the log ends in error lines; no cause found", OWN_SOURCE)
        return self._make(
            FailureClass.CRASH,
            None,
            (note, *tail_errors[-MAX_EVIDENCE + 1 :]),
            subtype="no_cause",
            rule="no_cause",
            phase=self.log.phase,
        )
