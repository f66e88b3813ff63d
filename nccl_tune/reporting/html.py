"""The report as one self-contained HTML file: styles and SVG plots inline, no script, no
network; it opens offline from a CI artefact or an e-mail attachment."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape

from nccl_tune.reporting.checks import FAILED, PASSED, Check, night_checks
from nccl_tune.reporting.plots import COLOURS, all_plots, outcome_label
from nccl_tune.reporting.terminal import early_stop_sentence
from nccl_tune.reporting.view import StudyView, advice_of, failure_costs, winner_reasons, winner_rows
from nccl_tune.search_spaces.describe import describe, short_names
from nccl_tune.tuner.records.early_stops import early_stops
from nccl_tune.tuner.records.study_records import Outcome, TrialRecord
from nccl_tune.wording import duration, fmt_rate, mem_gib

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
.meta{color:#666;font-size:.9em}.meta code{font-size:.95em}
.scroll{max-width:100%;overflow-x:auto}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
td.advice{min-width:18em}td.advice,code{overflow-wrap:anywhere}td.values{overflow-wrap:break-word}
tr.changed td{background:#fff6d6}tr.changed td:first-child{font-weight:600}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.banner{padding:.6em 1em;border-radius:6px;margin:1em 0;font-weight:600}
.bad{background:#fde2e1;color:#8a1c1c}.good{background:#e3f5e5;color:#1d5e26}.neutral{background:#eef1f5;color:#333}
.check-passed{color:#1d5e26}.check-failed{color:#8a1c1c;font-weight:600}.check-skipped{color:#777}
.dot{display:inline-block;width:.8em;height:.8em;border-radius:50%;margin-right:.3em;vertical-align:middle}
figure{margin:1em 0}figure svg{max-width:100%;height:auto}figcaption{font-weight:600;margin-bottom:.3em}
pre{white-space:pre-wrap;overflow-wrap:anywhere;font-size:.85em;background:#f8f8f8;padding:.4em}
.why{display:block;color:#666;font-size:.9em;max-width:40em;margin-top:.15em}
.phase{display:block;color:#666;font-size:.9em}
"""


