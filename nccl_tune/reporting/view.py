"""What a report shows, read once from the storage: ``StudyView``, the one view every format
renders (the terminal report, HTML, Markdown, JSON, JUnit, the figures); and the facts every format
shares (the winner and why, what the failures cost)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from nccl_tune.failure import FailureClass
from nccl_tune.nightly.fingerprint import Fingerprint
from nccl_tune.nightly.history import History, build_history
from nccl_tune.nightly.night import Night
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.tuner.records.failure_context import study_advice
from nccl_tune.tuner.records.nccl_sweep import SweepLine
from nccl_tune.tuner.records.semantics import semantic_changes, user_env
from nccl_tune.tuner.records.speedup import speedup
from nccl_tune.tuner.records.stability import Candidate, candidates, changes, does_not_pay, noise_frac, run_key
from nccl_tune.tuner.records.study_records import Outcome, TrialRecord
from nccl_tune.tuner.trials.steps import coarse_reading_note, stalled_steps_note
from nccl_tune.tuner.winner.headline import choices, confirmation_words
from nccl_tune.tuner.winner.importance import parameter_importance
from nccl_tune.tuner.winner.study_view import StoredStudy, TrialTiming, open_study
from nccl_tune.tuner.winner.worst_proof import FAILS, UNPROVEN, fails_at_worst, fails_words, unproven_why
from nccl_tune.wording import fmt_rate, fmt_tput


@dataclass(frozen=True)
class StudyView:
    study: str
    storage_url: str
    command: tuple[str, ...]
    space: SearchSpace
    records: tuple[TrialRecord, ...]
    winner: Candidate | None
    baseline: Candidate | None
    """The space's defaults (what the user ran before tuning), when launched."""
    timings: Mapping[int, TrialTiming]
    fingerprint: Fingerprint | None
    night: Night | None
    history: History | None
    generated_at: str
    passed_over: tuple[tuple[Candidate, str], ...] = ()
    """Configs whose own runs all finished but that hold a value the study has seen fail now and then,
    with why (``study_view.passed_over``)."""
    nccl_sweep: tuple[SweepLine, ...] = ()
    """The NCCL sweep's checks (``tuner.records.nccl_sweep``), the baseline's first; empty when none ran."""
    hardware: Mapping[str, Any] | None = None
    """What ``run`` recorded about the node (None for studies recorded before it was kept)."""
    dropped: Mapping[str, str] = field(default_factory=dict)
    """Parameters dropped during the study (their value never reached the program), with the reason."""
    speed_only: Candidate | None = None
    """The best config that changes no semantic parameter (``study_view.pick_speed_only``)."""
    with_training: Candidate | None = None
    """The fastest stable config that changes the training (``study_view.fastest_changing_training``)."""

    @property
    def launched(self) -> tuple[TrialRecord, ...]:
        return tuple(r for r in self.records if r.outcome is Outcome.LAUNCHED)

    @cached_property
    def importance(self) -> dict[str, float]:
        """Each varied parameter's share of what made the fast runs fast (Optuna's PED-ANOVA,
        ``tuner.winner.importance``); empty for a study too small to say."""
        return parameter_importance(self.space, self.records)

    @property
    def unit(self) -> str:
        """The unit the study's throughput is in (``samples/s``, ``tokens/s``, ``steps/s``)."""
        return next((r.throughput_unit for r in self.launched if r.ok and r.throughput_unit), "samples/s")

    @property
    def gpu_limit_gib(self) -> float | None:
        """The GPU's memory: from the trials' NVML/log figures, else the fingerprint."""
        totals = [g.total_gib for r in self.launched if r.result and r.result.memory for g in r.result.memory.gpus]
        if totals:
            return max(totals)
        return self.fingerprint.gpu_memory_gib if self.fingerprint else None


def view_of(stored: StoredStudy, **changes: Any) -> StudyView:
    """The report's view of a study read once (``changes``: fields the caller knows better, such as
    ``run``'s own winner and the night it just judged)."""
    history = None
    if stored.night is not None and stored.night.series and stored.series_nights:
        history = build_history(stored.night.series, list(stored.series_nights))
    view = StudyView(
        study=stored.name,
        storage_url=stored.storage_url,
        command=stored.command,
        space=stored.space,
        records=stored.records,
        winner=stored.winner,
        baseline=stored.baseline,
        timings=stored.timings,
        fingerprint=stored.fingerprint,
        night=stored.night,
        history=history,
        generated_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        passed_over=stored.passed_over,
        nccl_sweep=stored.nccl_sweep,
        hardware=stored.hardware,
        dropped=stored.dropped,
        speed_only=stored.speed_only,
        with_training=stored.with_training,
    )
    return replace(view, **changes) if changes else view


def load_view(storage_url: str, study_name: str | None, series: str | None = None) -> StudyView:
    """The report's view of ``study_name`` (the only study when None; the latest night of
    ``series`` when a series is given instead)."""
    return view_of(open_study(storage_url, study_name, series))


