"""Pairs of parameters whose effects on speed, by NCCL's design, depend on each other.

NCCL chooses a protocol per collective by its message size: LL and LL128 carry small messages
with little latency, Simple carries large ones at the link's full bandwidth. A parameter that sets
how large a job's collectives are (its gradient bucket size: DDP's ``bucket_cap_mb``, DeepSpeed's
``reduce_bucket_size`` and ``allgather_bucket_size``, Megatron's DDP bucket size) therefore moves
which protocol is fastest. Measured one at a time from a job's defaults, both changes may lose
(Simple on small buckets, larger buckets under LL128) and win together. The throughput model adds
the parameters' effects, so ``interacting_pairs`` names such pairs for the search to try together
(``local_search.Planner.interacting``).

Facts from NCCL's documentation (``NCCL_PROTO``) and PyTorch's (``DistributedDataParallel``'s
``bucket_cap_mb``), read and not copied.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nccl_tune.search_spaces.space import Parameter

PROTOCOL = "NCCL_PROTO"
"""The variable that chooses NCCL's protocol."""
FOR_LARGE_MESSAGES = ("Simple",)
"""Protocols built for large messages: they go with a larger bucket. (LL and LL128 go with smaller
ones, but a job's buckets are small to begin with: a smaller bucket under them is a plain move.)"""
MESSAGE_SIZE_WORDS = ("bucket",)
"""Words in a parameter's name or command-line key that make it a collective's message size."""


def sets_message_size(p: Parameter) -> bool:
    """True when ``p`` sets how large a job's collectives are (a gradient bucket size)."""
    text = f"{p.name} {p.arg or ''}".lower()
    return p.name != PROTOCOL and any(word in text for word in MESSAGE_SIZE_WORDS)


def interacting_pairs(params: Sequence[Parameter]) -> tuple[tuple[str, str], ...]:
    """(``NCCL_PROTO``, size parameter) for each parameter of ``params`` that sets a message size,
    when ``params`` hold ``NCCL_PROTO``."""
    if not any(p.name == PROTOCOL for p in params):
        return ()
    return tuple((PROTOCOL, p.name) for p in params if sets_message_size(p))


def for_large_messages(protocol: Any) -> bool:
    """True when ``protocol`` (an ``NCCL_PROTO`` value) is built for large messages: it goes with a
    larger bucket."""
    return all(n.strip() in FOR_LARGE_MESSAGES for n in str(protocol).split(","))
