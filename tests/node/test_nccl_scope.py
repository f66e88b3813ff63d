"""Which NCCL variables a one-node run of the collectives cannot time."""

from __future__ import annotations

import pytest

from nccl_tune.node.nccl_scope import between_nodes_only


@pytest.mark.parametrize(
    "name",
    [
        "NCCL_SOCKET_NTHREADS",
        "NCCL_NSOCKS_PERTHREAD",
        "NCCL_IB_HCA",
        "NCCL_IB_DISABLE",
        "NCCL_NET_GDR_LEVEL",
        "NCCL_CROSS_NIC",
        "NCCL_SOCKET_IFNAME",
        "NCCL_COLLNET_ENABLE",
    ],
)
def test_the_network_transport_s_variables_act_only_between_nodes(name):
    assert between_nodes_only(name)


@pytest.mark.parametrize(
    "name",
    [
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_BUFFSIZE",
        "NCCL_MIN_NCHANNELS",
        "NCCL_P2P_LEVEL",
        "NCCL_P2P_DISABLE",
        "NCCL_SHM_DISABLE",
        "NCCL_CUMEM_ENABLE",
        "NCCL_NVLS_ENABLE",
        "NCCL_NET_DISABLE_INTRA",
    ],
)
def test_what_moves_data_within_a_node_is_timed_by_a_one_node_check(name):
    assert not between_nodes_only(name)
