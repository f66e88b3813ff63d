"""The report's figures as SVG (matplotlib, no network): throughput against the main parameters,
peak memory against the memory-growing parameters with the GPU's limit drawn, a timeline of trials
coloured by outcome, and the series' history. The HTML report inlines them; ``report --plots DIR``
writes the same figures as files."""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nccl_tune.atomic import write_text_atomic
from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import FailureClass
from nccl_tune.reporting.view import StudyView, known_gib
from nccl_tune.search_spaces.describe import short_names
from nccl_tune.search_spaces.space import MemoryEffect, Parameter, Target
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.tuner.records.study_records import TrialRecord
from nccl_tune.tuner.winner.importance import EVALUATOR as IMPORTANCE_EVALUATOR
from nccl_tune.wording import over_the_wall

COLOURS = {
    "ok": "#2a9d3a",
    "near wall": "#f0a202",
    FailureClass.BUDGET.value: "#c9b400",
    FailureClass.OOM.value: "#d62728",
    FailureClass.HOST_OOM.value: "#a61c1c",
    FailureClass.HANG.value: "#7b3fa0",
    FailureClass.COLLECTIVE_TIMEOUT.value: "#9467bd",
    FailureClass.CONFIG_ERROR.value: "#8c564b",
    FailureClass.INTERRUPTED.value: "#e377c2",
    "other failure": "#555555",
}
_NAMED = {c for c in COLOURS if c in FailureClass._value2member_map_}


def outcome_label(r: TrialRecord) -> str:
    """The colour key of a launched trial."""
    if r.ok:
        return "near wall" if r.near_wall else "ok"
    status = r.status.value if r.status else "other failure"
    return status if status in _NAMED else "other failure"


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "svg.fonttype": "none",
            "svg.hashsalt": "nccl-tune",  # the same figure gets the same element ids: files match the HTML
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    )
    return plt


