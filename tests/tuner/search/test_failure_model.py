"""The failure model: which values make runs fail, alone or with a partner, and what a failure
costs; on records of known failures."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest
from optuna.trial import TrialState

from nccl_tune.failure import Cause, FailureClass, Verdict
from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.trial import GpuMemory, MemoryReport, StopReason, TrialResult
from nccl_tune.tuner.records.study_records import Outcome, TrialKind, TrialRecord
from nccl_tune.tuner.search.failure_model import MEMORY, NEAR_WALL, Beyond, FailureModel, flaky_rule

SPACE = parse_space(
    """
name: failures
parameters:
  - {name: batch, kind: categorical, choices: [256, 512], default: 256, memory: none}
  - {name: prompt, kind: categorical, choices: [2048, 4096], default: 4096, memory: none}
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree, NVLS], default: unset, memory: none}
  - {name: NCCL_PROTO, kind: categorical, choices: [unset, Simple, LL, LL128], default: unset, memory: none}
  - {name: NCCL_CUMEM_ENABLE, kind: categorical, choices: [unset, 0, 1], default: unset, memory: none}
""",
    source="test",
    label="failures",
)
BASE = SPACE.defaults()


def run(
    number: int,
    changes: dict,
    status: FailureClass = FailureClass.OK,
    wall_s: float = 1000.0,
    peak_frac: float | None = None,
) -> TrialRecord:
    memory = None if peak_frac is None else MemoryReport("nvml", (GpuMemory(0, 80.0, 80.0 * peak_frac),))
    result = TrialResult(
        number=number,
        status=status,
        verdict=Verdict(status),
        stop_reason=StopReason.MEASURED,
        step_times_s=(2.0, 1.0, 1.0) if status is FailureClass.OK else (),
        warmup_steps=1,
        samples_per_step=8.0,
        wall_s=wall_s,
        memory=memory,
    )
    return TrialRecord(
        number, TrialState.COMPLETE, {**BASE, **changes}, TrialKind.SEARCH, Outcome.LAUNCHED, status, result
    )


def model(records: list[TrialRecord]) -> FailureModel:
    return FailureModel(SPACE.parameters, BASE, records, memory_wall_frac=0.95)


def test_a_value_that_hangs_at_random_takes_the_blame_from_the_values_its_failures_happened_to_hold():
    hang = FailureClass.HANG
    records = [
        run(0, {}),
        run(1, {"NCCL_CUMEM_ENABLE": 1}),  # a lucky run carries it along
        run(2, {"NCCL_CUMEM_ENABLE": 1, "NCCL_ALGO": "Ring"}, hang),
        run(3, {"NCCL_CUMEM_ENABLE": 1, "NCCL_PROTO": "Simple"}),
        run(4, {"NCCL_CUMEM_ENABLE": 1, "NCCL_PROTO": "LL"}, hang),
        run(5, {"NCCL_CUMEM_ENABLE": 1, "batch": 512}),
        run(6, {"NCCL_CUMEM_ENABLE": 1, "NCCL_ALGO": "Tree"}, hang),
        run(7, {"NCCL_CUMEM_ENABLE": 1, "NCCL_PROTO": "LL128"}, hang),
        run(8, {"batch": 512}),
        run(9, {"NCCL_CUMEM_ENABLE": 1, "prompt": 2048}, hang),
        run(10, {"NCCL_CUMEM_ENABLE": 1, "NCCL_ALGO": "NVLS"}),
    ]
    m = model(records)
    assert m.blamed()[0][0] == (("NCCL_CUMEM_ENABLE", 1),)
    carried = m.p_ok({**BASE, "NCCL_CUMEM_ENABLE": 1})
    for cleared in (
        {"NCCL_ALGO": "Ring"},
        {"NCCL_PROTO": "LL"},
        {"NCCL_ALGO": "Tree"},
        {"NCCL_PROTO": "LL128"},
        {"prompt": 2048},
    ):
        assert m.p_ok({**BASE, **cleared}) > carried, cleared
    assert m.p_ok({**BASE, "batch": 512}) == m.p_ok(BASE) > 0.95  # only the chance no value explains


def test_a_value_that_failed_with_a_partner_is_suspect_without_it_not_condemned():
    records = [
        run(0, {}),
        run(1, {"batch": 512}),
        run(2, {"batch": 512, "NCCL_ALGO": "Ring"}),
        run(3, {"batch": 512, "prompt": 2048}, FailureClass.CRASH),
    ]
    m = model(records)
    with_partner = m.p_ok({**BASE, "batch": 512, "prompt": 2048})
    without = m.p_ok({**BASE, "prompt": 2048})
    assert with_partner < 0.5 and with_partner + 0.05 < without < 1.0
    # a second failure in the same context makes the pair likelier, and the value alone no likelier
    m2 = model(records + [run(4, {"batch": 512, "prompt": 2048, "NCCL_ALGO": "Ring"}, FailureClass.CRASH)])
    assert m2.p_ok({**BASE, "batch": 512, "prompt": 2048}) < with_partner
    # finished runs of the value without the partner clear the value alone
    m3 = model(records + [run(4, {"prompt": 2048}), run(5, {"prompt": 2048, "NCCL_ALGO": "Ring"})])
    elsewhere = m3.p_ok({**BASE, "prompt": 2048, "NCCL_PROTO": "Simple"})
    assert elsewhere > without and m3.p_ok({**BASE, "batch": 512, "prompt": 2048}) < elsewhere - 0.2


def test_a_failure_at_start_up_costs_less_than_a_hang_and_weighs_less_on_a_proposal():
    def worth(status: FailureClass, wall_s: float) -> float:
        records = [run(0, {}), run(1, {"batch": 512}), run(2, {"batch": 512, "NCCL_ALGO": "NVLS"}, status, wall_s)]
        return model(records).worth({**BASE, "batch": 512, "NCCL_ALGO": "NVLS"})

    crash, hang = worth(FailureClass.CRASH, 70.0), worth(FailureClass.HANG, 1500.0)
    assert 0.0 < hang < crash < 1.0
    # a failure costs at least the trial it uses: a crash cheaper than a finished run weighs as much as one
    assert crash == pytest.approx(worth(FailureClass.CRASH, 1000.0), rel=1e-9)


def test_a_failure_is_priced_in_finished_runs_by_what_the_failures_it_risks_cost():
    """The failure budget's price of a failure (``risk``'s third figure): a value that hung for 1,500 s where
    a finished run takes 1,000 s costs one and a half runs; the baseline, which holds no suspect value, one."""
    records = [
        run(0, {}),
        run(1, {"batch": 512}),
        run(2, {"batch": 512, "NCCL_ALGO": "NVLS"}, FailureClass.HANG, 1500.0),
    ]
    m = model(records)
    assert m.risk({**BASE, "batch": 512, "NCCL_ALGO": "NVLS"})[2] == pytest.approx(1.5)
    assert m.risk(BASE)[2] == 1.0


def test_a_pair_that_crashed_every_start_up_is_not_worth_another_cheap_try():
    """A shorter prompt limit crashed at the larger batch three times, 70 s each against 1,000 s for a
    finished run: however cheap, a fourth try is worth less than half a sure one."""
    short = {"prompt": 2048, "batch": 512}
    records = [run(0, {}), run(1, {"batch": 512}), run(2, {"prompt": 2048})] + [
        run(3 + i, {**short, "NCCL_ALGO": algo}, FailureClass.CRASH, 70.0)
        for i, algo in enumerate(["unset", "Ring", "Tree"])
    ]
    assert model(records).worth({**BASE, **short, "NCCL_ALGO": "NVLS"}) < 0.5


def test_a_run_out_of_memory_is_left_to_the_memory_model_and_a_run_stopped_by_the_user_to_nobody():
    records = [run(0, {}), run(1, {"batch": 512}, FailureClass.OOM), run(2, {"prompt": 2048}, FailureClass.INTERRUPTED)]
    m = model(records)
    assert m.p_ok({**BASE, "batch": 512}) == 1.0 and m.p_ok({**BASE, "prompt": 2048}) == 1.0
    # without a memory model (no parameter declares a memory effect) an OOM is a failure like another
    m = FailureModel(SPACE.parameters, BASE, records, memory_wall_frac=None)
    assert m.p_ok({**BASE, "batch": 512}) < 0.5


def outside(number: int, changes: dict, cls: FailureClass, subtype: str, **details) -> TrialRecord:
    """A run that failed after its first steps for ``subtype`` (a cause of ``cls``)."""
    r = run(number, changes, cls)
    verdict = Verdict(cls, cause=Cause("rule", subtype, details))
    return replace(r, result=replace(r.result, verdict=verdict, step_times_s=(2.0, 1.0)))


def test_a_run_killed_from_outside_or_by_its_gpu_blames_no_value_it_held():
    """A scheduler's SIGTERM, an ECC error or a GPU fallen off the bus says nothing of the run's values;
    an Xid a kernel's fault raises (31: an illegal address) may, as a node that died may (host memory)."""
    tree = {"NCCL_ALGO": "Tree"}
    ok = [run(0, {}), run(1, {"batch": 512})]
    for cls, subtype, details in [
        (FailureClass.CRASH, "outside_signal", {}),
        (FailureClass.CUDA_ERROR, "ecc", {}),
        (FailureClass.CUDA_ERROR, "gpu_lost", {"xid": "79"}),
        (FailureClass.CUDA_ERROR, "gpu_busy", {}),
    ]:
        m = model(ok + [outside(2 + i, tree, cls, subtype, **details) for i in range(2)])
        assert m.p_ok({**BASE, **tree}) == 1.0 and m.flaky({**BASE, **tree}) == [], subtype
    for cls, subtype, details in [
        (FailureClass.CUDA_ERROR, "gpu_lost", {"xid": "31"}),
        (FailureClass.CRASH, "node_died", {}),
    ]:
        m = model(ok + [outside(2 + i, tree, cls, subtype, **details) for i in range(2)])
        assert m.p_ok({**BASE, **tree}) < 1.0, subtype


