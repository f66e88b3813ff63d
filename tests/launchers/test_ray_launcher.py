"""RayLauncher on a loopback cluster (the session's ``ray_cluster``): one trial per node, teardown
of a detached child on the node, a nested ``ray.init()`` kept private, a node lost mid-trial, the
orphan sweep on every node, and the NCCL check run on a node before its trial."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import FailureClass
from nccl_tune.launchers.nccl_check import CHECK_DIR, CheckingLauncher, with_nccl_check
from nccl_tune.launchers.ray_launcher import RayLauncher
from nccl_tune.launchers.teardown import find_marked, study_match
from nccl_tune.trial import MARKER_ENV, Clocks, StopReason, StopRule
from tests.conftest import RAY_NODES

from .helpers import FAKE_TRAINER, SCRIPTS, RecordingObserver

pytest.importorskip("ray")

CLOCKS = Clocks(startup_timeout_s=90, stall_timeout_s=30, grace_s=1.0)
NODE_LINE = re.compile(r"trial running on Ray node \S+ \(id (\w+)\)")


def _node_of(result) -> str:
    found = NODE_LINE.search((result.trial_dir / "output.log").read_text())
    assert found, (result.trial_dir / "output.log").read_text()[:2000]
    return found.group(1)


def test_parallel_trials_take_one_node_each(ray_cluster, make_spec) -> None:
    launcher = RayLauncher()
    specs = [make_spec("--steps", "4", "--step-s", "1.0", number=n, clocks=CLOCKS) for n in range(RAY_NODES)]
    results: dict[int, object] = {}
    try:
        launcher.prepare(specs[0])
        launcher.before_study()
        threads = [threading.Thread(target=lambda s=s: results.__setitem__(s.number, launcher.run(s))) for s in specs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    finally:
        launcher.close()
    assert all(r.status is FailureClass.OK for r in results.values()), [r.verdict for r in results.values()]
    assert len({_node_of(r) for r in results.values()}) == RAY_NODES
    assert all(r.survivors == 0 for r in results.values())


def test_a_detached_child_on_the_node_is_torn_down(ray_cluster, make_spec) -> None:
    launcher = RayLauncher()
    spec = make_spec(
        "--steps", "3", "--step-s", "0.2", "--detach", "1", "--ignore-term", "--linger-s", "60", clocks=CLOCKS
    )
    try:
        launcher.prepare(spec)
        result = launcher.run(spec, RecordingObserver())
    finally:
        launcher.close()
    assert result.status is FailureClass.OK, result.verdict
    assert result.escaped_processes >= 1 and result.survivors == 0
    assert "detached child" in (spec.trial_dir / "output.log").read_text()


NESTED = textwrap.dedent("""
    import os, subprocess, sys, ray
    from ray.util.placement_group import placement_group
    ray.init(resources={"nested_trial_unit": 3}, num_cpus=1, include_dashboard=False)
    pg = placement_group([{"nested_trial_unit": 1}])
    ray.get(pg.ready(), timeout=120)
    print("nested ray at", ray.get_runtime_context().gcs_address, "temp", os.environ.get("RAY_TMPDIR"), flush=True)
    sys.exit(subprocess.call([sys.executable, sys.argv[1], "--steps", "3", "--step-s", "0.5"]))
""")


class OuterResources(RecordingObserver):
    """Reads the outer cluster's resources once the trial's own Ray is up (its first step)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, float] | None = None

    def should_stop(self, spec, progress):
        if progress.step_times_s and self.seen is None:
            import ray

            self.seen = ray.cluster_resources()
        return super().should_stop(spec, progress)


def test_a_nested_ray_init_stays_private(ray_cluster, make_spec) -> None:
    launcher = RayLauncher()
    spec = make_spec(argv=[sys.executable, "-c", NESTED, str(FAKE_TRAINER)], clocks=CLOCKS)
    watcher = OuterResources()
    try:
        launcher.prepare(spec)
        result = launcher.run(spec, watcher)
    finally:
        launcher.close()
    log = (spec.trial_dir / "output.log").read_text()
    assert result.status is FailureClass.OK, log[-3000:]
    nested = re.search(r"nested ray at (\S+) temp (\S+)", log)
    assert nested and nested.group(1) != ray_cluster.address and nested.group(2).startswith("/tmp/ntr"), log[-2000:]
    assert watcher.seen is not None and "nested_trial_unit" not in watcher.seen
    assert not any(k.startswith("nested") for k in ray_cluster_resources())
    assert not Path(nested.group(2)).exists()  # the trial's Ray folder is removed with it


