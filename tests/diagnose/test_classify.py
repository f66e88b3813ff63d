"""The classifier on logs composed from the real message formats: cascades by root cause, the order
of events, failures after training, healthy slow runs, truncation, prefixes and 8 interleaved ranks."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from nccl_tune.diagnose.reader import LogClassifier
from nccl_tune.diagnose.verdict import classify_file, classify_log
from nccl_tune.failure import FailureClass as F
from nccl_tune.failure import signal_from_exit

from .helpers import (
    cuda_oom,
    finished,
    nccl_info,
    nccl_init_complete,
    skyrl,
    started,
    tqdm,
    watchdog,
    watchdog_aftermath,
)


def step_prefix(steps_done: int = 1) -> list[str]:
    """SkyRL's start-up and ``steps_done`` healthy steps, then the phases of the next step up to policy_train."""
    lines = [skyrl("init policy/ref/critic models done"), started("sync_weights"), finished("sync_weights", 3.2)]
    for _ in range(steps_done):
        lines += [started("step")]
        for ph, s in (
            ("generate", 431.0),
            ("postprocess_generator_output", 0.4),
            ("convert_to_training_input", 1.1),
            ("fwd_logprobs_values_reward", 52.3),
            ("compute_advantages_and_returns", 0.2),
        ):
            lines += [started(ph), finished(ph, s)]
        lines += [
            started("train_critic_and_policy"),
            started("policy_train"),
            finished("policy_train", 81.2),
            finished("train_critic_and_policy", 81.3),
            started("sync_weights"),
            finished("sync_weights", 3.0),
            finished("step", 570.0),
        ]
    lines += [
        started("step"),
        started("generate"),
        finished("generate", 402.0),
        started("fwd_logprobs_values_reward"),
        finished("fwd_logprobs_values_reward", 50.0),
        started("train_critic_and_policy"),
        started("policy_train"),
    ]
    return lines


def oom_cascade(oom_rank: int = 3, world: int = 8) -> list[str]:
    """Rank ``oom_rank`` runs out of memory in policy_train; the other ranks time out in the FSDP all-gather."""
    lines = step_prefix()
    lines += cuda_oom(oom_rank, gpu=oom_rank)
    for r in range(world):
        if r != oom_rank:
            lines.append(watchdog(r, 19962))
    for r in range(world):
        if r != oom_rank:
            lines += watchdog_aftermath(r)
    return lines


# --- cascades: the first failure in time, by rank ---------------------------------------------------


def test_oom_on_one_rank_then_seven_watchdog_timeouts_is_oom_on_that_rank() -> None:
    v = classify_log(oom_cascade(3), exit_code=None, signal_name="SIGABRT")
    assert v.failure_class is F.OOM
    assert v.rank == 3
    assert v.phase == "policy_train"
    assert "trainer.micro_train_batch_size_per_gpu" in v.advice
    assert "trainer.policy.fsdp_config.cpu_offload=true" in v.advice
    assert "OutOfMemoryError" in v.evidence[0].text
    # the cascade is shown after the root cause
    assert any("Watchdog caught collective operation timeout" in e.text for e in v.evidence[1:])


@pytest.mark.parametrize("first", ["cuda", "oom"])
def test_order_decides_between_two_root_causes(first: str) -> None:
    cuda = [
        "[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered\n",
        "[rank2]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
        "might be incorrect.\n",
    ]
    oom = cuda_oom(5, gpu=5)
    body = cuda + oom if first == "cuda" else oom + cuda
    lines = step_prefix() + body + [watchdog(r, 77) for r in (0, 1, 3, 4, 6, 7)]
    v = classify_log(lines)
    if first == "cuda":
        assert (v.failure_class, v.rank) == (F.CUDA_ERROR, 2)
        assert "CUDA_LAUNCH_BLOCKING=1" in v.advice
    else:
        assert (v.failure_class, v.rank) == (F.OOM, 5)


def test_cuda_error_reraised_by_the_nccl_watchdog_is_cuda_error() -> None:
    lines = (
        step_prefix()
        + [
            "[rank0]:[E1021 10:11:12.345678 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group "
            "watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered\n",
            "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43 (most recent call first):\n",
            "frame #3: c10d::ProcessGroupNCCL::WorkNCCL::finishedGPUExecutionInternal() const + 0x52 (0x7f1 in libtorch_cuda.so)\n",
            "frame #5: c10d::ProcessGroupNCCL::Watchdog::runLoop() + 0x1a4 (0x7f2 in libtorch_cuda.so)\n",
            "terminate called after throwing an instance of 'c10::DistBackendError'\n",
            "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: CUDA "
            "error: an illegal memory access was encountered\n",
        ]
        + watchdog_aftermath(1)
    )
    v = classify_log(lines, signal_name="SIGABRT")
    assert v.failure_class is F.CUDA_ERROR
    assert v.rank == 0
    assert "illegal memory access" in v.advice.lower()


