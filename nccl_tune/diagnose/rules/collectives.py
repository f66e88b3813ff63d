"""Collectives that did not complete: mismatches the ranks or transports report, NCCL's watchdog in
its wordings, gloo, ``monitoredBarrier``, the heartbeat monitor, the Flight Recorder's dump signal,
nccl-tests."""

from __future__ import annotations

import re
from typing import Any

from nccl_tune.diagnose.rules.rule import Kind, Rule, rx
from nccl_tune.diagnose.wording import FR_ENV_HINT, AdviceContext, timed_out
from nccl_tune.failure import FailureClass as F

_WORK_FIELD = re.compile(r"(SeqNum|OpType|NumelIn|NumelOut|Timeout\(ms\))=([^,)\s]+)")

_PG = re.compile(r"\[PG (?:ID )?(?P<pg>\d+)(?: PG GUID (?P<guid>[^\s\]]+))?[^\]]*Rank \d+\]")


_WATCHDOG_WHOLE = re.compile(
    r"(?:[Cc]aught collective operation timeout: |Work )WorkNCCL\([A-Za-z]+(?:\(ms\))?=[^,()\s]*"
    r"(?:, [A-Za-z]+(?:\(ms\))?=[^,()\s]*)*\) (?:ran for \d+ milliseconds before timing out"
    r"|timed out in blocking wait(?: \((?:TORCH_)?NCCL_BLOCKING_WAIT=1\))?)\.?\s*$"
)
"""A watchdog message from its head to the end of its line, every field of its work whole: what the
lines after a wrapped one must complete it into."""


def _watchdog_work(msg: str, det: dict[str, Any]) -> None:
    """The work's op, sequence number, sizes and timeout, and the process group; a work still cut
    short (no rows after it complete it: ``Rule.whole``) names no fields: its last one may be cut."""
    fields = dict(_WORK_FIELD.findall(det.get("work", ""))) if det.pop("closed", None) else {}
    if "SeqNum" in fields:
        det["seq"] = int(fields["SeqNum"])
    if "OpType" in fields:
        det["op"] = fields["OpType"]
    for key, name in (("NumelIn", "numel_in"), ("NumelOut", "numel_out"), ("Timeout(ms)", "timeout_ms")):
        if key in fields and fields[key].lstrip("-").isdigit():
            det[name] = int(fields[key])
    _group(msg, det)
    det.pop("work", None)


def _group(msg: str, det: dict[str, Any]) -> None:
    """The process group the line names (its GUID where it has one), as ``pg``; none where it names
    none (the watchdog's line of PyTorch before 2.4 names only the rank: the line after it may)."""
    pg = _PG.search(msg)
    if pg:
        det["pg"] = pg.group("guid") or pg.group("pg")


def _work_seq(msg: str, det: dict[str, Any]) -> None:
    det["seq"] = int(det["seq"])
    _group(msg, det)


def _at_work(msg: str, det: dict[str, Any]) -> None:
    """The work the watchdog caught an error or a time-out at (``at_work``: the sequence number of
    the time-out line before it) and the group that line may not name."""
    det["at_work"] = int(det.pop("at"))
    _group(msg, det)


def _gloo_op(msg: str, det: dict[str, Any]) -> None:
    det["op"] = f"gloo {det.get('direction', '')}".strip()


def _barrier_culprits(msg: str, det: dict[str, Any]) -> None:
    if "ranks" in det:
        det["culprits"] = [int(r) for r in re.findall(r"\d+", det.pop("ranks"))]


def _dump_from_rank(msg: str, det: dict[str, Any]) -> None:
    if det.get("from_rank") is not None:
        det["from_rank"] = int(det["from_rank"])


def _gloo_sizes(msg: str, det: dict[str, Any]) -> None:
    got, want = det.pop("received_gloo", None), det.pop("expected_gloo", None)
    if got is not None:
        det["received"], det["expected"] = got, want


