"""The study as a person reads it in a terminal: the trials (a table on a terminal, one unbroken
line each when piped), what was not launched, the winner against the baseline, the failures with
their evidence and advice; at the end of ``run`` and as ``nccl-tune report``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from nccl_tune.reporting.view import StudyView, advice_of, faster_set_aside, set_aside_rule, worst_case_words
from nccl_tune.search_spaces.describe import describe, short_names
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.tuner.records.early_stops import EarlyStops, early_stops
from nccl_tune.tuner.records.semantics import semantic_changes
from nccl_tune.tuner.records.speedup import speedup
from nccl_tune.tuner.records.stability import Candidate
from nccl_tune.tuner.records.study_records import Outcome, TrialRecord
from nccl_tune.tuner.trials.display import STYLE
from nccl_tune.tuner.trials.steps import coarse_reading_note, stalled_steps_note
from nccl_tune.tuner.winner.headline import SPEED_ONLY, THE_WINNER, choices, confirmation_words
from nccl_tune.tuner.winner.worst_proof import FAILS, UNPROVEN, fails_at_worst, fails_words, unproven_why
from nccl_tune.wording import duration, fmt_mem, fmt_tput, mem_gib, shorten


def early_stop_sentence(stops: EarlyStops) -> str:
    """What stopping early saved, in one sentence."""
    n = len(stops.trials)
    text = (
        f"stopping early: {n} trial{'s' if n != 1 else ''} stopped as slower than the incumbent "
        f"(screening, the early stop) ran {duration(stops.spent_s)} and saved about {duration(stops.saved_s)}, "
        f"{stops.saved_share:.0%} of what the launched trials would have taken"
    )
    if stops.unknown:
        text += f" ({stops.unknown} recorded without their planned steps, not counted)"
    return text


NARROW = 120
"""Below this many columns a terminal gets each trial as a block of lines wrapped between words
instead of a table, whose columns would break names and numbers."""


def _print(console: Console, text: str) -> None:
    """A sentence: wrapped between words on a terminal, one whole line otherwise."""
    console.print(text, highlight=False, soft_wrap=not console.is_terminal)


def _block(console: Console, head: str, lines: Sequence[str]) -> None:
    """``head`` (markup), then ``lines`` (plain text) indented, each wrapped between words."""
    console.print(head, highlight=False, soft_wrap=True)
    for line in lines:
        if line:
            console.print(Padding(Text(line), (0, 0, 0, 6)), highlight=False)


def _launched(records: Sequence[TrialRecord]) -> Iterator[TrialRecord]:
    """The trials that ran, the ones every trial listing shows."""
    return (r for r in records if r.outcome is Outcome.LAUNCHED)


def _status_text(r: TrialRecord) -> str:
    """A trial's class, and whether it came near the memory wall, in words."""
    return (r.status.value if r.status else "?") + (" (near memory wall)" if r.near_wall else "")


def _trial_blocks(
    console: Console,
    space: SearchSpace,
    records: Sequence[TrialRecord],
    winner: Candidate | None,
    base: Candidate | None,
    show_why: bool,
) -> None:
    """The trials on a narrow terminal: a line of figures, then the values and why, wrapped."""
    console.print("trials:", highlight=False)
    for r in _launched(records):
        style = STYLE.get(r.status, "red") if r.status else "dim"
        mark = " ★" if winner is not None and r in winner.runs and not r.forced else ""
        status = _status_text(r)
        head = (
            f"  trial {r.number}{mark} {r.kind.value} [{style}]{escape(status)}[/]  "
            f"{escape(fmt_tput(r.throughput, r.throughput_unit))}  mem {escape(fmt_mem(r.result))}"
        )
        values = describe(space, r.values, base.values if base else None)
        _block(console, head, [values, f"why: {r.why}" if show_why and r.why else ""])


def _trial_lines(
    console: Console,
    space: SearchSpace,
    records: Sequence[TrialRecord],
    winner: Candidate | None,
    base: Candidate | None,
    show_why: bool,
) -> None:
    console.print("trials:", highlight=False)
    for r in _launched(records):
        mark = "  <- best" if winner is not None and r in winner.runs and not r.forced else ""
        status = _status_text(r)
        values = describe(space, r.values, base.values if base else None)
        line = (
            f"  trial {r.number} {r.kind.value} {status}  {fmt_tput(r.throughput, r.throughput_unit)}"
            f"  mem {fmt_mem(r.result)}  {values}{mark}"
        )
        _print(console, escape(line))
        if show_why and r.why:
            _print(console, escape(f"    why: {r.why}"))


