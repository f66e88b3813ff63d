"""Today's SkyRL command line (``SkyRLTrainConfig.from_cli_overrides``): which class refuses an
unknown key, the '+' prefix, removed keys, defaults and ``__post_init__``."""

from __future__ import annotations

import re

import pytest

from twin import SimConfigError, parse_overrides, skyrl_sql_overrides
from twin.dataclass_config import apply_dataclass_overrides
from twin.layout import Layout

ENV = {"HOME": "/h"}


def refusal(*tokens: str) -> SimConfigError:
    with pytest.raises(SimConfigError) as err:
        apply_dataclass_overrides(list(tokens), ENV)
    return err.value


def test_an_unknown_key_is_reported_against_its_class_with_every_valid_field():
    err = refusal("trainer.placement.colocate_all=true", "trainer.foo=1", "trainer.bar=2")
    last = err.lines[-1]
    m = re.fullmatch(r"ValueError: Invalid fields (\{.*\}) for TrainerConfig\. Valid fields are (\{.*\})\.", last)
    assert m, last
    assert eval(m.group(1)) == {"foo", "bar"} and {"max_training_steps", "log_path", "placement"} <= eval(m.group(2))
    assert err.kind == "unknown_key" and "trainer.bar, trainer.foo" in str(err) and "\n" not in str(err)


def test_the_first_class_in_field_order_is_the_one_reported():
    # A class checks its own keys before its fields' classes, and generator comes after trainer.
    assert (
        "for TrainerConfig."
        in refusal("generator.num_inference_engines=2", "trainer.placement.nodes=2", "trainer.oops=1").lines[-1]
    )
    assert "for PlacementConfig." in refusal("generator.num_inference_engines=2", "trainer.placement.nodes=2").lines[-1]
    assert "for GeneratorConfig." in refusal("generator.num_inference_engines=2").lines[-1]


def test_the_plus_prefix_and_removed_keys_are_refused():
    assert (
        "The '+' prefix for adding new config fields is not supported: '+trainer.x=1'"
        in refusal("+trainer.x=1").lines[-1]
    )
    assert "async_engine=False" in refusal("generator.inference_engine.async_engine=false").lines[-1]
    assert "remote_urls" in refusal("generator.inference_engine.remote_urls=[a]").lines[-1]
    assert "rope" in refusal("trainer.rope_theta=1000").lines[-1]
    # async_engine=true is dropped silently (SkyRL always runs the async engine).
    apply_dataclass_overrides(["generator.inference_engine.async_engine=true"], ENV)


def test_defaults_and_post_init():
    tree = apply_dataclass_overrides(
        [
            "trainer.max_prompt_length=300",
            "generator.sampling_params.max_generate_length=77",
            "trainer.use_sample_packing=false",
        ],
        ENV,
    ).tree
    assert tree["generator"]["max_input_length"] == 300
    assert (
        tree["trainer"]["ref"]["model"]["path"]
        == tree["trainer"]["policy"]["model"]["path"]
        == "Qwen/Qwen2.5-1.5B-Instruct"
    )
    assert tree["generator"]["eval_sampling_params"]["max_generate_length"] == 77
    assert tree["generator"]["eval_sampling_params"]["temperature"] == 0.0
    assert tree["trainer"]["remove_microbatch_padding"] is False and "use_sample_packing" not in tree["trainer"]
    assert tree["trainer"]["ckpt_path"] == "/h/ckpts/" and tree["trainer"]["log_path"] == "/tmp/skyrl-logs"
    assert tree["trainer"]["critic"]["optimizer_config"]["lr"] == 5e-06 and tree["trainer"]["strategy"] == "fsdp"
    # Naming eval_sampling_params builds it from the class defaults: max_generate_length falls back to 1024,
    # which is why SkyRL's text-to-SQL script now sets it.
    tree = apply_dataclass_overrides(["generator.eval_sampling_params.stop=[x]"], ENV).tree
    assert tree["generator"]["eval_sampling_params"]["max_generate_length"] == 1024


def test_the_scripts_config_and_its_step_cap():
    cfg = parse_overrides([*skyrl_sql_overrides("/h"), "trainer.max_training_steps=3"], ENV)
    assert cfg.layout is Layout.TODAY and cfg.max_training_steps == 3 and cfg.eval_max_generate_length == 3000
    assert (cfg.num_engines, cfg.engine_tp, cfg.gpu_memory_utilization, cfg.weight_sync_backend) == (2, 4, 0.7, "nccl")
    legacy = parse_overrides([*skyrl_sql_overrides("/h", Layout.LEGACY)], ENV, Layout.LEGACY)
    assert legacy.max_training_steps is None and legacy.num_engines == 2


def test_fsdp2_is_renamed_with_a_warning():
    cfg = parse_overrides([*skyrl_sql_overrides("/h"), "trainer.strategy=fsdp2"], ENV)
    assert cfg.strategy == "fsdp" and any("renamed to 'fsdp'" in w for w in cfg.warnings)


def test_a_number_given_as_text_fails_in_validation_not_at_merge():
    with pytest.raises(SimConfigError) as err:
        parse_overrides([*skyrl_sql_overrides("/h"), "trainer.train_batch_size=abc"], ENV)
    assert err.value.lines[-1].startswith("TypeError:") and "trainer.train_batch_size" in str(err.value)


def test_skyrl_sets_nccl_cumem_enable_0_for_its_workers_with_nccl_weight_sync():
    env = {**ENV, "NCCL_CUMEM_ENABLE": "1"}
    for layout in Layout:
        cfg = parse_overrides(skyrl_sql_overrides("/h", layout), env, layout)
        assert cfg.env.forced == {"NCCL_CUMEM_ENABLE": "0"} and cfg.env.nccl.cumem_enable is False