def test_a_failure_at_the_memory_wall_is_shared_between_the_wall_and_its_values():
    """A collective timeout of a run whose peak came within the headroom may be memory pressure (a
    rank stalled in the allocator while the others wait) or one of its values: its place next to
    the wall takes a share of the blame, its values less than one away from the wall; a later run
    next to the wall that finished clears the wall, and the values take the blame."""
    timeout = FailureClass.COLLECTIVE_TIMEOUT
    alone = {**BASE, "prompt": 2048}
    at_wall = [run(0, {}, peak_frac=0.6), run(1, {"prompt": 2048, "batch": 512}, timeout, peak_frac=0.97)]
    away = [run(0, {}, peak_frac=0.6), run(1, {"prompt": 2048, "batch": 512}, timeout, peak_frac=0.7)]
    shared, blamed = model(at_wall).p_ok(alone), model(away).p_ok(alone)
    assert blamed < shared < 1.0
    cleared = at_wall + [run(2, {"NCCL_ALGO": "Ring"}, peak_frac=0.96), run(3, {"batch": 512}, peak_frac=0.97)]
    assert model(cleared).p_ok(alone) < shared


def test_a_run_that_failed_at_the_memory_wall_got_past_its_start_up():
    """A shorter prompt limit crashed a start-up at the larger batch (the data set could not fill
    it, found after a model load as long as a finished run: not a cheap failure); a run of the same
    limit at the smaller batch stalled at the memory wall, so it had loaded its model and started
    training: the limit alone does not break start-ups. An OOM proves nothing of the kind (a model
    too large for the GPU fails while loading)."""
    crashed = [run(0, {}), run(1, {"batch": 512}), run(2, {"batch": 512, "prompt": 2048}, FailureClass.CRASH, 1000.0)]
    alone = {**BASE, "prompt": 2048}
    before = model(crashed).p_ok(alone)
    at_wall = run(3, {"prompt": 2048, "NCCL_ALGO": "Ring"}, FailureClass.COLLECTIVE_TIMEOUT, peak_frac=0.97)
    assert model(crashed + [at_wall]).p_ok(alone) > before + 0.1
    oom = run(3, {"prompt": 2048, "NCCL_ALGO": "Ring"}, FailureClass.OOM, peak_frac=0.99)
    assert model(crashed + [oom]).p_ok(alone) == pytest.approx(before)


