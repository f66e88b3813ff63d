"""ModelLauncher: a trial against the cost model, supervised on the modelled clock."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from nccl_tune.failure import FailureClass
from nccl_tune.launchers.base import TrialObserver, TrialProgress
from nccl_tune.trial import OUTSIDE_PHASES, Clocks, StopReason, StopRule, TrialResult, TrialSpec
from twin.launcher import ModelLauncher, override_tokens

from .test_cost_model import TRIAL, outcome

SCRIPT_ARGV = ("bash", "examples/run_skyrl_sql_sim.sh", *TRIAL)
CLOCKS = Clocks(startup_timeout_s=1500, stall_timeout_s=900, stall_floor_s=60, trial_timeout_s=5400, grace_s=20)


def spec(
    *extra: str,
    env: dict | None = None,
    number: int = 0,
    clocks: Clocks = CLOCKS,
    stop: StopRule = StopRule(1, 2),
    tmp: Path = Path("/tmp/nccl-tune-sim-test"),
) -> TrialSpec:
    return TrialSpec(
        study="simtest",
        number=number,
        params={},
        argv=(*SCRIPT_ARGV, *extra),
        env={"SKYRL_WORKER_NCCL_TIMEOUT_IN_S": "180", **(env or {})},
        trial_dir=tmp / f"trial-{number}",
        clocks=clocks,
        stop=stop,
        samples_per_step=1280.0,
    )


@pytest.fixture
def launcher() -> ModelLauncher:
    return ModelLauncher(env={"HOME": "/h"})


class Recorder(TrialObserver):
    """Records callbacks; optionally asks to stop at a given step count."""

    def __init__(self, stop_after_steps: int | None = None, answer: StopReason = StopReason.EARLY_STOP) -> None:
        self.events: list[tuple] = []
        self.stop_after_steps = stop_after_steps
        self.answer = answer

    def on_start(self, spec, pid):
        self.events.append(("start", pid))

    def on_phase(self, spec, phase, seconds):
        self.events.append(("phase", phase, seconds))

    def on_step(self, spec, step_index, seconds):
        self.events.append(("step", step_index, seconds))

    def on_memory(self, spec, peak_gib):
        self.events.append(("memory", peak_gib))

    def should_stop(self, spec, progress: TrialProgress):
        if self.stop_after_steps is not None and len(progress.step_times_s) >= self.stop_after_steps:
            return self.answer
        return None

    def on_end(self, spec, result):
        self.events.append(("end", result.status))


def test_override_tokens_are_the_hydra_arguments():
    argv = ("bash", "run.sh", "trainer.a=1", "+trainer.b=2", "~trainer.c", "--flag", "plain", "x=1=2")
    assert override_tokens(argv) == ["trainer.a=1", "+trainer.b=2", "~trainer.c", "x=1=2"]


def test_a_healthy_trial_is_measured_in_modelled_seconds(launcher):
    rec = Recorder()
    r = launcher.run(spec("trainer.micro_train_batch_size_per_gpu=2"), rec)
    assert r.status is FailureClass.OK and r.stop_reason is StopReason.MEASURED and r.verdict.ok
    assert len(r.step_times_s) == 3 and r.warmup_steps == 1
    assert r.step_times_s[0] > r.step_times_s[1] and all(100 < t < 400 for t in r.step_times_s)
    assert r.throughput_per_s == pytest.approx(1280 / r.mean_step_s)
    assert r.memory.source == "model" and len(r.memory.gpus) == 8
    assert all(g.total_gib == pytest.approx(79.15) and 30 < g.peak_gib < 79.15 for g in r.memory.gpus)
    assert r.gpu_s == pytest.approx(r.wall_s * 8) and r.wall_s > sum(r.step_times_s)
    assert r.phase_max_s["step"] == max(r.step_times_s) and "policy_train" in r.phase_max_s
    kinds = [e[0] for e in rec.events]
    assert kinds[0] == "start" and kinds[-1] == "end" and kinds.count("step") == 3 and "memory" in kinds
    assert TrialResult.from_json(json.loads(json.dumps(r.to_json()))).to_json() == r.to_json()


def test_the_last_value_of_a_key_wins(launcher):
    small = launcher.run(spec("trainer.micro_train_batch_size_per_gpu=8", "trainer.micro_train_batch_size_per_gpu=2"))
    assert small.status is FailureClass.OK


def test_a_config_error_is_a_result_not_an_exception(launcher):
    r = launcher.run(spec("trainer.no_such_key=1"))
    assert r.status is FailureClass.CONFIG_ERROR and r.exit_code == 1 and r.stop_reason is StopReason.EXITED
    assert r.verdict.evidence[0].text.startswith("ValueError: Invalid fields {'no_such_key'} for TrainerConfig.")
    r = launcher.run(spec("trainer.train_batch_size=384"))
    assert r.status is FailureClass.CONFIG_ERROR
    assert r.verdict.evidence[0].text.startswith("AssertionError: train_batch_size 384 should be divisible")


def test_oom_names_rank_phase_and_exits_after_the_cascade(launcher):
    r = launcher.run(spec("trainer.micro_train_batch_size_per_gpu=8"))
    assert r.status is FailureClass.OOM and r.stop_reason is StopReason.EXITED and r.exit_code == 1
    assert r.verdict.phase == "policy_train" and r.verdict.rank is not None
    assert "torch.OutOfMemoryError: CUDA out of memory" in r.verdict.evidence[0].text
    assert any("Watchdog caught collective operation timeout" in e.text for e in r.verdict.evidence)
    assert r.memory.gpus[r.verdict.rank].peak_gib == pytest.approx(79.15)
    assert "micro_train_batch_size_per_gpu" in r.verdict.advice


FWD, TRAIN = "fwd_logprobs_values_reward", "policy_train"


def test_memory_is_reported_per_phase_with_the_phases_open_at_the_end(launcher):
    fwd_heavy = launcher.run(spec()).memory  # the script's micro-batches: forward 8, training 1
    micro = ("trainer.micro_forward_batch_size_per_gpu=4", "trainer.micro_train_batch_size_per_gpu=2")
    train_heavy = launcher.run(spec(*micro)).memory
    for m in (fwd_heavy, train_heavy):
        assert set(m.phase_peak_frac) == {FWD, TRAIN} and m.phases_open_at_end == (OUTSIDE_PHASES,)
        assert max(m.phase_peak_frac.values()) == pytest.approx(m.max_peak_frac, abs=1e-9)
    assert fwd_heavy.phase_peak_frac[FWD] > fwd_heavy.phase_peak_frac[TRAIN] + 0.05
    assert train_heavy.phase_peak_frac[TRAIN] > train_heavy.phase_peak_frac[FWD] + 0.05
    assert train_heavy.phase_peak_frac[TRAIN] > fwd_heavy.phase_peak_frac[TRAIN] + 0.05
    # the largest over the steps: with this data order the first step peaks above the last
    per_step = outcome("trainer.seed=3", steps=3).step_phase_memory_gib
    assert per_step[1][TRAIN] > per_step[3][TRAIN] + 1
    reported = launcher.run(spec("trainer.seed=3")).memory.phase_peak_frac
    assert dict(reported) == {p: round(max(m[p] for m in per_step.values()), 3) / 79.15 for p in (FWD, TRAIN)}


def test_a_failed_or_stopped_run_ends_in_the_phase_it_was_in(launcher):
    train = launcher.run(spec("trainer.micro_train_batch_size_per_gpu=8"))
    assert train.status is FailureClass.OOM and train.verdict.phase == TRAIN
    assert train.memory.phases_open_at_end == ("step", "train_critic_and_policy", TRAIN)
    assert train.memory.phase_peak_frac[TRAIN] == 1.0 > train.memory.phase_peak_frac[FWD]
    fwd = launcher.run(spec("trainer.micro_forward_batch_size_per_gpu=32"))
    assert fwd.status is FailureClass.OOM and fwd.memory.phases_open_at_end == ("step", FWD)
    assert dict(fwd.memory.phase_peak_frac) == {FWD: 1.0}  # the training pass never ran
    # stopped by the trial budget in the second step's generation, or in its training pass
    for budget, innermost in ((400.0, "generate"), (700.0, TRAIN)):
        r = launcher.run(
            spec(clocks=Clocks(startup_timeout_s=1500, stall_timeout_s=900, trial_timeout_s=budget, grace_s=20))
        )
        assert r.stop_reason is StopReason.BUDGET and r.memory.phases_open_at_end[0] == "step"
        assert r.memory.phases_open_at_end[-1] == innermost == r.verdict.phase
    json_round = TrialResult.from_json(json.loads(json.dumps(train.to_json()))).memory
    assert json_round.phases_open_at_end == train.memory.phases_open_at_end
    assert json_round.phase_peak_frac == train.memory.phase_peak_frac


def test_a_hang_is_called_after_the_stall_deadline(launcher):
    clocks = Clocks(
        startup_timeout_s=1500,
        stall_timeout_s=900,
        stall_floor_s=60,
        stall_multiplier=3,
        trial_timeout_s=50000,
        grace_s=20,
        phase_max_s={"policy_train": 250.0},
    )
    hang = {"SIM_FAULT": "hang:1:2", "SKYRL_WORKER_NCCL_TIMEOUT_IN_S": "100000"}
    r = launcher.run(spec(env=hang, clocks=clocks))
    assert r.status is FailureClass.HANG and r.stop_reason is StopReason.STALL and r.verdict.rank == 1
    assert r.verdict.phase == "policy_train" and len(r.step_times_s) == 1
    assert r.memory.phases_open_at_end == ("step", "train_critic_and_policy", "policy_train")
    # The verdict comes from diagnose.verdict.decide, fed with the modelled facts: the supervisor's
    # line, the stacks py-spy would show (rank 1 asleep in its injected hang), the last log lines.
    assert any("Started: 'policy_train'" in e.text for e in r.verdict.evidence)
    assert r.verdict.advice.startswith("rank 1 is in time.sleep") and r.verdict.cause.rule == "stall"
    # The stall watchdog fires 3 x 250 s after the last progress line, long before the collective timeout.
    assert r.verdict.evidence[0].text.startswith("no progress for 750.0 s in phase 'policy_train'")
    assert sum(r.step_times_s) + 750 < r.wall_s < 3000
    # What the trial itself measured counts too (launchers.supervise.Watch): its first policy_train
    # took longer than the 160 s the study knew, so the deadline is 3 x its own.
    own = launcher.run(spec(env=hang, clocks=dataclasses.replace(clocks, phase_max_s={"policy_train": 160.0})))
    assert own.phase_max_s["policy_train"] > 160
    assert own.verdict.evidence[0].text.startswith(f"no progress for {3 * own.phase_max_s['policy_train']:.1f} s")


def test_a_short_collective_timeout_ends_it_before_the_stall_watchdog(launcher):
    r = launcher.run(spec(env={"SIM_FAULT": "hang:1:2", "SKYRL_WORKER_NCCL_TIMEOUT_IN_S": "180"}))
    assert r.status is FailureClass.COLLECTIVE_TIMEOUT and r.stop_reason is StopReason.EXITED
    assert "Watchdog caught collective operation timeout" in r.verdict.evidence[0].text


def test_budget_and_early_stop(launcher):
    tight = Clocks(startup_timeout_s=1500, stall_timeout_s=900, trial_timeout_s=400, grace_s=20)
    r = launcher.run(spec(clocks=tight))
    assert r.status is FailureClass.BUDGET and r.stop_reason is StopReason.BUDGET
    assert r.wall_s == pytest.approx(400 + 5)
    r = launcher.run(spec(), Recorder(stop_after_steps=1))
    assert r.status is FailureClass.BUDGET and r.stop_reason is StopReason.EARLY_STOP and len(r.step_times_s) == 1
    r = launcher.run(spec(), Recorder(stop_after_steps=2, answer=StopReason.INTERRUPTED))
    assert r.status is FailureClass.INTERRUPTED and len(r.step_times_s) == 2


def test_unknown_slow_phase_is_a_hang_until_the_study_knows_it(launcher):
    slow = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
    r = launcher.run(spec(env=slow))
    assert r.status is FailureClass.HANG
    knows = Clocks(
        startup_timeout_s=1500,
        stall_timeout_s=900,
        trial_timeout_s=50000,
        phase_max_s={"policy_train": 2000.0, "step": 3000.0},
    )
    r = launcher.run(spec(env=slow, clocks=knows))
    assert r.status is FailureClass.OK


def test_env_none_removes_a_variable_and_sim_seed_fixes_the_noise():
    launcher = ModelLauncher(env={"HOME": "/h", "NCCL_PROTO": "bogus"})
    assert launcher.run(spec()).status is FailureClass.NCCL_ERROR
    assert launcher.run(spec(env={"NCCL_PROTO": None})).status is FailureClass.OK
    a = launcher.run(spec(env={"NCCL_PROTO": None, "SIM_SEED": "5"}, number=1))
    b = launcher.run(spec(env={"NCCL_PROTO": None, "SIM_SEED": "5"}, number=2))
    c = launcher.run(spec(env={"NCCL_PROTO": None}, number=3))
    assert a.step_times_s == b.step_times_s != c.step_times_s


def test_a_run_shorter_than_the_stop_rule_is_a_crash(launcher):
    r = launcher.run(spec("trainer.train_batch_size=512", "trainer.max_prompt_length=2048"))
    assert r.status is FailureClass.CRASH and r.exit_code == 0 and "0 of 3 steps" in r.verdict.advice
    assert r.memory is None  # no step ran: no memory figure to learn from


def test_result_json_is_written_on_request(tmp_path):
    launcher = ModelLauncher(env={"HOME": "/h"}, write_result=True)
    r = launcher.run(spec(tmp=tmp_path))
    saved = json.loads((tmp_path / "trial-0" / "result.json").read_text())
    assert TrialResult.from_json(saved).status is r.status


def test_a_study_worth_of_trials_runs_in_seconds(launcher):
    start = time.perf_counter()
    for n in range(300):
        launcher.run(spec(f"trainer.micro_train_batch_size_per_gpu={1 << (n % 5)}", number=n))
    assert time.perf_counter() - start < 10.0  # ~0.5 s on an idle core


def _meant(out, decision_reason: StopReason, steps: int, total: int, at_failure) -> FailureClass:
    """The class the cost model's own account of the run implies (the oracle of the test below)."""
    if decision_reason is StopReason.MEASURED:
        return FailureClass.OK
    if decision_reason is StopReason.EXITED:
        if at_failure is not None:
            return (
                FailureClass.COLLECTIVE_TIMEOUT
                if at_failure.failure_class is FailureClass.HANG
                else at_failure.failure_class
            )
        return FailureClass.OK if steps >= total else FailureClass.CRASH
    if decision_reason in (StopReason.STALL, StopReason.STARTUP):
        return at_failure.failure_class if at_failure is not None else FailureClass.HANG
    return FailureClass.BUDGET


