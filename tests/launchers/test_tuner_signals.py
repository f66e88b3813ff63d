"""`nccl-tune run` interrupted mid-trial: SIGINT/SIGTERM exit 130 with nothing left; after SIGKILL
the next run of the same study kills the orphans, records the trial as interrupted and goes on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import psutil
import pytest

from nccl_tune.launchers.teardown import find_marked

from .helpers import FAKE_TRAINER, SCRIPTS

NCCL_TUNE = Path(sys.executable).parent / "nccl-tune"
SPACE = SCRIPTS / "signals.yaml"
TRAINER = [sys.executable, str(FAKE_TRAINER), "--steps", "1000", "--step-s", "0.2", "--detach", "1", "--ignore-term"]

pytestmark = pytest.mark.skipif(not NCCL_TUNE.exists(), reason=f"{NCCL_TUNE} is not installed (pip install -e .)")


def _tuner(study: str, results: Path, env: dict[str, str], trials: int) -> subprocess.Popen:
    argv = [
        str(NCCL_TUNE),
        "run",
        "--space",
        str(SPACE),
        "--study",
        study,
        "--results",
        str(results),
        "--trials",
        str(trials),
        "--confirm",
        "0",
        "--seed",
        "1",
        "--",
        *TRAINER,
    ]
    return subprocess.Popen(
        argv,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _of_study(study: str):
    """Markers of ``study`` as the tuner sets them (``NAME@STORAGE/NUMBER``, see ``marker_scope``)."""
    return lambda marker: marker.split("@")[0] == study and "/" in marker


def _wait_for_trial(study: str, number: int, timeout_s: float = 60.0) -> set[int]:
    """Pids of trial ``number`` once it runs, with its detached child."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = {p.pid for p in find_marked(lambda m: _of_study(study)(m) and m.endswith(f"/{number}"))}
        if len(pids) >= 2:
            return pids
        time.sleep(0.1)
    raise AssertionError(f"trial {number} of {study} never started")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _trials(study: str, results: Path) -> list[optuna.trial.FrozenTrial]:
    storage = f"sqlite:///{results / 'nccl-tune.db'}"
    return optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["sigint", "sigterm", "sighup-terminal-closed"]
)
def test_a_signal_to_the_tuner_tears_the_trial_down_and_exits_130(study: str, tmp_path: Path, sig) -> None:
    results = tmp_path / "results"
    tuner = _tuner(
        study,
        results,
        {
            "FAKE_TRAINER_SLOW_S": "120",
            "FAKE_TRAINER_SLOW_LAUNCH": "1",
            "FAKE_TRAINER_COUNTER": str(tmp_path / "launches"),
        },
        trials=3,
    )
    try:
        pids = _wait_for_trial(study, 0)
        os.kill(tuner.pid, sig)
        out, _ = tuner.communicate(timeout=60)
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.communicate()
    assert tuner.returncode == 130, out
    assert "interrupted" in out
    assert f"{sig.name}: stopping trial 0: SIGTERM to its processes, SIGKILL to what is left after" in out, out
    assert not any(_alive(p) for p in pids)
    assert find_marked(_of_study(study)) == []
    first = {t.number: t for t in _trials(study, results)}[0]
    assert first.state is optuna.trial.TrialState.FAIL
    assert first.user_attrs.get("status") == "interrupted"
    waiting = [t for t in _trials(study, results) if t.state is optuna.trial.TrialState.WAITING]
    assert [t.system_attrs.get("fixed_params") for t in waiting] == [first.params], "the next run runs it again"


def test_a_killed_tuner_is_resumed_with_its_orphans_killed_and_nothing_lost(study: str, tmp_path: Path) -> None:
    results = tmp_path / "results"
    env = {
        "FAKE_TRAINER_SLOW_S": "120",
        "FAKE_TRAINER_SLOW_LAUNCH": "2",
        "FAKE_TRAINER_COUNTER": str(tmp_path / "launches"),
    }
    tuner = _tuner(study, results, env, trials=3)
    try:
        orphans = _wait_for_trial(study, 1)  # trial 0 finished; trial 1 is slow to start
    finally:
        tuner.kill()
        tuner.communicate(timeout=30)
    assert all(_alive(p) for p in orphans)  # nothing tore them down

    resumed = subprocess.run(
        [
            str(NCCL_TUNE),
            "run",
            "--space",
            str(SPACE),
            "--study",
            study,
            "--results",
            str(results),
            "--trials",
            "1",
            "--confirm",
            "0",
            "--seed",
            "1",
            "--",
            *TRAINER,
        ],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = resumed.stdout + resumed.stderr
    assert resumed.returncode in (0, 2), out  # a config was found or not: not a usage error, not interrupted
    assert not any(_alive(p) for p in orphans), out
    assert find_marked(_of_study(study)) == []
    by_number = {t.number: t for t in _trials(study, results)}
    assert by_number[0].state is optuna.trial.TrialState.COMPLETE and by_number[0].user_attrs.get("status") == "ok"
    assert by_number[1].state is optuna.trial.TrialState.FAIL and by_number[1].user_attrs.get("status") == "interrupted"
    later = [t for n, t in by_number.items() if n >= 2]
    assert later and all(t.user_attrs.get("status") == "ok" for t in later), out