def hung_after(number: int, changes: dict, steps: int) -> TrialRecord:
    """A run that hung after measuring ``steps`` steps."""
    result = TrialResult(
        number=number,
        status=FailureClass.HANG,
        verdict=Verdict(FailureClass.HANG),
        stop_reason=StopReason.STALL,
        step_times_s=(2.0,) + (1.0,) * steps,
        warmup_steps=1,
        samples_per_step=8.0,
        wall_s=1000.0,
    )
    return TrialRecord(
        number, TrialState.COMPLETE, {**BASE, **changes}, TrialKind.SEARCH, Outcome.LAUNCHED, FailureClass.HANG, result
    )


def test_a_hang_after_the_first_steps_is_blamed_on_the_value_that_hangs_now_and_then_not_on_the_new_one():
    """Each run changed one NCCL value next to cuMem, which hangs at random; the runs started and
    measured steps, so the value a run changed did not break it at start-up as a bad setting would:
    NVLS, whose only run hung that way, stays worth trying without cuMem."""
    cumem = {"NCCL_CUMEM_ENABLE": 1}
    records = [
        run(0, {}),
        run(1, cumem),
        hung_after(2, {**cumem, "NCCL_ALGO": "Ring"}, 2),
        run(3, {**cumem, "NCCL_PROTO": "Simple"}),
        hung_after(4, {**cumem, "NCCL_PROTO": "LL"}, 3),
        hung_after(5, {**cumem, "NCCL_ALGO": "NVLS"}, 1),
    ]
    m = model(records)
    assert m.blamed()[0][0] == (("NCCL_CUMEM_ENABLE", 1),)
    assert m.p_ok({**BASE, "NCCL_ALGO": "NVLS"}) > 0.8 > m.p_ok({**BASE, **cumem})
    # the same failures at start-up (no step measured) are each the new value's, as a bad setting's
    at_start = [
        r if r.ok else run(r.number, {k: v for k, v in r.values.items() if v != BASE[k]}, FailureClass.HANG)
        for r in records
    ]
    assert model(at_start).p_ok({**BASE, "NCCL_ALGO": "NVLS"}) < 0.7