def test_the_shared_verdict_function_reads_modelled_runs_as_the_cost_model_meant(launcher):
    """The model launcher's class comes from diagnose.verdict.decide over the lines the twin would
    print; over many configurations and injected faults it is the class the cost model meant."""
    import random

    from nccl_tune.search_spaces.loader import load_space
    from twin import launcher as model
    from twin.config import parse_overrides
    from twin.evaluate import evaluate

    space = load_space("skyrl-text2sql")
    rnd = random.Random(5)
    faults = [None, "oom:1:2", "crash:2:1", "hang:1:2"]
    checked = 0
    for i in range(120):
        values = {p.name: rnd.choice(list(p.choices)) for p in space.parameters}
        overrides = [
            f"{p.command_key}={str(values[p.name]).lower() if isinstance(values[p.name], bool) else values[p.name]}"
            for p in space.parameters
            if not p.name.startswith("NCCL")
        ]
        env = {p.name: str(values[p.name]) for p in space.parameters if p.name.startswith("NCCL")}
        if (fault := faults[i % len(faults)]) is not None:
            env.update(SIM_FAULT=fault, SIM_RANKS="8")
        s = spec(*overrides, env=env, number=i)
        r = launcher.run(s)
        try:
            cfg = parse_overrides(launcher.base_overrides + model.override_tokens(s.argv), launcher.trial_env(s))
        except Exception:  # refused by the twin: decide must call it a config error
            assert r.status is FailureClass.CONFIG_ERROR, [str(e) for e in r.verdict.evidence]
            continue
        out = evaluate(
            cfg,
            seed=cfg.env.sim_seed if cfg.env.sim_seed is not None else model.zlib.crc32(s.marker.encode()),
            steps=s.stop.total_steps,
        )
        at = r.wall_s - (min(model.TEARDOWN_S, s.clocks.grace_s) if r.stop_reason is not StopReason.EXITED else 0.0)
        failure = out.failure if out.failure is not None and out.failure.at_s <= at + 1e-6 else None
        meant = _meant(out, r.stop_reason, len(r.step_times_s), s.stop.total_steps, failure)
        assert r.status is meant, (values, env, [str(e) for e in r.verdict.evidence])
        checked += 1
    assert checked > 40


def test_memory_as_logged_is_what_a_trainers_log_gives_nccl_tune_run():
    """Per-GPU peaks of the finished steps only, no per-phase peaks, and nothing from the step that
    ran out of memory: the memory a real run's log lines give the tuner."""
    logged = ModelLauncher(env={"HOME": "/h"}, memory_as_logged=True)
    model = ModelLauncher(env={"HOME": "/h"})
    ok_logged, ok_model = logged.run(spec()).memory, model.run(spec()).memory
    assert ok_logged.source == "log" and not ok_logged.phase_peak_frac and ok_logged.phases_open_at_end == ()
    assert ok_logged.max_peak_frac == pytest.approx(ok_model.max_peak_frac)
    oom = logged.run(spec("trainer.micro_train_batch_size_per_gpu=8"))
    assert oom.status is FailureClass.OOM and oom.verdict.phase == TRAIN  # the phase comes from the log
    assert oom.memory is None or oom.memory.max_peak_frac < 1.0  # the failing step printed no peak