def test_rendezvous_timeout_before_the_first_step_is_init_failure_even_if_a_timeout_follows() -> None:
    lines = [
        skyrl("Initializing process group"),
        "[W1203 09:27:51.604418239 socket.cpp:462] [c10d] waitForInput: poll for socket SocketImpl(fd=13, "
        "addr=[node-02]:51342, remote=[::ffff:10.20.4.11]:29600) returned 0, likely a timeout\n",
        "torch.distributed.DistNetworkError: The client socket has timed out after 900000ms while trying to connect to "
        "(10.20.4.11, 29600).\n",
        watchdog(1, 1, op="BROADCAST", numel_in=131072000, numel_out=131072000),
    ]
    v = classify_log(lines, exit_code=1)
    assert v.failure_class is F.INIT_FAILURE
    assert "rendezvous" in v.advice.lower()


def test_store_timeout_after_training_started_is_not_an_init_failure() -> None:
    lines = step_prefix() + [
        "[rank3]: torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 7/8 clients joined.\n",
    ]
    v = classify_log(lines, exit_code=1)
    assert v.failure_class is F.COLLECTIVE_TIMEOUT


def _raised(frames: list[str], exception: str) -> list[str]:
    out = ["Traceback (most recent call last):\n"]
    for path, line, fn, src in frames:
        out += [f'  File "{path}", line {line}, in {fn}\n', f"    {src}\n"]
    return out + [exception + "\n"]


def test_a_peer_reset_raised_while_the_process_group_forms_is_an_init_failure() -> None:
    frames = [
        ("/srv/job/train.py", 40, "<module>", "main()"),
        ("/srv/job/train.py", 22, "main", "dist.init_process_group('gloo')"),
        (
            "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py",
            1203,
            "init_process_group",
            "default_pg = _new_process_group_helper(",
        ),
    ]
    v = classify_log(
        ["Starting worker 3 of 4\n"] + _raised(frames, "RuntimeError: Connection reset by peer"), exit_code=1
    )
    assert v.failure_class is F.INIT_FAILURE and v.cause.subtype == "rendezvous"
    # the same line raised from a training step is a peer that went away: a crash, not the rendezvous
    step = [("/srv/job/train.py", 40, "<module>", "main()"), ("/srv/job/train.py", 31, "main", "loss.backward()")]
    v = classify_log(
        ["Starting worker 3 of 4\n"] + _raised(step, "RuntimeError: Connection reset by peer"), exit_code=1
    )
    assert v.failure_class is F.CRASH
    # and an earlier traceback's rendezvous frame does not count for a later one
    earlier = _raised(frames[:2], "RuntimeError: Address family not supported, retrying")
    v = classify_log(earlier + _raised(step, "RuntimeError: Connection reset by peer"), exit_code=1)
    assert v.cause.rule != "rendezvous_reset_frame"


def test_gloo_peer_reset_after_an_oom_is_the_oom() -> None:
    lines = (
        step_prefix()
        + cuda_oom(1, gpu=1)
        + [
            "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
            "[127.0.0.1]:29561\n",
            "[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection reset by peer\n",
        ]
    )
    v = classify_log(lines, exit_code=1)
    assert (v.failure_class, v.rank) == (F.OOM, 1)


def test_nccl_remote_error_after_a_peer_crash_is_the_crash() -> None:
    lines = step_prefix() + [
        "[rank6]: Segmentation fault (core dumped)\n",
        "[rank2]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:"
        "275, remote process exited or there was a network error, NCCL version 2.21.5\n",
    ]
    v = classify_log(lines, exit_code=1)
    assert (v.failure_class, v.rank) == (F.CRASH, 6)


def test_same_seqnum_different_sizes_is_a_mismatch() -> None:
    lines = step_prefix() + [watchdog(r, 512, numel_in=4096) for r in (0, 1, 2)] + [watchdog(3, 512, numel_in=2048)]
    v = classify_log(lines)
    assert v.failure_class is F.COLLECTIVE_MISMATCH
    assert v.rank == 3
    assert "NumelIn=2048" in v.advice


def test_every_rank_in_the_same_collective_is_a_timeout_naming_op_and_seq() -> None:
    lines = step_prefix() + [watchdog(r, 19962) for r in range(8)] + watchdog_aftermath(0)
    v = classify_log(lines, signal_name="SIGABRT")
    assert v.failure_class is F.COLLECTIVE_TIMEOUT
    assert v.rank is None
    assert "_ALLGATHER_BASE (SeqNum 19962)" in v.advice
    assert "SKYRL_WORKER_NCCL_TIMEOUT_IN_S" in v.advice and "TORCH_FR_BUFFER_SIZE" in v.advice
    assert v.phase == "policy_train"


def test_the_one_silent_rank_of_a_known_world_is_named() -> None:
    lines = [nccl_init_complete(r) for r in range(8)] + step_prefix()
    lines += [watchdog(r, 19962) for r in range(8) if r != 4]
    v = classify_log(lines, signal_name="SIGABRT")
    assert (v.failure_class, v.rank) == (F.COLLECTIVE_TIMEOUT, 4)
    assert "Rank 4" in v.advice


def _gloo(rank: int, what: str) -> str:
    errors = {
        "timeout": "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3600ms for "
        "recv operation to complete",
        "lost": "[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:56021",
    }
    return f"[rank{rank}]: RuntimeError: {errors[what]}\n"


