"""Failures of a run's start-up, told apart from the same words mid-run: Ray placement groups never
ready are ``init_failure`` whatever exception carries them; a refused configuration is
``config_error`` before any step and a ``crash`` after healthy steps; an InfiniBand verbs failure
while NCCL sets a communicator up is ``init_failure``, after training steps NCCL's runtime error."""

from __future__ import annotations

import pytest

from nccl_tune.diagnose.verdict import classify_log
from nccl_tune.failure import FailureClass as F

RAY_GET_FRAMES = [
    'File "/usr/local/lib/python3.11/site-packages/ray/_private/worker.py", line 2753, in get',
    "  values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)",
]
GET_TIMEOUT = "ray.exceptions.GetTimeoutError: Get timed out: some object(s) not ready."


def traceback(*frames: str, error: str = GET_TIMEOUT, prefix: str = "") -> list[str]:
    return [f"{prefix}{line}\n" for line in ("Traceback (most recent call last):", *frames, *RAY_GET_FRAMES, error)]


@pytest.mark.parametrize(
    "wait",
    [
        "    ray.get(pg.ready(), timeout=600)",
        "    ray.get([pg.ready() for pg in pgs], timeout=180)",
        "    ready = ray.get(placement_group.ready(), timeout=self.pg_timeout)",
        "    if not pg.wait(timeout_seconds=300):",
    ],
)
def test_a_get_timeout_waiting_for_a_placement_group_is_an_init_failure(wait: str) -> None:
    lines = traceback(
        '  File "/app/launcher.py", line 61, in create_resource_pool', wait, prefix="(main_task pid=4410) "
    )
    v = classify_log(lines, exit_code=1)
    assert v.failure_class is F.INIT_FAILURE and v.cause.subtype == "placement_group"
    assert "ray status" in v.advice and "GetTimeoutError" in v.evidence[0].text


def test_a_get_timeout_waiting_for_tasks_is_not_a_placement_group() -> None:
    lines = traceback('  File "/app/trainer.py", line 301, in fit', "    status = ray.get(refs, timeout=600)")
    v = classify_log(lines, exit_code=1)
    assert v.failure_class is F.CRASH


@pytest.mark.parametrize(
    "line",
    [
        "TimeoutError: Timed out waiting for placement groups to be ready. The cluster may not have enough resources to "
        "satisfy the requested configuration, or the resources may be busy with other tasks.",
        "TimeoutError: Timed out waiting for placement group for role 'actor_rollout'",
        "RuntimeError: Placement group pg_rollout_0 is not ready after 300 s: 8 bundles pending",
        "TimeoutError: Placement group creation timed out. Make sure your cluster either has enough resources or use "
        "an autoscaling cluster.",
    ],
)
def test_placement_groups_never_ready_in_their_own_words(line: str) -> None:
    v = classify_log([line + "\n"], exit_code=1)
    assert v.failure_class is F.INIT_FAILURE and v.cause.rule == "ray_placement_group"


def test_waiting_for_a_placement_group_is_no_failure() -> None:
    v = classify_log(["(TorchTrainer pid=8120) Waiting for placement group to start.\n"])
    assert v.failure_class is F.NO_END


# --- refusals: the program refusing its configuration at start-up, and the same words mid-run ------

STEPS = [f"step: {n:3d}  loss:  3.1000  memory: 61.47GiB(64.71%)  tps: 6,112\n" for n in range(1, 4)]


@pytest.mark.parametrize(
    "line",
    [
        "AssertionError: world size (6) is not divisible by tensor parallel size (4) times pipeline parallel size (1)",
        "ValueError: Invalid parallel dims: dp_replicate(1) * dp_shard(3) * cp(1) * tp(2) * pp(1) != world_size(8)",
        "ValueError: world_size (6) must be divisible by ring_attn_size (4)",
        "AssertionError: real_train_batch_size (1000) must be divisible by minimal possible batch size (16)",
        "torchtitan.config.manager.ConfigError: pipeline_parallel_degree (3) must divide the number of layers (32)",
        "omegaconf.errors.ConfigAttributeError: Key 'use_dynamic_bsz' is not in struct",
    ],
)
def test_a_refusal_before_any_step_is_config_error_and_after_steps_a_crash(line: str) -> None:
    before = classify_log(["[rank0]: Traceback (most recent call last):\n", f"[rank0]: {line}\n"], exit_code=1)
    assert before.failure_class is F.CONFIG_ERROR and before.rank == 0
    after = classify_log([*STEPS, f"{line}\n"], exit_code=1)
    assert after.failure_class is F.CRASH and after.cause.subtype == "config_mid_run"
    assert "after training steps" in after.advice and not after.refused_key


def test_a_value_error_that_names_no_layout_is_a_crash_even_at_start_up() -> None:
    v = classify_log(["ValueError: invalid literal for int() with base 10: 'auto'\n"], exit_code=1)
    assert v.failure_class is F.CRASH


# --- InfiniBand verbs: the communicator's set-up, or NCCL's runtime -----------------------------------


@pytest.mark.parametrize(
    "warn",
    [
        "misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory",
        "misc/ibvwrap.cc:167 NCCL WARN Call to ibv_create_qp failed with error Unknown error -12",
        "misc/ibvwrap.cc:228 NCCL WARN Call to ibv_modify_qp failed with error Invalid argument, errno 22",
        "ibvwrap.c: 106 NCCL WARN Call to ibv_reg_mr failed",
    ],
)
def test_a_verbs_failure_at_set_up_is_an_init_failure_and_after_steps_an_nccl_error(warn: str) -> None:
    line = f"gpu-b03:31120:31441 [0] {warn}\n"
    chain = ["gpu-b03:31120:31441 [0] NCCL INFO transport/net_ib.cc:1297 -> 2\n"]
    error = "[rank4]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
    at_set_up = classify_log([line, *chain, error])
    assert at_set_up.failure_class is F.INIT_FAILURE and at_set_up.rank == 4
    assert "failed" in at_set_up.advice and ("ulimit -l" in at_set_up.advice or "NCCL_IB_GID_INDEX" in at_set_up.advice)
    mid_run = classify_log([*STEPS, line, *chain, error])
    assert mid_run.failure_class is F.NCCL_ERROR and mid_run.cause.subtype == "ib_verbs"