def test_a_config_holding_a_value_that_hangs_now_and_then_is_flaky_however_its_own_runs_went():
    """cuMem hung two of its four runs after they had started; the config that finished twice with it
    was lucky. Values cleared by finished runs do not make a config flaky, nor does a value that broke
    the start-up of every run with a partner that the config does not hold."""
    cumem = {"NCCL_CUMEM_ENABLE": 1}
    lucky = {**BASE, **cumem, "NCCL_PROTO": "Simple"}
    short = {"prompt": 2048}  # crashes at start-up with the larger batch only (the data cannot fill it)
    records = [
        run(0, {}),
        run(1, lucky),
        hung_after(2, {**cumem, "NCCL_ALGO": "Ring"}, 2),
        run(3, lucky),
        hung_after(4, {**cumem, "NCCL_PROTO": "LL"}, 3),
        run(5, {"NCCL_PROTO": "Simple"}),
        run(6, {"NCCL_ALGO": "Ring"}),
        run(7, {**short, "batch": 512}, FailureClass.CRASH),
        run(8, {**short, "batch": 512, "NCCL_ALGO": "Ring"}, FailureClass.CRASH),
        run(9, short),
        run(10, short),
    ]
    m = model(records)
    assert [cause for cause, _, _ in m.flaky(lucky)] == [(("NCCL_CUMEM_ENABLE", 1),)]
    ((_, taken, rate),) = m.flaky(lucky)
    assert 1.0 <= taken <= 2.0 and 0.15 <= rate < 0.6  # of its two hangs, shared with the pairs each held
    assert m.flaky({**BASE, "NCCL_PROTO": "Simple"}) == [] and m.flaky({**BASE, "NCCL_ALGO": "Ring"}) == []
    assert m.p_ok({**BASE, **short, "batch": 512}) < 0.5 and m.flaky({**BASE, **short}) == []
    # one hang after start-up next to many finished runs of the value is chance, not a flaky value
    steady = [run(0, {})] + [run(i, {**cumem, "NCCL_PROTO": p}) for i, p in enumerate(["Simple", "LL", "LL128"] * 3, 1)]
    assert model(steady + [hung_after(10, {**cumem, "NCCL_ALGO": "Tree"}, 2)]).flaky(lucky) == []


def test_a_stored_study_s_flaky_rule_reads_the_varied_parameters_against_its_baseline_trial():
    """``flaky_rule`` needs no pins: what the runs held in common (a pinned value) is no suspect."""
    cumem = {"NCCL_CUMEM_ENABLE": 1}
    pinned = {"prompt": 2048}
    lucky = {**BASE, **pinned, **cumem}

    def at(number, changes, hung=False):
        r = hung_after(number, {**pinned, **changes}, 2) if hung else run(number, {**pinned, **changes})
        return replace(r, kind=TrialKind.BASELINE) if number == 0 else r

    records = [
        at(0, {}),
        at(1, cumem),
        at(2, {**cumem, "NCCL_ALGO": "Ring"}, True),
        at(3, {**cumem, "NCCL_PROTO": "LL"}, True),
        at(4, {"NCCL_ALGO": "Ring"}),
        at(5, {"NCCL_PROTO": "LL"}),
    ]
    flaky = flaky_rule(SPACE, records)
    assert flaky(lucky) and not flaky({**BASE, **pinned}) and not flaky({**BASE, **pinned, "NCCL_ALGO": "Ring"})