def ray_cluster_resources() -> dict[str, float]:
    import ray

    return ray.cluster_resources()


class NodeKiller(RecordingObserver):
    """Removes the trial's node from the cluster at its first step."""

    def __init__(self, cluster, node) -> None:
        super().__init__()
        self.cluster, self.node, self.done = cluster, node, False

    def should_stop(self, spec, progress):
        if progress.step_times_s and not self.done:
            self.done = True
            self.cluster.remove_node(self.node, allow_graceful=False)
        return super().should_stop(spec, progress)


def test_a_node_lost_mid_trial_is_a_crash_naming_it(ray_cluster, make_spec, study) -> None:
    doomed = ray_cluster.add_node(num_cpus=1, resources={"doomed_node": 1})
    ray_cluster.wait_for_nodes()
    launcher = RayLauncher(resource="doomed_node")
    # measured steps the trial cannot finish before the node is gone, however long its removal takes
    # on a loaded machine (with the usual 2 it sometimes ended ok first)
    spec = make_spec(
        "--steps", "200", "--step-s", "0.5", clocks=CLOCKS, stop=StopRule(warmup_steps=1, measured_steps=150)
    )
    try:
        launcher.prepare(spec)
        result = launcher.run(spec, NodeKiller(ray_cluster, doomed))
    finally:
        launcher.close()
    assert result.status is FailureClass.CRASH, result.verdict
    assert any("was lost during the trial" in e.text for e in result.verdict.evidence), result.verdict
    # the study goes on: the other nodes still take trials, and the orphans are swept from them
    sweep = RayLauncher().reap(study)
    assert not find_marked(study_match(study)), sweep


def test_reap_sweeps_a_study_on_every_node(ray_cluster, study) -> None:
    env = {**os.environ, MARKER_ENV: f"{study}/7"}
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not find_marked(study_match(study)) and time.monotonic() < deadline:
            time.sleep(0.1)
        found = RayLauncher().reap(study)
        assert any(str(orphan.pid) in line for line in found), found
        assert orphan.wait(10) is not None
    finally:
        orphan.kill()


CLOSES_OUTPUT_THEN_EXITS = (
    "import os, sys, time; print('bye', flush=True); os.close(1); os.close(2); time.sleep(1); sys.exit(3)"
)


def test_a_command_that_ends_its_output_before_it_exits_ends_the_trial_with_its_exit_status(
    ray_cluster, make_spec
) -> None:
    """The output's end reaches the driver before the exit status; the trial still ends as soon as
    the command does (not at its start-up clock, 30 s here), with the command's exit code."""
    launcher = RayLauncher()
    spec = make_spec(
        argv=[sys.executable, "-c", CLOSES_OUTPUT_THEN_EXITS],
        clocks=Clocks(startup_timeout_s=30, stall_timeout_s=30, grace_s=1.0),
    )
    try:
        launcher.prepare(spec)
        result = launcher.run(spec)
    finally:
        launcher.close()
    assert result.stop_reason is StopReason.EXITED and result.exit_code == 3, (result.stop_reason, result.verdict)
    assert result.wall_s < 20, result.wall_s


def test_each_node_says_whether_it_can_run_the_nccl_check(ray_cluster) -> None:
    """The test nodes have no GPU behind them: every node is asked, and the line names one."""
    launcher = RayLauncher()
    try:
        support = launcher.nccl_check_support()
        wrapped, line = with_nccl_check(launcher, "auto", True)
        with pytest.raises(NcclTuneError, match=r"^--nccl-check on: the NCCL check cannot run here \(on Ray node "):
            with_nccl_check(launcher, "on", True)
    finally:
        launcher.close()
    assert support.gpus is None and support.why_not.startswith("on Ray node ") and "GPU" in support.why_not
    assert wrapped is launcher and line == f"NCCL check off: {support.why_not}"


