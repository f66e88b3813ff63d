"""Optuna's spelling of a config and back: a power of two by its exponent, pinned values left out."""

from __future__ import annotations

from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.tuner.records.sampling import from_optuna, to_optuna

SPACE = parse_space(
    """
name: s
parameters:
  - {name: micro, kind: pow2, low: 1, high: 64, default: 2, memory: increasing}
  - {name: ckpt, kind: bool, default: false, memory: decreasing}
  - {name: NCCL_BUFFSIZE, kind: categorical, choices: [unset, 4194304], default: unset, memory: small}
""",
    source="test",
    label="s",
)


def test_a_config_spelled_for_optuna_reads_back_the_same():
    pinned = {"NCCL_BUFFSIZE": 4194304}
    values = {"micro": 32, "ckpt": True, "NCCL_BUFFSIZE": 4194304}
    params = to_optuna(SPACE, values, pinned)
    assert params == {"micro:log2": 5, "ckpt": True}
    assert from_optuna(SPACE, params, pinned) == values
