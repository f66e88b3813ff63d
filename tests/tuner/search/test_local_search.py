"""The memory-aware local search: compound moves where an enabler is needed, moves ordered by the
measured spread, failures blamed on the values that caused them; on records, then through a real
Optuna study and a whole study on an analytic landscape."""

from __future__ import annotations

import io
import math
import random
from dataclasses import replace

import optuna
import pytest
from optuna.trial import TrialState
from rich.console import Console

from nccl_tune.failure import FailureClass, Verdict
from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.trial import GpuMemory, MemoryReport, StopReason, TrialResult
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.study_records import Outcome, TrialKind, TrialRecord
from nccl_tune.tuner.search.local_search import (
    HOPEFUL_FIT,
    LAST_TRIALS,
    LAST_TRIALS_WHY,
    LocalSearchSampler,
    Planner,
)
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.study.loop import run_study
from twin.analytic import AnalyticNode, Truth, analytic_cost
from twin.families import FAMILIES, instance
from twin.launcher import ModelLauncher

SPACE = parse_space(
    """
name: sft
parameters:
  - {name: micro, kind: pow2, low: 1, high: 32, default: 2, memory: increasing}
  - {name: ckpt, kind: bool, default: false, memory: decreasing}
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree], default: unset, memory: none}
throughput: {samples_per_step: 64}
""",
    source="test",
    label="sft",
)
BASE = SPACE.defaults()
GPU = 80.0


def peak(v) -> float:
    return 30.0 + 10.0 * v["micro"] * (0.12 if v["ckpt"] else 1.0)


def speed(v) -> float:
    """Samples/s: larger micro-batches are faster, checkpointing costs 30%, NCCL nothing."""
    return 64.0 * v["micro"] / (v["micro"] + 8.0) / (1.3 if v["ckpt"] else 1.0)


def record(number: int, v: dict, used_gib: float, step_s: float, status: FailureClass | None = None) -> TrialRecord:
    """A launched run of ``v`` that peaked at ``used_gib`` (out of memory above ``GPU``) and
    stepped every ``step_s`` after a slower warm-up step."""
    status = status or (FailureClass.OK if used_gib <= GPU else FailureClass.OOM)
    result = TrialResult(
        number=number,
        status=status,
        verdict=Verdict(status),
        stop_reason=StopReason.MEASURED,
        step_times_s=(step_s * 1.3, step_s, step_s * 1.01, step_s * 0.99) if status is FailureClass.OK else (),
        warmup_steps=1,
        samples_per_step=64.0,
        memory=MemoryReport("nvml", (GpuMemory(0, GPU, min(used_gib, GPU)),)),
    )
    return TrialRecord(number, TrialState.COMPLETE, v, TrialKind.SEARCH, Outcome.LAUNCHED, status, result)


def rec(number: int, changes: dict, status: FailureClass | None = None) -> TrialRecord:
    v = {**BASE, **changes}
    return record(number, v, peak(v), 64.0 / speed(v), status)


def propose(records: list[TrialRecord]):
    proposal = Planner(SPACE, {}, records).propose(random.Random(0))
    assert proposal is not None
    return proposal


def test_a_micro_batch_that_does_not_fit_is_tried_with_the_enabler_that_frees_room():
    # micro 2 -> 4 fits (70 GiB), micro 8 ran out; NCCL measured flat: checkpointing is the way on
    records = [rec(0, {}), rec(1, {"micro": 4}), rec(2, {"micro": 8}), rec(3, {"micro": 4, "NCCL_ALGO": "Ring"})]
    assert records[2].status is FailureClass.OOM
    p = propose(records)
    assert p.values["ckpt"] is True and p.values["micro"] == 8, p.reason
    assert p.reason.startswith("compound move")


def test_a_study_whose_failures_took_their_share_of_its_time_risks_no_coin_toss():
    """The compound move above fits at even odds. Without a planned number of trials there is no
    budget and it comes first; in a study planned for 20 trials whose one OOM took three runs'
    time, failures already took more than the study's failure budget, and a move that will finish
    comes first (``failure_budget``)."""
    records = [rec(0, {}), rec(1, {"micro": 4}), rec(2, {"micro": 8}), rec(3, {"micro": 4, "NCCL_ALGO": "Ring"})]
    records = [replace(r, result=replace(r.result, wall_s=300.0 if r.number == 2 else 100.0)) for r in records]
    risky = Planner(SPACE, {}, records).propose(random.Random(0))
    assert risky is not None and risky.reason.startswith("compound move") and risky.fits < 0.6
    late = Planner(SPACE, {}, records, horizon_trials=20)
    assert late.budget.left_s < 0
    safe = late.propose(random.Random(0))
    assert safe is not None and safe.fits > 0.95 and not safe.reason.startswith("compound move"), safe.reason


def test_once_the_enabler_is_measured_the_largest_micro_batch_predicted_to_fit_comes_with_it():
    records = [
        rec(0, {}),
        rec(1, {"micro": 4}),
        rec(2, {"micro": 8}),
        rec(3, {"micro": 8, "ckpt": True}),
        rec(4, {"micro": 16, "ckpt": True}),
    ]
    planner = Planner(SPACE, {}, records)
    p = planner.propose(random.Random(0))
    # micro 32 with checkpointing needs 68 GiB: it fits (measured along the checkpointing line) and is
    # the fastest left (an untried NCCL value may come with it: a pair of moves)
    assert p is not None and (p.values["micro"], p.values["ckpt"]) == (32, True), p.reason
    pred = planner.memory.predict(p.values)
    assert pred.measured and planner.memory.p_fits(p.values) > 0.8


def test_an_enabler_is_tried_alone_only_once_a_finished_run_measured_its_throughput():
    """Checkpointing frees room for micro 8; untried, it only comes with micro 8 (alone it is just
    slower). Once a run with it finished, its measured effect decides: a memory-saving setting can
    be faster on its own (a smaller tensor-parallel size), and a noisy first comparison must not
    keep it out of the study for good."""
    before = [rec(0, {}), rec(1, {"micro": 4}), rec(2, {"micro": 8})]
    alone = {**BASE, "micro": 4, "ckpt": True}
    for records, tried_alone in ((before, False), (before + [rec(3, {"ckpt": True})], True)):
        moves = Planner(SPACE, {}, records).moves([(1, records[1].values)])
        assert any(m.kind == "compound move" and m.values == {**BASE, "micro": 8, "ckpt": True} for m in moves)
        assert any(m.kind == "move" and m.values == alone for m in moves) is tried_alone


def test_an_enabler_whose_every_compound_move_is_expected_not_to_fit_moves_alone():
    """Checkpointing with micro 8 ran out of memory (it freed too little): micro 16 with it is then
    refused or expected not to fit, and no compound move holding it is worth a trial. Its effect on
    throughput is still unmeasured (the run ended before a step), and only a run of it alone can
    measure it (flash attention frees memory and is faster too), so it moves alone."""
    v1, v2, v3 = {**BASE, "micro": 4}, {**BASE, "micro": 8}, {**BASE, "micro": 8, "ckpt": True}
    records = [rec(0, {}), record(1, v1, 70.0, 64.0 / speed(v1)), record(2, v2, 110.0, 1.0), record(3, v3, 95.0, 1.0)]
    assert records[3].status is FailureClass.OOM
    planner = Planner(SPACE, {}, records)
    moves = planner.moves([(1, v1)])
    compounds = planner.compounds(v1, 1)
    assert compounds and not [
        m for m in compounds if planner.admits(m.values) and planner.memory.p_fits(m.values) >= HOPEFUL_FIT
    ]
    assert any(m.kind == "move" and m.values == {**v1, "ckpt": True} for m in moves)


SEQ_SPACE = parse_space(
    """
name: rl
parameters:
  - {name: micro, kind: pow2, low: 1, high: 32, default: 2, memory: increasing}
  - {name: ckpt, kind: bool, default: false, memory: decreasing}
  - {name: seq, kind: categorical, choices: [1024, 2048, 4096, 8192], default: 8192, memory: increasing,
     semantic: true}
throughput: {samples_per_step: 64}
""",
    source="test",
    label="rl",
)


def seq_rec(number: int, changes: dict, shorter_is_faster: bool = True) -> TrialRecord:
    """A run on a job whose shorter sequences need less memory and step faster (or slower: the
    same samples then take more steps' worth of padding and launches, say)."""
    v = {**SEQ_SPACE.defaults(), **changes}
    used = 30.0 + 10.0 * v["micro"] * v["seq"] / 4096 * (0.12 if v["ckpt"] else 1.0)
    length_cost = v["seq"] / 8192 if shorter_is_faster else 1024 / v["seq"]
    step = (v["micro"] + 8.0) / v["micro"] * (1.3 if v["ckpt"] else 1.0) * (1.0 + length_cost)
    return record(number, v, used, step)


