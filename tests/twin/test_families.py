"""The search benchmark's synthetic families: each instance has its family's shape, a small target
region, and its best is exactly the fastest stable config."""

from __future__ import annotations

import pytest

from nccl_tune.failure import FailureClass
from nccl_tune.trial import TrialSpec
from twin.analytic import analytic_cost
from twin.families import FAMILIES, MAX_TARGET_SHARE, enumerate_configs, exact, instance, throughput
from twin.launcher import ModelLauncher


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


def test_flat_top_reports_the_engines_pool_and_the_trainer_apart_the_others_one_phase():
    inst, _ = instance("flat-top", 0)
    base = inst.landscape(inst.baseline)
    util = inst.landscape({**inst.baseline, "rollout.gpu_memory_utilization": 0.9})
    micro = inst.landscape({**inst.baseline, "train.micro_batch_size": 8})
    assert (
        set(base.phase_peak_gib) == {"generate", "policy_train"} and max(base.phase_peak_gib.values()) == base.peak_gib
    )
    # the pool grows with the engines' share of the GPU, the trainer with its micro-batch
    assert util.phase_peak_gib["generate"] - base.phase_peak_gib["generate"] == pytest.approx(0.3 * 79.15)
    assert util.phase_peak_gib["policy_train"] - base.phase_peak_gib["policy_train"] < 0.2 * 0.3 * 79.15
    assert micro.phase_peak_gib["generate"] == base.phase_peak_gib["generate"]
    assert micro.phase_peak_gib["policy_train"] > base.phase_peak_gib["policy_train"] + 5
    for name in set(FAMILIES) - {"flat-top"}:
        other, _ = instance(name, 0)
        assert not other.landscape(other.baseline).phase_peak_gib


def test_a_flat_top_run_out_of_memory_ends_in_the_phase_over_the_capacity(tmp_path):
    for seed in range(4):
        inst, _ = instance("flat-top", seed)
        cap = inst.node.capacity_gib
        over = next((v for v in enumerate_configs(inst.space) if inst.landscape(v).peak_gib > cap), None)
        if over is not None:
            break
    assert over is not None, "no flat-top instance of seeds 0-3 has a config over the capacity"
    truth = inst.landscape(over)
    failing = max(truth.phase_peak_gib, key=truth.phase_peak_gib.get)
    launcher = ModelLauncher(env={}, cost=analytic_cost(inst.landscape, inst.node))
    r = launcher.run(
        TrialSpec(
            study="flat",
            number=0,
            params=over,
            argv=("true",),
            env={},
            trial_dir=tmp_path,
            clocks=inst.space.clocks,
            stop=inst.space.stop,
            samples_per_step=1024.0,
        )
    )
    assert r.status is FailureClass.OOM and r.memory.phases_open_at_end == ("step", failing)
    assert r.memory.phase_peak_frac[failing] == 1.0 == r.memory.max_peak_frac


def test_the_nccl_check_times_one_node_s_collectives_not_the_job_s_step():
    """What the NCCL sweep can and cannot see: NVLS speeds a one-node job's collectives and its step;
    the socket variables act only between nodes (the check times as the defaults); a generation-heavy
    job's collectives change with the protocol while its step barely moves."""
    inst, _ = instance("hang-region", 0)
    base = inst.baseline
    assert (
        inst.landscape({**base, "NCCL_ALGO": "NVLS"}).check_time_factor < 0.9 < inst.landscape(base).check_time_factor
    )
    inst, _ = instance("comm-bound", 0)
    base = inst.baseline
    assert inst.landscape({**base, "NCCL_SOCKET_NTHREADS": 8}).check_time_factor == 1.0
    assert inst.landscape({**base, "NCCL_SOCKET_NTHREADS": 8}).step_s < 0.9 * inst.landscape(base).step_s
    assert inst.landscape({**base, "NCCL_PROTO": "LL"}).check_time_factor > 2.0
    inst, _ = instance("flat-top", 0)
    base = inst.baseline
    tree = inst.landscape({**base, "NCCL_ALGO": "Tree"})
    assert tree.check_time_factor > 1.05 and abs(tree.step_s / inst.landscape(base).step_s - 1) < 0.01
