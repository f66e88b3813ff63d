"""The memory a failed CUDA allocation shows the run needed, read from PyTorch's message."""

from __future__ import annotations

import pytest

from nccl_tune.oom_demand import oom_demand
from twin import logfmt

MESSAGE = logfmt.cuda_oom_message(
    gpu=5,
    tried_gib=27.18,
    capacity_gib=79.15,
    free_gib=0.05,
    process_gib=78.0,
    allocated_gib=70.0,
    reserved_unallocated_gib=2.0,
)


def test_in_use_plus_the_failed_allocation_is_a_lower_bound_on_the_need():
    d = oom_demand(["(FSDPPolicyWorkerBase pid=400105) torch.OutOfMemoryError: " + MESSAGE])
    assert d is not None and d.capacity_gib == pytest.approx(79.15)
    assert d.needed_gib == pytest.approx(79.15 - 0.05 + 27.18, abs=0.01)
    assert d.needed_frac == pytest.approx(d.needed_gib / 79.15)


def test_units_and_the_largest_of_several_messages():
    small = "CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 79.15 GiB of which 100.00 MiB is free."
    big = (
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.15 GiB of which 0 B is free."
    )
    d = oom_demand([small, "unrelated", big])
    assert d.needed_gib == pytest.approx(81.15)
    assert oom_demand([small]).needed_gib == pytest.approx(79.15 - 100 / 1024 + 0.5)
    assert oom_demand(["torch.OutOfMemoryError: no figures here"]) is None