def test_a_value_that_hangs_at_random_is_flaky_by_its_hangs_in_both_phases_together():
    """cuMem hung four of its seven runs, two in their first step (before measuring: the start-up
    phase) and two after measuring. Neither phase alone holds one whole failure's blame; together
    they make the value flaky, named once, with the chance a run fails in either phase."""
    cumem = {"NCCL_CUMEM_ENABLE": 1}
    lucky = {**BASE, **cumem, "NCCL_PROTO": "Simple"}
    partners = [{"NCCL_ALGO": "Ring"}, {"NCCL_PROTO": "LL"}, {"batch": 512}, {"NCCL_ALGO": "Tree"}]
    records = [run(0, {}), run(1, lucky), run(2, lucky)] + [run(3 + i, p) for i, p in enumerate(partners)]
    records += [
        run(7, {**cumem, **partners[0]}, FailureClass.HANG),
        hung_after(8, {**cumem, **partners[1]}, 2),
        run(9, {**cumem, **partners[2]}, FailureClass.HANG),
        hung_after(10, {**cumem, **partners[3]}, 2),
        run(11, {**cumem, **partners[0]}),
        run(12, {**cumem, **partners[1]}),
    ]
    m = model(records)
    phases = [(k[0], m.fired.get(k, 0.0)) for k in m.keys(lucky) if k[1] == (("NCCL_CUMEM_ENABLE", 1),)]
    assert {ph for ph, f in phases if f > 0.3} == {"start", "run"} and all(f < 1.0 for _, f in phases)
    ((cause, taken, rate),) = m.flaky(lucky)
    assert cause == (("NCCL_CUMEM_ENABLE", 1),) and taken >= 1.0 and rate >= 0.15
    assert m.flaky({**BASE, "NCCL_PROTO": "Simple"}) == []


def test_a_value_whose_every_failure_held_a_partner_is_flaky_with_the_partner_only():
    """A shorter prompt limit crashed three start-ups, each at the larger batch (the data it keeps
    cannot fill that batch). The runs cannot tell the value from the pair: it is condemned where the
    larger batch is held, and left to its odds (suspect, not closed) at the smaller batch."""
    short = {"prompt": 2048, "batch": 512}
    records = [
        run(0, {}),
        run(1, {"batch": 512}),
        run(2, {"batch": 512, "NCCL_ALGO": "Ring"}),
        run(3, short, FailureClass.CRASH),
        run(4, {**short, "NCCL_ALGO": "Ring"}, FailureClass.CRASH),
        run(5, {**short, "NCCL_PROTO": "Simple"}, FailureClass.CRASH),
    ]
    m = model(records)
    assert (("prompt", 2048),) in [cause for cause, _, _ in m.flaky({**BASE, **short})]
    assert m.flaky({**BASE, "prompt": 2048}) == [] and m.p_ok({**BASE, "prompt": 2048}) < 0.9


def test_values_whose_failures_cannot_be_told_apart_make_a_config_flaky_together():
    """A lucky run with NVLS and cuMem finished; three moves from it, each adding a value of its own,
    hung after measuring steps. Every failed run held NVLS, cuMem and their pair, so the blame
    splits among them and no one takes a whole failure; together they took the three hangs: the
    lucky config is flaky, naming both. Without cuMem, NVLS is not what those runs failed with."""
    lucky = {"NCCL_ALGO": "NVLS", "NCCL_CUMEM_ENABLE": 1}
    records = [
        run(0, {}),
        run(1, {"batch": 512}),
        run(2, {"prompt": 2048}),
        run(3, lucky),
        hung_after(4, {**lucky, "NCCL_PROTO": "LL128"}, 2),
        hung_after(5, {**lucky, "batch": 512}, 1),
        hung_after(6, {**lucky, "NCCL_PROTO": "Simple"}, 3),
    ]
    m = model(records)
    assert all(taken < 1.0 for cause, taken, _ in m.blamed() if len(cause) == 1)  # split: no single value reaches one
    ((cause, taken, rate),) = m.flaky({**BASE, **lucky})
    assert {("NCCL_ALGO", "NVLS"), ("NCCL_CUMEM_ENABLE", 1)} <= set(cause) and taken >= 1.5 and rate >= 0.10
    assert ("batch", 512) not in cause  # cleared by its own finished run, and held by one failure only
    assert flaky_rule(SPACE, records)({**BASE, **lucky})
    assert m.flaky({**BASE, "NCCL_ALGO": "NVLS"}) == [] and m.flaky({**BASE, "batch": 512}) == []
    # two of the three hangs: not enough between them
    assert model(records[:-1]).flaky({**BASE, **lucky}) == []


def test_a_value_that_crashed_start_ups_only_next_to_a_partner_is_worth_a_try_without_it_a_hang_is_not():
    """A shorter prompt limit crashed at start-up at the larger batch (70 s against 1,000 s for a
    finished run): at the smaller batch one more try costs little and settles it, so the proposal
    weighs as much as one holding no failed value. Had those runs hung, the value stays suspect."""

    def at_small_batch(status: FailureClass, wall_s: float) -> tuple[float, float]:
        records = [run(0, {}), run(1, {"batch": 512}), run(2, {"NCCL_ALGO": "Ring"})] + [
            run(3 + i, {"prompt": 2048, "batch": 512, "NCCL_PROTO": proto}, status, wall_s)
            for i, proto in enumerate(["unset", "Simple"])
        ]
        m = model(records)
        clean = m.worth({**BASE, "NCCL_ALGO": "Tree"})
        return m.worth({**BASE, "prompt": 2048}) / clean, m.worth({**BASE, "prompt": 2048, "batch": 512}) / clean

    alone, together = at_small_batch(FailureClass.CRASH, 70.0)
    assert alone == pytest.approx(1.0) and together < 0.5
    alone, together = at_small_batch(FailureClass.HANG, 1500.0)
    assert alone < 0.9 and together < 0.5
    # a hang in the first step, caught by the stall timeout, costs about a run (its start-up): not cheap
    alone, together = at_small_batch(FailureClass.HANG, 900.0)
    assert alone < 0.9 and together < 0.5


