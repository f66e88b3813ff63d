"""What ``nccl-tune report`` and the end of ``nccl-tune run`` print: one view of the stored study
(``view.load_view``), rendered in the format asked for, with the figures and the JUnit checks
written beside it where asked."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from nccl_tune.reporting.json_report import report_json
from nccl_tune.reporting.render import pick_format, render_report
from nccl_tune.reporting.terminal import print_report, print_summary
from nccl_tune.reporting.view import load_view, view_of
from nccl_tune.tuner.study.loop import StudyOutcome
from nccl_tune.userfile import write_output


@dataclass(frozen=True)
class ReportRequest:
    """What ``nccl-tune report`` was asked for."""

    storage_url: str
    study: str | None = None
    """The study's name; None: the only study in the storage (or the latest night of ``series``)."""
    series: str | None = None
    """Report the latest night of this series."""
    fmt: str | None = None
    """``html``, ``md`` or ``json``; None: from ``output``'s suffix, else the terminal report."""
    as_json: bool = False
    """``--json``, the same as ``--format json``."""
    output: Path | None = None
    """Write the report to this file instead of stdout."""
    junit: Path | None = None
    """Also write the night's checks as JUnit XML here."""
    plots: Path | None = None
    """Also write the report's figures into this folder, as SVG files."""


def _said(err: Console, path: Path) -> None:
    err.print(escape(f"wrote {path}"), highlight=False, soft_wrap=True)


def report(req: ReportRequest, out: Console, err: Console) -> None:
    """Render the report ``req`` asks for: to ``out`` (or ``req.output``), the files it names beside it."""
    from nccl_tune.reporting.plots import write_plots

    fmt = pick_format(req.fmt, req.output, req.as_json)
    view = load_view(req.storage_url, req.study, req.series)
    if req.junit is not None:
        from nccl_tune.reporting.junit import render_junit

        write_output(req.junit, render_junit(view))
        _said(err, req.junit)
    plots = write_plots(view, req.plots) if req.plots is not None else None
    for path in plots or ():
        _said(err, path)
    if fmt is None:
        print_report(view, out)
    elif req.output is None:
        sys.stdout.write(render_report(view, fmt, plots))
    else:
        write_output(req.output, render_report(view, fmt, plots))
        _said(err, req.output)


def end_of_run(outcome: StudyOutcome, console: Console, err: Console, as_json: bool) -> None:
    """What ``run`` prints once its study ends: the summary (not when interrupted), where the tuned
    YAML went, the JSON report on stdout (``as_json``), the night's verdict and how to resume."""
    stored = outcome.stored
    if not outcome.interrupted:
        print_summary(
            console,
            stored.space,
            stored.records,
            outcome.winner,
            stored.baseline,
            confirmation_required=outcome.confirmation_required,
            passed_over=stored.passed_over,
            speed_only=stored.speed_only,
            with_training=stored.with_training,
        )
    for line in outcome.notes:
        console.print(escape(line), highlight=False, soft_wrap=True)
    if as_json:
        view = view_of(stored, winner=outcome.winner, night=outcome.night)
        sys.stdout.write(json.dumps(report_json(view, outcome.exit_code), indent=2, default=str) + "\n")
    verdict = outcome.night.verdict if outcome.night else None
    if verdict is not None and not outcome.interrupted:
        (err if outcome.exit_code == 3 else console).print(escape(verdict.summary), highlight=False, soft_wrap=True)
    if outcome.interrupted:
        err.print(
            escape(f"interrupted: study {outcome.study} is saved; run the same command again to resume"),
            highlight=False,
            soft_wrap=True,
        )
