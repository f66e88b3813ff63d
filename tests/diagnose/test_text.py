"""Line cleaning (``nccl_tune.diagnose.text``): what the classifier and the launcher's log reader see of a line."""

from __future__ import annotations

from nccl_tune.diagnose import text as T


def test_a_worker_line_glued_behind_an_unfinished_fragment_is_the_workers() -> None:
    line = '  File "/usr/lib/python3.11/threading.py\x1b[36m(FSDPPolicyWorkerBase pid=1011, ip=10.0.0.5)\x1b[0m RuntimeError: boom\n'
    text = T.clean(line)
    assert text == "(FSDPPolicyWorkerBase pid=1011, ip=10.0.0.5) RuntimeError: boom"
    assert T.ray_pid(text) == 1011 and T.message(text) == "RuntimeError: boom"


def test_a_prefix_quoted_inside_a_whole_line_and_a_task_error_stay_whole() -> None:
    whole = "(raylet) worker died: (FSDPPolicyWorkerBase pid=1011) exited with code 1"
    assert T.clean(whole) == whole
    task = (
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::FSDPPolicyWorkerBase.ppo_train() (pid=959052, "
        "ip=10.0.0.5, actor_id=a9d9)"
    )
    assert T.clean(task) == task and T.task_pid(T.clean(task)) == 959052
