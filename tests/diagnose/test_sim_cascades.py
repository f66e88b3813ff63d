"""Cascades produced for real by the synthetic twin (``examples/run_skyrl_sql_sim.sh``: a driver and
gloo ranks in real processes), classified by root cause from the outside: its log, exit status and
the Flight Recorder dumps its ranks write."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from nccl_tune.diagnose.api import diagnose_paths
from nccl_tune.diagnose.verdict import classify_file
from nccl_tune.failure import FailureClass as F

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "run_skyrl_sql_sim.sh"
pytestmark = pytest.mark.skipif(not SCRIPT.is_file(), reason="the synthetic twin is not in this tree")


@dataclass(frozen=True)
class SimRun:
    folder: Path
    log: Path
    exit_code: int
    dumps: tuple[Path, ...]


def run_twin(folder: Path, *overrides: str, **env: str) -> SimRun:
    """Run the twin to its end, its merged output in ``output.log`` and dumps in ``fr/`` (a trial folder)."""
    (folder / "fr").mkdir(parents=True)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "SIM_", "TORCH_FR_"))}
    # Everything in one file: today's SkyRL would write the workers' output to an infra log.
    full_env.update(
        TORCH_FR_BUFFER_SIZE="2000",
        TORCH_FR_DUMP_TEMP_FILE=str(folder / "fr" / "nccl_trace_rank_"),
        SIM_SEED="11",
        SKYRL_DUMP_INFRA_LOG_TO_STDOUT="1",
        **env,
    )
    log = folder / "output.log"
    with open(log, "w") as out:
        proc = subprocess.run(
            ["bash", str(SCRIPT), *overrides],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=folder,
            timeout=240,
        )
    return SimRun(folder, log, proc.returncode, tuple(sorted((folder / "fr").iterdir())))


@pytest.fixture(scope="module")
def oom_run(tmp_path_factory: pytest.TempPathFactory) -> SimRun:
    return run_twin(tmp_path_factory.mktemp("sim") / "oom", SIM_RANKS="2", SIM_FAULT="oom:1:2")


def test_oom_on_one_rank_then_timeouts_is_oom_on_that_rank(oom_run: SimRun) -> None:
    assert oom_run.exit_code != 0
    text = oom_run.log.read_text()
    assert "CUDA out of memory" in text and "Timed out waiting" in text, "the twin should produce the cascade"
    v = classify_file(oom_run.log, exit_code=oom_run.exit_code)
    assert (v.failure_class, v.rank, v.phase) == (F.OOM, 1, "policy_train")
    assert "trainer.micro_train_batch_size_per_gpu" in v.advice
    assert "CUDA out of memory" in v.evidence[0].text
    assert any("Timed out waiting" in e.text for e in v.evidence[1:])


def test_oom_cascade_with_its_dumps_as_a_trial_folder(oom_run: SimRun) -> None:
    assert oom_run.dumps, "every rank dumps when a collective fails"
    (d,) = diagnose_paths([oom_run.folder])
    assert (d.verdict.failure_class, d.verdict.rank) == (F.OOM, 1)
    fr = d.flight_recorder
    assert fr is not None and fr.culprit_rank == 1, fr.note


def test_stalled_rank_is_a_collective_timeout_naming_it(tmp_path: Path) -> None:
    run = run_twin(tmp_path / "hang", SIM_RANKS="3", SIM_FAULT="hang:1:1")
    assert run.exit_code != 0
    without = classify_file(run.log, exit_code=run.exit_code)
    assert (without.failure_class, without.rank) == (F.COLLECTIVE_TIMEOUT, 1)
    with_fr = classify_file(run.log, exit_code=run.exit_code, fr_dumps=run.dumps)
    assert (with_fr.failure_class, with_fr.rank) == (F.COLLECTIVE_TIMEOUT, 1)
    assert with_fr.flight_recorder["culprit_reason"] == "never entered"
    assert "Flight Recorder: rank 1 is behind" in with_fr.advice


def test_a_rank_that_dies_is_a_crash_and_its_missing_dump_names_it(tmp_path: Path) -> None:
    run = run_twin(tmp_path / "crash", SIM_RANKS="2", SIM_FAULT="crash:1:2")
    v = classify_file(run.log, exit_code=run.exit_code, fr_dumps=run.dumps)
    assert v.failure_class is F.CRASH
    assert "segmentation fault" in v.advice.lower()
    assert v.rank == 1 and v.flight_recorder["ranks_missing"] == [1]


def test_invalid_nccl_value_and_vllm_start_up(tmp_path: Path) -> None:
    bad = run_twin(tmp_path / "nccl", SIM_RANKS="2", NCCL_PROTO="LL,Simpel")
    v = classify_file(bad.log, exit_code=bad.exit_code)
    assert v.failure_class is F.NCCL_ERROR and '"LL,Simpel"' in v.advice
    vllm = run_twin(tmp_path / "vllm", "generator.inference_engine.gpu_memory_utilization=0.99", SIM_RANKS="2")
    v2 = classify_file(vllm.log, exit_code=vllm.exit_code)
    assert v2.failure_class is F.OOM and "lower generator.gpu_memory_utilization" in v2.advice


def test_a_healthy_run_with_nccl_info_is_not_flagged(tmp_path: Path) -> None:
    run = run_twin(
        tmp_path / "ok", "trainer.epochs=1", "trainer.eval_before_train=false", SIM_RANKS="2", NCCL_DEBUG="INFO"
    )
    text = run.log.read_text()
    assert run.exit_code == 0 and "Training done!" in text and "NCCL INFO" in text
    assert classify_file(run.log, exit_code=0).ok
    assert classify_file(run.log).ok