def to_svg(fig: Any) -> str:
    """The figure as an ``<svg>`` element to inline in HTML (XML prolog, doctype and RDF metadata
    dropped; its only references are to its own elements, ``href="#..."``)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    _plt().close(fig)
    text = buf.getvalue()
    return re.sub(r"<metadata>.*?</metadata>\s*", "", text[text.index("<svg") :], flags=re.S)


def main_parameters(view: StudyView, limit: int = 6) -> list[Parameter]:
    """Parameters with at least two values among launched trials: memory-growing ones first,
    then the other command-line ones, environment variables last."""
    seen = {p.name: {format_value(r.values.get(p.name)) for r in view.launched} for p in view.space.parameters}
    varied = [p for p in view.space.parameters if len(seen[p.name]) >= 2]
    order = lambda p: (p.memory is not MemoryEffect.INCREASING, p.target is Target.ENV)  # noqa: E731
    return sorted(varied, key=order)[:limit]


def _positions(p: Parameter, recs: Sequence[TrialRecord]) -> tuple[dict[str, int], list[str]]:
    present = {format_value(r.values.get(p.name)) for r in recs}
    labels = [format_value(c) for c in p.choices if format_value(c) in present]
    labels += sorted(present - set(labels))
    return {v: i for i, v in enumerate(labels)}, labels


def _scatter_by_outcome(ax: Any, recs: Sequence[TrialRecord], xs: Sequence[float], ys: Sequence[float]) -> None:
    for label in COLOURS:
        idx = [i for i, r in enumerate(recs) if outcome_label(r) == label]
        if idx:
            ok = label in ("ok", "near wall")
            ax.scatter(
                [xs[i] for i in idx],
                [ys[i] for i in idx],
                c=COLOURS[label],
                label=label,
                marker="o" if ok else "x",
                s=28 if ok else 36,
                alpha=0.85,
                zorder=3,
            )


def _jitter(i: int) -> float:
    return ((i * 37) % 11 - 5) / 40.0


def throughput_by_parameter(view: StudyView) -> str | None:
    params = main_parameters(view)
    recs = view.launched
    if not params or not recs:
        return None
    plt = _plt()
    cols = min(3, len(params))
    rows = math.ceil(len(params) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.8 * rows), squeeze=False)
    names = short_names(view.space)
    for ax, p in zip(axes.flat, params):
        pos, labels = _positions(p, recs)
        xs = [pos[format_value(r.values.get(p.name))] + _jitter(r.number) for r in recs]
        ys = [r.throughput or 0.0 for r in recs]  # a trial stopped for its budget ran at its measured rate
        _scatter_by_outcome(ax, recs, xs, ys)
        if view.winner is not None:
            ax.scatter(
                [pos[format_value(view.winner.values.get(p.name))]],
                [view.winner.throughput],
                marker="*",
                s=180,
                facecolors="none",
                edgecolors="black",
                zorder=4,
                label=f"winner (mean of {len(view.winner.ok_runs)} runs)",
            )
        ax.set_xticks(range(len(labels)), labels, rotation=30 if max(map(len, labels)) > 4 else 0)
        ax.set_title(names[p.name])
        ax.set_xlabel(names[p.name])
        ax.set_ylabel(view.unit)
    for ax in list(axes.flat)[len(params) :]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 6), frameon=False, bbox_to_anchor=(0.5, 1.06))
    fig.suptitle("throughput by parameter (trials with no measured step at 0)", y=1.12)
    fig.tight_layout()
    return to_svg(fig)


_SIZE_HINTS = (re.compile(r"micro|batch", re.I), re.compile(r"length|seq|token|ctx|context", re.I))


def memory_parameters(view: StudyView) -> list[Parameter]:
    """Up to two memory-growing parameters that varied: a micro-batch size and a sequence length when the names say so."""
    grow = [p for p in main_parameters(view, limit=99) if p.memory is MemoryEffect.INCREASING]
    picked = [next((p for p in grow if hint.search(p.name)), None) for hint in _SIZE_HINTS]
    out = [p for p in picked if p is not None]
    out = list(dict.fromkeys(out))
    out += [p for p in grow if p not in out]
    return out[:2]


def _memory_y(r: TrialRecord, limit: float | None) -> float:
    """Where a trial sits on the memory figure: its measured GPU peak; an out-of-memory trial at what
    its PyTorch message shows it needed (over the limit), else at the limit."""
    demand = over_the_wall(r.result)
    if demand is not None:
        return demand.needed_gib
    if r.status is FailureClass.OOM or not known_gib(r.peak_mem_gib):
        return limit or 0.0
    return r.peak_mem_gib


def memory_by_size(view: StudyView) -> str | None:
    recs = [r for r in view.launched if known_gib(r.peak_mem_gib) or r.status is FailureClass.OOM]
    if not recs:
        return None
    params = memory_parameters(view) or [None]
    limit = view.gpu_limit_gib
    plt = _plt()
    fig, axes = plt.subplots(1, len(params), figsize=(4.8 * len(params), 3.2), squeeze=False)
    names = short_names(view.space)
    for ax, p in zip(axes.flat, params):
        if p is None:
            xs, labels = [float(r.number) for r in recs], None
        else:
            pos, labels = _positions(p, recs)
            xs = [pos[format_value(r.values.get(p.name))] + _jitter(r.number) for r in recs]
        ys = [_memory_y(r, limit) for r in recs]
        _scatter_by_outcome(ax, recs, xs, ys)
        if limit:
            ax.axhline(limit, color="#d62728", linestyle="--", linewidth=1.2, label=f"GPU memory {limit:.1f} GiB")
            margin = limit * (1 - view.space.min_headroom_frac)
            ax.axhline(
                margin,
                color="#f0a202",
                linestyle=":",
                linewidth=1.2,
                label=f"stability margin ({view.space.min_headroom_frac:.0%} free)",
            )
        if labels is not None:
            ax.set_xticks(range(len(labels)), labels)
        ax.set_xlabel(names[p.name] if p is not None else "trial")
        ax.set_ylabel("peak memory per GPU (GiB)")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    fig.suptitle("peak memory per GPU (out of memory: at what PyTorch asked for, else at the limit)")
    fig.tight_layout()
    return to_svg(fig)


def timeline(view: StudyView) -> str | None:
    recs = [r for r in view.launched if r.number in view.timings]
    if not recs:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, max(2.2, 0.22 * len(recs) + 1)))
    shown: set[str] = set()
    for r in recs:
        t = view.timings[r.number]
        label = outcome_label(r)
        ax.barh(
            r.number,
            max(t.duration_s, 0.5) / 60.0,
            left=t.start_s / 60.0,
            color=COLOURS[label],
            height=0.7,
            label=None if label in shown else label,
        )
        shown.add(label)
    ax.invert_yaxis()
    ax.set_xlabel("minutes since the first trial")
    ax.set_ylabel("trial")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title("timeline of trials, coloured by outcome")
    fig.tight_layout()
    return to_svg(fig)


def _night_labels(started: Sequence[str]) -> list[str]:
    """A tick label per night: its month-day, with the time where that repeats, its number where even that does."""
    for cut in (slice(5, 10), slice(5, 16)):
        labels = [s[cut].replace("T", " ") for s in started]
        if len(set(labels)) == len(labels):
            return labels
    return [f"#{i + 1}" for i in range(len(started))]


def series_history(view: StudyView) -> str | None:
    h = view.history
    if h is None or not h.rows:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.2))
    xs = list(range(len(h.rows)))
    best = [r.night.best_per_s for r in h.rows]
    ax.plot(
        [x for x, b in zip(xs, best) if b is not None],
        [b for b in best if b is not None],
        "-o",
        color="#1f77b4",
        label=f"best stable {h.unit}",
        zorder=3,
    )
    base = [(x, r.night.baseline.throughput_per_s) for x, r in zip(xs, h.rows) if r.night.baseline]
    if base:
        ax.scatter(*zip(*base), marker="_", s=220, color="#444444", label="baseline", zorder=2)
    bad = [
        (x, b if b is not None else 0.0)
        for x, b, r in zip(xs, best, h.rows)
        if r.night.verdict and r.night.verdict.regression
    ]
    if bad:
        ax.scatter(*zip(*bad), marker="X", s=90, color="#d62728", label="regression", zorder=4)
    for s in h.steps:
        ax.axvline(s.index - 0.5, color="#f0a202", linestyle="--", label=f"step {s.change_frac:+.0%}")
    here = next((x for x, r in zip(xs, h.rows) if r.night.study == view.study), None)
    if here is not None:
        ax.axvspan(here - 0.4, here + 0.4, color="#1f77b4", alpha=0.08, label="this study")
    ax.set_xticks(xs, _night_labels([r.night.started_at for r in h.rows]), rotation=45 if len(xs) > 8 else 0)
    ax.set_xlabel("night (month-day, and the time where one day holds several)")
    ax.set_ylim(bottom=0)
    ax.set_ylabel(h.unit)
    ax.set_title(f"series {h.series}: best stable throughput per night")
    ax.legend(fontsize=7, loc="lower left", ncol=3)
    fig.tight_layout()
    return to_svg(fig)


def _outcome_legend(fig: Any, ax: Any) -> None:
    """The outcome colours' legend under the figure, where it covers no point."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(
            handles, labels, loc="upper center", ncol=min(len(labels), 5), frameon=False, bbox_to_anchor=(0.5, 0.0)
        )


