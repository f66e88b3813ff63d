"""The search benchmark's synthetic families: each instance has its family's shape, a small target
region, and its best is exactly the fastest stable config."""

from __future__ import annotations

import pytest

from nccl_tune.sim.families import FAMILIES, MAX_TARGET_SHARE, enumerate_configs, exact, instance, throughput


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_an_instance_has_its_shape_and_an_exact_best(name):
    inst, ex = instance(name, 0)
    assert FAMILIES[name].check(inst, ex) and 0 < ex.p <= MAX_TARGET_SHARE
    cap, head = inst.node.capacity_gib, inst.space.min_headroom_frac
    assert ex.best.stable(cap, head)
    assert ex.best_throughput == pytest.approx(throughput(inst.space, ex.best_values, ex.best))
    # every rule-satisfying config is slower or unstable (sampled: the family's exact() saw them all)
    configs = list(enumerate_configs(inst.space))
    assert len(configs) == ex.admissible
    for values in configs[:: max(1, len(configs) // 400)]:
        t = inst.landscape(values)
        if t.stable(cap, head):
            assert throughput(inst.space, values, t) <= ex.best_throughput * (1 + 1e-12)


def test_instances_differ_by_seed_and_repeat_for_the_same_seed():
    a, ea = instance("enabler-trap", 1)
    b, eb = instance("enabler-trap", 1)
    c, ec = instance("enabler-trap", 2)
    assert ea == eb and ea.best_throughput != ec.best_throughput
    assert a.landscape(a.baseline) == b.landscape(b.baseline)


def test_the_enabler_trap_needs_checkpointing_and_the_hang_region_hangs_next_to_its_best():
    inst, ex = instance("enabler-trap", 3)
    assert ex.best_values["train.gradient_checkpointing"] and not inst.baseline["train.gradient_checkpointing"]
    without = exact(inst, where=lambda v: not v["train.gradient_checkpointing"])
    assert without.best_throughput < 0.9 * ex.best_throughput
    inst, ex = instance("hang-region", 0)
    assert ex.best_values["NCCL_ALGO"] == "NVLS"
    assert inst.landscape({**ex.best_values, "NCCL_CUMEM_ENABLE": 0}).failure == "hang"
