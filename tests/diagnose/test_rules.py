"""The rule table: each message format of the programs involved maps to its rule, the prefilter
lets every one of them through, and line cleaning reads ranks and pids the way the programs print them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nccl_tune.diagnose import text as T
from nccl_tune.diagnose.advice import advise
from nccl_tune.diagnose.rules import PREFILTER_KEYS, RULES, Kind, Rule, advice_by_cause, prefilter, template
from nccl_tune.diagnose.wording import AdviceContext
from nccl_tune.failure import FailureClass as F

# one line in each program's own format per rule (values changed, wording kept)
EXAMPLES = {
    "hydra_unknown_key": "Could not override 'trainer.mikro_train_batch_size_per_gpu'.",
    "dataclass_plus_prefix": "ValueError: The '+' prefix for adding new config fields is not supported: '+trainer.x=1'. To add custom config fields, subclass the relevant config dataclass.",
    "hydra_not_in_struct": "Key 'mikro' is not in struct",
    "hydra_bad_override": "Error merging override trainer.epochs=three",
    "config_validation": "omegaconf.errors.ValidationError: Value 'abc' of type 'str' could not be converted to Integer",
    "config_assertion": "AssertionError: train_batch_size 256 should be divisible by policy_mini_batch_size 96",
    "argparse_error": "train.py: error: unrecognized arguments: --lr=3",
    "startup_refusal": "[rank0]: ValueError: Invalid parallel dims: dp_replicate(1) * dp_shard(3) * cp(1) * tp(2) * pp(1) != world_size(8)",
    "command_not_found": "run.sh: line 4: uvx: command not found",
    "ray_memory_monitor": "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
    "kernel_oom_killer": "[812345.678] Out of memory: Killed process 40118 (python) total-vm:812345kB",
    "host_alloc_failed": "RuntimeError: [enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to allocate 8589934592 bytes. Error code 12 (Cannot allocate memory)",
    "vllm_kv_budget": "ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache is needed, which is larger than the available KV cache memory (2.50 GiB).",
    "vllm_free_memory": "ValueError: Free memory on device (13.91/79.33 GiB) on startup is less than desired GPU memory utilization (0.95, 75.36 GiB).",
    "cuda_oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 79.19 GiB",
    "cuda_ecc": "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "cuda_device_assert": '/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:93: operator(): block: [0,0,0], thread: [5,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed.',
    "cuda_illegal_access": "RuntimeError: CUDA error: an illegal memory access was encountered",
    "gpu_lost": "[123.4] NVRM: Xid (PCI:0000:1b:00): 79, pid=0, GPU has fallen off the bus.",
    "nccl_unhandled_cuda": "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5",
    "cuda_error": "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &fbeta, c, CUDA_R_16BF, ldc, CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`",
    "nccl_bad_env_value": 'node:1:1 [0] graph/tuning.cc:109 NCCL WARN Unrecognized element token "ring2" when parsing "ring2"',
    "nccl_remote": "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
    "nccl_no_algorithm": "vm:18622:18639 [0] NCCL WARN No algorithm/protocol available for function Broadcast with datatype ncclFloat32. NCCL_ALGO was set to NVLS. NCCL_PROTO was set to LL.",
    "nccl_error": "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
    "port_in_use": "[W socket.cpp:436] [c10d] The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
    "rendezvous_timeout": "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
    "ray_connect": "ConnectionError: Could not find any running Ray instance. Please specify the one to connect to by setting `--address` flag",
    "c10d_connect_retry": "[W socket.cpp:663] [c10d] The client socket has failed to connect to [node-01]:29500 (errno: 111 - Connection refused).",
    "collective_fingerprint_mismatch": "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=9, OpType=ALLREDUCE), but Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=9, OpType=BROADCAST).",
    "nccl_watchdog_timeout": "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=19962, OpType=_ALLGATHER_BASE, NumelIn=68125120, NumelOut=545000960, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",
    "gloo_timeout": "RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete",
    "monitored_barrier": "RuntimeError: [Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 30000 ms",
    "watchdog_check_timeout_frame": "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x1f2 (0x7f1 in libtorch_cuda.so)",
    "heartbeat_monitor": "[rank2]:[E1021 10:11:12.000 ProcessGroupNCCL.cpp:1423] [PG ID 0 PG GUID 0(default_pg) Rank 2] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=1",
    "watchdog_exception": "[rank5]:[E1021 10:11:12.345678 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 5] Exception (either an error or timeout) detected by watchdog at work: 912, last enqueued NCCL work: 914, last completed NCCL work: 911.",
    "some_nccl_ops_failed": "[Rank 0] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
    "gloo_pair_closed": "RuntimeError: Application timeout caused pair closure",
    "gpu_busy": "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
    "cuda_no_kernel_image": "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    "nccl_work_timeout": "[rank0]:[E1102 10:22:31.000000 ProcessGroupNCCL.cpp:1194] [PG ID 0 PG GUID 0(default_pg) Rank 0] Timeout at NCCL work: 25, last enqueued NCCL work: 25, last completed NCCL work: 24.",
    "ray_node_died": "ray.exceptions.NodeDiedError: Task failed due to the node (where this task was running) dying.",
    "build_mismatch": "ImportError: /usr/local/lib/python3.12/site-packages/flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi",
    "no_bf16": "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla V100-SXM2-32GB GPU has compute capability 7.0. You can use float16 instead by explicitly setting the `dtype` flag in CLI, for example: --dtype=half.",
    "gloo_connect": "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
    "corrupt_checkpoint": "safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer",
    "hf_hub_unreachable": "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the cached files and it looks like Qwen/Qwen2.5-7B is not the path to a directory containing a file named config.json.",
    "torchrun_signalled": "W1102 10:23:01.000000 140 torch/distributed/elastic/agent/server/api.py:719] Received Signals.SIGTERM death signal, shutting down workers",
    "torchrun_child_failed": "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 1 (pid: 40118) of binary: /usr/bin/python",
    "signal_received": "  traceback : Signal 9 (SIGKILL) received by PID 40118",
    "segfault": "Fatal Python error: Segmentation fault",
    "killed": "Killed",
    "vllm_engine_iteration_timeout": "ERROR 11-20 04:11:52 async_llm_engine.py:531] Engine iteration timed out. This "
    "should never happen!",
    "thc_cuda_oom": "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCCachingAllocator.cpp line=510 error=2 : out of memory",
    "thc_cuda_error": "RuntimeError: cuda runtime error (3) : initialization error at /pytorch/aten/src/THC/THCGeneral.cpp:50",
    "dataloader_killed": "RuntimeError: DataLoader worker (pid 1234) is killed by signal: Killed. ",
    "nccl_id_store": "[rank2]: torch.distributed.DistBackendError: [2] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer",
    "dataloader_bus_error": "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
    "shared memory (shm).",
    "disk_full": "OSError: [Errno 28] No space left on device: '/ckpt/global_step_400/model.safetensors'",
    "sglang_weight_update_failed": "[2026-11-20 04:11:52 TP0] Failed to update parameter online: shape mismatch for "
    "model.layers.3.mlp.experts.w13_weight. The full weights of the ModelRunner are partially updated.",
    "sglang_scheduler_exception": "[2026-11-20 04:11:52 TP1] Scheduler hit an exception: Traceback (most recent call last):",
    "slurm_task_end": "slurmstepd: error: *** STEP 88123.0 ON gpu-node-17 CANCELLED AT 2026-11-20T04:11:52 DUE TO TIME LIMIT ***",
    "slurm_task_oom": "srun: error: gpu-node-17: task 3: Out Of Memory",
    "nccl_warn_cuda_failure": "node-2:9120:9188 [5] transport/p2p.cc:275 NCCL WARN Cuda failure 'invalid argument'",
    "nccl_shm": "node-2:9120:9188 [5] include/shm.h:28 NCCL WARN Error while creating shared memory segment "
    "/dev/shm/nccl-Xq31aZ (size 9637888)",
    "nccl_duplicate_gpu": "node-2:9120:9188 [1] init.cc:720 NCCL WARN Duplicate GPU detected : rank 1 and rank 3 both on "
    "CUDA device 1d000",
    "ray_kill": "The actor is dead because it was killed by `ray.kill`.",
    "ray_actor_died": "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
    "peer_gone": "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:56021",
    "nccl_abort_teardown": "terminate called after throwing an instance of 'c10::DistBackendError'",
    "nccl_warn": "node:112:201 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got async event : port error",
    "loguru_error": "2026-03-02 10:11:12.345 | ERROR    | skyrl_train.generators:generate:88 - request failed, retrying",
    "exception": "KeyError: 'prompt'",
    "ib_verbs_call": "gpu-3:7101:7190 [1] misc/ibvwrap.cc:196 NCCL WARN Call to ibv_reg_mr failed with error Cannot allocate memory",
    "ib_completion_error": "gpu-3:7101:7190 [1] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.2.0.9<41211> with status=12 opcode=0 len=0 vendor err 129 (Recv)",
    "vllm_engine_args": "ValueError: Total number of attention heads (40) must be divisible by tensor parallel size (6).",
    "nccl_connect": "node-b:4410:4466 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 192.168.7.3<52413> failed : Connection timed out",
    "nccl_socket_transport": "node-b:88310:88502 [3] misc/socket.cc:50 NCCL WARN socketProgress: Connection closed by remote peer node-a<41877>",
    "connect_timeout": "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:144] Connect timeout [10.0.77.2]:38211",
    "ray_placement_group": "RuntimeError: Failed to create placement group with 8 bundles (requiring 8.0 GPUs, 8.0 CPUs total) in 180 seconds.",
    "ray_unschedulable": "(autoscaler +31s) Warning: The following resource request cannot be scheduled right now: {'GPU': 1.0}.",
    "dataclass_unknown_key": "ValueError: Invalid fields {'mikro_batch'} for TrainerConfig. Valid fields are {'epochs', 'micro_train_batch_size_per_gpu'}",
    "nccl_no_interface": "gpu-7:51234:51290 [3] misc/socket.cc:411 NCCL WARN Net : connecting to address  with family 21845 is neither AF_INET(2) nor AF_INET6(10)",
    "nccl_tests_timeout": "gpu-7: Test timeout (30s) common.cu:441",
    "nccl_tests_failed": " .. gpu-7 pid 51234: Test failure common.cu:1002",
    "nccl_bootstrap_truncated": "node-4:41102:43011 [5] bootstrap.cc:77 NCCL WARN Message truncated : received 1024 bytes instead of 256",
    "transport_size_mismatch": "gpu-a07:2211904:2212188 [0] transport/net_ib.cc:1461 NCCL WARN NET/IB : req 0/1 tag 3 peer "
    "10.20.4.11<41877> collective mismatch error, local size 786432 remote size 262144",
    "dump_signal": "[rank6]:[E1203 10:30:00.000 ProcessGroupNCCL.cpp:1746] [PG ID 0 PG GUID 0(default_pg) Rank 6] Observed "
    "flight recorder dump signal from another rank via TCPStore.",
    "vllm_proc_died": "ERROR 11-04 10:19:51 [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
    "vllm_engine_dead": "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) "
    "for the root cause.",
    "vllm_ray_no_gpu": "ValueError: Current node has no GPU available. current_node_resource={'CPU': 32.0}. vLLM engine "
    "cannot start without GPU. Make sure you have at least 1 GPU available in a node current_node_id='a7c1' current_ip='10.0.0.7'.",
    "c10d_unresolved_host": "[W1203 10:00:02.412000 socket.cpp:464] [c10d] The IPv4 network addresses of (trainer-master-0, "
    "29500) cannot be retrieved (gai error: -2 - Name or service not known).",
    "launcher_exit": "[2026-03-02 09:44:33,020] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', '--local_rank=3'] exits with return code = -9",
}


def first_rule(line: str) -> str | None:
    msg = T.message(T.clean(line))
    for rule in RULES:
        if rule.exclude and any(x in msg for x in rule.exclude):
            continue
        if any(k in msg for k in rule.keys) and (rule.pattern is None or rule.pattern.search(msg)):
            return rule.name
    return None


def test_every_rule_has_an_example() -> None:
    assert set(EXAMPLES) == {r.name for r in RULES}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_line_matches_its_rule_and_passes_the_prefilter(name: str) -> None:
    line = EXAMPLES[name]
    assert prefilter(line), f"the prefilter must let {name}'s line through"
    assert first_rule(line) == name


@pytest.mark.parametrize(
    "line",
    [
        "(FSDPPolicyWorkerBase pid=959049) 2026-03-02 10:11:12.345 | INFO     | skyrl_train.workers:ppo_train:88 - loss: 0.0312",
        "gpu-node-01:4000:4000 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        " iteration      407/  300000 | consumed samples:       208384 | lm loss: 2.611094E+00 |",
        "Generating:  58%|██████████▉        | 187/320 [06:41<04:45,  2.15s/it]",
    ],
)
def test_ordinary_lines_match_no_rule(line: str) -> None:
    assert first_rule(line) is None


def test_prefilter_keys_hold_no_digits_so_templates_can_be_cached() -> None:
    assert not any(ch.isdigit() or ch == "#" for k in PREFILTER_KEYS for ch in k)
    a, b = "step 12 loss 0.0312 CUDA out of memory", "step 13 loss 0.1187 CUDA out of memory"
    assert template(a) == template(b) and prefilter(a) == prefilter(b) is True


@pytest.mark.parametrize(
    ("raw", "clean", "rank", "pid"),
    [
        (
            "\x1b[36m(FSDPPolicyWorkerBase pid=959049)\x1b[0m [rank3]: boom\n",
            "(FSDPPolicyWorkerBase pid=959049) [rank3]: boom",
            3,
            959049,
        ),
        (
            "[36m(FSDPPolicyWorkerBase pid=1402277)[0m frame #1: x\n",
            "(FSDPPolicyWorkerBase pid=1402277) frame #1: x",
            None,
            1402277,
        ),
        ("[rank5]:[E1021 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 5] Watchdog", None, 5, None),
        ("[E ProcessGroupNCCL.cpp:737] [Rank 2] Watchdog caught", None, 2, None),
        ("DTensorPolicyWorkerV2[rank=6]: offload done", None, 6, None),
        (
            "(raylet) node_manager.cc:3069: killed [repeated 3x across cluster]\n",
            "(raylet) node_manager.cc:3069: killed",
            None,
            None,
        ),
        ("bar 10%\rbar 20%\rRuntimeError: x\r\n", "RuntimeError: x", None, None),
    ],
)
def test_line_cleaning_ranks_and_pids(raw: str, clean: str | None, rank: int | None, pid: int | None) -> None:
    cleaned = T.clean(raw)
    if clean is not None:
        assert cleaned == clean
    assert T.rank_of(cleaned) == rank
    assert T.ray_pid(cleaned) == pid


@pytest.mark.parametrize(
    ("phase", "words"),
    [
        ("policy_train", ["trainer.micro_train_batch_size_per_gpu", "trainer.policy.fsdp_config.cpu_offload=true"]),
        ("critic_train", ["trainer.critic.fsdp_config.cpu_offload=true"]),
        (
            "fwd_logprobs_values_reward",
            ["trainer.micro_forward_batch_size_per_gpu", "trainer.ref.fsdp_config.cpu_offload=true"],
        ),
        ("generate", ["generator.max_num_seqs"]),
        ("sync_weights", ["generator.gpu_memory_utilization", "syncing weights"]),
        ("save_checkpoints", ["trainer.ckpt_interval"]),
        (None, ["micro-batch sizes"]),
    ],
)
def test_oom_advice_follows_the_phase(phase: str | None, words: list[str]) -> None:
    text = advise(AdviceContext(F.OOM, subtype="cuda_oom", phase=phase))
    for w in words:
        assert w in text


def test_every_class_has_advice() -> None:
    for cls in F:
        text = advise(AdviceContext(cls))
        assert (text == "") == (cls is F.OK)
        assert "\n" not in text


@pytest.mark.parametrize(
    ("line", "op", "seq"),
    [
        # torch 1.x, before sequence numbers were printed
        (
            "[E ProcessGroupNCCL.cpp:566] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE, "
            "Timeout(ms)=1800000) ran for 1806427 milliseconds before timing out.",
            "ALLREDUCE",
            None,
        ),
        # torch 1.x blocking wait
        (
            "[E ProcessGroupNCCL.cpp:587] [Rank 0] Caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
            "Timeout(ms)=60000) ran for 60105 milliseconds before timing out.",
            "ALLREDUCE",
            1,
        ),
        # torch 2.2-2.3: [PG n Rank r]
        (
            "[rank4]:[E ProcessGroupNCCL.cpp:523] [PG 0 Rank 4] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88, "
            "OpType=_ALLGATHER_BASE, NumelIn=1024, NumelOut=8192, Timeout(ms)=600000) ran for 600054 milliseconds before timing out.",
            "_ALLGATHER_BASE",
            88,
        ),
        # torch 2.4+: [PG ID n PG GUID g(desc) Rank r]
        (
            "[rank3]:[E1021 10:11:12.345678 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 3] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=19962, OpType=_ALLGATHER_BASE, NumelIn=68125120, NumelOut=545000960, "
            "Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",
            "_ALLGATHER_BASE",
            19962,
        ),
        # blocking wait in torch 2.x
        (
            "[rank0]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 0] Work WorkNCCL(SeqNum=7, OpType=BROADCAST, NumelIn=12, "
            "NumelOut=12, Timeout(ms)=60000) timed out in blocking wait (TORCH_NCCL_BLOCKING_WAIT=1).",
            "BROADCAST",
            7,
        ),
    ],
)
def test_watchdog_lines_across_pytorch_versions(line: str, op: str, seq: int | None) -> None:
    from nccl_tune.diagnose.verdict import classify_log

    assert first_rule(line) == "nccl_watchdog_timeout"
    v = classify_log([line + "\n"], signal_name="SIGABRT")
    assert v.failure_class is F.COLLECTIVE_TIMEOUT
    assert f"in {op}" in v.advice
    assert (f"(SeqNum {seq})" in v.advice) == (seq is not None)
    assert str(v.evidence[0]).startswith("1: ")


@pytest.mark.parametrize(
    "line",
    [
        # Ray's memory monitor, when the head of its message was cut (Ray Jobs truncates what it shows)
        "(PolicyActor pid=4410) Refer to the documentation on how to address the out of memory issue: "
        "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning more memory on this node",
        "Memory on the node (IP: 10.0.0.7, ID: 5f3a) where the task (actor ID: 9c1e, name=PolicyActor.__init__, pid=4410, "
        "memory used=31.2GB) was running was 480.1GB / 503.6GB (0.953), which exceeds the memory usage threshold of 0.95.",
    ],
)
def test_ray_memory_monitor_lines_without_its_first_sentence_are_host_oom(line: str) -> None:
    assert first_rule(line) == "ray_memory_monitor"


def test_a_ray_job_that_failed_is_a_crash_even_when_its_log_ends_in_a_progress_bar() -> None:
    from nccl_tune.diagnose.verdict import classify_log

    line = (
        "2026-03-02 10:11:12,345\tINFO cli.py:83 -- Status message: Job entrypoint command failed with exit code 1, "
        "last available logs (truncated to 20,000 chars):"
    )
    assert first_rule(line) == "launcher_exit"
    lines = [
        line + "\n",
        "Episode [1/100]:   7%|▋         | 11/147 [3:34:08<44:07:37, 1168.07s/it, policy_loss=-0.1]\n",
    ]
    assert classify_log(lines).failure_class is F.CRASH


WRAPPED_HEAD = (
    "[rank{r}]:[E424 01:11:21.160832730 ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog caught collective "
    "operation timeout: "
)
WRAPPED_WORK = (
    "WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=112, NumelOut=112, Timeout(ms)=1800000) ran for 1800010 "
    "milliseconds before timing out."
)


def wrapped(r: int, cut: int, seq: int = 4, op: str = "BROADCAST", rows: int = 2) -> list[str]:
    """Rank ``r``'s watchdog line as a terminal shows it: cut ``cut`` characters into its work, the rest
    on the next row (or the next ``rows - 1`` rows)."""
    head = WRAPPED_HEAD.format(r=r)
    text = head + WRAPPED_WORK.format(seq=seq, op=op)
    at = len(head) + cut
    step = max(1, (len(text) - at) // (rows - 1))
    return [text[:at] + "\n"] + [text[i : i + step] + "\n" for i in range(at, len(text), step)]


TORCHRUN_FAILED = (
    "E0424 01:17:26.952000 521279 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) "
    "local_rank: 6 (pid: 541332) of binary: /usr/bin/python3\n"
)


def test_watchdog_lines_a_terminal_wrapped_are_read_whole() -> None:
    """Each rank's watchdog line cut at a different place (inside its work, in or right before its
    ``WorkNCCL``, across three rows): joined with the rows after it, it names the collective and its sequence number; the
    torchrun summary that follows is their consequence."""
    from nccl_tune.diagnose.verdict import classify_log

    lines = wrapped(1, 60) + wrapped(2, 18) + wrapped(3, 3) + wrapped(5, 0) + wrapped(6, 30, rows=3) + [TORCHRUN_FAILED]
    assert first_rule(lines[2]) == "nccl_watchdog_timeout"
    v = classify_log(lines, exit_code=1)
    assert v.failure_class is F.COLLECTIVE_TIMEOUT, v
    assert "BROADCAST (SeqNum 4)" in v.advice


def test_wrapped_watchdog_lines_that_name_different_collectives_are_a_mismatch() -> None:
    from nccl_tune.diagnose.verdict import classify_log

    lines = wrapped(0, 25) + wrapped(1, 40) + wrapped(2, 25, op="ALLREDUCE") + wrapped(3, 12)
    v = classify_log(lines, exit_code=1)
    assert (v.failure_class, v.rank) == (F.COLLECTIVE_MISMATCH, 2), v


@pytest.mark.parametrize(
    "after",
    [
        # another rank's whole line right after the cut one (ranks' output interleaved)
        WRAPPED_HEAD.format(r=2) + WRAPPED_WORK.format(seq=4, op="BROADCAST"),
        # the rest of a work, with more text after its end
        "pe=BROADCAST, NumelIn=112, NumelOut=112, Timeout(ms)=1800000) ran for 1800010 milliseconds before timing out. [rank3]:",
        # a line that is not the rest of a work
        "[rank1]:[E424 01:11:21.200000000 ProcessGroupNCCL.cpp:1595] [PG 0 Rank 1] Timeout at NCCL work: 4, last enqueued NCCL work: 4",
    ],
)
def test_a_wrapped_watchdog_line_is_joined_only_with_its_own_rest(after: str) -> None:
    """Nothing but the rest of the work, up to the end of the message and of a line, is joined: a cut
    line followed by anything else keeps its fields unread (they would read as a different collective)."""
    from nccl_tune.diagnose.verdict import classify_log

    cut = wrapped(1, 18, op="ALLREDUCE")[0]  # rank 1 ran ALLREDUCE: its line says so only after the cut
    lines = [cut, after + "\n"] + wrapped(0, 200) + wrapped(3, 200)
    v = classify_log(lines, exit_code=1)
    assert v.failure_class is F.COLLECTIVE_TIMEOUT, v
    assert "BROADCAST (SeqNum 4)" in v.advice


def test_pytorch_2_4_s_timeout_line_beside_the_watchdog_s_is_no_mismatch() -> None:
    """ "Timeout at NCCL work: N" names the work the watchdog line names, without its collective: not a
    second collective at that sequence number; a rank that names an earlier work is the one behind."""
    from nccl_tune.diagnose.verdict import classify_log

    both = [
        f"[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
        "OpType=_ALLGATHER_BASE, NumelIn=1024, NumelOut=16384, Timeout(ms)=600000) ran for 600029 milliseconds before "
        f"timing out.\n[rank{r}]:[E ProcessGroupNCCL.cpp:1540] [PG 0 Rank {r}] Timeout at NCCL work: 7, last enqueued NCCL "
        "work: 8, last completed NCCL work: 6.\n"
        for r in (0, 1)
    ]
    v = classify_log(both)
    assert v.failure_class is F.COLLECTIVE_TIMEOUT and "_ALLGATHER_BASE (SeqNum 7)" in v.advice, v
    behind = classify_log(
        both
        + [
            "[rank2]:[E ProcessGroupNCCL.cpp:1540] [PG 0 Rank 2] Timeout at NCCL work: 5, last "
            "enqueued NCCL work: 5, last completed NCCL work: 4.\n"
        ]
    )
    assert behind.failure_class is F.COLLECTIVE_MISMATCH and behind.rank == 2, behind
    assert "rank 2 at SeqNum 5;" in behind.advice or "rank 2 at SeqNum 5)" in behind.advice, behind.advice


def test_a_rank_whose_watchdog_reported_the_exception_only_is_not_the_one_behind() -> None:
    """Ranks 0 and 4 print the watchdog's time-out line, rank 3 only the line saying its watchdog
    caught an error or a time-out: rank 3 reported one too, so no rank is named as behind."""
    from nccl_tune.diagnose.verdict import classify_log

    def timeout(r: int) -> str:
        return (
            f"[rank{r}]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=4661, NumelOut=4661, Timeout(ms)=600000) ran for "
            "600060 milliseconds before timing out.\n"
        )

    caught = (
        "[rank3]:[E321 02:07:08.465224069 ProcessGroupNCCL.cpp:1664] [PG 1 Rank 3] Exception (either an error or "
        "timeout) detected by watchdog at work: 1580, last enqueued NCCL work: 1582, last completed NCCL work: 1579.\n"
    )
    v = classify_log([timeout(0), timeout(4), caught], signal_name="SIGABRT")
    assert (v.failure_class, v.rank) == (F.COLLECTIVE_TIMEOUT, None), v
    assert "ALLREDUCE (SeqNum 1580)" in v.advice
    # without rank 3's line, rank 3 is the one silent rank of the three seen
    ranks_seen = [timeout(0), timeout(4), "[rank3]:[I321 02:07:01.000 ProcessGroupNCCL.cpp:900] step 1580 begins\n"]
    assert classify_log(ranks_seen, signal_name="SIGABRT").rank == 3


@pytest.mark.parametrize(
    ("line", "rule", "cls"),
    [
        # vLLM's sleep-mode allocator capitalises CUDA's error
        (
            "(LLMRayActor pid=3478) CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62",
            "cuda_oom",
            F.OOM,
        ),
        # NCCL's own device allocation
        ("node-3:4410:4502 [2] include/alloc.h:125 NCCL WARN Failed to CUDA calloc 67108864 bytes", "cuda_oom", F.OOM),
        # a CUDA core dump (CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1) names the exception, not CUDA's error text
        (
            "(AsyncVLLMInferenceEngine pid=1277) [08:52:36.868726] coredump: Detected an exception of type "
            "CUDBG_EXCEPTION_WARP_ILLEGAL_ADDRESS (14)",
            "cuda_illegal_access",
            F.CUDA_ERROR,
        ),
        (
            "[08:52:36.868726] coredump: Detected an exception of type CUDBG_EXCEPTION_WARP_ASSERT (9)",
            "cuda_error",
            F.CUDA_ERROR,
        ),
    ],
)
def test_other_wordings_of_device_failures(line: str, rule: str, cls: F) -> None:
    from nccl_tune.diagnose.verdict import classify_log

    assert first_rule(line) == rule
    assert classify_log([line + "\n"]).failure_class is cls


def test_torch_1_s_communicator_aborted_by_a_watchdog_time_out_is_the_time_out() -> None:
    """PyTorch 1.x's exception wraps the watchdog's line; it often comes before the other ranks' own."""
    from nccl_tune.diagnose.verdict import classify_log

    aborted = (
        "RuntimeError: NCCL communicator was aborted on rank 2.  Original reason for failure was: [Rank 2] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=4410, OpType=ALLREDUCE, Timeout(ms)=900000) ran for "
        "900212 milliseconds before timing out."
    )
    other = (
        "[E ProcessGroupNCCL.cpp:737] [Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4410, "
        "OpType=ALLREDUCE, Timeout(ms)=900000) ran for 900305 milliseconds before timing out."
    )
    assert first_rule(aborted) == "nccl_watchdog_timeout"
    v = classify_log([aborted + "\n", other + "\n"], signal_name="SIGABRT")
    assert v.failure_class is F.COLLECTIVE_TIMEOUT and "ALLREDUCE (SeqNum 4410)" in v.advice
    # an abort for an NCCL error is still one
    error = (
        "RuntimeError: NCCL communicator was aborted on rank 2.  Original reason for failure was: NCCL error: "
        "unhandled system error, NCCL version 2.10.3"
    )
    assert classify_log([error + "\n"]).failure_class is F.NCCL_ERROR


