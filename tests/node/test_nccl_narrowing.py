"""Which NCCL settings take the fast path away from a bandwidth-bound collective."""

from __future__ import annotations

import pytest

from nccl_tune.node.nccl_narrowing import narrowing


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("NCCL_PROTO", "LL", "LL protocol alone"),
        ("NCCL_PROTO", "ll", "LL protocol alone"),
        ("NCCL_PROTO", "^LL128,Simple", "LL protocol alone"),
        ("NCCL_PROTO", "allreduce:LL", "LL protocol alone"),
        ("NCCL_P2P_LEVEL", "LOC", "peer-to-peer"),
        ("NCCL_P2P_LEVEL", "0", "peer-to-peer"),
        ("NCCL_NET_GDR_LEVEL", "LOC", "GPU Direct RDMA"),
        ("NCCL_P2P_DISABLE", 1, "peer-to-peer"),
        ("NCCL_SHM_DISABLE", "1", "shared-memory"),
        ("NCCL_IB_DISABLE", 1, "InfiniBand"),
        ("NCCL_BUFFSIZE", 1048576, "smaller than NCCL's default 4 MiB"),
        ("NCCL_BUFFSIZE", "0x100000", "smaller than NCCL's default 4 MiB"),
        ("NCCL_MAX_NCHANNELS", 2, "at most 2 channels"),
    ],
)
def test_a_setting_that_removes_the_fast_path_is_named_with_why(name: str, value: object, said: str) -> None:
    assert said in (narrowing(name, value) or "")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("NCCL_PROTO", "unset"),
        ("NCCL_PROTO", "LL128"),
        ("NCCL_PROTO", "LL,Simple"),
        ("NCCL_PROTO", "^LL"),
        ("NCCL_ALGO", "Tree"),
        ("NCCL_P2P_LEVEL", "NVL"),
        ("NCCL_P2P_DISABLE", 0),
        ("NCCL_BUFFSIZE", 4194304),
        ("NCCL_BUFFSIZE", 16777216),
        ("NCCL_MIN_NCHANNELS", 4),
        ("NCCL_MAX_NCHANNELS", 16),
        ("NCCL_SOCKET_NTHREADS", 1),
        ("NCCL_CUMEM_ENABLE", 0),
    ],
)
def test_a_setting_that_only_changes_nccls_choice_is_not(name: str, value: object) -> None:
    """Ring or Tree, LL128, more channels or larger buffers may be faster on a node: only a run says."""
    assert narrowing(name, value) is None
