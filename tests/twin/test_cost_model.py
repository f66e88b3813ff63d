"""The cost model's shape: what a user of the real node relies on it to reproduce."""

from __future__ import annotations

import itertools

import pytest

from twin import cost_model as cm
from twin import evaluate, parse_overrides, skyrl_sql_overrides

TRIAL = (
    "trainer.eval_before_train=false",
    "trainer.eval_interval=-1",
    "trainer.ckpt_interval=-1",
    "trainer.hf_save_interval=-1",
    "trainer.resume_mode=none",
    "trainer.dump_data_batch=false",
)


def outcome(*extra: str, env: dict | None = None, seed: int = 0, steps: int = 3):
    cfg = parse_overrides([*skyrl_sql_overrides("/h"), *TRIAL, *extra], {"HOME": "/h", **(env or {})})
    return evaluate(cfg, seed=seed, steps=steps)


def memory(*extra: str, env: dict | None = None) -> tuple[float, float]:
    """(peak of fwd_logprobs, peak of policy_train) on the GPU holding step 1's longest sequence."""
    o = outcome(*extra, env=env, steps=0)
    return max(o.memory_phase_gib["fwd_logprobs_values_reward"]), max(o.memory_phase_gib["policy_train"])


@pytest.mark.parametrize(
    "key, values, phase",
    [
        ("trainer.micro_train_batch_size_per_gpu", (1, 2, 4, 8, 16), 1),
        ("trainer.micro_forward_batch_size_per_gpu", (1, 2, 4, 8, 16, 32), 0),
        ("trainer.max_prompt_length", (2048, 4096, 6000, 8192), 1),
        ("generator.sampling_params.max_generate_length", (512, 1024, 3000), 1),
    ],
)
def test_memory_grows_with_micro_batch_and_sequence_length(key, values, phase):
    peaks = [memory(f"{key}={v}")[phase] for v in values]
    assert all(a < b for a, b in zip(peaks, peaks[1:])), peaks


def test_offload_lowers_memory_and_raises_time():
    for micro in (1, 2, 4):
        on = outcome(f"trainer.micro_train_batch_size_per_gpu={micro}", "trainer.policy.fsdp_config.cpu_offload=true")
        off = outcome(f"trainer.micro_train_batch_size_per_gpu={micro}", "trainer.policy.fsdp_config.cpu_offload=false")
        assert max(on.memory_phase_gib["policy_train"]) < max(off.memory_phase_gib["policy_train"]) - 10
        assert on.phase_s["policy_train"] > off.phase_s["policy_train"] * 1.1


def test_bigger_micro_batches_are_faster_until_memory_runs_out():
    times = {}
    for micro in (1, 2, 4, 8):
        o = outcome(f"trainer.micro_train_batch_size_per_gpu={micro}")
        times[micro] = (o.step_s, o.failure.kind if o.failure else None)
    assert times[1][0] > times[2][0] > times[4][0] > times[8][0]
    assert [times[m][1] for m in (1, 2, 4)] == [None, None, None]
    assert times[8][1] == "oom"


def test_the_best_stable_config_sits_near_the_wall_and_not_in_a_corner():
    micro_train, micro_fwd, offload = (1, 2, 4, 8, 16), (1, 2, 4, 8, 16, 32), (False, True)
    stable = []
    for mt, mf, off in itertools.product(micro_train, micro_fwd, offload):
        o = outcome(
            f"trainer.micro_train_batch_size_per_gpu={mt}",
            f"trainer.micro_forward_batch_size_per_gpu={mf}",
            f"trainer.policy.fsdp_config.cpu_offload={str(off).lower()}",
            steps=1,
        )
        if o.ok and o.peak_mem_gib < 0.95 * o.gpu_capacity_gib:
            stable.append((o.step_s, mt, mf, off, o.peak_mem_gib / o.gpu_capacity_gib))
    best = min(stable)
    _, mt, mf, off, frac = best
    assert mt not in (micro_train[0], micro_train[-1]) and mf not in (micro_fwd[0], micro_fwd[-1])
    assert not off and frac > 0.75, best


@pytest.mark.parametrize(
    "env, slower_than",
    [
        ({"NCCL_P2P_DISABLE": "1"}, 1.5),
        ({"NCCL_PROTO": "LL"}, 1.02),
        ({"NCCL_MAX_NCHANNELS": "2"}, 1.05),
    ],
)
def test_bad_nccl_settings_slow_the_step(env, slower_than):
    base = outcome("trainer.micro_train_batch_size_per_gpu=2")
    slow = outcome("trainer.micro_train_batch_size_per_gpu=2", env=env)
    assert slow.step_s > base.step_s * slower_than


