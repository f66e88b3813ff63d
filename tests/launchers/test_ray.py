"""A trial that starts a real Ray head: its daemons leave the process group, the marker finds them."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from nccl_tune.failure import FailureClass
from nccl_tune.launchers.base import TrialObserver
from nccl_tune.launchers.local import LocalLauncher
from nccl_tune.trial import Clocks, StopRule, TrialSpec

from .helpers import FAKE_TRAINER

RAY = Path(sys.executable).parent / "ray"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("ray") is None, reason="ray is not installed (pip install 'ray[default]')"
    ),
]


def _using(path: str) -> list[psutil.Process]:
    """Live processes whose command line mentions ``path`` (Ray's daemons name their session dir)."""
    out = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and path in " ".join(proc.info["cmdline"] or ()):
            out.append(proc)
    return out


class RayWatcher(TrialObserver):
    """Notes Ray's daemons of the trial while it runs."""

    def __init__(self, temp: str) -> None:
        self.temp = temp
        self.seen: dict[int, str] = {}

    def should_stop(self, spec, progress):
        if progress.step_times_s and not self.seen:
            self.seen = {p.pid: p.name() for p in _using(self.temp)}
        return None


def test_ray_daemons_of_a_trial_are_torn_down(study: str) -> None:
    temp = tempfile.mkdtemp(prefix="ntr", dir="/tmp")  # short: Ray puts unix sockets under it
    script = (
        f"{RAY} start --head --node-ip-address=127.0.0.1 --port=0 --include-dashboard=false "
        f"--disable-usage-stats --num-cpus=1 --temp-dir={temp} && "
        f"exec {sys.executable} {FAKE_TRAINER} --steps 100 --step-s 0.3"
    )
    spec = TrialSpec(
        study=study,
        number=0,
        params={},
        argv=("bash", "-c", script),
        env={"RAY_USAGE_STATS_ENABLED": "0"},
        trial_dir=Path(temp) / "trial",
        clocks=Clocks(startup_timeout_s=180, stall_timeout_s=60, grace_s=3.0),
        stop=StopRule(1, 2),
    )
    try:
        watcher = RayWatcher(temp)
        result = LocalLauncher().run(spec, watcher)
        log = (spec.trial_dir / "output.log").read_text()
        assert result.status is FailureClass.OK, log[-3000:]
        assert "Ray runtime started" in log
        daemons = " ".join(watcher.seen.values())
        assert "gcs_server" in daemons and "raylet" in daemons, watcher.seen
        assert result.survivors == 0
        deadline = time.monotonic() + 10
        while _using(temp) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _using(temp) == []
    finally:
        for proc in _using(temp):
            proc.kill()
        shutil.rmtree(temp, ignore_errors=True)