def test_nccl_s_capitalised_error_wording_is_an_nccl_error() -> None:
    from nccl_tune.diagnose.verdict import classify_log

    line = "RuntimeError: NCCL Error 5: invalid usage (run with NCCL_DEBUG=WARN for details)"
    assert first_rule(line) == "nccl_error"
    assert classify_log([line + "\n"]).failure_class is F.NCCL_ERROR


def test_ray_s_worker_death_that_lists_sigsegv_among_its_possible_causes_is_no_segfault() -> None:
    from nccl_tune.diagnose.verdict import classify_log

    line = (
        "(raylet) A worker died or was killed while executing a task by an unexpected system error. Worker PID: 70412 "
        "Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. "
        "Some common causes include: (1) the process was killed by the OOM killer due to high memory usage, (2) ray "
        "stop --force was called, or (3) the worker crashed unexpectedly due to SIGSEGV or another unexpected error."
    )
    assert first_rule(line) == "ray_actor_died"
    v = classify_log([line + "\n"])
    assert v.failure_class is F.CRASH and v.cause != "segfault"
    # a real one still is
    assert first_rule("(PolicyWorker pid=70412) *** SIGSEGV received at time=1732480000 on cpu 3 ***") == "segfault"


@pytest.mark.parametrize(
    ("lines", "cls", "subtype", "advice"),
    [
        # NCCL's shared-memory warning alone, and followed by NCCL's own trace line
        (
            [
                "h1:812:830 [0] include/shm.h:28 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-aB12 "
                "(size 5767488)",
                "h1:812:830 [0] NCCL INFO transport/shm.cc:552 -> 2",
            ],
            F.NCCL_ERROR,
            "shm",
            "--shm-size",
        ),
        # PyTorch's generic error, then the specific line its "Last error:" repeats
        (
            [
                "[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system "
                "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
                "[rank1]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. ",
                "[rank1]: Last error:",
                "[rank1]: Error while creating shared memory segment /dev/shm/nccl-Zz81 (size 9637888)",
            ],
            F.NCCL_ERROR,
            "shm",
            "--shm-size",
        ),
        (
            [
                "h1:812:830 [2] init.cc:720 NCCL WARN Duplicate GPU detected : rank 2 and rank 0 both on CUDA device 4b000",
                "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, invalid usage, NCCL version 2.18.1",
            ],
            F.NCCL_ERROR,
            "duplicate_gpu",
            "CUDA_VISIBLE_DEVICES",
        ),
        (
            ["h1:812:830 [3] transport/p2p.cc:275 NCCL WARN Cuda failure 'invalid argument'"],
            F.CUDA_ERROR,
            "nccl_cuda",
            "",
        ),
        # NCCL's own allocation failing stays an OOM
        (["h1:812:830 [3] transport/p2p.cc:275 NCCL WARN Cuda failure 'out of memory'"], F.OOM, None, ""),
        # bash on macOS reports a SIGKILL as "Killed: 9"
        (
            ["./run.sh: line 323: 23001 Killed: 9                 python train.py", "zsh: terminated  ./run.sh"],
            F.CRASH,
            None,
            "",
        ),
    ],
)
def test_nccl_s_specific_failures_and_other_wordings(
    lines: list[str], cls: F, subtype: str | None, advice: str
) -> None:
    from nccl_tune.diagnose.verdict import classify_log

    v = classify_log([line + "\n" for line in lines])
    assert v.failure_class is cls, v
    if subtype is not None:
        assert v.cause.subtype == subtype
    assert advice in v.advice