def test_a_rank_whose_peer_died_first_was_waiting_and_the_last_one_in_is_behind() -> None:
    """Rank 0 timed out and died; rank 2, waiting too, lost its peer before its own time-out; rank 1
    (the one behind) lost its peers only when it reached the collective, after both."""
    head = [nccl_init_complete(r, nranks=3) for r in range(3)] + step_prefix()
    v = classify_log(head + [_gloo(0, "timeout"), _gloo(2, "lost"), _gloo(1, "lost")], exit_code=1)
    assert (v.failure_class, v.rank) == (F.COLLECTIVE_TIMEOUT, 1)
    # or never reached it
    v = classify_log(head + [_gloo(0, "timeout"), _gloo(2, "lost")], exit_code=1)
    assert (v.failure_class, v.rank) == (F.COLLECTIVE_TIMEOUT, 1)
    # two ranks: the one that lost its peer may just have been a little later, nobody is named
    two = [nccl_init_complete(r, nranks=2) for r in range(2)] + step_prefix()
    v = classify_log(two + [_gloo(0, "timeout"), _gloo(1, "lost")], exit_code=1)
    assert (v.failure_class, v.rank) == (F.COLLECTIVE_TIMEOUT, None)
    # nobody timed out: peers lost all round is a crash, not a rank behind
    v = classify_log(head + [_gloo(0, "lost"), _gloo(2, "lost"), _gloo(1, "lost")], exit_code=1)
    assert v.failure_class is F.CRASH


def test_nccl_warn_before_a_timeout_names_the_cause() -> None:
    lines = step_prefix() + [
        "gpu-node-01:4003:4190 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.1.1.7<53721> "
        "with error 12, opcode 0, len 0, vendor err 129 (Recv)\n",
        watchdog(3, 900),
        watchdog(5, 900),
    ]
    v = classify_log(lines)
    assert v.failure_class is F.NCCL_ERROR
    assert "NCCL WARN" in v.evidence[0].text


def test_an_nccl_warn_the_run_trained_through_does_not_explain_a_later_timeout() -> None:
    warn = (
        "gpu-node-01:4003:4190 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Call to ibv_modify_qp failed "
        "with error Connection timed out, retrying\n"
    )
    lines = [warn] + step_prefix(2) + [watchdog(3, 900), watchdog(5, 900)]
    v = classify_log(lines)
    assert v.failure_class is F.COLLECTIVE_TIMEOUT


def test_nccl_warning_that_it_could_not_open_a_library_does_not_name_the_cause() -> None:
    """NCCL warns on every node without InfiniBand that it could not open the verbs library, and goes on
    with sockets: a later NCCL error keeps its own reading."""
    lines = step_prefix() + [
        "gpu-node-01:4003:4003 [3] misc/ibvwrap.cc:98 NCCL WARN Failed to open libibverbs.so[.1]\n",
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
        "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n",
    ]
    v = classify_log(lines)
    assert (v.failure_class, v.cause.subtype) == (F.NCCL_ERROR, "system")
    assert "DistBackendError" in v.evidence[0].text


def test_invalid_nccl_env_value_is_an_nccl_error_naming_the_value() -> None:
    lines = [
        'gpu-node-01:4000:4000 [0] graph/tuning.cc:109 NCCL WARN Unrecognized element token "Simpel" when parsing "LL,Simpel"\n',
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
        "invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.21.5\n",
    ]
    v = classify_log(lines, exit_code=1)
    assert v.failure_class is F.NCCL_ERROR
    assert '"LL,Simpel"' in v.advice and "NCCL_PROTO" in v.advice


def test_torchrun_root_cause_summary_names_the_rank_and_signal() -> None:
    lines = [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n",
        "============================================================\n",
        "train.py FAILED\n",
        "------------------------------------------------------------\n",
        "Failures:\n",
        "  <NO_OTHER_FAILURES>\n",
        "------------------------------------------------------------\n",
        "Root Cause (first observed failure):\n",
        "[0]:\n",
        "  time      : 2025-02-01_10:11:12\n",
        "  host      : gpu-node-01\n",
        "  rank      : 5 (local_rank: 5)\n",
        "  exitcode  : -9 (pid: 40118)\n",
        "  error_file: <N/A>\n",
        "  traceback : Signal 9 (SIGKILL) received by PID 40118\n",
        "============================================================\n",
    ]
    calm = classify_log(lines, exit_code=1)
    assert (calm.failure_class, calm.rank) == (F.CRASH, 5)
    assert "SIGKILL" in calm.advice
    climb = classify_log(lines, exit_code=1, host_mem_peak_frac=0.95)
    assert (climb.failure_class, climb.rank) == (F.HOST_OOM, 5)


