"""Classify a run from its log, exit status and Flight Recorder dumps: root cause over cascades.

``LogClassifier`` streams over lines with bounded memory: a few counters, the open training phases,
the last lines, and at most a few events per rule. Lines no rule can match (``NCCL INFO`` floods,
progress bars, metrics) cost one or a few substring tests; rules run only on the rest.

Root-cause selection (``Kind`` in ``rules``):

1. the earliest specific cause wins: device or host OOM, CUDA error, NCCL error, refused config,
   explicit mismatch, and rendezvous/connect failures that happen before the first training step;
   an NCCL "remote" error is only a consequence when something failed before it;
2. otherwise collective timeouts: ``collective_mismatch`` when ranks time out at the same
   sequence number in different collectives or sizes (or the Flight Recorder says so), else
   ``collective_timeout``; an NCCL ``WARN`` error before the first timeout names the cause instead;
3. otherwise the first crash (exception, signal, actor death): ``host_oom`` when the launcher saw
   host memory climb to ``HOST_OOM_PEAK_FRAC`` before a SIGKILL;
4. otherwise the exit status: ``ok`` for 0 or unknown, ``crash`` for anything else.

Lines of an "Exception ignored" block (``ignored``: the interpreter went on) are flagged; what they
still count for is decided in ``_counts``.

Failures after ``Training done!`` or in the final checkpoint (a save phase outside any step, after
a finished step) are flagged ``after_training``.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from nccl_tune.diagnose import text as T
from nccl_tune.diagnose.advice import advise
from nccl_tune.diagnose.flight_recorder import FlightRecorderSummary, analyse_dumps
from nccl_tune.diagnose.ignored import ENDED, IN, IgnoredBlock, header_prefix
from nccl_tune.diagnose.ignored import HEADS as IGNORED_HEADS
from nccl_tune.diagnose.rules import (
    CONTEXT_BYTES,
    HOST_MEMORY,
    HOST_MEMORY_KEYS,
    PREFILTER_KEYS,
    PROGRAM_EXIT,
    RULES,
    TORCHRUN_ROOT_CAUSE,
    TRAINING_END,
    Kind,
    Rule,
    prefilter,
    template,
)
from nccl_tune.diagnose.scan import BLOCK_BYTES, CoverFinder, block_ranks, covers_for, whole_lines
from nccl_tune.diagnose.wording import AdviceContext
from nccl_tune.failure import OK_VERDICT, Cause, Evidence, FailureClass, Verdict, norm_signal, signal_from_exit
from nccl_tune.patterns import pattern_literals
from nccl_tune.trial import ProgressRules

HOST_OOM_PEAK_FRAC = 0.90
"""Host RAM peak (fraction of total) above which a silent SIGKILL is called ``host_oom``."""
MAX_EVIDENCE = 6
EVENTS_PER_RULE = 8
TIMEOUT_EVENTS_KEPT = 256
TAIL_LINES = 16
TEMPLATE_CACHE = 4096
"""Digit-masked line templates whose prefilter answer is remembered (cleared when full)."""
TEMPLATE_MAX_BYTES = 512
READ_BYTES = 1 << 20
RANK_SCAN_BLOCKS = 64
"""Blocks at the start of a log read for who is who (ranks, Ray worker pids); after them, only blocks
that hold an event are (ranks and Ray workers introduce themselves early)."""
OWN_SOURCE = "nccl-tune"

TRAINED_THROUGH_STEPS = 2
"""Training steps finished after an exception line that say the run went on past it (a logged,
handled exception: not what ended the run); one is not enough, since other ranks may log the end
of the step the exception broke."""
NCCL_DETAIL_LINES = 4
"""Lines after a generic NCCL error within which a specific one (``Last error:`` and the warning it
repeats) tells the same failure."""
MAX_OPEN_BLOCKS = 64
""""Exception ignored" blocks followed at once (several processes' interleaved); the oldest is
dropped beyond them."""
TAIL_CHECK = 3
"""Non-blank last lines of each source that must not be errors for a run to be called ``ok``."""
MAX_SOURCES = 64
_DEATH = (
    r"Traceback \(most recent call last\)|\bKilled\b|\bAborted\b|core dumped|terminate called"
    r"|\bSIG(?:KILL|ABRT|SEGV|BUS)\b"
)
"""Words that say a process died (a traceback, a kill, an abort): both an error line and, in a
warning, a fatal end."""
_ERROR_LINE = re.compile(
    _DEATH + r"|^\s*File \"[^\"]+\", line \d+|\b\w*(?:Error|Exception)\b(?::|\s*$)"
    r"|\b(?:ERROR|FATAL|CRITICAL|Fatal|fatal)\b|\b(?:failed|Failed|FAILED)\b"
    r"|Segmentation fault|[Ee]xit(?:ed|s)? with (?:exit |return )?(?:code|status)(?: =)? -?[1-9]|exitcode\s*:\s*-?[1-9]"
    r"|NCCL WARN"
)
"""A line that says something went wrong (any program's wording): a log ending in one is never ``ok``
(``_is_error``: not a warning-level line, unless it names a fatal end)."""
_WARNING_LINE = re.compile(
    r"^\s*(?:\[rank\d+\]:\s*)?(?:\[W\d{3,4} |\[W [\w.]+:\d+\]|W\d{4} \d\d:\d\d|WARNING\b|\[WARNING\]|\[W\]"
    r"|wandb: WARNING)|\|\s*WARNING\s*\|"
)
"""A warning-level line: glog's ``[W1125 ...]``/``W1125 03:10``, PyTorch's ``[W socket.cpp:601]``,
Python logging's and loguru's ``WARNING``."""
_FATAL_WORDS = re.compile(
    _DEATH + r"|^\s*File \"|\b[A-Z]\w*(?:Error|Exception)\b:|[Ee]xit(?:ed|s)? with (?:exit |return )?(?:code|status)"
    r"|exitcode\s*:"
)
_CARETS = re.compile(r"^\s*[\^~]+\s*$")
_P2P_OPS = {"SEND", "RECV", "send", "recv"}
"""Point-to-point operations: their sequence numbers legitimately differ between ranks."""
_FRAME_LINE = re.compile(r"^\s*File \"[^\"]+\", line \d+")
WRAPPED_LINES = 3
"""Lines after a watchdog line cut inside its ``WorkNCCL(...)`` that may hold the rest of it."""
_RAISE_CODE = re.compile(r"\braise [A-Za-z_][\w.]*\(")
_SUMMARY_RANK = re.compile(r"^\s*rank\s*:\s*(?P<rank>\d+)")
_SUMMARY_EXIT = re.compile(r"^\s*exitcode\s*:\s*(?P<code>-?\d+)")
_SUMMARY_SIGNAL = re.compile(r"Signal (?P<num>\d+) \((?P<name>SIG\w+)\)")
_SAVE_PHASES = {"save_checkpoints", "save_hf_model"}
_WEIGHT_SYNC_HINTS = ("sync_weights", "sync_model", "broadcast_to_inference_engines", "update_weights", "weight_sync")
_VLLM_STEP_HINTS = ("execute_model", "EngineCore encountered a fatal error", "step_with_batch_queue")
"""A vLLM engine running a model step (generating), in the lines before an OOM."""
_VLLM_START_HINTS = (
    "profile_run",
    "determine_available_memory",
    "initialize_kv_cache",
    "EngineCore failed to start",
    "capture_model",
    "load_model",
)
"""A vLLM engine starting (loading weights, profiling memory, sizing its KV cache, capturing CUDA graphs): its
profiling also runs ``execute_model``, so these win."""
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
class _Event:
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
    """When the line says it was printed (month, day, h, m, s, microseconds), if it says."""

    @property
    def kind(self) -> Kind:
        return self.rule.kind

    @property
    def failure_class(self) -> FailureClass:
        return self.rule.failure_class

    def evidence(self) -> Evidence:
        return Evidence(self.line_no, self.text, self.source)


@dataclass
class _Phases:
    """What the progress lines said: open phases, the last leaf, steps, the final save, the end."""

    stack: list[str] = field(default_factory=list)
    last_leaf: str | None = None
    last_started: str | None = None
    steps_started: int = 0
    steps_finished: int = 0
    final_save: bool = False
    training_done: bool = False

    def started(self, phase: str) -> None:
        if phase == "step":
            self.steps_started += 1
            self.final_save = False
        elif phase in _SAVE_PHASES and "step" not in self.stack and self.steps_finished > 0:
            self.final_save = True
        if len(self.stack) < 32:
            self.stack.append(phase)
        self.last_started = phase

    def finished(self, phase: str) -> None:
        if self.last_started == phase:
            self.last_leaf = phase
        self.last_started = None
        if phase in self.stack:
            while self.stack:
                if self.stack.pop() == phase:
                    break
        if phase == "step":
            self.steps_finished += 1
            self.steps_started = max(self.steps_started, self.steps_finished)

    def step_finished(self) -> None:
        """A step line that ends no phase named ``step`` (trainers without phase lines)."""
        self.steps_finished += 1
        self.steps_started = max(self.steps_started, self.steps_finished)

    @property
    def current(self) -> str | None:
        """Innermost open phase; else the leaf that last finished (a failing phase's timer still
        logs ``Finished`` while the exception unwinds)."""
        return self.stack[-1] if self.stack else self.last_leaf

    @property
    def after_training(self) -> bool:
        return self.training_done or self.final_save


class ProgressReader:
    """The progress rules (the search space's, or the preset a trial was recognised as; SkyRL's
    timer lines when none is known) applied to candidate lines: phases, steps and the end of
    training, for the verdict's phase and timing."""

    def __init__(self, rules: ProgressRules | None = None) -> None:
        rules = _rules_in_use(rules)
        self._step: list[re.Pattern[str]] = []
        self._one: dict[str, re.Pattern[str]] = {}
        literals: list[str] = []
        named = [("step_end", p) for p in rules.step_end] + [
            (name, getattr(rules, name))
            for name in ("phase_start", "phase_end", "training_done")
            if getattr(rules, name)
        ]
        for name, pattern in named:
            try:
                rx = re.compile(pattern)
            except re.error:
                continue  # a space's broken rule is reported where the space is loaded
            lits = pattern_literals(pattern)
            if lits is None:
                continue  # no text to find its lines by: this rule cannot be read here
            if name == "step_end":
                self._step.append(rx)
            else:
                self._one[name] = rx
            literals += lits
        self.literals: tuple[str, ...] = tuple(dict.fromkeys(literals))

    def any_literal(self, raw: str) -> bool:
        return any(lit in raw for lit in self.literals)

    def feed(self, msg: str, phases: _Phases) -> bool:
        """Apply the rules to one cleaned message; True when it was a progress line."""
        one = self._one
        end = one["phase_end"].search(msg) if "phase_end" in one else None
        step = next((m for rx in self._step if (m := rx.search(msg))), None)
        start = one["phase_start"].search(msg) if "phase_start" in one else None
        done = one["training_done"].search(msg) if "training_done" in one else None
        if end is not None and "phase" in end.groupdict():
            phases.finished(end.group("phase"))
        if step is not None and not (end is not None and end.groupdict().get("phase") == "step"):
            phases.step_finished()
        if start is not None and "phase" in start.groupdict():
            phases.started(start.group("phase"))
        if done is not None:
            phases.training_done = True
        return bool(end or step or start or done)


def _rules_in_use(rules: ProgressRules | None) -> ProgressRules:
    """The rules to read: the space's when they name a step rule, else SkyRL's preset under them
    (a log of unknown origin; other trainers' end-of-training lines are known anyway)."""
    from nccl_tune.presets import SKYRL, with_overrides

    if rules is None:
        return SKYRL
    return with_overrides(SKYRL, rules) if rules.detect else rules


@lru_cache(maxsize=16)
def _finder_for(extra: tuple[str, ...]) -> CoverFinder:
    return CoverFinder(covers_for(PREFILTER_KEYS, extra))


class LogClassifier:
    """Streaming classifier: ``feed`` lines or ``feed_bytes`` chunks (from one or more sources),
    then ``verdict``."""

    def __init__(self, source: str = "", progress: ProgressRules | None = None) -> None:
        self._source = source
        self._progress = ProgressReader(progress)
        self._line_no = 0
        self._order_base = 0
        self._phases = _Phases()
        self._events: list[_Event] = []
        self._per_rule: dict[str, int] = {}
        self._tail: deque[tuple[int, bytes]] = deque(maxlen=TAIL_LINES)
        self._pid_rank: dict[int, int] = {}
        self._ranks_seen: set[int] = set()
        self._world_size: int | None = None
        self._summary_left = 0
        self._exit_seen = False
        self._open_blocks: dict[tuple[str, str], IgnoredBlock] = {}
        """The "Exception ignored" blocks still open at the end of the last byte block, by
        (source, prefix)."""
        self._ignored: set[int] = set()
        """Line numbers of the current byte block that belong to such a block."""
        self._summary_rank: int | None = None
        self._summary_event: _Event | None = None
        self._templates: dict[bytes, bool] = {}
        self._context: tuple[bytes, int, int] = (b"", 0, 0)
        self._host_peak: tuple[float, Evidence] | None = None
        """The highest host-memory readout in the log (fraction of RAM) and its line."""
        self._limits: dict[str, int] = {}
        """Per source, the last line that counts (see ``limit``)."""
        self._tails: dict[str, tuple[tuple[int, bytes], ...]] = {}
        """The last lines of the sources read before the current one."""
        self._finder = _finder_for(self._progress.literals)
        self._blocks = 0
        self.lines_read = 0

    # --- input ------------------------------------------------------------------------------

    def limit(self, source: str, last_line: int) -> None:
        """Lines of ``source`` after ``last_line`` are read but neither events nor last lines."""
        self._limits[source] = last_line

    def set_source(self, source: str, line_no: int = 0) -> None:
        """Start another input, or continue one at line ``line_no + 1`` (lines of several files
        merged in time order); events keep their order of arrival."""
        self._order_base += self._line_no + 1
        if self._tail and len(self._tails) < MAX_SOURCES:
            self._tails[self._source] = tuple(self._tail)
        self._source = source
        self._line_no = line_no
        self._tail.clear()

    def feed(self, lines: Iterable[str]) -> None:
        """Read lines (with or without their newline) from the current source."""
        parts: list[str] = []
        size = 0
        for line in lines:
            if not line.endswith("\n"):
                line += "\n"
            parts.append(line)
            size += len(line)
            if size >= BLOCK_BYTES:
                self._block("".join(parts).encode("utf-8", "surrogatepass"))
                parts, size = [], 0
        if parts:
            self._block("".join(parts).encode("utf-8", "surrogatepass"))

    def feed_bytes(self, chunks: Iterable[bytes]) -> None:
        """Read a byte stream (any chunking) from the current source; undecodable bytes are replaced."""
        for block in whole_lines(chunks):  # an over-long line keeps its head and a cut marker
            self._block(block)

    def _block(self, buf: bytes) -> None:
        """Whole lines: only those holding a cover literal reach Python (see ``scan``)."""
        base = self._line_no
        resume, counted_to, newlines = 0, 0, 0
        if self._summary_left:
            resume = self._sequential(buf, 0, base + 1)
        for key in [k for k in self._open_blocks if k[0] == self._source]:
            self._follow_ignored(key, buf, 0, base + 1)
        early = self._blocks < RANK_SCAN_BLOCKS
        self._blocks += 1
        if early:
            self._block_ranks(buf)
        events_before = len(self._events)
        for start, end in self._finder.line_spans(buf):
            if start < resume:
                continue
            newlines += buf.count(b"\n", counted_to, start)
            counted_to = start
            line_no = base + newlines + 1
            self._context = (buf, start, end)
            self._candidate(buf[start:end].decode("utf-8", "replace"), line_no)
            if self._summary_left:
                resume = self._sequential(buf, end + 1, line_no + 1)
        if not early and len(self._events) > events_before:
            self._block_ranks(buf)  # who printed this block's events
        total = newlines + buf.count(b"\n", counted_to) + (0 if buf.endswith(b"\n") else 1)
        self._line_no = base + total
        self.lines_read += total
        self._keep_tail(buf, base + total)
        self._ignored.clear()

    def _block_ranks(self, buf: bytes) -> None:
        ranks, pid_rank = block_ranks(buf)
        self._ranks_seen |= ranks
        for pid, rank in pid_rank.items():
            self._pid_rank.setdefault(pid, rank)

    def _sequential(self, buf: bytes, offset: int, line_no: int) -> int:
        """Lines from ``offset`` on, one by one, while torchrun's summary block lasts; returns
        where the block scan resumes."""
        while self._summary_left and offset < len(buf):
            end = buf.find(b"\n", offset)
            end = len(buf) if end < 0 else end
            self._line_no = line_no
            self._summary(buf[offset:end].decode("utf-8", "replace"))
            offset, line_no = end + 1, line_no + 1
        return offset

    def _keep_tail(self, buf: bytes, last_no: int) -> None:
        """The block's last lines that count: not those of an "Exception ignored" block."""
        kept: list[tuple[int, int, int]] = []
        pos = len(buf) - 1 if buf.endswith(b"\n") else len(buf)
        no = last_no
        while len(kept) < TAIL_LINES and pos >= 0:
            start = buf.rfind(b"\n", 0, pos) + 1
            if no not in self._ignored:
                kept.append((no, start, pos))
            pos, no = start - 1, no - 1
        last = self._limits.get(self._source)
        for no, start, end in reversed(kept):
            if last is None or no <= last:
                self._tail.append((no, buf[start:end]))

    def _open_ignored(self, prefix: str) -> None:
        """An "Exception ignored" header on the current line: follow its block from the next line."""
        self._ignored.add(self._line_no)
        key = (self._source, prefix)
        self._open_blocks.pop(key, None)
        if len(self._open_blocks) >= MAX_OPEN_BLOCKS:
            self._open_blocks.pop(next(iter(self._open_blocks)))
        self._open_blocks[key] = IgnoredBlock(prefix)
        buf, _, end = self._context
        self._follow_ignored(key, buf, end + 1, self._line_no + 1)

    def _follow_ignored(self, key: tuple[str, str], buf: bytes, offset: int, line_no: int) -> None:
        """The lines of the open block ``key`` from ``offset`` (line ``line_no``) on, into
        ``_ignored``, until the block ends or the byte block does."""
        block = self._open_blocks[key]
        while offset < len(buf):
            end = buf.find(b"\n", offset)
            end = len(buf) if end < 0 else end
            said = block.feed(T.clean(buf[offset:end].decode("utf-8", "replace")))
            if said == IN:
                self._ignored.add(line_no)
            if said == ENDED or block.exhausted:
                del self._open_blocks[key]
                return
            offset, line_no = end + 1, line_no + 1

    def _candidate(self, raw: str, line_no: int) -> None:
        if "NCCL INFO" in raw:
            if "Init COMPLETE" in raw or "Init START" in raw:
                self._nccl_init(raw)
            return
        tpl = template(raw)
        cache = self._templates
        hit = cache.get(tpl)
        if hit is None:
            hit = prefilter(raw) or self._progress.any_literal(raw)
            if len(tpl) <= TEMPLATE_MAX_BYTES:
                if len(cache) >= TEMPLATE_CACHE:
                    cache.clear()
                cache[tpl] = hit
        if hit:
            self._line_no = line_no
            self._line(raw)
        elif "[rank" in raw or "[Rank " in raw or "rank=" in raw:
            self._rank_hint(raw)

    # --- per line ---------------------------------------------------------------------------

    def _nccl_init(self, raw: str) -> None:
        got = T.nccl_init_rank(raw)
        if got:
            pid, rank, nranks = got
            self._pid_rank[pid] = rank
            self._ranks_seen.add(rank)
            self._world_size = max(self._world_size or 0, nranks)

    def _rank_hint(self, raw: str) -> None:
        """A candidate line that names a rank anywhere: remember it, and which Ray worker pid it is."""
        text = T.clean(raw)
        r = T.rank_of(text)
        if r is not None:
            self._ranks_seen.add(r)
            pid = T.ray_pid(text)
            if pid is not None:
                self._pid_rank.setdefault(pid, r)

    def _line(self, raw: str) -> None:
        text = T.clean(raw)
        msg = T.message(text)
        if self._progress.feed(msg, self._phases):
            return
        if any(k in msg for k in TRAINING_END):
            self._phases.training_done = True
            return
        if any(k in msg for k in PROGRAM_EXIT):
            self._exit_seen = True
            return
        if "%" in msg and any(k in msg for k in HOST_MEMORY_KEYS):
            self._host_readout(text, msg)
            return
        if any(h in text for h in IGNORED_HEADS):
            prefix = header_prefix(text)
            if prefix is not None:
                self._open_ignored(prefix)
                return
        if "raise " in msg and _RAISE_CODE.search(msg):
            return  # a traceback's source line (`raise ValueError(...)`), not the error itself
        if "Root Cause" in msg and "first observed failure" in msg:
            self._summary_left = 14
            self._summary_rank = None
            self._summary_event = None
            return
        for rule in RULES:
            if rule.exclude and any(x in msg for x in rule.exclude):
                continue
            for k in rule.keys:
                if k in msg:
                    break
            else:
                continue
            m = rule.pattern.search(msg) if rule.pattern is not None else None
            if rule.pattern is not None and m is None:
                continue
            if rule.whole is not None and m is not None and m.group("closed") is None:
                msg, m = self._unwrapped(rule.whole, msg, m)
            self._add(rule, text, msg, m)
            return
        r = T.rank_of(msg)
        if r is not None:
            self._ranks_seen.add(r)

    def _unwrapped(self, whole: re.Pattern[str], msg: str, m: re.Match[str]) -> tuple[str, re.Match[str]]:
        """A line a terminal wrapped inside its message (a watchdog line cut inside its
        ``WorkNCCL(...)``), joined with the next lines of the byte block when they complete it into
        one ``whole`` message from its head to the end of a line (``Rule.whole``: for the watchdog,
        every field whole, then ``ran for N milliseconds before timing out.`` and nothing else), so
        that its collective and sequence number are read; any other line after it (another rank's,
        which would start a line of its own) leaves it as it was, its fields unread. A line cut at
        the end of a byte block stays unread too."""
        buf, _, end = self._context
        joined, pos = msg, end + 1
        for _ in range(WRAPPED_LINES):
            if pos >= len(buf):
                break
            nl = buf.find(b"\n", pos)
            nl = len(buf) if nl < 0 else nl
            joined += T.clean(buf[pos:nl].decode("utf-8", "replace"))
            if whole.match(joined, m.start()):
                whole = m.re.search(joined, m.start())
                if whole is not None and whole.group("closed"):
                    return joined, whole
            pos = nl + 1
        return msg, m

    def _before(self) -> bytes:
        """The bytes printed just before the current line (``CONTEXT_BYTES`` at most)."""
        buf, start, _ = self._context
        return buf[max(0, start - CONTEXT_BYTES) : start]

    def _stamp_before(self) -> tuple[int, ...] | None:
        """The last time stamp printed shortly before the current line (its own has none)."""
        window = self._before().decode("utf-8", "replace")
        last = None
        for m in _STAMP.finditer(window):
            last = m
        return time_stamp(last.group(0)) if last is not None else None

    def _host_readout(self, text: str, msg: str) -> None:
        """A host-memory readout the trainer printed: keep the highest."""
        m = HOST_MEMORY.search(msg)
        if m is None or "GPU" in msg or "cuda" in msg:
            return
        frac = float(m.group("pct")) / 100.0
        if self._host_peak is None or frac >= self._host_peak[0]:
            self._host_peak = (frac, Evidence(self._line_no, text, self._source))

    def _summary(self, raw: str) -> None:
        """torchrun's ``Root Cause (first observed failure)`` block: rank, exitcode, signal."""
        self._summary_left -= 1
        text = T.clean(raw)
        msg = T.message(text)
        m = _SUMMARY_RANK.search(msg)
        if m:
            self._summary_rank = int(m.group("rank"))
            return
        m = _SUMMARY_EXIT.search(msg)
        if m:
            code = int(m.group("code"))
            self._summary_event = self._add(
                TORCHRUN_ROOT_CAUSE,
                text,
                msg,
                None,
                rank=self._summary_rank,
                details={"exit_code": code, "signal": signal_from_exit(code)},
            )
            return
        m = _SUMMARY_SIGNAL.search(msg)
        if m and self._summary_event is not None:
            self._summary_event.details["signal"] = m.group("name")
        if msg.startswith("====") and self._summary_event is not None:
            self._summary_left = 0

    def _event_rank(self, rule: Rule, text: str, msg: str, m: re.Match[str] | None, pid: int | None) -> int | None:
        if m is not None and "rank" in m.groupdict() and m.group("rank") is not None:
            return int(m.group("rank"))
        rank = T.rank_of(msg)
        if rank is not None:
            if pid is not None:
                self._pid_rank[pid] = rank
            return rank
        if pid is not None:
            return self._pid_rank.get(pid)
        return None

    def _add(
        self,
        rule: Rule,
        text: str,
        msg: str,
        m: re.Match[str] | None,
        *,
        rank: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> _Event | None:
        last = self._limits.get(self._source)
        if last is not None and self._line_no > last:
            return None
        if rule.in_context is not None:
            rule = rule.in_context(m, msg, self._before) or rule
        ignored = self._line_no in self._ignored
        counter = f"ignored {rule.name}" if ignored else rule.name  # ignored lines cannot use up a rule's events
        count = self._per_rule.get(counter, 0)
        self._per_rule[counter] = count + 1
        limit = TIMEOUT_EVENTS_KEPT if rule.kind is Kind.TIMEOUT else EVENTS_PER_RULE
        if count >= limit:
            return None
        pid = T.ray_pid(text) or T.nccl_pid(msg) or T.task_pid(msg)
        if rank is None:
            rank = self._event_rank(rule, text, msg, m, pid)
        if rank is not None:
            self._ranks_seen.add(rank)
        det: dict[str, Any] = {k: v for k, v in (m.groupdict() if m else {}).items() if v is not None}
        det.update(details or {})
        if rule.details is not None:
            rule.details(msg, det)
        ph = self._phases
        ev = _Event(
            order=self._order_base + self._line_no,
            line_no=self._line_no,
            source=self._source,
            text=text,
            rule=rule,
            rank=rank,
            details=det,
            phase=ph.current,
            before_first_step=ph.steps_started == 0,
            after_training=ph.after_training,
            pid=pid,
            steps_done=ph.steps_finished,
            ignored=ignored,
            stamp=time_stamp(text) or self._stamp_before(),
        )
        if rule.failure_class is FailureClass.OOM:
            buf, start, end = self._context
            recent = buf[max(0, start - CONTEXT_BYTES) : end].decode("utf-8", "replace")
            ev.vllm_context = "vllm" in recent.lower() or "vllm" in msg.lower()
            ev.vllm_stepping = (
                ev.vllm_context
                and any(h in recent for h in _VLLM_STEP_HINTS)
                and not any(h in recent for h in _VLLM_START_HINTS)
            )
            ev.weight_sync_context = any(h in recent for h in _WEIGHT_SYNC_HINTS)
        self._events.append(ev)
        return ev

    # --- decision ---------------------------------------------------------------------------

    def verdict(
        self,
        *,
        exit_code: int | None = None,
        signal_name: str | None = None,
        fr_dumps: Sequence[Path] = (),
        host_mem_peak_frac: float | None = None,
        fr_summary: FlightRecorderSummary | None = None,
    ) -> Verdict:
        """The verdict for everything fed so far."""
        sig = norm_signal(signal_name) or signal_from_exit(exit_code)
        if fr_summary is None and fr_dumps:
            fr_summary = analyse_dumps(list(fr_dumps))
        fr = fr_summary.to_json() if fr_summary is not None and fr_summary.ranks_dumped else None
        return _Decision(self, exit_code, sig, host_mem_peak_frac, fr_summary, fr).decide()

    @property
    def training_done(self) -> bool:
        """A log read said training finished (``Training done!``, the progress rules' end line)."""
        return self._phases.training_done

    @property
    def end_seen(self) -> bool:
        """A log read said training finished or the program exited (``PROGRAM_EXIT``)."""
        return self._phases.training_done or self._exit_seen

    @property
    def pid_ranks(self) -> dict[int, int]:
        """Which rank each process that printed is, as far as the logs say (pid -> rank)."""
        return dict(self._pid_rank)

    def tail_evidence(self, n: int = 3) -> tuple[Evidence, ...]:
        """The last ``n`` non-blank lines of the current source, as evidence."""
        return _tail_lines(self._tail, self._source)[-n:]

    def tail_errors(self, n: int = TAIL_CHECK) -> tuple[Evidence, ...]:
        """For every source read whose last non-blank line is an error (or a traceback frame's code
        line), its last error lines (at most ``n``)."""
        out: list[Evidence] = []
        tails = dict(self._tails)
        tails[self._source] = tuple(self._tail)
        for source, tail in tails.items():
            out += _ending_errors(_tail_lines(tail, source), n)
        return tuple(out)


_STAMP = re.compile(
    r"(?:20\d\d)-(?P<mo>\d\d)-(?P<d>\d\d)[ T_](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<f>\d{1,9}))?"
    r"|\b[EWIF](?P<md>\d{3,4}) (?P<h2>\d\d):(?P<mi2>\d\d):(?P<s2>\d\d)(?:\.(?P<f2>\d{1,9}))?"
    r"|\b(?P<mo3>\d\d)-(?P<d3>\d\d) (?P<h3>\d\d):(?P<mi3>\d\d):(?P<s3>\d\d)"
)


def time_stamp(text: str) -> tuple[int, ...] | None:
    """(month, day, hour, minute, second, microsecond) of a line's own time stamp: ISO dates
    (loguru, DeepSpeed, Python logging), glog's ``E0302 04:12:31.808`` (PyTorch's C++ lines),
    vLLM's ``03-02 09:12:01``; None when the line has none. The year is left out: glog and vLLM
    do not print it, and one run does not span a new year often enough to matter."""
    m = _STAMP.search(text[:160])
    if m is None:
        return None
    g = m.groupdict()
    if g["mo"]:
        month, day, h, mi, sec, frac = g["mo"], g["d"], g["h"], g["mi"], g["s"], g["f"]
    elif g["md"]:
        month, day, h, mi, sec, frac = g["md"][:-2], g["md"][-2:], g["h2"], g["mi2"], g["s2"], g["f2"]
    else:
        month, day, h, mi, sec, frac = g["mo3"], g["d3"], g["h3"], g["mi3"], g["s3"], None
    micro = int((frac or "0")[:6].ljust(6, "0"))
    return int(month), int(day), int(h), int(mi), int(sec), micro


def _time_ordered(events: list[_Event]) -> list[_Event]:
    """Events of several logs in the order they happened, when time stamps allow: within a log an
    event without a stamp takes the one of the event before it (or after it, at the start); a log
    with no stamped event at all keeps every log in the order they were read. ``order`` is
    rewritten to match."""
    by_source: dict[str, list[_Event]] = {}
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


def _is_error(text: str, previous: str) -> bool:
    msg = T.message(text)
    if _CARETS.match(msg):
        return True  # a traceback's position markers (Python 3.11+): the log stops inside a traceback
    if _WARNING_LINE.search(msg) and not _FATAL_WORDS.search(msg):
        return False  # a warning says what failed and goes on ("attempt 1/3 failed", c10d's connect retries)
    return bool(_ERROR_LINE.search(msg)) or bool(_FRAME_LINE.search(T.message(previous)))


def _ending_errors(lines: tuple[Evidence, ...], n: int) -> list[Evidence]:
    """The error lines a log ends with (empty when its last non-blank line is not one)."""
    out: list[Evidence] = []
    for i in range(len(lines) - 1, -1, -1):
        previous = lines[i - 1].text if i else ""
        if not _is_error(lines[i].text, previous) or len(out) >= n:
            break
        out.insert(0, lines[i])
    return out


def _tail_lines(tail: Iterable[tuple[int, bytes]], source: str) -> tuple[Evidence, ...]:
    out = []
    for no, raw in tail:
        text = T.clean(raw.decode("utf-8", "replace"))
        if text.strip():
            out.append(Evidence(no, text, source))
    return tuple(out)


_NO_MORE_THAN_AN_EXCEPTION = frozenset({"exception", "engine_dead", "engine_died"})
"""Crash subtypes that tell no more than an exception before them: vLLM's engine death (its engine's own
error, printed first, is the cause)."""

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


def _trained_past(e: _Event, steps_finished: int, steps: int = 1) -> bool:
    """Training finished at least ``steps`` steps after ``e`` was printed: the run went on past it,
    so it is not what ended the run."""
    return steps_finished >= e.steps_done + steps


def _counts(e: _Event, steps_finished: int) -> bool:
    """Whether an event takes part in the decision. A line of an "Exception ignored" block (the
    interpreter printed the exception and went on) is no crash, refused config or rendezvous
    failure; a device, host-memory or NCCL cause in it still counts (it tells about the machine),
    unless training finished a step after it."""
    if not e.ignored:
        return True
    return e.failure_class in _COUNT_WHEN_IGNORED and not _trained_past(e, steps_finished)


class _Decision:
    """Root-cause selection over the events of one classifier (see the module docstring)."""

    def __init__(
        self,
        clf: LogClassifier,
        exit_code: int | None,
        sig: str | None,
        host_mem_peak_frac: float | None,
        fr_summary: FlightRecorderSummary | None,
        fr: dict[str, Any] | None,
    ) -> None:
        self.clf = clf
        self.steps_finished = clf._phases.steps_finished
        self.events = [e for e in _time_ordered(clf._events) if _counts(e, self.steps_finished)]
        self.exit_code = exit_code
        self.sig = sig
        self.host_peak = host_mem_peak_frac
        self.fr_summary = fr_summary
        self.fr = fr

    # helpers
    def _of(self, *kinds: Kind) -> list[_Event]:
        return [e for e in self.events if e.kind in kinds]

    def _failed_status(self) -> bool:
        return bool(self.sig) or (self.exit_code not in (None, 0))

    def decide(self) -> Verdict:
        for e in self.events:
            if e.rank is None and e.pid is not None and e.pid in self.clf._pid_rank:
                e.rank = self.clf._pid_rank[e.pid]  # the worker named its rank later in the log
        timeouts = self._timeouts()
        strong = [e for e in timeouts if e.rule.subtype != "nccl_generic"]
        roots = self._roots(strong[0].order if strong else None)
        if roots:
            return self._root(roots[0])
        if timeouts:
            return self._timeout(strong or timeouts, timeouts)
        return self._without_root()

    def _timeouts(self) -> list[_Event]:
        """Collectives that did not complete, and connect failures after the first step (a rank
        that died or hung leaves the others waiting); NCCL's own connect failures after the first
        step are transport errors, not time-outs."""
        out = self._of(Kind.TIMEOUT) + [
            e for e in self._of(Kind.INIT) if not e.before_first_step and e.rule.subtype != "nccl_connect"
        ]
        return sorted(out, key=lambda e: e.order)

    def _roots(self, first_timeout: int | None) -> list[_Event]:
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
                    for x in self.events
                ):
                    continue
            roots.append(e)
        return roots

    def _without_root(self) -> Verdict:
        """No specific cause and no time-out: a crash, the exit status, or the last lines decide;
        ``ok`` needs a clean (or unknown) exit status and a log that does not end in errors."""
        failed = self._failed_status()
        tail_errors = self.clf.tail_errors()
        crashes = [
            e
            for e in self._of(Kind.CRASH)
            if e.rule.subtype != "exception" or not _trained_past(e, self.steps_finished, TRAINED_THROUGH_STEPS)
        ]
        if crashes and (failed or self.exit_code is None or tail_errors):
            return self._crash(crashes)
        symptoms = self._of(Kind.SYMPTOM)
        if symptoms and (failed or self.exit_code is None) and not self.clf.training_done:
            return self._crash(symptoms)
        if failed:
            return self._status_only()
        if tail_errors:
            return self._no_cause(tail_errors)
        return OK_VERDICT

    # --- building the verdict ---------------------------------------------------------------

    def _evidence(
        self, root: _Event | None, extra: Sequence[_Event] = (), prefix: Sequence[Evidence] = ()
    ) -> tuple[Evidence, ...]:
        out: list[Evidence] = list(prefix)
        seen = {(e.source, e.line_no) for e in out}

        def push(ev: _Event) -> None:
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

    def _ctx(self, cls: FailureClass, ev: _Event | None, **kw: Any) -> AdviceContext:
        base = dict(
            failure_class=cls,
            subtype=(ev.details.get("subtype") or ev.rule.subtype) if ev else "",
            phase=ev.phase if ev else None,
            before_first_step=ev.before_first_step if ev else False,
            vllm_context=ev.vllm_context if ev else False,
            vllm_stepping=ev.vllm_stepping if ev else False,
            weight_sync_context=ev.weight_sync_context if ev else False,
            after_training=ev.after_training if ev else self.clf._phases.after_training,
            rank=ev.rank if ev else None,
            details=dict(ev.details) if ev else {},
            signal_name=self.sig,
            exit_code=self.exit_code,
            host_mem_peak_frac=self.host_peak,
            fr=self.fr,
        )
        base.update(kw)
        return AdviceContext(**base)

    def _make(self, cls: FailureClass, ev: _Event | None, evidence: tuple[Evidence, ...], **kw: Any) -> Verdict:
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

    def _nccl_warn_before(self, failure: _Event) -> _Event | None:
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

    def _unresolved_host_before(self, failure: _Event) -> _Event | None:
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

    def _nccl_detail_after(self, error: _Event) -> _Event | None:
        """The specific NCCL error printed within ``NCCL_DETAIL_LINES`` lines after a generic one of
        the same log (PyTorch's ``NCCL error ... Last error:`` then the line NCCL warned): one
        failure, told best by the specific line."""
        for e in self.events:
            if (
                e.order > error.order
                and e.source == error.source
                and e.failure_class is FailureClass.NCCL_ERROR
                and e.kind is Kind.ROOT
                and e.rule.name != "nccl_error"
                and 0 < e.line_no - error.line_no <= NCCL_DETAIL_LINES
            ):
                return e
        return None

    def _root(self, root: _Event) -> Verdict:
        cls = root.failure_class
        if root.rank is None and self.fr_summary is not None and self.fr_summary.culprit_rank is not None:
            # the rank that failed is the one the others waited for in the Flight Recorder
            root.rank = self.fr_summary.culprit_rank
        if root.rule.name == "nccl_error":
            detail = self._nccl_detail_after(root)
            if detail is not None:
                return self._make(cls, root, self._evidence(root, [detail]), subtype=detail.rule.subtype)
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
            if any(h in e.text for e in after for h in _WEIGHT_SYNC_HINTS):
                return self._make(cls, root, self._evidence(root), weight_sync_context=True)
        return self._make(cls, root, self._evidence(root))

    def _timeout(self, timeouts: list[_Event], reported: list[_Event]) -> Verdict:
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
                groups.setdefault((e.details.get("pg", "0"), e.details["seq"]), {}).setdefault(sig, set()).add(e.rank)
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

    def _seq_desync(self, timeouts: list[_Event]) -> Verdict | None:
        """Ranks of one process group that time out at different sequence numbers are out of step
        (a collective completes on all ranks or none): ``collective_mismatch``, naming the rank
        behind (the one lowest sequence number), else the odd collective out."""
        by_pg: dict[str, dict[int, _Event]] = {}
        seqs_of: dict[tuple[str, int], set[int]] = {}
        for e in timeouts:
            if "seq" in e.details and e.rank is not None and e.details.get("op") not in _P2P_OPS:
                pg = e.details.get("pg", "0")
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

    def _rank_behind(self, reported: list[_Event]) -> int | None:
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
        world = set(range(self.clf._world_size)) if self.clf._world_size else set(self.clf._ranks_seen)
        if len(world) < 3 or not timed_out or not set(first) <= world:
            return None
        last = max(world, key=lambda r: first.get(r, float("inf")))
        others = world - {last}
        return None if last in timed_out or not others <= set(first) else last

    def _mismatch(
        self, timeouts: list[_Event], pg: str, seq: int, sigs: dict[tuple[Any, Any, Any], set[int | None]]
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
        reps: list[_Event] = []
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

    def _crash(self, crashes: list[_Event]) -> Verdict:
        root = crashes[0]
        # a more telling crash line than a generic exception: a signal, a child dead of one, an actor
        # (a child that exited with a code of its own, after the exception, tells less than the exception)
        specific = [
            e
            for e in crashes
            if e.rule.subtype not in _NO_MORE_THAN_AN_EXCEPTION
            and not (e.rule.subtype == "child_exit" and (e.details.get("exit_code") or 0) > 0)
        ]
        if root.rule.subtype == "exception" and specific:
            root = specific[0]
        if root.rank is None and self.fr_summary is not None and self.fr_summary.culprit_rank is not None:
            root.rank = self.fr_summary.culprit_rank  # a rank that died leaves no dump; the others name it
        sig = root.details.get("signal") or self.sig
        killed = sig == "SIGKILL" or any(e.details.get("signal") == "SIGKILL" for e in crashes)
        peak, note = self._host_peak()
        if killed and peak is not None and peak >= HOST_OOM_PEAK_FRAC and note is not None:
            return self._make(
                FailureClass.HOST_OOM,
                root,
                self._evidence(root, prefix=[note]),
                subtype="sigkill_after_climb",
                rule="sigkill_after_climb",
                host_mem_peak_frac=peak,
            )
        last_exc = [e for e in crashes if e.rule.subtype == "exception"]
        extra = last_exc[-1:] if last_exc else []
        ranked = [e.rank for e in crashes if e.rank is not None and e.rule.subtype == "child_exit"]
        rank = root.rank if root.rank is not None or not ranked else ranked[0]  # the launcher names the rank
        return self._make(FailureClass.CRASH, root, self._evidence(root, extra), signal_name=sig, rank=rank)

    def _host_peak(self) -> tuple[float | None, Evidence | None]:
        """The host-memory peak: the launcher's sample or the log's own readout, whichever is higher."""
        log = self.clf._host_peak
        if log is not None and (self.host_peak is None or log[0] >= self.host_peak):
            return log[0], log[1]
        if self.host_peak is None:
            return None, None
        return self.host_peak, Evidence(
            0, f"host memory peaked at {self.host_peak:.0%} of RAM before SIGKILL", OWN_SOURCE
        )

    def _status_only(self) -> Verdict:
        tail = self.clf.tail_errors() or self.clf.tail_evidence(3)
        sig = self.sig
        peak, note = self._host_peak()
        if sig == "SIGKILL" and peak is not None and peak >= HOST_OOM_PEAK_FRAC and note is not None:
            return self._make(
                FailureClass.HOST_OOM,
                None,
                (note, *tail),
                subtype="sigkill_after_climb",
                rule="sigkill_after_climb",
                phase=self.clf._phases.current,
                host_mem_peak_frac=peak,
            )
        what = f"ended by {sig}" if sig else f"exited with code {self.exit_code}"
        note = Evidence(0, f"the command {what}; no cause found in the log", OWN_SOURCE)
        return self._make(
            FailureClass.CRASH,
            None,
            (note, *tail),
            subtype="signal" if sig else "no_cause",
            rule="exit_status",
            phase=self.clf._phases.current,
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
            phase=self.clf._phases.current,
        )