def test_a_value_that_crashed_start_ups_next_to_two_partners_stays_suspect_next_to_either():
    """The larger batch crashed two start-ups, each next to a shorter prompt limit and the Ring
    algorithm: either may be its partner. A config holding the batch with one of them may crash
    the same way; only one holding neither tries the batch apart (cheaply: a start-up crash)."""
    records = [run(0, {}), run(1, {"prompt": 2048}), run(2, {"NCCL_ALGO": "Ring"}), run(3, {"NCCL_PROTO": "LL"})]
    records += [
        run(4 + i, {"batch": 512, "prompt": 2048, "NCCL_ALGO": "Ring", "NCCL_PROTO": proto}, FailureClass.CRASH, 70.0)
        for i, proto in enumerate(["unset", "LL"])
    ]
    m = model(records)
    clean = m.worth({**BASE, "NCCL_PROTO": "Simple"})
    assert m.p_ok({**BASE, "batch": 512, "prompt": 2048}) < 0.6  # 0.90 when it counted only next to both
    assert m.p_ok({**BASE, "batch": 512, "NCCL_ALGO": "Ring"}) < 0.6
    assert m.worth({**BASE, "batch": 512}) == pytest.approx(clean)
    assert m.partnered[("batch", 512)] == {("prompt", 2048), ("NCCL_ALGO", "Ring")}


def test_hangs_next_to_the_memory_wall_are_blamed_on_the_wall_not_on_each_runs_new_value():
    """Three runs within twice the headroom of the wall (peaks 93-94%, a 5% headroom) hung after
    some steps, each next to another NCCL value and with another parameter taking it near the wall;
    each of those values finished away from the wall. The place next to the wall takes the blame: a
    config the memory model puts there is less likely to finish than the same values clear of it,
    and the NCCL values stay worth trying."""

    def near(number: int, changes: dict, status: FailureClass = FailureClass.OK) -> TrialRecord:
        r = hung_after(number, changes, 2) if status is FailureClass.HANG else run(number, changes)
        memory = MemoryReport("nvml", (GpuMemory(0, 80.0, 80.0 * (0.93 if number % 2 else 0.94)),))
        return replace(r, result=replace(r.result, memory=memory))

    records = [
        run(0, {}, peak_frac=0.6),
        near(1, {"batch": 512}),
        near(2, {"batch": 512, "NCCL_ALGO": "Ring"}, FailureClass.HANG),
        near(3, {"prompt": 2048}),
        near(4, {"prompt": 2048, "NCCL_PROTO": "LL"}, FailureClass.HANG),
        near(5, {"batch": 512, "NCCL_ALGO": "Tree"}, FailureClass.HANG),
        run(6, {"NCCL_ALGO": "Ring"}, peak_frac=0.6),
        run(7, {"NCCL_PROTO": "LL"}, peak_frac=0.6),
        run(8, {"NCCL_ALGO": "Tree"}, peak_frac=0.6),
    ]
    m = FailureModel(
        SPACE.parameters,
        BASE,
        records,
        memory_wall_frac=0.95,
        p_below=lambda values, frac: 0.0 if values["batch"] == 512 else 1.0,
    )
    assert m.blamed()[0][0] == ((MEMORY, NEAR_WALL),)
    assert m.p_ok({**BASE, "batch": 512, "NCCL_PROTO": "Simple"}) < m.p_ok({**BASE, "NCCL_PROTO": "Simple"}) - 0.1
    for value in ({"NCCL_ALGO": "Ring"}, {"NCCL_PROTO": "LL"}, {"NCCL_ALGO": "Tree"}):
        assert m.p_ok({**BASE, **value}) > 0.8, value


