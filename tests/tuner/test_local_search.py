"""The local-search sampler walks from the incumbent one step at a time, on a real Optuna study."""

from __future__ import annotations

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution

from nccl_tune.tuner.local_search import LocalSearchSampler, neighbours

SPACE = {
    "micro:log2": IntDistribution(0, 4),
    "offload": CategoricalDistribution([False, True]),
    "NCCL_PROTO": CategoricalDistribution(["unset", "Simple", "LL128"]),
}


def told(study: optuna.Study, params: dict, value: float, failed: bool = False) -> None:
    trial = optuna.trial.create_trial(
        params=params, distributions=SPACE, value=value,
        system_attrs={"constraints:failed": 1.0 if failed else -1.0},
    )
    study.add_trial(trial)


def ask(study: optuna.Study) -> dict:
    trial = study.ask(SPACE)
    params = dict(trial.params)
    study.tell(trial, 0.0)
    return params


def test_neighbours_move_one_parameter_one_step():
    moves = neighbours({"micro:log2": 0, "offload": False, "NCCL_PROTO": "Simple"}, SPACE)
    assert {(n, d) for n, d, _ in moves} == {("micro:log2", 1), ("offload", 1), ("NCCL_PROTO", -1), ("NCCL_PROTO", 1)}
    for name, _, values in moves:
        assert sum(values[k] != v for k, v in {"micro:log2": 0, "offload": False, "NCCL_PROTO": "Simple"}.items()) == 1


def test_walks_micro_batches_up_first_then_repeats_a_winning_direction_and_leaves_nccl_for_last():
    sampler = LocalSearchSampler(seed=0, first=frozenset({("micro:log2", 1)}), late=frozenset({"NCCL_PROTO"}))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    told(study, {"micro:log2": 0, "offload": False, "NCCL_PROTO": "unset"}, 10.0)
    step = ask(study)
    assert step == {"micro:log2": 1, "offload": False, "NCCL_PROTO": "unset"}
    # that move won (its outcome recorded as a trial of its own): the sampler keeps going the same way
    told(study, step, 14.0)
    assert ask(study)["micro:log2"] == 2
    # micro 2 ran out of memory (infeasible): from the incumbent, the other non-NCCL move comes next
    told(study, {"micro:log2": 2, "offload": False, "NCCL_PROTO": "unset"}, 0.0, failed=True)
    nxt = ask(study)
    assert nxt["NCCL_PROTO"] == "unset" and (nxt["offload"] is True or nxt["micro:log2"] == 0)


def test_noise_within_the_margin_does_not_move_the_incumbent():
    sampler = LocalSearchSampler(seed=1, margin=0.02)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    told(study, {"micro:log2": 2, "offload": False, "NCCL_PROTO": "unset"}, 100.0)
    ask(study)
    told(study, {"micro:log2": 3, "offload": True, "NCCL_PROTO": "unset"}, 101.0)  # +1%: noise
    for _ in range(3):
        p = ask(study)
        # every proposal is one step from the first incumbent, not from the 1%-faster neighbour
        base = {"micro:log2": 2, "offload": False, "NCCL_PROTO": "unset"}
        assert sum(p[k] != v for k, v in base.items()) == 1