def _table(
    head: Sequence[str],
    rows: Iterable[Sequence[str]],
    num_cols: Sequence[int] = (),
    row_classes: Sequence[str] = (),
    classes: dict[int, str] | None = None,
) -> str:
    """An HTML table in a box that scrolls sideways on a narrow window (the page itself never does);
    ``rows`` hold HTML already escaped; ``row_classes``: a class per row (empty for none);
    ``classes``: a class per column."""
    classes = {**(classes or {}), **{i: "num" for i in num_cols}}
    out = ['<div class="scroll"><table><thead><tr>', *(f"<th>{escape(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for n, row in enumerate(rows):
        cells = (f'<td class="{classes[i]}">{c}</td>' if i in classes else f"<td>{c}</td>" for i, c in enumerate(row))
        cls = row_classes[n] if n < len(row_classes) else ""
        out += [f'<tr class="{cls}">' if cls else "<tr>", *cells, "</tr>"]
    out.append("</tbody></table></div>")
    return "".join(out)


def _num(x: float | None, fmt: str = ".4g") -> str:
    return "" if x is None else format(x, fmt)


def _head(view: StudyView) -> str:
    parts = [f"<h1>nccl-tune report: {escape(view.study)}</h1>", '<div class="meta">']
    if view.command:
        parts.append(f"command <code>{escape(' '.join(view.command))}</code><br>")
    parts.append(
        f"space {escape(view.space.name)} &middot; storage <code>{escape(view.storage_url)}</code>"
        f" &middot; generated {escape(view.generated_at)}<br>"
    )
    if view.fingerprint:
        parts.append(f"ran on {escape(view.fingerprint.summary())}")
    parts.append("</div>")
    return "".join(parts)


def _night(view: StudyView) -> str:
    night = view.night
    if night is None:
        return ""
    v = night.verdict
    cls = "neutral" if v is None else ("bad" if v.regression else "good")
    text = (
        v.summary
        if v
        else "not compared with a baseline (first night of the series, or no --fail-on-regression/--warm-start)"
    )
    title = f"Night of series {escape(night.series)}" if night.series else "Night"
    out = [f"<h2>{title}</h2>", f'<div class="banner {cls}">{escape(text)}</div>']
    if night.baseline:
        b = night.baseline
        out.append(
            f"<p>baseline: {escape(b.source)} <code>{escape(b.origin)}</code>, "
            f"{fmt_rate(b.throughput_per_s)} {escape(b.unit)} over {len(b.runs_per_s)} runs</p>"
        )
    row = next((r for r in view.history.rows if r.night.study == night.study), None) if view.history else None
    if row is not None and row.fingerprint_changes:
        out.append("<p>changed since the previous night: " + escape("; ".join(row.fingerprint_changes)) + "</p>")
    return "".join(out)


def _checks(checks: Sequence[Check]) -> str:
    mark = {PASSED: "&#10004;", FAILED: "&#10008;"}
    items = []
    for c in checks:
        detail = f"<pre>{escape(c.detail)}</pre>" if c.detail else ""
        items.append(
            f'<li class="check-{c.outcome}">{mark.get(c.outcome, "&ndash;")} {escape(c.name)}: '
            f"{escape(c.message)}{detail}</li>"
        )
    return "<h2>Checks</h2><ul>" + "".join(items) + "</ul>"


def _winner(view: StudyView) -> str:
    out = ["<h2>The winner and why</h2><ul>", *(f"<li>{escape(line)}</li>" for line in winner_reasons(view)), "</ul>"]
    w = view.winner
    if w is not None:
        table = winner_rows(view)
        rows = [(escape(r.name), escape(r.winner), escape(r.baseline), "changed" if r.changed else "") for r in table]
        classes = ["changed" if r.changed else "" for r in table]
        out.append(_table(("parameter", "winner", "baseline", ""), rows, row_classes=classes))
    return "".join(out)


def _costs(view: StudyView) -> str:
    stops = early_stops(view.records)
    saved = f'<p class="early-stops">{escape(early_stop_sentence(stops))}</p>' if stops else ""
    return _failure_costs(view) + saved


def _failure_costs(view: StudyView) -> str:
    costs = failure_costs(view)
    if not costs:
        return "<h2>What the failures cost</h2><p>no trial failed</p>"
    total = sum(c.wall_s for c in costs)
    rows = [
        (
            escape(c.failure_class),
            str(len(c.trials)),
            escape(", ".join(map(str, c.trials))),
            duration(c.wall_s),
            f"{c.share:.0%}",
        )
        for c in costs
    ]
    share = sum(c.share for c in costs)
    return (
        f"<h2>What the failures cost</h2><p>{duration(total)}, {share:.0%} of the launched trials' time "
        "(a trial that ran out of time, as <code>budget</code>)</p>"
        + _table(("class", "trials", "which", "time", "share"), rows, num_cols=(1, 3, 4))
    )


def _why(r: TrialRecord) -> str:
    """Why the sampler proposed the trial, as a muted line under its values (nothing when it did not say)."""
    return f'<small class="why">why: {escape(r.why)}</small>' if r.why else ""


def _phase(r: TrialRecord) -> str:
    """The phase that held the trial's peak, as a muted line under it (nothing when unknown)."""
    return f'<small class="phase">in {escape(r.peak_phase)}</small>' if r.peak_phase else ""


def _trial_row(view: StudyView, r: TrialRecord) -> list[str]:
    res = r.result
    mem = res.memory if res else None
    headroom = mem.min_headroom_gib if mem else None
    timing = view.timings.get(r.number)
    label = outcome_label(r) if r.outcome is Outcome.LAUNCHED else None
    dot = f'<span class="dot" style="background:{COLOURS[label]}"></span>' if label else ""
    note = ""
    if res is not None and not r.ok:
        evidence = res.verdict.evidence[0].text[:200] if res.verdict.evidence else ""
        note = escape(advice_of(view, r)) + (f"<br><small>{escape(evidence)}</small>" if evidence else "")
    elif r.outcome is not Outcome.LAUNCHED:
        note = escape(
            r.violations[0]
            if r.violations
            else (f"like trial {r.predicted_from}" if r.predicted_from is not None else "")
        )
    base = view.baseline.values if view.baseline else None
    if r.outcome is Outcome.LAUNCHED:
        outcome = dot + escape(r.status.value if r.status else "running") + (" (near wall)" if r.near_wall else "")
    else:
        outcome = f'<span class="not-launched">not launched: {escape(r.outcome.value)}</span>'
    return [
        str(r.number),
        escape(r.kind.value),
        outcome,
        escape(describe(view.space, r.values, base)) + _why(r),
        fmt_rate(r.throughput),
        escape(mem_gib(r.result) if r.result else "") + _phase(r),
        _num(headroom, ".1f"),
        _num(timing.duration_s if timing and timing.duration_s else None, ".0f"),
        note,
    ]


def _trials(view: StudyView) -> str:
    head = (
        "#",
        "kind",
        "outcome",
        "values (changes from the baseline)",
        view.unit,
        "peak GiB",
        "headroom GiB",
        "seconds",
        "advice",
    )
    rows = (_trial_row(view, r) for r in view.records)
    return "<h2>Trials</h2>" + _table(head, rows, num_cols=(0, 4, 5, 6, 7), classes={3: "values", 8: "advice"})


def _history(view: StudyView) -> str:
    h = view.history
    if h is None:
        return ""
    rows = []
    for r in h.rows:
        n = r.night
        v = n.verdict
        rows.append(
            [
                escape(n.started_at[:16].replace("T", " ")),
                escape(n.study),
                fmt_rate(n.best_per_s),
                "" if r.change_frac is None else f"{r.change_frac:+.1%}",
                escape("; ".join(r.fingerprint_changes)),
                escape(v.kind.value.replace("_", " ") if v else "not compared"),
                f"step {r.step.change_frac:+.1%}" if r.step else ("shift?" if r.pending else ""),
            ]
        )
    return f"<h2>Series {escape(h.series)}</h2>" + _table(
        ("night (UTC)", "study", f"best {h.unit}", "change", "fingerprint changes", "verdict", "step"),
        rows,
        num_cols=(2, 3),
    )


def _sweep(view: StudyView) -> str:
    if not view.nccl_sweep:
        return ""
    rows = (
        [escape(line.change), escape(line.status), _num(line.round_ms, ".1f"), line.speed_text]
        for line in view.nccl_sweep
    )
    return '<h2 id="nccl-sweep">NCCL sweep: each change timed on the collectives alone</h2>' + _table(
        ("change", "check", "round ms", "speed vs the baseline's"), rows, num_cols=(2, 3)
    )


def render_html(view: StudyView) -> str:
    plots = "".join(
        f'<figure class="plot"><figcaption>{escape(f.title)}</figcaption>{f.svg}</figure>' for f in all_plots(view)
    )
    names = short_names(view.space)
    legend = ", ".join(f"{escape(v)} = {escape(k)}" for k, v in names.items() if k != v)
    body = [
        _head(view),
        _night(view),
        _checks(night_checks(view)),
        _winner(view),
        _costs(view),
        "<h2>Plots</h2>" + (plots or "<p>no launched trial to plot</p>"),
        _trials(view),
        _sweep(view),
        f'<p class="meta">short names: {legend}</p>' if legend else "",
        _history(view),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>nccl-tune report: {escape(view.study)}</title><style>{CSS}</style></head><body>"
        + "".join(body)
        + "</body></html>\n"
    )
