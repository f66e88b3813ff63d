"""The study loop with --launcher ray --parallel 2 on a loopback cluster: two trials run at once
(each waits until the other has started) and each is told; a driver killed mid-study resumes like a
local one and sweeps the killed trials' orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from rich.console import Console

from nccl_tune.launchers.teardown import find_marked, kill_marked
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.storage import open_storage
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.study.loop import run_study
from tests.tuner.conftest import NCCL_TUNE, TINY_SPACE, run_cli

pytest.importorskip("ray")


RENDEZVOUS = (
    'mktemp -p "$0" >/dev/null; for _ in $(seq 200); do '
    '[ "$(ls "$0" | wc -l)" -ge 2 ] && echo "a peer trial is running" && exec "$@"; sleep 0.1; done; '
    'echo "no peer trial started within 20 s"; exit 1'
)
"""Each trial leaves a file in a shared folder, then trains only once two trials have left one: with
two slots the first two trials meet; run one after the other, the first waits 20 s (under the
start-up timeout) and fails."""


def test_two_slots_run_trials_at_once(ray_cluster, tiny_command, workdir) -> None:
    met = workdir / "met"
    met.mkdir()
    settings = RunSettings(
        command=("bash", "-c", RENDEZVOUS, str(met), *tiny_command),
        space=str(TINY_SPACE),
        study="par",
        results=workdir / "r",
        trials=4,
        seed=3,
        sampler="random",
        launcher="ray",
        parallel=2,
        confirm=0,
    )
    outcome = run_study(settings, Console(stderr=True, quiet=True))
    assert outcome.launched == 4 and not outcome.interrupted
    logs = [log.read_text() for log in sorted((workdir / "r").rglob("output.log"))]
    assert len(logs) == 4 and len(list(met.iterdir())) == 4
    assert all("a peer trial is running" in log for log in logs), logs


def orphan_then_train(step_file: Path) -> str:
    """Leaves a detached process of the trial (it carries the trial's marker), then trains with steps
    of the length ``step_file`` gives (the node's environment, not the driver's, reaches the
    command): long in the run that is killed, so that the kill lands while the trial whose orphan
    the test saw is still running (a trial that ends on its own sweeps its orphan), short in the
    run that resumes."""
    return f'setsid sleep 300 & TINY_STEP_S=$(cat {step_file}) exec "$0" "$@"'


def _running_on_a_node(storage: str, study: str) -> list[int]:
    """Trials still running whose command has trained a step on its node (once one has a result)."""
    try:
        trials = _trials(storage, study)
    except Exception:  # the study is not created yet
        return []
    running = [t for t in trials if t.state is TrialState.RUNNING]
    if not any(R.A_STATUS in t.user_attrs for t in trials if t.state is not TrialState.RUNNING):
        return []
    logs = [Path(t.user_attrs.get(R.A_TRIAL_DIR, "/nonexistent")) / "output.log" for t in running]
    return [t.number for t, log in zip(running, logs) if log.exists() and "step 1 memory" in log.read_text()]


def test_a_killed_ray_driver_resumes_and_sweeps_the_orphans_on_every_node(ray_cluster, tiny_command, workdir) -> None:
    study = f"kr-{uuid.uuid4().hex[:8]}"
    step_file = workdir / "step_s"
    step_file.write_text("5")  # steps of 2-5 s
    args = [
        "run",
        "--launcher",
        "ray",
        "--ray-address",
        ray_cluster.address,
        "--parallel",
        "2",
        "--space",
        str(TINY_SPACE),
        "--study",
        study,
        "--trials",
        "3",
        "--seed",
        "5",
        "--sampler",
        "random",
        "--confirm",
        "0",
        "--",
        "bash",
        "-c",
        orphan_then_train(step_file),
        *tiny_command,
    ]
    env = {**os.environ, "COLUMNS": "200"}
    storage = f"sqlite:///{workdir}/results/nccl-tune.db"
    try:
        with open(workdir / "first.err", "w") as err:
            driver = subprocess.Popen(
                [str(NCCL_TUNE), *args], cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=err
            )
            deadline = time.monotonic() + 120
            while driver.poll() is None and time.monotonic() < deadline:
                if _running_on_a_node(storage, study) and find_marked(_of_study(study)):
                    break
                time.sleep(0.1)
            assert driver.poll() is None, (workdir / "first.err").read_text()[-3000:]
            driver.send_signal(signal.SIGKILL)
            driver.wait(10)
        step_file.write_text("1")
        kept = {
            t.number: (t.state, t.params, t.user_attrs.get(R.A_STATUS))
            for t in _trials(storage, study)
            if t.state is not TrialState.RUNNING
        }
        killed = [t.number for t in _trials(storage, study) if t.state is TrialState.RUNNING]
        assert killed and any(status for *_, status in kept.values()), (workdir / "first.err").read_text()[-3000:]
        assert find_marked(_of_study(study)), "the killed trials left no orphan to sweep"

        second = run_cli(args, cwd=workdir, timeout=180)
        said = second.stdout + second.stderr
        assert second.returncode == 0, said[-3000:]
        assert "killed an orphan of an interrupted trial" in said, said[-3000:]
        trials = {t.number: t for t in _trials(storage, study)}
        for number in killed:  # settled: recovered when it had written its result, else run again
            settled = (
                f"trial {number}: interrupted before it finished; it will be run again",
                f"trial {number}: recovered its finished result",
            )
            assert any(line in said for line in settled), said[-3000:]
            assert trials[number].state is not TrialState.RUNNING
        assert {n: (trials[n].state, trials[n].params, trials[n].user_attrs.get(R.A_STATUS)) for n in kept} == kept
        assert not [t for t in trials.values() if t.state is TrialState.RUNNING]
        assert not find_marked(_of_study(study))
    finally:
        kill_marked(_of_study(study), 1.0)


def _of_study(study: str):
    """Markers of ``study`` as the tuner sets them (``NAME@STORAGE/NUMBER``)."""
    return lambda marker: marker.split("@")[0] == study and "/" in marker


def _trials(storage: str, study: str) -> list:
    """The study's trials, read as ``report`` reads them: opening the storage as Optuna does would
    create its tables, racing the driver that is creating them ("table ... already exists")."""
    return optuna.load_study(study_name=study, storage=open_storage(storage, create=False)).get_trials(deepcopy=False)
