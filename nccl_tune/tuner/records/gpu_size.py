"""The size of the study's GPUs, for the memory reports that gave a peak without it.

A trainer's memory line in GiB alone (DeepSpeed's ``MaxMemAllocated=..GB``), on a node NVML cannot
read, gives a peak but no share of the GPU, and the memory model, the headroom rule and the display
all work in shares. The study learns the size from any of its runs: the largest total a memory
report gave (NVML's, or a log line's with a percentage), else the largest total capacity PyTorch's
out-of-memory message named in a failed run. A study runs on one kind of node, so the size of one
run's GPUs is the size of every run's. Reports that gave their own size keep it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from nccl_tune.oom_demand import oom_demand
from nccl_tune.trial import MemoryReport, TrialResult


def _unsized(memory: MemoryReport | None) -> bool:
    return memory is not None and any(not (g.total_gib > 0) for g in memory.gpus)


def learned_gpu_gib(results: Iterable[TrialResult]) -> float | None:
    """The GPU size (GiB) ``results`` show: a report's largest total, else an OOM message's largest
    capacity; None when none shows one."""
    reported, named = 0.0, 0.0
    for result in results:
        if result.memory is not None:
            reported = max([reported, *(g.total_gib for g in result.memory.gpus if math.isfinite(g.total_gib))])
        demand = oom_demand(e.text for e in result.verdict.evidence)
        if demand is not None:
            named = max(named, demand.capacity_gib)
    return reported or named or None


def with_gpu_gib(result: TrialResult, gpu_gib: float | None) -> TrialResult:
    """``result`` with ``gpu_gib`` as the size of every GPU its memory report left unsized (itself
    when there is none, or no size)."""
    if not gpu_gib or not _unsized(result.memory):
        return result
    gpus = tuple(g if g.total_gib > 0 else replace(g, total_gib=gpu_gib) for g in result.memory.gpus)
    return replace(result, memory=replace(result.memory, gpus=gpus))


def sized_among(result: TrialResult, others: Iterable[TrialResult]) -> TrialResult:
    """``result`` sized by what it and the study's ``others`` show (a run as it is told)."""
    return with_gpu_gib(result, learned_gpu_gib([*others, result])) if _unsized(result.memory) else result


def sized(results: list[TrialResult]) -> list[TrialResult]:
    """``results`` with the size they show given to every report that left its GPUs unsized."""
    gpu_gib = learned_gpu_gib(results) if any(_unsized(r.memory) for r in results) else None
    return [with_gpu_gib(r, gpu_gib) for r in results] if gpu_gib else results
