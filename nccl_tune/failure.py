"""Failure classes and verdicts: how a trial (or any log) ended, as data.

Every module that reports an outcome speaks in these types. ``diagnose/`` produces
``Verdict`` values from logs; ``launchers/`` attaches one to every ``TrialResult``;
``tuner/`` records and learns from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class FailureClass(str, Enum):
    """Root cause of a trial's end. ``OK`` is the only success, and it needs positive evidence of
    an end (``NO_END`` when a log shows none)."""

    OK = "ok"
    OOM = "oom"
    """Device (GPU) memory exhausted: CUDA OOM, vLLM KV-cache budget, ..."""
    HOST_OOM = "host_oom"
    """Host RAM exhausted: kernel OOM killer, Ray memory monitor."""
    COLLECTIVE_TIMEOUT = "collective_timeout"
    """A collective did not complete in time (NCCL watchdog, heartbeat monitor, gloo timeout)."""
    COLLECTIVE_MISMATCH = "collective_mismatch"
    """Ranks disagree on the collective (different op, size or sequence number)."""
    NCCL_ERROR = "nccl_error"
    """NCCL reported an error of its own (system error, remote error, invalid usage, bad env value)."""
    CUDA_ERROR = "cuda_error"
    """A CUDA runtime error other than OOM (ECC, illegal address, device-side assert)."""
    INIT_FAILURE = "init_failure"
    """Rendezvous, store, port or connect failure before the first step."""
    CONFIG_ERROR = "config_error"
    """The command refused its configuration (unknown key, validation assertion)."""
    HANG = "hang"
    """Our stall watchdog fired: no progress for longer than the stall timeout."""
    BUDGET = "budget"
    """Alive and progressing, but stopped by the trial budget or for being slower than the incumbent."""
    CRASH = "crash"
    """Died for any other reason."""
    INTERRUPTED = "interrupted"
    """The tuner was interrupted (Ctrl-C, SIGTERM, killed) while the trial ran."""
    NO_END = "no_end"
    """No evidence either way: a log with no failure in it that shows no end (no end-of-training
    line, no clean exit reported, no exit status). Only a bare log given to ``nccl-tune diagnose``
    can be this; a trial always has an exit status or a stop reason."""

    @property
    def is_failure(self) -> bool:
        return self is not FailureClass.OK

    @property
    def is_environment_failure(self) -> bool:
        """Failures that say the node or the command is broken, not the parameters."""
        return self in (FailureClass.INIT_FAILURE, FailureClass.CONFIG_ERROR, FailureClass.CUDA_ERROR)


SIGNAL_NAMES = {
    1: "SIGHUP",
    2: "SIGINT",
    3: "SIGQUIT",
    4: "SIGILL",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    11: "SIGSEGV",
    13: "SIGPIPE",
    14: "SIGALRM",
    15: "SIGTERM",
}


def signal_from_exit(exit_code: int | None) -> str | None:
    """The signal behind an exit status: negative (``subprocess``: killed by signal N) or 128+N
    (a shell reporting a child killed by signal N); None for a plain exit code."""
    if exit_code is None:
        return None
    if exit_code < 0:
        return SIGNAL_NAMES.get(-exit_code, f"SIG{-exit_code}")
    if 128 < exit_code < 128 + 65:
        return SIGNAL_NAMES.get(exit_code - 128, f"SIG{exit_code - 128}")
    return None


def norm_signal(name: str | int | None) -> str | None:
    """``9``, ``"9"``, ``"kill"``, ``"SIGKILL"`` -> ``"SIGKILL"``; None stays None."""
    if name is None or name == "":
        return None
    text = str(name).upper().strip()
    if text.lstrip("-").isdigit():
        return SIGNAL_NAMES.get(abs(int(text)), f"SIG{abs(int(text))}")
    return text if text.startswith("SIG") else f"SIG{text}"


def split_returncode(returncode: int | None) -> tuple[int | None, str | None]:
    """``Popen.returncode`` as (exit code, signal name): a negative one is a signal, no exit code."""
    if returncode is None:
        return None, None
    if returncode < 0:
        return None, norm_signal(-returncode)
    return returncode, None


@dataclass(frozen=True)
class Evidence:
    """One log line that supports a verdict."""

    line_no: int
    """1-based line number in ``source``."""
    text: str
    """The line, ANSI colours stripped, without its trailing newline."""
    source: str = ""
    """Where the line came from (a file name such as ``stderr.log``), empty when unknown."""

    def __str__(self) -> str:
        where = f"{self.source}:{self.line_no}" if self.source else str(self.line_no)
        return f"{where}: {self.text}"


@dataclass(frozen=True)
class Cause:
    """Which rule decided a verdict: ``rule`` is its id (``hydra_unknown_key``, ``cuda_oom``,
    ``stall``, ``no_cause``, ...), ``subtype`` its refinement (``unknown_key``, ``vllm_kv_budget``,
    ...), ``details`` the values it read (key, port, seq, op, exit code, ...). Code acts on these,
    never on evidence text."""

    rule: str
    subtype: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "subtype": self.subtype,
            "details": {k: _jsonable(v) for k, v in self.details.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Cause | None:
        if not data:
            return None
        return cls(str(data.get("rule") or ""), str(data.get("subtype") or ""), dict(data.get("details") or {}))


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


OUTSIDE_CAUSES = frozenset({"outside_signal", "ecc", "gpu_lost", "gpu_busy"})
"""Cause subtypes no value of a run can bring about: a signal from outside (a scheduler, ``kill``, a
shutdown), faulty GPU memory, a GPU lost from the bus (``HARDWARE_XIDS`` when an Xid names it), a
GPU another process holds. (A node that died, or a task Slurm killed, may have run out of host
memory: those stay the run's.)"""
HARDWARE_XIDS = frozenset({"48", "63", "64", "74", "79", "92", "94", "95"})
"""Xids of a GPU's hardware: double-bit and uncontained ECC errors, row remapping, NVLink, fallen off
the bus. Others (13, 31, 43: a kernel's fault, an illegal address) a run's values can cause."""


@dataclass(frozen=True)
class Verdict:
    """The classification of one run: class, root-cause rank, cause, evidence and advice."""

    failure_class: FailureClass
    rank: int | None = None
    """Root-cause rank when it can be known, else None."""
    evidence: tuple[Evidence, ...] = ()
    advice: str = ""
    """One line a person can act on."""
    phase: str | None = None
    """Training phase the failure happened in (e.g. ``policy_train``), when known."""
    after_training: bool = False
    """True when the failure happened after training finished (teardown, final checkpoint)."""
    flight_recorder: Mapping[str, Any] | None = field(default=None, compare=False)
    """Summary of the Flight Recorder analysis when dumps were present (see ``diagnose``)."""
    cause: Cause | None = None
    """The rule that decided it (None only for verdicts made before causes were recorded)."""

    @property
    def ok(self) -> bool:
        return self.failure_class is FailureClass.OK

    @property
    def from_outside(self) -> bool:
        """The run failed for a cause no value of it can bring about (``OUTSIDE_CAUSES``)."""
        if self.cause is None or self.cause.subtype not in OUTSIDE_CAUSES:
            return False
        xid = self.cause.details.get("xid")
        return self.cause.subtype != "gpu_lost" or xid is None or str(xid) in HARDWARE_XIDS

    @property
    def refused_key(self) -> bool:
        """The command refused a configuration key it does not know."""
        return (
            self.failure_class is FailureClass.CONFIG_ERROR
            and self.cause is not None
            and (self.cause.subtype == "unknown_key")
        )

    def to_json(self) -> dict[str, Any]:
        """Evidence as ``{"file", "line", "text"}`` objects and the cause as an object."""
        return {
            "class": self.failure_class.value,
            "rank": self.rank,
            "evidence": [{"file": e.source, "line": e.line_no, "text": e.text} for e in self.evidence],
            "advice": self.advice,
            "phase": self.phase,
            "after_training": self.after_training,
            "flight_recorder": dict(self.flight_recorder) if self.flight_recorder else None,
            "cause": self.cause.to_json() if self.cause else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        return cls(
            failure_class=FailureClass(data["class"]),
            rank=data.get("rank"),
            evidence=tuple(_evidence_from_json(item) for item in data.get("evidence") or ()),
            advice=data.get("advice") or "",
            phase=data.get("phase"),
            after_training=bool(data.get("after_training")),
            flight_recorder=data.get("flight_recorder"),
            cause=Cause.from_json(data.get("cause")),
        )


def _evidence_from_json(item: Any) -> Evidence:
    if isinstance(item, Mapping):
        return Evidence(int(item.get("line") or 0), str(item.get("text") or ""), str(item.get("file") or ""))
    head, _, text = str(item).partition(": ")  # "file:line: text", written before evidence was structured
    src, _, num = head.rpartition(":")
    try:
        return Evidence(int(num), text, src)
    except ValueError:
        return Evidence(0, str(item))


OK_VERDICT = Verdict(FailureClass.OK, advice="", cause=Cause("measured"))
