"""The rules: which message formats of PyTorch, NCCL, gloo, CUDA, Ray, vLLM, torchrun, Hydra and
the kernel mean which failure, how much they weigh, what they read and what to do about them.

Every rule is keyed on a program's own message text (``Watchdog caught collective operation
timeout``, ``CUDA out of memory``, ``No available memory for the cache blocks``, ...), never on a
particular log. A rule has cheap substring ``keys`` (any one must occur) checked before its
regular expression, so that lines no rule can match cost a few substring tests. A rule carries all
it means (``rule.Rule``): its pattern's named groups and its ``details`` reader say what the line
tells (a port, a collective's sequence number, an exit code), ``in_context`` what the traceback
before it changes, and ``advice`` what to do (a line, or a function of the context). Rules live by
family, each with the readers and advice it needs (``config``, ``memory``, ``cuda``, ``nccl``,
``connect``, ``collectives``, ``crashes``); adding a rule is adding one ``Rule`` to its family's
section. ``RULES`` is the order they are tried in: the first that matches a line wins. Rules of one
class and subtype carry one advice (``RULE_ADVICE``).

Weights (``Kind``) drive root-cause selection in ``classify``:

- ``ROOT``: a specific cause (device or host OOM, CUDA error, NCCL error, init failure, refused
  config, explicit collective mismatch). The earliest one wins over everything else.
- ``INIT``: rendezvous/store/connect failures. A root cause before the first training step; after
  it, a consequence of another rank's failure (a collective timeout if nothing better is found).
- ``TIMEOUT``: a collective did not complete (NCCL watchdog, blocking wait, gloo, heartbeat).
- ``CRASH``: a process died without a recognised cause (exception, signal, actor death).
- ``SYMPTOM``: what a failure drags along (aborts, ``terminate called``, peers reset, SIGTERM to
  the other ranks, ``ray.kill``): evidence at most, a crash only when nothing else is there.
- ``SUPPORT``: lines that say something went wrong without being fatal by themselves (``NCCL
  WARN``, c10d connect retries, loguru ``ERROR`` lines); an ``NCCL WARN`` error before a timeout or
  an NCCL failure names the cause.
"""

from __future__ import annotations

from nccl_tune.diagnose.rules import collectives, config, connect, crashes, cuda, memory, nccl
from nccl_tune.diagnose.rules.config import CONFIG_ASSERTION
from nccl_tune.diagnose.rules.connect import RAY_PLACEMENT_WAIT, RENDEZVOUS_RESET
from nccl_tune.diagnose.rules.crashes import TORCHRUN_ROOT_CAUSE
from nccl_tune.diagnose.rules.keys import (
    CLEAN_EXIT,
    CLEAN_EXIT_KEYS,
    HOST_MEMORY,
    HOST_MEMORY_KEYS,
    MEMORY_HEAVY,
    MEMORY_LIMIT,
    MEMORY_LIMIT_KEYS,
    MEMORY_LIMIT_NOT,
    PROGRAM_EXIT,
    TRAINING_END,
    build_prefilter,
    template,
)
from nccl_tune.diagnose.rules.rule import CONTEXT_BYTES, Kind, Rule, advice_by_cause

RULES: tuple[Rule, ...] = (
    *config.REFUSED,
    *nccl.IB_VERBS,  # before host memory: their errno texts read like it
    *memory.HOST,  # before device memory: Ray's OutOfMemoryError is host RAM
    *memory.DEVICE,
    *config.STARTUP,
    *cuda.ERRORS,
    *nccl.ERRORS,
    *connect.RENDEZVOUS,
    *collectives.UNFINISHED,
    *crashes.DIED,
    *crashes.DRAGGED_ALONG,
    *nccl.WARNINGS,
    *crashes.LOGGED_ERRORS,
    *crashes.ANY_EXCEPTION,
)
"""Every rule a line's keys can find, in the order they are tried."""

TAIL_RULES: tuple[Rule, ...] = (crashes.KILLED_REPORT,)
"""Rules also tried on the last lines of each log, whose wordings are too many to be prefilter keys
(a shell's report of a kill in every locale)."""

CONTEXT_RULES: tuple[Rule, ...] = (CONFIG_ASSERTION, RENDEZVOUS_RESET, RAY_PLACEMENT_WAIT, TORCHRUN_ROOT_CAUSE)
"""Rules no key finds: the reader applies them from a line's context (``Rule.in_context``, torchrun's
root-cause block)."""

RULE_ADVICE = advice_by_cause((*RULES, *CONTEXT_RULES))
"""``(class, subtype) -> advice`` (None: the class's own)."""

prefilter, PREFILTER_KEYS = build_prefilter(RULES)
"""``prefilter(line) -> bool``: True when some rule or progress line could match the line."""

__all__ = [
    "CLEAN_EXIT",
    "CLEAN_EXIT_KEYS",
    "CONFIG_ASSERTION",
    "CONTEXT_BYTES",
    "CONTEXT_RULES",
    "HOST_MEMORY",
    "HOST_MEMORY_KEYS",
    "MEMORY_HEAVY",
    "MEMORY_LIMIT",
    "MEMORY_LIMIT_KEYS",
    "MEMORY_LIMIT_NOT",
    "PREFILTER_KEYS",
    "RAY_PLACEMENT_WAIT",
    "PROGRAM_EXIT",
    "RENDEZVOUS_RESET",
    "RULES",
    "RULE_ADVICE",
    "TAIL_RULES",
    "TORCHRUN_ROOT_CAUSE",
    "TRAINING_END",
    "Kind",
    "Rule",
    "advice_by_cause",
    "prefilter",
    "template",
]
