"""The contract every Launcher keeps: a TrialResult for a good trial, a failing trial and a
config error, never an exception once started, and results that survive JSON. It runs against
every sibling of ``ProcessTreeLauncher`` (local, Ray, the twin's model), through the abstract
class's ``run``, and against the local one behind the NCCL check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from nccl_tune.failure import FailureClass
from nccl_tune.launchers.base import Launcher
from nccl_tune.launchers.local import LocalLauncher
from nccl_tune.launchers.nccl_check import CheckingLauncher
from nccl_tune.launchers.process_tree import ProcessTreeLauncher
from nccl_tune.launchers.ray_launcher import RayLauncher
from nccl_tune.trial import Clocks, StopRule, TrialResult, TrialSpec
from twin.launcher import ModelLauncher

from .helpers import RecordingObserver, trainer_argv

REPO = Path(__file__).resolve().parents[2]
TWIN = REPO / "examples" / "run_skyrl_sql_sim.sh"


@dataclass(frozen=True)
class Case:
    """How to build the three kinds of trial for one launcher."""

    make: Callable[[], Launcher]
    good: tuple[tuple[str, ...], dict[str, str]]
    failing: tuple[tuple[str, ...], dict[str, str]]
    config_error: tuple[tuple[str, ...], dict[str, str]]
    clocks: Clocks
    sibling: type[ProcessTreeLauncher]
    """The implementation of ``ProcessTreeLauncher`` that runs the trials."""


def local_case() -> Case:
    return Case(
        make=LocalLauncher,
        good=(tuple(trainer_argv("--steps", "3", "--step-s", "0.1", "trainer.micro=2")), {}),
        failing=(tuple(trainer_argv("--steps", "5", "--step-s", "0.1", "--crash-at-step", "1")), {}),
        config_error=(tuple(trainer_argv("--steps", "3", "trainer.micro=2", "trainer_typo.micro=2")), {}),
        clocks=Clocks(startup_timeout_s=30, stall_timeout_s=10, grace_s=1.0),
        sibling=LocalLauncher,
    )


def checked_local_case() -> Case:
    """The local launcher behind the NCCL check (real ranks on gloo): the check passes, then the trial runs."""
    local = local_case()
    return Case(
        make=lambda: CheckingLauncher(LocalLauncher(), gpus=2, backend="gloo"),
        good=local.good,
        failing=local.failing,
        config_error=local.config_error,
        clocks=local.clocks,
        sibling=LocalLauncher,
    )


def model_case() -> Case:
    twin = ("bash", str(TWIN))
    return Case(
        make=ModelLauncher,
        good=(twin, {}),
        failing=(twin, {"SIM_FAULT": "crash:1:1"}),
        config_error=(twin + ("trainer.no_such_key=1",), {}),
        clocks=Clocks(),
        sibling=ModelLauncher,
    )


def ray_case() -> Case:
    local = local_case()
    return Case(
        make=RayLauncher,
        good=local.good,
        failing=local.failing,
        config_error=local.config_error,
        clocks=Clocks(startup_timeout_s=60, stall_timeout_s=20, grace_s=1.0),
        sibling=RayLauncher,
    )


@pytest.fixture(
    params=[local_case, checked_local_case, model_case, ray_case], ids=["local", "checked-local", "model", "ray"]
)
def case(request: pytest.FixtureRequest) -> Case:
    if request.param is ray_case:
        request.getfixturevalue("ray_cluster")
    return request.param()


def _spec(
    study: str, tmp_path: Path, number: int, argv_env: tuple[tuple[str, ...], dict[str, str]], clocks: Clocks
) -> TrialSpec:
    argv, env = argv_env
    return TrialSpec(
        study=study,
        number=number,
        params={},
        argv=argv,
        env=env,
        trial_dir=tmp_path / f"trial-{number}",
        clocks=clocks,
        stop=StopRule(1, 2),
        samples_per_step=8.0,
    )


def _run(case: Case, spec: TrialSpec) -> tuple[TrialResult, RecordingObserver]:
    launcher = case.make()
    runs = launcher.inner if isinstance(launcher, CheckingLauncher) else launcher
    assert isinstance(runs, ProcessTreeLauncher) and type(runs) is case.sibling
    observer = RecordingObserver()
    try:
        launcher.prepare(spec)
        launcher.before_study()
        launcher.gate()
        result = launcher.run(spec, observer)
    finally:
        launcher.close()
    assert isinstance(result, TrialResult) and result.number == spec.number
    assert TrialResult.from_json(result.to_json()).to_json() == result.to_json()
    assert observer.kinds("end") == [result.status]
    assert len(observer.kinds("stopping")) == 1, "the observer hears once why the trial is stopped"
    return result, observer


def test_every_sibling_of_the_process_tree_launcher_has_a_case() -> None:
    """A new implementation of ``ProcessTreeLauncher`` is held to the contract too."""
    siblings = {c for c in ProcessTreeLauncher.__subclasses__() if c.__module__.startswith(("nccl_tune.", "twin."))}
    assert siblings == {case().sibling for case in (local_case, model_case, ray_case)}
    assert siblings == {LocalLauncher, RayLauncher, ModelLauncher}


def test_a_good_trial(case: Case, study: str, tmp_path: Path) -> None:
    result, _ = _run(case, _spec(study, tmp_path, 0, case.good, case.clocks))
    assert result.status is FailureClass.OK and result.verdict.ok
    assert len(result.step_times_s) >= 3 and result.throughput_per_s
    m = result.memory
    # a GPU's peak, or (no GPU sampled, no memory line) the host's RSS kept as such, never as a GPU's
    assert m is not None and (m.peak_gib is not None or (m.source == "rss" and m.peak_rss_gib is not None))


def test_a_failing_trial(case: Case, study: str, tmp_path: Path) -> None:
    result, _ = _run(case, _spec(study, tmp_path, 1, case.failing, case.clocks))
    assert result.status.is_failure and result.status is not FailureClass.CONFIG_ERROR
    assert result.verdict.evidence


def test_a_config_error(case: Case, study: str, tmp_path: Path) -> None:
    result, _ = _run(case, _spec(study, tmp_path, 2, case.config_error, case.clocks))
    assert result.status is FailureClass.CONFIG_ERROR
    assert any(
        "no_such_key" in e.text or "typo" in e.text or "Could not override" in e.text for e in result.verdict.evidence
    )
