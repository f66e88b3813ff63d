"""The HTML report in a real browser: headless Chromium (Debian's package, installed when missing
and possible) renders it; the DOM it builds holds every plot and the screenshot shows them."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PIL import Image

from tests.reporting.browser import dump_dom, install_chromium, screenshot
from tests.tuner.conftest import run_cli

pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def chrome() -> str:
    path, why = install_chromium()
    if path is None:
        pytest.skip(why)
    return path


@pytest.fixture(scope="module")
def report_html(tiny_study):
    proc = run_cli(["report", "--study", "t", "-o", "report.html"], cwd=tiny_study)
    assert proc.returncode == 0, proc.stderr
    return tiny_study / "report.html"


def _runs(img: np.ndarray, rgb: tuple[int, int, int], tol: int = 40) -> tuple[int, int]:
    """(pixels of colour ``rgb``, longest horizontal run of them) in the H x W x 3 image ``img``."""
    hit = np.abs(img.astype(int) - np.array(rgb)).sum(axis=2) <= tol
    longest = 0
    for row in hit[hit.any(axis=1)]:
        edges = np.flatnonzero(np.diff(np.concatenate(([0], row.astype(int), [0]))))
        longest = max(longest, int((edges[1::2] - edges[::2]).max()))
    return int(hit.sum()), longest


def test_chromium_builds_every_plot_into_the_dom(chrome, report_html):
    dom = dump_dom(chrome, report_html)
    figures = re.findall(r'<figure class="plot">.*?</figure>', dom, re.S)
    assert len(figures) == 4
    for fig in figures:
        assert "<svg" in fig and re.search(r'<g id="(axes|patch)_\d+"', fig)
    assert dom.count('id="PathCollection_') >= 3  # scatter points of the parameter and memory plots
    assert "nccl-tune report: t" in dom and "<h2>Trials</h2>" in dom


def test_the_screenshot_shows_the_plots(chrome, report_html, tmp_path):
    png = tmp_path / "report.png"
    proc = screenshot(chrome, report_html, png, height=4200)
    assert png.is_file(), proc.stderr[-2000:]
    img = np.asarray(Image.open(png).convert("RGB").resize((640, 2100)))  # half size: same shapes, fewer pixels
    ink = float((img.astype(int).sum(axis=2) < 600).mean())
    assert ink > 0.03, f"the page looks blank ({ink:.1%} of it is not white)"
    # the GPU's limit: a dashed red line across a plot (the table's dots are far shorter)
    red, red_run = _runs(img, (214, 39, 40))
    assert red_run >= 8 and red > 100
    # ok trials in green (scatter points and timeline bars), the history's blue line
    green, green_run = _runs(img, (42, 157, 58))
    assert green > 150 and green_run >= 6
    # the series' history: its blue line runs across the plot
    blue, blue_run = _runs(img, (31, 119, 180), tol=90)
    assert blue > 100 and blue_run >= 20, (blue, blue_run)