@pytest.mark.parametrize(
    ("lines", "cls", "rule", "advice"),
    [
        (
            ["slurmstepd: error: *** JOB 88123 ON gpu-node-17 CANCELLED AT 2026-11-20T04:11:52 DUE TO TIME LIMIT ***"],
            F.CRASH,
            "slurm_task_end",
            "time limit",
        ),
        (
            ["Epoch 3: 41%|####      | 410/1000", "srun: error: gpu-node-17: task 0: Terminated"],
            F.CRASH,
            "slurm_task_end",
            "sacct",
        ),
        # the run's own error first: Slurm's lines after it are its consequence
        (
            [
                "[rank0]: RuntimeError: stack expects each tensor to be equal size, but got [3, 224] at entry 0",
                "srun: error: gpu-node-17: task 0: Exited with exit code 1",
                "srun: error: gpu-node-17: task 1: Terminated",
            ],
            F.CRASH,
            "exception",
            "stack expects",
        ),
        (["srun: error: gpu-node-17: task 3: Out Of Memory"], F.HOST_OOM, "slurm_task_oom", ""),
        # torchrun's agent sent a signal from outside, and nothing of the run's own before it
        (
            [
                "Epoch 1:  12%|#1        | 30/250 [03:10<23:14,  6.34s/it]",
                "W1102 10:23:01.000000 140 torch/distributed/elastic/agent/server/api.py:719] Received Signals.SIGTERM death "
                "signal, shutting down workers",
                "torch.distributed.elastic.multiprocessing.api.SignalException: Process 140 got signal: 15",
            ],
            F.CRASH,
            "torchrun_signalled",
            "torchrun was sent SIGTERM from outside",
        ),
        # torch 2.13's wording (measured: a SIGTERM sent to torchrun from outside), the workers' teardown after it
        (
            [
                "W1128 17:20:15.764000 3466 torch/distributed/elastic/agent/server/api.py:753] Received 15 death signal, "
                "shutting down workers",
                "W1128 17:20:15.765000 3466 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 3478 closing "
                "signal SIGTERM",
                "torch.distributed.elastic.multiprocessing.api.SignalException: Process 3466 got signal: 15",
            ],
            F.CRASH,
            "torchrun_signalled",
            "torchrun was sent SIGTERM from outside",
        ),
        (
            ["torch.distributed.elastic.multiprocessing.api.SignalException: Process 140 got signal: 1"],
            F.CRASH,
            "torchrun_signalled",
            "torchrun was sent SIGHUP from outside",
        ),
        # the run's own error first: the signal after it is its consequence
        (
            [
                "[rank0]: ValueError: labels must be shorter than the prompt",
                "W1102 10:23:01.000000 140 torch/distributed/elastic/agent/server/api.py:719] Received Signals.SIGTERM death "
                "signal, shutting down workers",
            ],
            F.CRASH,
            "exception",
            "labels must be shorter",
        ),
        # Python's bare Exception
        (
            [
                "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
                "  3%|3         | 31/1000 [01:02<32:10,  1.99s/it]",
            ],
            F.CRASH,
            "exception",
            "Exception",
        ),
        # older NCCL's socket transport, before PyTorch's generic line
        (
            [
                "node-1:4410:4461 [0] include/socket.h:423 NCCL WARN Call to recv failed : Connection reset by peer",
                "RuntimeError: Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels",
            ],
            F.NCCL_ERROR,
            "nccl_socket_transport",
            "transport",
        ),
        # at the communicator's set-up (no step finished): a start-up failure
        (
            ["node-1:4410:4461 [0] NCCL WARN Call to ibv_modify_qp failed with error Network is unreachable"],
            F.INIT_FAILURE,
            "ib_verbs_call",
            "NCCL_IB_GID_INDEX",
        ),
        # a surviving rank's closed socket printed before the OOM that closed it
        (
            [
                "node-1:4410:4461 [0] misc/socket.cc:538 NCCL WARN socketProgress: Connection closed by remote peer node-1<4512>",
                "node-1:4413:4470 [3] transport/p2p.cc:275 NCCL WARN Cuda failure 'out of memory'",
            ],
            F.OOM,
            "cuda_oom",
            "",
        ),
    ],
)
def test_scheduler_lines_and_older_wordings(lines: list[str], cls: F, rule: str, advice: str) -> None:
    from nccl_tune.diagnose.verdict import classify_log

    v = classify_log([line + "\n" for line in lines])
    assert v.failure_class is cls and v.cause.rule == rule, v
    assert advice in v.advice or advice in " ".join(str(e) for e in v.evidence)


