"""Whether a winner is proven stable at the worst batch its config allows, and if not, what to do.

A winner is proven there when its worst case was measured by a forced run (``how: forced``) or
predicted from steps that pin the slope with a narrow range (``WorstCase.judged``): a winner is
stable only if that worst case fits. A winner whose worst case is neither is stable on the steps its
trials ran and no further: the tuned YAML (``metrics.worst_case.stable``), ``run`` and ``report`` say
so in words, with what would prove it. It is still exported (it is the best the study knows, and
its exit code does not change), never silently.
"""

from __future__ import annotations

from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.tuner.records.stability import Candidate

PROVEN = "proven at the worst batch"
UNPROVEN = "unproven at the worst batch"


def unproven_why(space: SearchSpace, winner: Candidate) -> str | None:
    """None when ``winner``'s worst case was forced or judged; else why not and what would prove it."""
    w = winner.worst_case
    if w is not None and w.judged:
        return None
    if space.force_worst_case:
        if winner.forced_run is None:
            return (
                f"trial {winner.first.number} was not forced to its longest batch (the run's forced trials or its "
                "--budget ran out, it was interrupted, or the forcing setting broke the command: see the run's "
                "notes); run the same command again: the study resumes and forces it"
            )
        return (
            f"its forced trial {winner.forced_run.number} measured no memory per step; give the trainer's memory "
            "lines a progress rule (docs/search-spaces.md) or run where NVML reads the GPUs"
        )
    if w is not None:
        return (
            "its worst case is a prediction from steps that do not pin it (a range wider than 0.2 of the GPU, or "
            "steps too few or too alike): measure more steps (--steps N), or name how to force the longest batch "
            "in the space's stability.force_worst_case (docs/search-spaces.md)"
        )
    return (
        "the space names no way to force the longest batch (stability.force_worst_case) and no step gave its "
        "tokens to predict it from (stability.worst_case_tokens): add one to the space (docs/search-spaces.md)"
    )


def stable_words(space: SearchSpace, winner: Candidate) -> str:
    """``PROVEN`` or ``UNPROVEN`` for ``winner``."""
    return PROVEN if unproven_why(space, winner) is None else UNPROVEN
