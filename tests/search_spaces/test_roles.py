"""A space that leaves ``memory:`` out: the parameter's name (or flag) gives the effect where it can,
and the space says so; an effect the space writes, ``unknown`` included, stays."""

from __future__ import annotations

import sys

import pytest

from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.search_spaces.space import MemoryEffect
from tests.tuner.conftest import run_cli

UNSAID = """
name: unsaid
parameters:
  - {name: micro_batch, kind: pow2, low: 1, high: 16, default: 2}
  - {name: mb, arg: --per-device-train-batch-size, kind: categorical, choices: [1, 2, 4], default: 2}
  - {name: offload_optimizer, kind: bool, default: false}
  - {name: recompute_granularity, kind: categorical, choices: [none, selective, full], default: full}
  - {name: activation_checkpointing, kind: bool, default: true, memory: unknown}
  - {name: num_workers, kind: int, low: 0, high: 8, default: 2}
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree], default: unset}
  - {name: fused_adam, kind: bool, default: false}
"""
INC, DEC, NONE, SMALL, UNK = (MemoryEffect(m) for m in ("increasing", "decreasing", "none", "small", "unknown"))


def test_an_effect_left_out_is_taken_from_the_name_where_the_values_can_carry_it():
    space = parse_space(UNSAID, source="t", label="t")
    got = {p.name: (p.memory, p.host_memory, p.memory_from_name) for p in space.parameters}
    assert got == {
        "micro_batch": (INC, UNK, ("memory",)),
        "mb": (INC, UNK, ("memory",)),  # its flag names a batch size
        "offload_optimizer": (DEC, INC, ("memory", "host_memory")),
        "recompute_granularity": (UNK, UNK, ()),  # words: their order is the space's, not memory's
        "activation_checkpointing": (UNK, UNK, ()),  # written unknown: kept
        "num_workers": (NONE, INC, ("memory", "host_memory")),
        "NCCL_ALGO": (SMALL, UNK, ("memory",)),
        "fused_adam": (UNK, UNK, ()),
    }


def test_what_a_space_writes_is_never_replaced():
    text = UNSAID.replace("default: 2}", "default: 2, memory: decreasing, host_memory: none}", 1)
    micro = parse_space(text, source="t", label="t").param("micro_batch")
    assert (micro.memory, micro.host_memory, micro.memory_from_name) == (DEC, NONE, ())


@pytest.mark.parametrize("where", ["show", "run"])
def test_the_space_and_the_run_say_which_effects_came_from_names_and_which_are_unknown(tmp_path, where):
    (tmp_path / "s.yaml").write_text(UNSAID + "clocks: {startup_timeout_s: 5, trial_timeout_s: 5}\n")
    run = ["run", "--space", "s.yaml", "--trials", "1", "--", sys.executable, "-c", "raise SystemExit(3)"]
    args = ["spaces", "show", "s.yaml"] if where == "show" else run
    proc = run_cli(args, cwd=tmp_path)
    line = next(line for line in proc.stdout.splitlines() if "memory effects" in line)
    assert "taken from their names: micro_batch increasing, mb increasing, offload_optimizer decreasing" in line
    assert "unknown: recompute_granularity, activation_checkpointing, fused_adam" in line
    if where == "show":
        assert (
            "memory increasing (from its name)" in proc.stdout
            and "host memory increasing (from its name)" in proc.stdout
        )
