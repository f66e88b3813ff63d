"""--set: pinning parameters and context values, and refusing what the space lacks."""

import pytest

from nccl_tune.errors import NcclTuneError
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.tuner.records.pins import apply_pins, parse_pin


@pytest.fixture
def space():
    return load_space("skyrl-text2sql")


def test_pins_are_coerced_to_the_parameters_values(space):
    _, pins = apply_pins(
        space,
        (
            ("trainer.micro_train_batch_size_per_gpu", "4"),
            ("trainer.policy.fsdp_config.cpu_offload", "true"),
            ("NCCL_ALGO", "Ring"),
        ),
    )
    assert pins.params == {
        "trainer.micro_train_batch_size_per_gpu": 4,
        "trainer.policy.fsdp_config.cpu_offload": True,
        "NCCL_ALGO": "Ring",
    }


def test_context_pins_change_what_the_rules_read(space):
    pinned, pins = apply_pins(space, (("generator.n_samples_per_prompt", "8"),))
    assert pins.context == {"generator.n_samples_per_prompt": 8}
    values = {
        **space.defaults(),
        "trainer.policy_mini_batch_size": 32,
        "trainer.train_batch_size": 64,
        "trainer.micro_train_batch_size_per_gpu": 16,
    }
    # 32 * 5 // 8 = 20 is not divisible by 16, but 32 * 8 // 8 = 32 is
    assert space.violations(values) and not pinned.violations(values)


@pytest.mark.parametrize(
    "pair, message",
    [
        (("trainer.not_there", "1"), "has no parameter or context value trainer.not_there"),
        (
            ("trainer.micro_train_batch_size_per_gpu", "3"),
            "'3' is not a value of trainer.micro_train_batch_size_per_gpu",
        ),
        (("NCCL_PROTO", "Fast"), "'Fast' is not a value of NCCL_PROTO; choose one of: unset, Simple, LL128, LL"),
        (("generator.n_samples_per_prompt", "many"), "is an integer"),
    ],
)
def test_bad_pins_are_refused_with_the_fix(space, pair, message):
    with pytest.raises(NcclTuneError, match=message.replace("(", r"\(").replace(")", r"\)")):
        apply_pins(space, (pair,))


def test_pin_syntax():
    assert parse_pin(" a.b = 3 ") == ("a.b", "3")
    with pytest.raises(NcclTuneError, match="expected KEY=VALUE"):
        parse_pin("a.b")
