"""Reading progress from a trial's log lines with the search space's ``ProgressRules``.

``ProgressTracker`` recognises the preset when the space names none (the first preset whose rules
match a line is used for the rest of the trial), then keeps the open-phase stack (``Started:
'generate'`` pushes, ``Finished: 'generate', ...`` pops), every finished step's duration (from the
log, or the wall clock between step lines; a step number printed again, by another rank or a
redrawn bar, is one step) and the rate it printed, the longest duration per phase,
the trainer's memory lines per rank (with, for lines of the live output that give a total, the
highest share of the GPU per phase open when they were read), and when the last progress line
arrived. It is fed from the log reader thread and read from the supervising thread.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from nccl_tune.diagnose.text import torchrun_prefix
from nccl_tune.errors import NcclTuneError
from nccl_tune.launchers.step_clock import StepClock
from nccl_tune.patterns import (  # noqa: F401 - re-exported  # the regular-expression parser
    MIN_LITERAL_CHARS,
    _sre_const,
    _sre_parse,
    pattern_literals,
    required_literal,
)
from nccl_tune.presets import DETECT_ORDER, candidates
from nccl_tune.trial import (
    DURATION_GROUPS,
    MEMORY_FIGURES,
    MEMORY_GROUPS,
    OUTSIDE_PHASES,
    PHASE_GROUPS,
    RATE_GROUPS,
    SILENCE_PHASE,
    STARTUP_PHASE,
    STEP_GROUPS,
    STEP_TOKENS_GROUPS,
    ProgressRules,
)

RULE_NAMES = (
    "step_end",
    "phase_start",
    "phase_end",
    "memory",
    "training_done",
    "not_training",
    "step_rate",
    "step_tokens",
)


def _patterns(rules: ProgressRules) -> list[tuple[str, str]]:
    """Every (rule name, pattern) of ``rules``; alternatives are named ``step_end[i]``."""
    out: list[tuple[str, str]] = []
    for name in RULE_NAMES:
        value = getattr(rules, name)
        if isinstance(value, tuple):
            out += [(f"{name}[{i}]" if len(value) > 1 else name, v) for i, v in enumerate(value)]
        elif value is not None:
            out.append((name, value))
    return out


def required_literals(rules: ProgressRules) -> tuple[bytes, ...] | None:
    """Prefilter for the log reader: texts one of which every line a rule (of any preset that may
    be recognised) can match contains, or None if some rule has none (then every line is parsed)."""
    out: list[str] = []
    for ruleset in candidates(rules):
        for _, pattern in _patterns(ruleset):
            lits = pattern_literals(pattern)
            if lits is None:
                return None
            out += lits
    # a line holding "Finished: 'step', time cost: " also holds "', time cost: ": one search is enough
    unique = list(dict.fromkeys(out))
    return tuple(lit.encode() for lit in unique if not any(other != lit and other in lit for other in unique))


@dataclass(frozen=True)
class _Compiled:
    preset: str | None
    step: tuple[re.Pattern[str], ...]
    phase_start: re.Pattern[str] | None
    phase_end: re.Pattern[str] | None
    memory: tuple[re.Pattern[str], ...]
    done: re.Pattern[str] | None
    not_training: re.Pattern[str] | None = None
    step_rate: re.Pattern[str] | None = None
    tokens: re.Pattern[str] | None = None


def _compile_one(name: str, pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise NcclTuneError(
            f"progress rule {name}={pattern!r} is not a valid regular expression ({exc}): fix it in the search space"
        ) from None


def _compile(rules: ProgressRules) -> _Compiled:
    c = {name: _compile_one(name, p) for name, p in _patterns(rules)}

    def alts(field_name: str) -> tuple[re.Pattern[str], ...]:
        return tuple(v for k, v in c.items() if k == field_name or k.startswith(field_name + "["))

    return _Compiled(
        rules.preset,
        alts("step_end"),
        c.get("phase_start"),
        c.get("phase_end"),
        alts("memory"),
        c.get("training_done"),
        c.get("not_training"),
        c.get("step_rate"),
        c.get("step_tokens"),
    )


def compile_rules(rules: ProgressRules) -> None:
    """Raise ``NcclTuneError`` naming a rule (of any preset that may be used) that does not compile."""
    for ruleset in candidates(rules):
        _compile(ruleset)


def _group_paths(pattern: str) -> dict[str, tuple[tuple[int, int], ...]]:
    """For each named group, the alternations (node id, arm) it sits in."""
    parsed = _sre_parse.parse(pattern)
    names = {num: name for name, num in parsed.state.groupdict.items()}
    out: dict[str, tuple[tuple[int, int], ...]] = {}

    def walk(sub, path: tuple[tuple[int, int], ...]) -> None:  # noqa: ANN001
        for op, av in sub:
            if op is _sre_const.SUBPATTERN:
                if av[0] in names:
                    out[names[av[0]]] = path
                walk(av[-1], path)
            elif op is _sre_const.BRANCH:
                for i, arm in enumerate(av[1]):
                    walk(arm, path + ((id(av), i),))
            elif op in (_sre_const.MAX_REPEAT, _sre_const.MIN_REPEAT):
                walk(av[2], path)
            elif op in (_sre_const.ASSERT, _sre_const.ASSERT_NOT):
                walk(av[1], path)

    walk(parsed, ())
    return out


def _exclusive(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> bool:
    """True when two groups sit in different arms of one alternation (never both in one match)."""
    arms = dict(a)
    return any(node in arms and arms[node] != arm for node, arm in b)


def _check_groups(where: str, pattern: str, allowed: frozenset[str], needs: frozenset[str] | tuple[str, ...]) -> None:
    """``needs``: one of these groups must be there (a tuple names them in the order the error shows)."""
    paths = _group_paths(pattern)
    unknown = sorted(set(paths) - allowed)
    if unknown:
        raise NcclTuneError(
            f"{where}: unknown group {unknown[0]!r}; this rule reads the groups {', '.join(sorted(allowed))}"
        )
    if needs and not set(needs) & set(paths):
        names = list(needs) if isinstance(needs, tuple) else sorted(needs)
        raise NcclTuneError(f"{where}: the rule needs a group named {' or '.join(names)}, e.g. (?P<{names[0]}>...)")
    for kind in (RATE_GROUPS, DURATION_GROUPS):  # a step's duration and its rate are two facts; two of one are not
        measures = sorted(set(paths) & set(kind))
        for i, a in enumerate(measures):
            for b in measures[i + 1 :]:
                if not _exclusive(paths[a], paths[b]):
                    raise NcclTuneError(
                        f"{where}: groups {a!r} and {b!r} can match the same line; keep one, "
                        "or make them alternatives of one another (A|B)"
                    )


def check_rules(rules: ProgressRules, where: str) -> None:
    """One-line ``NcclTuneError`` (prefixed with ``where``) for a rule that does not compile or
    whose groups the tracker cannot read."""
    for name, pattern in _patterns(rules):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise NcclTuneError(f"{where}.{name}: bad regular expression: {exc}") from None
        base = name.split("[")[0]
        if base == "step_end":
            _check_groups(f"{where}.{name}", pattern, STEP_GROUPS, frozenset())
        elif base in ("phase_start", "phase_end"):
            _check_groups(f"{where}.{name}", pattern, PHASE_GROUPS, frozenset({"phase"}))
        elif base == "memory":
            _check_groups(f"{where}.{name}", pattern, MEMORY_GROUPS, tuple(MEMORY_FIGURES))
        elif base == "step_rate":
            _check_groups(f"{where}.{name}", pattern, frozenset({*RATE_GROUPS, "step"}), frozenset(RATE_GROUPS))
        elif base == "step_tokens":
            _check_groups(f"{where}.{name}", pattern, STEP_TOKENS_GROUPS, frozenset({"tokens"}))


def rules_hint(rules: ProgressRules) -> str:
    """How the step lines were looked for, for advice when none was found."""
    if rules.detect:
        return (
            f"no progress preset ({', '.join(DETECT_ORDER)}) recognised the output: name one with "
            "progress: {preset: NAME} or write progress.step_end"
        )
    shown = rules.step_end[0] if len(rules.step_end) == 1 else list(rules.step_end)
    head = f"preset {rules.preset}: " if rules.preset else ""
    return f"{head}step_end={shown!r}"


@dataclass(frozen=True)
class ProgressEvent:
    """One thing a progress line said."""

    kind: str
    """``step``, ``phase_start``, ``phase_end``, ``memory`` or ``done``."""
    line_no: int
    t: float
    """Arrival time (``time.monotonic()``)."""
    phase: str | None = None
    seconds: float | None = None
    step_index: int | None = None
    gib: float | None = None
    total_gib: float | None = None
    rank: int | None = None


@dataclass(frozen=True)
class ProgressState:
    """A snapshot of what the log said so far."""

    step_times_s: tuple[float, ...] = ()
    step_line_ends: tuple[int, ...] = ()
    """The steps counted at the end of each step line (a line every Nth step stands for N steps)."""
    step_rates: tuple[float | None, ...] = ()
    """The rate each step line printed (empty when none printed one)."""
    rate_unit: str | None = None
    samples_per_step: float | None = None
    """Samples per step the log printed (the last figure), if the step rule reads them."""
    preset: str | None = None
    """The preset the rules come from (recognised from the output when the space named none)."""
    phase_max_s: Mapping[str, float] = field(default_factory=dict)
    open_phases: tuple[str, ...] = ()
    first_progress_t: float | None = None
    last_progress_t: float | None = None
    training_done: bool = False
    memory_peak_gib: Mapping[int | None, float] = field(default_factory=dict)
    """Largest memory figure printed per rank (None: lines without a rank)."""
    memory_total_gib: Mapping[int | None, float] = field(default_factory=dict)
    """Total memory per rank, when lines gave a percentage or a total."""
    memory_phase_peak_frac: Mapping[int | None, Mapping[str, float]] = field(default_factory=dict)
    """Per rank: the highest share of its GPU a memory line gave while each phase was the innermost
    one open (``OUTSIDE_PHASES`` when none was). Only lines of the live output that give a
    percentage or a total: the other files are read after the trial, when the phase is unknown."""
    memory_phases_last: Mapping[int | None, tuple[str, ...]] = field(default_factory=dict)
    """Per rank: the phases open (outermost first; ``(OUTSIDE_PHASES,)`` for none) when its last
    line counted in ``memory_phase_peak_frac`` was read; the rank whose line came last is last."""
    untimed_steps: tuple[int, ...] = ()
    """Indices of the steps no clock could time (``step_clock``): their duration reads 0."""
    late_step_indices: tuple[int, ...] = ()
    """Indices of the steps whose line arrived together with the previous one (block-buffered
    output); empty when the output came as written."""
    step_tokens: tuple[float | None, ...] = ()
    """Per finished step (aligned with ``step_times_s``): the tokens the ``step_tokens`` rule read
    for it, None where none; empty when it read none."""
    step_peak_frac: tuple[float, ...] = ()
    """Per finished step: the highest share of its GPU a memory line gave in it (NaN where none);
    empty when no line gave both a share and its step."""

    @property
    def open_phase(self) -> str | None:
        """The innermost phase that started and has not finished."""
        return self.open_phases[-1] if self.open_phases else None

    def warmup_for(self, warmup_steps: int) -> int:
        """The warm-up steps, ``warmup_steps`` rounded up to the end of the step line that covers
        them: a line every Nth step times its N steps as one (their mean), slow first step included."""
        return self.line_end_at(warmup_steps)

    def line_end_at(self, steps: int) -> int:
        """``steps`` rounded up to the end of the step line that covers them (``steps`` when none
        does yet)."""
        return next((end for end in self.step_line_ends if end >= steps), steps)

    @property
    def late_steps(self) -> int:
        """Step lines that arrived together with the previous one."""
        return len(self.late_step_indices)

    def upto(self, steps: int | None) -> ProgressState:
        """This state with only its first ``steps`` finished steps (all of them for None): what
        every per-step field says of those steps."""
        if steps is None or steps >= len(self.step_times_s):
            return self
        return replace(
            self,
            step_times_s=self.step_times_s[:steps],
            step_line_ends=tuple(end for end in self.step_line_ends if end <= steps),
            step_rates=self.step_rates[:steps],
            untimed_steps=tuple(i for i in self.untimed_steps if i < steps),
            late_step_indices=tuple(i for i in self.late_step_indices if i < steps),
            step_tokens=self.step_tokens[:steps],
            step_peak_frac=self.step_peak_frac[:steps],
        )


def _group(m: re.Match[str], name: str) -> str | None:
    try:
        return m.group(name)
    except IndexError:
        return None


def _float(m: re.Match[str], name: str) -> float | None:
    value = _group(m, name)
    return float(value.replace(",", "")) if value is not None else None


def _scaled(m: re.Match[str], factors: Mapping[str, float]) -> float | None:
    """The first of ``factors``' groups ``m`` holds, times its factor (None when it holds none)."""
    for name, factor in factors.items():
        value = _float(m, name)
        if value is not None:
            return value * factor
    return None


