"""Forced trials in whole studies on the twin: the winner-to-be runs once with vLLM's ``min_tokens`` at
``max_generate_length`` (the SkyRL space's ``stability.force_worst_case``); a forced OOM makes the
config unstable and the next-best is named; a forced run's throughput is no run's for the mean; a
resumed study does not force a config again."""

from __future__ import annotations

import io
import re
from pathlib import Path

import optuna
import pytest
from rich.console import Console

from nccl_tune.oom_demand import OomDemand
from nccl_tune.reporting.report import end_of_run
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.tuner.records.stability import candidates
from nccl_tune.tuner.records.study_records import TrialKind
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.study.forcing import repair_halvings
from nccl_tune.tuner.study.loop import run_study
from nccl_tune.tuner.winner.export import tuned_document
from nccl_tune.tuner.winner.worst_proof import FAILS, fails_at_worst
from twin.launcher import ModelLauncher

pytestmark = pytest.mark.timeout(900)
REPO = Path(__file__).resolve().parents[3]
SCRIPT = ("bash", str(REPO / "examples" / "run_skyrl_sql_sim.sh"))


def _run(tmp_path: Path, **kw):
    settings = RunSettings(
        command=SCRIPT,
        space="skyrl-text2sql",
        results=tmp_path,
        storage=f"sqlite:///{tmp_path / 'study.db'}",
        study="forced",
        seed=0,
        nccl_check="off",
        **kw,
    )
    text = io.StringIO()
    console = Console(file=text, width=400)
    out = run_study(settings, console=console, launcher=ModelLauncher(env={"HOME": str(tmp_path)}))
    end_of_run(out, console, console, as_json=False)
    return out, text.getvalue()


def _argv(out, number: int) -> list[str]:
    """The argv trial ``number`` was launched with, as the study stored it."""
    study = optuna.load_study(study_name=out.study, storage=out.storage_url)
    return list(study.trials[number].user_attrs["argv"])


def test_a_winner_that_runs_out_of_memory_forced_is_not_stable_and_the_next_best_is_named(tmp_path: Path) -> None:
    out, text = _run(tmp_path, trials=6, confirm=0)
    forced = [r for r in out.records if r.kind is TrialKind.FORCED]
    assert forced, text
    first = forced[0]
    argv = _argv(out, first.number)
    assert argv[-1] == "generator.sampling_params.additional_kwargs={min_tokens:3000}", argv
    assert all("min_tokens" not in a for r in out.records if not r.forced and r.trial_dir for a in _argv(out, r.number))
    # The first forced run: the fastest config on its steps, at 19000 tokens a step, runs out of memory.
    assert first.status is not None and first.status.value == "oom", text
    failed = next(c for c in candidates(out.records) if c.first.number == first.rerun_of)
    assert not failed.stable and failed.forced_run is first
    assert out.winner is None or out.winner.first.number != first.rerun_of
    said = re.search(
        rf"trial {first.rerun_of} forced to its longest batch \(trial {first.number}\) ended oom: not stable; "
        r"(trial (\d+) is next|no other config is stable)",
        text,
    )
    assert said, text
    if said.group(2) is not None:  # the one named next is forced next, or ruled out by what the forced run showed
        named = int(said.group(2))
        later = [r.rerun_of for r in forced[1:]]
        assert (
            named in later
            or (out.winner is not None and out.winner.first.number == named)
            or named in {c.first.number for c in candidates(out.records) if not c.stable}
        )
    # The forced runs are said so in the live lines and the listing.
    assert f"trial {first.number} started (forced to its longest batch: trial {first.rerun_of}'s values)" in text
    assert re.search(rf"trial {first.number} forced oom", text), text


def test_a_forced_run_judges_memory_and_its_throughput_counts_for_nothing_and_resume_keeps_it(
    tmp_path: Path,
) -> None:
    # Pinned where the twin's longest batch fits (micro-batches of 1 and 2, short prompts): its forced run finishes.
    pins = (
        ("trainer.micro_train_batch_size_per_gpu", "1"),
        ("trainer.micro_forward_batch_size_per_gpu", "2"),
        ("trainer.max_prompt_length", "2048"),
        ("trainer.train_batch_size", "256"),
        ("trainer.policy_mini_batch_size", "256"),
    )
    out, text = _run(tmp_path, trials=2, confirm=1, pins=pins)
    forced = [r for r in out.records if r.kind is TrialKind.FORCED]
    assert len(forced) >= 1 and forced[0].ok, text
    w = out.winner
    assert w is not None and w.forced_run is not None, text
    run = w.forced_run
    assert run.throughput and run not in w.ok_runs
    normal = [r.throughput for r in w.runs if not r.forced and r.ok and r.throughput]
    assert w.throughput == pytest.approx(sum(normal) / len(normal))
    assert abs(run.throughput - w.throughput) / w.throughput > 0.2  # its longest batches: far slower
    assert w.worst_case is not None and w.worst_case.how == "forced"
    assert w.worst_case.peak_frac == pytest.approx(run.result.memory.max_peak_frac, abs=1e-6)
    assert w.stable
    doc = tuned_document(out.stored, w)["metrics"]
    assert doc["runs"] == len(w.runs) - 1 and doc["worst_case"]["stable"] == "proven at the worst batch"
    assert doc["worst_case"]["forced_trial"] == run.number
    assert f"trial {run.number} ok" in text and "(forced: not compared)" in text
    assert _argv(out, run.number)[-1] == "generator.sampling_params.additional_kwargs={min_tokens:3000}"

    # Resumed (two more search trials): no config already forced is forced again, and the one forced
    # run of this run's new best is not read as the command's own length.
    again, text2 = _run(tmp_path, trials=2, confirm=1, pins=pins)
    assert again.resumed
    before = {r.number for r in forced}
    now = [r for r in again.records if r.kind is TrialKind.FORCED]
    assert before <= {r.number for r in now}
    for c in candidates(again.records):
        assert sum(r.forced for r in c.runs) <= 1, [r.number for r in c.runs]
    assert all(r.rerun_of not in {f.rerun_of for f in forced} for r in now if r.number not in before), text2
    assert "ends by itself" not in text2, text2


