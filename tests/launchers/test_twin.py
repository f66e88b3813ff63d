"""LocalLauncher on the synthetic twin (a real multi-process gloo job): a rank that stalls in a
collective, and a rank that runs out of memory while the other waits."""

from __future__ import annotations

from pathlib import Path

import pytest

from nccl_tune.diagnose.api import diagnose_path
from nccl_tune.failure import FailureClass
from nccl_tune.launchers.local import LocalLauncher
from nccl_tune.launchers.teardown import find_marked, study_match
from nccl_tune.launchers.trial_files import read_result
from nccl_tune.trial import Clocks, StopReason, StopRule, TrialSpec

TWIN = Path(__file__).resolve().parents[2] / "examples" / "run_skyrl_sql_sim.sh"

pytestmark = pytest.mark.slow


def _run(study: str, tmp_path: Path, env: dict[str, str], stall_s: float = 4):
    # today's SkyRL writes its workers' output to {trainer.log_path}/infra-*.log: inside the trial folder
    argv = ("bash", str(TWIN), f"trainer.log_path={tmp_path / 'trial' / 'logs'}")
    spec = TrialSpec(
        study=study,
        number=0,
        params={},
        argv=argv,
        env=env,
        trial_dir=tmp_path / "trial",
        clocks=Clocks(startup_timeout_s=120, stall_timeout_s=stall_s, stall_floor_s=stall_s, grace_s=2),
        stop=StopRule(1, 3),
    )
    return LocalLauncher().run(spec)


def test_a_stalled_rank_is_a_hang_and_its_detached_worker_is_killed(study: str, tmp_path: Path) -> None:
    # the collective timeout is far longer than the stall timeout: nccl-tune must find it first
    result = _run(study, tmp_path, {"SIM_FAULT": "hang:1:2,orphan", "SKYRL_WORKER_NCCL_TIMEOUT_IN_S": "7200"})
    assert result.status is FailureClass.HANG and result.stop_reason is StopReason.STALL
    assert result.verdict.phase == "policy_train"
    assert len(result.step_times_s) == 1
    assert result.escaped_processes >= 1 and result.survivors == 0
    assert find_marked(study_match(study)) == []


def test_an_oom_cascade_is_classified_by_its_root_cause_with_every_rank_dump(study: str, tmp_path: Path) -> None:
    # SIM_SEED=1: rank 0 aborts in its collective, so Ray reports that actor's death on stdout
    env = {
        "SIM_FAULT": "oom:1:2",
        "TORCH_FR_BUFFER_SIZE": "2000",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "SKYRL_WORKER_NCCL_TIMEOUT_IN_S": "180",
        "SIM_SEED": "1",
        "SIM_RANKS": "2",
    }
    result = _run(study, tmp_path, env)
    assert result.status is FailureClass.OOM and result.verdict.rank == 1
    assert result.verdict.phase == "policy_train"
    # The CUDA error is in the infra log only (stdout shows Ray's error): the evidence names that file.
    (infra,) = (tmp_path / "trial" / "logs").glob("infra-*.log")
    assert "CUDA out of memory" not in (tmp_path / "trial" / "output.log").read_text()
    assert (
        result.verdict.evidence[0].source == f"logs/{infra.name}"
        and "CUDA out of memory" in result.verdict.evidence[0].text
    )
    assert infra in result.log_paths
    assert [p.name for p in result.fr_dumps] == ["nccl_trace_rank_0", "nccl_trace_rank_1"]
    assert all(p.parent == tmp_path / "trial" / "fr" for p in result.fr_dumps)
    assert result.memory.source == "log" and result.memory.peak_gib > 0


@pytest.mark.parametrize(
    ("fault", "status"),
    [("oom:1:2", FailureClass.OOM), ("hang:1:2", FailureClass.HANG), ("crash:1:2", FailureClass.CRASH)],
)
def test_diagnose_on_the_trial_folder_agrees_with_its_result(study: str, tmp_path: Path, fault: str, status) -> None:
    """The twin fails for real; ``nccl-tune diagnose TRIAL_DIR`` replays the launcher's decision."""
    timeout = "7200" if fault.startswith("hang") else "60"  # a hang must outlast the stall clock
    env = {
        "SIM_FAULT": fault,
        "SIM_RANKS": "2",
        "TORCH_FR_BUFFER_SIZE": "2000",
        "SKYRL_WORKER_NCCL_TIMEOUT_IN_S": timeout,
    }
    # A crashed rank ends the run by itself (the others wait for it: a stall found first is a hang); on a
    # loaded machine the twin's exit after its traceback can take longer than 4 s.
    result = _run(study, tmp_path, env, stall_s=30 if fault.startswith("crash") else 4)
    assert result.status is status, [str(e) for e in result.verdict.evidence]
    recorded = read_result(tmp_path / "trial")
    assert recorded is not None and recorded.verdict == result.verdict
    assert diagnose_path(tmp_path / "trial").verdict == result.verdict
    assert (tmp_path / "trial" / "facts.json").is_file()
    if status is FailureClass.HANG:  # the stacks taken at the stall show the twin's stalled rank asleep
        assert any("is in time.sleep" in e.text and e.source == "stacks.json" for e in result.verdict.evidence)
