"""One entry point for every report format: the format a report is asked for, and its text."""

from __future__ import annotations

import json
from pathlib import Path

from nccl_tune.errors import NcclTuneError
from nccl_tune.reporting.view import StudyView

FORMATS = ("html", "md", "json")
_SUFFIXES = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json"}


def pick_format(fmt: str | None, output: Path | None, as_json: bool = False) -> str | None:
    """``fmt`` checked (``--json`` is ``--format json``), or the format ``output``'s suffix names;
    None for the terminal report."""
    if as_json:
        if fmt not in (None, "json"):
            raise NcclTuneError(f"--json and --format {fmt}: --json is --format json; give one of them")
        return "json"
    if fmt is None:
        if output is None:
            return None
        if output.suffix.lower() in _SUFFIXES:
            return _SUFFIXES[output.suffix.lower()]
        raise NcclTuneError(f"-o {output}: cannot tell the format from its name; add --format html, md or json")
    if fmt not in FORMATS:
        raise NcclTuneError(f"--format {fmt!r}: choose html, md or json")
    return fmt


def render_report(view: StudyView, fmt: str, plots: list[Path] | None = None) -> str:
    """The report in ``fmt`` (``plots``: the figure files ``--plots`` wrote, listed in the JSON)."""
    if fmt == "html":
        from nccl_tune.reporting.html import render_html

        return render_html(view)
    if fmt == "md":
        from nccl_tune.reporting.markdown import render_markdown

        return render_markdown(view)
    from nccl_tune.reporting.json_report import report_json

    data = report_json(view)
    if plots is not None:
        data["plots"] = [str(p) for p in plots]
    return json.dumps(data, indent=2, default=str) + "\n"
