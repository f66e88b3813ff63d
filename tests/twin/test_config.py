"""From overrides and environment to SimConfig: SkyRL's validation refusals and the twin's own
environment variables."""

from __future__ import annotations

import pytest

from twin import SimConfigError, parse_overrides, skyrl_sql_overrides
from twin.config import TIMEOUT_FLOOR_S
from twin.layout import Layout

ENV = {"HOME": "/h"}
BASE = skyrl_sql_overrides("/h")


def parse(*extra: str, env: dict | None = None, layout: Layout = Layout.TODAY):
    return parse_overrides([*skyrl_sql_overrides("/h", layout), *extra], {**ENV, **(env or {})}, layout)


def test_the_scripts_config_is_typed():
    cfg = parse()
    assert cfg.arch.name == "Qwen/Qwen2.5-Coder-7B-Instruct" and 7.6e9 < cfg.arch.params < 7.7e9
    assert (cfg.n_gpus, cfg.dp, cfg.num_engines, cfg.engine_tp) == (8, 8, 2, 4)
    assert (cfg.micro_train, cfg.micro_fwd, cfg.max_prompt_length, cfg.max_input_length) == (1, 8, 6000, 29000)
    assert cfg.samples_per_step == 256 * 5
    assert not cfg.use_ref and cfg.loggers == ("console",)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["trainer.policy_mini_batch_size=512"], None),
        (["trainer.train_batch_size=384"], "train_batch_size 384 should be divisible by policy_mini_batch_size 256"),
        (["trainer.micro_train_batch_size_per_gpu=0"], "micro_train_batch_size_per_gpu must be greater than 0"),
        (["trainer.micro_forward_batch_size_per_gpu=0"], "micro_forward_batch_size_per_gpu must be greater than 0"),
        (
            ["trainer.micro_train_batch_size_per_gpu=3"],
            "normalized policy_mini_batch_size_per_gpu 160 should be divisible by micro_train_batch_size_per_gpu 3",
        ),
        (
            ["trainer.policy_mini_batch_size=1", "trainer.train_batch_size=1", "generator.n_samples_per_prompt=1"],
            "Invalid policy_mini_batch_size_per_gpu: 0",
        ),
        (
            [
                "trainer.policy_mini_batch_size=96",
                "trainer.train_batch_size=384",
                "generator.n_samples_per_prompt=4",
                "trainer.micro_train_batch_size_per_gpu=1",
                "trainer.placement.policy_num_gpus_per_node=5",
                "generator.inference_engine.num_engines=5",
                "generator.inference_engine.tensor_parallel_size=1",
            ],
            "normalized policy_train_batch_size_per_gpu",
        ),
    ],
    ids=[
        "train<mini",
        "train%mini",
        "micro-train-0",
        "micro-fwd-0",
        "mini%micro",
        "mini-per-gpu-0",
        "train%mini-per-gpu",
    ],
)
def test_batch_size_relations_are_refused_like_validate_batch_sizes(extra, message):
    with pytest.raises(SimConfigError) as err:
        parse(*extra)
    assert err.value.kind == "validation"
    assert err.value.lines[0] == "Traceback (most recent call last):"  # today's entry point is not a Hydra app
    last = [ln for ln in err.value.lines if ln.startswith("AssertionError")]
    assert last, err.value.lines
    if message:
        assert message in last[0]
    else:
        assert last[0] == "AssertionError"  # SkyRL's first check is a bare assert
        assert "train_bs >= mini_bs" in str(err.value)


def test_a_legacy_refusal_is_wrapped_in_hydras_job_error():
    with pytest.raises(SimConfigError) as err:
        parse("trainer.train_batch_size=384", layout=Layout.LEGACY)
    assert err.value.lines[0].startswith("Error executing job with overrides:")
    assert err.value.lines[-1].startswith("Set the environment variable HYDRA_FULL_ERROR=1")


def test_prompt_length_coupling_single_and_multi_turn():
    with pytest.raises(SimConfigError) as err:
        parse("generator.max_turns=1")
    assert "max_input_length should be set equal to trainer.max_prompt_length for single-turn generation" in str(
        err.value
    )
    assert parse("generator.max_turns=1", "generator.max_input_length=6000").max_input_length == 6000
    with pytest.raises(SimConfigError) as err:
        parse("trainer.max_prompt_length=8192", "generator.max_input_length=4096")
    assert "greater than or equal to trainer.max_prompt_length for multi-turn generation" in str(err.value)


