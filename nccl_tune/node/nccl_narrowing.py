"""NCCL settings that, by NCCL's own design, take away the fast paths of a bandwidth-bound collective.

Most NCCL variables change what NCCL chooses among paths of similar speed, and only a measurement
tells which is faster on a node. A few remove the fast path outright, whatever the node: the LL
protocol alone (8-byte stores carrying 4-byte flags: half the link's bandwidth at best, which is
why NCCL picks it only for small messages), no peer-to-peer or shared-memory transport inside a
node, no InfiniBand or GPU Direct RDMA across nodes, fewer buffers or channels than NCCL's
defaults. ``narrowing`` names them, so that the search tries them after the values that may be
faster (``throughput_model.prior_mean``); a run that measures one faster overrides it.

Facts from NCCL's documentation and ``src/`` (``NCCL_PROTO``'s ``[func:][^]elem,...`` syntax, the
4 MiB default buffer, path levels), read and not copied.
"""

from __future__ import annotations

from typing import Any

from nccl_tune.node.env_catalog import NCCL_PROTOS, strtoll

DEFAULT_BUFFSIZE = 4 * 2**20
"""NCCL's default ``NCCL_BUFFSIZE`` in bytes."""
FEW_CHANNELS = 4
"""``NCCL_MAX_NCHANNELS`` (or ``NCCL_MAX_NRINGS``) at or below which collectives use a fraction of
the channels NCCL opens by default on an NVLink or multi-NIC node."""
_OFF_WHEN_ONE = {
    "NCCL_P2P_DISABLE": "no peer-to-peer transport between the node's GPUs",
    "NCCL_SHM_DISABLE": "no shared-memory transport inside the node",
    "NCCL_IB_DISABLE": "no InfiniBand: traffic between nodes over sockets",
}
_LOCAL_ONLY = {
    "NCCL_P2P_LEVEL": "peer-to-peer transport never used (level LOC)",
    "NCCL_NET_GDR_LEVEL": "GPU Direct RDMA never used (level LOC)",
}


def _allowed_protocols(value: str) -> set[str]:
    """The protocols a ``NCCL_PROTO`` value leaves any collective (``[func:][^]elem,elem;...``)."""
    out: set[str] = set()
    for part in value.split(";"):
        spec = part.split(":", 1)[-1].strip()
        negate = spec.startswith("^")
        named = {e.strip().lower() for e in spec.lstrip("^").split(",") if e.strip()}
        out |= {p for p in NCCL_PROTOS if (p.lower() in named) != negate}
    return out


def narrowing(name: str, value: Any) -> str | None:
    """Why NCCL variable ``name`` set to ``value`` takes the fast path away from a bandwidth-bound
    collective, or None (unset, or a value that only changes NCCL's choice)."""
    text = str(value).strip()
    if not text or text == "unset":
        return None
    if name == "NCCL_PROTO":
        return (
            "the LL protocol alone: half the link's bandwidth at best" if _allowed_protocols(text) == {"LL"} else None
        )
    if name in _OFF_WHEN_ONE:
        return _OFF_WHEN_ONE[name] if strtoll(text) == 1 else None
    if name in _LOCAL_ONLY:
        return _LOCAL_ONLY[name] if text.upper() == "LOC" or strtoll(text) == 0 else None
    number = strtoll(text)
    if name == "NCCL_BUFFSIZE" and number is not None and 0 < number < DEFAULT_BUFFSIZE:
        return f"buffers smaller than NCCL's default {DEFAULT_BUFFSIZE // 2**20} MiB"
    if name in ("NCCL_MAX_NCHANNELS", "NCCL_MAX_NRINGS") and number is not None and 0 < number <= FEW_CHANNELS:
        return f"at most {number} channels"
    return None
