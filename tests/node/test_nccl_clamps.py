"""The clamps NCCL applies to its socket variables (``ncclNetSocketGetNsockNthread``)."""

from __future__ import annotations

from nccl_tune.node.nccl_clamps import MAX_SOCKETS, clamps, effective


def test_sockets_past_64_run_as_64_over_the_threads():
    (c,) = clamps({"NCCL_SOCKET_NTHREADS": 16, "NCCL_NSOCKS_PERTHREAD": 8})
    assert (c.name, c.given, c.runs_as) == ("NCCL_NSOCKS_PERTHREAD", 8, 4)
    assert effective({"NCCL_SOCKET_NTHREADS": "12", "NCCL_NSOCKS_PERTHREAD": "8", "NCCL_ALGO": "Ring"}) == {
        "NCCL_SOCKET_NTHREADS": "12",
        "NCCL_NSOCKS_PERTHREAD": "5",
        "NCCL_ALGO": "Ring",
    }
    assert 12 * 5 <= MAX_SOCKETS


def test_threads_past_16_run_as_16_and_then_the_sockets_are_clamped_against_16():
    out = clamps({"NCCL_SOCKET_NTHREADS": "0x20", "NCCL_NSOCKS_PERTHREAD": 8})
    assert [(c.name, c.given, c.runs_as) for c in out] == [
        ("NCCL_SOCKET_NTHREADS", 32, 16),
        ("NCCL_NSOCKS_PERTHREAD", 8, 4),
    ]


def test_settings_within_the_limits_or_left_to_nccl_clamp_nothing():
    assert clamps({"NCCL_SOCKET_NTHREADS": 8, "NCCL_NSOCKS_PERTHREAD": 8}) == ()
    # unset: NCCL picks per cloud (AWS 2 x 8), so no product is known
    assert clamps({"NCCL_SOCKET_NTHREADS": 16, "NCCL_NSOCKS_PERTHREAD": "unset"}) == ()
    assert clamps({"NCCL_SOCKET_NTHREADS": "unset", "NCCL_NSOCKS_PERTHREAD": 64}) == ()
    assert clamps({}) == () and effective({"NCCL_ALGO": "Tree"}) == {"NCCL_ALGO": "Tree"}