def _duration(m: re.Match[str]) -> float | None:
    return _scaled(m, DURATION_GROUPS)


def _rate(m: re.Match[str]) -> tuple[float | None, str | None]:
    for name, unit in RATE_GROUPS.items():
        value = _float(m, name)
        if value is not None:
            return value, unit
    return None, None


class ProgressLedger:
    """What progress means for supervision: the finished steps, the open-phase stack, the longest
    duration per phase, and when progress first and last came. ``ProgressTracker`` feeds it from
    log lines; an in-process launcher feeds it modelled events. Not locked: its owner locks."""

    def __init__(self, launch_t: float | None = None) -> None:
        self.launch_t = launch_t
        """When the command was launched, on the clock of the progress times: the first progress
        line then measures the start-up (``STARTUP_PHASE``). None when unknown."""
        self.step_times_s: list[float] = []
        self.step_line_ends: list[int] = []
        self.phase_max_s: dict[str, float] = {}
        self.open_phases: list[str] = []
        self.first_progress_t: float | None = None
        self.last_progress_t: float | None = None

    def phase_started(self, phase: str, t: float) -> None:
        """Phase ``phase`` started at ``t`` (a ``phase_start`` line)."""
        self.open_phases.append(phase)
        self._progress_at(t)

    def phase_finished(self, phase: str, seconds: float, t: float) -> None:
        """Phase ``phase`` finished at ``t`` after ``seconds`` (a ``phase_end`` line)."""
        self._close(phase, seconds)
        self._progress_at(t)

    def step_finished(self, seconds: float, t: float, count: int = 1) -> int:
        """``count`` training steps finished at ``t``, each after ``seconds`` (a step line; it also
        ends the phase named ``step``); returns the last step's index (0-based, warm-up included)."""
        self.step_times_s.extend([seconds] * count)
        self.step_line_ends.append(len(self.step_times_s))
        self._close("step", seconds)
        self._progress_at(t)
        return len(self.step_times_s) - 1

    def progress_at(self, t: float) -> None:
        """A line that is progress but no training step came at ``t`` (an evaluation bar)."""
        self._progress_at(t)

    def _progress_at(self, t: float) -> None:
        if self.first_progress_t is None:
            self.first_progress_t = t
            if self.launch_t is not None:
                self.phase_max_s[STARTUP_PHASE] = max(0.0, t - self.launch_t)
        elif self.last_progress_t is not None and t - self.last_progress_t > self.phase_max_s.get(SILENCE_PHASE, 0.0):
            self.phase_max_s[SILENCE_PHASE] = t - self.last_progress_t
        self.last_progress_t = t

    def _close(self, phase: str, seconds: float) -> None:
        if seconds > self.phase_max_s.get(phase, -1.0):
            self.phase_max_s[phase] = seconds
        if phase in self.open_phases:  # close it and anything opened inside it that never finished
            idx = len(self.open_phases) - 1 - self.open_phases[::-1].index(phase)
            del self.open_phases[idx:]

    def snapshot(self, **more: object) -> ProgressState:
        """The ledger as a ``ProgressState`` (``more``: the state's other fields, step times retimed)."""
        more = {"step_times_s": tuple(self.step_times_s), **more}
        return ProgressState(
            step_line_ends=tuple(self.step_line_ends),
            phase_max_s=MappingProxyType(dict(self.phase_max_s)),
            open_phases=tuple(self.open_phases),
            first_progress_t=self.first_progress_t,
            last_progress_t=self.last_progress_t,
            **more,  # type: ignore[arg-type]
        )