@pytest.mark.parametrize("shorter_is_faster", [True, False])
def test_an_unmeasured_enabler_moves_alone_only_when_the_measured_trend_rates_it_faster(shorter_is_faster):
    """A shorter sequence frees room for micro 8. Where the two lengths measured so far say shorter
    is also faster, nothing is traded for its memory: it moves alone too, without waiting for a
    compound move to measure it. Where they say shorter is slower, it comes only with micro 8."""
    runs = [{}, {"seq": 4096}, {"seq": 4096, "micro": 4}, {"seq": 4096, "micro": 8}]
    records = [seq_rec(i, changes, shorter_is_faster) for i, changes in enumerate(runs)]
    assert [r.status for r in records] == [FailureClass.OK] * 3 + [FailureClass.OOM]
    assert (records[1].throughput > records[0].throughput) is shorter_is_faster
    base = records[2].values
    moves = Planner(SEQ_SPACE, {}, records).moves([(2, base)])
    assert any(m.kind == "compound move" and m.values == {**base, "micro": 8, "seq": 2048} for m in moves)
    assert any(m.kind == "move" and m.values == {**base, "seq": 2048} for m in moves) is shorter_is_faster


def test_a_parameter_measured_within_noise_waits_while_others_have_spread():
    records = [rec(0, {}), rec(1, {"NCCL_ALGO": "Ring"}), rec(2, {"micro": 4})]
    planner = Planner(SPACE, {}, records)
    assert planner.tput.scale_of("NCCL_ALGO") < planner.tput.scale_of("micro")
    p = planner.propose(random.Random(0))
    assert p.values["NCCL_ALGO"] != "Tree", p.reason


def test_a_change_whose_gain_is_within_the_models_doubt_is_not_carried_along():
    """An NCCL value measured 3.5% faster by one run, on a job whose steps scatter 1%: the config
    holding it leads the moves. Steps that scatter 4% put 3.5% within what one run can tell: the
    config without it leads (a change that did not measurably help may break in combination)."""

    def measured(number: int, changes: dict, scatter: float) -> TrialRecord:
        v = {**BASE, **changes}
        step_s = 64.0 / speed(v) / (1.035 if v["NCCL_ALGO"] == "Ring" else 1.0)
        r = record(number, v, peak(v), step_s)
        steps = (step_s * 1.3, *(step_s * (1.0 + scatter * (-1) ** i) for i in range(4)))
        return replace(r, result=replace(r.result, step_times_s=steps))

    for scatter, leader in ((0.01, "Ring"), (0.04, "unset")):
        records = [
            measured(0, {}, scatter),
            measured(1, {"micro": 4}, scatter),
            measured(2, {"micro": 4, "NCCL_ALGO": "Ring"}, scatter),
        ]
        first = Planner(SPACE, {}, records).ranked()[0]
        assert first[2]["NCCL_ALGO"] == leader and first[2]["micro"] == 4, scatter


def test_a_failure_is_blamed_on_the_values_its_move_changed():
    records = [rec(0, {}), rec(1, {"micro": 4}), rec(2, {"micro": 4, "NCCL_ALGO": "Tree"}, FailureClass.HANG)]
    planner = Planner(SPACE, {}, records)
    elsewhere = planner.failures.p_ok({**BASE, "micro": 8, "ckpt": True, "NCCL_ALGO": "Tree"})
    assert elsewhere < 0.6 and planner.failures.p_ok({**BASE, "micro": 4, "NCCL_ALGO": "Tree"}) < elsewhere
    assert planner.failures.p_ok({**BASE, "micro": 8, "ckpt": True}) == planner.failures.p_ok(BASE) > 0.95
    assert planner.propose(random.Random(0)).values["NCCL_ALGO"] != "Tree"


NCCL_ONLY = parse_space(
    """
name: nccl-only
parameters:
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree, NVLS], default: unset, memory: none}
  - {name: NCCL_PROTO, kind: categorical, choices: [unset, Simple, LL128, LL], default: unset, memory: none}
  - {name: NCCL_CUMEM_ENABLE, kind: categorical, choices: [unset, 0, 1], default: unset, memory: small}
throughput: {samples_per_step: 64}
""",
    source="test",
    label="nccl-only",
)


def nccl_run(number: int, changes: dict, ll: float, status: FailureClass = FailureClass.OK) -> TrialRecord:
    """A run of ``changes``: NVLS 25% faster, the other values a few percent slower, LL ``ll`` times
    as fast; a failure hangs in the first step."""
    v = {**NCCL_ONLY.defaults(), **changes}
    speed = {"NVLS": 1.25, "Ring": 0.97, "Tree": 0.9}.get(v["NCCL_ALGO"], 1.0)
    speed *= {"LL128": 0.99, "LL": ll}.get(v["NCCL_PROTO"], 1.0)
    ok = status is FailureClass.OK
    result = TrialResult(
        number=number,
        status=status,
        verdict=Verdict(status),
        stop_reason=StopReason.MEASURED,
        step_times_s=tuple(10.0 / speed * f for f in (1.3, 1.0, 1.01, 0.99)) if ok else (),
        warmup_steps=1,
        samples_per_step=64.0,
        wall_s=300.0 if ok else 330.0,
    )
    return TrialRecord(number, TrialState.COMPLETE, v, TrialKind.SEARCH, Outcome.LAUNCHED, status, result)


@pytest.mark.parametrize("ll, waits", [(0.99, True), (0.85, False)])
def test_a_move_likelier_to_fail_than_finish_waits_while_a_likely_one_is_worth_a_trial(ll, waits):
    """cuMem off next to NVLS hung in the first step once; tried again from another base its run is
    likelier to hang than to finish, though its throughput, never measured, promises the most. While
    a move likely to finish is worth a trial (LL next to NVLS, LL measured 1% slower on its own,
    where the prior expected it slower by design), that one goes first; once none is (LL 15%
    slower), the suspect move may still be tried."""
    nv = {"NCCL_ALGO": "NVLS"}
    runs = [
        {},
        nv,
        {**nv, "NCCL_PROTO": "Simple"},
        {"NCCL_ALGO": "Ring"},
        {"NCCL_ALGO": "Tree"},
        {**nv, "NCCL_PROTO": "LL128"},
        {**nv, "NCCL_CUMEM_ENABLE": 1},
        {**nv, "NCCL_PROTO": "Simple", "NCCL_CUMEM_ENABLE": 1},
        {**nv, "NCCL_PROTO": "LL128", "NCCL_CUMEM_ENABLE": 1},
        {"NCCL_PROTO": "LL"},
    ]
    records = [nccl_run(i, c, ll) for i, c in enumerate(runs)]
    records.append(nccl_run(len(runs), {**nv, "NCCL_CUMEM_ENABLE": 0}, ll, FailureClass.HANG))
    planner = Planner(NCCL_ONLY, {}, records)
    p = planner.propose(random.Random(0))
    assert (planner.failures.p_ok(p.values) >= 0.5) is waits, p.reason
    if waits:
        assert p.values["NCCL_PROTO"] == "LL" and p.values["NCCL_CUMEM_ENABLE"] != 0, p.reason
    else:
        assert p.values["NCCL_CUMEM_ENABLE"] == 0 and p.values["NCCL_ALGO"] == "NVLS", p.reason


PROMPTS = parse_space(
    """
name: rl-batch
parameters:
  - {name: batch, kind: categorical, choices: [256, 512], default: 256, memory: none}
  - {name: prompt, kind: categorical, choices: [2048, 4096], default: 4096, memory: none, semantic: true}
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree], default: unset, memory: none}
throughput: {samples_per_step: batch}
""",
    source="test",
    label="rl-batch",
)


def prompt_run(
    number: int, changes: dict, status: FailureClass = FailureClass.OK, wall_s: float = 1000.0
) -> TrialRecord:
    """A run of ``changes``: the larger batch 4% faster; a failure ends before the first step."""
    v = {**PROMPTS.defaults(), **changes}
    step_s = 10.0 * v["batch"] / 256 / (1.04 if v["batch"] == 512 else 1.0)
    ok = status is FailureClass.OK
    result = TrialResult(
        number=number,
        status=status,
        verdict=Verdict(status),
        stop_reason=StopReason.MEASURED,
        step_times_s=(step_s * 1.3, step_s, step_s) if ok else (),
        warmup_steps=1,
        samples_per_step=float(v["batch"]),
        wall_s=wall_s,
    )
    return TrialRecord(number, TrialState.COMPLETE, v, TrialKind.SEARCH, Outcome.LAUNCHED, status, result)


