"""A config in the space's own words."""

from nccl_tune.search_spaces.describe import describe
from nccl_tune.search_spaces.loader import load_space


def test_describe_leaves_out_unset_env_and_unchanged_values():
    space = load_space("skyrl-text2sql")
    base = space.defaults()
    values = {**base, "trainer.micro_train_batch_size_per_gpu": 4, "NCCL_PROTO": "LL128"}
    assert describe(space, values, base) == "micro_train_batch_size_per_gpu=4 NCCL_PROTO=LL128"
    assert "NCCL_ALGO" not in describe(space, values)