def known_gib(x: float | None) -> float | None:
    """A memory figure, None when unknown (a run that died before reporting one reads 0)."""
    return x if x else None


def advice_of(view: StudyView, r: TrialRecord) -> str:
    """A failed run's advice as the study reads it (``records.failure_context``)."""
    return study_advice(r, view.launched, view.baseline.values if view.baseline else {})


@dataclass(frozen=True)
class FailureCost:
    failure_class: str
    trials: tuple[int, ...]
    wall_s: float
    share: float
    """Of the wall time of every launched trial."""


def failure_costs(view: StudyView) -> tuple[FailureCost, ...]:
    """Wall time spent on failed trials and on trials whose time ran out (``budget``), per class,
    largest first. A trial the tuner stopped as slower than the incumbent did not fail: its time is
    what screening and the early stop cost, told apart by ``early_stops``."""
    total = sum(view.timings[r.number].duration_s for r in view.launched if r.number in view.timings) or 1.0
    groups: dict[str, list[TrialRecord]] = {}
    for r in view.launched:
        if r.failed or (r.status is FailureClass.BUDGET and not r.stopped_early):
            groups.setdefault(r.status.value, []).append(r)
    out = []
    for cls, recs in groups.items():
        wall = sum(view.timings[r.number].duration_s for r in recs if r.number in view.timings)
        out.append(FailureCost(cls, tuple(r.number for r in recs), wall, wall / total))
    return tuple(sorted(out, key=lambda c: -c.wall_s))


def _why_not(c: Candidate, margin: float) -> str:
    bad = [r for r in c.runs if not r.ok]
    if bad:
        return f"failed on run {bad[0].number} ({bad[0].status.value if bad[0].status else '?'})"
    if c.near_wall:
        return f"came within {margin:.0%} of the memory wall"
    if c.worst_unfit and c.worst_case is not None:
        return f"its worst case does not fit: {worst_case_words(c)}"
    if c.disagreement is not None:
        return f"its runs disagree: {c.disagreement.words()}"
    return "ran once only (not confirmed by a re-run)"


@dataclass(frozen=True)
class WinnerRow:
    """One parameter of the winner's table: its value in the winner and in the baseline."""

    name: str
    winner: str
    baseline: str

    @property
    def changed(self) -> bool:
        return self.winner != self.baseline


def winner_rows(view: StudyView) -> list[WinnerRow]:
    """The winner's value of each parameter beside the baseline's (the space's defaults when the
    baseline was not launched); empty without a winner."""
    w = view.winner
    if w is None:
        return []
    base = view.baseline.values if view.baseline else {p.name: p.default for p in view.space.parameters}
    return [
        WinnerRow(p.name, format_value(w.values.get(p.name)), format_value(base.get(p.name)))
        for p in view.space.parameters
        if p.name in w.values
    ]


def set_aside_rule(passed_over: Sequence[tuple[Candidate, str]]) -> Callable[[Mapping[str, Any]], bool]:
    """True for the values of a config ``passed_over`` leaves out as flaky (``study_view.passed_over``)."""
    keys = {run_key(c.values) for c, _ in passed_over}
    return lambda values: run_key(values) in keys


def faster_set_aside(
    records: Sequence[TrialRecord],
    winner: Candidate,
    margin: float,
    passed_over: Sequence[tuple[Candidate, str]] = (),
    limit: int = 3,
) -> list[str]:
    """Up to ``limit`` configs faster than ``winner`` that were set aside, each in a sentence with
    why (a failed run, the memory wall, no re-run, a flaky value, a forced run's failure), and the
    baseline among them whatever its rank (what the user runs today): what the end of ``run`` and
    every report say alike."""
    flaky = {run_key(c.values): why for c, why in passed_over}
    w_key = run_key(winner.values)
    pool = [c for c in candidates(records) if run_key(c.values) != w_key]
    stable = [c for c in pool if c.stable and run_key(c.values) not in flaky]
    faster = sorted(
        (c for c in pool if c.throughput > winner.throughput and c not in stable), key=lambda c: -c.throughput
    )
    shown = faster[:limit] + [c for c in faster[limit:] if c.is_baseline]
    out = []
    for c in shown:
        why = flaky.get(run_key(c.values))
        why = f"is not stable though its runs finished: {why}" if why else _why_not(c, margin)
        name = f"trial {c.first.number}" + (" (the baseline, your own config)" if c.is_baseline else "")
        out.append(f"{name} was faster ({fmt_tput(c.throughput, c.throughput_unit)}) but {why}")
    return out


