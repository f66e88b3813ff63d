"""Which configs a failed forced run rules out: at least its memory on the parameters that move the
phase its OOM named (the shipped SkyRL space's ``phases``), NCCL's variables left aside."""

from __future__ import annotations

from nccl_tune.search_spaces.loader import load_space
from nccl_tune.tuner.search.forced_bound import at_least_the_memory

SPACE = load_space("skyrl-text2sql")
FAILED = {
    **SPACE.defaults(),
    "trainer.micro_train_batch_size_per_gpu": 4,
    "trainer.micro_forward_batch_size_per_gpu": 2,
    "trainer.max_prompt_length": 2048,
}


def test_more_memory_everywhere_is_ruled_out_and_nccl_does_not_matter():
    assert at_least_the_memory(SPACE, FAILED, FAILED)
    assert at_least_the_memory(
        SPACE, {**FAILED, "trainer.micro_train_batch_size_per_gpu": 8, "NCCL_ALGO": "Ring"}, FAILED
    )
    assert not at_least_the_memory(SPACE, {**FAILED, "trainer.micro_train_batch_size_per_gpu": 2}, FAILED)
    # CPU offload uses less memory: offloaded, it may fit where the failed one did not
    assert not at_least_the_memory(SPACE, {**FAILED, "trainer.policy.fsdp_config.cpu_offload": True}, FAILED)


def test_an_oom_in_one_phase_rules_out_by_the_parameters_of_that_phase_only():
    lower_forward = {**FAILED, "trainer.micro_forward_batch_size_per_gpu": 1}
    # the forward micro-batch does not move policy_train's peak: a policy_train OOM still rules it out
    assert at_least_the_memory(SPACE, lower_forward, FAILED, "policy_train")
    assert not at_least_the_memory(SPACE, lower_forward, FAILED)
    assert not at_least_the_memory(SPACE, lower_forward, FAILED, "fwd_logprobs_values_reward")
    lower_train = {**FAILED, "trainer.micro_train_batch_size_per_gpu": 1}
    assert at_least_the_memory(SPACE, lower_train, FAILED, "fwd_logprobs_values_reward")
    assert not at_least_the_memory(SPACE, lower_train, FAILED, "policy_train")
