"""evaluate(): the run's timeline, its failures and determinism (its speed: benchmarks/twin_speed.py)."""

from __future__ import annotations

import pytest

from nccl_tune.failure import FailureClass
from twin import evaluate, parse_overrides, skyrl_sql_overrides

from .test_cost_model import TRIAL, outcome


def test_a_healthy_run_has_skyrls_phases_in_order():
    o = outcome(steps=2)
    assert o.ok and len(o.steps) == 2 and o.samples_per_step == 1280
    names = [p.name for p in o.phases if p.step == 1]
    assert names == [
        "step",
        "generate",
        "postprocess_generator_output",
        "convert_to_training_input",
        "fwd_logprobs_values_reward",
        "compute_advantages_and_returns",
        "train_critic_and_policy",
        "policy_train",
        "sync_weights",
    ]
    step = next(p for p in o.phases if p.name == "step" and p.step == 2)
    inner = [p for p in o.phases if p.step == 2 and p.depth == 1]
    assert step.duration_s == pytest.approx(sum(p.duration_s for p in inner))
    assert 150 < o.step_s < 400 and o.startup_s > 30


def test_total_steps_follow_epochs_and_the_prompt_filter():
    assert outcome("trainer.epochs=1", steps=10).total_steps == 2  # 650 kept prompts // 256
    short = outcome("trainer.train_batch_size=512", "trainer.max_prompt_length=2048", steps=3)
    assert short.total_steps == 0 and not short.steps and short.ok  # fewer kept prompts than one batch


def test_oom_is_reproducible_for_the_data_and_names_rank_and_step():
    a = outcome("trainer.micro_train_batch_size_per_gpu=8", seed=1)
    b = outcome("trainer.micro_train_batch_size_per_gpu=8", seed=2)
    assert a.failure.failure_class is FailureClass.OOM and a.failure.phase == "policy_train"
    assert (a.failure.rank, a.failure.step) == (b.failure.rank, b.failure.step)
    c = outcome("trainer.micro_train_batch_size_per_gpu=8", "trainer.seed=7", seed=1)
    assert c.failure.failure_class is FailureClass.OOM
    f = a.failure
    assert f.exit_s == pytest.approx(f.at_s + 600 + 3.0)  # others time out after SKYRL_WORKER_NCCL_TIMEOUT_IN_S
    assert f.evidence[0].startswith("(FSDPPolicyWorkerBase pid=")
    assert f"GPU {f.rank} has a total capacity of 79.15 GiB" in f.evidence[0]
    assert "micro_train_batch_size_per_gpu" in f.advice
    assert max(a.gpu_peak_gib) == pytest.approx(79.15)


def test_oom_in_the_forward_pass_names_the_forward_micro_batch():
    f = outcome("trainer.micro_forward_batch_size_per_gpu=32").failure
    assert f.failure_class is FailureClass.OOM and f.phase == "fwd_logprobs_values_reward"
    assert "micro_forward_batch_size_per_gpu" in f.advice


def test_near_the_wall_some_seeds_stall_instead():
    # 32 MiB NCCL buffers put this config at ~97% of the GPU: inside the band where ranks may stall.
    extra = ("trainer.micro_train_batch_size_per_gpu=5", "trainer.max_prompt_length=8192")
    env = {"NCCL_BUFFSIZE": "33554432"}
    assert 0.96 < outcome(*extra, env=env, seed=0).peak_mem_gib / 79.15 < 1.0
    kinds = [getattr(outcome(*extra, env=env, seed=seed).failure, "kind", None) for seed in range(40)]
    assert "hang_memory" in kinds and None in kinds
    f = outcome(*extra, env=env, seed=kinds.index("hang_memory")).failure
    assert f.failure_class is FailureClass.HANG and f.rank is not None and "%" in f.advice
    # With the default buffers the same config is below the band and never stalls.
    assert all(outcome(*extra, seed=s).ok for s in range(20))


def test_cumem_never_reaches_nccl_with_nccl_weight_sync():
    # SkyRL sets NCCL_CUMEM_ENABLE=0 for its workers: the run is the one without the variable.
    plain = [outcome(seed=s) for s in range(10)]
    cumem = [outcome(env={"NCCL_CUMEM_ENABLE": "1"}, seed=s) for s in range(10)]
    assert [o.step_times_s for o in cumem] == [o.step_times_s for o in plain]
    assert all(o.ok for o in cumem)


def test_sim_fault_drives_the_model_too():
    f = outcome(env={"SIM_FAULT": "crash:1:2"}).failure
    assert (f.failure_class, f.rank, f.step, f.phase) == (FailureClass.CRASH, 1, 2, "policy_train")
    f = outcome(env={"SIM_FAULT": "hang:0:0"}).failure
    assert (f.failure_class, f.step, f.phase) == (FailureClass.HANG, 0, "sync_weights")
    slow = outcome(env={"SIM_FAULT": "slow:2"}, seed=4)
    assert slow.steps[1].duration_s == pytest.approx(2 * outcome(seed=4).steps[1].duration_s)


def test_placement_beyond_the_node_is_an_init_failure():
    f = outcome("trainer.placement.colocate_all=false").failure
    assert f.failure_class is FailureClass.INIT_FAILURE and "16 GPUs" in f.advice


