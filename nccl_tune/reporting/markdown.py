"""The report as GitHub-flavoured Markdown, for ``$GITHUB_STEP_SUMMARY`` (or a pull-request
comment): the verdict first, the checks, the winner, the failures' cost, the launched trials
and the series' latest nights. No images (a step summary cannot show local files)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from nccl_tune.reporting.checks import FAILED, PASSED, night_checks
from nccl_tune.reporting.terminal import early_stop_sentence
from nccl_tune.reporting.view import StudyView, advice_of, failure_costs, winner_reasons, winner_rows
from nccl_tune.search_spaces.describe import describe
from nccl_tune.tuner.records.early_stops import early_stops
from nccl_tune.tuner.winner.worst_proof import fails_at_worst
from nccl_tune.wording import duration, fmt_rate, fmt_tput, mem_gib

MAX_TRIAL_ROWS = 60
MAX_NIGHTS = 14


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out + [""]


def _num(x: float | None, fmt: str = ".4g") -> str:
    return "" if x is None else format(x, fmt)


def _verdict(view: StudyView) -> list[str]:
    v = view.night.verdict if view.night else None
    if v is not None:
        return [f"> **{'REGRESSION' if v.regression else 'OK'}**: {_cell(v.summary)}", ""]
    if view.winner is None:
        return ["> **NO STABLE CONFIG**", ""]
    if fails_at_worst(view.winner):
        return [
            f"> **FAILS AT THE WORST BATCH**: trial {view.winner.first.number}, "
            f"{fmt_tput(view.winner.throughput, view.unit)}, the fastest that passed its own trials",
            "",
        ]
    return [f"> best stable: trial {view.winner.first.number}, {fmt_tput(view.winner.throughput, view.unit)}", ""]


def _trials(view: StudyView) -> list[str]:
    base = view.baseline.values if view.baseline else None
    rows = []
    for r in view.launched[:MAX_TRIAL_ROWS]:
        res = r.result
        advice = advice_of(view, r) if res is not None and not r.ok else ""
        t = view.timings.get(r.number)
        rows.append(
            (
                r.number,
                r.kind.value,
                (r.status.value if r.status else "") + (" (near wall)" if r.near_wall else ""),
                f"`{describe(view.space, r.values, base)}`",
                fmt_rate(r.throughput),
                mem_gib(res) + (f" in {r.peak_phase}" if r.peak_phase else ""),
                _num(res.memory.min_headroom_gib if res and res.memory else None, ".1f"),
                _num(t.duration_s if t else None, ".0f"),
                advice,
                r.why or "",
            )
        )
    out = ["### Trials", ""]
    out += _table(
        (
            "#",
            "kind",
            "class",
            "values (changes from the baseline)",
            view.unit,
            "peak GiB",
            "headroom GiB",
            "s",
            "advice",
            "why proposed",
        ),
        rows,
    )
    if len(view.launched) > MAX_TRIAL_ROWS:
        out += [f"({len(view.launched) - MAX_TRIAL_ROWS} more launched trials in the HTML and JSON reports)", ""]
    return out


def _history(view: StudyView) -> list[str]:
    h = view.history
    if h is None:
        return []
    rows = [
        (
            r.night.started_at[:10],
            r.night.study,
            fmt_rate(r.night.best_per_s),
            "" if r.change_frac is None else f"{r.change_frac:+.1%}",
            "; ".join(r.fingerprint_changes),
            (r.night.verdict.kind.value.replace("_", " ") if r.night.verdict else "not compared"),
            f"step {r.step.change_frac:+.1%}" if r.step else ("shift?" if r.pending else ""),
        )
        for r in h.rows[-MAX_NIGHTS:]
    ]
    return [f"### Series `{h.series}` (last {len(rows)} nights)", ""] + _table(
        ("night", "study", f"best {h.unit}", "change", "fingerprint changes", "verdict", "step"), rows
    )


def _sweep(view: StudyView) -> list[str]:
    if not view.nccl_sweep:
        return []
    rows = ((line.change, line.status, _num(line.round_ms, ".1f"), line.speed_text) for line in view.nccl_sweep)
    return ["### NCCL sweep: each change timed on the collectives alone", ""] + _table(
        ("change", "check", "round ms", "speed vs the baseline's"), rows
    )


def render_markdown(view: StudyView) -> str:
    icon = {PASSED: ":white_check_mark:", FAILED: ":x:"}
    out = [f"## nccl-tune: `{view.study}`", ""] + _verdict(view)
    if view.fingerprint:
        out += [f"Ran on {view.fingerprint.summary()}.", ""]
    out += (
        ["### Checks", ""]
        + [
            f"- {icon.get(c.outcome, ':heavy_minus_sign:')} **{c.name}**: {_cell(c.message)}"
            for c in night_checks(view)
        ]
        + [""]
    )
    out += ["### The winner and why", ""] + [f"- {_cell(line)}" for line in winner_reasons(view)] + [""]
    rows = winner_rows(view)
    if rows:
        out += _table(
            ("parameter", "winner", "baseline", ""),
            (
                (f"**{r.name}**" if r.changed else r.name, r.winner, r.baseline, "changed" if r.changed else "")
                for r in rows
            ),
        )
    costs = failure_costs(view)
    if costs:
        out += ["### What the failures cost", ""] + _table(
            ("class", "trials", "time", "share"),
            ((c.failure_class, len(c.trials), duration(c.wall_s), f"{c.share:.0%}") for c in costs),
        )
    stops = early_stops(view.records)
    if stops is not None:
        out += [_cell(early_stop_sentence(stops)), ""]
    return "\n".join(out + _trials(view) + _sweep(view) + _history(view)) + "\n"