@pytest.mark.parametrize(
    "status, wall_s, tried", [(FailureClass.CRASH, 70.0, True), (FailureClass.HANG, 1500.0, False)]
)
def test_a_value_that_crashed_start_ups_next_to_a_partner_is_tried_with_the_partner_set_back(status, wall_s, tried):
    """The shorter prompt limit crashed at start-up twice, each time at the larger batch (the
    prompts it keeps cannot fill it), which is the incumbent's: from there no one change tries the
    limit without that batch, so the limit comes with the batch set back to the baseline's. Had
    those runs hung, or cost as much as a finished run, the limit stays suspect everywhere and no
    such move is made."""
    records = [prompt_run(0, {}), prompt_run(1, {"batch": 512}), prompt_run(2, {"batch": 512, "NCCL_ALGO": "Ring"})]
    records += [
        prompt_run(3 + i, {"batch": 512, "prompt": 2048, "NCCL_ALGO": algo}, status, wall_s)
        for i, algo in enumerate(["unset", "Tree"])
    ]
    planner = Planner(PROMPTS, {}, records)
    moves = planner.moves([(1, records[1].values)])
    apart = [m for m in moves if m.kind == "move without a partner"]
    assert [m.values for m in apart] == ([{**PROMPTS.defaults(), "prompt": 2048}] if tried else []), apart
    assert not any(m.values == {**PROMPTS.defaults(), "batch": 512, "prompt": 2048} for m in moves)
    if tried:
        assert apart[0].changed == ("prompt", "batch")
        assert planner.failures.worth(apart[0].values) == pytest.approx(
            planner.failures.worth({**PROMPTS.defaults(), "NCCL_ALGO": "Tree"})
        )


def test_a_value_that_crashed_next_to_two_partners_is_tried_with_both_set_back_at_once():
    """The shorter prompt limit crashed at start-up twice, each time at the larger batch and with the
    Ring algorithm: either may be its partner. Setting one back would leave the other, which may be
    the one; the move sets both back, and the limit is not tried next to either meanwhile."""
    records = [prompt_run(0, {}), prompt_run(1, {"batch": 512}), prompt_run(2, {"batch": 512, "NCCL_ALGO": "Ring"})]
    records += [prompt_run(3, {"batch": 512, "prompt": 2048, "NCCL_ALGO": "Ring"}, FailureClass.CRASH, 70.0)]
    records += [prompt_run(4, {"batch": 512, "NCCL_ALGO": "Tree"})]
    records += [prompt_run(5, {"batch": 512, "prompt": 2048, "NCCL_ALGO": "Ring"}, FailureClass.CRASH, 70.0)]
    planner = Planner(PROMPTS, {}, records)
    moves = planner.moves([(2, records[2].values)])
    apart = [m for m in moves if m.kind == "move without a partner"]
    assert [m.values for m in apart] == [{**PROMPTS.defaults(), "prompt": 2048}], apart
    assert apart[0].changed == ("prompt", "NCCL_ALGO", "batch")
    for partner in ({"batch": 512}, {"NCCL_ALGO": "Ring"}):
        assert planner.failures.p_ok({**PROMPTS.defaults(), "prompt": 2048, **partner}) < 0.6, partner


def told(study: optuna.Study, r: TrialRecord) -> None:
    """``r`` added to a real Optuna study as the tuner stores it (values and result in user attributes)."""
    from nccl_tune.tuner.records.sampling import distributions, to_optuna

    trial = optuna.trial.create_trial(
        params=to_optuna(SPACE, r.values, {}),
        distributions=distributions(SPACE, {}),
        value=r.throughput or 0.0,
        user_attrs={"values": dict(r.values), "result": r.result.to_json(), "status": r.status.value, "kind": "search"},
        system_attrs={"constraints:failed": -1.0 if r.ok else 1.0},
    )
    study.add_trial(trial)


def test_the_sampler_asks_optuna_for_the_planners_proposal():
    study = optuna.create_study(direction="maximize", sampler=LocalSearchSampler(SPACE, {}, seed=0))
    for r in (rec(0, {}), rec(1, {"micro": 4}), rec(2, {"micro": 8}), rec(3, {"micro": 4, "NCCL_ALGO": "Ring"})):
        told(study, r)
    trial = study.ask()
    from nccl_tune.tuner.records.sampling import suggest

    values = suggest(trial, SPACE, {})
    assert values == {**BASE, "micro": 8, "ckpt": True}
    assert trial.params["micro:log2"] == 3