def test_env_argument_replaces_the_parsed_environment():
    cfg = parse_overrides([*skyrl_sql_overrides("/h"), *TRIAL], {"HOME": "/h"})
    assert evaluate(cfg, env={"NCCL_PROTO": "bogus"}).failure.kind == "nccl_error"
    assert evaluate(cfg).ok


FWD, TRAIN = "fwd_logprobs_values_reward", "policy_train"


def test_each_step_records_the_peak_of_each_phase_it_ran():
    # the script's micro-batches (forward 8, training 1): the forward pass is the step's peak
    o = outcome(steps=3)
    assert sorted(o.step_phase_memory_gib) == sorted(o.step_memory_gib) == [1, 2, 3]
    for step, by_phase in o.step_phase_memory_gib.items():
        assert set(by_phase) == {FWD, TRAIN} and by_phase[FWD] > by_phase[TRAIN] + 5
        assert max(by_phase.values()) == max(o.step_memory_gib[step])
    assert max(max(p.values()) for p in o.step_phase_memory_gib.values()) == o.peak_mem_gib
    # each phase moves with its own micro-batch only
    small_fwd = outcome("trainer.micro_forward_batch_size_per_gpu=4", steps=1).step_phase_memory_gib[1]
    big_train = outcome("trainer.micro_train_batch_size_per_gpu=2", steps=1).step_phase_memory_gib[1]
    base = o.step_phase_memory_gib[1]
    assert small_fwd[FWD] < base[FWD] - 5 and small_fwd[TRAIN] == base[TRAIN] and small_fwd[TRAIN] > small_fwd[FWD]
    assert big_train[TRAIN] > base[TRAIN] + 5 and big_train[FWD] == base[FWD]


def test_a_failing_step_records_the_phases_it_reached():
    fwd = outcome("trainer.micro_forward_batch_size_per_gpu=32")
    assert fwd.failure.phase == FWD and fwd.step_phase_memory_gib == {1: {FWD: pytest.approx(79.15)}}
    train = outcome("trainer.micro_train_batch_size_per_gpu=8")
    (step,) = train.step_phase_memory_gib
    assert train.failure.phase == TRAIN and step == train.failure.step
    by_phase = train.step_phase_memory_gib[step]
    assert by_phase[TRAIN] == pytest.approx(79.15) and by_phase[FWD] < 79.15 - 5
    assert max(train.step_memory_gib[step]) == max(by_phase.values())


LONG = ("trainer.epochs=100",)


def _step_peaks(o) -> list[float]:
    return [max(o.step_memory_gib[k]) for k in sorted(o.step_memory_gib)]


def test_a_config_with_headroom_on_its_first_steps_runs_out_later_in_a_long_run():
    """Step lengths have a long tail: micro-batch 4 keeps >= 10% headroom over its first four
    steps for most data orders, and runs out of memory (or stalls at the wall) within 200 steps."""
    late = 0
    for data_seed in range(6):
        o = outcome("trainer.micro_train_batch_size_per_gpu=4", f"trainer.seed={data_seed}", *LONG, steps=200)
        first = max(_step_peaks(o)[:4])
        if first <= 0.9 * o.gpu_capacity_gib and o.failure is not None:
            assert o.failure.step > 4 and o.failure.kind in ("oom", "hang_memory")
            late += 1
    assert late >= 3
    again = outcome("trainer.micro_train_batch_size_per_gpu=4", "trainer.seed=0", *LONG, steps=200, seed=7)
    first_run = outcome("trainer.micro_train_batch_size_per_gpu=4", "trainer.seed=0", *LONG, steps=200)
    assert again.step_tokens[3] == first_run.step_tokens[3]  # the data order, not the run seed


def test_step_tokens_stay_within_what_the_config_allows_and_vary():
    o = outcome("trainer.micro_train_batch_size_per_gpu=1", *LONG, steps=200)
    assert o.ok and len(o.step_tokens) == 200
    longest = [t.max_num_tokens for t in o.step_tokens.values()]
    assert max(longest) <= o.worst_response_tokens and max(longest) > 1.6 * sorted(longest)[100]
    assert all(t.min_num_tokens <= t.avg_num_tokens <= t.max_num_tokens for t in o.step_tokens.values())
    assert max(t.longest_seq for t in o.step_tokens.values()) <= o.worst_seq_tokens


def test_forcing_the_longest_generations_reaches_the_worst_case_every_step():
    forced = outcome(
        "generator.sampling_params.additional_kwargs={min_tokens:3000}",
        "trainer.micro_train_batch_size_per_gpu=1",
        steps=2,
    )
    normal = outcome("trainer.micro_train_batch_size_per_gpu=1", steps=2)
    assert {t.max_num_tokens for t in forced.step_tokens.values()} == {int(forced.worst_response_tokens)}
    assert forced.peak_mem_gib > normal.peak_mem_gib + 10 and forced.step_s > normal.step_s
    short = outcome("generator.sampling_params.additional_kwargs={min_tokens:100}", steps=1)
    assert short.step_tokens[1] == normal.step_tokens[1]  # min_tokens below the cap forces nothing
