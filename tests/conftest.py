"""Shared by several test packages: the loopback Ray cluster, and the guard that none of its
processes outlives it."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import psutil
import pytest

pytest_plugins = ["tests.backstop"]

RAY_NODES = 2
"""Logical nodes of the test cluster that trials may use (the head is one of them)."""
RAY_EXIT_WAIT_S = 60.0
"""How long the cluster's processes may take to exit after its shutdown (a loaded 2-core machine
running the suite in two workers has taken more than 20 s)."""


def _ray_processes_of_this_test_run() -> list[psutil.Process]:
    """Live descendants of this process that belong to Ray (its daemons and workers)."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            text = f"{proc.name()} {' '.join(proc.cmdline()[:3])}"
        except psutil.Error:
            continue
        if any(word in text for word in ("gcs_server", "raylet", "ray::", "ray/", "ray_")):
            found.append(proc)
    return found


def _wait_gone(procs: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Those of ``procs`` still alive (not zombies) after ``timeout_s``."""
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    return [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@contextlib.contextmanager
def loopback_ray_cluster() -> Iterator[object]:
    """A Ray cluster on loopback: ``RAY_NODES`` logical nodes, each offering ``nccl_tune_node: 1``
    and eight GPU-like units; this process is its driver. On exit the cluster is shut down and its
    processes waited for: one still alive after ``RAY_EXIT_WAIT_S`` is killed (a left-over
    ``gcs_server`` makes later tests see "a Ray cluster is running") with a warning naming it, and
    fails the test run only if it survives the kill. Ray's own daemons (a node's agents) have taken
    more than a minute to exit on a loaded machine: that is Ray's pace, not a leak of the tool's,
    whose trial processes other tests hold to account."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from nccl_tune.launchers.ray_launcher import NODE_RESOURCE

    before = {p.pid for p in _ray_processes_of_this_test_run()}
    node = {"num_cpus": 1, "resources": {NODE_RESOURCE: 1, "GPU-like": 8}, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=node)
    try:
        for _ in range(RAY_NODES - 1):
            cluster.add_node(**{k: v for k, v in node.items() if k != "include_dashboard"})
        ray.init(address=cluster.address, log_to_driver=False, namespace="nccl-tune-tests")
        cluster.wait_for_nodes()
        ours = [p for p in _ray_processes_of_this_test_run() if p.pid not in before]
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
    ours += [p for p in _ray_processes_of_this_test_run() if p.pid not in before]
    left = _wait_gone(list({p.pid: p for p in ours}.values()), RAY_EXIT_WAIT_S)
    slow = [_described(p) for p in left]
    for proc in left:
        proc.kill()
    _, survivors = psutil.wait_procs(left, timeout=5)
    assert not survivors, f"the test Ray cluster left processes that survive SIGKILL: {slow}"
    if slow:
        warnings.warn(f"Ray processes still alive {RAY_EXIT_WAIT_S:.0f} s after shutdown, killed: {slow}", stacklevel=2)


def _described(proc: psutil.Process) -> str:
    """``PID: command line`` of ``proc``, for a message (its pid alone once it is gone)."""
    try:
        return f"{proc.pid}: {' '.join(proc.cmdline())[:200]}"
    except psutil.Error:
        return str(proc.pid)


RAY_FILES = frozenset(
    {
        "tests/launchers/test_contract.py",
        "tests/launchers/test_private_ray.py",
        "tests/launchers/test_ray.py",
        "tests/launchers/test_ray_launcher.py",
        "tests/tuner/study/test_parallel.py",
        "tests/node/test_doctor.py",  # its Ray checks look for any Ray on the machine
    }
)
"""Files that start Ray (or look for a running one): with ``pytest -n`` they run one after another
in one worker, so that no test sees another test's cluster."""


SHARED_STUDY_DIRS = ("tests/reporting/",)
"""Folders whose files share one session-scoped study (``tests/reporting/conftest.py``'s
``tiny_study``): with ``pytest -n`` their files run in one worker, which builds it once."""


LONG_FIRST = (
    "tests/tuner/test_loop.py",
    "tests/twin/test_main_base.py",
    "tests/test_readme.py",
    "tests/benchmarks/test_search_bench.py",
    "tests/examples/test_ddp_example.py",
    "tests/tuner/study/test_nightly.py",
    "tests/tuner/search/test_flaky.py",
    "tests/tuner/study/test_admission.py",
    "tests/tuner/study/test_budget.py",
    "tests/tuner/records/test_storage.py",
    "tests/tuner/records/test_semantics.py",
    "tests/tuner/study/test_recovery.py",
)
"""Files holding the longest tests of ``pytest --durations`` (20-105 s each), collected first after
the Ray files: under ``pytest -n`` files go to workers in collection order, and a long file drawn
last keeps one core busy after the others have finished (the tuner's folder, collected last, holds
most of them). One fresh-clone run with this order took 879 s against 901 s without: within the
machine's run-to-run spread."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The Ray files, then ``LONG_FIRST``, then the rest in their own order."""

    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::", 1)[0]
        if path in RAY_FILES:
            return 0
        return 1 + LONG_FIRST.index(path) if path in LONG_FIRST else 1 + len(LONG_FIRST)

    items.sort(key=rank)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under ``pytest -n N`` (``make test``): a file's tests run in one worker, in order (its module
    fixtures are built once), all the Ray files run one after another in one worker, and so do the
    files of a folder that shares a study."""
    from xdist.scheduler import LoadScopeScheduling

    class ByFileRayTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path in RAY_FILES:
                return "ray"
            return next((d for d in SHARED_STUDY_DIRS if path.startswith(d)), path)

    return ByFileRayTogether(config, log)
