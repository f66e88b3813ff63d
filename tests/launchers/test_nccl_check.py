"""The NCCL check before a trial: real ranks under torch.distributed.run on gloo, supervised by the
local launcher. A check that hangs or is refused ends the trial in seconds without starting its
command; a check that passes lets the trial run and adds its cost; each set of NCCL values is
checked once."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import FailureClass
from nccl_tune.launchers.base import CheckSupport
from nccl_tune.launchers.local import LocalLauncher
from nccl_tune.launchers.nccl_check import (
    CHECK_DIR,
    CheckingLauncher,
    check_gpus,
    nccl_unusable,
    visible_gpus,
    with_nccl_check,
)
from nccl_tune.launchers.nccl_check_worker import ROUND_LINE
from nccl_tune.trial import TrialSpec
from twin.analytic import AnalyticNode, Truth, analytic_cost
from twin.launcher import ModelLauncher

from .helpers import SCRIPTS, RecordingObserver

FAULTS = (str(SCRIPTS / "nccl_check_faults.py"),)


def checking(worker: tuple[str, ...] | None = None) -> CheckingLauncher:
    extra = {"worker": worker} if worker else {}
    # a round takes well under a second here: a hang is caught after 6 s of silence, not the usual 20
    return CheckingLauncher(LocalLauncher(), gpus=2, backend="gloo", startup_timeout_s=20, stall_floor_s=6, **extra)


def started_marker(tmp_path: Path, number: int) -> Path:
    return tmp_path / f"started-{number}"


def trial(make_spec: Callable[..., TrialSpec], tmp_path: Path, number: int, env: dict[str, str | None]) -> TrialSpec:
    """A fake trainer that leaves a file behind when it starts, with ``env``."""
    return make_spec(
        "--steps", "3", "--step-s", "0.1", "--pidfile", str(started_marker(tmp_path, number)), number=number, env=env
    )


def run_all(
    launcher: CheckingLauncher, make_spec: Callable[..., TrialSpec], tmp_path: Path, *envs: dict[str, str | None]
) -> tuple[list, list[RecordingObserver]]:
    """Trials 0, 1, ... with ``envs`` through ``launcher`` (closed after): their results and observers."""
    observers = [RecordingObserver() for _ in envs]
    try:
        return [
            launcher.run(trial(make_spec, tmp_path, n, env), o) for n, (env, o) in enumerate(zip(envs, observers))
        ], observers
    finally:
        launcher.close()


def test_a_passing_check_runs_the_trial_and_each_set_of_nccl_values_is_checked_once(
    make_spec: Callable[..., TrialSpec], tmp_path: Path
) -> None:
    (first, again, other), _ = run_all(
        checking(), make_spec, tmp_path, {"NCCL_ALGO": "Ring"}, {"NCCL_ALGO": "Ring"}, {"NCCL_ALGO": "Tree"}
    )
    assert [r.status for r in (first, again, other)] == [FailureClass.OK] * 3
    check_dir = first.trial_dir / CHECK_DIR
    rounds = [
        line
        for line in (check_dir / "output.log").read_text().splitlines()
        if line.startswith("nccl-tune check: round")
    ]
    assert len(rounds) >= 2, "the real worker's rounds ran on both ranks"
    check = json.loads((check_dir / "result.json").read_text())
    assert check["status"] == "ok"
    assert first.nccl_check_s == check["wall_s"] > 0, "the trial carries its check's cost, apart from its own"
    assert again.nccl_check_s == 0.0
    assert not (again.trial_dir / CHECK_DIR).exists(), "the same NCCL values are not checked twice"
    assert (other.trial_dir / CHECK_DIR / "result.json").exists(), "new NCCL values are checked"
    assert all(started_marker(tmp_path, n).exists() for n in (0, 1, 2))


def test_a_set_measured_alone_times_its_rounds_without_starting_the_command_and_is_not_checked_again(
    make_spec: Callable[..., TrialSpec], tmp_path: Path
) -> None:
    launcher = checking()
    try:
        sweep = trial(make_spec, tmp_path, 1_000_001, {"NCCL_ALGO": "Ring"})
        measured = launcher.measure(sweep)
        assert measured.status is FailureClass.OK and measured.nccl_check_failed is False
        assert len(measured.measured_step_times_s) == 5 and all(s > 0 for s in measured.measured_step_times_s), (
            "the real worker's timed rounds, the first (communicator set-up) left out"
        )
        assert not started_marker(tmp_path, 1_000_001).exists(), "measuring a check never starts the trial's command"
        assert (sweep.trial_dir / CHECK_DIR / "output.log").exists()
        later = launcher.run(trial(make_spec, tmp_path, 0, {"NCCL_ALGO": "Ring"}))
    finally:
        launcher.close()
    assert later.status is FailureClass.OK and later.nccl_check_s == 0.0, "the set passed when it was measured"
    assert started_marker(tmp_path, 0).exists()


def test_a_check_that_hangs_ends_the_trial_as_a_hang_without_starting_its_command(
    make_spec: Callable[..., TrialSpec], tmp_path: Path
) -> None:
    launcher = checking(FAULTS)
    (first, result), (_, observer) = run_all(
        launcher, make_spec, tmp_path, {"NCCL_ALGO": "Ring"}, {"NCCL_ALGO": "NVLS"}
    )
    assert first.status is FailureClass.OK and first.nccl_check_s > 0
    assert result.status is FailureClass.HANG
    assert "NCCL check" in result.verdict.evidence[0].text and "NCCL_ALGO=NVLS" in result.verdict.evidence[0].text
    assert not started_marker(tmp_path, 1).exists(), "the trainer never started"
    # caught by the check's clock inside a round (the phase a round opens), not by the start-up timeout
    assert any(
        e.text.startswith("no progress for ")
        and e.text.endswith(" s in phase 'step' after 1 of 6 steps (stall timeout 6 s)")
        for e in result.verdict.evidence
    ), result.verdict
    assert result.wall_s < 30
    assert observer.kinds("end") == [FailureClass.HANG]
    assert json.loads((result.trial_dir / "result.json").read_text())["status"] == "hang"
    assert result.step_times_s == () and result.memory is None and result.nccl_check_failed
    assert launcher.notes() == []


def test_a_setting_nccl_refuses_fails_the_check_and_is_checked_again_next_time(
    make_spec: Callable[..., TrialSpec], tmp_path: Path
) -> None:
    (_, first, second), _ = run_all(
        checking(FAULTS), make_spec, tmp_path, {}, {"NCCL_ALGO": "bogus"}, {"NCCL_ALGO": "bogus"}
    )
    for r in (first, second):
        assert r.status.is_failure and r.status is not FailureClass.OK
        assert any("invalid usage" in e.text for e in r.verdict.evidence)
        assert (r.trial_dir / CHECK_DIR / "output.log").exists()
    assert not started_marker(tmp_path, 1).exists() and not started_marker(tmp_path, 2).exists()


def test_a_check_that_fails_before_any_passed_does_not_end_its_trial_and_one_that_fails_a_running_trial_stops(
    make_spec: Callable[..., TrialSpec], tmp_path: Path
) -> None:
    launcher = checking(FAULTS)
    (first, second), _ = run_all(launcher, make_spec, tmp_path, {"NCCL_ALGO": "NVLS"}, {"NCCL_ALGO": "bogus"})
    notes = launcher.notes()
    assert first.status is FailureClass.OK and started_marker(tmp_path, 0).exists(), (
        "the trial ran although its check hung"
    )
    assert first.nccl_check_s > 0
    assert json.loads((first.trial_dir / CHECK_DIR / "result.json").read_text())["status"] == "hang"
    assert len(notes) == 1 and notes[0].startswith("NCCL check off: trial 0's check failed (hang")
    assert second.status is FailureClass.OK and not (second.trial_dir / CHECK_DIR).exists(), "no check after that"


def test_the_worker_prints_the_line_its_progress_rule_reads() -> None:
    import re

    from nccl_tune.launchers.nccl_check_worker import ROUND_PATTERN, ROUND_START_LINE, ROUND_START_PATTERN

    m = re.fullmatch(ROUND_PATTERN, ROUND_LINE.format(round=3, rounds=6, seconds=0.25))
    assert m and m["step"] == "3" and float(m["seconds"]) == 0.25
    start = re.fullmatch(ROUND_START_PATTERN, ROUND_START_LINE.format(round=3, rounds=6))
    assert start and start["phase"] == "step", "a round opens the phase a step line closes"


def test_on_nccl_a_round_repeats_its_collectives_so_the_sweep_times_more_than_launch_jitter(
    make_spec: Callable[..., TrialSpec], tmp_path: Path
) -> None:
    from nccl_tune.launchers.nccl_check import check_spec
    from nccl_tune.launchers.nccl_check_worker import REPEATS

    spec = trial(make_spec, tmp_path, 0, {"NCCL_ALGO": "Ring"})
    on_gpus, on_cpus = (check_spec(spec, 8, backend, {}).argv for backend in ("nccl", "gloo"))
    assert REPEATS > 1 and on_gpus[on_gpus.index("--repeats") + 1] == str(REPEATS)
    assert on_cpus[on_cpus.index("--repeats") + 1] == "1", "gloo only exercises the machinery"


class _NoCheck(ModelLauncher):
    def nccl_check_support(self) -> CheckSupport:
        return CheckSupport(None, "no GPU here")


def test_the_check_is_on_where_the_launcher_can_run_it_and_the_space_sets_nccl() -> None:
    cost = analytic_cost(lambda v: Truth(1.0, 10.0), AnalyticNode())
    model = ModelLauncher(env={}, cost=cost, nccl_check_gpus=8)
    wrapped, line = with_nccl_check(model, "auto", sets_nccl=True)
    assert isinstance(wrapped, CheckingLauncher) and wrapped.gpus == 8 and "8 GPUs" in (line or "")
    assert with_nccl_check(model, "auto", sets_nccl=False) == (model, None)
    assert with_nccl_check(model, "off", sets_nccl=True) == (model, None)
    twin = ModelLauncher(env={})
    assert with_nccl_check(twin, "auto", sets_nccl=True) == (twin, "NCCL check off: the twin does not model it")
    with pytest.raises(NcclTuneError, match=r"--nccl-check on: the NCCL check cannot run here \(no GPU here\)"):
        with_nccl_check(_NoCheck(env={}, cost=cost), "on", sets_nccl=True)


def test_the_check_has_a_rank_per_gpu_its_trial_sees(make_spec: Callable[..., TrialSpec], tmp_path: Path) -> None:
    assert visible_gpus(8, None) == 8 and visible_gpus(8, "") == 8, "unset, or Ray's empty value for a GPU-less task"
    assert visible_gpus(8, "0,1, 3") == 3 and visible_gpus(2, "0,1,2,3") == 2
    assert check_gpus(trial(make_spec, tmp_path, 0, {"NCCL_ALGO": "Ring"}), 8) == 8
    assert check_gpus(trial(make_spec, tmp_path, 1, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}), 8) == 4, (
        "the trial narrows them"
    )
    assert check_gpus(trial(make_spec, tmp_path, 2, {"CUDA_VISIBLE_DEVICES": None}), 8) == 8


def test_a_python_whose_torch_cannot_run_nccl_is_named(tmp_path: Path) -> None:
    import sys

    why = nccl_unusable(sys.executable)
    import torch

    if not torch.cuda.is_available():
        assert "sees no CUDA device" in why
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named torch' >&2\nexit 1\n")
    broken.chmod(0o755)
    assert nccl_unusable(str(broken)) == f"{broken} cannot import torch (ModuleNotFoundError: No module named torch)"


def test_the_local_launcher_says_why_it_cannot_check_or_on_how_many_gpus_it_can() -> None:
    support = LocalLauncher().nccl_check_support()
    assert (support.gpus is None) == bool(support.why_not)
    assert support.gpus is None or support.gpus >= 1


def test_a_cluster_checks_on_the_fewest_gpus_any_node_has_and_not_at_all_when_one_node_cannot() -> None:
    from nccl_tune.launchers.ray_launcher import Node, cluster_check_support

    a, b = Node("a" * 16, "10.0.0.1", 0.0), Node("b" * 16, "10.0.0.2", 0.0)
    py = "/opt/venv/bin/python"
    both = cluster_check_support([(a, CheckSupport(8, python=py)), (b, CheckSupport(4, python=py))])
    assert both == CheckSupport(4, python=py)
    one_off = cluster_check_support([(a, CheckSupport(8, python=py)), (b, CheckSupport(None, "NVML lists no GPU"))])
    assert one_off.gpus is None and one_off.why_not == "on Ray node 10.0.0.2 (id bbbbbbbbbbbb): NVML lists no GPU"
    mixed = cluster_check_support([(a, CheckSupport(8, python=py)), (b, CheckSupport(8, python="/usr/bin/python3"))])
    assert mixed.gpus is None and "different Pythons (/opt/venv/bin/python, /usr/bin/python3)" in mixed.why_not
    assert cluster_check_support([]).gpus is None


class _RemotePython(ModelLauncher):
    def nccl_check_support(self) -> CheckSupport:
        return CheckSupport(4, python="/opt/node/bin/python")


def test_the_check_runs_under_the_python_of_where_the_trials_run(
    make_spec: Callable[..., TrialSpec], tmp_path: Path
) -> None:
    from nccl_tune.launchers.nccl_check import check_spec

    cost = analytic_cost(lambda v: Truth(1.0, 10.0), AnalyticNode())
    wrapped, _ = with_nccl_check(_RemotePython(env={}, cost=cost), "auto", sets_nccl=True)
    assert isinstance(wrapped, CheckingLauncher) and wrapped.python == "/opt/node/bin/python" and wrapped.gpus == 4
    spec = trial(make_spec, tmp_path, 0, {"NCCL_ALGO": "Ring"})
    argv = check_spec(spec, 4, "nccl", {}, python=wrapped.python).argv
    assert argv[:3] == ("/opt/node/bin/python", "-m", "torch.distributed.run") and "--nproc-per-node=4" in argv
