"""What a rule is: one message format, how much it weighs (``Kind``), what it reads from its line and
what to do about it (``Rule``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from nccl_tune.diagnose.wording import Advice
from nccl_tune.failure import FailureClass as F


class Kind(str, Enum):
    """How much a matching line weighs in root-cause selection (see the ``rules`` package's docstring)."""

    ROOT = "root"
    INIT = "init"
    TIMEOUT = "timeout"
    CRASH = "crash"
    SYMPTOM = "symptom"
    SUPPORT = "support"


Details = Callable[[str, dict[str, Any]], None]
"""Reads more from a matching message into its event's details, in place."""


InContext = Callable[["re.Match[str] | None", str, Callable[[], bytes]], "Rule | None"]
"""``(match, message, before)``: the rule the line means given ``before()``, the bytes printed just
before it (``CONTEXT_BYTES``); None: its own."""


@dataclass(frozen=True)
class Rule:
    """One message format: what it means, what it reads from a line, and what to do about it."""

    name: str
    failure_class: F
    kind: Kind
    keys: tuple[str, ...]
    """Substrings of the message; the rule is tried only when one of them occurs."""
    pattern: re.Pattern[str] | None = None
    """Must match (``search``) when given; its named groups become the event's details."""
    subtype: str = ""
    """Refines the advice: ``ecc``, ``shm``, ``vllm_kv_budget``, ``port_in_use``, ..."""
    exclude: tuple[str, ...] = field(default=())
    """Substrings that veto the rule (e.g. ``NCCL WARN`` for the c10d port rule)."""
    details: Details | None = None
    """What the advice and the decision need beyond the named groups (numbers as ``int``, a
    ``signal``, a finer ``subtype``): read from the message into the details, in place."""
    whole: re.Pattern[str] | None = None
    """The whole message, for a line a terminal may wrap in the middle of it: a match whose
    ``closed`` group is empty is joined with the next lines when they complete it into this."""
    in_context: InContext | None = None
    """Another rule the line means where the traceback before it says so (an ``AssertionError``
    raised in a config validation function is a refused config, not a crash)."""
    advice: Advice | None = None
    """The advice line of a verdict of this class and subtype, or a function of the context giving
    it; None: the class's own (``advice``). Rules of one class and subtype carry the same."""
    refined: Mapping[str, Advice] = field(default_factory=dict, compare=False)
    """The advice of the finer subtypes ``details`` may name (``nccl_warn``'s ``shm``)."""
    once_training: Rule | None = field(default=None, compare=False)
    """The rule the line means once a training step has finished (a configuration refused mid-run
    is a bug on that code path; an IB verbs failure after the set-up is the transport's)."""


def rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


CONTEXT_BYTES = 2048
"""Bytes before a line searched for its context (a traceback's frames, vLLM, weight sync, a time stamp)."""


def advice_by_cause(rules: Iterable[Rule]) -> dict[tuple[F, str], Advice | None]:
    """The advice of each class and subtype the rules name (with the finer subtypes their ``details``
    name); raises ``ValueError`` when two rules of one class and subtype carry different advice."""
    out: dict[tuple[F, str], Advice | None] = {}
    rules = list(rules)
    rules += [r.once_training for r in rules if r.once_training is not None]
    for rule in rules:
        for subtype, advice in ((rule.subtype, rule.advice), *rule.refined.items()):
            key = (rule.failure_class, subtype)
            if out.setdefault(key, advice) is not advice:
                raise ValueError(
                    f"rule {rule.name}: the rules of {rule.failure_class.value}/{subtype} carry different advice"
                )
    return out