class ProgressTracker:
    """Applies ``ProgressRules`` to cleaned log lines. ``start_t`` (the launch time) lets the first
    step's wall-clock duration count from the launch when the log gives no duration."""

    def __init__(self, rules: ProgressRules, start_t: float | None = None) -> None:
        self._rules = candidates(rules)
        self._candidates = [_compile(r) for r in self._rules]
        self._rx: _Compiled | None = self._candidates[0] if len(self._candidates) == 1 else None
        self.literals = required_literals(rules)
        """Texts one of which every line the rules can match holds (every candidate preset's)."""
        self._literals_now = self.literals
        self._lock = threading.Lock()
        self._start_t = start_t
        self._bar_of: str | None = None
        """The count the training bar runs to (the first bar's): a bar to another count is not training."""
        self._numbered = False
        self._after_eval = False
        """The last progress line was a loop that is not training (``ProgressRules.not_training``)."""
        """A step line with a step number was counted: lines without one are no longer steps."""
        self._last_count = 0
        """Steps the last counted step line stood for."""
        self.ledger = ProgressLedger(launch_t=start_t)
        self._rates: list[float | None] = []
        self._rate_unit: str | None = None
        self._samples: float | None = None
        self._last_index: int | None = None
        self._source_index: dict[str | None, int] = {}
        """The last step number each source (torchrun's rank prefix, None without) printed."""
        self._last_step_t: float | None = None
        self._clock = StepClock()
        """The steps timed by the wall clock, retimed when the output came late."""
        self._done = False
        self._mem_peak: dict[int | None, float] = {}
        self._mem_total: dict[int | None, float] = {}
        self._mem_phase: dict[int | None, dict[str, float]] = {}
        self._mem_phases_last: dict[int | None, tuple[str, ...]] = {}
        self._step_tokens: dict[int, float] = {}
        """0-based step index -> tokens."""
        self._step_mem: dict[tuple[bool, int], float] = {}
        """(numbered by the line, step) -> highest share: printed step numbers, or 0-based indexes of
        the step running when a live line was read."""
        self._events: list[ProgressEvent] = []

    def _recognise(self, text: str) -> _Compiled | None:
        """The first candidate whose step, phase or end rule matches ``text`` (then used for good)."""
        for c, rules in zip(self._candidates, self._rules):
            if any(rx is not None and rx.search(text) for rx in (*c.step, c.phase_start, c.phase_end, c.done)):
                self._rx = c
                self._literals_now = required_literals(rules)
                return c
        return None

    def current_literals(self) -> tuple[bytes, ...] | None:
        """``literals``, narrowed to the recognised preset's once the output has been recognised."""
        return self._literals_now

    def _step_match(self, rx: _Compiled, text: str) -> re.Match[str] | None:
        """The first step alternative that matches ``text``."""
        return next((m for m in (p.search(text) for p in rx.step) if m), None)

    def feed(self, line_no: int, text: str, t: float) -> list[ProgressEvent]:
        """Parse one line; return (and queue for ``drain_events``) what it said."""
        with self._lock:
            if self.ledger.first_progress_t is None and self._start_t is None:
                self._start_t = t  # no launch time given: wall clock counts from the first line seen
        rx = self._rx or self._recognise(text)
        if rx is None:
            return []
        step = self._step_match(rx, text) if rx.step else None
        end = rx.phase_end.search(text) if rx.phase_end else None
        start = rx.phase_start.search(text) if rx.phase_start else None
        mem = next((m for m in (p.search(text) for p in rx.memory) if m), None)
        done = rx.done.search(text) if rx.done else None
        tokens = rx.tokens.search(text) if rx.tokens else None
        events: list[ProgressEvent] = []
        with self._lock:
            if rx.not_training is not None and rx.not_training.search(text):
                self._after_eval = True
                self.ledger.progress_at(t)
            elif step and self._after_eval:
                self._after_eval = False
                self._skip_step(step, t, torchrun_prefix(text))
                step = None
            if step and not self._take_step(step, line_no, t, events, torchrun_prefix(text)):
                step = None  # a step already counted (a redrawn bar, another rank's line)
            rate_line = rx.step_rate.search(text) if rx.step_rate is not None else None
            if rate_line is not None and self._last_count:  # after the step its line may follow
                named = _group(rate_line, "step")
                self._fill_rate(int(named) if named is not None else self._last_index, rate_line)
            if not step and end:
                phase = end.group("phase")
                seconds = _duration(end) or 0.0
                self.ledger.phase_finished(phase, seconds, t)
                events.append(ProgressEvent("phase_end", line_no, t, phase, seconds))
            if start:
                phase = start.group("phase")
                self.ledger.phase_started(phase, t)
                events.append(ProgressEvent("phase_start", line_no, t, phase))
            if mem:
                self._take_memory(mem, line_no, t, events, tuple(self.ledger.open_phases))
            if tokens:
                self._take_tokens(tokens)
            if done:
                self._done = True
                events.append(ProgressEvent("done", line_no, t))
            self._events.extend(events)
        return events

    def feed_memory(self, line_no: int, text: str, t: float) -> None:
        """A line of another of the trial's files (a trainer's worker log): only its memory figure
        counts, read with the recognised preset's memory rules (every candidate's before one is)."""
        for rx in (self._rx,) if self._rx is not None else self._candidates:
            mem = next((m for m in (p.search(text) for p in rx.memory) if m), None)
            if mem:
                with self._lock:
                    self._take_memory(mem, line_no, t, [])
                return

    def _repeats(self, index: int, source: str | None) -> bool:
        """Step ``index`` (printed by ``source``) was counted already: another rank's line for the same
        step (torchrun interleaves the ranks' lines, under ``--tee`` out of order by several steps) or
        a progress bar redrawn. A number at or below the highest counted is new only when its own
        source's numbers went back: that source started counting again (a new epoch's bar)."""
        own = self._source_index.get(source)
        self._source_index[source] = index
        top = self._last_index
        if top is None or index > top:
            return False
        return own is None or index >= own

    def _not_training(self, m: re.Match[str], index: int | None, t: float) -> bool:
        """The step line ``m`` is no training step: a bar that runs to another count than the
        training bar's (the Trainer's evaluation bar), or a line without a step number once lines
        with one have come (a log dict beside the bar that numbers the steps)."""
        of_text = _group(m, "of")
        if of_text is not None:
            if self._bar_of is None:
                self._bar_of = of_text
            elif of_text != self._bar_of:
                self.ledger.progress_at(t)
                return True
        if index is None:
            return self._numbered
        self._numbered = True
        return False

    def _skip_step(self, m: re.Match[str], t: float, source: str | None) -> None:
        """The training bar moved by a validation batch (``m``): its number is seen, not counted, and
        the validation's time is no training step's."""
        index_text = _group(m, "step")
        if index_text is not None and self._last_index is not None:
            self._last_index = max(self._last_index, int(index_text))
            self._source_index[source] = int(index_text)
        self._last_step_t = t
        self.ledger.progress_at(t)

    def _fill_rate(self, index: int | None, m: re.Match[str]) -> None:
        """A second line for the step counted last (DeepSpeed's throughput line after its ``step=N``
        line, SkyRL's console dict after its timer) gives the rate that line lacked."""
        rate, unit = _rate(m)
        if rate is None or index != self._last_index or not self._last_count:
            return
        if all(r is None for r in self._rates[-self._last_count :]):
            self._rates[-self._last_count :] = [rate] * self._last_count
            self._rate_unit = unit or self._rate_unit

    def _take_step(
        self, m: re.Match[str], line_no: int, t: float, events: list[ProgressEvent], source: str | None = None
    ) -> bool:
        """Count the step line ``m`` (``source``: the rank prefix it came with) as the steps since
        the previous step line, by the numbers the trainer prints; False when it is no new step."""
        index_text = _group(m, "step")
        index = int(index_text) if index_text is not None else None
        if self._not_training(m, index, t):
            return False
        last = self._last_index
        if index is not None and self._repeats(index, source):
            self._fill_rate(index, m)
            return False
        if index is None:
            count = 1
        elif last is None or index <= last:  # the first line, or a bar that started again (an epoch)
            count = max(1, index)
        else:
            count = index - last
        seconds = _duration(m)
        if seconds is None:
            since = self._last_step_t if self._last_step_t is not None else self._start_t
            seconds = max(0.0, (t - since) / count) if since is not None else 0.0
            self._clock.take(len(self.ledger.step_times_s), t, m.string, count)
        rate, unit = _rate(m)
        samples = _float(m, "samples_per_step")
        self._last_index, self._last_step_t, self._last_count = index, t, count
        self._rates.extend([rate] * count)
        self._rate_unit = unit or self._rate_unit
        self._samples = samples if samples is not None else self._samples
        index = self.ledger.step_finished(seconds, t, count)
        events.append(ProgressEvent("step", line_no, t, "step", seconds, index))
        return True

    def _take_memory(
        self,
        mem: re.Match[str],
        line_no: int,
        t: float,
        events: list[ProgressEvent],
        phases: tuple[str, ...] | None = None,
    ) -> None:
        """A memory line's figures; ``phases``: the phases open when it was read (None: unknown)."""
        gib = _scaled(mem, MEMORY_FIGURES)
        if gib is None:
            return
        rank_text = _group(mem, "rank") or _group(mem, "gpu")
        rank = int(rank_text) if rank_text is not None else None
        pct = _float(mem, "pct")
        total = gib * 100.0 / pct if pct else _float(mem, "total_gib")
        if gib > self._mem_peak.get(rank, -1.0):
            self._mem_peak[rank] = gib
        if total is not None:
            self._mem_total[rank] = total
        if phases is not None and total:
            self._take_phase_share(rank, phases, gib / total)
        step_text = _group(mem, "step")
        if total and (step_text is not None or phases is not None):
            key = (True, int(step_text)) if step_text is not None else (False, len(self.ledger.step_times_s))
            self._step_mem[key] = max(self._step_mem.get(key, -1.0), gib / total)
        events.append(ProgressEvent("memory", line_no, t, gib=gib, total_gib=total, rank=rank))

    def _take_tokens(self, m: re.Match[str]) -> None:
        """A step's tokens: the step its line numbers (1-based), else the last one finished."""
        value = _float(m, "tokens")
        step_text = _group(m, "step")
        index = int(step_text) - 1 if step_text is not None else len(self.ledger.step_times_s) - 1
        if value is not None and index >= 0:
            self._step_tokens[index] = value

    def _per_step(self, n: int) -> tuple[tuple[float | None, ...], tuple[float, ...]]:
        """(tokens, peak share) of the ``n`` finished steps; printed step numbers count from the
        first one a memory line gave."""
        tokens = tuple(self._step_tokens.get(i) for i in range(n)) if self._step_tokens else ()
        numbered = {k: v for (printed, k), v in self._step_mem.items() if printed}
        if numbered:
            first = min(numbered)
            by_index = {k - first: v for k, v in numbered.items()}
        else:
            by_index = {k: v for (_, k), v in self._step_mem.items()}
        peaks = tuple(by_index.get(i, math.nan) for i in range(n)) if by_index else ()
        return tokens, peaks

    def _take_phase_share(self, rank: int | None, phases: tuple[str, ...], frac: float) -> None:
        phase = phases[-1] if phases else OUTSIDE_PHASES
        peaks = self._mem_phase.setdefault(rank, {})
        peaks[phase] = max(peaks.get(phase, -1.0), frac)
        self._mem_phases_last.pop(rank, None)  # re-inserted: the most recent rank is last
        self._mem_phases_last[rank] = phases or (OUTSIDE_PHASES,)

    def open_phases(self) -> tuple[str, ...]:
        """The open-phase stack now, outermost first (a copy: safe to call from any thread)."""
        with self._lock:
            return tuple(self.ledger.open_phases)

    def drain_events(self) -> list[ProgressEvent]:
        """Events since the last call, in the order the lines arrived."""
        with self._lock:
            events, self._events = self._events, []
        return events

    def snapshot(self) -> ProgressState:
        """What the log said so far."""
        with self._lock:
            timed = self._clock.retime(self.ledger.step_times_s)
            step_tokens, step_peaks = self._per_step(len(self.ledger.step_times_s))
            return self.ledger.snapshot(
                step_times_s=timed.step_times_s,
                untimed_steps=timed.untimed,
                late_step_indices=timed.late,
                step_tokens=step_tokens,
                step_peak_frac=step_peaks,
                step_rates=tuple(self._rates) if any(r is not None for r in self._rates) else (),
                rate_unit=self._rate_unit,
                samples_per_step=self._samples,
                preset=self._rx.preset if self._rx is not None else None,
                training_done=self._done,
                memory_peak_gib=MappingProxyType(dict(self._mem_peak)),
                memory_total_gib=MappingProxyType(dict(self._mem_total)),
                memory_phase_peak_frac=MappingProxyType(
                    {rank: MappingProxyType(dict(peaks)) for rank, peaks in self._mem_phase.items()}
                ),
                memory_phases_last=MappingProxyType(dict(self._mem_phases_last)),
            )