NOT_NCCL_SYNC = "generator.inference_engine.weight_sync_backend=delta"
"""With weights not synced over NCCL, SkyRL leaves NCCL_CUMEM_ENABLE alone and the variable reaches NCCL."""


def test_skyrl_forces_cumem_off_with_nccl_weight_sync():
    cumem_cfg = parse_overrides([*skyrl_sql_overrides("/h")], {"HOME": "/h", "NCCL_CUMEM_ENABLE": "1"})
    assert not cm.comm_model(cumem_cfg.env.nccl, 8).nvls
    assert memory("trainer.micro_train_batch_size_per_gpu=4") == memory(
        "trainer.micro_train_batch_size_per_gpu=4", env={"NCCL_CUMEM_ENABLE": "1"}
    )


def test_nvls_needs_cumem_and_is_faster_but_costs_memory():
    plain = cm.comm_model(parse_overrides([*skyrl_sql_overrides("/h")], {"HOME": "/h"}).env.nccl, 8)
    cumem_cfg = parse_overrides([*skyrl_sql_overrides("/h"), NOT_NCCL_SYNC], {"HOME": "/h", "NCCL_CUMEM_ENABLE": "1"})
    cumem = cm.comm_model(cumem_cfg.env.nccl, 8)
    assert not plain.nvls and cumem.nvls and cumem.choice["AllGather"] == ("NVLS", "Simple")
    assert cumem.busbw["AllGather"] > plain.busbw["AllGather"]
    fwd0, train0 = memory("trainer.micro_train_batch_size_per_gpu=4", NOT_NCCL_SYNC)
    fwd1, train1 = memory("trainer.micro_train_batch_size_per_gpu=4", NOT_NCCL_SYNC, env={"NCCL_CUMEM_ENABLE": "1"})
    assert train1 > train0 + 5
    # Forcing NVLS for every collective leaves Broadcast (ring only) without an algorithm.
    assert (
        "function Broadcast"
        in outcome(NOT_NCCL_SYNC, env={"NCCL_ALGO": "NVLS", "NCCL_CUMEM_ENABLE": "1"}).failure.detail["warn"]
    )
    scoped = outcome(
        NOT_NCCL_SYNC, env={"NCCL_ALGO": "allgather:NVLS;reducescatter:NVLS", "NCCL_CUMEM_ENABLE": "1"}
    ).failure
    assert scoped is None or scoped.kind != "nccl_error"


@pytest.mark.parametrize(
    "env, warn",
    [
        (
            {"NCCL_ALGO": "Tree"},
            "No algorithm/protocol available for function Broadcast with datatype ncclFloat32. NCCL_ALGO was set to Tree.",
        ),
        ({"NCCL_PROTO": "LL129"}, 'Unrecognized element token "LL129" when parsing "LL129"'),
        ({"NCCL_SOCKET_IFNAME": "enp1s0"}, "Bootstrap : no socket interface found"),
    ],
)
def test_nccl_refusals_fail_at_start(env, warn):
    o = outcome(env=env)
    f = o.failure
    assert f is not None and f.kind == "nccl_error" and f.step == 0 and not o.steps
    assert f.detail["warn"] == warn and any("NCCL WARN " + warn in ln for ln in f.evidence)


def test_socket_ifname_that_matches_is_fine():
    assert outcome(env={"NCCL_SOCKET_IFNAME": "eth"}).ok
    assert outcome(env={"NCCL_SOCKET_IFNAME": "^docker,lo"}).ok


@pytest.mark.parametrize(
    "util, text",
    [
        (0.99, "Free memory on device"),
        (0.05, "No available memory for the cache blocks"),
        (0.075, "max seq len (32000) is larger than the maximum number of tokens"),
    ],
)
def test_vllm_budget_checks_at_start(util, text):
    f = outcome(f"generator.inference_engine.gpu_memory_utilization={util}").failure
    assert f is not None and f.kind == "vllm_memory" and text in f.evidence[0]


def test_more_kv_cache_makes_generation_faster_down_to_a_point():
    gen = [
        outcome(f"generator.inference_engine.gpu_memory_utilization={u}").phase_s["generate"] for u in (0.15, 0.3, 0.7)
    ]
    assert gen[0] > gen[1] >= gen[2]


def test_noise_is_seeded_and_small_and_the_first_step_is_slower():
    a, b, c = outcome(seed=1), outcome(seed=1), outcome(seed=2)
    assert a.step_times_s == b.step_times_s and a.step_times_s != c.step_times_s
    for o in (a, c):
        assert o.step_times_s[0] > max(o.step_times_s[1:])
        for t in o.step_times_s[1:]:
            assert abs(t / o.step_s - 1) < 0.12
