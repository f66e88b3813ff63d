"""Predicting OOM by memory dominance, and choosing the fastest stable config."""

from __future__ import annotations

import pytest
from optuna.trial import TrialState

from nccl_tune.failure import FailureClass, Verdict
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.trial import GpuMemory, MemoryReport, StopReason, TrialResult
from nccl_tune.tuner.records.stability import select_winner, to_confirm
from nccl_tune.tuner.records.study_records import Outcome, TrialKind, TrialRecord
from nccl_tune.tuner.search.predict import dominates_memory, predicted_oom

SPACE = load_space("skyrl-text2sql")
BASE = SPACE.defaults()
MICRO = "trainer.micro_train_batch_size_per_gpu"
OFFLOAD = "trainer.policy.fsdp_config.cpu_offload"


def rec(number, values, status=FailureClass.OK, step_s=10.0, peak=60.0, kind=TrialKind.SEARCH, near=False):
    result = TrialResult(
        number=number,
        status=status,
        verdict=Verdict(status),
        stop_reason=StopReason.MEASURED,
        step_times_s=(step_s * 2, step_s, step_s),
        warmup_steps=1,
        samples_per_step=1280.0,
        memory=MemoryReport("log", (GpuMemory(0, 80.0, peak),)),
    )
    return TrialRecord(number, TrialState.COMPLETE, values, kind, Outcome.LAUNCHED, status, result, near_wall=near)


def test_dominance_follows_the_declared_memory_effects():
    oom = {**BASE, MICRO: 4}
    assert dominates_memory(SPACE, {**BASE, MICRO: 8}, oom)
    assert dominates_memory(SPACE, {**BASE, MICRO: 4, "NCCL_ALGO": "Ring"}, oom)  # memory: none
    assert not dominates_memory(SPACE, {**BASE, MICRO: 2}, oom)
    assert not dominates_memory(SPACE, {**BASE, MICRO: 8, OFFLOAD: True}, oom)  # offload lowers memory
    assert dominates_memory(SPACE, {**BASE, MICRO: 8, "NCCL_CUMEM_ENABLE": 1}, oom)  # small: ignored
    import dataclasses

    from nccl_tune.search_spaces.space import MemoryEffect

    strict = dataclasses.replace(
        SPACE,
        parameters=tuple(
            dataclasses.replace(p, memory=MemoryEffect.UNKNOWN) if p.name == "NCCL_CUMEM_ENABLE" else p
            for p in SPACE.parameters
        ),
    )
    assert not dominates_memory(strict, {**BASE, MICRO: 8, "NCCL_CUMEM_ENABLE": 1}, oom)  # unknown: must match
    history = [rec(3, oom, FailureClass.OOM)]
    assert predicted_oom(SPACE, {**BASE, MICRO: 16}, history) == 3
    assert predicted_oom(SPACE, {**BASE, MICRO: 16}, [rec(3, oom, FailureClass.COLLECTIVE_TIMEOUT)]) is None


def test_winner_is_the_fastest_config_whose_every_run_was_ok_away_from_the_wall():
    fast_flaky = {**BASE, MICRO: 8}
    fast_walled = {**BASE, MICRO: 4}
    steady = {**BASE, MICRO: 2}
    records = [
        rec(0, BASE, kind=TrialKind.BASELINE, step_s=20.0),
        rec(1, fast_flaky, step_s=5.0),
        rec(2, fast_walled, step_s=6.0, peak=78.0, near=True),
        rec(3, steady, step_s=8.0),
        rec(4, fast_flaky, FailureClass.HANG, kind=TrialKind.RERUN),
    ]
    assert select_winner(records, require_confirmation=False).values == steady
    assert select_winner(records, require_confirmation=True) is None
    assert [c.values for c in to_confirm(records, 2)] == [steady, BASE]
    confirmed = records + [rec(5, steady, step_s=8.2, kind=TrialKind.RERUN)]
    win = select_winner(confirmed, require_confirmation=True)
    assert win.values == steady and win.confirmed and 0 < win.throughput_spread < 0.1


def test_a_config_holding_a_flaky_value_is_neither_the_winner_nor_re_run_however_its_own_runs_went():
    lucky = {**BASE, MICRO: 8, "NCCL_CUMEM_ENABLE": 1}
    steady = {**BASE, MICRO: 4}
    records = [
        rec(0, BASE, kind=TrialKind.BASELINE, step_s=20.0),
        rec(1, lucky, step_s=5.0),
        rec(2, steady, step_s=6.0),
        rec(3, lucky, step_s=5.1, kind=TrialKind.RERUN),
    ]

    def flaky(values):
        return values.get("NCCL_CUMEM_ENABLE") == 1

    assert select_winner(records, require_confirmation=True).values == lucky
    assert select_winner(records, require_confirmation=False, flaky=flaky).values == steady
    assert select_winner(records, require_confirmation=True, flaky=flaky) is None
    assert [c.values for c in to_confirm(records, 2, flaky=flaky)] == [steady, BASE]


