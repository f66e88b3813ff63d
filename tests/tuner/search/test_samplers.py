"""make_sampler: each name a study can ask for builds its sampler, seeded."""

from __future__ import annotations

import optuna

from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.tuner.search.local_search import LocalSearchSampler
from nccl_tune.tuner.search.samplers import make_sampler
from nccl_tune.tuner.settings import SAMPLERS

SPACE = parse_space(
    """
name: s
parameters:
  - {name: micro, kind: pow2, low: 1, high: 8, default: 2, memory: increasing}
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring], default: unset, memory: none}
""",
    source="test",
    label="s",
)


def test_every_sampler_name_builds_its_sampler():
    built = {name: make_sampler(name, 0, SPACE, {"NCCL_ALGO": "Ring"}) for name in SAMPLERS}
    assert set(built) == {"local", "tpe", "random"}
    assert isinstance(built["local"], LocalSearchSampler) and built["local"].pinned == {"NCCL_ALGO": "Ring"}
    assert isinstance(built["tpe"], optuna.samplers.TPESampler)
    assert isinstance(built["random"], optuna.samplers.RandomSampler)


def test_a_seeded_random_sampler_repeats_its_draws():
    def draws() -> list[int]:
        study = optuna.create_study(sampler=make_sampler("random", 7, SPACE))
        return [study.ask().suggest_int("micro:log2", 0, 3) for _ in range(8)]

    assert draws() == draws()
