"""Analytic landscapes run through the model launcher: the same supervision, the twin's evidence
lines, deterministic in the run seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from nccl_tune.failure import FailureClass
from nccl_tune.trial import OUTSIDE_PHASES, Clocks, StopReason, StopRule, TrialSpec
from twin.analytic import AnalyticNode, Truth, analytic_cost, run_outcome
from twin.launcher import ModelLauncher

NODE = AnalyticNode(startup_s=100.0, step_noise=0.02, run_noise=0.01)


def spec(tmp_path: Path, mode: str, number: int = 0) -> TrialSpec:
    return TrialSpec(
        study="analytic",
        number=number,
        params={"mode": mode},
        argv=("true",),
        env={},
        trial_dir=tmp_path / str(number),
        clocks=Clocks(startup_timeout_s=900, stall_timeout_s=600, stall_floor_s=60, stall_multiplier=3),
        stop=StopRule(warmup_steps=1, measured_steps=3),
        samples_per_step=64.0,
    )


TRUTH = {
    "ok": Truth(20.0, 60.0),
    "oom": Truth(20.0, 95.0),
    "hang": Truth(20.0, 60.0, "hang", detail="a collective never completes"),
    "refused": Truth(20.0, 60.0, "nccl_error", detail="NCCL_PROTO=LL128 is not supported here"),
    "flaky": Truth(20.0, 60.0, hang_p=1.0),
}
LAUNCHER = ModelLauncher(env={}, cost=analytic_cost(lambda v: TRUTH[v["mode"]], NODE))


def test_a_run_is_deterministic_in_its_seed_and_noisy_across_seeds():
    a = run_outcome(TRUTH["ok"], NODE, seed=7, steps=4, samples_per_step=64)
    b = run_outcome(TRUTH["ok"], NODE, seed=7, steps=4, samples_per_step=64)
    c = run_outcome(TRUTH["ok"], NODE, seed=8, steps=4, samples_per_step=64)
    assert a == b and a.step_times_s != c.step_times_s
    assert len(a.steps) == 4 and a.failure is None and a.step_times_s[0] > 1.2 * min(a.step_times_s[1:])
    assert all(abs(t / 20.0 - 1) < 0.15 for t in a.step_times_s[1:])


def test_the_model_launcher_supervises_analytic_runs_like_the_twin(tmp_path):
    ok = LAUNCHER.run(spec(tmp_path, "ok"))
    assert ok.status is FailureClass.OK and ok.stop_reason is StopReason.MEASURED and len(ok.step_times_s) == 4
    assert 0.74 < ok.memory.max_peak_frac < 0.77 and ok.gpu_s == ok.wall_s * 8
    oom = LAUNCHER.run(spec(tmp_path, "oom", 1))
    assert oom.status is FailureClass.OOM and "CUDA out of memory" in oom.verdict.evidence[0].text
    assert oom.memory.max_peak_frac == 1.0
    refused = LAUNCHER.run(spec(tmp_path, "refused", 2))
    assert refused.status is FailureClass.NCCL_ERROR and refused.wall_s < 100.0
    # the classifier quotes the error line, as for the twin (the WARN line before it names the setting)
    assert any("NCCL error: invalid usage" in e.text for e in refused.verdict.evidence)
    for mode in ("hang", "flaky"):
        hung = LAUNCHER.run(spec(tmp_path, mode, 3))
        # no progress in the step's phase: the stall clock (or the watchdog's exit) ends it
        assert hung.status in (FailureClass.HANG, FailureClass.COLLECTIVE_TIMEOUT) and not hung.step_times_s


def test_stability_needs_no_failure_no_chance_of_one_and_the_headroom():
    assert TRUTH["ok"].stable(80.0, 0.05)
    assert not Truth(20.0, 77.0).stable(80.0, 0.05)
    assert not TRUTH["flaky"].stable(80.0, 0.05) and not TRUTH["hang"].stable(80.0, 0.05)


PHASED = {
    "phased": Truth(20.0, 60.0, phase_peak_gib={"generate": 60.0, "policy_train": 45.0}),
    "oom_train": Truth(20.0, 95.0, phase_peak_gib={"generate": 50.0, "policy_train": 95.0}),
    "oom_generate": Truth(20.0, 90.0, phase_peak_gib={"generate": 90.0, "policy_train": 45.0}),
}
PHASED_LAUNCHER = ModelLauncher(env={}, cost=analytic_cost(lambda v: {**TRUTH, **PHASED}[v["mode"]], NODE))


def test_phase_peaks_pass_through_a_run_with_the_per_gpu_spread():
    o = run_outcome(PHASED["phased"], NODE, seed=7, steps=3, samples_per_step=64)
    assert [p.name for p in o.phases if p.step == 1] == ["step", "generate", "policy_train"]
    assert o.step_phase_memory_gib == {s: {"generate": 60.0, "policy_train": 45.0} for s in (1, 2, 3)}
    assert all(max(o.step_memory_gib[s]) == 60.0 for s in (1, 2, 3))  # the busiest GPU, whose factor is 1
    plain = run_outcome(TRUTH["ok"], NODE, seed=7, steps=3, samples_per_step=64)
    assert not plain.step_phase_memory_gib and {p.name for p in plain.phases} == {"step", "policy_train"}
    with pytest.raises(ValueError):
        Truth(20.0, 60.0, phase_peak_gib={"generate": 50.0, "policy_train": 45.0})  # the largest is not the peak
    with pytest.raises(ValueError):
        Truth(20.0, 60.0, phase_peak_gib={"sync_weights": 60.0})


def test_the_model_launcher_reports_the_phase_peaks_and_the_failing_phase(tmp_path):
    ok = PHASED_LAUNCHER.run(spec(tmp_path, "phased")).memory
    assert dict(ok.phase_peak_frac) == pytest.approx({"generate": 60.0 / 79.15, "policy_train": 45.0 / 79.15})
    assert max(ok.phase_peak_frac.values()) == ok.max_peak_frac and ok.phases_open_at_end == (OUTSIDE_PHASES,)
    train = PHASED_LAUNCHER.run(spec(tmp_path, "oom_train", 1))
    assert train.status is FailureClass.OOM and train.memory.phases_open_at_end == ("step", "policy_train")
    assert dict(train.memory.phase_peak_frac) == pytest.approx({"generate": 50.0 / 79.15, "policy_train": 1.0})
    gen = PHASED_LAUNCHER.run(spec(tmp_path, "oom_generate", 2))
    assert gen.status is FailureClass.OOM and gen.memory.phases_open_at_end == ("step", "generate")
    assert dict(gen.memory.phase_peak_frac) == {"generate": 1.0}  # training never started
    # a job with one phase reports no per-phase figure, and still the phase it failed in
    plain = PHASED_LAUNCHER.run(spec(tmp_path, "oom", 3)).memory
    assert not plain.phase_peak_frac and plain.phases_open_at_end == ("step", "policy_train")