def _trial_table(
    console: Console,
    space: SearchSpace,
    records: Sequence[TrialRecord],
    winner: Candidate | None,
    base: Candidate | None,
    show_why: bool,
) -> None:
    table = Table(title="trials", show_lines=False)
    units = {r.throughput_unit for r in records if r.ok and r.throughput}
    unit = next(iter(units)) if len(units) == 1 else None
    for col in ("#", "kind", "status", unit or "throughput"):
        table.add_column(col, no_wrap=True, justify="left" if col in ("kind", "status") else "right")
    table.add_column("peak GiB", overflow="fold", min_width=8, max_width=14)  # '> 79.2, +38.0 asked' wraps
    table.add_column("values (changes from the baseline)", overflow="fold", min_width=20, ratio=1)
    for r in _launched(records):
        style = STYLE.get(r.status, "red") if r.status else "dim"
        mark = " ★" if winner is not None and r in winner.runs and not r.forced else ""
        table.add_row(
            f"{r.number}{mark}",
            r.kind.value,
            f"[{style}]{r.status.value if r.status else '?'}[/]" + (" wall" if r.near_wall else ""),
            fmt_tput(r.throughput, None if unit else r.throughput_unit).removesuffix(" /s"),
            mem_gib(r.result),
            escape(describe(space, r.values, base.values if base else None))
            + (f"\n[dim]why: {escape(r.why)}[/]" if show_why and r.why else ""),
        )
    console.print(table)


def _not_launched(console: Console, records: Sequence[TrialRecord]) -> None:
    stops = early_stops(records)
    if stops is not None:
        _print(console, escape(early_stop_sentence(stops)))
    swept = sum(r.outcome is Outcome.REJECTED and r.sweep_refused for r in records)
    rej = sum(r.outcome is Outcome.REJECTED for r in records) - swept
    pred = sum(r.outcome is Outcome.PREDICTED for r in records)
    dup = sum(r.outcome is Outcome.DUPLICATE for r in records)
    parts = [
        f"{rej} broke the space's rules" if rej else "",
        f"{pred} predicted to run out of memory" if pred else "",
        f"{dup} already measured" if dup else "",
        f"{swept} with NCCL values that failed the NCCL sweep" if swept else "",
    ]
    if any(parts):
        _print(console, "not launched: " + ", ".join(p for p in parts if p))


def _winner(
    console: Console, space: SearchSpace, winner: Candidate | None, base: Candidate | None, confirmation_required: bool
) -> None:
    """The winner, its gain over the baseline, and what it changes in the training itself."""
    if winner is None:
        console.print("[bold red]no stable config found[/]", highlight=False)
        return
    gain = speedup(winner, base)
    gain_text = f" ({gain.words()})" if gain is not None else ""
    said = escape(confirmation_words(winner))
    if fails_at_worst(winner):
        head = "[bold red]no config survives its worst batch; fastest that passed its own trials:[/]"
        tail = said if winner.confirmed else f"[yellow]{said}[/]"
    elif winner.confirmed:
        head, tail = "[bold green]best stable:[/]", said
    elif confirmation_required:
        head, tail = "[bold yellow]no confirmed config; best unconfirmed:[/]", f"[yellow]{said}[/]"
    else:
        head, tail = "[bold green]best stable:[/]", f"[yellow]{said}[/]"
    tput = fmt_tput(winner.throughput, winner.throughput_unit)
    _print(console, f"{head} trial {winner.first.number} {tput}{escape(gain_text)}, {tail}")
    if console.is_terminal:  # wrapped between names, under the line it belongs to
        console.print(Padding(Text(describe(space, winner.values)), (0, 0, 0, 2)), highlight=False)
    else:
        _print(console, f"  {escape(describe(space, winner.values))}")
    changes = semantic_changes(space, winner.values, base.values if base else None)
    if changes:
        console.print("[yellow]it changes the training itself, not only its speed:[/]", highlight=False)
        for change in changes:
            _print(console, f"  {escape(str(change))}")
        console.print("  pin them with --set KEY=VALUE to tune speed only", highlight=False)


def _choices(
    console: Console,
    space: SearchSpace,
    records: Sequence[TrialRecord],
    winner: Candidate | None,
    alternatives: tuple[Candidate | None, Candidate | None],
    base: Candidate | None,
    passed_over: Sequence[tuple[Candidate, str]],
) -> None:
    """The speed-only best next to the best with training changes (``headline.choices``)."""
    pair = choices(space, records, winner, *alternatives, base, set_aside_rule(passed_over))
    for choice in pair or ():
        _print(console, f"[bold]{escape(choice.label)}:[/]{escape(choice.words().removeprefix(choice.label + ':'))}")
        if choice.label == SPEED_ONLY and choice.speedup is not None and choice.note != THE_WINNER:
            _print(console, "  write it as tuned YAML: nccl-tune export --speed-only")


