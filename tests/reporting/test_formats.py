"""`nccl-tune report --format html|md|json --junit`: what each format holds, read back from a real study."""

from __future__ import annotations

import dataclasses
import json
import re
import xml.etree.ElementTree as ET
from html import escape
from pathlib import Path

import pytest

from nccl_tune.errors import NcclTuneError
from nccl_tune.reporting.junit import render_junit
from nccl_tune.reporting.plots import all_plots
from nccl_tune.reporting.render import pick_format, render_report
from nccl_tune.reporting.terminal import early_stop_sentence
from nccl_tune.reporting.view import load_view
from nccl_tune.trial import OUTSIDE_PHASES, GpuMemory, MemoryReport
from nccl_tune.tuner.records.early_stops import early_stops
from tests.reporting.conftest import SERIES
from tests.tuner.conftest import run_cli, study_trials
from tests.tuner.trials.test_screening import screened_study


@pytest.fixture(scope="module")
def view(tiny_study):
    return load_view(f"sqlite:///{tiny_study}/results/nccl-tune.db", "t")


def test_the_cli_writes_each_format_where_asked(tiny_study):
    proc = run_cli(["report", "--series", SERIES, "-o", "out/r.html", "--junit", "out/junit.xml"], cwd=tiny_study)
    assert proc.returncode == 0, proc.stderr
    assert (tiny_study / "out" / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert ET.parse(tiny_study / "out" / "junit.xml").getroot().tag == "testsuites"
    md = run_cli(["report", "--study", "t", "--format", "md"], cwd=tiny_study)
    assert md.returncode == 0 and md.stdout.startswith("## nccl-tune: `t`"), md.stderr
    bad = run_cli(["report", "--study", "t", "--format", "pdf"], cwd=tiny_study)
    lines = [line for line in bad.stderr.splitlines() if line.strip()]
    assert bad.returncode == 1 and lines == ["error: --format 'pdf': choose html, md or json"]


def test_html_is_one_self_contained_file_with_every_section(view):
    html = render_report(view, "html")
    # nothing to fetch: no script, stylesheet link, image or frame; only SVG's namespaces name a URL
    assert not re.search(r"<(script|link|iframe|img|object|embed)\b", html, re.I)
    assert not re.search(r"\bsrc\s*=", html, re.I)
    assert set(re.findall(r"href=\"(.)", html)) == {"#"}  # SVG's references to its own markers
    assert set(re.findall(r"https?://[^\s\"'<>)]+", html)) == {
        "http://www.w3.org/2000/svg",
        "http://www.w3.org/1999/xlink",
    }
    assert html.count("<svg") == len(all_plots(view)) >= 6
    for caption in (
        "Throughput against the main parameters",
        "Peak memory against micro-batch size and sequence length",
        "Timeline of trials",
        "The series&#x27; history",
    ):
        assert caption in html
    assert "GPU memory 80.0 GiB" in html and "stability margin (5% free)" in html
    for section in ("The winner and why", "What the failures cost", "Trials", f"Series {SERIES}", "Checks"):
        assert f"<h2>{section}</h2>" in html
    assert "regression: the baseline config (trial" in html and "now fails: oom" in html
    assert "CUDA out of memory" in html  # the failed baseline's evidence
    assert "torch 2.12.0 -&gt; 2.13.0" in html  # what changed that night, next to the throughput change
    rows = re.findall(r"<tr><td class=\"num\">(\d+)</td>", html.split("<h2>Trials</h2>")[1])
    assert [int(n) for n in rows] == [r.number for r in view.records]


def test_markdown_for_the_step_summary(view):
    md = render_report(view, "md")
    assert md.startswith("## nccl-tune: `t`\n\n> **REGRESSION**: regression: the baseline config")
    assert ":x: **baseline config still runs**: trial" in md and ":white_check_mark: **stable config found**" in md
    assert "| # | kind | class |" in md and re.search(r"\| \d+ \| baseline \| oom \|", md)
    assert f"### Series `{SERIES}` (last 6 nights)" in md
    assert "<" not in md


def test_json_carries_the_night_the_checks_and_the_table_rows(view):
    data = json.loads(render_report(view, "json"))
    assert data["study"] == "t" and data["best"]["confirmed"] and data["night"]["series"] == SERIES
    assert [c["outcome"] for c in data["checks"]] == ["passed", "failed", "failed"]
    assert data["history"]["nights"][-1]["study"] == "t" and data["failure_costs"][0]["wall_s"] > 0
    assert all(row["timing"] is not None for row in data["trials"] if row["outcome"] == "launched")
    assert {"study", "best", "baseline", "counts", "trials", "command"} <= set(data)  # `report --json`'s keys


def test_every_format_says_why_the_sampler_proposed_a_trial(view, tiny_study):
    """The default sampler's reason, stored with each trial it proposed, is in every format's row for
    that trial; the baseline and the re-runs show none (no placeholder)."""
    stored = {t.number: t.user_attrs.get("why") for t in study_trials(tiny_study, "t")}
    assert stored[0] is None and sum(1 for w in stored.values() if w) >= 2, stored
    rows = {r["number"]: r for r in json.loads(render_report(view, "json"))["trials"]}
    assert {n: r["why"] for n, r in rows.items()} == stored
    html = render_report(view, "html").split("<h2>Trials</h2>")[1].split("</table>")[0]
    cells = dict(re.findall(r'<tr><td class="num">(\d+)</td>(.*?)</tr>', html))
    assert sorted(map(int, cells)) == sorted(stored)
    for n, why in stored.items():
        shown = re.findall(r'<small class="why">why: (.*?)</small>', cells[str(n)])
        assert shown == ([escape(why)] if why else []), (n, cells[str(n)])
    md = {int(m.group(1)): m.group(0) for m in re.finditer(r"^\| (\d+) \|.*$", render_report(view, "md"), re.M)}
    for n, line in md.items():
        assert line.endswith(f"| {stored[n]} |" if stored[n] else "|  |"), line
    assert any(stored[n] for n in md) and "None" not in "".join(md.values())


def test_junit_xml_is_valid_and_has_one_case_per_check(view):
    root = ET.fromstring(render_junit(view))
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [
        "stable config found",
        "no regression against the baseline",
        "baseline config still runs",
    ]
    # the JUnit schema: counts match the cases, every case has a name and class name and at most one outcome
    for node in (root, suite):
        assert int(node.get("tests")) == len(cases) and int(node.get("errors")) == 0
        assert int(node.get("failures")) == sum(c.find("failure") is not None for c in cases) == 2
        assert int(node.get("skipped")) == sum(c.find("skipped") is not None for c in cases) == 0
        float(node.get("time"))
    assert suite.get("name") == f"nccl-tune.{SERIES}" and suite.get("timestamp") and suite.get("hostname")
    for c in cases:
        assert c.get("classname") == f"nccl-tune.{SERIES}.t"
        assert len([e for e in c if e.tag in ("failure", "error", "skipped")]) <= 1
    failure = cases[2].find("failure")
    assert failure.get("message").startswith("trial ") and "oom" in failure.get("message")
    assert "CUDA out of memory" in failure.text
    assert {p.get("name") for p in suite.find("properties")} == {"study", "storage", "space", "fingerprint"}


def test_format_choice_and_series_errors(tiny_study):
    assert pick_format(None, Path("x.HTML")) == "html" and pick_format(None, Path("s.md")) == "md"
    assert pick_format("json", Path("x.txt")) == "json" and pick_format(None, None) is None
    with pytest.raises(NcclTuneError, match="cannot tell the format from its name"):
        pick_format(None, Path("r.txt"))
    with pytest.raises(NcclTuneError, match="no series named 'nope'"):
        load_view(f"sqlite:///{tiny_study}/results/nccl-tune.db", None, "nope")


def test_the_terminal_report_ends_with_the_nights_verdict(tiny_study):
    proc = run_cli(["report", "--study", "t"], cwd=tiny_study)
    assert proc.returncode == 0, proc.stderr
    assert "regression: the baseline config (trial" in proc.stdout.replace("\n", " ")
    data = json.loads(run_cli(["report", "--study", "t", "--json"], cwd=tiny_study).stdout)
    assert data["night"]["verdict"]["kind"] == "baseline_fails"


def test_every_format_says_what_stopping_early_saved(tmp_path):
    """A study whose slow candidate screening stopped: each format names the trial stopped and the
    time it did not run; a study that stopped none says nothing of it."""
    runs, _, url = screened_study(tmp_path, screen_steps=1)
    view = load_view(url, "screening")
    sentence = early_stop_sentence(early_stops(view.records))
    assert "1 trial stopped as slower than the incumbent" in sentence
    assert escape(sentence) in render_report(view, "html")
    assert sentence in render_report(view, "md")
    saved = json.loads(render_report(view, "json"))["early_stops"]
    assert saved["trials"] == [runs["slow"].number] and saved["saved_s"] == pytest.approx(runs["slow"].unspent_s)
    assert 0 < saved["saved_share"] < 1
    # stopped as slower, not failed: the failure table leaves it to the early-stop line
    assert all(runs["slow"].number not in c["trials"] for c in json.loads(render_report(view, "json"))["failure_costs"])
    quiet = load_view(screened_study(tmp_path, screen_steps=0)[2], "screening")
    assert "stopping early" not in render_report(quiet, "html") + render_report(quiet, "md")
    assert json.loads(render_report(quiet, "json"))["early_stops"] is None


SETTING_SPACE = """
name: setting
parameters:
  - {name: NCCL_CUMEM_ENABLE, kind: categorical, choices: [unset, 0, 1], default: unset, memory: small}
stop: {warmup_steps: 1, measured_steps: 3}
throughput: {samples_per_step: 100}
"""


def setting_study(tmp_path: Path, gain: float) -> tuple[dict, str]:
    """(the winner's values, the report's winner lines) of a study whose NCCL_CUMEM_ENABLE=1 is
    ``gain`` faster than the user's run (the variable unset) and 0 as fast as unset."""
    from io import StringIO

    from rich.console import Console

    from nccl_tune.reporting.view import winner_reasons
    from nccl_tune.tuner.settings import RunSettings
    from nccl_tune.tuner.study.loop import run_study
    from twin.analytic import AnalyticNode, Truth, analytic_cost
    from twin.launcher import ModelLauncher

    folder = tmp_path / f"gain{gain}"
    folder.mkdir()
    (folder / "setting.yaml").write_text(SETTING_SPACE)
    url = f"sqlite:///{folder}/nccl-tune.db"
    settings = RunSettings(
        command=("true",),
        space=str(folder / "setting.yaml"),
        results=folder,
        storage=url,
        study="setting",
        trials=3,
        seed=0,
        confirm=1,
    )
    cost = analytic_cost(
        lambda v: Truth(10.0 / (1.0 + (gain if v["NCCL_CUMEM_ENABLE"] == 1 else 0.0)), 40.0),
        AnalyticNode(startup_s=60.0, step_noise=0.001, run_noise=0.001),
    )
    out = run_study(settings, console=Console(file=StringIO()), launcher=ModelLauncher(env={}, cost=cost))
    assert {r.values["NCCL_CUMEM_ENABLE"] for r in out.records} == {"unset", 0, 1}
    return dict(out.winner.values), winner_reasons(load_view(url, "setting"))


def test_a_setting_within_the_noise_is_left_out_and_the_report_says_so(tmp_path):
    winner, lines = setting_study(tmp_path, gain=0.005)
    assert winner == {"NCCL_CUMEM_ENABLE": "unset"}
    assert any(
        re.search(
            r"trial \d+ was \+0\.\d% faster with NCCL_CUMEM_ENABLE=1 as well, within the measured "
            r"noise \(\d\.\d%\): a setting that does not pay is left as your run has it",
            x,
        )
        for x in lines
    ), lines
    winner, lines = setting_study(tmp_path, gain=0.10)
    assert winner == {"NCCL_CUMEM_ENABLE": 1}
    assert not any("does not pay" in x for x in lines), lines


def test_the_html_and_markdown_tables_name_the_phase_that_held_a_trials_peak(view):
    """A run that reported memory per phase (GPU samples under SkyRL's phase lines) shows which phase
    peaked under its peak; the others show the figure alone."""
    first = view.launched[-1]
    memory = MemoryReport(
        "nvml",
        gpus=(GpuMemory(0, 80.0, 63.2),),
        phase_peak_frac={"generate": 0.61, "policy_train": 0.79, OUTSIDE_PHASES: 0.05},
    )
    phased = dataclasses.replace(first, result=dataclasses.replace(first.result, memory=memory))
    records = tuple(phased if r.number == first.number else r for r in view.records)
    html = render_report(dataclasses.replace(view, records=records), "html")
    md = render_report(dataclasses.replace(view, records=records), "md")
    assert html.count('<small class="phase">in policy_train</small>') == 1
    assert re.search(rf"\| {first.number} \|[^\n]*\| 63\.2 in policy_train \|", md), md
    assert 'class="phase"' not in render_report(view, "html")
    assert not re.search(r"\| [\d.]+ in \w+ \|", render_report(view, "md"))
