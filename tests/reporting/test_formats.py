"""`nccl-tune report --format html|md|json --junit`: what each format holds, read back from a real study."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

from tests.reporting.conftest import SERIES
from tests.tuner.conftest import run_cli


def _report(root, *args):
    proc = run_cli(["report", *args], cwd=root)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_html_is_one_self_contained_file_with_every_section(tiny_study):
    _report(tiny_study, "--study", "t", "--format", "html", "-o", "out/r.html")
    html = (tiny_study / "out" / "r.html").read_text()
    # nothing to fetch: no script, stylesheet link, image or frame source; only SVG's namespace names a URL
    assert not re.search(r"<(script|link|iframe|img)\b", html, re.I)
    assert not re.search(r"\bsrc\s*=", html, re.I)
    assert set(re.findall(r"href=\"(.)", html)) == {"#"}  # SVG's references to its own markers
    assert set(re.findall(r"https?://[^\s\"'<>)]+", html)) == {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
    assert html.count("<svg") == 4
    for caption in ("Throughput against the main parameters", "Peak memory against micro-batch size and sequence length",
                    "Timeline of trials", "The series&#x27; history"):
        assert caption in html
    assert "GPU memory 80.0 GiB" in html and "stability margin (5% free)" in html
    for section in ("The winner and why", "What the failures cost", "Trials", f"Series {SERIES}", "Checks"):
        assert f"<h2>{section}</h2>" in html
    assert "regression: the baseline config (trial" in html and "now fails: oom" in html
    assert "CUDA out of memory" in html  # the failed baseline's evidence
    assert "torch 2.12.0 -&gt; 2.13.0" in html  # what changed that night, next to the throughput change


def test_markdown_for_the_step_summary(tiny_study):
    md = _report(tiny_study, "--series", SERIES, "--format", "md").stdout
    assert md.startswith("## nccl-tune: `t`\n\n> **REGRESSION**: regression: the baseline config")
    assert ":x: **baseline config still runs**: trial" in md and ":white_check_mark: **stable config found**" in md
    assert "| # | kind | class |" in md and "| oom |" in md.replace("oom | ", "oom |")
    assert f"### Series `{SERIES}` (last 6 nights)" in md
    assert "<" not in md.split("### Trials")[0]  # no HTML leaks into the summary part


def test_json_carries_the_night_the_checks_and_the_table_rows(tiny_study):
    data = json.loads(_report(tiny_study, "--study", "t", "--format", "json").stdout)
    assert data["study"] == "t" and data["best"]["confirmed"] and data["night"]["series"] == SERIES
    assert [c["outcome"] for c in data["checks"]] == ["passed", "failed", "failed"]
    assert data["history"]["nights"][-1]["study"] == "t" and data["failure_costs"][0]["wall_s"] > 0
    assert all(row["timing"] is not None for row in data["trials"] if row["outcome"] == "launched")
    # the plain --json report keeps its shape
    plain = json.loads(_report(tiny_study, "--study", "t", "--json").stdout)
    assert set(plain) >= {"study", "best", "baseline", "counts", "trials", "command"}


def test_junit_xml_is_valid_and_has_one_case_per_check(tiny_study):
    _report(tiny_study, "--series", SERIES, "--junit", "junit.xml")
    root = ET.parse(tiny_study / "junit.xml").getroot()
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["stable config found", "no regression against the baseline",
                                              "baseline config still runs"]
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


def test_report_options_refused_in_one_line(tiny_study):
    for args, fragment in ((["--format", "pdf"], "--format 'pdf': choose html, md or json"),
                           (["-o", "r.txt"], "cannot tell the format from its name"),
                           (["--series", "nope"], "no series named 'nope'")):
        proc = run_cli(["report", "--study", "t", *args] if args[0] != "--series" else ["report", *args], cwd=tiny_study)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 1 and len(lines) == 1 and fragment in lines[0], proc.stderr