def _size_on_wire(ctx: AdviceContext) -> str:
    """A transport got more bytes than the collective posted."""
    d = ctx.details
    sizes = ""
    if d.get("local_size") and d.get("remote_size"):  # NCCL's IB: what this rank sends, what its peer posted
        sizes = f" (this rank sends {d['local_size']} bytes where its peer posted {d['remote_size']})"
    elif d.get("received") and d.get("expected"):
        sizes = f" ({d['received']} bytes arrived where {d['expected']} were posted)"
    return (
        f"The ranks disagree on a collective's size{sizes}: the transport received a message of another size than "
        "this rank posted. Either the ranks call the collective with different tensor shapes or in a different "
        "order (uneven last batches, a rank-only branch; TORCH_DISTRIBUTED_DEBUG=DETAIL checks shapes at the call), "
        "or NCCL settings differ between nodes (NCCL_PROTO, NCCL_ALGO, NCCL_BUFFSIZE or the NCCL version: compare "
        "each node's environment); if neither, on InfiniBand check the NICs' PCI write ordering (NCCL_IB_DISABLE=1 "
        "tells the fabric apart)"
    )


_GLOO_WAIT = timed_out(
    "A gloo collective timed out waiting for a peer that never arrived (a rank is stuck or died silently)"
)


def _dump_signal_head(ctx: AdviceContext) -> str:
    """A rank's watchdog timed out and signalled every rank to dump its Flight Recorder."""
    who = ctx.details.get("from_rank")
    if who is not None:
        first = (
            f"Rank {who}'s watchdog timed out on a collective first and signalled this rank to dump its Flight "
            f"Recorder (this rank did not time out itself): rank {who}'s log names the collective"
        )
    elif ctx.details.get("other"):
        first = (
            "Another rank's watchdog timed out on a collective and signalled this rank to dump its Flight "
            "Recorder (this rank did not time out itself): the rank whose log has `Watchdog caught collective "
            "operation timeout` names the collective"
        )
    else:
        first = (
            "A collective timed out and the watchdog dumped its debug info and ended the process (a collective "
            "timeout, not a hung watchdog)"
        )
    return (
        f"{first}; the rank behind is the one that never entered it: the dumps say which (`nccl-tune diagnose` "
        f"on the folder of dumps; {FR_ENV_HINT} makes them)"
    )