def test_a_trial_tpe_proposed_says_why_the_planner_declined_and_an_enqueued_one_says_nothing():
    sampler = LocalSearchSampler(SPACE, {}, seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    from nccl_tune.tuner.records.sampling import suggest, to_optuna

    study.enqueue_trial(to_optuna(SPACE, {**BASE, "micro": 4}, {}))
    enqueued = study.ask()
    assert sampler.why(enqueued.number, suggest(enqueued, SPACE, {})) is None
    study.tell(enqueued, state=TrialState.FAIL)
    # nothing launched yet: the planner has no base, so TPE proposes and the trial says so
    trial = study.ask()
    values = suggest(trial, SPACE, {})
    assert sampler.why(trial.number, values) == "TPE, since no launched trial to move from"
    study.tell(trial, state=TrialState.FAIL)
    told(study, rec(2, {}))
    trial = study.ask()
    values = suggest(trial, SPACE, {})
    assert sampler.why(trial.number, values).startswith(("move from trial 2: ", "pair of moves from trial 2: "))
    assert sampler.why(trial.number + 1, values) is None


def test_a_whole_study_on_the_enabler_trap_takes_the_slower_enabler_for_a_larger_micro_batch(tmp_path):
    inst, ex = instance("enabler-trap", 0)
    space_file = tmp_path / "trap.yaml"
    space_file.write_text(FAMILIES["enabler-trap"].space_yaml)
    storage = f"sqlite:///{tmp_path / 'trap.db'}"
    settings = RunSettings(
        command=("true",),
        space=str(space_file),
        results=tmp_path,
        storage=storage,
        study="trap",
        trials=12,
        seed=0,
        confirm=0,
    )
    launcher = ModelLauncher(env={"HOME": str(tmp_path)}, cost=analytic_cost(inst.landscape, inst.node))
    shown = io.StringIO()
    out = run_study(settings, console=Console(file=shown, width=200), launcher=launcher)
    # every move the planner proposed says why under its trial's line, and the study keeps it
    text = shown.getvalue()
    assert "from trial 0: " in text and "why: compound move from trial" in text
    kept = [t.user_attrs.get("why") for t in optuna.load_study(study_name="trap", storage=storage).trials]
    assert kept[0] is None and sum(1 for w in kept if w) == text.count("why: ") >= 6
    ok = [r for r in out.records if r.ok and r.values["train.gradient_checkpointing"]]
    assert any(r.values["train.micro_batch_size"] >= 16 for r in ok)
    best = out.winner
    assert best is not None and best.values["train.gradient_checkpointing"]
    assert AnalyticNode().capacity_gib and isinstance(inst.landscape(best.values), Truth)


def test_a_config_holding_a_flaky_value_is_neither_the_incumbent_nor_a_base():
    """Tree hung two of its five runs: better than even odds for a run, but a value that fails that
    often is no stable setting. The config that finished with it is the fastest; the incumbent and
    the moves come from the others."""
    lucky = {"micro": 4, "NCCL_ALGO": "Tree"}
    records = [
        rec(0, {}),
        rec(1, {"micro": 4}),
        rec(2, lucky),
        rec(3, {"NCCL_ALGO": "Tree"}, FailureClass.HANG),
        rec(4, {"micro": 1, "NCCL_ALGO": "Tree"}),
        rec(5, {"ckpt": True, "NCCL_ALGO": "Tree"}, FailureClass.HANG),
        rec(6, {"ckpt": True, "micro": 4, "NCCL_ALGO": "Tree"}),
        rec(7, {"NCCL_ALGO": "Ring"}),
    ]
    planner = Planner(SPACE, {}, records)
    assert planner.failures.p_ok({**BASE, **lucky}) > 0.5 and planner.failures.flaky({**BASE, **lucky})
    ranked = [number for _, number, _, _ in planner.ranked()]
    assert ranked[0] == 1 and not {2, 4, 6} & set(ranked)
    proposal = planner.propose(random.Random(0))
    assert proposal is not None and "from trial 2" not in proposal.reason


def test_no_move_goes_to_a_config_holding_a_flaky_value():
    """One hang of Tree may be chance: moves still try it elsewhere. Two hangs in two runs make it
    flaky: the incumbent and the export pass over a config holding it, so no move goes there."""
    once = [rec(0, {}), rec(1, {"micro": 4}), rec(2, {"NCCL_ALGO": "Tree"}, FailureClass.HANG)]
    twice = once + [rec(3, {"ckpt": True, "NCCL_ALGO": "Tree"}, FailureClass.HANG)]
    tree = {**BASE, "micro": 4, "NCCL_ALGO": "Tree"}
    for records, flaky in ((once, False), (twice, True)):
        planner = Planner(SPACE, {}, records)
        assert bool(planner.failures.flaky(tree)) is flaky
        moves = planner.moves([(1, records[1].values)])
        assert moves and any(m.values["NCCL_ALGO"] == "Tree" for m in moves) is not flaky


def tpe_fallback_study(seed: int, asks: int, said: list | None = None) -> tuple[list[dict], list[TrialRecord]]:
    """The configs the sampler proposes, and the study's records, where every move near the best is measured: no-
    checkpointing micro-batches of 4 are the fastest, checkpointing triples a step, a micro-batch of
    8 without it ran out of memory, and the larger ones without it were never run. ``said``, when
    given, takes each proposal's why-line and stored odds."""
    import itertools

    from nccl_tune.tuner.records.sampling import suggest

    def step_s(v: dict) -> float:
        return (v["micro"] + 8.0) / v["micro"] * (3.0 if v["ckpt"] else 1.0)

    sampler = LocalSearchSampler(SPACE, {}, seed=seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    records = []
    for micro, ckpt, algo in itertools.product((1, 2, 4, 8, 16, 32), (True, False), ("unset", "Ring", "Tree")):
        v = {**BASE, "micro": micro, "ckpt": ckpt, "NCCL_ALGO": algo}
        if ckpt or micro < 8 or (micro == 8 and algo == "unset"):
            records.append(record(len(records), v, peak(v), step_s(v)))
            told(study, records[-1])
    out = []
    for _ in range(asks):
        trial = study.ask()
        values = suggest(trial, SPACE, {})
        assert sampler.why(trial.number, values).startswith("TPE, since every move from the best configs is tried")
        out.append(values)
        if said is not None:
            said.append((sampler.why(trial.number, values), sampler.odds(trial.number, values)))
        study.tell(trial, state=TrialState.FAIL)
    return out, records


def tpe_fallback_proposals(seed: int, asks: int) -> list[float]:
    """P(fits) of the configs ``tpe_fallback_study`` proposes."""
    values, records = tpe_fallback_study(seed, asks)
    memory = Planner(SPACE, {}, records).memory
    return [memory.p_fits(v) for v in values]


def test_where_no_move_is_worth_a_trial_tpe_proposes_configs_the_memory_model_expects_to_fit(monkeypatch):
    from nccl_tune.tuner.search import local_search

    fits = [p for seed in (1, 2) for p in tpe_fallback_proposals(seed, 12)]
    assert min(fits) >= 0.5, fits
    # TPE alone knows nothing of memory: here it proposes micro-batches the runs put over the GPU
    monkeypatch.setattr(local_search, "TPE_DRAWS", 1)
    alone = [p for seed in (1, 2) for p in tpe_fallback_proposals(seed, 12)]
    assert sum(p < 0.5 for p in alone) >= 3, alone


def test_a_tpe_draw_shows_and_stores_the_odds_the_models_gave_it_as_a_move_does():
    """A draw of TPE is a proposal too: its trial says the odds the memory model gave it and the
    gain the throughput model did, and stores them, so that the study's check of its odds
    (``fit_odds``) and the benchmarks' reliability table count every proposal, not the planner's
    alone (the pipeline landscape's draws that ran out of memory were rated 0% to fit, and no record
    said so)."""
    said: list = []
    values, records = tpe_fallback_study(1, 4, said)
    planner = Planner(SPACE, {}, records)
    for v, (why, odds) in zip(values, said):
        assert odds is not None and odds["fits_model"] == pytest.approx(planner.memory.p_fits_model(v)), (why, odds)
        assert odds["fits"] == pytest.approx(planner.memory.p_fits(v))
        assert why.endswith(f"fits {odds['fits']:.0%})") and f"modelled {odds['gain']:+.1%}" in why, why
        best = max(row[0] for row in planner.ranked() if row[3])
        assert odds["gain"] == pytest.approx(float(planner.tput.predict([v])[0][0]) - best)


def sampled_study(records: list[TrialRecord]) -> tuple[LocalSearchSampler, optuna.Study]:
    """The default sampler and a real Optuna study told ``records``."""
    sampler = LocalSearchSampler(SPACE, {}, seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for r in records:
        told(study, r)
    return sampler, study


def fallback_of(monkeypatch, sampler: LocalSearchSampler, study: optuna.Study, planner: Planner):
    """A function of TPE's draws, in order, that returns the config the fallback takes of them."""
    from nccl_tune.tuner.records.sampling import from_optuna, to_optuna

    monkeypatch.setattr(sampler._tpe, "infer_relative_search_space", lambda study, trial: {})

    def draws(*configs):
        seq = iter([to_optuna(SPACE, c, {}) for c in configs])
        monkeypatch.setattr(sampler._tpe, "sample_relative", lambda study, trial, space: next(seq))
        return from_optuna(SPACE, sampler._tpe_that_fits(study, study.trials[0], planner), {})

    return draws


def test_where_no_move_is_worth_a_trial_tpe_draws_within_the_failure_budget(monkeypatch):
    """TPE's draws are held to the study's failure budget as the planner's moves are: a draw the
    budget may not risk (here NCCL_ALGO=Tree, as if it had hung) is passed over for the next one,
    and is taken only when no draw is within the budget, as the likeliest to finish."""
    from nccl_tune.tuner.search import local_search

    sampler = LocalSearchSampler(SPACE, {}, seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    records = [rec(0, {})]
    told(study, records[0])
    planner = Planner(SPACE, {}, records)
    tree, ring = ({**BASE, "micro": 4, "NCCL_ALGO": algo} for algo in ("Tree", "Ring"))
    risk = planner.failures.risk
    monkeypatch.setattr(  # Tree's failures would cost ten runs; the budget may risk two
        planner.failures, "risk", lambda values: (*risk(values)[:2], 10.0 if values["NCCL_ALGO"] == "Tree" else 1.0)
    )
    monkeypatch.setattr(local_search.Planner, "affordable", lambda self, fits, ok, cost_ratio: cost_ratio < 2)
    draws = fallback_of(monkeypatch, sampler, study, planner)

    assert draws(tree, ring, *[tree] * (local_search.TPE_DRAWS - 2)) == ring
    assert draws(*[tree] * local_search.TPE_DRAWS) == tree


def test_where_no_move_is_worth_a_trial_tpe_draws_a_config_not_run_before_one_that_was(monkeypatch):
    """TPE knows nothing of the configs already run: once those it favours were, it draws them again,
    and each such draw is told as a duplicate, a trial spent for nothing. A draw the planner would
    not launch itself (already run here) is passed over for the next one, and taken only when no
    draw is new."""
    from nccl_tune.tuner.search import local_search

    records = [rec(0, {}), rec(1, {"micro": 4, "NCCL_ALGO": "Ring"})]
    sampler, study = sampled_study(records)
    planner = Planner(SPACE, {}, records)
    ran, new = {**BASE, "micro": 4, "NCCL_ALGO": "Ring"}, {**BASE, "micro": 4, "NCCL_ALGO": "Tree"}
    assert not planner.admits(ran) and planner.admits(new)
    draws = fallback_of(monkeypatch, sampler, study, planner)

    assert draws(ran, new, *[ran] * (local_search.TPE_DRAWS - 2)) == new
    assert draws(*[ran] * local_search.TPE_DRAWS) == ran


def test_where_no_draw_of_tpe_is_likely_to_finish_the_planners_small_move_goes_instead(monkeypatch):
    """Near a study's end TPE's draws may all be configs already run, or likely to fail (the
    interior landscape drew selective checkpointing with torch.compile again after it crashed
    there). Where the planner declined for want of gain, its best move likely to fit and finish
    goes instead, and says why; where even that promises next to nothing, or the draw is only
    unlikely to fit in memory while the failure budget may risk it, the draw goes as before. Once
    the budget may not (a study that spent it on OOMs), the planner's move goes: on the pipeline
    landscape such draws ran out of memory after the budget stopped the planner's own risks."""
    from nccl_tune.tuner.search import local_search

    monkeypatch.setattr(local_search, "MIN_EXPECTED_GAIN", 0.2)  # every move promises too little
    records = [rec(0, {}), rec(1, {"micro": 4, "NCCL_ALGO": "Ring"})]
    sampler, study = sampled_study(records)
    planner = Planner(SPACE, {}, records)
    assert planner.propose(random.Random(0)) is None and planner.runner_up is not None, planner.declined
    small = planner.runner_up
    assert planner.failures.p_ok(small.values) >= 0.5 and planner.memory.p_fits_model(small.values) >= 0.5
    ran = {**BASE, "micro": 4, "NCCL_ALGO": "Ring"}
    draws = fallback_of(monkeypatch, sampler, study, planner)

    assert draws(*[ran] * local_search.TPE_DRAWS) == {**BASE, **small.values}
    assert sampler.last.values == small.values and sampler.last.reason.endswith(local_search.RUNNER_UP_WHY)
    # a draw only unlikely to fit in memory still goes: it may be the larger micro-batch the study needs
    tight = {**BASE, "micro": 8, "ckpt": True, "NCCL_ALGO": "Ring"}
    assert planner.admits(tight) and planner.memory.p_fits_model(tight) < 0.5 <= planner.failures.p_ok(tight)
    assert draws(*[tight] * local_search.TPE_DRAWS) == tight
    with monkeypatch.context() as spent:  # the budget takes only runs likely to fit and finish
        spent.setattr(local_search.Planner, "affordable", lambda self, fits, ok, cost_ratio: fits * ok >= 0.5)
        assert draws(*[tight] * local_search.TPE_DRAWS) == {**BASE, **small.values}
    monkeypatch.setattr(local_search, "RUNNER_UP_SHARE", 100.0)  # now it promises too little
    again = Planner(SPACE, {}, records)
    assert again.propose(random.Random(0)) is None and not again.runner_up_promises
    assert fallback_of(monkeypatch, sampler, study, again)(*[ran] * local_search.TPE_DRAWS) == ran


def test_a_draw_beyond_the_failure_budget_gives_way_to_a_move_within_it_however_little_it_promises(monkeypatch):
    """Once a study has spent its failure budget, TPE's draws next to the wall or next to values
    that failed are beyond it too (the pipeline landscape drew three configs the memory model gave
    no chance to fit, one after another, and each ran out of memory; the minefield drew the crash
    it had just had). The planner's move that is likely to fit and finish within the budget goes
    instead, even where it promises too little to take the place of a draw merely run before."""
    from nccl_tune.tuner.search import local_search

    monkeypatch.setattr(local_search, "MIN_EXPECTED_GAIN", 0.2)
    monkeypatch.setattr(local_search, "RUNNER_UP_SHARE", 100.0)  # the move promises next to nothing
    records = [rec(0, {}), rec(1, {"micro": 4, "NCCL_ALGO": "Ring"})]
    sampler, study = sampled_study(records)
    planner = Planner(SPACE, {}, records)
    assert planner.propose(random.Random(0)) is None and not planner.runner_up_promises
    small = planner.runner_up
    tight = {**BASE, "micro": 8, "ckpt": True, "NCCL_ALGO": "Ring"}
    draws = fallback_of(monkeypatch, sampler, study, planner)
    assert draws(*[tight] * local_search.TPE_DRAWS) == tight  # within the budget, it goes
    monkeypatch.setattr(local_search.Planner, "affordable", lambda self, fits, ok, cost_ratio: fits * ok >= 0.5)
    assert draws(*[tight] * local_search.TPE_DRAWS) == {**BASE, **small.values}
    assert sampler.last.reason.endswith(local_search.RUNNER_UP_WHY)


def test_in_tpes_start_up_the_fallback_draws_whole_configs_and_holds_them_to_the_same_checks(monkeypatch):
    """In its start-up trials TPE samples each parameter at random on its own, after the sampler's
    relative step: there the fallback draws whole configs at random itself, so that the memory and
    failure models can pass over those likely to fail (micro-batches of 16 and 32 without
    checkpointing, past an OOM at 8), as they do TPE's later draws."""
    from nccl_tune.tuner.records.sampling import distributions, from_optuna
    from nccl_tune.tuner.search import local_search

    records = [rec(0, {}), rec(1, {"micro": 4}), rec(2, {"micro": 8})]
    assert records[2].status is FailureClass.OOM
    planner = Planner(SPACE, {}, records)

    def drawn(seed: int) -> list[float]:
        sampler = LocalSearchSampler(SPACE, {}, seed=seed)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        for r in records:
            told(study, r)
        monkeypatch.setattr(sampler._tpe, "sample_relative", lambda study, trial, space: {})
        out = []
        for trial in study.trials:
            params = sampler._tpe_that_fits(study, trial, planner)
            assert set(params) == set(distributions(SPACE, {}))
            out.append(planner.memory.p_fits_model(from_optuna(SPACE, params, {})))
        return out

    fits = [p for seed in range(4) for p in drawn(seed)]
    assert min(fits) >= 0.5, fits
    monkeypatch.setattr(local_search, "TPE_DRAWS", 1)  # the first draw, unchecked
    assert min(p for seed in range(4) for p in drawn(seed)) < 0.5


SOCKETS = parse_space(
    """
name: ddp
parameters:
  - {name: micro, kind: pow2, low: 1, high: 4, default: 2, memory: increasing}
  - {name: NCCL_SOCKET_NTHREADS, kind: categorical, choices: [unset, 8, 16], default: unset, memory: none}
  - {name: NCCL_NSOCKS_PERTHREAD, kind: categorical, choices: [unset, 4, 8], default: unset, memory: none}
throughput: {samples_per_step: 64}
""",
    source="test",
    label="ddp",
)


def test_no_move_goes_to_a_config_nccl_runs_as_one_already_measured():
    """16 threads x 8 sockets is past NCCL's 64: it runs as 16 x 4, measured; 8 x 8 is a run of its own."""
    base = SOCKETS.defaults()
    runs = [
        ({}, 2.0),
        ({"NCCL_SOCKET_NTHREADS": 16}, 1.5),
        ({"NCCL_SOCKET_NTHREADS": 16, "NCCL_NSOCKS_PERTHREAD": 4}, 1.2),
        ({"NCCL_SOCKET_NTHREADS": 8, "NCCL_NSOCKS_PERTHREAD": 4}, 1.25),
    ]
    records = [record(i, {**base, **changes}, 40.0, step_s) for i, (changes, step_s) in enumerate(runs)]
    planner = Planner(SOCKETS, {}, records)
    moves = planner.moves([(2, records[2].values), (3, records[3].values)])
    socket_pairs = {(m.values["NCCL_SOCKET_NTHREADS"], m.values["NCCL_NSOCKS_PERTHREAD"]) for m in moves}
    assert (8, 8) in socket_pairs and (16, 8) not in socket_pairs
    # the same with the threads pinned (--set NCCL_SOCKET_NTHREADS=16): the clamp reads the pinned value
    pinned = Planner(SOCKETS, {"NCCL_SOCKET_NTHREADS": 16}, records[1:3])
    assert not [m for m in pinned.moves([(2, records[2].values)]) if m.values["NCCL_NSOCKS_PERTHREAD"] == 8]


def quiet_study(tmp_path, name: str, space_text: str, truth, trials: int) -> list[TrialRecord]:
    """The launched trials, in order, of a whole study of ``space_text`` on the analytic landscape
    ``truth`` under 0.5% step noise: no re-run, early stop or screening."""
    space_file = tmp_path / f"{name}.yaml"
    space_file.write_text(space_text)
    settings = RunSettings(
        command=("true",),
        space=str(space_file),
        results=tmp_path,
        storage=f"sqlite:///{tmp_path / f'{name}.db'}",
        study=name,
        trials=trials,
        seed=0,
        confirm=0,
        early_stop_ratio=0.0,
        screening=False,
    )
    launcher = ModelLauncher(env={"HOME": str(tmp_path)}, cost=analytic_cost(truth, AnalyticNode(step_noise=0.005)))
    out = run_study(settings, console=Console(file=io.StringIO(), width=200), launcher=launcher)
    return [r for r in sorted(out.records, key=lambda r: r.number) if r.outcome is Outcome.LAUNCHED]


RISING = """
name: rising
parameters:
  - {name: rollout.max_num_seqs, kind: pow2, low: 16, high: 1024, default: 16, memory: none}
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree], default: unset, memory: none}
stop: {warmup_steps: 1, measured_steps: 3, screen_steps: 0}
throughput: {samples_per_step: 1024}
"""


def test_a_gain_along_an_ordered_axis_is_followed_past_the_next_value(tmp_path):
    """Throughput rises with every doubling of the engines' batch, 16 to 1024 (seven values), from a
    baseline at the low end: a move goes two values at once, so the top is run by the fourth trial,
    not after every value between (six moves one value at a time)."""

    def truth(v):
        return Truth(step_s=100.0 / (1.0 + 0.15 * math.log2(v["rollout.max_num_seqs"] / 16)), peak_gib=30.0)

    launched = quiet_study(tmp_path, "rising", RISING, truth, trials=5)
    seqs = [r.values["rollout.max_num_seqs"] for r in launched]
    assert 1024 in seqs[:4] and not {32, 128, 512} & set(seqs[:4]), seqs
    # each proposal stores the odds it was shown and the memory model's own, which the study checks
    proposed = [r for r in launched if r.why and not r.why.startswith("TPE")]
    assert proposed and all(r.predicted_fits is not None and r.predicted_fits_model is not None for r in proposed)


def pairs_from(planner: Planner, number: int, values: dict) -> set[tuple[tuple[str, object], ...]]:
    """The pairs of moves among ``planner``'s moves from the one base ``(number, values)``: each as
    its two changes, sorted."""
    return {
        tuple(sorted((n, m.values[n]) for n in m.changed))
        for m in planner.moves([(number, values)])
        if m.kind == "pair of moves"
    }


def test_a_pair_of_moves_takes_no_change_rated_slower_and_no_two_nccl_variables():
    """From the baseline (micro 2, no checkpointing) a smaller micro-batch and checkpointing on are
    rated slower by the prior: neither joins a pair. A larger micro-batch (expected faster) pairs
    with an NCCL value (expected neither); two NCCL variables never pair."""
    space = parse_space(SPACE_TEXT_TWO_NCCL, source="test", label="sft2")
    v = space.defaults()
    records = [record(0, v, peak(v), 64.0 / speed(v))]
    pairs = pairs_from(Planner(space, {}, records), 0, v)
    micro = {(("NCCL_ALGO", a), ("micro", m)) for a in ("Ring", "Tree") for m in (4, 8)}
    proto = {(("NCCL_PROTO", p), ("micro", m)) for p in ("Simple", "LL128") for m in (4, 8)}
    assert pairs == micro | proto


SPACE_TEXT_TWO_NCCL = """
name: sft2
parameters:
  - {name: micro, kind: pow2, low: 1, high: 32, default: 2, memory: increasing}
  - {name: ckpt, kind: bool, default: false, memory: decreasing}
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree], default: unset, memory: none}
  - {name: NCCL_PROTO, kind: categorical, choices: [unset, Simple, LL128], default: unset, memory: none}
  - {name: train_batch_size, kind: pow2, low: 256, high: 1024, default: 512, memory: increasing, semantic: true}
throughput: {samples_per_step: 64}
"""


def test_a_pair_of_moves_takes_a_measured_change_only_while_it_measured_no_slower():
    """Once micro 4 measured 20% slower than the baseline (a landscape the prior got wrong), the
    measured trend along the axis decides, not the prior: neither micro 4 nor micro 8 joins a pair,
    and micro 1 does. A semantic parameter (the batch size) never joins one, and only the leading
    base makes pairs."""
    space = parse_space(SPACE_TEXT_TWO_NCCL, source="test", label="sft2")
    v0, v4 = space.defaults(), {**space.defaults(), "micro": 4}
    ring = {**v0, "NCCL_ALGO": "Ring"}
    records = [record(0, v0, peak(v0), 1.0), record(1, v4, peak(v4), 1.2), record(2, ring, peak(ring), 1.0)]
    planner = Planner(space, {}, records)
    paired = {c for pair in pairs_from(planner, 0, v0) for c in pair}
    assert ("micro", 1) in paired and not {("micro", 4), ("micro", 8)} & paired
    assert not any(name == "train_batch_size" for name, _ in paired)
    assert pairs_from(planner, 2, ring)
    both = planner.moves([(0, v0), (2, ring)])
    assert {m.base for m in both if m.kind == "pair of moves"} == {0}


def test_a_pair_of_moves_that_each_take_memory_is_proposed_only_when_likely_to_fit():
    """Dropping checkpointing and a larger micro-batch each fit alone (64 and 62 GiB of 80) and are
    each rated faster, but together they ask for 80-100 GiB: the two stack their risks and a run
    that runs out measures neither, so no pair takes both; each still pairs with an NCCL value."""
    space = parse_space(
        SPACE_TEXT_TWO_NCCL.replace("ckpt, kind: bool, default: false", "ckpt, kind: bool, default: true"),
        source="test",
        label="sft2",
    )

    def gib(v: dict) -> float:
        return 40.0 * 1.25 ** math.log2(v["micro"] / 2) * (1.0 if v["ckpt"] else 1.6)

    v = space.defaults()
    runs = [v, {**v, "micro": 4}, {**v, "micro": 1, "ckpt": False}]
    planner = Planner(space, {}, [record(i, r, gib(r), 64.0 / speed(r)) for i, r in enumerate(runs)])
    pairs = pairs_from(planner, 0, v)
    assert {(("NCCL_ALGO", "Ring"), ("ckpt", False)), (("NCCL_ALGO", "Ring"), ("micro", 8))} <= pairs
    both = {(("ckpt", False), ("micro", m)) for m in (4, 8)}
    assert not both & pairs
    assert all(planner.admits({**v, "micro": m, "ckpt": False}) for m in (4, 8))  # admitted, only unlikely


TWO_GAINS = """
name: two-gains
parameters:
  - {name: train.micro_batch_size, kind: pow2, low: 1, high: 4, default: 1, memory: increasing}
  - {name: rollout.gpu_memory_utilization, kind: categorical, choices: [0.5, 0.6, 0.7], default: 0.5, memory: increasing}
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree], default: unset, memory: none}
stop: {warmup_steps: 1, measured_steps: 3, screen_steps: 0}
throughput: {samples_per_step: 1024}
"""


def test_two_changes_expected_to_gain_are_taken_in_one_trial(tmp_path):
    """A larger micro-batch and a larger engines' pool are each expected faster (more memory), and
    each gains about 14% at the top of its axis, whatever the other's value: a pair of moves takes
    both in the first trial after the baseline, where one move at a time needs two trials to run
    the best. An NCCL value, expected neither faster nor slower, promises less as the partner."""

    def truth(v):
        micro, util = v["train.micro_batch_size"], v["rollout.gpu_memory_utilization"]
        gain = (1.0 + 0.07 * math.log2(micro)) * (1.0 + 0.7 * (util - 0.5))
        return Truth(step_s=100.0 / gain, peak_gib=8.0 + 0.5 * micro + 2.0 * util)

    second = quiet_study(tmp_path, "two-gains", TWO_GAINS, truth, trials=2)[1]
    assert second.why.startswith("pair of moves from trial 0: "), second.why
    assert (second.values["train.micro_batch_size"], second.values["rollout.gpu_memory_utilization"]) == (4, 0.7)
    assert second.values["NCCL_ALGO"] == "unset"


def test_a_pair_of_moves_may_undo_a_carried_change_however_the_model_rates_it():
    """From a config that carried micro 4 in (measured 20% faster than the baseline's micro 2),
    going back to micro 2 is rated slower, and it may still join a pair: one noisy run's word put it
    there, and a pair that undoes it reads it again. Micro 1, also rated slower and not the
    baseline's value, does not join one."""
    space = parse_space(SPACE_TEXT_TWO_NCCL, source="test", label="sft2")
    v0, v4 = space.defaults(), {**space.defaults(), "micro": 4}
    planner = Planner(space, {}, [record(0, v0, peak(v0), 1.0), record(1, v4, peak(v4), 0.8)])
    means, _ = planner.tput.predict([v4, {**v4, "micro": 2}])
    assert means[1] < means[0] - 0.1
    paired = {c for pair in pairs_from(planner, 1, v4) for c in pair}
    assert ("micro", 2) in paired and ("micro", 1) not in paired


def test_where_no_move_is_worth_a_trial_tpe_does_not_draw_a_value_the_command_refused(monkeypatch):
    """Every config near the best measured (a micro-batch of 8 without checkpointing ran out of
    memory), and NCCL_ALGO=Tree refused at start-up twice, in two contexts: TPE's draws that hold Tree are passed over for one the failure model expects to
    finish; TPE alone draws Tree again."""
    import itertools

    from nccl_tune.tuner.records.sampling import suggest
    from nccl_tune.tuner.search import local_search

    def proposals(seed: int, asks: int) -> list[dict]:
        sampler = LocalSearchSampler(SPACE, {}, seed=seed)
        study = optuna.create_study(direction="maximize", sampler=sampler)
        records = []
        for micro, ckpt, algo in itertools.product((1, 2, 4, 8, 16, 32), (True, False), ("unset", "Ring", "Tree")):
            v = {**BASE, "micro": micro, "ckpt": ckpt, "NCCL_ALGO": algo}
            if algo == "Tree" and (micro, ckpt) in ((1, True), (2, False)):
                records.append(record(len(records), v, 0.0, 1.0, FailureClass.CONFIG_ERROR))
            elif algo != "Tree" and (ckpt or micro < 8 or (micro == 8 and algo == "unset")):
                records.append(record(len(records), v, peak(v), 64.0 / speed(v)))
            else:
                continue
            told(study, records[-1])
        out = []
        for _ in range(asks):
            trial = study.ask()
            values = suggest(trial, SPACE, {})
            if sampler.why(trial.number, values).startswith("TPE"):
                out.append(values)
            study.tell(trial, state=TrialState.FAIL)
        return out

    drawn = [v for seed in (1, 2) for v in proposals(seed, 10)]
    assert drawn and not [v for v in drawn if v["NCCL_ALGO"] == "Tree"], drawn
    monkeypatch.setattr(local_search, "TPE_DRAWS", 1)
    alone = [v for seed in (1, 2) for v in proposals(seed, 10)]
    assert any(v["NCCL_ALGO"] == "Tree" for v in alone), alone


DDP = parse_space(
    """
name: ddp-buckets
parameters:
  - {name: micro, kind: pow2, low: 1, high: 8, default: 4, memory: increasing}
  - {name: NCCL_PROTO, kind: categorical, choices: [LL, LL128, Simple], default: LL128, memory: small}
  - {name: bucket_mb, kind: categorical, choices: [25, 50, 100, 200, 400], default: 25, memory: small}
throughput: {samples_per_step: 64}
""",
    source="test",
    label="ddp-buckets",
)


def test_the_protocol_and_a_bucket_size_that_each_lost_alone_are_tried_together():
    """Simple on 25 MB buckets and larger buckets under LL128 each measured slower, and every
    micro-batch too: the additive model rates the pair slower still, but NCCL's protocol follows
    the message size (Simple for large ones), so Simple with larger buckets gets a trial, once."""
    base = DDP.defaults()

    def ran(number: int, changes: dict, step_s: float) -> TrialRecord:
        return record(number, {**base, **changes}, 40.0, step_s)

    records = [
        ran(0, {}, 1.0),
        ran(1, {"NCCL_PROTO": "Simple"}, 1.04),
        ran(2, {"bucket_mb": 50}, 1.02),
        ran(3, {"NCCL_PROTO": "LL"}, 1.05),
        ran(4, {"micro": 8}, 1.03),
        ran(5, {"micro": 2}, 1.04),
        ran(6, {"bucket_mb": 100}, 1.04),
        ran(7, {"bucket_mb": 200}, 1.06),
    ]
    planner = Planner(DDP, {}, records)
    p = planner.propose(random.Random(0))
    assert p is not None and p.reason.startswith("pair that may interact"), p.reason
    assert p.values["NCCL_PROTO"] == "Simple" and p.values["bucket_mb"] in (50, 100), p.values
    assert p.gain_log < 0  # the model's own figure, from its parts
    tried = records + [ran(8, {"NCCL_PROTO": "Simple", "bucket_mb": 100}, 0.99)]
    again = Planner(DDP, {}, tried)
    assert again.interactions(base, 0) == []


def test_the_sampler_stores_the_odds_it_showed_and_the_memory_models_own(monkeypatch):
    import dataclasses

    from nccl_tune.tuner.records.sampling import suggest
    from nccl_tune.tuner.search import local_search

    proposal = local_search.Proposal({**BASE, "micro": 4}, "move from trial 0: micro=4", 0.1, 0.6, 0.05, 0.8)
    monkeypatch.setattr(local_search.Planner, "propose", lambda self, rng: proposal)
    sampler = LocalSearchSampler(SPACE, {}, seed=0)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    told(study, rec(0, {}))
    trial = study.ask()
    values = suggest(trial, SPACE, {})
    assert sampler.odds(trial.number, values) == {"fits": 0.6, "gain": 0.05, "fits_model": 0.8}
    trial.set_user_attr(R.A_ODDS, sampler.odds(trial.number, values))
    study.tell(trial, state=TrialState.FAIL)
    stored = R.records_of([study.trials[-1]])[0]
    assert (stored.predicted_fits, stored.predicted_fits_model) == (0.6, 0.8)
    unknown = dataclasses.replace(proposal, values={**BASE, "micro": 8}, fits=None, fits_model=None)
    monkeypatch.setattr(local_search.Planner, "propose", lambda self, rng: unknown)
    trial = study.ask()
    values = suggest(trial, SPACE, {})
    assert sampler.odds(trial.number, values) == {"gain": 0.05}  # no odds to fit where memory is not known


def test_without_the_gpus_size_a_proposal_shows_no_odds_to_fit_and_stores_none():
    """A trainer's log in GiB on a node NVML cannot read: no peak is a share of the GPU, so the
    planner weighs even odds but shows and stores none; once a run gives the size, it shows them."""
    import dataclasses

    def unsized(r: TrialRecord) -> TrialRecord:
        gpus = tuple(GpuMemory(g.index, 0.0, g.peak_gib) for g in r.result.memory.gpus)
        return dataclasses.replace(r, result=dataclasses.replace(r.result, memory=MemoryReport("log", gpus)))

    records = [unsized(rec(0, {})), unsized(rec(1, {"micro": 4}))]
    planner = Planner(SPACE, {}, records)
    proposal = planner.propose(random.Random(0))
    assert not planner.memory.knows(proposal.values)
    assert proposal.fits is None and proposal.fits_model is None
    assert "memory not known yet" in proposal.reason and "fits" not in proposal.reason
    sized = Planner(SPACE, {}, [rec(0, {}), rec(1, {"micro": 4})]).propose(random.Random(0))
    assert sized.fits is not None and f"fits {sized.fits:.0%}" in sized.reason


LM = parse_space(
    """
name: lm
parameters:
  - {name: micro, kind: pow2, low: 2, high: 32, default: 2, memory: increasing}
  - {name: seq, kind: categorical, choices: [1024, 2048], default: 2048, memory: increasing, semantic: true}
throughput: {samples_per_step: 64}
""",
    source="test",
    label="lm",
)


def lm_rec(number: int, micro: int, seq: int) -> TrialRecord:
    """A run of the LM space: samples/s double when the sequence halves (the same tokens/s), and
    grow with the micro-batch; out of memory above a micro-batch of 16 at 2048 tokens."""
    v = {"micro": micro, "seq": seq}
    samples_s = 64.0 * micro / (micro + 4.0) * 2048 / seq
    return record(number, v, 30.0 + 3.0 * micro * seq / 2048, 64.0 / samples_s)


def test_where_no_move_from_a_lead_that_changes_the_training_is_worth_a_trial_one_that_keeps_it_is():
    """The leading config halved the sequence (a semantic change), and every move from it is
    measured; the micro-batch of 16 at the user's sequence length, never run, is proposed as the move
    that keeps the training, its gain over the fastest config that keeps it (the micro-batch of 4)."""
    records = [lm_rec(0, 2, 2048), lm_rec(1, 4, 2048)]
    records += [lm_rec(2 + i, micro, 1024) for i, micro in enumerate((2, 4, 8, 16, 32))]
    planner = Planner(LM, {}, records)
    ranked = planner.ranked()
    assert ranked[0][2] == {"micro": 32, "seq": 1024}
    assert planner._best_move(random.Random(0), ranked) is None  # the lead's every neighbour ran
    proposal = planner.propose(random.Random(0))
    assert proposal is not None and proposal.values["seq"] == 2048 and proposal.values["micro"] in (8, 16)
    assert proposal.reason.startswith("move from trial 1") and "keeps the training as you run it" in proposal.reason
    assert proposal.gain_log is not None and proposal.gain_log < 0  # recorded over the study's incumbent
    # pinned to the user's sequence length, there is no semantic lead and nothing changes
    assert Planner(LM, {"seq": 2048}, records[:2]).speed_only_move(random.Random(0), ranked) is None


def test_where_the_users_own_config_ran_out_of_memory_the_lead_is_tried_with_the_training_set_back():
    """No config at the user's sequence length ran stable (the user's micro-batch of 32 ran out of
    memory there): the speed-only move takes a leading config's micro-batch back to the user's
    sequence length, rather than leaving the report's speed-only answer empty."""
    records = [replace(lm_rec(0, 32, 2048), status=FailureClass.OOM)]
    records += [lm_rec(1 + i, micro, 1024) for i, micro in enumerate((32, 16, 8, 4))]
    planner = Planner(LM, {}, records)
    ranked = planner.ranked()
    assert ranked[0][2]["seq"] == 1024 and not any(row[2]["seq"] == 2048 for row in ranked)
    proposal = planner.speed_only_move(random.Random(0), ranked)
    assert proposal is not None and proposal.values["seq"] == 2048 and proposal.values["micro"] in (4, 8, 16)
    assert proposal.reason.startswith("the training set back from trial ") and "seq=2048" in proposal.reason
    assert "keeps the training as you run it" in proposal.reason
    assert proposal.gain_log is not None and proposal.gain_log < 0  # recorded over the study's incumbent
    # with nothing stable to carry back, there is no such move
    assert Planner(LM, {}, records[:1]).speed_only_move(random.Random(0), []) is None


def test_in_the_runs_last_trials_one_goes_to_the_training_as_the_user_runs_it():
    """Moves from a lead that halved the sequence still promise gains, but the run has one trial
    left and nothing at the user's sequence length ran stable: that trial keeps the training, once;
    earlier in the run, or once a search trial tried the user's sequence length, the lead moves on."""
    oom = replace(lm_rec(0, 32, 2048), status=FailureClass.OOM, kind=TrialKind.BASELINE)
    records = [oom, lm_rec(1, 2, 1024), lm_rec(2, 4, 1024)]
    early = Planner(LM, {}, records, trials_left=LAST_TRIALS).propose(random.Random(0))
    assert early.values["seq"] == 1024 and LAST_TRIALS_WHY not in early.reason
    last = Planner(LM, {}, records, trials_left=LAST_TRIALS - 1).propose(random.Random(0))
    assert last.values["seq"] == 2048 and last.reason.endswith(LAST_TRIALS_WHY)
    tried = [*records, replace(lm_rec(3, 16, 2048), status=FailureClass.OOM)]
    again = Planner(LM, {}, tried, trials_left=0).propose(random.Random(0))
    assert again.values["seq"] == 1024 and LAST_TRIALS_WHY not in again.reason


def test_the_samplers_trials_left_count_this_runs_baseline_and_search_trials_only():
    sampler = LocalSearchSampler(LM, seed=0, planned_trials=5)
    assert sampler._trials_left([]) is None  # before the run's first trial
    optuna.create_study(sampler=sampler).ask()  # the run's first trial: number 0
    runs = [replace(lm_rec(0, 2, 2048), kind=TrialKind.BASELINE), lm_rec(1, 4, 2048)]
    runs += [replace(lm_rec(2, 4, 2048), kind=TrialKind.RERUN), replace(lm_rec(3, 4, 2048), kind=TrialKind.FORCED)]
    runs += [replace(lm_rec(4, 8, 2048), outcome=Outcome.PREDICTED)]
    assert sampler._trials_left(runs) == 5 - 2 - 1
    assert sampler._trials_left(runs, running=1) == 5 - 2 - 1 - 1  # another slot's trial runs


def test_no_move_that_keeps_the_training_is_proposed_while_the_lead_keeps_it():
    records = [lm_rec(0, 2, 2048), lm_rec(1, 4, 2048), lm_rec(2, 8, 2048), lm_rec(3, 16, 2048)]
    planner = Planner(LM, {}, records)
    assert planner.ranked()[0][2] == {"micro": 16, "seq": 2048}
    assert planner.speed_only_move(random.Random(0), planner.ranked()) is None


def test_the_samplers_trials_left_end_where_the_runs_wall_clock_budget_does():
    fit: list[int | None] = [2]
    asked: list[int] = []
    sampler = LocalSearchSampler(LM, seed=0, planned_trials=5, trials_fit=lambda n: asked.append(n) or fit[0])
    optuna.create_study(sampler=sampler).ask()
    runs = [replace(lm_rec(0, 2, 2048), kind=TrialKind.BASELINE)]
    assert sampler._trials_left(runs) == 2 - 1  # time for two more: this one and one after it
    assert sampler._trials_left(runs, running=1) == 0
    assert asked == [1, 2]  # the budget's pace is per search trial this run launched, running ones too
    fit[0] = 9
    assert sampler._trials_left(runs) == 5 - 1 - 1  # --trials ends first
    fit[0] = None  # no deadline, or nothing timed yet
    assert sampler._trials_left(runs) == 5 - 1 - 1
    by_time = LocalSearchSampler(LM, seed=0, trials_fit=lambda n: 3)
    optuna.create_study(sampler=by_time).ask()
    assert by_time._trials_left(runs) == 3 - 1


def test_the_last_trials_read_the_lead_from_the_stable_configs_not_from_one_tied_with_it():
    """The user's own config ran at the lead's speed, near the memory wall (not stable); tied with the
    lead, it sorts first as the config with fewer changes. The lead halved the sequence all the same:
    in the run's last trial one goes to the training as the user runs it."""
    base = replace(lm_rec(0, 2, 2048), kind=TrialKind.BASELINE, near_wall=True)
    short = record(1, {"micro": 2, "seq": 1024}, 33.0, base.result.step_times_s[1])
    planner = Planner(LM, {}, [base, short], trials_left=0)
    ranked = planner.ranked()
    assert ranked[0][1] == 0 and not ranked[0][3] and ranked[1][1] == 1 and ranked[1][3]
    assert planner.speed_only_unanswered(ranked)
    last = planner.propose(random.Random(0))
    assert last.values["seq"] == 2048 and last.reason.endswith(LAST_TRIALS_WHY)


PACKING = parse_space(
    """
name: packing
parameters:
  - {name: micro_batch, kind: pow2, low: 1, high: 32, default: 4, memory: increasing}
  - {name: packing, kind: bool, default: false, memory: increasing}
  - {name: num_workers, kind: categorical, choices: [2, 4, 8], default: 4, memory: none}
throughput: {samples_per_step: 64}
""",
    source="test",
    label="packing",
)


def packed_run(number: int, changes: dict) -> TrialRecord:
    """Packing costs 5% alone and gains 8% per doubling of the micro-batch above 4, where padding
    costs an unpacked micro-batch 3% per doubling; a halving below 4 costs 3% (launches); fewer
    loader workers cost 2%, more 1%."""
    v = {**PACKING.defaults(), **changes}
    doublings = math.log2(v["micro_batch"] / 4)
    gain = -0.05 * v["packing"] + doublings * (0.03 if doublings < 0 else 0.08 if v["packing"] else -0.03)
    gain -= {2: 0.02, 4: 0.0, 8: 0.01}[v["num_workers"]]
    used = 30.0 + 1.2 * v["micro_batch"] * (1.6 if v["packing"] else 1.0)
    return record(number, v, used, math.exp(-gain))


def test_a_change_that_takes_memory_and_loses_alone_is_tried_with_a_micro_batch_on_each_side():
    """Packing and every micro-batch measured slower one at a time: the additive model rates them
    together slower still, but a change that takes memory and loses speed is traded against the
    micro-batch, so packing goes with a micro-batch far along its axis, one run a side; the loader
    workers, which take no memory, are never paired so."""
    changes = [{}, {"micro_batch": 8}, {"micro_batch": 16}, {"micro_batch": 2}, {"packing": True}]
    changes += [{"num_workers": 2}, {"num_workers": 8}, {"micro_batch": 1}]
    records = [packed_run(i, c) for i, c in enumerate(changes)]
    base = PACKING.defaults()
    planner = Planner(PACKING, {}, records)
    paired = planner.micro_batch_pairs(base, planner.singles(base, 0))
    assert all(m.changed == ("micro_batch", "packing") and m.values["packing"] for m in paired), paired
    assert {m.values["micro_batch"] for m in paired} == {1, 2, 8, 16, 32}
    # a run of packing at micro-batch 1 answers for the smaller side
    smaller = Planner(PACKING, {}, [*records, packed_run(8, {"packing": True, "micro_batch": 1})])
    assert {m.values["micro_batch"] for m in smaller.micro_batch_pairs(base, smaller.singles(base, 0))} == {8, 16, 32}
    for number in range(len(records), len(records) + 3):
        p = Planner(PACKING, {}, records).propose(random.Random(0))
        assert p is not None and p.reason.startswith("untried pair") and p.gain_log < 0, p.reason
        records.append(packed_run(number, {k: v for k, v in p.values.items() if v != base[k]}))
        if records[-1].status is FailureClass.OK:
            break
    assert records[-1].values["packing"] and records[-1].values["micro_batch"] > 4, records[-1].values
    assert records[-1].result.throughput[0] > 1.05 * records[0].result.throughput[0]