def test_ranks_the_launcher_killed_after_the_root_cause_aborted_were_not_killed_from_outside() -> None:
    """torchrun's summary lists, before its root cause (rank 0 aborted: SIGABRT, the NCCL watchdog
    taking it down), the ranks it stopped after it with SIGTERM, then SIGKILL. The kill is the
    launcher's, not the kernel's nor a scheduler's: the verdict is rank 0's abort."""
    lines = [
        "W0501 10:11:10.000000 140 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 1234 "
        "closing signal SIGTERM\n",
        "E0501 10:11:11.000000 140 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) "
        "local_rank: 0 (pid: 1233) of binary: /usr/bin/python3\n",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n",
        "============================================================\n",
        "train.py FAILED\n",
        "------------------------------------------------------------\n",
        "Failures:\n",
        "[1]:\n",
        "  rank      : 1 (local_rank: 1)\n",
        "  exitcode  : -9 (pid: 1234)\n",
        "  traceback : Signal 9 (SIGKILL) received by PID 1234\n",
        "------------------------------------------------------------\n",
        "Root Cause (first observed failure):\n",
        "[0]:\n",
        "  rank      : 0 (local_rank: 0)\n",
        "  exitcode  : -6 (pid: 1233)\n",
        "  traceback : Signal 6 (SIGABRT) received by PID 1233\n",
        "============================================================\n",
    ]
    v = classify_log(lines, exit_code=1)
    assert (v.failure_class, v.rank) == (F.CRASH, 0), v
    assert v.advice.startswith("Ended by SIGABRT") and "SIGKILL" not in v.advice, v.advice


# --- memory climb, signals and exit codes --------------------------------------------------------------


@pytest.mark.parametrize(("peak", "expected"), [(0.97, F.HOST_OOM), (0.40, F.CRASH), (None, F.CRASH)])
def test_sigkill_with_no_error_printed(peak: float | None, expected: F) -> None:
    lines = step_prefix() + [skyrl("Number of sequences: 1280")]
    v = classify_log(lines, signal_name="SIGKILL", host_mem_peak_frac=peak)
    assert v.failure_class is expected
    assert v.phase == "policy_train"
    assert v.evidence[0].source == "nccl-tune"


@pytest.mark.parametrize(
    ("code", "sig"), [(-9, "SIGKILL"), (137, "SIGKILL"), (134, "SIGABRT"), (-11, "SIGSEGV"), (1, None), (0, None)]
)
def test_signal_from_exit(code: int, sig: str | None) -> None:
    assert signal_from_exit(code) == sig


def test_exit_zero_and_clean_log_is_ok_but_nonzero_is_a_crash_with_the_last_lines() -> None:
    lines = step_prefix() + [finished("policy_train"), finished("train_critic_and_policy"), finished("step", 570.0)]
    assert classify_log(lines, exit_code=0).ok
    assert classify_log(lines).failure_class is F.NO_END  # no exit status, no end line
    v = classify_log(lines, exit_code=3)
    assert v.failure_class is F.CRASH
    assert "code 3" in v.advice
    assert "Finished: 'step'" in v.evidence[-1].text


def test_a_handled_traceback_in_a_run_that_exited_zero_is_ok() -> None:
    lines = step_prefix(2) + [
        "wandb: Network error (ConnectionError), entering retry loop.\n",
        "Traceback (most recent call last):\n",
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='api.wandb.ai', port=443): Max retries exceeded\n",
        finished("policy_train"),
    ]
    assert classify_log(lines, exit_code=0).ok


# --- after training ------------------------------------------------------------------------------------


def test_failure_after_training_done_is_reported_as_such() -> None:
    lines = (
        step_prefix(2)[:-2]
        + [skyrl("Training done!")]
        + [
            "[rank0]:[W1021 10:11:12 ProcessGroupNCCL.cpp:1250] Warning: WARNING: process group has NOT been destroyed\n",
            "[rank0]: RuntimeError: CUDA error: an illegal memory access was encountered\n",
        ]
    )
    v = classify_log(lines, exit_code=1)
    assert v.failure_class is F.CUDA_ERROR
    assert v.after_training is True
    assert v.advice.startswith("Training had finished")


def test_final_checkpoint_failure_is_after_training_but_periodic_one_is_not() -> None:
    final = step_prefix(2)[:-7] + [started("save_checkpoints")] + cuda_oom(0)
    v = classify_log(final, exit_code=1)
    assert v.failure_class is F.OOM and v.after_training and v.phase == "save_checkpoints"
    periodic = step_prefix(1)[:-7] + [started("step"), started("save_checkpoints")] + cuda_oom(0)
    v2 = classify_log(periodic, exit_code=1)
    assert v2.failure_class is F.OOM and not v2.after_training and v2.phase == "save_checkpoints"


# --- phases and advice ---------------------------------------------------------------------------------


def test_phase_survives_the_timers_logging_finished_while_the_exception_unwinds() -> None:
    lines = (
        step_prefix()[:-2]
        + [started("fwd_logprobs_values_reward"), finished("fwd_logprobs_values_reward", 12.0), finished("step", 500.0)]
        + cuda_oom(2)
    )
    v = classify_log(lines, exit_code=1)
    assert v.phase == "fwd_logprobs_values_reward"
    assert "trainer.micro_forward_batch_size_per_gpu" in v.advice


def vllm_engine_oom(first: str, frame: str, tail: tuple[str, ...] = ()) -> list[str]:
    """A vLLM V1 engine core's error block: ``first`` line, the frame the OOM came from, CUDA's OOM, then ``tail``."""
    core = "(EngineCore_0 pid=5512) ERROR 09-02 03:11:09 [core.py:634] "
    return [
        f"{core}{first}\n",
        f'{core}  File "/opt/vllm/vllm/v1/worker/gpu_model_runner.py", line 1620, in {frame}\n',
        f"{core}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of "
        "79.10 GiB of which 1.02 GiB is free.\n",
        *tail,
    ]


