"""Whether a winner is proven stable at the worst batch its config allows, and if not, what to do.

A winner is proven there when its worst case was measured by a forced run (``how: forced``),
predicted from steps that pin the slope with a narrow range (``WorstCase.judged``), or is the batch
every one of its steps carried (the space's ``stability.every_step_longest``: ``how: every step``):
a winner is stable only if that worst case fits. A winner whose worst case is none of these is
stable on the steps its trials ran and no further: the tuned YAML (``metrics.worst_case.stable``),
``run`` and ``report`` say so in words, with what would prove it. It is still exported (it is the best the study knows, and
its exit code does not change), never silently.

When no config survives its worst batch (every config forced failed there, and no other config is
stable), the study still exports the fastest config that passed its own trials, every normal run
``ok`` away from the wall, whose forced run ran out of memory, came within the headroom or failed
there (``forced_bound.failed_forced``; ``fails_at_worst``; ``fallback`` picks it, confirmed first). It is marked ``FAILS`` (``fails at
the worst batch``) in the tuned YAML's first line and ``metrics.worst_case``, the summary and the
report, with its forced trial's numbers (the phase that ran out, the memory it asked for beyond
what the GPU held, what it needed in all) and what would make a config survive (``to_survive``):
the parameters that move that phase's peak at their lowest value, and the length limits the
space's worst batch is bound by (the names ``stability.worst_case_tokens`` and
``stability.force_worst_case`` read), lowered by the share of memory the OOM was over the GPU.
``run`` exits 0 with that warning: the exit-code table's ``2`` means that no config passed its own
trials, which is not the case; a user who must not ship such a config reads
``metrics.worst_case.stable``.
"""

from __future__ import annotations

from collections.abc import Iterable

from nccl_tune.failure import FailureClass
from nccl_tune.oom_demand import oom_demand
from nccl_tune.search_spaces.space import SearchSpace
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.tuner.records.stability import Candidate, candidates
from nccl_tune.tuner.records.study_records import TrialRecord
from nccl_tune.tuner.search.failure_model import FlakyRule
from nccl_tune.tuner.search.forced_bound import failed_forced

PROVEN = "proven at the worst batch"
UNPROVEN = "unproven at the worst batch"
FAILS = "fails at the worst batch"
EVERY_STEP = "every step"
"""``metrics.worst_case.how`` where every step carried the longest batch (``stability.every_step_longest``)."""


def unproven_why(space: SearchSpace, winner: Candidate) -> str | None:
    """None when ``winner``'s worst case was forced or judged; else why not and what would prove it."""
    w = winner.worst_case
    if space.every_step_longest or (w is not None and w.judged) or fails_at_worst(winner):
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
        "tokens to predict it from (stability.worst_case_tokens): add one to the space, or, where every step "
        "carries the longest batch (sequences packed or padded to one length), say so with "
        "stability.every_step_longest: true (docs/search-spaces.md)"
    )


def stable_words(space: SearchSpace, winner: Candidate) -> str:
    """``PROVEN``, ``UNPROVEN`` or ``FAILS`` for ``winner``."""
    if fails_at_worst(winner):
        return FAILS
    return PROVEN if unproven_why(space, winner) is None else UNPROVEN


def fails_at_worst(c: Candidate) -> bool:
    """Every normal run of ``c`` ``ok`` away from the wall, timed, and its forced run failed."""
    normal = [r for r in c.runs if not r.forced]
    forced = c.forced_run
    return (
        bool(normal)
        and all(r.ok and not r.near_wall for r in normal)
        and c.throughput > 0
        and forced is not None
        and failed_forced(forced)
    )


def fallback(records: Iterable[TrialRecord], flaky: FlakyRule | None = None) -> Candidate | None:
    """The fastest config that ``fails_at_worst``, one confirmed by a re-run first; not one holding a
    value the study has seen fail now and then (``flaky``'s failure model: what forced runs rule
    out, ``forced_bound``, is what this fallback is for)."""
    model = flaky.model if flaky is not None else None
    pool = [c for c in candidates(records) if fails_at_worst(c) and not (model and model.flaky(c.values))]
    return max(pool, key=lambda c: (c.confirmed, c.throughput), default=None)


