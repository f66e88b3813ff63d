"""Advice for a memory failure in the terms of the trial's own search space."""

from __future__ import annotations

from nccl_tune.diagnose.advice import space_memory_advice
from nccl_tune.failure import FailureClass as F
from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.trial import MemoryKnob
from nccl_tune.tuner.trials.trial_builder import memory_knobs

SPACE = """
name: ddp
parameters:
  - {name: batch_size, arg: --batch-size, kind: pow2, low: 1, high: 64, default: 8, memory: increasing}
  - {name: seq_len, arg: --seq-len, kind: categorical, choices: [128, 256, 512], default: 256, memory: increasing}
  - {name: checkpointing, arg: --checkpointing, arg_style: switch, kind: bool, default: false, memory: decreasing}
  - {name: offload, arg: --cpu-offload, kind: bool, default: true, memory: decreasing, host_memory: increasing}
  - {name: workers, arg: --num-workers, kind: int, low: 0, high: 4, default: 2, memory: none, host_memory: increasing}
"""


def knobs(**values):
    space = parse_space(SPACE, source="test", label="test")
    return memory_knobs(space, {**space.defaults(), **values})


def test_gpu_oom_names_the_spaces_memory_parameters_and_their_values():
    text = space_memory_advice(F.OOM, knobs(batch_size=32), "hf-trainer")
    assert text == (
        "Out of GPU memory: lower batch_size (--batch-size, now 32), or lower seq_len (--seq-len, now 256), "
        "or turn on checkpointing (--checkpointing, now false)"
    )
    assert "trainer." not in text and "workers" not in text


def test_values_already_at_their_smallest_memory_are_not_suggested():
    text = space_memory_advice(F.OOM, knobs(batch_size=1, seq_len=128, checkpointing=True), None)
    assert text.startswith("Out of GPU memory with every memory parameter of the space at its smallest setting")


def test_host_oom_names_the_host_memory_parameters_not_the_gpu_ones_nor_skyrl_keys():
    text = space_memory_advice(F.HOST_OOM, knobs(batch_size=16, checkpointing=True), "torchtitan")
    assert text == (
        "Host memory, not GPU memory, ran out; turn off offload (--cpu-offload, now true) where GPU memory allows, "
        "or lower workers (--num-workers, now 2); check other tenants with `free -g` and `dmesg | grep -i oom`"
    )
    assert "batch_size" not in text and "checkpointing" not in text  # they move GPU memory, not host RAM
    assert "fsdp_config" not in text and "n_samples_per_prompt" not in text


def test_memory_advice_of_unknown_origin_is_in_general_terms_and_skyrls_keys_only_for_skyrl():
    """``nccl-tune diagnose`` on a verl log whose worker Ray's memory monitor killed: the trainer is
    not known, so what lives in host RAM is said in general terms (SkyRL's key named as SkyRL's);
    a SkyRL run keeps SkyRL's keys."""
    from nccl_tune.diagnose.advice import advice_for_space, advise
    from nccl_tune.diagnose.wording import ANY_HOST_RAM_USERS, HOST_RAM_USERS, AdviceContext, host_memory

    text = host_memory("Ray's memory monitor killed a worker")
    assert HOST_RAM_USERS in text and HOST_RAM_USERS in advise(AdviceContext(F.HOST_OOM))
    assert advice_for_space(F.HOST_OOM, text, (), "skyrl") == text
    unknown = advice_for_space(F.HOST_OOM, text, (), None)
    assert unknown.endswith(ANY_HOST_RAM_USERS) and "generator.n_samples_per_prompt" not in unknown
    assert "SkyRL: trainer.policy/ref.fsdp_config.cpu_offload" in unknown and "DeepSpeed" in unknown
    # an OOM in no phase the log names: the same
    oom = advise(AdviceContext(F.OOM))
    assert "trainer.micro_train_batch_size_per_gpu" in oom and advice_for_space(F.OOM, oom, (), "skyrl") == oom
    general = advice_for_space(F.OOM, oom, (), None)
    assert general.startswith("Out of GPU memory: lower the micro-batch size or the sequence length")
    assert "(SkyRL: trainer.micro_train_batch_size_per_gpu" in general


def test_host_oom_at_the_smallest_host_memory_or_with_none_declared_says_so():
    smallest = space_memory_advice(F.HOST_OOM, knobs(offload=False, workers=0), "hf-trainer")
    assert "every host-memory parameter of the space is at its smallest setting" in smallest
    assert "offload (--cpu-offload, now false), workers (--num-workers, now 0)" in smallest
    gpu_only = tuple(k for k in knobs() if not k.host)
    undeclared = space_memory_advice(F.HOST_OOM, gpu_only, "hf-trainer")
    assert "declare host_memory: increasing or decreasing" in undeclared
    assert "batch_size" not in undeclared and "checkpointing" not in undeclared
    # a GPU OOM never names a knob that moves only host RAM
    assert "workers" not in space_memory_advice(F.OOM, knobs(batch_size=32), "hf-trainer")


def test_skyrl_and_other_classes_keep_the_logs_own_advice():
    assert space_memory_advice(F.OOM, knobs(), "skyrl") is None
    assert space_memory_advice(F.COLLECTIVE_TIMEOUT, knobs(), "hf-trainer") is None
    assert space_memory_advice(F.OOM, (), None) is None
    generic = space_memory_advice(F.OOM, (), "lightning")
    assert "declare memory: increasing or decreasing" in generic
    assert space_memory_advice(F.OOM, (MemoryKnob("NCCL_BUFFSIZE", "4194304", "increasing"),), None).startswith(
        "Out of GPU memory: lower NCCL_BUFFSIZE (now 4194304)"
    )


def test_a_timeout_outside_skyrl_does_not_name_skyrls_variable():
    from nccl_tune.diagnose.advice import advice_for_space, advise
    from nccl_tune.diagnose.wording import ANY_TIMEOUT_CLAUSE, SKYRL_TIMEOUT_CLAUSE, AdviceContext

    text = advise(AdviceContext(F.COLLECTIVE_TIMEOUT, rank=1))
    assert text.endswith(SKYRL_TIMEOUT_CLAUSE)
    assert advice_for_space(F.COLLECTIVE_TIMEOUT, text, knobs(), "skyrl") == text
    unknown = advice_for_space(F.COLLECTIVE_TIMEOUT, text, knobs(), None)  # a log of any origin: both ways
    assert unknown.endswith(ANY_TIMEOUT_CLAUSE) and "init_process_group(timeout=" in unknown
    assert "SKYRL_WORKER_NCCL_TIMEOUT_IN_S" in unknown
    other = advice_for_space(F.COLLECTIVE_TIMEOUT, text, knobs(), "torchtitan")
    assert (
        "SKYRL" not in other and other.startswith("Rank 1 is the likely one behind") and "init_process_group" in other
    )
    assert advice_for_space(F.OOM, "log advice", knobs(), "hf-trainer").startswith(
        "Out of GPU memory: lower batch_size"
    )
