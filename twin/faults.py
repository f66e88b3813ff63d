"""Fault injection for tests and demos: the ``SIM_FAULT`` environment variable.

Comma-separated items:

- ``hang:RANK:STEP``: process rank RANK stalls in ``policy_train`` of step STEP (0: in the
  ``sync_weights`` before the first step) instead of entering its next collective;
- ``oom:RANK:STEP``: rank RANK raises ``torch.OutOfMemoryError`` in ``policy_train`` of step STEP;
- ``crash:RANK:STEP``: rank RANK's process dies with SIGSEGV in ``policy_train`` of step STEP;
- ``slow:FACTOR``: every phase takes FACTOR times as long (FACTOR > 0);
- ``orphan``: the program starts a detached child in a new session that ignores SIGTERM.

RANK is a process rank (``0 <= RANK < SIM_RANKS``); it is also the GPU index the messages name.
STEP counts training steps from 1, as SkyRL's ``global_step`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from twin.refusal import SimConfigError

FAULT_ENV = "SIM_FAULT"
_USAGE = "hang:RANK:STEP, oom:RANK:STEP, crash:RANK:STEP, slow:FACTOR or orphan, comma-separated"


@dataclass(frozen=True)
class RankFault:
    """A fault on one rank at one step."""

    kind: str
    """``hang``, ``oom`` or ``crash``."""
    rank: int
    step: int


@dataclass(frozen=True)
class Faults:
    """The faults ``SIM_FAULT`` asks for."""

    rank_faults: tuple[RankFault, ...] = ()
    slow_factor: float = 1.0
    orphan: bool = False

    @property
    def any(self) -> bool:
        return bool(self.rank_faults) or self.slow_factor != 1.0 or self.orphan


def _refuse(text: str, why: str) -> SimConfigError:
    return SimConfigError(
        "sim_env",
        f"{FAULT_ENV}={text!r}: {why} (expected {_USAGE})",
        [f"error: {FAULT_ENV}={text!r}: {why}; expected {_USAGE}"],
    )


def parse_faults(text: str | None, ranks: int) -> Faults:
    """Parse ``SIM_FAULT``; ``ranks`` is the number of processes (RANK must be below it)."""
    if not text or not text.strip():
        return Faults()
    rank_faults: list[RankFault] = []
    slow = 1.0
    orphan = False
    for item in text.split(","):
        parts = [p.strip() for p in item.strip().split(":")]
        kind = parts[0].lower()
        if kind == "orphan" and len(parts) == 1:
            orphan = True
        elif kind == "slow" and len(parts) == 2:
            try:
                slow = float(parts[1])
            except ValueError:
                raise _refuse(text, f"slow factor {parts[1]!r} is not a number") from None
            if not slow > 0:
                raise _refuse(text, f"slow factor {parts[1]!r} must be > 0")
        elif kind in ("hang", "oom", "crash") and len(parts) == 3:
            try:
                rank, step = int(parts[1]), int(parts[2])
            except ValueError:
                raise _refuse(text, f"{item.strip()!r}: RANK and STEP must be integers") from None
            if not 0 <= rank < ranks:
                raise _refuse(text, f"{item.strip()!r}: rank {rank} is not one of the {ranks} ranks (SIM_RANKS)")
            if step < 0 or (step == 0 and kind != "hang"):
                raise _refuse(text, f"{item.strip()!r}: step {step} must be >= 1 (0 only for hang)")
            rank_faults.append(RankFault(kind, rank, step))
        else:
            raise _refuse(text, f"cannot read {item.strip()!r}")
    return Faults(tuple(rank_faults), slow, orphan)