def test_a_change_to_the_training_wins_only_beyond_the_measured_noise():
    from nccl_tune.tuner.records.stability import noise_frac

    semantic_ref = {"trainer.train_batch_size": 256}
    bigger = {**BASE, "trainer.train_batch_size": 512}
    # the baseline twice (spread 4%), a bigger train batch 3% faster: within the noise, so not the winner
    records = [
        rec(0, BASE, step_s=10.0, kind=TrialKind.BASELINE),
        rec(1, BASE, step_s=10.4, kind=TrialKind.RERUN),
        rec(2, bigger, step_s=9.9),
        rec(3, bigger, step_s=9.9, kind=TrialKind.RERUN),
    ]
    assert noise_frac(records) == pytest.approx(0.4 / 10.2, rel=1e-3)
    assert select_winner(records, require_confirmation=True).values == bigger
    assert select_winner(records, require_confirmation=True, semantic_ref=semantic_ref).values == BASE
    # 20% faster is beyond the noise: the change wins, and is named by the caller
    faster = records[:2] + [rec(2, bigger, step_s=8.5), rec(3, bigger, step_s=8.5, kind=TrialKind.RERUN)]
    assert select_winner(faster, require_confirmation=True, semantic_ref=semantic_ref).values == bigger


def test_confirmation_re_runs_start_with_the_config_the_noise_rule_keeps():
    semantic_ref = {"trainer.train_batch_size": 256}
    bigger = {**BASE, "trainer.train_batch_size": 512}
    records = [rec(0, BASE, step_s=10.0, kind=TrialKind.BASELINE), rec(1, bigger, step_s=9.9)]
    assert [c.values for c in to_confirm(records, 1)] == [bigger]
    assert [c.values for c in to_confirm(records, 1, semantic_ref)] == [BASE]


def test_an_environment_variable_whose_gain_is_within_the_noise_is_left_as_the_user_runs_it():
    """A stable config that sets NCCL_CUMEM_ENABLE=1 on top of another one and is 1% faster, within
    the 3% assumed before any re-run: the one without it wins; 10% faster, the variable pays."""
    from nccl_tune.search_spaces.space import Target

    env = {p.name: p.default for p in SPACE.parameters if p.target is Target.ENV}
    assert "NCCL_CUMEM_ENABLE" in env and MICRO not in env
    bigger = {**BASE, MICRO: 8}
    extra = {**bigger, "NCCL_CUMEM_ENABLE": 1}
    unrelated = {**BASE, "NCCL_ALGO": "Ring"}
    records = [
        rec(0, BASE, step_s=12.0, kind=TrialKind.BASELINE),
        rec(1, bigger, step_s=10.0),
        rec(2, extra, step_s=9.9),
        rec(3, unrelated, step_s=11.0),
    ]
    assert select_winner(records, require_confirmation=False).values == extra
    assert select_winner(records, require_confirmation=False, env_ref=env).values == bigger
    assert [c.values for c in to_confirm(records, 1, env_ref=env)] == [bigger]
    # beyond the noise: the variable pays
    paying = records[:2] + [rec(2, extra, step_s=9.0), records[3]]
    assert select_winner(paying, require_confirmation=False, env_ref=env).values == extra
    # of two configs within the noise that set fewer variables, the one that sets the fewest
    both = {**extra, "NCCL_ALGO": "Ring"}
    three = [records[0], rec(1, bigger, step_s=10.05), rec(2, extra, step_s=10.0), rec(3, both, step_s=9.9)]
    assert select_winner(three, require_confirmation=False, env_ref=env).values == bigger
    # only variables are undone: the user's own micro-batch, within the noise, does not win for it,
    # nor does a config that unsets one variable and sets another
    close = [rec(0, BASE, step_s=10.1, kind=TrialKind.BASELINE), rec(1, extra, step_s=9.9)]
    assert select_winner(close, require_confirmation=False, env_ref=env).values == extra
    swapped = [
        rec(0, BASE, step_s=12.0, kind=TrialKind.BASELINE),
        rec(1, {**bigger, "NCCL_ALGO": "Ring"}, step_s=10.0),
        rec(2, extra, step_s=9.9),
    ]
    assert select_winner(swapped, require_confirmation=False, env_ref=env).values == extra


def test_a_config_nccl_clamps_and_the_one_it_runs_as_are_one_candidate():
    """16 socket threads x 8 sockets each run as 16 x 4 (NCCL's limit of 64 sockets): a run of each is
    one config run twice, confirmed, under the values it was first launched with."""
    given = {**BASE, MICRO: 8, "NCCL_SOCKET_NTHREADS": 16, "NCCL_NSOCKS_PERTHREAD": 8}
    runs_as = {**given, "NCCL_NSOCKS_PERTHREAD": 4}
    records = [
        rec(0, BASE, kind=TrialKind.BASELINE, step_s=20.0),
        rec(1, given, step_s=5.0),
        rec(2, runs_as, step_s=5.1, kind=TrialKind.RERUN),
    ]
    win = select_winner(records, require_confirmation=True)
    assert win is not None and win.values == given and len(win.runs) == 2
    assert to_confirm(records, 2) == []  # nothing faster than it is left to re-run