@pytest.mark.parametrize(
    ("lines", "cls"),
    [
        # a warning's "failed" at the end of a log says what it retries, not that the run died (and, with no
        # end and no exit status, the log is no evidence either way)
        (
            [
                "Epoch 1: 12%|#2        | 120/1000",
                "[W1120 04:11:52.000000 socket.cpp:601] [c10d] The client socket has "
                "failed to connect to [node-3]:29500 (errno: 22 - Invalid argument).",
            ],
            F.NO_END,
        ),
        (["step 40: reward=0.31", "WARNING:agent.sandbox:tool call attempt 1/3 failed: HTTP 500"], F.NO_END),
        (["step 40: reward=0.31", "2026-11-20 04:11:52 | WARNING | rollout: request failed, retrying"], F.NO_END),
        # ... unless it names a fatal end
        (["step 40: reward=0.31", "WARNING: worker 3 exited with exit code 1"], F.CRASH),
        # a log that stops inside a traceback, at its position markers (Python 3.11+)
        (
            [
                "Traceback (most recent call last):",
                '  File "/app/train.py", line 41, in <module>',
                "    trainer.fit()",
                "    ^^^^^^^^^^^^^",
            ],
            F.CRASH,
        ),
    ],
)
def test_how_a_log_ends(lines: list[str], cls: F) -> None:
    from nccl_tune.diagnose.verdict import classify_log

    assert classify_log([line + "\n" for line in lines]).failure_class is cls