@pytest.mark.parametrize(
    ("lines", "wanted", "unwanted"),
    [
        # raised while the engine profiles its memory at start-up: its share of the GPU is the fix
        (
            vllm_engine_oom("Traceback (most recent call last):", "profile_run"),
            ("vLLM engines started", "lower generator.gpu_memory_utilization"),
            (),
        ),
        # raised from execute_model after the engine reported a fatal error while running: it was generating,
        # so fewer sequences at once is the fix, not a smaller share at start-up (no phase line to say so)
        (
            vllm_engine_oom(
                "EngineCore encountered a fatal error.",
                "execute_model",
                (
                    "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace "
                    "(above) for the root cause.\n",
                ),
            ),
            ("during generation", "generator.max_num_seqs"),
            ("engines started",),
        ),
    ],
    ids=["start-up", "model-step"],
)
def test_a_vllm_oom_is_advised_by_what_its_engine_was_doing(
    lines: list[str], wanted: tuple[str, ...], unwanted: tuple[str, ...]
) -> None:
    v = classify_log(lines, exit_code=1)
    assert v.failure_class is F.OOM
    assert all(w in v.advice for w in wanted), v.advice
    assert not any(u in v.advice for u in unwanted), v.advice


def test_vllm_free_memory_at_start_up() -> None:
    lines = [
        "(EngineCore_DP0 pid=16388) ERROR 03-01 21:32:52 [core.py:708] ValueError: Free memory on device (13.91/79.33 GiB) "
        "on startup is less than desired GPU memory utilization (0.95, 75.36 GiB). Decrease GPU memory utilization or "
        "reduce GPU memory used by other processes.\n",
    ]
    v = classify_log(lines, exit_code=1)
    assert v.failure_class is F.OOM
    assert "lower generator.gpu_memory_utilization (below 0.18)" in v.advice


def test_fragmentation_is_mentioned_when_much_memory_is_reserved_but_unallocated() -> None:
    v = classify_log(step_prefix() + cuda_oom(0, reserved="6.20 GiB"), exit_code=1)
    assert "expandable_segments:True" in v.advice
    v2 = classify_log(step_prefix() + cuda_oom(0, reserved="171.53 MiB"), exit_code=1)
    assert "expandable_segments" not in v2.advice


def test_refused_config_names_the_key() -> None:
    lines = [
        "Could not override 'trainer.micro_train_batch_size'.\n",
        "To append to your config use +trainer.micro_train_batch_size=4\n",
        "Key 'micro_train_batch_size' is not in struct\n",
        "    full_key: trainer.micro_train_batch_size\n",
        "    object_type=dict\n",
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n",
    ]
    v = classify_log(lines, exit_code=1)
    assert v.failure_class is F.CONFIG_ERROR
    assert "'trainer.micro_train_batch_size'" in v.advice


def test_batch_size_assertion_is_a_config_error() -> None:
    lines = [
        "Traceback (most recent call last):\n",
        '  File "/opt/venv/lib/python3.12/site-packages/skyrl_train/utils/utils.py", line 88, in validate_batch_sizes\n',
        "AssertionError: normalized policy_mini_batch_size_per_gpu 160 should be divisible by micro_train_batch_size_per_gpu 3\n",
    ]
    v = classify_log(lines, exit_code=1)
    assert v.failure_class is F.CONFIG_ERROR
    assert "should be divisible" in v.advice


# --- real-world log shapes -----------------------------------------------------------------------------


def test_ansi_ray_prefixes_and_pid_to_rank_mapping() -> None:
    lines = step_prefix() + [
        "\x1b[36m(FSDPPolicyWorkerBase pid=959049)\x1b[0m [rank3]: starting micro-batch 1/8\n",
        "\x1b[36m(FSDPPolicyWorkerBase pid=959049)\x1b[0m torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "1.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 101.00 MiB is free.\n",
        "\x1b[36m(FSDPPolicyWorkerBase pid=959050)\x1b[0m [rank4]: Timed out waiting 600000ms for recv operation to complete\n",
    ]
    v = classify_log(lines)
    assert (v.failure_class, v.rank) == (F.OOM, 3)
    assert "\x1b" not in v.evidence[0].text and v.evidence[0].text.startswith("(FSDPPolicyWorkerBase pid=959049)")


def test_a_worker_line_glued_behind_another_writers_fragment_keeps_its_pid() -> None:
    """Three gloo ranks in Ray workers; rank 1 is behind. The driver's faulthandler writes a traceback
    straight to the shared file without ending its lines, so rank 0's timeout line lands behind a
    fragment of it: the line is still rank 0's, and rank 1 is the one that reported no timeout."""
    pids = {0: 1011, 1: 1015, 2: 1019}
    ray = "\x1b[36m(FSDPPolicyWorkerBase pid={})\x1b[0m "
    gloo = "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:{}] Timed out waiting 3600ms for {} operation to complete\n"
    lines = (
        [ray.format(pids[r]) + f"[rank{r}]: init policy model done\n" for r in range(3)]
        + step_prefix()
        + [
            ray.format(pids[2]) + gloo.format(129, "send"),
            "Fatal Python error: Aborted\n",
            "  File ",
            '"/usr/lib/python3.11/threading.py' + ray.format(pids[0]) + gloo.format(78, "recv"),
            '", line 982 in run\n',
        ]
    )
    v = classify_log(lines, exit_code=134)
    assert (v.failure_class, v.rank) == (F.COLLECTIVE_TIMEOUT, 1), v.advice
    assert any(e.text.startswith("(FSDPPolicyWorkerBase pid=1011) RuntimeError") for e in v.evidence)


