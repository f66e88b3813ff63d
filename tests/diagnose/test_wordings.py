"""Wordings of recent releases the rules read by their meaning: the size a transport received that the
collective did not post (NCCL's IB and sockets, gloo), NCCL's bootstrap truncation, the Flight
Recorder's dump signal (another rank timed out, not a hung watchdog), vLLM's engine processes dying,
and processes ended by SIGBUS, SIGABRT or an exit code of their own. Two of them come from a real
gloo job under torchrun."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nccl_tune.diagnose.verdict import classify_file, classify_log
from nccl_tune.failure import FailureClass as F

from .conftest import SCRIPTS, free_port


def lines(text: str) -> list[str]:
    return [ln + "\n" for ln in text.strip("\n").splitlines()]


IB_SIZE_MISMATCH = lines("""
gpu-a07:2211904:2212130 [0] NCCL INFO Channel 01/0 : 8[0] -> 0[0] [receive] via NET/IB/0
gpu-a07:2211904:2212188 [0] transport/net_ib.cc:1461 NCCL WARN NET/IB : req 0/1 tag 3 peer 10.20.4.11<41877> collective mismatch error, local size 786432 remote size 262144
gpu-a07:2211904:2212188 [0] NCCL INFO transport/net.cc:1317 -> 5
gpu-a07:2211904:2212188 [0] NCCL INFO proxy.cc:896 -> 5 [Progress Thread]
[rank0]:[E1203 09:14:05.411920 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.21.5
ncclInvalidUsage: This usually reflects invalid usage of NCCL library.
terminate called after throwing an instance of 'c10::DistBackendError'
""")

SOCKET_TRUNCATED = lines("""
{'loss': 1.8812, 'grad_norm': 0.41, 'learning_rate': 1.9e-05, 'epoch': 0.12}
node-3:88121:88330 [2] transport/net_socket.cc:521 NCCL WARN NET/Socket : peer 10.0.7.4<50122> message truncated : receiving 1048576 bytes instead of 65536. If you believe your socket network is in healthy state, there may be a mismatch in collective sizes or environment settings (e.g. NCCL PROTO, NCCL ALGO) between ranks
node-3:88121:88330 [2] NCCL INFO proxy.cc:716 -> 5 [Progress Thread]
[rank2]:[E1203 11:02:45.000112 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated with exception: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.20.5
""")

BOOTSTRAP_TRUNCATED = lines("""
0: compute-st-p5-1:41102:43011 [5] bootstrap.cc:77 NCCL WARN Message truncated : received 1024 bytes instead of 256
0: compute-st-p5-1:41102:43011 [5] NCCL INFO bootstrap.cc:560 -> 3
0: [rank5]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, internal error - please report this issue to the NCCL developers, NCCL version 2.20.5
0: [rank5]: ncclInternalError: Internal check failed.
""")


def test_nccl_ib_size_mismatch_is_a_collective_mismatch_not_the_fabric() -> None:
    v = classify_log(IB_SIZE_MISMATCH)
    assert v.failure_class is F.COLLECTIVE_MISMATCH
    assert "collective mismatch error" in v.evidence[0].text
    assert "786432" in v.advice and "262144" in v.advice and "NCCL_PROTO" in v.advice
    assert "check the interface" not in v.advice


def test_nccl_socket_truncation_is_a_collective_mismatch() -> None:
    v = classify_log(SOCKET_TRUNCATED)
    assert v.failure_class is F.COLLECTIVE_MISMATCH
    assert v.cause.subtype == "size_on_wire"
    assert "1048576 bytes arrived where 65536 were posted" in v.advice


def test_nccl_bootstrap_truncation_names_ranks_that_disagree_on_set_up() -> None:
    v = classify_log(BOOTSTRAP_TRUNCATED)
    assert v.failure_class is F.NCCL_ERROR
    assert v.cause.subtype == "bootstrap_mismatch"
    assert "Message truncated" in v.evidence[0].text
    assert "nccl.version()" in v.advice and "new_group" in v.advice


DUMP_FROM_RANK_0 = lines("""
[rank1]:[E1203 10:30:00.001 ProcessGroupNCCL.cpp:1808] [PG ID 0 PG GUID 0(default_pg) Rank 1] Received a dump signal due to a collective timeout from  rank 0 and we will try our best to dump the debug info. Last enqueued NCCL work: 812, last completed NCCL work: 811.This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks.
[rank1]:[F1203 10:38:00.000 ProcessGroupNCCL.cpp:1557] [PG ID 0 PG GUID 0(default_pg) Rank 1] [PG ID 0 PG GUID 0(default_pg) Rank 1] Terminating the process after attempting to dump debug info, due to collective timeout or exception.
""")

DUMP_FROM_ANOTHER = lines("""
[rank6]:[E1203 10:30:00.000 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank 6] Observed flight recorder dump signal from another rank via TCPStore.
[rank6]:[F1203 10:38:00.000 ProcessGroupNCCL.cpp:1557] [PG ID 0 PG GUID 0(default_pg) Rank 6] [PG ID 0 PG GUID 0(default_pg) Rank 6] Terminating the process after attempting to dump debug info, due to collective timeout or exception.
""")


@pytest.mark.parametrize(
    ("log", "named"), [(DUMP_FROM_RANK_0, "Rank 0's watchdog"), (DUMP_FROM_ANOTHER, "Another rank's")]
)
def test_dump_signal_is_another_ranks_timeout_not_a_hung_watchdog(log: list[str], named: str) -> None:
    v = classify_log(log)
    assert v.failure_class is F.COLLECTIVE_TIMEOUT
    assert v.cause.subtype == "dump_signal"
    assert v.advice.startswith(named) and "did not time out itself" in v.advice
    assert "watchdog itself hung" not in v.advice


def test_heartbeat_monitor_still_reads_as_a_hung_watchdog() -> None:
    v = classify_log(
        lines("""
[rank2]:[E1021 10:11:12.000 ProcessGroupNCCL.cpp:1423] [PG ID 0 PG GUID 0(default_pg) Rank 2] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=1
""")
    )
    assert v.failure_class is F.COLLECTIVE_TIMEOUT and "watchdog itself hung" in v.advice


ENGINE_CORE_DIED = lines("""
(EngineCore_DP0 pid=51022) INFO 11-04 10:12:33 [gpu_worker.py:298] Available KV cache memory: 41.22 GiB
INFO 11-04 10:13:02 [async_llm.py:270] Added request cmpl-1.
ERROR 11-04 10:19:51 [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.
ERROR 11-04 10:19:51 [async_llm.py:420] AsyncLLM output_handler failed.
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core_client.py", line 883, in get_output_async
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
""")


def test_vllm_engine_core_died_without_an_error_of_its_own() -> None:
    v = classify_log(ENGINE_CORE_DIED, exit_code=1)
    assert v.failure_class is F.CRASH
    assert v.cause.rule == "vllm_proc_died"
    assert "died unexpectedly" in v.evidence[0].text
    assert "dmesg" in v.advice and "not a known infrastructure failure" not in v.advice


def test_vllm_worker_proc_died_names_the_worker() -> None:
    v = classify_log(
        lines("""
(EngineCore_DP0 pid=7711) ERROR 10-02 08:40:11 [multiproc_executor.py:154] Worker proc VllmWorker-2 died unexpectedly, shutting down executor.
(EngineCore_DP0 pid=7711) ERROR 10-02 08:40:12 [core.py:710] EngineCore encountered a fatal error.
(EngineCore_DP0 pid=7711) ERROR 10-02 08:40:12 [core.py:710] RuntimeError: Worker failed with error 'Executor failed.', please check the stack trace above for the root cause
"""),
        exit_code=1,
    )
    assert v.cause.rule == "vllm_proc_died" and v.cause.details["proc"] == "Worker proc VllmWorker-2"


def test_engine_dead_error_leaves_the_engines_own_error_as_the_crash() -> None:
    v = classify_log(
        lines("""
(EngineCore_DP0 pid=3301) ERROR 08-11 14:02:18 [core.py:710] EngineCore encountered a fatal error.
(EngineCore_DP0 pid=3301) ERROR 08-11 14:02:18 [core.py:710] KeyError: 'model.layers.0.mlp.gate_up_proj.weight'
ERROR 08-11 14:02:19 [async_llm.py:420] AsyncLLM output_handler failed.
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
"""),
        exit_code=1,
    )
    assert v.failure_class is F.CRASH
    assert "KeyError" in v.evidence[0].text


def test_engine_dead_error_alone_sends_the_reader_to_the_engine() -> None:
    v = classify_log(ENGINE_CORE_DIED[-1:], exit_code=1)
    assert v.cause.rule == "vllm_engine_dead" and "EngineCore_DP0" in v.advice


def test_deepspeed_sigbus_points_at_shared_memory() -> None:
    v = classify_log(
        lines("""
[2025-09-02 11:52:40,112] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 88123
[2025-09-02 11:52:40,401] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=1'] exits with return code = -7
""")
    )
    assert v.failure_class is F.CRASH and v.rank == 1
    assert "/dev/shm" in v.advice and "--shm-size" in v.advice


def test_torchrun_sigabrt_says_the_process_aborted_itself() -> None:
    v = classify_log(
        lines("""
E1203 10:22:51.000000 1120 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: -6) local_rank: 3 (pid: 1191) of binary: /usr/bin/python
  traceback : Signal 6 (SIGABRT) received by PID 1191
""")
    )
    assert v.failure_class is F.CRASH and v.rank == 3
    assert "aborted itself" in v.advice and "terminate called" in v.advice


# --- a real gloo job under torchrun ------------------------------------------------------------


def run_torchrun(mode: str, log: Path) -> int:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",  # its store binds a free port itself: a port picked here may be taken meanwhile
        "--nproc-per-node",
        "2",
        str(SCRIPTS / "gloo_torchrun_job.py"),
        mode,
    ]
    with log.open("w") as out:
        return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=120).returncode


@pytest.fixture(scope="module")
def torchrun_logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int]]:
    base = tmp_path_factory.mktemp("torchrun")
    return {mode: (base / f"{mode}.log", run_torchrun(mode, base / f"{mode}.log")) for mode in ("size", "exit")}


def test_real_gloo_size_mismatch_is_a_collective_mismatch(torchrun_logs: dict[str, tuple[Path, int]]) -> None:
    log, code = torchrun_logs["size"]
    assert code != 0
    v = classify_file(log, exit_code=code)
    assert v.failure_class is F.COLLECTIVE_MISMATCH, [str(e) for e in v.evidence]
    assert "Received data size doesn't match expected size" in v.evidence[0].text
    assert "8 bytes arrived where 4 were posted" in v.advice


def test_real_rank_exit_code_names_the_rank_and_its_own_output(torchrun_logs: dict[str, tuple[Path, int]]) -> None:
    log, code = torchrun_logs["exit"]
    assert code != 0
    v = classify_file(log, exit_code=code)
    assert v.failure_class is F.CRASH and v.rank == 1, [str(e) for e in v.evidence]
    assert v.advice.startswith("Rank 1 exited first with code 3")


# --- a store whose host name does not resolve (a real process) -------------------------------------

UNRESOLVED_STORE = """
import datetime
import torch.distributed as dist
dist.TCPStore("no-such-host.invalid", {port}, 2, False, timeout=datetime.timedelta(seconds=2))
"""


def test_real_unresolvable_store_host_is_named(tmp_path: Path) -> None:
    log = tmp_path / "store.log"
    code = UNRESOLVED_STORE.format(port=free_port())
    with log.open("w") as out:
        rc = subprocess.run([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT, timeout=120).returncode
    assert rc != 0
    v = classify_file(log, exit_code=rc)
    assert v.failure_class is F.INIT_FAILURE, [str(e) for e in v.evidence]
    assert v.cause.subtype == "unresolved_host"
    assert "no-such-host.invalid does not resolve" in v.advice
    assert "gai error" in v.evidence[0].text


def test_unresolved_other_host_does_not_explain_a_timeout_to_this_one() -> None:
    v = classify_log(
        lines("""
[W1203 10:00:01.412000 socket.cpp:764] [c10d] The IPv6 network addresses of (old-master, 29500) cannot be retrieved (gai error: -2 - Name or service not known).
[E1203 10:15:01.000000 socket.cpp:1028] [c10d] The client socket has timed out after 900000ms while trying to connect to (10.0.0.4, 29500).
torch.distributed.DistNetworkError: The client socket has timed out after 900000ms while trying to connect to (10.0.0.4, 29500).
""")
    )
    assert v.failure_class is F.INIT_FAILURE
    assert v.cause.subtype != "unresolved_host" and "does not resolve" not in v.advice


def test_vllm_ray_executor_without_a_gpu_is_a_placement_failure() -> None:
    v = classify_log(
        lines("""
(EngineCore_DP0 pid=504) INFO 11-23 11:58:35 [ray_utils.py:396] No current placement group found. Creating a new placement group.
(EngineCore_DP0 pid=504) ERROR 11-23 11:58:35 [core.py:842] EngineCore failed to start.
(EngineCore_DP0 pid=504) ERROR 11-23 11:58:35 [core.py:842] ValueError: Current node has no GPU available. current_node_resource={'CPU': 32.0, 'node:10.0.0.7': 1.0}. vLLM engine cannot start without GPU. Make sure you have at least 1 GPU available in a node current_node_id='a7c1' current_ip='10.0.0.7'.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""),
        exit_code=1,
    )
    assert v.failure_class is F.INIT_FAILURE and v.cause.subtype == "ray_no_gpu"
    assert "GPU bundle" in v.advice


def test_ray_actor_unavailable_is_an_actor_death() -> None:
    v = classify_log(
        lines("""
Traceback (most recent call last):
ray.exceptions.ActorUnavailableError: The actor c5d6 is unavailable: The actor is temporarily unavailable: RpcError: RPC Error message: Cancelling all calls; RPC Error details:  rpc_code: 14. The task may or may not have been executed on the actor.
"""),
        exit_code=1,
    )
    assert v.failure_class is F.CRASH and v.cause.rule == "ray_actor_died"