def _oom(run: TrialRecord) -> tuple[str, str]:
    """The phase ``run`` ran out of memory in ("" when unnamed) and its numbers in words."""
    if run.status is not FailureClass.OOM or run.result is None:
        if run.ok:
            peak = f" at {run.worst_case.peak_frac:.0%} of the GPU" if run.worst_case is not None else ""
            return "", f"came within the headroom of the memory wall{peak}"
        memory = run.result.memory if run.result is not None else None
        peak = f" at {memory.max_peak_frac:.0%} of the GPU" if memory and memory.max_peak_frac is not None else ""
        return "", f"ended {run.status.value if run.status else 'failed'}{peak}"
    phase = run.result.verdict.phase or ""
    demand = oom_demand(e.text for e in run.result.verdict.evidence)
    where = f" in {phase}" if phase else ""
    if demand is None:
        return phase, f"ran out of memory{where}"
    asked = f" asking {demand.tried_gib:.1f} GiB more" if demand.tried_gib else ""
    return phase, (
        f"ran out of memory{where}{asked} (needing {demand.needed_gib:.1f} of {demand.capacity_gib:.1f} GiB, "
        f"{demand.needed_frac:.0%} of the GPU)"
    )


def fails_why(c: Candidate) -> str:
    """How ``c``'s forced run failed, in a clause."""
    run = c.forced_run
    return f"its forced trial {run.number} {_oom(run)[1]}" if run is not None else ""


def to_survive(space: SearchSpace, c: Candidate) -> str:
    """What would make ``c``'s config survive its worst batch: the phase's memory knobs at their
    lowest, and the length limits that bound the worst batch, lowered by what the OOM was over."""
    run = c.forced_run
    if run is None:
        return ""
    phase, _ = _oom(run)
    parts = []
    for p in space.parameters:
        if not p.memory.signed or (phase and phase not in p.phases) or (not phase and not p.phases):
            continue
        lowest = min(p.choices, key=p.memory_rank)
        now = c.values.get(p.name)
        state = " (already there)" if now is not None and p.memory_rank(now) == p.memory_rank(lowest) else ""
        parts.append(f"{p.name}={format_value(lowest)}{state}")
    out = []
    if parts:
        where = f"{phase}'s" if phase else "the"
        out.append(f"{where} memory knobs at their lowest: {', '.join(parts)}")
    limits = _length_limits(space, c)
    if limits:
        demand = oom_demand(e.text for e in run.result.verdict.evidence) if run.result is not None else None
        cut = f" by about {1 - 1 / demand.needed_frac:.0%} or more" if demand and demand.needed_frac > 1 else ""
        out.append(f"the length limits that bound the worst batch lowered{cut}: {', '.join(limits)}")
    return "; or ".join(out)


def _length_limits(space: SearchSpace, c: Candidate) -> list[str]:
    """``NAME=VALUE`` of each length limit (a name with ``length`` in it) the space's worst batch reads."""
    names: set[str] = set(space.worst_case_tokens.names) if space.worst_case_tokens is not None else set()
    for f in space.force_worst_case:
        names.update(f.value.names if f.value is not None else ())
        for _, ex in f.fields:
            names.update(ex.names)
    env = space.scope(c.values)
    return [f"{n}={format_value(env[n])}" for n in sorted(names) if "length" in n.rsplit(".", 1)[-1] and n in env]


def fails_words(space: SearchSpace, c: Candidate) -> str:
    """``c``'s failure at its worst batch and what would make it survive, in a sentence."""
    fix = to_survive(space, c)
    return f"{fails_why(c)}; to survive it: {fix}" if fix else fails_why(c)