def test_when_no_config_survives_its_worst_batch_the_fastest_is_exported_marked_with_what_would_survive(
    tmp_path: Path,
) -> None:
    # Pinned where the twin's longest batch cannot fit (large micro-batches, long prompts): every forced run fails.
    pins = (
        ("trainer.micro_train_batch_size_per_gpu", "4"),
        ("trainer.micro_forward_batch_size_per_gpu", "8"),
        ("trainer.max_prompt_length", "6000"),
        ("trainer.train_batch_size", "256"),
        ("trainer.policy_mini_batch_size", "256"),
    )
    out, text = _run(tmp_path, trials=2, confirm=0, pins=pins, output=tmp_path / "tuned.yaml")
    forced = [r for r in out.records if r.kind is TrialKind.FORCED]
    assert forced and all(r.status is not None and r.status.value == "oom" for r in forced), text
    w = out.winner
    assert w is not None and fails_at_worst(w) and not w.stable, text
    assert w.forced_run is forced[0] and all(r.ok for r in w.runs if not r.forced)
    assert out.exit_code == 0 and out.fails_at_worst
    doc = tuned_document(out.stored, w)
    worst = doc["metrics"]["worst_case"]
    assert worst["stable"] == FAILS
    phase = forced[0].result.verdict.phase
    assert phase and f"its forced trial {forced[0].number} ran out of memory in {phase}" in worst["fails"]
    assert re.search(r"asking \d+\.\d GiB more", worst["fails"]), worst["fails"]
    # What would survive: the knob of the phase that ran out at its lowest, and the length limits.
    knobs = [p for p in out.space.parameters if phase in p.phases and p.memory.signed]
    assert knobs, phase
    for p in knobs:
        assert f"{p.name}={format_value(min(p.choices, key=p.memory_rank))}" in worst["to_survive"]
    assert "generator.sampling_params.max_generate_length=3000" in worst["to_survive"]
    assert "trainer.max_prompt_length=6000" in worst["to_survive"]
    first = (tmp_path / "tuned.yaml").read_text().splitlines()[0]
    assert "FAILS AT THE WORST BATCH" in first, first
    assert f"{FAILS}: its forced trial {forced[0].number}" in text, text
    assert "no config survives its worst batch" in text and "no stable config found" not in text, text
    assert any(FAILS in n for n in out.notes), out.notes


def test_a_forced_oom_asking_more_than_the_gpu_is_over_steps_straight_to_the_smallest_micro_batch() -> None:
    # The twin's forced OOMs in policy_train: micro-batch 4 asked 56.5 GiB more with 77.3 GiB in use, micro-batch 2
    # 26.8 GiB more: halving once leaves it over the GPU, so the repair goes further (to the lowest value at once).
    assert repair_halvings(OomDemand(needed_gib=77.3 + 56.5, capacity_gib=79.15, tried_gib=56.5)) >= 2
    assert repair_halvings(OomDemand(needed_gib=77.3 + 26.8, capacity_gib=79.15, tried_gib=26.8)) >= 2
    # One a little over: one halving of the allocation is enough.
    assert repair_halvings(OomDemand(needed_gib=85.0, capacity_gib=79.15, tried_gib=20.0)) == 1
    # Without the allocation's size, the demand's share of the GPU decides, as before.
    assert repair_halvings(OomDemand(needed_gib=170.0, capacity_gib=79.15)) == 2


def test_after_the_search_the_config_a_failed_forced_run_asked_for_runs_and_survives(tmp_path: Path) -> None:
    # One search trial: the leader, at a forward micro-batch of 8, is forced once the search ends
    # and runs out of memory in the log-probs phase. No other measured config holds less there, so
    # the run tries the config the forced run asked for (a smaller forward micro-batch) on top of
    # --trials, forces it in turn, and ends with a config that survives its longest batch.
    pins = (
        ("trainer.micro_train_batch_size_per_gpu", "1"),
        ("trainer.max_prompt_length", "2048"),
        ("trainer.train_batch_size", "256"),
        ("trainer.policy_mini_batch_size", "256"),
    )
    out, text = _run(tmp_path, trials=1, confirm=0, pins=pins)
    forced = [r for r in out.records if r.kind is TrialKind.FORCED]
    assert len(forced) == 2 and forced[0].status is not None and forced[0].status.value == "oom", text
    failed = forced[0].values["trainer.micro_forward_batch_size_per_gpu"]
    repair = next(r for r in out.records if r.kind is TrialKind.SEARCH and r.number > forced[0].number)
    assert repair.values["trainer.micro_forward_batch_size_per_gpu"] < failed, text
    assert repair.why and repair.why.startswith(f"forced, trial {forced[0].number} ran out of memory"), repair.why
    assert forced[1].rerun_of == repair.number and forced[1].ok, text
    w = out.winner
    assert w is not None and w.first.number == repair.number and w.stable and not fails_at_worst(w), text
    assert out.exit_code == 0, text