@pytest.mark.parametrize(
    "extra, env, message",
    [
        (
            ["generator.inference_engine.num_engines=1"],
            {},
            "num_policy_gpus (8) and num_rollout_gpus (4) must be the same when colocating all models",
        ),
        (["trainer.logger=wandb"], {}, "`WANDB_API_KEY` is required for `wandb` logger"),
        (
            ["trainer.algorithm.use_kl_loss=true", "trainer.algorithm.use_kl_in_reward=true"],
            {},
            "use_kl_in_reward and use_kl_loss should be mutually exclusive",
        ),
        (["trainer.algorithm.advantage_estimator=ppo"], {}, "invalid advantage_estimator: ppo"),
        (["trainer.max_training_steps=0"], {}, "max_training_steps must be > 0, got 0"),
    ],
)
def test_other_skyrl_checks(extra, env, message):
    with pytest.raises(SimConfigError) as err:
        parse(*extra, env=env)
    assert message in str(err.value)


def test_legacy_fsdp1_refuses_cpu_offload():
    with pytest.raises(SimConfigError) as err:
        parse("trainer.strategy=fsdp", "trainer.policy.fsdp_config.cpu_offload=true", layout=Layout.LEGACY)
    assert "fwd pass cpu offloading is not supported for FSDP1" in str(err.value)
    # Today's fsdp is FSDP2: the same values are accepted.
    assert parse("trainer.strategy=fsdp", "trainer.policy.fsdp_config.cpu_offload=true").policy_offload


def test_wandb_with_a_key_is_accepted():
    assert parse("trainer.logger=wandb", env={"WANDB_API_KEY": "x"}).loggers == ("wandb",)


def test_unknown_model_fails_as_huggingface_does():
    with pytest.raises(SimConfigError) as err:
        parse("trainer.policy.model.path=org/not-a-model")
    assert err.value.kind == "unknown_model"
    assert any("is not a local folder and is not a valid model identifier" in ln for ln in err.value.lines)


def test_environment_knobs():
    cfg = parse(
        env={
            "SIM_RANKS": "4",
            "SIM_TIME_SCALE": "0.01",
            "SIM_SEED": "9",
            "SKYRL_WORKER_NCCL_TIMEOUT_IN_S": "180",
            "TORCH_FR_DUMP_TEMP_FILE": "/x/fr_",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "0",
        }
    )
    e = cfg.env
    assert (e.ranks, e.time_scale, e.sim_seed, e.nccl_timeout_s, e.fr_dump_prefix, e.abort_on_error) == (
        4,
        0.01,
        9,
        180.0,
        "/x/fr_",
        False,
    )
    assert e.gloo_timeout_s == pytest.approx(1.8 if 1.8 > TIMEOUT_FLOOR_S else TIMEOUT_FLOOR_S)
    assert parse(env={"SKYRL_WORKER_NCCL_TIMEOUT_IN_S": "100000"}).env.gloo_timeout_s == pytest.approx(600.0)


@pytest.mark.parametrize(
    "env, text",
    [
        ({"SIM_RANKS": "9"}, "SIM_RANKS"),
        ({"SIM_RANKS": "two"}, "SIM_RANKS"),
        ({"SIM_TIME_SCALE": "-1"}, "SIM_TIME_SCALE"),
        ({"SIM_FAULT": "oom:5:1"}, "rank 5"),
        ({"SIM_FAULT": "explode"}, "cannot read 'explode'"),
        ({"SIM_FAULT": "slow:0"}, "must be > 0"),
        ({"SKYRL_WORKER_NCCL_TIMEOUT_IN_S": "10m"}, "SKYRL_WORKER_NCCL_TIMEOUT_IN_S"),
    ],
)
def test_bad_environment_is_refused_in_one_line(env, text):
    with pytest.raises(SimConfigError) as err:
        parse(env=env)
    assert text in str(err.value) and "\n" not in str(err.value)


def test_faults_parse():
    f = parse(env={"SIM_FAULT": "hang:1:3, oom:0:2,slow:1.5,orphan"}).env.faults
    assert [(x.kind, x.rank, x.step) for x in f.rank_faults] == [("hang", 1, 3), ("oom", 0, 2)]
    assert f.slow_factor == 1.5 and f.orphan
