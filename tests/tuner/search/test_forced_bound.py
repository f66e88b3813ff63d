"""Which configs a failed forced run rules out: at least its memory on the parameters that move the
phase its OOM named (the shipped SkyRL space's ``phases``), NCCL's variables left aside; and, by the
memory its OOM needed beyond its normal run's peak, every smaller micro-batch of that phase that
would still need more than the GPU."""

from __future__ import annotations

from dataclasses import replace

from optuna.trial import TrialState

from nccl_tune.failure import Evidence, FailureClass, Verdict
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.search_spaces.space import MemoryEffect
from nccl_tune.trial import GpuMemory, MemoryReport, StopReason, TrialResult
from nccl_tune.tuner.records.study_records import Outcome, TrialKind, TrialRecord
from nccl_tune.tuner.search.forced_bound import ForcedFailures, at_least_the_memory

SPACE = load_space("skyrl-text2sql")
FAILED = {
    **SPACE.defaults(),
    "trainer.micro_train_batch_size_per_gpu": 4,
    "trainer.micro_forward_batch_size_per_gpu": 2,
    "trainer.max_prompt_length": 2048,
}


def test_more_memory_everywhere_is_ruled_out_and_nccl_does_not_matter():
    assert at_least_the_memory(SPACE, FAILED, FAILED)
    assert at_least_the_memory(
        SPACE, {**FAILED, "trainer.micro_train_batch_size_per_gpu": 8, "NCCL_ALGO": "Ring"}, FAILED
    )
    assert not at_least_the_memory(SPACE, {**FAILED, "trainer.micro_train_batch_size_per_gpu": 2}, FAILED)
    # CPU offload uses less memory: offloaded, it may fit where the failed one did not
    assert not at_least_the_memory(SPACE, {**FAILED, "trainer.policy.fsdp_config.cpu_offload": True}, FAILED)


def test_an_oom_in_one_phase_rules_out_by_the_parameters_of_that_phase_only():
    lower_forward = {**FAILED, "trainer.micro_forward_batch_size_per_gpu": 1}
    # the forward micro-batch does not move policy_train's peak: a policy_train OOM still rules it out
    assert at_least_the_memory(SPACE, lower_forward, FAILED, "policy_train")
    assert not at_least_the_memory(SPACE, lower_forward, FAILED)
    assert not at_least_the_memory(SPACE, lower_forward, FAILED, "fwd_logprobs_values_reward")
    lower_train = {**FAILED, "trainer.micro_train_batch_size_per_gpu": 1}
    assert at_least_the_memory(SPACE, lower_train, FAILED, "fwd_logprobs_values_reward")
    assert not at_least_the_memory(SPACE, lower_train, FAILED, "policy_train")


def _oom_line(asked_gib: float, in_use_gib: float) -> str:
    free = max(79.15 - in_use_gib, 0.05)
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {asked_gib:.2f} GiB. GPU 5 has a total "
        f"capacity of 79.15 GiB of which {free:.2f} GiB is free. Including non-PyTorch memory, this process has "
        f"{in_use_gib:.2f} GiB memory in use."
    )


def forced_oom(number: int, of: int, values: dict, phase: str, line: str) -> TrialRecord:
    """Trial ``of``'s config forced to its longest batch, out of memory in ``phase`` (PyTorch's message its evidence)."""
    result = TrialResult(
        number=number,
        status=FailureClass.OOM,
        verdict=Verdict(FailureClass.OOM, phase=phase, evidence=(Evidence(1, line),)),
        stop_reason=StopReason.EXITED,
        memory=MemoryReport("rss", ()),
    )
    return TrialRecord(
        number, TrialState.COMPLETE, values, TrialKind.FORCED, Outcome.LAUNCHED, FailureClass.OOM, result, rerun_of=of
    )


def forced_failures(asked_gib: float, in_use_gib: float, phase: str = "fwd_logprobs_values_reward", values=None):
    return ForcedFailures(SPACE, [forced_oom(7, 3, values or FORWARD_8, phase, _oom_line(asked_gib, in_use_gib))])


FORWARD_8 = {
    **FAILED,
    "trainer.micro_train_batch_size_per_gpu": 1,
    "trainer.micro_forward_batch_size_per_gpu": 8,
    "trainer.max_prompt_length": 4096,
}
FORWARD = "trainer.micro_forward_batch_size_per_gpu"


