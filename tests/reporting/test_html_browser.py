"""The HTML report in a real browser: headless Chromium (Debian's package, installed when missing
and possible) renders it; the DOM it builds holds every plot and the screenshot shows them."""

from __future__ import annotations

import re

import numpy as np
import pytest
from PIL import Image

from nccl_tune.failure import FailureClass
from tests.reporting.browser import dump_dom, install_chromium, screenshot
from tests.tuner.conftest import run_cli
from tests.tuner.study.test_nccl_sweep_run import SWEPT, Launcher, study

pytestmark = pytest.mark.timeout(1500)
CLASSES = {c.value for c in FailureClass}


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


def _colour_rows(img: np.ndarray, rgb: tuple[int, int, int], tol: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """(mask of the pixels of colour ``rgb`` in the H x W x 3 image ``img``, and for each row holding
    any, the edges of its runs of them: starts at even positions, ends at odd ones)."""
    hit = np.abs(img.astype(int) - np.array(rgb)).sum(axis=2) <= tol
    edges = [np.flatnonzero(np.diff(np.concatenate(([0], row.astype(int), [0])))) for row in hit[hit.any(axis=1)]]
    return hit, edges


def _runs(img: np.ndarray, rgb: tuple[int, int, int], tol: int = 40) -> tuple[int, int]:
    """(pixels of colour ``rgb``, longest horizontal run of them) in the H x W x 3 image ``img``."""
    hit, rows = _colour_rows(img, rgb, tol)
    return int(hit.sum()), max((int((e[1::2] - e[::2]).max()) for e in rows), default=0)


def _dashed_line(img: np.ndarray, rgb: tuple[int, int, int], tol: int = 40) -> tuple[int, int]:
    """(dashes, pixels from the first to the last) of the row of ``img`` that holds the most separate
    runs of colour ``rgb``: a dashed line, however many other marks of that colour the page holds."""
    _, rows = _colour_rows(img, rgb, tol)
    return max(((len(e) // 2, int(e[-1] - e[0])) for e in rows), default=(0, 0))


def test_chromium_builds_every_plot_into_the_dom(chrome, report_html):
    dom = dump_dom(chrome, report_html)
    figures = re.findall(r'<figure class="plot">.*?</figure>', dom, re.S)
    captions = [re.search(r"<figcaption>(.*?)</figcaption>", f).group(1) for f in figures]
    for wanted in ("Best throughput over trials", "Every trial's parameters side by side", "Peak memory"):
        assert any(c.startswith(wanted.replace("'", "&#x27;")) or c.startswith(wanted) for c in captions), captions
    assert len(figures) >= 6, captions
    for fig in figures:
        assert "<svg" in fig and re.search(r'<g id="(axes|patch)_\d+"', fig)
    assert dom.count('id="PathCollection_') >= 3  # scatter points of the parameter and memory plots
    assert "nccl-tune report: t" in dom and "<h2>Trials</h2>" in dom


# Measures, in the page Chromium laid out, each "why" line of the trials table and writes what it
# found into the DOM: the trial, the line's colour and its cell's, where the values end and the line
# starts, whether it stays inside its cell; then how wide the page is against the window.
LAYOUT_PROBE = """<script>
window.addEventListener('load', () => {
  const out = [...document.querySelectorAll('.why')].map(w => {
    const td = w.closest('td'), box = w.getBoundingClientRect(), cell = td.getBoundingClientRect();
    const values = document.createRange();
    values.selectNodeContents(td.firstChild);
    return ['why', td.parentElement.firstChild.textContent, getComputedStyle(w).color, getComputedStyle(td).color,
            values.getBoundingClientRect().bottom, box.top, box.left >= cell.left && box.right <= cell.right].join('|');
  });
  out.push(['page', document.documentElement.scrollWidth, window.innerWidth].join('|'));
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = out.join('\\n');
  document.body.append(pre);
});
</script>"""


def test_why_a_trial_was_proposed_is_a_muted_line_under_its_values(chrome, report_html, tmp_path):
    probed = tmp_path / "probed.html"
    probed.write_text(report_html.read_text().replace("</body>", LAYOUT_PROBE + "</body>"))
    dom = dump_dom(chrome, probed, width=1280)
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    *lines, page = [line.split("|") for line in found.group(1).splitlines()]
    proposed = [int(n) for n in re.findall(r'<tr><td class="num">(\d+)</td>(?:(?!</tr>).)*class="why"', dom, re.S)]
    assert [int(line[1]) for line in lines] == proposed and len(proposed) >= 2  # one per proposed trial only
    assert 0 not in proposed  # the baseline says nothing
    for _, number, colour, cell_colour, values_bottom, top, inside in lines:
        assert colour != cell_colour, f"trial {number}: the why line is not muted ({colour})"
        assert float(top) >= float(values_bottom) - 1, f"trial {number}: the why line is not under the values"
        assert inside == "true", f"trial {number}: the why line runs out of its cell"
    assert page[0] == "page" and int(page[1]) <= int(page[2]), f"the page scrolls sideways: {page}"


def test_the_screenshot_shows_the_plots(chrome, report_html, tmp_path):
    png = tmp_path / "report.png"
    proc = screenshot(chrome, report_html, png, height=4200)
    assert png.is_file(), proc.stderr[-2000:]
    shot = Image.open(png).convert("RGB")
    full = np.asarray(shot)
    img = np.asarray(shot.resize((640, 2100)))  # half size: same shapes, fewer pixels
    ink = float((img.astype(int).sum(axis=2) < 600).mean())
    assert ink > 0.03, f"the page looks blank ({ink:.1%} of it is not white)"
    # the GPU's limit: a dashed red line across the memory plot (full size, where each dash stands
    # apart; the legend's sample, the out-of-memory marks and the timeline's bar are one run a row)
    dashes, span = _dashed_line(full, (214, 39, 40))
    assert dashes >= 20 and span >= 300, (dashes, span)
    # ok trials in green (scatter points and timeline bars), the history's blue line; how many trials
    # end ok depends on the early stop, which a loaded machine's noise moves (about 100 pixels each)
    green, green_run = _runs(img, (42, 157, 58))
    assert green > 60 and green_run >= 6, (green, green_run)
    # the series' history: its blue line runs across the plot
    blue, blue_run = _runs(img, (31, 119, 180), tol=90)
    assert blue > 100 and blue_run >= 20, (blue, blue_run)


def test_the_nccl_sweep_s_table_shows_each_change_and_its_speed(chrome, tmp_path):
    study(tmp_path, 2, Launcher())
    proc = run_cli(
        ["report", "--storage", f"sqlite:///{tmp_path}/sweep.db", "--study", "sweep", "-o", "sweep.html"], cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    dom = dump_dom(chrome, tmp_path / "sweep.html")
    section = dom.split('id="nccl-sweep"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", section, re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in rows if "<td" in row]
    assert [c[0] for c in cells][:2] == ["baseline", "NCCL_ALGO=Ring"] and len(cells) == SWEPT + 1
    nvls = next(c for c in cells if c[0] == "NCCL_ALGO=NVLS")
    assert nvls[1] == "ok" and re.fullmatch(r"1\.[345]\dx", nvls[3]), nvls


# Measures, in the page Chromium laid out, what sticks out of the window (outside the boxes that
# scroll sideways on purpose) and each figure's caption and drawn width.
WIDTH_PROBE = """<script>
window.addEventListener('load', () => {
  const W = window.innerWidth;
  const wide = [...document.body.querySelectorAll('*')]
    .filter(e => !e.closest('.scroll') && e.id !== 'probe' && e.getBoundingClientRect().right > W + 1)
    .map(e => e.tagName + '.' + e.className).slice(0, 10);
  const figs = [...document.querySelectorAll('figure.plot')].map(f => ({
    caption: (f.querySelector('figcaption') || {}).textContent || '',
    width: f.querySelector('svg').getBoundingClientRect().width,
  }));
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify({page: document.documentElement.scrollWidth, window: W, wide, figs});
  document.body.append(pre);
});
</script>"""


@pytest.mark.parametrize("width", [1400, 480])
def test_nothing_is_wider_than_the_window(chrome, report_html, tmp_path, width):
    import html
    import json

    probed = tmp_path / "width.html"
    probed.write_text(report_html.read_text().replace("</body>", WIDTH_PROBE + "</body>"))
    found = re.search(r'<pre id="probe">(.*?)</pre>', dump_dom(chrome, probed, width=width), re.S)
    assert found
    seen = json.loads(html.unescape(found.group(1)))
    assert seen["page"] <= seen["window"], seen
    assert not seen["wide"], seen["wide"]
    assert seen["figs"] and all(f["caption"] and 0 < f["width"] <= seen["window"] for f in seen["figs"]), seen["figs"]


def test_the_trials_table_says_each_trials_outcome_and_the_winner_table_marks_changes(report_html):
    page = report_html.read_text()
    trials = page[page.index("<h2>Trials</h2>") :]
    rows = re.findall(r"<tr><td class=\"num\">\d+</td><td>[^<]*</td><td>(.*?)</td>", trials)
    assert rows and not any(re.sub("<[^>]+>", "", r) == "launched" for r in rows)
    outcomes = {re.sub("<[^>]+>", "", r).split(" (")[0] for r in rows}
    assert "oom" in outcomes and all(o in CLASSES or o.startswith("not launched: ") for o in outcomes), outcomes
    winner = page[page.index("The winner and why") : page.index("What the failures cost")]
    changed = re.findall(r'<tr class="changed"><td>([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td>', winner)
    assert changed and all(w != b for _, w, b in changed)
    same = re.findall(r"<tr><td>([^<]+)</td><td>([^<]+)</td><td>([^<]+)</td>", winner)
    assert all(w == b for _, w, b in same)