UNFINISHED: tuple[Rule, ...] = (
    Rule(
        "collective_fingerprint_mismatch",
        F.COLLECTIVE_MISMATCH,
        Kind.ROOT,
        ("Detected mismatch between collectives",),
        None,
        "fingerprint",
    ),
    # a transport receiving more bytes than the collective posted: the ranks disagree on the size (or on the
    # NCCL settings that shape the messages): NCCL's IB ("NET/IB : req 0/1 tag 3 peer ... collective mismatch
    # error, local size 786432 remote size 262144"; before 2.12 "... mismatch error local size N remote N"),
    # its sockets ("NET/Socket : peer ... message truncated : receiving N bytes instead of M. If you believe
    # ... a mismatch in collective sizes or environment settings ... between ranks"), gloo ("[enforce fail
    # at .../pair.cc:456] op.preamble.length <= op.nbytes. 8 vs 4. Received data size doesn't match expected
    # size. Is there a distributed collective mismatch in your code?")
    Rule(
        "transport_size_mismatch",
        F.COLLECTIVE_MISMATCH,
        Kind.ROOT,
        ("collective mismatch error", "mismatch in collective sizes", "collective mismatch in your code"),
        rx(
            r"collective mismatch error,? local size (?P<local_size>\d+) remote (?:size )?(?P<remote_size>\d+)"
            r"|message truncated : receiving (?P<received>\d+) bytes instead of (?P<expected>\d+)"
            r"|(?:op\.preamble\.length <= op\.nbytes\. (?P<received_gloo>\d+) vs (?P<expected_gloo>\d+)\. )?"
            r"Received data size doesn't match expected size"
        ),
        "size_on_wire",
        details=_gloo_sizes,
        advice=_size_on_wire,
    ),
    Rule(
        "nccl_watchdog_timeout",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        (
            "Watchdog caught collective operation timeout",
            "Caught collective operation timeout",
            "timed out in blocking wait",
        ),
        # the work may be cut short where a terminal wrapped the line (the reader joins the rows that complete it)
        rx(
            r"(?:[Cc]aught collective operation timeout|Work (?=WorkNCCL\())(?::\s*)?"
            r"(?:WorkNCCL\((?P<work>(?:[^()]|\([^()]*\))*)(?P<closed>\))?)?"
        ),
        "nccl_watchdog",
        details=_watchdog_work,
        whole=_WATCHDOG_WHOLE,
    ),
    Rule(
        "gloo_timeout",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        ("Timed out waiting",),
        rx(r"Timed out waiting (?P<timeout_ms>\d+) ?ms for (?P<direction>recv|send) operation"),
        "gloo",
        details=_gloo_op,
        advice=_GLOO_WAIT,
    ),
    Rule(
        "monitored_barrier",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        ("monitoredBarrier",),
        rx(r"[Rr]anks? (?P<ranks>\d+(?:, ?\d+)*) failed to pass monitoredBarrier"),
        "monitored_barrier",
        details=_barrier_culprits,
    ),
    Rule(
        "watchdog_check_timeout_frame",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        ("checkTimeout",),
        rx(r"WorkNCCL::checkTimeout"),
        "watchdog_frames",
    ),
    Rule(
        "heartbeat_monitor",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        (
            "Heartbeat monitor timed out",
            "watchdog got stuck",
            "Watchdog thread got stuck",
            "heartbeat monitor timed out",
        ),
        None,
        "heartbeat",
        advice=timed_out(
            "The watchdog itself hung (heartbeat monitor): a CUDA/NCCL call never returned, usually a rank stuck "
            "in a collective"
        ),
    ),
    # the Flight Recorder's dump signal, not a hung watchdog: a rank's watchdog timed out on a collective and
    # told every rank through the store to dump ("Received a dump signal due to a collective timeout from rank
    # 0 and we will try our best to dump the debug info", "... from this local rank ...", torch 2.6+'s
    # "Observed flight recorder dump signal from another rank via TCPStore"), then each rank ends itself
    # ("Terminating the process after attempting to dump debug info, due to collective timeout or exception")
    Rule(
        "dump_signal",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        (
            "Received a dump signal due to a collective timeout",
            "Received a global dump signal",
            "Observed flight recorder dump signal",
            "Terminating the process after attempting to dump debug info",
        ),
        rx(
            r"dump signal due to a collective timeout from\s+(?:rank (?P<from_rank>\d+)|(?P<local>this local rank))"
            r"|(?P<other>dump signal from another rank)|dump signal|Terminating the process after attempting to dump"
        ),
        "dump_signal",
        details=_dump_from_rank,
        advice=timed_out(_dump_signal_head),
    ),
    Rule(
        "nccl_tests_timeout",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        ("Test timeout (",),
        rx(r"Test timeout \((?P<timeout_s>\d+)s\)"),
        "nccl_tests",
        advice="nccl-tests gave up on a collective after its -T timeout: a rank, GPU or link is stuck (not slow); rerun "
        "with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and compare the ranks' last lines",
    ),
    # PyTorch 2.4+'s watchdog: "[PG ID 0 PG GUID 0(default_pg) Rank 0] Timeout at NCCL work: 25, last enqueued
    # NCCL work: 25, last completed NCCL work: 24."
    Rule(
        "nccl_work_timeout",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        ("Timeout at NCCL work",),
        rx(
            r"Timeout at NCCL work: (?P<seq>\d+), last enqueued NCCL work: (?P<enqueued>-?\d+), last completed NCCL "
            r"work: (?P<completed>-?\d+)"
        ),
        "nccl_watchdog",
        details=_work_seq,
    ),
    Rule(
        "some_nccl_ops_failed",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        ("Some NCCL operations have failed or timed out",),
        None,
        "nccl_generic",
    ),
    Rule(
        "watchdog_exception",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        ("detected by watchdog at work",),
        rx(r"detected by watchdog at work: (?P<at>\d+)"),
        "nccl_generic",
        details=_at_work,
    ),
    Rule(
        "gloo_pair_closed",
        F.COLLECTIVE_TIMEOUT,
        Kind.SYMPTOM,
        ("pair closure", "Application timeout caused"),
        None,
        "gloo",
        advice=_GLOO_WAIT,
    ),
)
"""Collectives that did not complete."""