def test_a_forced_oom_far_beyond_the_gpu_rules_out_every_micro_batch_too_large_to_shed_it():
    # The twin's forced run of forward micro-batch 8: 116 GiB asked with 77.3 GiB in use, 193 GiB needed. Were
    # all of it to halve with the micro-batch, 4 would still need 97 GiB: over the GPU. 2 may fit (it did, at 94%).
    failed = forced_failures(116.0, 77.3)
    four = {**FORWARD_8, FORWARD: 4}
    assert failed.covering(four) is not None
    assert f"{FORWARD}=4 is more than the OOM in fwd_logprobs_values_reward" in failed.why(four)
    assert failed.covering({**FORWARD_8, FORWARD: 2}) is None
    # With less memory elsewhere in that phase (a shorter prompt limit kept), 4 may fit; the training
    # micro-batch does not move the forward phase's peak.
    assert failed.covering({**four, "trainer.max_prompt_length": 2048}) is None
    assert failed.covering({**four, "trainer.micro_train_batch_size_per_gpu": 2}) is not None
    # Micro-batch 4 of policy training needing 134 GiB: 2 might need only 67, so only what holds at least its
    # memory is ruled out.
    train = forced_failures(56.5, 77.3, "policy_train", FAILED)
    assert train.covering({**FAILED, "trainer.micro_train_batch_size_per_gpu": 2}) is None
    assert train.covering(FAILED) is not None
    # Without the phase, nothing says which micro-batch to lower.
    assert forced_failures(116.0, 77.3, phase="").covering(four) is None


OFFLOAD = "trainer.policy.fsdp_config.cpu_offload"


def test_no_offload_makes_room_for_an_allocation_larger_than_the_gpu():
    # The twin's demo: the forward micro-batch 8 forced asked 116 GiB of a 79 GiB GPU. Offloading the
    # policy's weights and optimizer frees resident memory, not room for one 116 GiB allocation.
    failed = forced_failures(116.0, 77.3)
    offloaded = {**FORWARD_8, OFFLOAD: True}
    assert failed.covering(offloaded) is not None
    assert "alone larger than the GPU" in failed.why(offloaded)
    # At 4 its share is 58 GiB: offloaded, the run may find room for it.
    assert failed.covering({**offloaded, FORWARD: 4}) is None
    assert failed.covering({**FORWARD_8, FORWARD: 4}) is not None, "not offloaded, 4 still needs 97 GiB"
    # Policy training's micro-batch 8 asked 116 GiB: offloaded, 16 is ruled out and 4 (58 GiB) is not.
    train = "trainer.micro_train_batch_size_per_gpu"
    eight = forced_failures(116.0, 77.3, "policy_train", {**FAILED, train: 8})
    assert eight.covering({**FAILED, OFFLOAD: True, train: 16}) is not None
    assert eight.covering({**FAILED, OFFLOAD: True, train: 4}) is None
    # The share is never scaled up: part of the allocation may not grow with the micro-batch. Micro-batch
    # 4 asking 56.5 GiB does not rule out 8 offloaded.
    four = forced_failures(56.5, 77.3, "policy_train", FAILED)
    assert four.covering({**FAILED, OFFLOAD: True, train: 8}) is None
    assert four.covering({**FAILED, train: 8}) is not None
    # A parameter that saves GPU memory without moving it to the host (no host_memory declared) may
    # shrink the allocation itself: it is not set aside.
    space = replace(
        SPACE,
        parameters=tuple(
            replace(p, host_memory=MemoryEffect.UNKNOWN) if p.name == OFFLOAD else p for p in SPACE.parameters
        ),
    )
    record = forced_oom(7, 3, FORWARD_8, "fwd_logprobs_values_reward", _oom_line(116.0, 77.3))
    assert ForcedFailures(space, [record]).covering(offloaded) is None


def normal_run(number: int, values: dict, phase_peaks: dict[str, float]) -> TrialRecord:
    """A finished run of ``values`` whose phases peaked at ``phase_peaks`` (shares of a 79.15 GiB GPU)."""
    memory = MemoryReport(
        "nvml", (GpuMemory(0, 79.15, 79.15 * max(phase_peaks.values())),), phase_peak_frac=phase_peaks
    )
    result = TrialResult(
        number=number,
        status=FailureClass.OK,
        verdict=Verdict(FailureClass.OK),
        stop_reason=StopReason.MEASURED,
        step_times_s=(12.0, 10.0, 10.0),
        warmup_steps=1,
        samples_per_step=256.0,
        memory=memory,
    )
    return TrialRecord(number, TrialState.COMPLETE, values, TrialKind.SEARCH, Outcome.LAUNCHED, FailureClass.OK, result)


