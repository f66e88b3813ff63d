"""What a person sees while a study runs: one line per trial start and end, a live status line
for the running trial on a terminal, and the incumbent. The table at the end is the study's
terminal report (``reporting.terminal``).

Only what is new is said: a trial's values as its changes from the incumbent (from the defaults
before there is one), a failure that reads as an earlier trial's as ``same as trial N``, the
incumbent only when it changes, with why. Each trial start says how far the run is (``trial 3/8 ·
4.0 min · about 6.0 min left``, the time left from the mean time of the trials so far)."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from nccl_tune.failure import FailureClass
from nccl_tune.search_spaces.describe import describe
from nccl_tune.search_spaces.show import memory_text
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.trial import TrialResult
from nccl_tune.tuner.records.stability import Candidate
from nccl_tune.wording import duration, fmt_mem, fmt_steps, fmt_tput, shorten

_FIGURES = re.compile(r"\d+(?:[.,:]\d+)*")
"""What differs between two runs' copies of one failure: process ids, time stamps, sizes."""


def _failure_key(result: TrialResult) -> tuple[str, str, str]:
    """A failure's class, first evidence line and advice, figures left out: two trials with the same
    key failed the same way (the sizes each asked for are in their memory column)."""
    first = result.verdict.evidence[0].text if result.verdict.evidence else ""
    return result.status.value, _FIGURES.sub("#", first), _FIGURES.sub("#", result.verdict.advice)


STYLE = {  # the colour of a trial's status, red for any failure
    FailureClass.OK: "green",
    FailureClass.BUDGET: "yellow",
    FailureClass.INTERRUPTED: "magenta",
}


FORCED_KIND = "forced"
"""How a trial forced to the longest batch its config allows starts its kind (``trial_started``)."""


