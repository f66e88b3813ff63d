"""Which NCCL variables act only between nodes: the network transport and what tunes it.

Within one node NCCL moves data over NVLink or PCIe peer-to-peer, or shared memory; the network
transport (sockets, InfiniBand, RoCE, a net plugin, CollNet, multi-node NVLink) carries only what
crosses nodes. A variable that tunes that transport changes nothing a one-node run of the
collectives can time: the NCCL sweep (``tuner.records.nccl_sweep``) leaves it out, and trials measure it.
Read from NCCL's ``src/transport/net*.cc``, ``net_socket.cc``, ``net_ib/`` and ``collnet``;
``NCCL_NET_DISABLE_INTRA`` is the exception of its family (it decides whether the network carries
traffic within a node).
"""

from __future__ import annotations

BETWEEN_NODES_PREFIXES = ("NCCL_SOCKET_", "NCCL_IB_", "NCCL_NET_", "NCCL_COLLNET_", "NCCL_MNNVL_", "NCCL_GIN_")
BETWEEN_NODES = frozenset(
    {
        "NCCL_NSOCKS_PERTHREAD",
        "NCCL_CROSS_NIC",
        "NCCL_NCHANNELS_PER_NET_PEER",
        "NCCL_P2P_NET_CHUNKSIZE",
        "NCCL_P2P_PER_CHANNEL_NET_BW",
        "NCCL_PXN_DISABLE",
        "NCCL_P2P_PXN_LEVEL",
        "NCCL_GDR_FLUSH_DISABLE",
        "NCCL_GDRCOPY_ENABLE",
        "NCCL_OOB_NET_ENABLE",
        "NCCL_OOB_NET_IFNAME",
    }
)
WITHIN_NODE_TOO = frozenset({"NCCL_NET_DISABLE_INTRA"})


def between_nodes_only(name: str) -> bool:
    """True for an NCCL variable that only the network transport between nodes reads."""
    if name in WITHIN_NODE_TOO:
        return False
    return name in BETWEEN_NODES or name.startswith(BETWEEN_NODES_PREFIXES)