def print_summary(
    console: Console,
    space: SearchSpace,
    records: Sequence[TrialRecord],
    winner: Candidate | None,
    base: Candidate | None,
    *,
    confirmation_required: bool = False,
    show_why: bool = False,
    passed_over: Sequence[tuple[Candidate, str]] = (),
    speed_only: Candidate | None = None,
    with_training: Candidate | None = None,
) -> None:
    """The trials, what was not launched, and the winner (``confirmation_required``: a winner not
    confirmed by a re-run is not called stable; ``show_why``: why the sampler proposed each trial,
    under it, for the report: the run printed it when the trial started), the best config that keeps
    the training next to the fastest that changes it (``speed_only``, ``with_training``), and the
    configs faster than it that ``passed_over`` says are not stable, with why."""
    if not console.is_terminal:
        table = _trial_lines
    else:
        table = _trial_blocks if console.width < NARROW else _trial_table
    table(console, space, records, winner, base, show_why)
    _not_launched(console, records)
    _winner(console, space, winner, base, confirmation_required)
    _choices(console, space, records, winner, (speed_only, with_training), base, passed_over)
    if winner is not None and winner.worst_case is not None:
        _print(console, f"  memory: {escape(worst_case_words(winner))}")
    unproven = unproven_why(space, winner) if winner is not None else None
    if unproven is not None:
        _print(console, f"  [yellow]{UNPROVEN}:[/] {escape(unproven)}")
    if winner is not None and fails_at_worst(winner):
        _print(console, f"  [bold red]{FAILS}:[/] {escape(fails_words(space, winner))}")
    if winner is not None:
        for line in faster_set_aside(records, winner, space.min_headroom_frac, passed_over):
            _print(console, f"[yellow]set aside:[/] {escape(line)}")
    note = coarse_reading_note(records, space.stop.measured_steps)
    if note:
        _print(console, f"[yellow]coarse measurement:[/] {escape(note)}")
    stalls = stalled_steps_note(records)
    if stalls:
        _print(console, f"stalled steps: {escape(stalls)}")


def _failure_lines(console: Console, view: StudyView) -> None:
    """The failures as one unbroken line each (piped, in CI): nothing cut inside a word or number."""
    console.print("failures:", highlight=False)
    base = view.baseline.values if view.baseline else None
    for r in view.records:
        if r.failed:
            v = r.result.verdict
            rank = "" if v.rank is None else f" rank {v.rank}"
            values = describe(view.space, r.values, base)
            evidence = shorten(v.evidence[0].text) if v.evidence else ""
            line = f"  trial {r.number} {r.status.value if r.status else '?'}{rank}: {values} | {evidence} | advice: {advice_of(view, r)}"
            _print(console, escape(line))


def _failure_blocks(console: Console, view: StudyView) -> None:
    """The failures on a narrow terminal: a line naming each, then its values, evidence and advice, wrapped."""
    console.print("failures:", highlight=False)
    base = view.baseline.values if view.baseline else None
    for r in view.records:
        if r.failed:
            v = r.result.verdict
            rank = "" if v.rank is None else f" rank {v.rank}"
            lines = [
                describe(view.space, r.values, base),
                shorten(v.evidence[0].text) if v.evidence else "",
                f"advice: {advice}" if (advice := advice_of(view, r)) else "",
            ]
            _block(console, f"  trial {r.number} [red]{escape(r.status.value if r.status else '?')}[/]{rank}", lines)


def _failure_table(view: StudyView) -> Table:
    table = Table(title="failures")
    for col in ("#", "class", "rank", "values (changes from the baseline)", "evidence", "advice"):
        table.add_column(col, overflow="fold")
    base = view.baseline.values if view.baseline else None
    for r in view.records:
        if r.failed:
            v = r.result.verdict
            table.add_row(
                str(r.number),
                r.status.value if r.status else "?",
                "-" if v.rank is None else str(v.rank),
                escape(describe(view.space, r.values, base)),
                escape(v.evidence[0].text[:200]) if v.evidence else "",
                escape(advice_of(view, r)),
            )
    return table


def print_report(view: StudyView, console: Console) -> None:
    """``nccl-tune report`` on a terminal (or piped): the study, its trials with why each was
    proposed, the winner, what was dropped, the failures and the night's verdict."""
    console.print(f"[bold]study[/] {escape(view.study)}  [dim]{escape(view.storage_url)}[/]", highlight=False)
    print_summary(
        console,
        view.space,
        view.records,
        view.winner,
        view.baseline,
        show_why=True,
        passed_over=view.passed_over,
        speed_only=view.speed_only,
        with_training=view.with_training,
    )
    if view.importance:
        names = short_names(view.space)
        shares = ", ".join(f"{names.get(k, k)} {v:.0%}" for k, v in view.importance.items())
        _print(console, f"which parameters mattered (Optuna's PED-ANOVA): {escape(shares)}")
    for reason in view.dropped.values():
        console.print(f"[yellow]dropped from the search:[/] {escape(reason)}", highlight=False)
    if any(r.failed for r in view.records):
        if not console.is_terminal:
            _failure_lines(console, view)
        elif console.width < NARROW:
            _failure_blocks(console, view)
        else:
            console.print(_failure_table(view))
    verdict = view.night.verdict if view.night else None
    if verdict is not None:
        colour = "bold red" if verdict.regression else "green"
        _print(console, f"[{colour}]{escape(verdict.summary)}[/]")
