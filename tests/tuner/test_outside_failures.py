"""A run that failed for a cause none of its values can bring about (a scheduler's SIGTERM) runs its
values once more, and blames none of them; one that fails so again is left as it is."""

from __future__ import annotations

from dataclasses import replace
from io import StringIO
from pathlib import Path

from rich.console import Console

from nccl_tune.failure import Cause, FailureClass, Verdict
from nccl_tune.tuner.records.study_records import TrialKind
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.study.loop import run_study
from twin.analytic import AnalyticNode, Truth, analytic_cost
from twin.launcher import ModelLauncher

SPACE = """
name: outside
parameters:
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree], default: unset, memory: none}
stop: {warmup_steps: 1, measured_steps: 3}
throughput: {samples_per_step: 100}
"""


class Preempted(ModelLauncher):
    """The modelled node, where the runs holding ``NCCL_ALGO=Tree`` (the fastest) are killed from
    outside, the first ``kills`` of them."""

    def __init__(self, kills: int) -> None:
        truth = lambda v: Truth(8.0 if v["NCCL_ALGO"] == "Tree" else 10.0, 40.0)  # noqa: E731
        super().__init__(
            env={}, cost=analytic_cost(truth, AnalyticNode(startup_s=100, step_noise=0.001, run_noise=0.001))
        )
        self.kills = kills

    def run(self, spec, observer=None):
        result = super().run(spec, observer)
        if spec.params.get("NCCL_ALGO") == "Tree" and self.kills > 0:
            self.kills -= 1
            cause = Cause("torchrun_signalled", "outside_signal", {"signal": "SIGTERM"})
            result = replace(result, status=FailureClass.CRASH, verdict=Verdict(FailureClass.CRASH, cause=cause))
        return result


def study(tmp_path: Path, kills: int):
    (tmp_path / "outside.yaml").write_text(SPACE)
    out = StringIO()
    settings = RunSettings(
        command=("true",),
        space=str(tmp_path / "outside.yaml"),
        results=tmp_path / "results",
        storage=f"sqlite:///{tmp_path}/outside.db",
        study="outside",
        trials=4,
        seed=0,
        confirm=0,
    )
    result = run_study(settings, console=Console(file=out, width=200), launcher=Preempted(kills))
    return sorted((r for r in result.records if r.result), key=lambda r: r.number), result, out.getvalue()


def test_a_run_killed_from_outside_runs_its_values_once_more_and_they_can_win(tmp_path):
    runs, result, shown = study(tmp_path, kills=1)
    tree = [r for r in runs if r.values["NCCL_ALGO"] == "Tree"]
    assert [r.status for r in tree] == [FailureClass.CRASH, FailureClass.OK], shown
    assert tree[1].kind is TrialKind.RETRY and tree[1].number == tree[0].number + 1
    assert (
        f"trial {tree[0].number} failed for a cause none of its values can bring about (crash: outside_signal)" in shown
    )
    assert result.winner is not None and result.winner.values["NCCL_ALGO"] == "Tree", "no blame held it back"


def test_values_killed_from_outside_twice_are_not_run_a_third_time(tmp_path):
    runs, _, shown = study(tmp_path, kills=5)
    tree = [r for r in runs if r.values["NCCL_ALGO"] == "Tree"]
    assert [r.status for r in tree] == [FailureClass.CRASH, FailureClass.CRASH], shown
    assert shown.count("its values run once more") == 1
