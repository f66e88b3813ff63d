"""Straggler steps: a measured step far slower than the run's others, left out of its throughput.

A trial measures a few steps. A Python garbage collection, a checkpoint write, a slow fetch of the
data loader or a hiccup of the host makes one of them twice as long, and the mean of a few steps
then reads the config slower than it runs: such a step adds 6% to the mean of sixteen steps, 50%
to the mean of two. Such stalls come whatever the config, so they rank configs at random;
the search, the confirmation and the winner read the steps without them.

A measured step is a straggler when it took more than ``FACTOR`` times the run's typical step: the
median of its measured steps, or of two steps the faster one (a stall only adds time, so of two
steps that far apart the slower one stalled). Where the trainer printed each step's tokens, a slow
step that carried more tokens than the median step is not one: a longer batch is part of the job,
not a stall. When more than ``MAX_SHARE`` of the steps (at least one) are that slow, none is: slow
steps that common are the config's own pace (a data loader that cannot keep up), which its
throughput must show. Nor are ``PERIODIC`` slow steps or more at one even spacing of two steps or
more: a step that comes back every k steps is work the job does every k steps (an optimizer step
after gradient accumulation, where the trainer counts micro-batches), not a stall. Slow steps in a
row are one stall (a line that stands for several steps gives each its duration).
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

FACTOR = 1.5
"""How many times the median step a straggler takes at least: about four standard deviations of
the step noise of the noisiest jobs met (10%, generation-heavy RL)."""
PERIODIC = 3
"""Slow steps at one even spacing that make them the job's own rhythm, not stalls."""
MAX_SHARE = 1 / 3
"""Largest share of a run's measured steps (one at least) that may be stragglers; above it, none is.
Stalls of one step in ten stay within it in 92% (5 steps) to 99.7% (16 steps) of runs."""


def stragglers(step_s: Sequence[float], tokens: Sequence[float | None] = ()) -> tuple[int, ...]:
    """Indices into ``step_s`` (a run's measured step durations, or the inverse of their printed
    rates) of its straggler steps; ``tokens``: each step's tokens, aligned, where printed."""
    if len(step_s) < 2 or min(step_s) <= 0:
        return ()
    mid = typical_s(step_s)
    known = [t for t in tokens[: len(step_s)] if t is not None]
    mid_tokens = median(known) if len(known) == len(step_s) else None
    slow = tuple(
        i for i, s in enumerate(step_s) if s > FACTOR * mid and (mid_tokens is None or (tokens[i] or 0.0) <= mid_tokens)
    )
    if len(slow) > max(1, int(MAX_SHARE * len(step_s))):
        return ()
    gaps = {b - a for a, b in zip(slow, slow[1:])}
    return () if len(slow) >= PERIODIC and len(gaps) == 1 and gaps != {1} else slow


def typical_s(step_s: Sequence[float]) -> float:
    """The step a straggler is measured against: the median, or of two steps the faster one."""
    return median(step_s) if len(step_s) > 2 else min(step_s)


def steady_mean_s(step_s: Sequence[float]) -> float:
    """The mean of ``step_s`` (a running trial's measured steps so far, at least one) with its
    stragglers left out."""
    steady = kept(step_s, stragglers(step_s))
    return sum(steady) / len(steady)


def worst_stall(step_s: Sequence[float], slow: Sequence[int]) -> float:
    """The longest of the steps at ``slow`` over the typical step (``typical_s``): how long the worst
    stall was, against what it was told a stall by."""
    return max(step_s[i] for i in slow) / typical_s(step_s)


def kept(values: Sequence[float], slow: Sequence[int]) -> tuple[float, ...]:
    """``values`` without the entries at ``slow``."""
    out = set(slow)
    return tuple(v for i, v in enumerate(values) if i not in out)
