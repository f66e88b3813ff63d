"""`nccl-tune report` as one stack: `--json` is `--format json`, and `--plots DIR` writes the figures
the HTML report shows, whatever the format, and says what it wrote."""

from __future__ import annotations

import json
import re

from tests.tuner.conftest import run_cli


def _without_clock(data: dict) -> dict:
    return {k: v for k, v in data.items() if k != "generated_at"}


def test_json_is_the_json_format(tiny_study):
    plain = run_cli(["report", "--study", "t", "--json"], cwd=tiny_study)
    named = run_cli(["report", "--study", "t", "--format", "json"], cwd=tiny_study)
    assert plain.returncode == 0 and named.returncode == 0, plain.stderr + named.stderr
    assert _without_clock(json.loads(plain.stdout)) == _without_clock(json.loads(named.stdout))
    both = run_cli(["report", "--study", "t", "--json", "--format", "html"], cwd=tiny_study)
    lines = [line for line in both.stderr.splitlines() if line.strip()]
    assert both.returncode == 1 and lines == [
        "error: --json and --format html: --json is --format json; give one of them"
    ]


def test_plots_beside_an_html_report_are_the_html_figures(tiny_study):
    proc = run_cli(["report", "--study", "t", "-o", "fig/r.html", "--plots", "fig/svg"], cwd=tiny_study)
    assert proc.returncode == 0, proc.stderr
    written = sorted(p.name for p in (tiny_study / "fig" / "svg").iterdir())
    html = (tiny_study / "fig" / "r.html").read_text()
    assert len(written) == html.count("<figure") >= 3, written
    said = re.findall(r"^wrote (\S+)$", proc.stderr, re.M)
    assert sorted(s.rsplit("/", 1)[-1] for s in said if s.endswith(".svg")) == written
    assert "fig/r.html" in said
    for name in written:  # each file is the figure the HTML inlines, element for element
        svg = (tiny_study / "fig" / "svg" / name).read_text().strip()
        assert svg.startswith("<svg") and svg in html


def test_plots_with_json_are_listed_in_it(tiny_study):
    proc = run_cli(["report", "--study", "t", "--json", "--plots", "figj"], cwd=tiny_study)
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)["plots"]
    assert listed and all((tiny_study / p).stat().st_size > 0 for p in listed)
    assert sorted(listed) == sorted(re.findall(r"^wrote (\S+)$", proc.stderr, re.M))