def worst_case_words(c: Candidate) -> str:
    """The candidate's peak seen and at the longest batch its config allows, as shares of the GPU."""
    w = c.worst_case
    if w is None:
        return "no worst case known (no step printed its tokens, and no run was forced to its longest batch)"
    at = f" at {w.tokens_worst:.0f} tokens" if w.tokens_worst else ""
    if w.how == "forced":
        worst = f"forced to its longest batch{at}, {w.peak_frac:.0%} of the GPU ({1 - w.peak_frac:.0%} free)"
    else:
        worst = (
            f"predicted{at} {w.peak_frac:.0%} of the GPU ({w.lower_frac:.0%}-{w.upper_frac:.0%}; "
            f"{1 - w.peak_frac:.0%} free)"
        )
    judged = "" if w.judged else " (not judged: its steps do not pin the slope; measure more steps)"
    seen = [r.result.memory.max_peak_frac for r in c.runs if not r.forced and r.result and r.result.memory]
    top = max((f for f in seen if f is not None), default=w.seen_frac)  # its normal runs', not the forced one's
    return f"peak seen {top:.0%} ({1 - top:.0%} free), worst case {worst}{judged}"


def _settings_that_do_not_pay(view: StudyView, w: Candidate, stable: list[Candidate]) -> list[str]:
    """Faster stable configs that set environment variables the winner leaves as the user's run has
    them, within the noise, and what they set."""
    b = view.baseline
    user, noise = user_env(view.space, b.values if b else None), noise_frac(view.records)
    mine = changes(w.values, user)
    out = []
    within = [c for c in stable if c.throughput > w.throughput and does_not_pay(w, c, user, noise)]
    for c in sorted(within, key=lambda c: -c.throughput)[:3]:
        added = [f"{k}={format_value(v)}" for k, v in changes(c.values, user).items() if k not in mine]
        left = (
            "settings that do not pay are left as your run has them"
            if len(added) > 1
            else "a setting that does not pay is left as your run has it"
        )
        out.append(
            f"trial {c.first.number} was {c.throughput / w.throughput - 1:+.1%} faster with {', '.join(added)} "
            f"as well, within the measured noise ({noise:.1%}): {left}"
        )
    return out


def winner_reasons(view: StudyView) -> list[str]:
    """Why the winner won, in sentences: its numbers, the defaults it beats, faster configs not
    chosen and why, the runner-up, and the parameters that change the training itself."""
    w = view.winner
    if w is None:
        return [f"no stable config among {len(view.launched)} launched trials"]
    runs = ", ".join(fmt_rate(r.throughput) for r in w.ok_runs if r.throughput)
    u = view.unit
    n = len(w.ok_runs)
    lines = [
        f"trial {w.first.number}: {fmt_tput(w.throughput, u)}"
        + (f" (mean of {n} runs: {runs}; spread {w.throughput_spread:.1%})" if n > 1 else "")
        + (
            f", the fastest config that finished every measured step in each of its {len(w.runs) - 1} normal runs"
            if fails_at_worst(w)
            else f", the fastest config that finished every measured step in each of its {len(w.runs)} runs"
        )
        + (f" with at least {w.min_headroom_gib:.1f} GiB of GPU memory left" if w.min_headroom_gib is not None else "")
    ]
    lines.append(confirmation_words(w))
    b = view.baseline
    w_key = run_key(w.values)
    gain = speedup(w, b)
    if gain is not None and b is not None:
        lines.append(f"{gain.words()} (trial {b.first.number})")
    pair = choices(
        view.space, view.records, w, view.speed_only, view.with_training, b, set_aside_rule(view.passed_over)
    )
    lines += [choice.words() for choice in pair or ()]
    flaky = {run_key(c.values): why for c, why in view.passed_over}
    pool = [c for c in candidates(view.records) if run_key(c.values) != w_key]
    stable = [c for c in pool if c.stable and run_key(c.values) not in flaky]
    lines += faster_set_aside(view.records, w, view.space.min_headroom_frac, view.passed_over)
    lines += _settings_that_do_not_pay(view, w, stable)
    if w.worst_case is not None:
        lines.append(f"memory: {worst_case_words(w)}")
    unproven = unproven_why(view.space, w)
    if unproven is not None:
        lines.append(f"{UNPROVEN}: {unproven}")
    if fails_at_worst(w):
        lines.insert(
            0, f"no config survives its worst batch: trial {w.first.number} is the fastest that passed its own trials"
        )
        lines.append(f"{FAILS}: {fails_words(view.space, w)}")
    runner = max(stable, key=lambda c: c.throughput, default=None)
    if runner is not None and w.throughput:
        lines.append(
            f"runner-up: trial {runner.first.number}, {fmt_tput(runner.throughput, u)} "
            f"({runner.throughput / w.throughput - 1:+.1%})"
        )
    for c in semantic_changes(view.space, w.values, b.values if b else None):
        lines.append(
            f"changes the training itself: {c.name} {format_value(c.before)} -> {format_value(c.after)} "
            "(pin it with --set to tune speed only)"
        )
    notes = (coarse_reading_note(view.records, view.space.stop.measured_steps), stalled_steps_note(view.records))
    return lines + [note for note in notes if note]
