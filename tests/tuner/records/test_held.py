"""One owner of the held parameters: a parameter dropped by a trial, or by an earlier run of a
resumed study, is held by every part of the run that reads them (the sampler, admission, the stop
rules), whenever it was built."""

from __future__ import annotations

import optuna

from nccl_tune.search_spaces.loader import load_space
from nccl_tune.search_spaces.space import UNSET
from nccl_tune.tuner.records import dropped
from nccl_tune.tuner.records.held import HeldParameters
from nccl_tune.tuner.records.pins import apply_pins
from nccl_tune.tuner.search.samplers import make_sampler
from nccl_tune.tuner.study.stop_rules import StopRules

REASON = "NCCL_CUMEM_ENABLE: the trainer sets it to 0 on its workers (weight sync over NCCL)"


def _held() -> HeldParameters:
    space, pins = apply_pins(load_space("skyrl-text2sql"), (("NCCL_PROTO", "LL128"),))
    return HeldParameters(space, pins)


def test_a_resumed_study_holds_what_an_earlier_run_dropped_everywhere():
    study = optuna.create_study(direction="maximize")
    study.set_user_attr(dropped.ATTR, {"NCCL_CUMEM_ENABLE": REASON})
    held = _held()
    sampler = make_sampler("local", 0, held.space, held)  # built before the study's drops are read
    rules = StopRules(held.space, held)
    before = sampler.infer_relative_search_space(study, None)
    assert "NCCL_CUMEM_ENABLE" in before and "NCCL_PROTO" not in before
    assert held.params == {"NCCL_PROTO": "LL128"} and "NCCL_CUMEM_ENABLE" not in rules.pinned
    held.read(study)
    assert held.params == {"NCCL_PROTO": "LL128", "NCCL_CUMEM_ENABLE": UNSET}
    assert held.dropped == {"NCCL_CUMEM_ENABLE": REASON}
    assert "NCCL_CUMEM_ENABLE" not in sampler.infer_relative_search_space(study, None)
    assert {"NCCL_PROTO", "NCCL_CUMEM_ENABLE"} <= set(rules.pinned)


def test_values_held_without_set_have_no_context_and_nothing_dropped():
    plain = HeldParameters.of_values(load_space("skyrl-text2sql"), {"NCCL_PROTO": "Simple"})
    assert plain.params == {"NCCL_PROTO": "Simple"} and plain.context == {} and plain.dropped == {}