def test_the_nccl_check_runs_on_a_node_before_its_trial_and_a_hang_there_spares_the_trainer(
    ray_cluster, make_spec, tmp_path: Path
) -> None:
    """Two gloo ranks of the check under ``torch.distributed.run`` on a Ray node, as a run of their own:
    a passing check lets its trial run; one that hangs ends the next trial before its command starts."""
    launcher = CheckingLauncher(
        RayLauncher(),
        gpus=2,
        backend="gloo",
        worker=(str(SCRIPTS / "nccl_check_faults.py"),),
        startup_timeout_s=20,
        stall_floor_s=6,
    )
    specs = [
        make_spec(
            "--steps",
            "3",
            "--step-s",
            "0.1",
            "--pidfile",
            str(tmp_path / f"started-{n}"),
            number=n,
            env=env,
            clocks=CLOCKS,
        )
        for n, env in enumerate(({"NCCL_ALGO": "Ring"}, {"NCCL_ALGO": "NVLS"}))
    ]
    try:
        launcher.prepare(specs[0])
        launcher.before_study()
        first, hung = [launcher.run(s) for s in specs]
    finally:
        launcher.close()
    check_log = (first.trial_dir / CHECK_DIR / "output.log").read_text()
    assert NODE_LINE.search(check_log), "the check ran on a node of the cluster"
    assert sum(line.startswith("nccl-tune check: round") for line in check_log.splitlines()) >= 2
    assert first.status is FailureClass.OK and first.nccl_check_s > 0 and (tmp_path / "started-0").exists()
    assert hung.status is FailureClass.HANG and hung.nccl_check_failed, hung.verdict
    assert "NCCL check" in hung.verdict.evidence[0].text and not (tmp_path / "started-1").exists()
    assert NODE_LINE.search((hung.trial_dir / CHECK_DIR / "output.log").read_text())
    assert hung.wall_s < 30, "caught by the check's clocks, not the trial's"


LOUD = "import sys; sys.stdout.write('x' * 4_000_000); sys.stdout.flush()"


def test_teardown_ends_the_output_pipe_in_time_when_nobody_reads_it(ray_cluster, study) -> None:
    """A trial whose output outruns its reader fills the driver's pipe; the feed then waits outside
    the pipe's lock, so the teardown's drain still closes the pipe after its timeout instead of
    waiting for a reader that may never come."""
    import ray

    from nccl_tune.launchers.ray_launcher import RemoteProcess, _host_class, cluster_nodes

    node = cluster_nodes()[0]
    actor = _host_class().options(resources={"nccl_tune_node": 1}, max_concurrency=4).remote()
    try:
        pid = ray.get(actor.start.remote([sys.executable, "-c", LOUD], {}, f"{study}/0", None, 0.5), timeout=60)
        proc = RemoteProcess(actor, pid, node)
        deadline = time.monotonic() + 30
        while proc._thread.is_alive() and time.monotonic() < deadline and not _pipe_full(proc):
            time.sleep(0.1)
        assert _pipe_full(proc), "the command's output never filled the pipe"
        drained = threading.Thread(target=proc.drain, args=(1.0,), daemon=True)
        began = time.monotonic()
        drained.start()
        drained.join(15)
        assert not drained.is_alive(), "drain waited on a full pipe nobody reads"
        assert time.monotonic() - began < 10
        assert proc.stdout.read(1 << 20).startswith(b"nccl-tune: trial running on Ray")
        proc._thread.join(5)
        assert not proc._thread.is_alive(), "the feed kept writing to a closed pipe"
    finally:
        ray.get(actor.stop.remote(f"{study}/0", 1.0), timeout=60)
        ray.kill(actor, no_restart=True)


def _pipe_full(proc) -> bool:
    import fcntl
    import termios

    pending = bytearray(4)
    fcntl.ioctl(proc.stdout.fileno(), termios.FIONREAD, pending)
    return int.from_bytes(pending, sys.byteorder) >= 60_000