def test_ray_task_error_in_the_driver_names_the_worker_by_pid() -> None:
    lines = step_prefix() + [
        "\x1b[36m(FSDPPolicyWorkerBase pid=959052)\x1b[0m [rank6]: entering policy_train\n",
        "Traceback (most recent call last):\n",
        "ray.exceptions.RayTaskError(OutOfMemoryError): \x1b[36mray::FSDPPolicyWorkerBase.ppo_train()\x1b[39m (pid=959052, "
        "ip=10.0.0.5, actor_id=a9d94000c222b11d71158e2a01000000, repr=<skyrl_train.workers.fsdp.fsdp_worker."
        "FSDPPolicyWorkerBase object at 0x7f1>)\n",
    ]
    v = classify_log(lines, exit_code=1)
    assert (v.failure_class, v.rank, v.phase) == (F.OOM, 6, "policy_train")


def test_tqdm_bars_and_ray_repeat_suffixes() -> None:
    lines = [tqdm("Generating", i, 320) for i in range(0, 320, 16)] + [
        tqdm("Generating", 320, 320) + "\n",
        "(raylet) node_manager.cc:3069: 1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed "
        "due to other reasons at node (ID: 0e08f1205ff0533a) [repeated 3x across cluster]\n",
    ]
    v = classify_log(lines, exit_code=1)
    assert v.failure_class is F.HOST_OOM
    assert "repeated" not in v.evidence[0].text


def test_eight_interleaved_ranks_with_info_floods() -> None:
    rng = random.Random(7)
    streams: dict[int, list[str]] = {}
    for r in range(8):
        s = [nccl_init_complete(r)] + [nccl_info(r, i) for i in range(200)]
        s += [f"[rank{r}]: {tqdm('Training', i, 50)}\n" for i in range(0, 50, 5)]
        if r == 5:
            s += cuda_oom(5, gpu=5)
        else:
            s += [f"[rank{r}]: waiting in all-gather\n"] * 3 + [watchdog(r, 4711)] + watchdog_aftermath(r)
        streams[r] = s
    lines: list[str] = []
    # interleave line by line, keeping each rank's own order; rank 5's OOM comes out before any timeout
    cursors = {r: 0 for r in streams}
    oom_done = False
    while any(cursors[r] < len(streams[r]) for r in streams):
        r = rng.choice([k for k in streams if cursors[k] < len(streams[k])])
        line = streams[r][cursors[r]]
        if "Watchdog caught" in line and not oom_done:
            r, line = 5, streams[5][cursors[5]]
        cursors[r] += 1
        oom_done = oom_done or "OutOfMemoryError" in line
        lines.append(line)
    v = classify_log(step_prefix() + lines, signal_name="SIGABRT")
    assert (v.failure_class, v.rank) == (F.OOM, 5)


@pytest.mark.parametrize("seed", range(6))
def test_truncated_logs_never_break_the_classifier(seed: int) -> None:
    text = "".join(oom_cascade(2))
    rng = random.Random(seed)
    cut = rng.randrange(len(text))
    v = classify_log(text[:cut].splitlines(keepends=True), exit_code=1)
    oom_at = text.index("OutOfMemoryError: CUDA out of memory")
    if cut > oom_at + len("OutOfMemoryError"):
        assert (v.failure_class, v.rank) == (F.OOM, 2)
    else:
        assert v.failure_class is F.CRASH  # cut before any error: only the exit status remains


def test_a_log_starting_mid_way_still_finds_the_root_cause() -> None:
    lines = oom_cascade(6)
    start = next(i for i, ln in enumerate(lines) if "OutOfMemoryError" in ln) - 1
    v = classify_log(lines[start:])
    assert (v.failure_class, v.rank) == (F.OOM, 6)
    assert v.phase is None


# --- healthy slow runs ---------------------------------------------------------------------------------