def test_a_graders_logged_exception_is_handled_not_a_crash() -> None:
    """math_verify catches a comparison's exception, logs it with its traceback and scores 0."""
    from nccl_tune.diagnose.verdict import classify_log

    block = [
        "(RewardWorker pid=812) ERROR:math_verify.grader:Error during comparison",
        "(RewardWorker pid=812) Traceback (most recent call last):",
        '(RewardWorker pid=812)   File "/usr/lib/python3/site-packages/math_verify/grader.py", line 230, in verify',
        "(RewardWorker pid=812)     return compare(gold, target)",
        "(RewardWorker pid=812) NotImplementedError: multiple generators [x, sin(x)]",
    ]
    steps = ["(TaskRunner pid=700) step 12: reward_mean=0.41", "(TaskRunner pid=700) step 13: reward_mean=0.44"]
    assert classify_log([line + "\n" for line in steps[:1] + block + steps[1:]]).failure_class is F.NO_END
    # a real failure after it is still read
    oom = "(TaskRunner pid=700) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert classify_log([line + "\n" for line in block + [oom]]).failure_class is F.OOM


@pytest.mark.parametrize(
    ("line", "subtype"),
    [
        (
            "(LLMRayActor pid=5121) Failed to update parameter online: shape mismatch. The full weights of the ModelRunner "
            "are partially updated. Please discard the whole weights.",
            "weight_sync",
        ),
        ("[2026-11-20 04:11:52 TP0] Scheduler hit an exception: Traceback (most recent call last):", "engine"),
        (
            "ERROR 11-20 04:11:52 async_llm_engine.py:531] Engine iteration timed out. This should never happen!",
            "engine_stall",
        ),
        (
            "ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task, "
            "ray::LLMRayActor.__init__() (pid=5121, ip=10.0.0.7)",
            "actor_died",
        ),
    ],
)
def test_inference_engine_failures_inside_an_rl_loop(line: str, subtype: str) -> None:
    from nccl_tune.diagnose.verdict import classify_log

    v = classify_log([line + "\n", "(TaskRunner pid=700) step 13: reward_mean=0.44\n"])
    assert v.failure_class is F.CRASH and v.cause.subtype == subtype, v


