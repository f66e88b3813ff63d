"""A private Ray per trial: with a Ray cluster already running on the node (a real head on
loopback, found the way Ray finds it), a trial's command that calls ``ray.init()`` still starts
its own instance, so its Ray workers see the trial's NCCL variable and the running cluster gets
no job; ``doctor`` warns about the running cluster."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import FailureClass
from nccl_tune.launchers.local import LocalLauncher
from nccl_tune.launchers.private_ray import SESSION_SOCKET_TAIL, SOCKET_PATH_MAX, refuse_nccl_params, temp_dir_for
from nccl_tune.launchers.teardown import find_marked, kill_marked, study_match
from nccl_tune.node.doctor import run_doctor
from nccl_tune.trial import MARKER_ENV, Clocks, StopRule, TrialSpec

from .helpers import SCRIPTS

RAY = Path(sys.executable).parent / "ray"
JOB = SCRIPTS / "ray_job.py"

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "RAY_")) and k != MARKER_ENV}


@pytest.fixture(scope="module")
def ray_head():
    """A Ray head on loopback with its own temp dir (which plays /tmp: it holds ray_current_cluster);
    its processes carry a marker, so that only they are stopped afterwards."""
    tmp = Path("/tmp") / f"nt-test-ray-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    marker_study = f"rayhead-{uuid.uuid4().hex[:8]}"
    port = _free_port()
    env = {**_clean_env(), "RAY_TMPDIR": str(tmp), MARKER_ENV: f"{marker_study}/0"}
    cmd = [
        str(RAY),
        "start",
        "--head",
        "--port",
        str(port),
        "--node-ip-address",
        "127.0.0.1",
        "--num-cpus",
        "1",
        "--include-dashboard=false",
        "--disable-usage-stats",
    ]
    try:
        subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=120)
        address_file = tmp / "ray" / "ray_current_cluster"
        deadline = time.monotonic() + 30
        while not address_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        yield tmp, address_file.read_text().strip()
    finally:
        kill_marked(study_match(marker_study), 5.0)
        shutil.rmtree(tmp, ignore_errors=True)
        assert find_marked(study_match(marker_study)) == []


def test_without_a_private_ray_the_running_cluster_swallows_the_job(ray_head) -> None:
    tmp, address = ray_head
    env = {**_clean_env(), "RAY_TMPDIR": str(tmp), "NCCL_PROTO": "LL128"}
    out = subprocess.run([sys.executable, str(JOB)], env=env, capture_output=True, text=True, timeout=120).stdout
    assert "WORKER_NCCL_PROTO=<unset>" in out  # the cluster's worker never got the variable
    assert f"GCS={address.split(':')[0]}" in out and address.split(":")[-1] in out


def test_a_trial_gets_a_private_ray_whose_workers_see_its_nccl_variable(ray_head, tmp_path, monkeypatch) -> None:
    tmp, address = ray_head
    monkeypatch.setenv("RAY_TMPDIR", str(tmp))  # the node's default: where ray start recorded its address
    for k in [k for k in os.environ if k.startswith("NCCL_") or k == "RAY_ADDRESS"]:
        monkeypatch.delenv(k)
    study = f"rayt-{uuid.uuid4().hex[:8]}"
    spec = TrialSpec(
        study=study,
        number=0,
        params={},
        argv=(sys.executable, str(JOB), "--steps"),
        env={"NCCL_PROTO": "LL128"},
        trial_dir=tmp_path / "t",
        clocks=Clocks(startup_timeout_s=180, stall_timeout_s=60, grace_s=5),
        stop=StopRule(1, 2),
    )
    result = LocalLauncher().run(spec)
    out = (tmp_path / "t" / "output.log").read_text()
    assert result.status is FailureClass.OK, out[-2000:]
    assert "WORKER_NCCL_PROTO=LL128" in out
    gcs = next(ln for ln in out.splitlines() if ln.startswith("GCS="))
    assert not gcs.endswith(":" + address.split(":")[-1]), "the trial joined the running cluster"
    assert f"RAY_TMPDIR={temp_dir_for(tmp_path / 't', spec.marker)}" in out
    assert find_marked(study_match(study)) == [] and result.survivors == 0


def test_doctor_warns_that_the_running_cluster_would_swallow_a_run_s_variables(ray_head) -> None:
    tmp, address = ray_head
    (check,) = [c for c in run_doctor(env={"RAY_TMPDIR": str(tmp)}).checks if c.name == "ray"]
    assert check.status == "warn" and address in check.detail and "never reach them" in check.detail


def test_ray_socket_paths_fit_or_the_temp_dir_moves_to_a_short_folder(tmp_path) -> None:
    short = temp_dir_for(tmp_path / "t", "s/0")
    assert len(str(short)) + SESSION_SOCKET_TAIL <= SOCKET_PATH_MAX
    deep = tmp_path / ("x" * 80) / "trial-0000"
    moved = temp_dir_for(deep, "study/3")
    assert moved.name.startswith("ntr-") and deep not in moved.parents
    assert temp_dir_for(deep, "study/3") == moved and temp_dir_for(deep, "study/4") != moved


def test_nccl_parameters_on_an_existing_cluster_are_refused_in_one_line() -> None:
    with pytest.raises(NcclTuneError, match=r"RAY_ADDRESS=auto: .*NCCL_PROTO would never reach NCCL"):
        refuse_nccl_params({"RAY_ADDRESS": "auto"}, ["NCCL_PROTO"])
    refuse_nccl_params({"RAY_ADDRESS": "local"}, ["NCCL_PROTO"])
    refuse_nccl_params({"RAY_ADDRESS": "auto"}, [])
