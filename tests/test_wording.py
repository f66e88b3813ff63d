"""Figures and texts as every view writes them."""

from nccl_tune.failure import OK_VERDICT, FailureClass
from nccl_tune.trial import OUTSIDE_PHASES, GpuMemory, MemoryReport, StopReason, TrialResult
from nccl_tune.wording import fmt_mem, shorten


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
