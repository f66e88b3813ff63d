"""Memory effects a space leaves unknown, learnt from the runs: the synthetic study of
``test_memory_model`` (peak = static by ZeRO stage + context + activations growing with the
micro-batch, checkpointing keeping 15% of them) in a space that declares no memory effect at all."""

from __future__ import annotations

from dataclasses import replace

from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.search_spaces.space import MemoryEffect
from nccl_tune.trial import GpuMemory, MemoryReport
from nccl_tune.tuner.search.local_search import Planner
from nccl_tune.tuner.search.memory_effects import learnt_space
from nccl_tune.tuner.search.memory_model import MemoryModel
from tests.tuner.search.test_memory_model import launched

UNSAID = parse_space(
    """
name: unsaid
parameters:
  - {name: micro, kind: pow2, low: 1, high: 64, default: 1}
  - {name: ckpt, kind: bool, default: false}
  - {name: zero, kind: categorical, choices: [1, 2, 3], default: 1}
  - {name: comm_algo, kind: categorical, choices: [ring, tree], default: ring}
stability: {min_headroom_frac: 0.05}
""",
    source="test",
    label="unsaid",
)
BASE = UNSAID.defaults()


def study(*configs: dict):
    return [launched(i, {**BASE, **c}) for i, c in enumerate(configs)]


def effects(space) -> dict[str, MemoryEffect]:
    return {p.name: p.memory for p in space.parameters}


def test_runs_that_differ_in_one_parameter_show_its_direction_and_the_rest_stays_unknown():
    runs = study({}, {"micro": 4}, {"ckpt": True}, {"comm_algo": "tree"}, {"micro": 4, "comm_algo": "tree"})
    assert effects(learnt_space(UNSAID, runs)) == {
        "micro": MemoryEffect.INCREASING,
        "ckpt": MemoryEffect.DECREASING,
        "zero": MemoryEffect.UNKNOWN,  # no run changed it
        "comm_algo": MemoryEffect.SMALL,  # two pairs, the same peak
    }
    assert all(p.memory is MemoryEffect.UNKNOWN for p in UNSAID.parameters)  # the space itself is kept
    # one pair alike is not enough to call a value small
    assert effects(learnt_space(UNSAID, runs[:4]))["comm_algo"] is MemoryEffect.UNKNOWN


def test_a_run_out_of_memory_next_to_one_that_finished_shows_the_direction():
    runs = study({"micro": 16}, {"micro": 2})  # 16 needs 100 GiB of 80: out of memory
    assert runs[0].status.value == "oom"
    assert effects(learnt_space(UNSAID, runs))["micro"] is MemoryEffect.INCREASING


def test_pairs_that_change_two_things_disagree_or_follow_no_order_show_nothing():
    two = study({}, {"micro": 4, "ckpt": True})  # which of the two moved it?
    assert learnt_space(UNSAID, two) is UNSAID
    words = parse_space(
        UNSAID.text.replace(
            "default: ring}",
            "default: ring}\n  - {name: attn, kind: categorical, choices: [sdpa, eager], default: sdpa}",
        ),
        source="test",
        label="words",
    )
    base = words.defaults()
    eager = launched(1, {**base, "attn": "eager"})
    eager = replace(eager, result=replace(eager.result, memory=MemoryReport("nvml", (GpuMemory(0, 80.0, 60.0),))))
    runs = [launched(0, base), eager]  # eager takes 60 GiB where sdpa took 36: it moves memory, in no order
    assert effects(learnt_space(words, runs))["attn"] is MemoryEffect.UNKNOWN
    up, down = study({}, {"micro": 4}), study({"ckpt": True}, {"ckpt": True, "micro": 4})
    down[1] = replace(down[1], result=replace(down[1].result, memory=MemoryReport("nvml", (GpuMemory(0, 80.0, 20.0),))))
    assert effects(learnt_space(UNSAID, [*up, *down]))["micro"] is MemoryEffect.UNKNOWN  # up once, down once


def test_a_space_that_declares_nothing_gets_a_memory_model_from_its_runs():
    runs = study({}, {"micro": 2}, {"micro": 4}, {"micro": 16})
    blind = MemoryModel(UNSAID, runs)  # micro 32 next to the OOM at 16: a guess, never a refusal
    assert blind.p_fits({**BASE, "micro": 32}) >= 0.1 and blind.verdict({**BASE, "micro": 32}) is None
    planner = Planner(UNSAID, {}, runs)
    assert planner.space.param("micro").memory is MemoryEffect.INCREASING
    assert planner.memory.knows({**BASE, "micro": 32}) and planner.memory.p_fits({**BASE, "micro": 32}) < 0.05
    assert planner.memory.verdict({**BASE, "micro": 32}) is not None  # above the OOM at 16: refused