def healthy_slow_log(steps: int = 3) -> list[str]:
    lines = [nccl_init_complete(r) for r in range(8)]
    lines += [
        "[W socket.cpp:663] [c10d] The client socket has failed to connect to [node-01]:29500 (errno: 111 - Connection "
        "refused).\n",
        "gpu-node-01:4000:4000 [0] NCCL INFO Call to connect returned Connection refused, retrying\n",
        "[W302 07:03:41.006712114 socket.cpp:755] [c10d] The client socket has failed to connect to [node-01]:29500 "
        "(errno: 110 - Connection timed out).\n",
        "(autoscaler +12s) Warning: The following resource request cannot be scheduled right now: {'GPU': 1.0}.\n",
        "gpu-node-01:4003:4190 [3] misc/ibvwrap.cc:196 NCCL WARN Call to ibv_modify_qp failed with error Connection timed "
        "out, retrying\n",
        "gpu-node-01:4000:4000 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ; OOB ibp12s0:10.44.3.21<0>\n",
        "(TorchTrainer pid=8120) Waiting for placement group to start.\n",
        "[2026-03-02 09:41:10,553] [INFO] [utils.py:789:see_memory_usage] CPU Virtual Memory:  used = 418.44 GB, "
        "percent = 93.4%\n",
        "gpu-node-01:4000:4000 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.\n",
        "(raylet) [2026-03-02 10:00:00,000 I 88213 88213] memory_monitor.cc:52: MemoryMonitor initialized with usage "
        "threshold at 95% of the system memory\n",
        skyrl("generator.max_turns=6, generator.gpu_memory_utilization=0.7, timeout=1800"),
    ]
    lines += step_prefix(steps)[:-2]
    for r in range(8):
        lines += [nccl_info(r, i) for i in range(20)]
    lines += [skyrl("Step 4: {'timing/generate': '1201.0000', 'loss': '0.0312', 'policy/grad_norm': '0.5120'}")]
    lines += [tqdm("Generating", i, 100) for i in range(0, 101, 10)] + ["\n"]
    return lines


def test_healthy_slow_log_is_not_flagged() -> None:
    lines = healthy_slow_log()
    assert classify_log(lines).failure_class is F.NO_END
    assert classify_log(lines, exit_code=0).ok


def test_healthy_log_stopped_by_the_tuner_is_not_a_root_cause() -> None:
    """SIGTERM from our own teardown after the measured steps, no error line: only the status speaks."""
    v = classify_log(healthy_slow_log(), signal_name="SIGTERM")
    assert v.failure_class is F.CRASH
    assert v.evidence[0].source == "nccl-tune"


# --- streaming, several sources, files ---------------------------------------------------------------


def _flood(n: int) -> Iterator[str]:
    for i in range(n):
        yield nccl_info(i % 8, i)
        if i == n // 2:
            yield from cuda_oom(7)


