"""A whole study on the twin's cost model: each trial's steps carry their tokens and peaks, the
winner is judged at the longest batch its config allows, and the tuned YAML and the summary say so."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from nccl_tune.reporting.report import end_of_run
from nccl_tune.reporting.view import load_view, winner_reasons
from nccl_tune.tuner.records.stability import candidates
from nccl_tune.tuner.records.study_records import Outcome
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.study.loop import run_study
from nccl_tune.tuner.winner.export import tuned_document
from twin.launcher import ModelLauncher

pytestmark = pytest.mark.timeout(600)
REPO = Path(__file__).resolve().parents[2]


def test_the_winner_is_judged_at_its_worst_batch_and_says_so(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    settings = RunSettings(
        command=("bash", str(REPO / "examples" / "run_skyrl_sql_sim.sh")),
        space="skyrl-text2sql",
        results=tmp_path,
        storage=storage,
        study="wc",
        trials=12,
        seed=0,
        confirm=0,
        force_worst_case=False,  # the predictions alone: forcing has its own tests
        nccl_check="off",
    )
    text = io.StringIO()
    console = Console(file=text, width=300)
    out = run_study(settings, console=console, launcher=ModelLauncher(env={"HOME": str(tmp_path)}))
    end_of_run(out, console, console, as_json=False)
    ok = [r for r in out.records if r.outcome is Outcome.LAUNCHED and r.ok]
    assert ok and all(r.worst_case is not None and r.worst_case.how == "predicted" for r in ok)
    assert all(r.worst_case.tokens_worst == 19000 for r in ok)  # the space's longest response
    cands = candidates(out.records)
    assert any(c.worst_unfit for c in cands)  # micro_train 4 without offload: judged past the GPU
    for c in cands:
        if c.worst_unfit:
            assert not c.stable
    assert out.winner is not None and not out.winner.worst_unfit
    doc = tuned_document(out.stored, out.winner)["metrics"]["worst_case"]
    assert doc["how"] == "predicted" and doc["judged"] == out.winner.worst_case.judged
    if doc["judged"]:
        assert doc["worst_peak_frac"] <= 0.95
    assert doc["worst_peak_range_frac"][0] <= doc["worst_peak_frac"] <= doc["worst_peak_range_frac"][1]
    assert doc["peak_seen_frac"] <= doc["worst_peak_frac"]
    faster = doc["faster_not_fitting"]
    assert all(f["throughput_per_s"] > out.winner.throughput for f in faster)
    assert {f["trial"] for f in faster} == {
        c.first.number for c in cands if c.worst_unfit and c.throughput > out.winner.throughput
    }
    lines = winner_reasons(load_view(storage, "wc"))
    assert any(
        line.startswith("memory: peak seen") and "worst case predicted at 19000 tokens" in line for line in lines
    )