def best_over_trials(view: StudyView) -> str | None:
    """Each launched trial's throughput in the order they ran, and the best stable one so far as a step line."""
    recs = sorted(view.launched, key=lambda r: r.number)
    if not any(r.throughput for r in recs):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3.2))
    xs = list(range(1, len(recs) + 1))
    _scatter_by_outcome(ax, recs, xs, [r.throughput or 0.0 for r in recs])
    best, line = 0.0, []
    for r in recs:
        best = max(best, r.throughput or 0.0) if r.ok else best
        line.append(best)
    ax.step(xs, line, where="post", color="#1f77b4", linewidth=1.5, label="best so far", zorder=2)
    ax.set_xticks(xs, [str(r.number) for r in recs], rotation=45 if len(xs) > 20 else 0)
    ax.set_xlabel("trial (in the order they ran)")
    ax.set_ylabel(view.unit)
    ax.set_ylim(bottom=0)
    ax.set_title("best throughput over trials (trials with no measured step at 0)")
    _outcome_legend(fig, ax)
    fig.tight_layout()
    return to_svg(fig)


def importance_bars(view: StudyView) -> str | None:
    """Each varied parameter's share of what made the fast runs fast (Optuna's PED-ANOVA)."""
    shares = view.importance
    if not shares:
        return None
    plt = _plt()
    names = short_names(view.space)
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(shares) + 1.2))
    labels = [names.get(k, k) for k in shares]
    ax.barh(range(len(shares)), list(shares.values()), color="#1f77b4")
    ax.set_yticks(range(len(shares)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the difference between the fastest runs and the rest")
    ax.set_ylabel("parameter")
    ax.set_title(
        f"which parameters mattered (Optuna's {IMPORTANCE_EVALUATOR} over the runs that measured a throughput)"
    )
    fig.tight_layout()
    return to_svg(fig)


def parallel_coordinates(view: StudyView) -> str | None:
    """Every launched trial as a line across one axis per main parameter and one for its throughput."""
    params = main_parameters(view)
    recs = view.launched
    if not params or not recs:
        return None
    plt = _plt()
    names = short_names(view.space)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * (len(params) + 1)), 3.6))
    top = max((r.throughput or 0.0) for r in recs) or 1.0
    axes_labels = []
    for p in params:
        pos, labels = _positions(p, recs)
        span = max(len(labels) - 1, 1)
        axes_labels.append((names[p.name], [(pos[v] / span, v) for v in labels]))
    ticks = [(i / 4, f"{top * i / 4:,.0f}") for i in range(5)]
    axes_labels.append((view.unit, ticks))
    shown: set[str] = set()
    for r in recs:
        ys = []
        for p in params:
            pos, labels = _positions(p, recs)
            ys.append(pos[format_value(r.values.get(p.name))] / max(len(labels) - 1, 1))
        ys.append((r.throughput or 0.0) / top)
        label = outcome_label(r)
        ax.plot(
            range(len(ys)),
            ys,
            color=COLOURS[label],
            alpha=0.75,
            linewidth=1.2,
            label=None if label in shown else label,
            zorder=3 if r.ok else 2,
        )
        shown.add(label)
    for i, (_, marks) in enumerate(axes_labels):
        ax.axvline(i, color="#888888", linewidth=0.8, zorder=1)
        for y, text in marks:
            ax.text(i + 0.04, y, text, fontsize=7, va="center", ha="left", color="#333333")
    long_names = max(len(name) for name, _ in axes_labels) > 12
    ax.set_xticks(
        range(len(axes_labels)),
        [name for name, _ in axes_labels],
        rotation=20 if long_names else 0,
        ha="right" if long_names else "center",
    )
    ax.set_yticks([])
    ax.set_xlim(-0.2, len(axes_labels) - 0.5)
    ax.set_ylim(-0.08, 1.08)
    ax.spines["left"].set_visible(False)
    ax.set_xlabel("parameter (each axis: its values, low to high) and the trial's throughput")
    ax.set_ylabel("value on each axis")
    ax.set_title("every trial's parameters side by side (parallel coordinates), coloured by outcome")
    _outcome_legend(fig, ax)
    fig.tight_layout()
    return to_svg(fig)


