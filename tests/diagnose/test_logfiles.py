"""A trial's log files: output.log and SkyRL's infra logs, merged in time order, read by the
classifier and by ``diagnose TRIAL_DIR`` with every evidence line naming its file."""

from __future__ import annotations

import io
import os
from datetime import datetime
from pathlib import Path

from nccl_tune.diagnose.api import diagnose_path
from nccl_tune.diagnose.logfiles import line_time, merged_lines, source_name, trial_log_files
from nccl_tune.diagnose.verdict import LogFacts, TrialFacts, decide
from nccl_tune.failure import FailureClass

STDOUT = """\
2026-08-22 10:00:00.000 | INFO     | skyrl.train.utils.utils:initialize_ray:924 - Infrastructure logs will be written to: {infra}
(skyrl_entrypoint pid=7) 2026-08-22 10:00:05.000 | INFO     | skyrl.train.trainer:train:342 - Started: 'step'
(skyrl_entrypoint pid=7) 2026-08-22 10:00:05.100 | INFO     | skyrl.train.trainer:train:450 - Started: 'train_critic_and_policy'
(skyrl_entrypoint pid=7) 2026-08-22 10:00:05.200 | INFO     | skyrl.train.trainer:train_critic_and_policy:1569 - Started: 'policy_train'
Traceback (most recent call last):
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
"""
INFRA = """\
2026-08-22 10:00:01.000 | INFO     | skyrl.backends.skyrl_train.workers.fsdp.fsdp_worker:init_model:88 - Initialized process group rank 1/2
Traceback (most recent call last):
  File "worker.py", line 1, in ppo_train
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 18.86 GiB. GPU 1 has a total capacity of 79.15 GiB of which 2.10 GiB is free.
[rank0]: Timed out waiting 3000ms for recv operation to complete
Fatal Python error: Aborted
"""


def _trial(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "trial-0000"
    infra = folder / "logs" / "infra-260822_100000.log"
    infra.parent.mkdir(parents=True)
    infra.write_text(INFRA)
    (folder / "output.log").write_text(STDOUT.format(infra=infra))
    # the infra log's tail was written at the failure, after the trainer's last stamped line
    t = datetime(2026, 8, 22, 10, 0, 6).timestamp()
    os.utime(infra, (t, t))
    return folder, infra


def test_the_trial_folder_lists_output_log_then_every_infra_log(tmp_path: Path) -> None:
    folder, infra = _trial(tmp_path)
    (folder / "ray" / "session_x" / "logs").mkdir(parents=True)
    (folder / "ray" / "session_x" / "logs" / "raylet.out").write_text("x")
    assert trial_log_files(folder) == (folder / "output.log", infra)


def test_lines_merge_by_their_stamps_and_unstamped_lines_follow_their_file() -> None:
    a = io.StringIO("2026-01-01 10:00:00.000 a1\n2026-01-01 10:00:02,500 a2\nafter a2\n")
    b = io.StringIO("early\n2026-01-01 10:00:01.000 b1\n2026-01-01 10:00:03.000 b3\n")
    order = [(i, line.split()[-1]) for i, _, line in merged_lines([a, b])]
    assert order == [(1, "early"), (0, "a1"), (1, "b1"), (0, "a2"), (0, "a2"), (1, "b3")]
    assert line_time("\x1b[32m2026-01-01 10:00:02.5\x1b[0m | x") == (2026, 1, 1, 10, 0, 2, 500000)
    assert line_time("no stamp here") is None


def test_an_oom_only_in_the_infra_log_is_oom_with_that_file_named(tmp_path: Path) -> None:
    folder, infra = _trial(tmp_path)
    logs = tuple(LogFacts(source_name(p, folder), p) for p in trial_log_files(folder))
    v = decide(TrialFacts(logs=logs, exit_code=1))
    assert v.failure_class is FailureClass.OOM
    assert v.evidence[0].source == "logs/infra-260822_100000.log" and v.evidence[0].line_no == 4
    assert "CUDA out of memory" in v.evidence[0].text
    assert v.phase == "policy_train"
    # stdout alone knows only that an actor died
    alone = decide(TrialFacts(logs=logs[:1], exit_code=1))
    assert alone.failure_class is not FailureClass.OOM
    # `nccl-tune diagnose TRIAL_DIR` reads the same files and agrees
    d = diagnose_path(folder)
    assert d.verdict.failure_class is FailureClass.OOM and infra in d.inputs
    assert d.verdict.evidence[0].source == "logs/infra-260822_100000.log"
