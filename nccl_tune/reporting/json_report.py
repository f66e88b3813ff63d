"""The report as JSON: ``report --json``'s summary, plus the night, its series, the checks, the
winner's reasons, what the failures cost and when each trial ran."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from nccl_tune.nightly.history import history_json
from nccl_tune.reporting.checks import night_checks
from nccl_tune.reporting.view import StudyView, failure_costs, winner_reasons
from nccl_tune.tuner.report import summary_json


def report_json(view: StudyView) -> dict[str, Any]:
    data = summary_json(
        view.study,
        view.storage_url,
        list(view.records),
        view.winner,
        view.baseline,
        0 if view.winner else 2,
        view.space,
        view.passed_over,
    )
    data["command"] = list(view.command)
    data["space"] = view.space.name
    data["generated_at"] = view.generated_at
    data["fingerprint"] = view.fingerprint.to_json() if view.fingerprint else None
    data["gpu_limit_gib"] = view.gpu_limit_gib
    data["winner_reasons"] = winner_reasons(view)
    data["failure_costs"] = [asdict(c) for c in failure_costs(view)]
    data["checks"] = [asdict(c) for c in night_checks(view)]
    data["night"] = view.night.to_json() if view.night else None
    data["history"] = history_json(view.history) if view.history else None
    data["nccl_sweep"] = [asdict(line) for line in view.nccl_sweep]
    timings = {n: asdict(t) for n, t in view.timings.items()}
    for row in data["trials"]:
        row["timing"] = timings.get(row["number"])
    return data
