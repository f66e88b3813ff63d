"""Hydra-style overrides: the value grammar, last value wins, and Hydra's refusals."""

from __future__ import annotations

import pytest

from twin.overrides import apply_overrides, parse_value
from twin.refusal import HYDRA_FULL_ERROR_HINT, SimConfigError

ENV = {"HOME": "/home/u"}


@pytest.mark.parametrize(
    "text, value",
    [
        ("256", 256),
        ("1.0e-6", 1e-6),
        ("1e-6", 1e-6),
        ("0.7", 0.7),
        ("true", True),
        ("False", False),
        ("null", None),
        ("grpo", "grpo"),
        ("'6000'", "6000"),
        ('["</sql>", "</solution>"]', ["</sql>", "</solution>"]),
        ("['/data/sql/train.parquet']", ["/data/sql/train.parquet"]),
        ("[]", []),
        ("{a: 1, b: [x, 2]}", {"a": 1, "b": ["x", 2]}),
    ],
)
def test_values_follow_hydra_grammar(text, value):
    assert parse_value(text) == value


def test_last_value_of_a_key_wins():
    cfg = apply_overrides(["trainer.micro_train_batch_size_per_gpu=1", "trainer.micro_train_batch_size_per_gpu=4"], ENV)
    assert cfg.get("trainer.micro_train_batch_size_per_gpu") == 4
    assert cfg.source_token["trainer.micro_train_batch_size_per_gpu"] == "trainer.micro_train_batch_size_per_gpu=4"


def test_interpolations_follow_their_target_unless_overridden():
    cfg = apply_overrides(["trainer.max_prompt_length=6000"], ENV)
    assert cfg.get("generator.max_input_length") == 6000
    assert cfg.get("data.train_data") == ["/home/u/data/gsm8k/train.parquet"]
    cfg = apply_overrides(["trainer.max_prompt_length=6000", "generator.max_input_length=29000"], ENV)
    assert cfg.get("generator.max_input_length") == 29000


def test_unknown_key_is_refused_with_hydras_message():
    with pytest.raises(SimConfigError) as err:
        apply_overrides(["trainer.micro_batch=4"], ENV)
    assert err.value.kind == "unknown_key"
    assert err.value.lines == (
        "Could not override 'trainer.micro_batch'.",
        "To append to your config use +trainer.micro_batch=4",
        "Key 'micro_batch' is not in struct",
        "    full_key: trainer.micro_batch",
        "    object_type=dict",
        "",
        HYDRA_FULL_ERROR_HINT,
    )
    assert "trainer.micro_batch" in str(err.value) and "\n" not in str(err.value)


def test_unknown_parent_is_named_as_the_missing_key():
    with pytest.raises(SimConfigError) as err:
        apply_overrides(["trainer.polcy.fsdp_config.cpu_offload=true"], ENV)
    assert "Key 'polcy' is not in struct" in err.value.lines
    assert "    full_key: trainer.polcy" in err.value.lines


def test_plus_adds_a_key_and_refuses_an_existing_one():
    cfg = apply_overrides(["+trainer.max_training_steps=3"], ENV)
    assert cfg.get("trainer.max_training_steps") == 3
    with pytest.raises(SimConfigError) as err:
        apply_overrides(["+trainer.seed=1"], ENV)
    assert err.value.lines[0] == "Could not append to config. An item is already at 'trainer.seed'."


def test_double_plus_adds_or_overrides_and_tilde_deletes():
    cfg = apply_overrides(["++trainer.seed=7", "++trainer.extra.x=1", "~trainer.dump_eval_results"], ENV)
    assert cfg.get("trainer.seed") == 7 and cfg.get("trainer.extra.x") == 1
    with pytest.raises(KeyError):
        cfg.get("trainer.dump_eval_results")
    with pytest.raises(SimConfigError) as err:
        apply_overrides(["~trainer.nope"], ENV)
    assert err.value.kind == "delete_missing"


@pytest.mark.parametrize(
    "token, type_name",
    [
        ("trainer.train_batch_size=abc", "Integer"),
        ("trainer.train_batch_size=2.5", "Integer"),
        ("trainer.placement.colocate_all=maybe", "Boolean"),
        ("generator.gpu_memory_utilization=high", "Float"),
    ],
)
def test_wrongly_typed_values_are_refused_at_merge(token, type_name):
    with pytest.raises(SimConfigError) as err:
        apply_overrides([token], ENV)
    assert err.value.kind == "type"
    assert err.value.lines[0] == f"Error merging override {token}"
    assert err.value.lines[1].endswith(f"could not be converted to {type_name}")


def test_a_token_without_equal_sign_is_a_parse_error():
    with pytest.raises(SimConfigError) as err:
        apply_overrides(["trainer.epochs"], ENV)
    assert err.value.kind == "parse" and err.value.lines[1] == "missing EQUAL at '<EOF>'"


def test_missing_environment_variable_in_interpolation_is_refused():
    with pytest.raises(SimConfigError) as err:
        apply_overrides([], {})
    assert err.value.kind == "interpolation" and "HOME" in str(err.value)
