"""The throughput model's data: which runs measured their config's speed."""

from __future__ import annotations

import math

import pytest
from optuna.trial import TrialState

from nccl_tune.failure import FailureClass, Verdict
from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.trial import GpuMemory, MemoryReport, StopReason, TrialResult
from nccl_tune.tuner.records.study_records import Outcome, TrialKind, TrialRecord
from nccl_tune.tuner.search.throughput_model import ThroughputModel


def space_with(variable: str, label: str) -> SearchSpace:
    """A micro-batch and one NCCL variable (``variable``: its parameter entry)."""
    text = f"""
name: {label}
parameters:
  - {{name: micro, kind: pow2, low: 1, high: 8, default: 2, memory: increasing}}
  - {variable}
stability: {{min_headroom_frac: 0.05}}
throughput: {{samples_per_step: 64}}
"""
    return parse_space(text, source="test", label=label)


SPACE = space_with(
    "{name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree, NVLS], default: unset, memory: none}", "nccl"
)
BASE = SPACE.defaults()


def run(
    number: int,
    algo: str,
    step_s: float,
    status: FailureClass = FailureClass.OK,
    *,
    steps: int = 4,
    peak_gib: float = 40.0,
) -> TrialRecord:
    """A run of ``NCCL_ALGO=algo`` that stepped every ``step_s`` (its first step the warm-up) for
    ``steps`` steps, then ended with ``status``, having peaked at ``peak_gib`` of 80."""
    result = TrialResult(
        number=number,
        status=status,
        verdict=Verdict(status),
        stop_reason=StopReason.MEASURED,
        step_times_s=tuple(step_s * (1.3 if i == 0 else 1.0 + 0.01 * (-1) ** i) for i in range(steps)),
        warmup_steps=1,
        samples_per_step=64.0,
        memory=MemoryReport("nvml", (GpuMemory(0, 80.0, peak_gib),)),
    )
    return TrialRecord(
        number, TrialState.COMPLETE, {**BASE, "NCCL_ALGO": algo}, TrialKind.SEARCH, Outcome.LAUNCHED, status, result
    )


def model(records: list[TrialRecord]) -> ThroughputModel:
    return ThroughputModel(SPACE, SPACE.parameters, records, BASE)


def predicted(m: ThroughputModel, algo: str) -> tuple[float, float]:
    mean, sd = m.predict([{**BASE, "NCCL_ALGO": algo}])
    return float(mean[0]), float(sd[0])


FINISHED = [run(0, "unset", 10.0), run(1, "Ring", 10.1), run(2, "unset", 9.95)]


def test_a_run_that_hung_after_measuring_steps_measured_its_config_as_slow():
    m = model([*FINISHED, run(3, "Tree", 13.0, FailureClass.HANG)])
    tree, tree_sd = predicted(m, "Tree")
    base, _ = predicted(m, "unset")
    untried_sd = predicted(m, "NVLS")[1]
    assert 3 in {o.number for o in m.obs}
    assert tree - base < 0.6 * math.log(10.0 / 13.0), "its four steps ran 30% slower than the baseline's"
    assert tree_sd < 0.5 * untried_sd


def test_a_run_that_hung_in_its_warm_up_is_estimated_from_it():
    m = model([*FINISHED, run(3, "Tree", 13.0, FailureClass.COLLECTIVE_TIMEOUT, steps=1)])
    assert predicted(m, "Tree")[0] < predicted(m, "unset")[0] - 0.1


def test_a_run_that_failed_before_a_step_or_as_memory_ran_out_measured_nothing():
    hung_at_start = run(3, "Tree", 13.0, FailureClass.HANG, steps=0)
    out_of_memory = run(4, "NVLS", 13.0, FailureClass.OOM)
    thrashing = run(5, "Ring", 13.0, FailureClass.HANG, peak_gib=78.0)
    interrupted = run(6, "Tree", 13.0, FailureClass.INTERRUPTED)
    m = model([*FINISHED, hung_at_start, out_of_memory, thrashing, interrupted])
    assert {o.number for o in m.obs} == {0, 1, 2}


def test_the_doubt_of_a_difference_is_one_runs_noise_on_each_side_and_more_for_an_untried_config():
    """A config measured once differs from the baseline (measured twice) by what their runs
    measured, with the noise of those runs (more than one run's, less than two runs'); a config
    differs from itself by nothing; an untried value's difference rests on nothing measured and is
    far less certain."""
    m = model([*FINISHED])
    ring, unset, nvls = ({**BASE, "NCCL_ALGO": a} for a in ("Ring", "unset", "NVLS"))
    measured, same, untried = m.difference_sd([ring, unset, nvls], unset)
    assert same == 0.0
    one_run = math.sqrt(m.noise**2 / 3 + 0.015**2)
    assert one_run < measured < 2.0 * one_run
    assert untried > 1.5 * measured