class Display:
    """Prints study progress on ``console`` (stderr when stdout carries JSON)."""

    def __init__(self, console: Console, space: SearchSpace) -> None:
        self.console = console
        self.space = space
        self._status: Status | None = None
        self._trial_start = 0.0
        self._label = ""
        self.plain = not console.is_terminal
        """Piped or in CI (``| tee``, 80 columns): one unbroken line per trial, no table; on a
        terminal lines wrap between words instead."""
        self._planned = 0
        """This run's ``--trials``."""
        self._started = 0
        """Trials of the search (not re-runs) this run has started."""
        self._run_start = time.monotonic()
        self._walls: list[float] = []
        self._incumbent: Candidate | None = None
        self._failures: dict[tuple[str, str, str], int] = {}
        self._values_of: dict[int, Mapping[str, Any]] = {}
        self._forced: set[int] = set()
        """Trials run at the longest batch their config allows (``FORCED_KIND``)."""
        """The values of each trial this run started, by number."""

    def header(self, study: str, storage: str, resumed: bool, n_done: int, n_more: int, command: str) -> None:
        """``n_done``: trials the study had launched before this run; ``n_more``: this run's ``--trials``."""
        if resumed:
            line = f"resuming study [cyan]{escape(study)}[/]: {n_done} trials done, running up to {n_more} more"
        else:
            line = f"new study [cyan]{escape(study)}[/]: running up to {n_more} trials"
        self._planned, self._run_start = n_more, time.monotonic()
        self.console.print(f"[bold]nccl-tune[/] {line}", highlight=False)
        self.console.print(f"  space {escape(self.space.name)}  storage {escape(storage)}", highlight=False)
        self.console.print(f"  command: {escape(command)}", highlight=False, soft_wrap=self.plain)
        said = memory_text(self.space)
        if said:
            self.console.print(f"  {escape(said)}", highlight=False, soft_wrap=self.plain)

    def note(self, text: str) -> None:
        self.console.print(escape(text), highlight=False, soft_wrap=self.plain)

    def _how_far(self, rerun: bool) -> str:
        """``trial 3/8 · 4.0 min · about 6.0 min left`` (a re-run: only the time so far)."""
        spent = duration(time.monotonic() - self._run_start)
        if rerun or not self._planned:
            return spent
        left = max(self._planned - self._started + 1, 0)
        mean = sum(self._walls) / len(self._walls) if self._walls else None
        eta = f" · about {duration(mean * left)} left" if mean is not None and left else ""
        return f"trial {self._started}/{self._planned} · {spent}{eta}"

    def _values(self, values: Mapping[str, Any]) -> str:
        """The trial's values as its changes from the incumbent (all of them before there is one),
        which says so: the move its why-line names may start from another config."""
        inc = self._incumbent
        if inc is None:
            return describe(self.space, values)
        changes = describe(self.space, values, inc.values)
        same = changes == "(baseline values)"
        return f"the values of trial {inc.first.number}" if same else f"{changes} (vs best: trial {inc.first.number})"

    def trial_started(self, number: int, kind: str, values: Mapping[str, Any], why: str | None = None) -> None:
        """The trial's line; ``why``: the sampler's reason for it, on a line of its own."""
        self._trial_start = time.monotonic()
        self._label = f"trial {number}"
        self._values_of[number] = dict(values)
        rerun = kind.startswith(("re-run", FORCED_KIND))
        if kind.startswith(FORCED_KIND):
            self._forced.add(number)
        self._started += 0 if rerun else 1
        shown, how_far = ("" if rerun else self._values(values)), self._how_far(rerun)  # a re-run: its kind says
        if self.plain:
            text = f"trial {number} started ({kind})" + (f": {shown}" if shown else "") + f"  [{how_far}]"
            self.console.print(escape(text), highlight=False, soft_wrap=self.plain)
        else:
            self.console.print(
                f"[bold]▶ trial {number}[/] [dim]{escape(kind)}[/] {escape(shown)}  [dim]{escape(how_far)}[/]",
                highlight=False,
                soft_wrap=self.plain,
            )
        if why:
            self.console.print(
                f"  [dim]why: {escape(why)}[/]" if not self.plain else escape(f"  why: {why}"),
                highlight=False,
                soft_wrap=self.plain,
            )
        if self.console.is_terminal:
            self._status = self.console.status(f"{self._label}: starting")
            self._status.start()

    def progress(self, text: str) -> None:
        if self._status is not None:
            elapsed = time.monotonic() - self._trial_start
            self._status.update(f"{self._label}: {text}  [dim]{elapsed:.0f}s[/]")

    def _stop_status(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def _fell_back(self, old: Candidate, number: int, result: TrialResult) -> str:
        """Why ``old`` is no longer the incumbent, as far as trial ``number`` (just finished) shows."""
        if self._values_of.get(number) != dict(old.values):
            return f"trial {old.first.number} is no longer counted stable"
        if number in self._forced:
            end = "peaked too near the wall" if result.status is FailureClass.OK else f"ended {result.status.value}"
            return f"forced to its longest batch, trial {number} {end}"
        if result.status is FailureClass.OK:
            return f"its re-run, trial {number}, ran at {fmt_tput(result.throughput_per_s, result.throughput_unit)}"
        return f"its re-run, trial {number}, ended {result.status.value}"

    def _incumbent_news(self, incumbent: Candidate | None, number: int, result: TrialResult) -> str:
        """What changed about the incumbent with trial ``number``, and why (nothing when it did not)."""
        old, self._incumbent = self._incumbent, incumbent
        if incumbent is None:
            return f"no stable config now: {self._fell_back(old, number, result)}" if old is not None else ""
        tput = fmt_tput(incumbent.throughput, incumbent.throughput_unit)
        runs = f", mean of {len(incumbent.ok_runs)} runs" if len(incumbent.ok_runs) > 1 else ""
        now = f"trial {incumbent.first.number} {tput}{runs}"
        if old is None:
            return f"best so far: {now}"
        if old.first.number == incumbent.first.number:
            return f"best so far: {now}" if len(old.ok_runs) != len(incumbent.ok_runs) else ""
        if incumbent.throughput >= old.throughput:
            return f"new best: {now}, {incumbent.throughput / old.throughput - 1:+.1%} over trial {old.first.number}"
        return f"best now: {now}; trial {old.first.number} fell back: {self._fell_back(old, number, result)}"

    def _said_before(self, number: int, result: TrialResult, evidence: str, advice: str) -> tuple[str, str]:
        """(evidence, advice) to print for a failed trial: ``same as trial N`` for a failure that
        reads as an earlier one's, the advice as an earlier trial's when only that repeats."""
        key = _failure_key(result)
        earlier = self._failures.setdefault(key, number)
        if earlier != number:
            return f"same as trial {earlier}", ""
        same_advice = next(
            (n for (c, _, a), n in self._failures.items() if (c, a) == (key[0], key[2]) and n != number), None
        )
        if same_advice is not None and advice:
            return evidence, f"as for trial {same_advice}"
        return evidence, advice

    def trial_finished(
        self,
        number: int,
        result: TrialResult,
        near_wall: bool,
        incumbent: Candidate | None,
        advice: str | None = None,
    ) -> None:
        """One trial's end: status, figures, a failure's evidence and advice (``advice``: as the study
        reads it, ``records.failure_context``; the verdict's own when None), and news of the best."""
        self._stop_status()
        self._walls.append(result.wall_s)
        style = STYLE.get(result.status, "red")
        status = result.status.value + (" (near memory wall)" if near_wall else "")
        tput = fmt_tput(result.throughput_per_s, result.throughput_unit)
        if number in self._forced:
            tput = f"{tput} (forced: not compared)"
        metrics = f"{tput}  mem {fmt_mem(result)}  steps {fmt_steps(result)}  {duration(result.wall_s)}"
        failed = result.status is not FailureClass.OK
        evidence = shorten(result.verdict.evidence[0].text) if failed and result.verdict.evidence else ""
        advice = (result.verdict.advice if advice is None else advice) if failed else ""
        if failed:
            evidence, advice = self._said_before(number, result, evidence, advice)
        best = self._incumbent_news(incumbent, number, result)
        if self.plain:
            parts = [f"trial {number} {status}  {metrics}"] + [
                x for x in (evidence, advice and f"advice: {advice}", best) if x
            ]
            self.console.print(escape(" | ".join(parts)), highlight=False, soft_wrap=self.plain)
            return
        self.console.print(f"  [{style}]{status}[/] {metrics}", highlight=False, soft_wrap=self.plain)
        if evidence:
            self.console.print(f"    [dim]{escape(evidence)}[/]", highlight=False, soft_wrap=self.plain)
        if advice:
            self.console.print(f"    advice: {escape(advice)}", highlight=False, soft_wrap=self.plain)
        if best:
            self.console.print(f"  {escape(best)}", highlight=False, soft_wrap=self.plain)

    def skipped(self, number: int, why: str) -> None:
        self.console.print(
            f"  [dim]trial {number} not launched: {escape(why)}[/]", highlight=False, soft_wrap=self.plain
        )

    def close(self) -> None:
        self._stop_status()
