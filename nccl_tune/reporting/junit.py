"""The night's checks as JUnit XML (one test case per check), the format CI systems read:
``<testsuites>`` > ``<testsuite>`` > ``<testcase>`` with ``<failure>`` or ``<skipped>``."""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET

from nccl_tune.reporting.checks import FAILED, SKIPPED, night_checks
from nccl_tune.reporting.view import StudyView


def render_junit(view: StudyView) -> str:
    checks = night_checks(view)
    suite_name = f"nccl-tune.{view.night.series}" if view.night and view.night.series else "nccl-tune"
    failures = sum(c.outcome == FAILED for c in checks)
    skipped = sum(c.outcome == SKIPPED for c in checks)
    total_s = sum(t.duration_s for t in view.timings.values())
    counts = {"tests": str(len(checks)), "failures": str(failures), "errors": "0", "skipped": str(skipped)}
    root = ET.Element("testsuites", {"name": "nccl-tune", **counts, "time": f"{total_s:.3f}"})
    suite = ET.SubElement(
        root,
        "testsuite",
        {
            "name": suite_name,
            **counts,
            "time": f"{total_s:.3f}",
            "timestamp": view.generated_at[:19],
            "hostname": view.fingerprint.host if view.fingerprint else socket.gethostname(),
        },
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("study", view.study),
        ("storage", view.storage_url),
        ("space", view.space.name),
        ("fingerprint", view.fingerprint.summary() if view.fingerprint else ""),
    ):
        ET.SubElement(props, "property", {"name": name, "value": value})
    for c in checks:
        case = ET.SubElement(
            suite, "testcase", {"classname": f"{suite_name}.{view.study}", "name": c.name, "time": "0"}
        )
        if c.outcome == FAILED:
            fail = ET.SubElement(case, "failure", {"message": c.message, "type": c.name.replace(" ", "_")})
            fail.text = "\n".join(x for x in (c.message, c.detail) if x)
        elif c.outcome == SKIPPED:
            ET.SubElement(case, "skipped", {"message": c.message})
        else:
            ET.SubElement(case, "system-out").text = c.message
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
