"""The GPU size a study learns for memory reports in GiB alone: from a report that gave it, else from
PyTorch's out-of-memory message; and what the memory model can then refuse."""

from __future__ import annotations

import math

import optuna
from optuna.trial import TrialState

from nccl_tune.failure import Evidence, FailureClass, Verdict
from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.trial import GpuMemory, MemoryReport, StopReason, TrialResult
from nccl_tune.tuner.records import study_records as R
from nccl_tune.tuner.records.gpu_size import learned_gpu_gib, sized, sized_among, with_gpu_gib
from nccl_tune.tuner.records.study_records import Outcome, TrialKind, TrialRecord
from nccl_tune.tuner.records.telling import tell_result
from nccl_tune.tuner.search.memory_model import MemoryModel

OOM_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "
    "79.15 GiB of which 1.15 GiB is free. Including non-PyTorch memory, this process has 78.00 GiB in use."
)


def ran(number: int, peak_gib: float, total_gib: float = math.nan) -> TrialResult:
    """A finished run whose memory line gave ``peak_gib`` (and the GPU's size only when ``total_gib`` is)."""
    return TrialResult(
        number=number,
        status=FailureClass.OK,
        verdict=Verdict(FailureClass.OK),
        stop_reason=StopReason.MEASURED,
        step_times_s=(2.0, 1.0, 1.0),
        warmup_steps=1,
        memory=MemoryReport("log", (GpuMemory(0, total_gib, peak_gib), GpuMemory(1, total_gib, peak_gib - 1))),
    )


def oom(number: int, line: str = OOM_LINE) -> TrialResult:
    verdict = Verdict(FailureClass.OOM, evidence=(Evidence(3, line, "stderr.log"),))
    return TrialResult(
        number=number,
        status=FailureClass.OOM,
        verdict=verdict,
        stop_reason=StopReason.EXITED,
        exit_code=1,
        memory=MemoryReport("rss", (), 0.2),
    )


def test_the_size_comes_from_a_report_that_gave_it_else_from_an_oom_message():
    assert learned_gpu_gib([ran(0, 24.0), ran(1, 48.0)]) is None
    assert learned_gpu_gib([ran(0, 24.0), oom(1)]) == 79.15
    assert learned_gpu_gib([ran(0, 24.0, total_gib=79.6), oom(1)]) == 79.6
    assert learned_gpu_gib([ran(0, 24.0), oom(1, "CUDA error: an illegal memory access was encountered")]) is None
    hip = OOM_LINE.replace("CUDA", "HIP").replace("79.15 GiB", "191.98 GiB")  # ROCm: no NVML at all
    assert learned_gpu_gib([ran(0, 24.0), oom(1, hip)]) == 191.98


def test_a_report_in_gib_alone_reads_as_a_share_of_the_learned_size_and_a_sized_one_keeps_its_own():
    unsized, own = ran(0, 24.0), ran(1, 40.0, total_gib=80.0)
    assert unsized.memory.max_peak_frac is None
    assert with_gpu_gib(unsized, 79.15).memory.max_peak_frac == 24.0 / 79.15
    assert with_gpu_gib(own, 40.0) is own and with_gpu_gib(unsized, None) is unsized
    assert [g.total_gib for g in with_gpu_gib(unsized, 79.15).memory.gpus] == [79.15, 79.15]
    results = [unsized, oom(1)]
    assert [r.memory.max_peak_frac for r in sized(results)] == [24.0 / 79.15, None]
    assert sized_among(ran(2, 48.0), results).memory.max_peak_frac == 48.0 / 79.15
    kept = [ran(0, 24.0), ran(1, 30.0)]
    assert sized(kept) is kept and sized_among(kept[0], kept) is kept[0]


SPACE = parse_space(
    """
name: gib-only
parameters:
  - {name: micro, kind: pow2, low: 1, high: 32, default: 2, memory: increasing}
  - {name: ckpt, kind: bool, default: false, memory: decreasing}
stability: {min_headroom_frac: 0.05}
""",
    source="test",
    label="gib-only",
)


def record(result: TrialResult, values: dict) -> TrialRecord:
    return TrialRecord(
        result.number,
        TrialState.COMPLETE,
        {**SPACE.defaults(), **values},
        TrialKind.SEARCH,
        Outcome.LAUNCHED,
        result.status,
        result,
    )


def test_once_an_oom_names_the_size_the_memory_model_gives_a_move_past_the_wall_low_odds():
    """Runs at micro 2 and 4 measured 24 and 48 GiB; micro 8 ran out. Micro 32 with checkpointing
    (never measured) dominates no OOM: with the runs in GiB alone, only the OOM's bound says anything
    (the odds are graded from it, loosely); in shares its peak is predicted far past the wall, and a
    smaller micro-batch surely fits."""
    results = [ran(0, 24.0), ran(1, 48.0), oom(2)]
    values = [{"micro": 2}, {"micro": 4}, {"micro": 8}]
    beyond, smaller = {**SPACE.defaults(), "micro": 32, "ckpt": True}, {**SPACE.defaults(), "micro": 1}
    unsized = MemoryModel(SPACE, [record(r, v) for r, v in zip(results, values)])
    assert 0.01 < unsized.p_fits(beyond) < 0.5 < unsized.p_fits(smaller) < 0.99
    model = MemoryModel(SPACE, [record(r, v) for r, v in zip(sized(results), values)])
    assert model.p_fits(beyond) < 0.01 and model.p_fits(smaller) > 0.99


def test_a_run_told_before_the_size_was_known_is_judged_against_the_headroom_once_it_is(tmp_path):
    """Told at 76 GiB of an unknown GPU, trial 0 looked stable; an OOM then names 79.15 GiB, and read
    back it sits within the 5% headroom: near the wall, not a config to export."""
    study = optuna.create_study(
        storage=f"sqlite:///{tmp_path / 'study.db'}", study_name="gib-only", directions=["maximize"]
    )
    for result in (ran(0, 76.0), ran(1, 40.0), oom(2)):
        tell_result(study, study.ask(), result, min_headroom_frac=0.05)
    before = R.records_of(study.get_trials()[:2])
    assert [r.near_wall for r in before] == [False, False]
    assert [r.result.memory.max_peak_frac for r in before] == [None, None]
    after = R.records(study)
    assert [r.near_wall for r in after] == [True, False, False]
    assert after[0].result.memory.max_peak_frac == 76.0 / 79.15
