"""A study with the NCCL check, on a landscape where one NCCL setting hangs the collectives alone
and another breaks only the job: the first costs its check, the second its trial."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from rich.console import Console

from nccl_tune.failure import FailureClass
from nccl_tune.reporting.report import end_of_run
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.study.loop import run_study
from twin.analytic import AnalyticNode, Truth, analytic_cost
from twin.launcher import ModelLauncher

SPACE = """
name: check
parameters:
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, NVLS], default: unset, memory: none}
  - {name: NCCL_PROTO, kind: categorical, choices: [unset, LL], default: unset, memory: none}
stop: {warmup_steps: 1, measured_steps: 3}
throughput: {samples_per_step: 100}
"""
STARTUP_S = 400.0


def truth(v) -> Truth:
    if v["NCCL_ALGO"] == "NVLS":
        return Truth(8.0, 40.0, "hang", detail="NVLS without its buffers", nccl_failure="hang")
    if v["NCCL_PROTO"] == "LL":
        return Truth(9.0, 40.0, "crash", detail="LL next to the trainer's own kernels")
    return Truth(10.0, 40.0)


def study(tmp_path: Path, check: str) -> tuple[list, str]:
    (tmp_path / "check.yaml").write_text(SPACE)
    out = StringIO()
    settings = RunSettings(
        command=("true",),
        space=str(tmp_path / "check.yaml"),
        results=tmp_path / check,
        storage=f"sqlite:///{tmp_path}/{check}.db",
        study="check",
        trials=3,
        seed=0,
        confirm=0,
        nccl_check=check,
    )
    cost = analytic_cost(truth, AnalyticNode(startup_s=STARTUP_S, step_noise=0.001, run_noise=0.001))
    console = Console(file=out, width=200)
    result = run_study(settings, console=console, launcher=ModelLauncher(env={}, cost=cost, nccl_check_gpus=8))
    end_of_run(result, console, console, as_json=False)
    return sorted(result.records, key=lambda r: r.number), out.getvalue()


def test_a_setting_that_hangs_the_collectives_costs_its_check_and_one_that_breaks_the_job_costs_its_trial(tmp_path):
    records, shown = study(tmp_path, "auto")
    assert "NCCL check: each new set of NCCL values" in shown
    assert "NCCL sweep: NCCL_ALGO=NVLS: the check failed (hang)" in shown, "the sweep met the hang on the collectives"
    launched = {(r.values["NCCL_ALGO"], r.values["NCCL_PROTO"]): r for r in records if r.result}
    assert ("NVLS", "unset") not in launched, "the set whose check hung in the sweep is not launched"
    # nor proposed: TPE's fallback, the only proposer left once both moves were tried, draws a set the
    # planner would launch (tests/tuner/study/test_admission.py: a proposal of it is refused, counted apart)
    assert not [r for r in records if r.values == {"NCCL_ALGO": "NVLS", "NCCL_PROTO": "unset"}]
    assert "not launched: " not in shown  # nothing was refused: not said
    alone = [r for (algo, _), r in launched.items() if algo == "NVLS"]
    assert alone, "another set holding NVLS was tried"
    for r in alone:
        assert r.status is FailureClass.HANG and r.result.wall_s < STARTUP_S / 2 and r.result.nccl_check_failed
        assert "the trial's command was not started" in r.result.verdict.evidence[0].text
    job = launched["unset", "LL"]
    assert job.status is FailureClass.CRASH and job.result.wall_s > 0.8 * STARTUP_S, "its check passed: the job broke"
    assert job.result.nccl_check_s == 0, "its set passed in the sweep: not checked again"
    assert launched["unset", "unset"].result.nccl_check_s > 0
    assert launched["unset", "unset"].status is FailureClass.OK


def test_off_runs_every_trial_s_command(tmp_path):
    records, shown = study(tmp_path, "off")
    assert "NCCL check" not in shown
    hung = next(r for r in records if r.values["NCCL_ALGO"] == "NVLS")
    assert hung.status is FailureClass.HANG and hung.result.wall_s > STARTUP_S
    assert all(r.result.nccl_check_s == 0 for r in records if r.result)
