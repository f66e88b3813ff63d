"""The report as JSON, one object for ``report --json``, ``report --format json`` and ``run --json``:
the trials, the winner and the baseline, the counts, the night and its series, the checks, the
winner's reasons, what the failures cost and when each trial ran."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from typing import Any

from nccl_tune.nightly.history import history_json
from nccl_tune.reporting.checks import night_checks
from nccl_tune.reporting.view import StudyView, advice_of, failure_costs, winner_reasons
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.tuner.records.early_stops import early_stops
from nccl_tune.tuner.records.semantics import semantic_changes
from nccl_tune.tuner.records.speedup import speedup
from nccl_tune.tuner.records.stability import Candidate, faster_passed_over
from nccl_tune.tuner.records.study_records import Outcome, TrialRecord
from nccl_tune.tuner.winner.headline import confirmation_words


def trial_row(r: TrialRecord) -> dict[str, Any]:
    """One trial as JSON."""
    res = r.result
    return {
        "number": r.number,
        "kind": r.kind.value,
        "outcome": r.outcome.value,
        "status": r.status.value if r.status else None,
        "throughput_per_s": r.throughput,
        "throughput_unit": r.throughput_unit,
        "peak_mem_gib": r.peak_mem_gib,
        "peak_phase": r.peak_phase,
        "phase_peak_frac": dict(res.memory.phase_peak_frac) if res and res.memory else {},
        "near_wall": r.near_wall,
        "measured_steps": len(res.measured_step_times_s) if res else 0,
        "straggler_steps": list(res.straggler_steps) if res else [],
        "params": dict(r.values),
        "rank": res.verdict.rank if res else None,
        "evidence": [e.text for e in res.verdict.evidence[:3]] if res else [],
        "advice": res.verdict.advice if res else None,
        "violations": list(r.violations),
        "predicted_from": r.predicted_from,
        "trial_dir": r.trial_dir,
        "why": r.why,
    }


def candidate_json(
    c: Candidate | None, space: SearchSpace | None = None, base: Candidate | None = None
) -> dict[str, Any] | None:
    """A candidate as JSON; with ``space``, the semantic changes it makes from ``base``."""
    if c is None:
        return None
    changes = semantic_changes(space, c.values, base.values if base else None) if space is not None else []
    return {
        "trial": c.first.number,
        "trials": [r.number for r in c.runs],
        "params": dict(c.values),
        "throughput_per_s": c.throughput,
        "throughput_unit": c.throughput_unit,
        "throughput_spread": c.throughput_spread,
        "peak_mem_gib": c.peak_mem_gib,
        "min_headroom_gib": c.min_headroom_gib,
        "confirmed": c.confirmed,
        "confirmation": confirmation_words(c),
        "semantic_changes": [str(x) for x in changes],
    }


def _speedup_json(view: StudyView) -> dict[str, Any] | None:
    """The winner's speed-up over the baseline (``records.speedup``), like for like or with its caveat."""
    gain = speedup(view.winner, view.baseline) if view.winner is not None else None
    if gain is None:
        return None
    return {
        "ratio": gain.ratio,
        "baseline_per_s": gain.baseline_per_s,
        "winner_measured_steps": list(gain.winner_steps),
        "baseline_measured_steps": list(gain.baseline_steps),
        "like_for_like": gain.matched,
        "caveat": gain.caveat(),
    }


def _counts(recs: tuple[TrialRecord, ...]) -> dict[str, Any]:
    launched = [r for r in recs if r.outcome is Outcome.LAUNCHED]
    return {
        "trials": len(recs),
        "launched": len(launched),
        "by_status": dict(Counter(r.status.value for r in launched if r.status)),
        "rejected_by_rules": sum(r.outcome is Outcome.REJECTED for r in recs),
        "predicted_oom": sum(r.outcome is Outcome.PREDICTED for r in recs),
        "duplicates": sum(r.outcome is Outcome.DUPLICATE for r in recs),
    }


def _early_stops_json(recs: tuple[TrialRecord, ...]) -> dict[str, Any] | None:
    """``EarlyStops`` as JSON (its saved share included); None when no trial was stopped early."""
    stops = early_stops(recs)
    return None if stops is None else {**asdict(stops), "saved_share": stops.saved_share}


def report_json(view: StudyView, exit_code: int | None = None) -> dict[str, Any]:
    """The study as JSON (``exit_code``: the run's own, where a run reports; else 0 with a winner, 2
    without). ``not_stable`` lists the configs faster than the winner that are left out as flaky."""
    timings = {n: asdict(t) for n, t in view.timings.items()}
    rows = [{**trial_row(r), "advice": advice_of(view, r), "timing": timings.get(r.number)} for r in view.records]
    return {
        "study": view.study,
        "storage": view.storage_url,
        "exit_code": (0 if view.winner else 2) if exit_code is None else exit_code,
        "best": candidate_json(view.winner, view.space, view.baseline),
        "baseline": candidate_json(view.baseline),
        "speedup": _speedup_json(view),
        "speed_only": candidate_json(view.speed_only, view.space, view.baseline),
        "with_training_changes": candidate_json(view.with_training, view.space, view.baseline),
        "counts": _counts(view.records),
        "trials": rows,
        "early_stops": _early_stops_json(view.records),
        "not_stable": [
            {"trial": c.first.number, "params": dict(c.values), "throughput_per_s": c.throughput, "why": why}
            for c, why in faster_passed_over(view.passed_over, view.winner)
        ],
        "command": list(view.command) or None,
        "space": view.space.name,
        "generated_at": view.generated_at,
        "hardware": view.hardware,
        "fingerprint": view.fingerprint.to_json() if view.fingerprint else None,
        "gpu_limit_gib": view.gpu_limit_gib,
        "dropped": dict(view.dropped),
        "winner_reasons": winner_reasons(view),
        "importance": view.importance,
        "failure_costs": [asdict(c) for c in failure_costs(view)],
        "checks": [asdict(c) for c in night_checks(view)],
        "night": view.night.to_json() if view.night else None,
        "history": history_json(view.history) if view.history else None,
        "nccl_sweep": [asdict(line) for line in view.nccl_sweep],
    }