def test_a_host_out_of_memory_is_taken_to_repeat_where_a_hang_after_the_first_step_is_taken_to_be_rare():
    """A run with a larger batch that measured steps and then failed: killed for the host's memory,
    its value is likelier to fail than to finish the next time (the host runs out the same way each
    time); hung, it stays likelier to finish (a hang now and then)."""

    def failed(status: FailureClass) -> FailureModel:
        steps = replace(run(2, {}).result, status=status, verdict=Verdict(status))  # measured steps, then failed
        bad = replace(run(2, {"batch": 512}, status), result=steps)
        return model([run(0, {}), run(1, {"NCCL_PROTO": "LL"}), bad])

    host, hang = failed(FailureClass.HOST_OOM), failed(FailureClass.HANG)
    config = {**BASE, "batch": 512, "NCCL_ALGO": "Ring"}
    assert host.p_ok(config) < 0.5 < hang.p_ok(config)


WORKERS = parse_space(
    """
name: workers
parameters:
  - {name: workers, kind: int, low: 0, high: 8, default: 0, memory: none}
  - {name: attn, kind: categorical, choices: [eager, sdpa, flash], default: sdpa}
  - {name: zero, kind: categorical, choices: [1, 2, 3], default: 2, memory: decreasing}
""",
    source="test",
    label="workers",
)


def on_space(base: dict, number: int, changes: dict, status: FailureClass = FailureClass.OK) -> TrialRecord:
    """A run of ``base`` (a space's defaults) with ``changes``."""
    return replace(run(number, {}, status), values={**base, **changes})


def test_a_host_out_of_memory_on_an_ordered_axis_is_blamed_on_that_value_and_past_it():
    """Eight data-loader workers with FlashAttention ran the host out of memory, then seven with
    ZeRO-1: one cause explains both, seven workers and more. After the first, seven is suspect;
    after both, FlashAttention is cleared and eight workers stay condemned without it, while six
    and fewer, which finished, stay likely to finish."""
    base = WORKERS.defaults()
    at = partial(on_space, base)

    records = [
        at(0, {}),
        at(1, {"workers": 2}),
        at(2, {"workers": 4, "zero": 1}),
        at(3, {"workers": 6}),
        at(4, {"workers": 8, "attn": "flash"}, FailureClass.HOST_OOM),
        at(5, {"workers": 7, "zero": 1}, FailureClass.HOST_OOM),
    ]
    first = FailureModel(WORKERS.parameters, base, records[:5], memory_wall_frac=None)
    assert first.p_ok({**base, "workers": 7}) < 0.8  # the host may have run out anywhere past six
    assert first.p_ok({**base, "workers": 4, "zero": 1}) > 0.95
    m = FailureModel(WORKERS.parameters, base, records, memory_wall_frac=None)
    assert m.p_ok({**base, "workers": 8}) < 0.4  # 0.66 with each value a cause of its own
    assert m.p_ok({**base, "workers": 7, "zero": 3}) < 0.4
    assert m.p_ok({**base, "workers": 6, "attn": "flash"}) > 0.8
    assert m.p_ok({**base, "workers": 4, "zero": 1}) > 0.9


def test_a_host_out_of_memory_at_start_up_names_no_capacity_cause_as_a_value_to_try_alone():
    """Eight workers ran the host out before the first step, twice, each time with FlashAttention:
    cheap failures next to a partner. The planner may try a value without its partner, but the
    capacity cause (eight workers and more) is no value a move can set."""
    base = WORKERS.defaults()

    def at(number: int, changes: dict, status: FailureClass = FailureClass.OK) -> TrialRecord:
        return replace(
            run(number, {}, status, wall_s=20.0 if status is FailureClass.HOST_OOM else 1000.0),
            values={**base, **changes},
        )

    records = [
        at(0, {}),
        at(1, {"workers": 2}),
        at(2, {"workers": 8, "attn": "flash"}, FailureClass.HOST_OOM),
        at(3, {"workers": 8, "attn": "flash", "zero": 1}, FailureClass.HOST_OOM),
    ]
    m = FailureModel(WORKERS.parameters, base, records, memory_wall_frac=None)
    taken = [k for k in m.fired if k[1] and isinstance(k[1][0][1], Beyond)]
    assert taken and all(("attn", "flash") in m.partners[k[1]] for k in taken)  # each next to the kernel
    assert not any(isinstance(value, Beyond) for _, value in m.partnered)


DECLARED = parse_space(
    """
name: declared
parameters:
  - {name: workers, kind: int, low: 0, high: 8, default: 4, memory: none, host_memory: increasing}
  - {name: attn, kind: categorical, choices: [eager, sdpa, flash], default: sdpa, host_memory: none}
  - {name: zero, kind: categorical, choices: [1, 2, 3], default: 2, memory: decreasing}
""",
    source="test",
    label="declared",
)


