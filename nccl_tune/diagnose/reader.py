"""The stream reader: a run's logs, line by line, into events, phases, ranks and last lines.

``LogClassifier`` streams over lines or byte blocks of one or more sources with bounded memory: a
few counters, the open training phases, the last lines of each source, and at most a few events
per rule. Lines no rule can match (``NCCL INFO`` floods, progress bars, metrics) cost one or a few
substring tests (``scan``: only lines that hold a cover literal are decoded); rules run only on the
rest, and a matching line becomes an ``Event`` with what its rule reads from it, the rank or
process that printed it, the training phase and when it was printed. ``verdict`` hands what was
read to the root-cause decision (``classify.root_cause``).

Lines of an "Exception ignored" block (``ignored``: the interpreter went on) are flagged, and left
out of the last lines a log is judged by. Failures after ``Training done!`` or in the final
checkpoint (a save phase outside any step, after a finished step) are flagged ``after_training``.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from nccl_tune.diagnose import text as T
from nccl_tune.diagnose.classify import WEIGHT_SYNC_HINTS, Event, LogReading, root_cause
from nccl_tune.diagnose.flight_recorder import FlightRecorderSummary, analyse_dumps
from nccl_tune.diagnose.ignored import ENDED, IN, IgnoredBlock, header_prefix
from nccl_tune.diagnose.ignored import HEADS as IGNORED_HEADS
from nccl_tune.diagnose.pressure import HostMemory, heavy_phase, numbered
from nccl_tune.diagnose.rules import (
    CLEAN_EXIT,
    CONTEXT_BYTES,
    HOST_MEMORY_KEYS,
    MEMORY_LIMIT_KEYS,
    PREFILTER_KEYS,
    PROGRAM_EXIT,
    RULES,
    TAIL_RULES,
    TORCHRUN_ROOT_CAUSE,
    TRAINING_END,
    Kind,
    Rule,
    prefilter,
    template,
)
from nccl_tune.diagnose.scan import BLOCK_BYTES, CoverFinder, block_ranks, covers_for, whole_lines
from nccl_tune.failure import Evidence, FailureClass, Verdict, signal_from_exit
from nccl_tune.patterns import pattern_literals
from nccl_tune.trial import ProgressRules

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

MAX_OPEN_BLOCKS = 64
""""Exception ignored" blocks followed at once (several processes' interleaved); the oldest is
dropped beyond them."""
TAIL_CHECK = 3
"""Non-blank last lines of each source that must not be errors for a run to be called ``ok``."""
MAX_SOURCES = 64
LOOKBACK_BYTES = 16384
"""Bytes before a SIGKILL's line searched for the memory-heavy phase it ended (``pressure.heavy_phase``)."""
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
_FRAME_LINE = re.compile(r"^\s*File \"[^\"]+\", line \d+")
WRAPPED_LINES = 3
"""Lines after a watchdog line cut inside its ``WorkNCCL(...)`` that may hold the rest of it."""
_RAISE_CODE = re.compile(r"\braise [A-Za-z_][\w.]*\(")
_SUMMARY_RANK = re.compile(r"^\s*rank\s*:\s*(?P<rank>\d+)")
_SUMMARY_EXIT = re.compile(r"^\s*exitcode\s*:\s*(?P<code>-?\d+)")
_SUMMARY_SIGNAL = re.compile(r"Signal (?P<num>\d+) \((?P<name>SIG\w+)\)")
_SAVE_PHASES = {"save_checkpoints", "save_hf_model"}
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
    """The progress rules applied to candidate lines: phases, steps and the end of training, for
    the verdict's phase and timing, and the last progress line a log printed. A trial's rules are
    the search space's (or the preset it was recognised as); a log of unknown origin is read with
    every preset's step and end rules and SkyRL's phase timers, so that "before the first step" and
    "the trainer said it finished" hold for any trainer the presets know."""

    def __init__(self, rules: ProgressRules | None = None) -> None:
        self._step: list[re.Pattern[str]] = []
        self._done: list[re.Pattern[str]] = []
        self._one: dict[str, re.Pattern[str]] = {}
        literals: list[str] = []
        for ruleset in _rules_in_use(rules):
            named = [("step_end", p) for p in ruleset.step_end] + [
                (name, getattr(ruleset, name))
                for name in ("phase_start", "phase_end", "training_done")
                if getattr(ruleset, name)
            ]
            for name, pattern in named:
                if name in self._one:
                    continue  # phases come from the first rules that have them
                try:
                    rx = re.compile(pattern)
                except re.error:
                    continue  # a space's broken rule is reported where the space is loaded
                lits = pattern_literals(pattern)
                if lits is None:
                    continue  # no text to find its lines by: this rule cannot be read here
                if name == "step_end":
                    self._step.append(rx)
                elif name == "training_done":
                    self._done.append(rx)
                else:
                    self._one[name] = rx
                literals += lits
        self.literals: tuple[str, ...] = tuple(dict.fromkeys(literals))

    def any_literal(self, raw: str) -> bool:
        return any(lit in raw for lit in self.literals)

    def is_step(self, msg: str) -> bool:
        """Whether a cleaned message is a training step's line."""
        return any(rx.search(msg) for rx in self._step)

    def feed(self, msg: str, phases: _Phases) -> bool:
        """Apply the rules to one cleaned message; True when it was a progress line."""
        one = self._one
        end = one["phase_end"].search(msg) if "phase_end" in one else None
        step = next((m for rx in self._step if (m := rx.search(msg))), None)
        start = one["phase_start"].search(msg) if "phase_start" in one else None
        done = next((m for rx in self._done if (m := rx.search(msg))), None)
        if end is not None and "phase" in end.groupdict():
            phases.finished(end.group("phase"))
        if step is not None and not (end is not None and end.groupdict().get("phase") == "step"):
            phases.step_finished()
        if start is not None and "phase" in start.groupdict():
            phases.started(start.group("phase"))
        if done is not None:
            phases.training_done = True
        return bool(end or step or start or done)


def _rules_in_use(rules: ProgressRules | None) -> tuple[ProgressRules, ...]:
    """The rules to read: the space's when they name a step rule, else every preset under them (the
    trainer is not known); for a log of unknown origin (None), every preset (SkyRL's first: its
    phase timers)."""
    from nccl_tune.presets import DETECT_ORDER, PRESETS, candidates

    if rules is None:
        return tuple(PRESETS[name] for name in DETECT_ORDER)
    return candidates(rules)


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
        self._events: list[Event] = []
        self._per_rule: dict[str, int] = {}
        self._tail: deque[tuple[int, bytes]] = deque(maxlen=TAIL_LINES)
        self._pid_rank: dict[int, int] = {}
        self._ranks_seen: set[int] = set()
        self._world_size: int | None = None
        self._summary_left = 0
        self._exit_seen = False
        self._last_progress: Evidence | None = None
        """The last line the progress rules matched (a step, a phase, the end of training)."""
        self._open_blocks: dict[tuple[str, str], IgnoredBlock] = {}
        """The "Exception ignored" blocks still open at the end of the last byte block, by
        (source, prefix)."""
        self._ignored: set[int] = set()
        """Line numbers of the current byte block that belong to such a block."""
        self._summary_rank: int | None = None
        self._summary_event: Event | None = None
        self._templates: dict[bytes, bool] = {}
        self._context: tuple[bytes, int, int] = (b"", 0, 0)
        self._memory = HostMemory()
        """Host-memory readouts and limits the log shows (``pressure``)."""
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
            self._last_progress = Evidence(self._line_no, text, self._source)
            if "emory" in msg:  # a step line may carry a host-memory figure (verl's perf/cpu_memory_used_gb)
                self._memory.readout(msg, self._last_progress)
            return
        if any(k in msg for k in TRAINING_END):
            self._phases.training_done = True
            return
        if any(k in msg for k in PROGRAM_EXIT) or CLEAN_EXIT.search(msg):
            self._exit_seen = True
            return
        if any(k in msg for k in HOST_MEMORY_KEYS) and self._memory.readout(msg, self._here(text)):
            return
        if any(k in msg for k in MEMORY_LIMIT_KEYS):
            self._memory.limit_line(msg, self._here(text))
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

    def _here(self, text: str) -> Evidence:
        return Evidence(self._line_no, text, self._source)

    def _lines_before(self) -> list[tuple[int, str]]:
        """The lines printed just before the current one (``LOOKBACK_BYTES`` at most; at the start of
        a byte block, the last lines of the block before), numbered."""
        buf, start, _ = self._context
        lines = buf[max(0, start - LOOKBACK_BYTES) : start].split(b"\n")[:-1]
        if start > LOOKBACK_BYTES:
            lines = lines[1:]  # cut inside its first line
        out = numbered(lines, self._line_no - 1)
        if start <= LOOKBACK_BYTES and self._tail:
            first = out[0][0] if out else self._line_no
            out = [(no, raw.decode("utf-8", "replace")) for no, raw in self._tail if no < first] + out
        return out

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
    ) -> Event | None:
        last = self._limits.get(self._source)
        if last is not None and self._line_no > last:
            return None
        if rule.in_context is not None:
            rule = rule.in_context(m, msg, self._before) or rule
        if rule.once_training is not None and self._phases.steps_finished > 0:
            rule = rule.once_training
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
        own_stamp = time_stamp(text)
        ev = Event(
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
            stamp=own_stamp or self._stamp_before(),
            own_stamp=own_stamp is not None,
        )
        if rule.failure_class is FailureClass.OOM:
            self._oom_context(ev, msg)
        if det.get("heavy_phase"):  # the line itself says where it was (a DataLoader worker: loading data)
            ev.heavy = (det["heavy_phase"], ev.evidence())
        elif det.get("signal") == "SIGKILL":
            ev.heavy = heavy_phase(self._lines_before(), self._source, self._progress.is_step)
        self._events.append(ev)
        return ev

    def _oom_context(self, ev: Event, msg: str) -> None:
        """What the lines up to an OOM say it ran out in: a vLLM engine (starting, or stepping), a weight sync."""
        buf, start, end = self._context
        recent = buf[max(0, start - CONTEXT_BYTES) : end].decode("utf-8", "replace")
        ev.vllm_context = "vllm" in recent.lower() or "vllm" in msg.lower()
        ev.vllm_stepping = (
            ev.vllm_context
            and any(h in recent for h in _VLLM_STEP_HINTS)
            and not any(h in recent for h in _VLLM_START_HINTS)
        )
        ev.weight_sync_context = any(h in recent for h in WEIGHT_SYNC_HINTS)

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
        """The verdict for everything fed so far (``classify.root_cause``)."""
        if fr_summary is None and fr_dumps:
            fr_summary = analyse_dumps(list(fr_dumps))
        return root_cause(
            self.reading(),
            exit_code=exit_code,
            signal_name=signal_name,
            host_mem_peak_frac=host_mem_peak_frac,
            fr_summary=fr_summary,
        )

    def reading(self) -> LogReading:
        """What was read so far, as the root-cause decision takes it (its events are this reader's
        own, and those ``TAIL_RULES`` find in the last lines)."""
        ph = self._phases
        tail = numbered((raw for _, raw in self._tail), self._tail[-1][0]) if self._tail else []
        return LogReading(
            events=self._events + self._tail_events(tail),
            steps_finished=ph.steps_finished,
            phase=ph.current,
            after_training=ph.after_training,
            training_done=ph.training_done,
            pid_rank=dict(self._pid_rank),
            world=frozenset(range(self._world_size)) if self._world_size else frozenset(self._ranks_seen),
            host_peak=self._memory.peak,
            tail_errors=self.tail_errors(),
            last_lines=self.tail_evidence(3),
            host_climb=self._memory.climb,
            memory_limit=self._memory.limit,
            heavy_at_end=heavy_phase(tail, self._source, self._progress.is_step),
        )

    def _tail_events(self, tail: list[tuple[int, str]]) -> list[Event]:
        """Events of ``TAIL_RULES`` in the last lines of the log read last that no rule took (a kill
        reported in another locale), as if read at the end."""
        taken = {e.line_no for e in self._events if e.source == self._source}
        ph = self._phases
        out = []
        for i, (no, raw) in enumerate(tail):
            text = T.clean(raw)
            msg = T.message(text)
            rule = next((r for r in TAIL_RULES if r.pattern is not None and r.pattern.search(msg)), None)
            if rule is None or no in taken:
                continue
            details: dict[str, Any] = {}
            if rule.details is not None:
                rule.details(msg, details)
            ev = Event(
                order=self._order_base + no,
                line_no=no,
                source=self._source,
                text=text,
                rule=rule,
                rank=T.rank_of(msg),
                details=details,
                phase=ph.current,
                before_first_step=ph.steps_started == 0,
                after_training=ph.after_training,
                steps_done=ph.steps_finished,
                stamp=time_stamp(text),
                own_stamp=time_stamp(text) is not None,
            )
            if details.get("signal") == "SIGKILL":
                ev.heavy = heavy_phase(tail[:i], self._source, self._progress.is_step)
            out.append(ev)
        return out

    @property
    def training_done(self) -> bool:
        """A log read said training finished (``Training done!``, the progress rules' end line)."""
        return self._phases.training_done

    @property
    def end_seen(self) -> bool:
        """A log read said training finished, or the program exited (``PROGRAM_EXIT``: a process
        group's destructor, a launcher's report of a clean exit; ``CLEAN_EXIT``)."""
        return self._phases.training_done or self._exit_seen

    @property
    def last_progress(self) -> Evidence | None:
        """The last line the progress rules matched, as evidence (None: none did)."""
        return self._last_progress

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