def test_an_nccl_value_that_removes_the_fast_path_is_expected_slower_until_a_run_says_otherwise():
    """Untried, the LL protocol alone ranks below the other protocols (the search tries it last);
    a run that measured it faster than the baseline carries the model past that prior."""
    space = space_with(
        "{name: NCCL_PROTO, kind: categorical, choices: [unset, Simple, LL128, LL], default: unset, memory: none}",
        "proto",
    )
    base = space.defaults()
    fresh = ThroughputModel(space, space.parameters, [], base)
    means, sds = fresh.predict([{**base, "NCCL_PROTO": p} for p in ("LL128", "LL")])
    assert means[1] < means[0] and sds[1] == pytest.approx(sds[0])

    def proto_run(number: int, proto: str, step_s: float) -> TrialRecord:
        record = run(number, "unset", step_s)
        return TrialRecord(
            number,
            record.state,
            {**base, "NCCL_PROTO": proto},
            record.kind,
            record.outcome,
            record.status,
            record.result,
        )

    measured = ThroughputModel(
        space,
        space.parameters,
        [proto_run(0, "unset", 10.0), proto_run(1, "LL", 8.0), proto_run(2, "unset", 10.1)],
        base,
    )
    means, _ = measured.predict([{**base, "NCCL_PROTO": p} for p in ("unset", "LL")])
    assert means[1] > means[0] + 0.1


def test_values_the_sweep_timed_faster_lead_until_the_job_shows_its_step_does_not_follow_its_collectives():
    """The NCCL sweep timed NVLS's collectives 1.3x as fast, Ring's 1.1x and Tree's 0.8x: untried,
    NVLS ranks first and Tree last. Once runs measured Ring and Tree no faster nor slower than the
    baseline, the share of the step that follows the collectives is learnt to be small, and NVLS's
    promise shrinks with it."""
    speeds = {"NCCL_ALGO": {"Ring": math.log(1.1), "Tree": math.log(0.8), "NVLS": math.log(1.3)}}
    fresh = ThroughputModel(SPACE, SPACE.parameters, [], BASE, speeds)
    means = {algo: predicted(fresh, algo)[0] for algo in ("unset", "Ring", "Tree", "NVLS")}
    assert means["NVLS"] > means["Ring"] > means["unset"] > means["Tree"]
    gain_before = means["NVLS"] - means["unset"]
    assert gain_before == pytest.approx(0.25 * math.log(1.3))
    flat = [run(0, "unset", 10.0), run(1, "Tree", 10.02), run(2, "unset", 9.98), run(3, "Ring", 10.0)]
    learnt = ThroughputModel(SPACE, SPACE.parameters, flat, BASE, speeds)
    assert learnt.share <= 0.125
    gain_after = predicted(learnt, "NVLS")[0] - predicted(learnt, "unset")[0]
    assert gain_after < 0.6 * gain_before, (
        "a step that followed neither Ring's nor Tree's collectives will not follow NVLS's"
    )
    follows = [run(0, "unset", 10.0), run(1, "Tree", 10.6), run(2, "unset", 9.98), run(3, "Ring", 9.7)]
    learnt = ThroughputModel(SPACE, SPACE.parameters, follows, BASE, speeds)
    assert predicted(learnt, "NVLS")[0] - predicted(learnt, "unset")[0] > gain_before, (
        "a step that followed them (a quarter of the step or more) is expected to follow NVLS's"
    )


def test_a_value_the_sweep_timed_keeps_no_prior_of_its_own_design():
    """LL alone removes NCCL's fast path (expected slower untimed); timed by the sweep as fast as the
    baseline's, that measurement stands in for the prior."""
    space = space_with(
        "{name: NCCL_PROTO, kind: categorical, choices: [unset, Simple, LL], default: unset, memory: none}",
        "proto-timed",
    )
    base = space.defaults()
    timed = ThroughputModel(space, space.parameters, [], base, {"NCCL_PROTO": {"Simple": 0.0, "LL": 0.0}})
    means, _ = timed.predict([{**base, "NCCL_PROTO": p} for p in ("Simple", "LL")])
    assert means[1] == pytest.approx(means[0])


@pytest.mark.parametrize(
    "times",
    [(2.0, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0), (0.0, 1.0, 1.0, 1.0)],
    ids=["recorded-before-untimed-steps-were-known", "nothing-timed", "warm-up-untimed"],
)
def test_a_finished_run_whose_steps_read_zero_neither_breaks_the_model_nor_is_measured(times):
    """A run of block-buffered output whose lines all came at exit (recorded as such before the tuner
    knew untimed steps): the model fits the study without it instead of failing every later run."""
    late = run(3, "Tree", 1.0)
    late = TrialRecord(
        3,
        late.state,
        late.values,
        late.kind,
        late.outcome,
        late.status,
        TrialResult(
            number=3,
            status=FailureClass.OK,
            verdict=Verdict(FailureClass.OK),
            stop_reason=StopReason.EXITED,
            step_times_s=times,
            warmup_steps=1,
            samples_per_step=64.0,
        ),
    )
    m = model([*FINISHED, late])
    assert all(math.isfinite(o.log_tput) for o in m.obs)
    assert (3 in {o.number for o in m.obs}) == (times[1] > 0)
