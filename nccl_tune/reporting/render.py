"""One entry point for every report format."""

from __future__ import annotations

from pathlib import Path

from nccl_tune.errors import NcclTuneError
from nccl_tune.reporting.view import StudyView

FORMATS = ("html", "md", "json")
_SUFFIXES = {".html": "html", ".htm": "html", ".md": "md", ".markdown": "md", ".json": "json"}


def pick_format(fmt: str | None, output: Path | None) -> str | None:
    """``fmt`` checked, or the format ``output``'s suffix names; None for the terminal report."""
    if fmt is None:
        if output is None:
            return None
        if output.suffix.lower() in _SUFFIXES:
            return _SUFFIXES[output.suffix.lower()]
        raise NcclTuneError(f"-o {output}: cannot tell the format from its name; add --format html, md or json")
    if fmt not in FORMATS:
        raise NcclTuneError(f"--format {fmt!r}: choose html, md or json")
    return fmt


def render_report(view: StudyView, fmt: str) -> str:
    if fmt == "html":
        from nccl_tune.reporting.html import render_html

        return render_html(view)
    if fmt == "md":
        from nccl_tune.reporting.markdown import render_markdown

        return render_markdown(view)
    import json

    from nccl_tune.reporting.json_report import report_json

    return json.dumps(report_json(view), indent=2, default=str) + "\n"
