"""Figures and texts as every view writes them."""

from nccl_tune.failure import OK_VERDICT, FailureClass
from nccl_tune.trial import OUTSIDE_PHASES, GpuMemory, MemoryReport, StopReason, TrialResult
from nccl_tune.wording import fmt_mem, mem_gib, shorten


def test_long_evidence_is_shortened_between_words():
    text = "CUDA out of memory. Tried to allocate 123456.78 GiB " * 20
    short = shorten(text, 100)
    assert len(short) <= 104 and short.endswith(" ...")
    assert text.startswith(short[:-4]) and text[len(short) - 4] == " "  # cut at a space, not in a number


def test_a_trial_line_names_the_phase_that_held_the_peak():
    """Where a run reported memory per phase, its line says which phase peaked: its knobs move the peak."""

    def shown(phases: dict[str, float]) -> str:
        memory = MemoryReport("nvml", gpus=(GpuMemory(0, 80.0, 63.2),), phase_peak_frac=phases)
        return fmt_mem(
            TrialResult(
                number=1, status=FailureClass.OK, verdict=OK_VERDICT, stop_reason=StopReason.MEASURED, memory=memory
            )
        )

    assert shown({"generate": 0.61, "policy_train": 0.79, OUTSIDE_PHASES: 0.05}) == "63.2 GiB (79% in policy_train)"
    assert shown({"step": 0.79}) == "63.2 GiB (79%)"


def _result(status: FailureClass, memory: MemoryReport | None, evidence: str = "") -> TrialResult:
    from nccl_tune.failure import Evidence, Verdict

    verdict = Verdict(status, evidence=(Evidence(1, evidence),)) if evidence else OK_VERDICT
    return TrialResult(number=1, status=status, verdict=verdict, stop_reason=StopReason.MEASURED, memory=memory)


def test_host_rss_is_never_a_trials_memory():
    rss_only = MemoryReport("rss", peak_rss_gib=0.8)
    assert fmt_mem(_result(FailureClass.OK, rss_only)) == "-" and mem_gib(_result(FailureClass.OK, rss_only)) == "-"


def test_an_oom_trial_is_over_the_wall_with_what_pytorch_asked_for():
    msg = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 15.40 GiB. "
        "GPU 0 has a total capacity of 79.19 GiB of which 1.21 GiB is free."
    )
    oom = _result(FailureClass.OOM, MemoryReport("rss", peak_rss_gib=0.8), msg)
    assert fmt_mem(oom) == "> 79.2 GiB, +15.4 GiB asked" and mem_gib(oom) == "> 79.2, +15.4 asked"
    sized = MemoryReport("nvml", gpus=(GpuMemory(0, 80.0, 79.9),))
    assert fmt_mem(_result(FailureClass.OOM, sized, "torch.OutOfMemoryError: CUDA out of memory.")) == "> 80.0 GiB"
    assert fmt_mem(_result(FailureClass.OOM, None, "CUDA out of memory.")) == "-"