def test_offload_that_saved_less_than_the_oom_lacked_does_not_save_the_longest_batch():
    # The twin's demo: micro-batch 4 of policy training forced needed 134 GiB (56.5 asked, 77.3 in use). The
    # policy's offload took its policy_train peak from 75% to 57% of the GPU in normal runs: 14 GiB, far
    # from the 55 GiB lacking. Forcing the offloaded config would run out of memory the same way.
    offloaded = {**FAILED, OFFLOAD: True}
    runs = [
        normal_run(3, FAILED, {"generate": 0.40, "policy_train": 0.75}),
        normal_run(5, offloaded, {"generate": 0.40, "policy_train": 0.57}),
        forced_oom(7, 3, FAILED, "policy_train", _oom_line(56.5, 77.3)),
    ]
    failed = ForcedFailures(SPACE, runs)
    assert failed.covering(offloaded) is runs[2]
    assert failed.why(offloaded) == (
        "it holds at least the memory in policy_train of trial 3's config but for offload, which saved 14.2 GiB "
        "there in normal runs: less than the 54.7 GiB it lacked forced to its longest batch (trial 7)"
    )
    # a smaller micro-batch is not said to fail: its own peak is not measured against the OOM
    assert failed.covering({**offloaded, "trainer.micro_train_batch_size_per_gpu": 2}) is None
    # an OOM that lacked less than offload saved (8 GiB asked) says nothing of the offloaded config
    near = [*runs[:2], forced_oom(7, 3, FAILED, "policy_train", _oom_line(8.0, 77.3))]
    assert ForcedFailures(SPACE, near).covering(offloaded) is None
    # nor does one whose offloaded config never ran: nothing measured what offload saves
    assert ForcedFailures(SPACE, [runs[0], runs[2]]).covering(offloaded) is None
    # offload that saved nothing in the phase the OOM named, only in another, saves nothing there
    elsewhere = [runs[0], normal_run(5, offloaded, {"generate": 0.20, "policy_train": 0.75}), runs[2]]
    assert ForcedFailures(SPACE, elsewhere).covering(offloaded) is runs[2]


def test_a_config_whose_own_forced_run_fitted_is_judged_by_it_not_by_anothers():
    # The twin's demo: trial 11's config forced peaked at 93% of the GPU; the same config with NCCL's
    # 16 MiB buffers (trial 16) forced came to 96%, within the headroom. The buffers are left aside
    # when a config is compared with a failed forced run, so trial 11 held "at least its memory"
    # and the run ended with no stable config though trial 11's own longest batch fitted.
    plain = {**FAILED, "trainer.micro_train_batch_size_per_gpu": 1}
    buffers = {**plain, "NCCL_BUFFSIZE": 16777216}

    def forced(number: int, of: int, values: dict, peak_frac: float) -> TrialRecord:
        run = normal_run(number, values, {"policy_train": peak_frac})
        return replace(run, kind=TrialKind.FORCED, rerun_of=of, near_wall=peak_frac > 0.95)

    near = forced(20, 16, buffers, 0.96)
    assert ForcedFailures(SPACE, [near]).covering(plain) is near  # no forced run of its own: covered
    fitted = ForcedFailures(SPACE, [forced(14, 11, plain, 0.93), near])
    assert fitted.covering(plain) is None and fitted.why(plain) == ""
    assert fitted.covering(buffers) is near
    assert fitted.covering({**plain, "trainer.micro_forward_batch_size_per_gpu": 4}) is near


def test_a_forced_run_that_timed_out_at_the_wall_rules_out_more_memory_and_one_far_from_it_does_not():
    # The twin's legacy layout: forward micro-batch 2 at the prompt limit 6000, forced to its longest
    # batch, ended collective_timeout at 98% of the GPU. Memory explains that failure as it explains
    # an OOM; the same timeout at 60% of the GPU says nothing of memory.
    base = {**FAILED, "trainer.micro_train_batch_size_per_gpu": 1}
    larger = {**base, "trainer.micro_train_batch_size_per_gpu": 2}

    def timed_out(peak_frac: float) -> TrialRecord:
        run = normal_run(12, base, {"policy_train": peak_frac})
        result = replace(
            run.result,
            status=FailureClass.COLLECTIVE_TIMEOUT,
            verdict=Verdict(FailureClass.COLLECTIVE_TIMEOUT),
            stop_reason=StopReason.EXITED,
        )
        return replace(
            run,
            kind=TrialKind.FORCED,
            rerun_of=11,
            status=FailureClass.COLLECTIVE_TIMEOUT,
            result=result,
            min_headroom_frac=0.05,
        )

    at_wall = timed_out(0.98)
    failures = ForcedFailures(SPACE, [at_wall])
    assert failures.covering(base) is at_wall and failures.covering(larger) is at_wall
    assert "ended collective_timeout forced to its longest batch (trial 12)" in failures.why(larger)
    assert failures.covering({**base, "trainer.policy.fsdp_config.cpu_offload": True}) is None
    assert ForcedFailures(SPACE, [timed_out(0.60)]).covering(larger) is None
