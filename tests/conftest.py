"""Fixtures shared by several test packages: the loopback Ray cluster (started once per session)."""

from __future__ import annotations

import pytest


RAY_NODES = 2
"""Logical nodes of the test cluster that trials may use (the head is one of them)."""


@pytest.fixture(scope="session")
def ray_cluster():
    """A Ray cluster on loopback, started once for the test session: ``RAY_NODES`` logical nodes,
    each offering ``nccl_tune_node: 1`` and eight GPU-like units; this process is its driver."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from nccl_tune.launchers.ray_launcher import NODE_RESOURCE

    node = {"num_cpus": 1, "resources": {NODE_RESOURCE: 1, "GPU-like": 8}, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=node)
    for _ in range(RAY_NODES - 1):
        cluster.add_node(**{k: v for k, v in node.items() if k != "include_dashboard"})
    ray.init(address=cluster.address, log_to_driver=False, namespace="nccl-tune-tests")
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()
