"""NCCL's protocol and a gradient bucket size: the pairs the search tries together."""

from __future__ import annotations

from nccl_tune.node.nccl_interactions import for_large_messages, interacting_pairs
from nccl_tune.search_spaces.loader import parse_space


def space(params: str):
    return parse_space(f"name: s\nparameters:\n{params}", source="test", label="s")


PROTO = "  - {name: NCCL_PROTO, kind: categorical, choices: [LL, LL128, Simple], default: LL128, memory: small}\n"


def test_the_protocol_pairs_with_every_bucket_size_by_name_or_flag():
    s = space(
        PROTO
        + "  - {name: bucket_mb, arg: --bucket-mb, kind: categorical, choices: [25, 100], default: 25}\n"
        + "  - {name: reduce_size, arg: --zero.reduce_bucket_size, kind: categorical, choices: [1, 2], default: 1}\n"
        + "  - {name: micro, kind: pow2, low: 1, high: 8, default: 2}\n"
    )
    assert interacting_pairs(s.parameters) == (("NCCL_PROTO", "bucket_mb"), ("NCCL_PROTO", "reduce_size"))


def test_no_pair_without_the_protocol_or_without_a_bucket():
    bucket = "  - {name: bucket_mb, kind: categorical, choices: [25, 100], default: 25}\n"
    micro = "  - {name: micro, kind: pow2, low: 1, high: 8, default: 2}\n"
    assert interacting_pairs(space(bucket + micro).parameters) == ()
    assert interacting_pairs(space(PROTO + micro).parameters) == ()


def test_simple_is_the_protocol_for_large_messages():
    assert for_large_messages("Simple")
    assert not [p for p in ("LL", "LL128", "Simple,LL128", "unset") if for_large_messages(p)]
