"""Failure classes and verdicts: how a trial (or any log) ended, as data.

Every module that reports an outcome speaks in these types. ``diagnose/`` produces
``Verdict`` values from logs; ``launchers/`` attaches one to every ``TrialResult``;
``tuner/`` records and learns from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping


class FailureClass(str, Enum):
    """Root cause of a trial's end. ``OK`` is the only success."""

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

    @property
    def is_failure(self) -> bool:
        return self is not FailureClass.OK

    @property
    def is_config_failure(self) -> bool:
        """Failures caused by the trial's parameters (what the sampler should learn to avoid)."""
        return self in _CONFIG_CAUSED

    @property
    def is_environment_failure(self) -> bool:
        """Failures that say the node or the command is broken, not the parameters."""
        return self in (FailureClass.INIT_FAILURE, FailureClass.CONFIG_ERROR, FailureClass.CUDA_ERROR)


_CONFIG_CAUSED = frozenset(
    {
        FailureClass.OOM,
        FailureClass.HOST_OOM,
        FailureClass.COLLECTIVE_TIMEOUT,
        FailureClass.COLLECTIVE_MISMATCH,
        FailureClass.NCCL_ERROR,
        FailureClass.HANG,
        FailureClass.CRASH,
    }
)


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
class Verdict:
    """The classification of one run: class, root-cause rank, evidence and advice."""

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

    @property
    def ok(self) -> bool:
        return self.failure_class is FailureClass.OK

    def to_json(self) -> dict[str, Any]:
        return {
            "class": self.failure_class.value,
            "rank": self.rank,
            "evidence": [str(e) for e in self.evidence],
            "advice": self.advice,
            "phase": self.phase,
            "after_training": self.after_training,
            "flight_recorder": dict(self.flight_recorder) if self.flight_recorder else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Verdict":
        evidence = []
        for item in data.get("evidence") or ():
            head, _, text = str(item).partition(": ")
            src, _, num = head.rpartition(":")
            try:
                evidence.append(Evidence(int(num), text, src))
            except ValueError:
                evidence.append(Evidence(0, str(item)))
        return cls(
            failure_class=FailureClass(data["class"]),
            rank=data.get("rank"),
            evidence=tuple(evidence),
            advice=data.get("advice") or "",
            phase=data.get("phase"),
            after_training=bool(data.get("after_training")),
            flight_recorder=data.get("flight_recorder"),
        )


OK_VERDICT = Verdict(FailureClass.OK, advice="")
