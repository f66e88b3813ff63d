"""What a person sees while a study runs: one line per trial start and end, a live status line
for the running trial on a terminal, and the incumbent. The table at the end is the study's
terminal report (``reporting.terminal``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.status import Status

from nccl_tune.failure import FailureClass
from nccl_tune.search_spaces.describe import describe
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.trial import TrialResult
from nccl_tune.tuner.records.stability import Candidate
from nccl_tune.wording import fmt_mem, fmt_tput, shorten

STYLE = {  # the colour of a trial's status, red for any failure
    FailureClass.OK: "green",
    FailureClass.BUDGET: "yellow",
    FailureClass.INTERRUPTED: "magenta",
}


class Display:
    """Prints study progress on ``console`` (stderr when stdout carries JSON)."""

    def __init__(self, console: Console, space: SearchSpace) -> None:
        self.console = console
        self.space = space
        self._status: Status | None = None
        self._trial_start = 0.0
        self._label = ""
        self.plain = not console.is_terminal
        """Piped or in CI (``| tee``, 80 columns): one unbroken line per trial, no table."""

    def header(self, study: str, storage: str, resumed: bool, n_done: int, n_more: int, command: str) -> None:
        """``n_done``: trials the study had launched before this run; ``n_more``: this run's ``--trials``."""
        if resumed:
            line = f"resuming study [cyan]{escape(study)}[/]: {n_done} trials done, running up to {n_more} more"
        else:
            line = f"new study [cyan]{escape(study)}[/]: running up to {n_more} trials"
        self.console.print(f"[bold]nccl-tune[/] {line}", highlight=False)
        self.console.print(f"  space {escape(self.space.name)}  storage {escape(storage)}", highlight=False)
        self.console.print(f"  command: {escape(command)}", highlight=False, soft_wrap=True)

    def note(self, text: str) -> None:
        self.console.print(escape(text), highlight=False, soft_wrap=True)

    def trial_started(self, number: int, kind: str, values: Mapping[str, Any], why: str | None = None) -> None:
        """The trial's line; ``why``: the sampler's reason for it, on a line of its own."""
        self._trial_start = time.monotonic()
        self._label = f"trial {number}"
        if self.plain:
            text = f"trial {number} started ({kind}): {describe(self.space, values)}"
            self.console.print(escape(text), highlight=False, soft_wrap=True)
        else:
            self.console.print(
                f"[bold]▶ trial {number}[/] [dim]{escape(kind)}[/] {escape(describe(self.space, values))}",
                highlight=False,
                soft_wrap=True,
            )
        if why:
            self.console.print(
                f"  [dim]why: {escape(why)}[/]" if not self.plain else escape(f"  why: {why}"),
                highlight=False,
                soft_wrap=True,
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

    def trial_finished(self, number: int, result: TrialResult, near_wall: bool, incumbent: Candidate | None) -> None:
        self._stop_status()
        style = STYLE.get(result.status, "red")
        status = result.status.value + (" (near memory wall)" if near_wall else "")
        metrics = (
            f"{fmt_tput(result.throughput_per_s, result.throughput_unit)}  mem {fmt_mem(result)}"
            f"  steps {len(result.step_times_s)}  {result.wall_s:.1f}s"
        )
        failed = result.status is not FailureClass.OK
        evidence = shorten(result.verdict.evidence[0].text) if failed and result.verdict.evidence else ""
        advice = result.verdict.advice if failed else ""
        best = (
            f"incumbent: trial {incumbent.first.number} {fmt_tput(incumbent.throughput, incumbent.throughput_unit)}"
            if incumbent
            else ""
        )
        if self.plain:
            parts = [f"trial {number} {status}  {metrics}"] + [
                x for x in (evidence, advice and f"advice: {advice}", best) if x
            ]
            self.console.print(escape(" | ".join(parts)), highlight=False, soft_wrap=True)
            return
        self.console.print(f"  [{style}]{status}[/] {metrics}", highlight=False, soft_wrap=True)
        if evidence:
            self.console.print(f"    [dim]{escape(evidence)}[/]", highlight=False, soft_wrap=True)
        if advice:
            self.console.print(f"    advice: {escape(advice)}", highlight=False, soft_wrap=True)
        if best:
            self.console.print(f"  {best}", highlight=False)

    def skipped(self, number: int, why: str) -> None:
        self.console.print(f"  [dim]trial {number} not launched: {escape(why)}[/]", highlight=False, soft_wrap=True)

    def close(self) -> None:
        self._stop_status()
