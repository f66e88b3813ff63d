"""The ranks' stacks at a stall, taken for real: a gloo job where one rank sleeps while the others
wait in all_reduce, supervised by the local launcher; and py-spy refused by the kernel (ptrace)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nccl_tune.diagnose.api import diagnose_path
from nccl_tune.diagnose.stacks import StackReport
from nccl_tune.diagnose.verdict import TrialFacts, decide
from nccl_tune.failure import FailureClass
from nccl_tune.launchers.local import LocalLauncher
from nccl_tune.launchers.stacks import PTRACE_FIX, collect_stacks, py_spy_path
from nccl_tune.launchers.trial_files import read_result
from nccl_tune.trial import MARKER_ENV, Clocks, StopReason, StopRule, TrialSpec

SCRIPTS = Path(__file__).parent / "scripts"
pytestmark = pytest.mark.skipif(py_spy_path() is None, reason="py-spy is not installed")


def test_a_stall_names_the_rank_that_sleeps_and_shows_its_stack(study: str, tmp_path: Path) -> None:
    spec = TrialSpec(
        study=study,
        number=0,
        params={},
        env={},
        argv=(sys.executable, str(SCRIPTS / "gloo_stall.py"), "4", "2", "2"),
        trial_dir=tmp_path / "trial",
        clocks=Clocks(startup_timeout_s=180, stall_timeout_s=5, stall_floor_s=5, grace_s=2),
        stop=StopRule(warmup_steps=1, measured_steps=50),
    )
    result = LocalLauncher().run(spec)
    v = result.verdict
    assert (result.status, result.stop_reason) == (FailureClass.HANG, StopReason.STALL), [str(e) for e in v.evidence]
    assert v.rank == 2, [str(e) for e in v.evidence]
    text = "\n".join(e.text for e in v.evidence)
    assert "rank 2 is in time.sleep" in text and "ranks 0, 1, 3 wait in all_reduce" in text
    assert "stall_here" in text and "time.sleep(600)" in text
    assert "rank 2" in v.advice and v.cause.rule == "stall" and v.cause.subtype == "stacks"
    saved = StackReport.from_json(json.loads((spec.trial_dir / "stacks.json").read_text()))
    assert sorted(p.rank for p in saved.processes if p.rank is not None) == [0, 1, 2, 3]
    # nccl-tune diagnose on the folder replays the launcher's decision
    assert diagnose_path(spec.trial_dir).verdict == read_result(spec.trial_dir).verdict == v


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user to be refused ptrace needs root")
def test_ptrace_refused_is_one_line_with_the_fix(tmp_path: Path) -> None:
    marker = f"stacks-test/{os.getpid()}"
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time\nprint('up', flush=True)\ntime.sleep(60)"],
        env=dict(os.environ, **{MARKER_ENV: marker}),
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        sleeper.stdout.readline()
        nobody = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", py_spy_path())
        report = collect_stacks(marker, sleeper.pid, py_spy=nobody)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert report.note == PTRACE_FIX and report.processes and report.processes[0].error
    verdict = decide(TrialFacts(stop_reason=StopReason.STALL, stop_detail="no progress for 5 s", stacks=report))
    assert verdict.failure_class is FailureClass.HANG
    assert [e.text for e in verdict.evidence if "ptrace" in e.text] == [PTRACE_FIX]
    assert "kernel.yama.ptrace_scope=0" in PTRACE_FIX and "CAP_SYS_PTRACE" in PTRACE_FIX


def test_a_worker_retitled_as_ray_titles_its_actors_is_still_read() -> None:
    """Ray renames a worker's process (``ray::Class.method``: its name and command line both); its
    stack is taken all the same, found by the interpreter it runs."""
    marker = f"stacks-test-title/{os.getpid()}"
    code = (
        "import setproctitle, time\nsetproctitle.setproctitle('ray::PolicyWorker.train')\n"
        "print('up', flush=True)\ntime.sleep(60)"
    )
    worker = subprocess.Popen(
        [sys.executable, "-c", code],
        env=dict(os.environ, **{MARKER_ENV: marker}),
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        worker.stdout.readline()
        report = collect_stacks(marker, worker.pid)
    finally:
        worker.kill()
        worker.wait()
    [proc] = report.processes
    assert proc.command == "ray::PolicyWorker.train" and not proc.error
    assert any(f.function == "<module>" for f in proc.main_thread.frames)