def test_streams_a_generator_once_with_bounded_memory() -> None:
    tracemalloc.start()
    try:
        v = classify_log(_flood(150_000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (v.failure_class, v.rank) == (F.OOM, 7)
    assert peak < 2 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB for a ~15 MB stream"


def test_several_sources_keep_their_own_line_numbers() -> None:
    clf = LogClassifier()
    clf.set_source("driver.log")
    clf.feed(step_prefix())
    clf.set_source("rank3.log")
    clf.feed(["ok\n", "ok\n"] + cuda_oom(3))
    v = clf.verdict(exit_code=1)
    assert v.failure_class is F.OOM and v.phase == "policy_train"
    assert (v.evidence[0].source, v.evidence[0].line_no) == ("rank3.log", 6)


def test_classify_file_replaces_undecodable_bytes(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_bytes(b"\xff\xfe garbage \x80\n" + "".join(cuda_oom(1)).encode())
    v = classify_file(log, exit_code=1)
    assert (v.failure_class, v.rank) == (F.OOM, 1)
    assert v.evidence[0].source == "output.log" and v.evidence[0].line_no == 5


def test_classify_file_on_a_missing_file_is_a_one_line_error(tmp_path: Path) -> None:
    from nccl_tune.errors import NcclTuneError

    with pytest.raises(NcclTuneError, match="cannot read the log .*nope.log: No such file"):
        classify_file(tmp_path / "nope.log")


def test_a_forced_algorithm_without_an_implementation_is_named_with_the_per_collective_fix() -> None:
    lines = [
        "(FSDPPolicyWorkerBase pid=11) node:11:20 [0] NCCL WARN No algorithm/protocol available for function Broadcast "
        "with datatype ncclFloat32. NCCL_ALGO was set to Tree.",
        "(FSDPPolicyWorkerBase pid=11) torch.distributed.DistBackendError: NCCL error in: "
        "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, invalid usage (run with NCCL_DEBUG=WARN for "
        "details), NCCL version 2.27.3",
    ]
    v = classify_log(lines, exit_code=1)
    assert v.failure_class is F.NCCL_ERROR
    assert v.evidence[0].line_no == 1
    assert "Broadcast" in v.advice and "NCCL_ALGO=Tree" in v.advice and "allreduce:Tree" in v.advice
    generic = classify_log(lines[1:], exit_code=1)
    assert "invalid usage" in generic.advice and "NCCL_ALGO" in generic.advice


def test_timeouts_in_several_unnamed_groups_are_not_ranks_out_of_step() -> None:
    """Lines of an older PyTorch name no process group. Rank 0 waits at three sequence numbers
    (data-, tensor- and pipeline-parallel groups) and rank 3 at a fourth: a rank is at one sequence
    number per group, so these are several groups, not rank 3 behind the others."""

    def old(rank: int, seq: int) -> str:
        return (
            f"[E ProcessGroupNCCL.cpp:828] [Rank {rank}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 607565 milliseconds before timing out.\n"
        )

    lines = [old(3, 33), old(0, 257), old(0, 1032), old(0, 1796)]
    v = classify_log(lines, signal_name="SIGABRT")
    assert v.failure_class is F.COLLECTIVE_TIMEOUT, v
    # one sequence number per rank, and one rank behind: out of step
    behind = [old(3, 33), old(0, 34), old(1, 34), old(2, 34)]
    v = classify_log(behind, signal_name="SIGABRT")
    assert (v.failure_class, v.rank) == (F.COLLECTIVE_MISMATCH, 3), v


def test_groups_named_only_on_the_watchdogs_next_line_keep_their_sequence_numbers_apart() -> None:
    """PyTorch 2.5's watchdog line names the rank, not the group; the line after it on the same rank
    names the group and the work (``[PG ID 11 PG GUID 119 Rank 1] Exception ... detected by watchdog at
    work: 216``). Two ranks waiting in two groups' collectives (an expert-parallel all-to-all, another
    group's all-reduce: the shape of NVIDIA/nccl#1610) count their sequence numbers apart: a time-out,
    not rank 15 behind rank 13. Named in one group, they are out of step."""

    def waiting(rank: int, group_rank: int, guid: int, seq: int, op: str) -> list[str]:
        head = f" 2025-02-18 12:54 [rank{rank}]:[E218 04:54:22.864467604 ProcessGroupNCCL.cpp"
        return [
            f"{head}:616] [Rank {group_rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
            f"OpType={op}, NumelIn=32, NumelOut=32, Timeout(ms)=600000) ran for 600045 milliseconds before timing out.\n",
            f"{head}:1795] [PG ID 11 PG GUID {guid} Rank {group_rank}] Exception (either an error or timeout) detected "
            f"by watchdog at work: {seq}, last enqueued NCCL work: {seq + 4}, last completed NCCL work: {seq - 1}.\n",
        ]

    two_groups = waiting(13, 1, 119, 216, "ALLTOALL_BASE") + waiting(15, 0, 112, 57, "ALLREDUCE")
    v = classify_log(two_groups, signal_name="SIGABRT")
    assert v.failure_class is F.COLLECTIVE_TIMEOUT, v
    one_group = waiting(13, 1, 119, 216, "ALLREDUCE") + waiting(15, 0, 119, 57, "ALLREDUCE")
    v = classify_log(one_group, signal_name="SIGABRT")
    assert (v.failure_class, v.rank) == (F.COLLECTIVE_MISMATCH, 15), v
    # a rank whose next line was lost: the one group the log names is its group too
    v = classify_log(one_group[:3], signal_name="SIGABRT")
    assert (v.failure_class, v.rank) == (F.COLLECTIVE_MISMATCH, 15), v


def test_nccls_unhandled_cuda_error_whose_last_error_is_out_of_memory_is_an_oom() -> None:
    """Without NCCL_DEBUG, NCCL's failure to allocate its buffers reads as PyTorch's "unhandled cuda
    error", and only ``Last error: Cuda failure 'out of memory'`` says what failed: the GPU's memory,
    as NCCL's own warning would have said (with NCCL_DEBUG it reads as an OOM). The search must
    count it with the memory wall, not as a CUDA fault of the values the run held."""
    lines = [
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, "
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n",
        "[rank3]: ncclUnhandledCudaError: Call to CUDA function failed.\n",
        "[rank3]: Last error:\n",
        "[rank3]: Cuda failure 'out of memory'\n",
    ]
    v = classify_log(lines, exit_code=1)
    assert (v.failure_class, v.rank) == (F.OOM, 3), v
    assert [e.line_no for e in v.evidence[:2]] == [4, 1]
    other = classify_log(lines[:3] + ["[rank3]: Cuda failure 'invalid device ordinal'\n"], exit_code=1)
    assert other.failure_class is F.CUDA_ERROR, other


def test_an_exception_the_run_trained_two_steps_past_did_not_end_it() -> None:
    """A bare log (no exit status) where a traceback was logged and handled: the run went on."""
    handled = [
        "Traceback (most recent call last):\n",
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='api.wandb.ai', port=443)\n",
    ]
    two_later = step_prefix(1)[:-7] + handled + step_prefix(2)[3:]
    assert classify_log(two_later).failure_class is F.NO_END
    # one step after it may be other ranks closing the step the exception broke: still the crash
    one_later = step_prefix(1)[:-7] + handled + step_prefix(1)[3:]
    assert classify_log(one_later).failure_class is F.CRASH


def test_a_real_gloo_group_on_an_interface_the_node_lacks_names_the_interface(tmp_path: Path) -> None:
    """torch's own gloo, told by GLOO_SOCKET_IFNAME to use an interface this machine does not have:
    a set-up failure (no step can fix it), and the advice names the interface."""
    from .conftest import free_port

    code = (
        "import torch.distributed as dist; "
        f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{free_port()}', rank=0, world_size=1)"
    )
    env = dict(os.environ, GLOO_SOCKET_IFNAME="nosuch0", OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    v = classify_log((out.stdout + out.stderr).splitlines(keepends=True), exit_code=out.returncode)
    assert v.failure_class is F.INIT_FAILURE and v.cause.subtype == "gloo_connect", v
    assert "no network interface named nosuch0" in v.advice and "GLOO_SOCKET_IFNAME" in v.advice