@pytest.mark.parametrize(
    ("line", "cls", "subtype", "advice"),
    [
        (
            "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=383 error=48 : no kernel image is available "
            "for execution on the device",
            F.CUDA_ERROR,
            "cuda",
            "",
        ),
        (
            "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCCachingAllocator.cpp:510",
            F.OOM,
            "cuda_oom",
            "",
        ),
        # a DataLoader worker killed: a SIGKILL while loading data, the OOM killer's most common victim
        (
            "RuntimeError: DataLoader worker (pid 4410) is killed by signal: Killed. ",
            F.HOST_OOM,
            "sigkill_in_heavy_phase",
            "lower the data workers",
        ),
        ("[rank0]: RuntimeError: CUDA driver error: out of memory", F.OOM, "cuda_oom", "Out of GPU memory"),
        (
            "ImportError: /usr/local/lib/python3.12/site-packages/flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so: "
            "undefined symbol: _ZN3c104cuda9SetDeviceEi",
            F.CRASH,
            "build_mismatch",
            "flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so was built against another torch",
        ),
        (
            "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file on the Hub "
            "and we cannot find the requested files in the local cache.",
            F.CRASH,
            "model_fetch",
            "HF_HUB_OFFLINE=1",
        ),
        (
            "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable",
            F.CUDA_ERROR,
            "gpu_busy",
            "exclusive compute mode",
        ),
        (
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
            F.CUDA_ERROR,
            "no_kernel_image",
            "get_arch_list",
        ),
        (
            "ray.exceptions.NodeDiedError: Task failed due to the node (where this task was running) dying.",
            F.CRASH,
            "node_died",
            "raylet",
        ),
        (
            "[rank0]:[E1102 10:22:31.000000 ProcessGroupNCCL.cpp:1194] [PG ID 0 PG GUID 0(default_pg) Rank 0] Timeout at NCCL "
            "work: 25, last enqueued NCCL work: 25, last completed NCCL work: 24.",
            F.COLLECTIVE_TIMEOUT,
            "nccl_watchdog",
            "until the timeout",
        ),
        (
            "node-1:2918:4483 [4] transport/nvls.cc:245 NCCL WARN Cuda failure 'initialization error'",
            F.CUDA_ERROR,
            "nccl_cuda",
            "NCCL_NVLS_ENABLE=0",
        ),
        (
            "node-1:95209:95228 [0] init.cc:416 NCCL WARN Cuda failure 'operation not supported'",
            F.CUDA_ERROR,
            "nccl_cuda",
            "NCCL hit a CUDA error",
        ),
        (
            "[rank2]: torch.distributed.DistBackendError: [2] is setting up NCCL communicator and retrieving ncclUniqueId "
            "from [0] via c10d key-value store by key '0', but store->get('0') got error: Connection reset by peer",
            F.INIT_FAILURE,
            "nccl_id_store",
            "rank 0 (or the store's host) went away first",
        ),
        (
            "[rank3]: torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId "
            "from [0] via c10d key-value store by key '0:1', but store->get('0:1') got error: Socket Timeout",
            F.INIT_FAILURE,
            "nccl_id_store",
            "rank 0 is alive but late",
        ),
        (
            "RuntimeError: DataLoader worker (pid 4410) is killed by signal: Bus error. It is possible that dataloader's "
            "workers are out of shared memory.",
            F.CRASH,
            "dataloader_shm",
            "--shm-size",
        ),
        (
            "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer "
            "[10.0.0.5]:23456",
            F.CRASH,
            "peer_gone",
            "its own log has the first error",
        ),
        (
            "RuntimeError: Current CUDA Device does not support bfloat16. Please switch dtype to float16.",
            F.CONFIG_ERROR,
            "no_bf16",
            "generator.inference_engine.model_dtype=float16",
        ),
        (
            "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory",
            F.CRASH,
            "corrupt_checkpoint",
            "fetch it again",
        ),
        ("_pickle.UnpicklingError: invalid load key, 'v'.", F.CRASH, "corrupt_checkpoint", "Git LFS pointer"),
        (
            "OSError: [Errno 28] No space left on device: '/ckpt/global_step_400/optim.pt'",
            F.CRASH,
            "disk_full",
            "larger volume",
        ),
        # NCCL's shared-memory segment on a full /dev/shm stays NCCL's
        (
            "node-1:4410:4461 [0] include/shm.h:48 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x "
            "(size 9637888): No space left on device",
            F.NCCL_ERROR,
            "shm",
            "--shm-size",
        ),
    ],
)
def test_older_cuda_wordings_shared_memory_and_full_disks(line: str, cls: F, subtype: str, advice: str) -> None:
    from nccl_tune.diagnose.verdict import classify_log

    v = classify_log([line + "\n"])
    assert v.failure_class is cls and v.cause.subtype == subtype, v
    assert advice in v.advice


def test_rules_of_one_class_and_subtype_carry_one_advice() -> None:
    one = Rule("one", F.CRASH, Kind.CRASH, ("x",), None, "same", advice="restart it")
    other = Rule("other", F.CRASH, Kind.CRASH, ("y",), None, "same", advice="replace it")
    with pytest.raises(ValueError, match="rule other: the rules of crash/same carry different advice"):
        advice_by_cause((one, other))
    elsewhere = replace(other, failure_class=F.NCCL_ERROR)  # one subtype in two classes: two causes
    assert advice_by_cause((one, elsewhere)) == {(F.CRASH, "same"): "restart it", (F.NCCL_ERROR, "same"): "replace it"}