def test_a_host_out_of_memory_is_never_blamed_on_a_value_the_space_says_holds_no_more_host_ram():
    """The space declares the workers' host memory and the attention kernel's none. One host out of
    memory at eight workers with FlashAttention condemns the workers at once and leaves the kernel
    clear; fewer workers than the baseline's hold less host RAM and are not a capacity cause; ZeRO-1,
    undeclared, keeps its share of the blame. Without the declarations (the space above) the kernel
    stays suspect after one failure."""
    base = DECLARED.defaults()
    at = partial(on_space, base)

    records = [
        at(0, {}),
        at(1, {"workers": 6}),
        at(2, {"workers": 8, "attn": "flash"}, FailureClass.HOST_OOM),
        at(3, {"workers": 2, "zero": 1}, FailureClass.HOST_OOM),
    ]
    m = FailureModel(DECLARED.parameters, base, records, memory_wall_frac=None)
    assert m.p_ok({**base, "attn": "flash"}) > 0.95
    assert m.p_ok({**base, "workers": 8}) < 0.5 and m.p_ok({**base, "workers": 7}) < 0.8
    assert m.p_ok({**base, "workers": 2}) > 0.9  # its failure is ZeRO-1's or the leak's, never fewer workers'
    assert all(name == "workers" and b.up for name, b in m.beyond)
    assert m.p_ok({**base, "zero": 1}) < m.p_ok({**base, "attn": "flash"})
    undeclared_base = WORKERS.defaults()
    plain = FailureModel(
        WORKERS.parameters,
        undeclared_base,
        [
            replace(
                r, values={**undeclared_base, **{k: v for k, v in r.values.items() if k != "workers"}, "workers": w}
            )
            for r, w in zip(records[:3], (0, 6, 8))
        ],
        memory_wall_frac=None,
    )
    assert plain.p_ok({**undeclared_base, "attn": "flash"}) < m.p_ok({**base, "attn": "flash"})


def test_capacity_causes_on_one_axis_are_nested_so_a_failure_one_takes_does_not_clear_another():
    """Eight workers with the eager kernel ran the host out where six finished. Whether the host ran
    out at seven or at eight, eight runs it out again: the failure the sampler gives to "eight and
    more" is no run in which "seven and more" held and did not fire. So eight is likelier to fail
    than to finish, though the kernel shares the blame (0.56 to finish with the two causes taken as
    independent); and once seven fails too, with ZeRO-3, eight is all but condemned (0.42 before)."""
    base = WORKERS.defaults()
    at = partial(on_space, base)
    records = [
        at(0, {}),
        at(1, {"workers": 2}),
        at(2, {"workers": 4, "zero": 1}),
        at(3, {"workers": 6}),
        at(4, {"workers": 8, "attn": "eager"}, FailureClass.HOST_OOM),
    ]
    first = FailureModel(WORKERS.parameters, base, records, memory_wall_frac=None)
    assert first.p_ok({**base, "workers": 8}) < 0.5
    assert first.p_ok({**base, "workers": 7}) > first.p_ok({**base, "workers": 8})
    assert any(name == "workers" and isinstance(b, Beyond) for (_, ((name, b),)) in first.spared)
    both = FailureModel(
        WORKERS.parameters,
        base,
        [*records, at(5, {"workers": 7, "zero": 3}, FailureClass.HOST_OOM)],
        memory_wall_frac=None,
    )
    assert both.p_ok({**base, "workers": 8}) < 0.35
    assert both.p_ok({**base, "zero": 3}) > 0.7


def test_a_capacity_failure_on_an_ordered_axis_is_not_blamed_on_its_value_with_a_partner():
    """Seven workers with FlashAttention and ZeRO-1 ran the host out where six finished with each.
    "Seven workers, but only with FlashAttention" is a cause no run past seven would hold (eight
    workers is another value): blame it takes clears eight, which holds every capacity cause seven
    does and more. The blame goes to the axis (seven and more), the values apart, their pair or the
    leak; eight with FlashAttention, 0.60 to finish with those pairs, is likelier to fail."""
    base = WORKERS.defaults()
    at = partial(on_space, base)
    records = [
        at(0, {}),
        at(1, {"workers": 2}),
        at(2, {"workers": 4, "zero": 1}),
        at(3, {"workers": 6, "attn": "flash"}),
        at(4, {"workers": 6, "zero": 1}),
        at(5, {"workers": 7, "attn": "flash", "zero": 1}, FailureClass.HOST_OOM),
    ]
    m = FailureModel(WORKERS.parameters, base, records, memory_wall_frac=None)
    assert not [cause for cause, _, _ in m.blamed() if len(cause) == 2 and "workers" in dict(cause)]
    assert m.p_ok({**base, "workers": 8, "attn": "flash"}) < 0.55
    assert m.p_ok({**base, "workers": 6, "attn": "flash"}) > 0.9