@dataclass(frozen=True)
class Figure:
    name: str
    """The figure's file name without suffix (``--plots DIR`` writes ``DIR/NAME.svg``)."""
    title: str
    svg: str
    """An ``<svg>`` element (``to_svg``)."""


def all_plots(view: StudyView) -> list[Figure]:
    """Every figure the study has data for, as the HTML report shows them."""
    plots = [
        ("best", "Best throughput over trials", best_over_trials(view)),
        ("importance", "Which parameters mattered", importance_bars(view)),
        ("parallel", "Every trial's parameters side by side", parallel_coordinates(view)),
        ("throughput", "Throughput against the main parameters", throughput_by_parameter(view)),
        ("memory", "Peak memory against micro-batch size and sequence length", memory_by_size(view)),
        ("timeline", "Timeline of trials", timeline(view)),
        ("history", "The series' history", series_history(view)),
    ]
    return [Figure(name, title, svg) for name, title, svg in plots if svg]


def write_plots(view: StudyView, folder: Path) -> list[Path]:
    """Write the HTML report's figures into ``folder`` as SVG files; the paths written."""
    if folder.exists() and not folder.is_dir():
        raise NcclTuneError(f"--plots {folder}: it is a file, not a folder; give a folder for the figures")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for fig in all_plots(view):
            paths.append(folder / f"{fig.name}.svg")
            write_text_atomic(paths[-1], fig.svg + "\n")
    except OSError as exc:
        raise NcclTuneError(
            f"--plots {folder}: cannot write {exc.filename or folder} ({exc.strerror or exc}); "
            "choose a folder you can write"
        ) from None
    return paths
