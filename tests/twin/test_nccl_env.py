"""NCCL's own reading of its environment variables."""

from __future__ import annotations

import pytest

from twin.nccl_env import ALGORITHMS, read_nccl_env, strtoll


def test_unset_allows_everything():
    s = read_nccl_env({})
    assert s.allowed("AllGather") == (frozenset(ALGORITHMS), frozenset({"LL", "LL128", "Simple"}))
    assert not s.problems and s.cumem_enable is None and s.nvls_enable == 2


@pytest.mark.parametrize(
    "value, function, algos",
    [
        ("Ring", "AllGather", {"Ring"}),
        ("ring,nvls", "ReduceScatter", {"Ring", "NVLS"}),
        ("^Tree", "AllReduce", set(ALGORITHMS) - {"Tree"}),
        ("Ring;allreduce:Tree", "AllReduce", {"Tree"}),
        ("Ring;allreduce:Tree", "AllGather", {"Ring"}),
    ],
)
def test_algorithm_lists_follow_parse_list(value, function, algos):
    s = read_nccl_env({"NCCL_ALGO": value})
    assert s.allowed(function)[0] == frozenset(algos) and not s.problems


@pytest.mark.parametrize(
    "var, value, warn",
    [
        ("NCCL_ALGO", "Rings", 'Unrecognized element token "Rings" when parsing "Rings"'),
        ("NCCL_PROTO", "LL,Fast", 'Unrecognized element token "Fast" when parsing "LL,Fast"'),
        ("NCCL_ALGO", "gather:Ring", 'Unrecognized prefix token "gather" when parsing "gather:Ring"'),
        ("NCCL_PROTO", "Simple;LL", 'All entries except the first must have a prefix: "Simple;LL"'),
    ],
)
def test_bad_lists_are_what_nccl_refuses(var, value, warn):
    s = read_nccl_env({var: value})
    assert [p.warn for p in s.problems] == [warn]
    assert s.problems[0].error == "invalid usage"


def test_integers_are_read_with_strtoll():
    assert (strtoll("8"), strtoll("0x10"), strtoll("010"), strtoll("12abc"), strtoll("abc"), strtoll("-3")) == (
        8,
        16,
        8,
        12,
        0,
        -3,
    )
    s = read_nccl_env(
        {"NCCL_P2P_DISABLE": "1", "NCCL_MIN_NCHANNELS": "32", "NCCL_BUFFSIZE": "8388608", "NCCL_CUMEM_ENABLE": "0"}
    )
    assert s.p2p_disable and s.min_nchannels == 32 and s.buffsize_bytes == 8 << 20 and s.cumem_enable is False
    assert not read_nccl_env({"NCCL_P2P_DISABLE": "yes"}).p2p_disable  # strtoll("yes") is 0, as in NCCL
