"""Memory that ran out: host RAM (Ray's memory monitor, the kernel's OOM killer, Slurm, failed
allocations) and device memory (vLLM's KV-cache budget and start-up checks, CUDA's out of memory)."""

from __future__ import annotations

import re
from typing import Any

from nccl_tune.diagnose.rules.config import MID_RUN
from nccl_tune.diagnose.rules.cuda import THC
from nccl_tune.diagnose.rules.rule import Kind, Rule, rx
from nccl_tune.diagnose.wording import AdviceContext, host_memory, oom_by_phase
from nccl_tune.failure import FailureClass as F

_OOM_RESERVED = re.compile(r"(?P<v>[\d.]+) (?P<u>[KMG])i?B is reserved by PyTorch but unallocated")

_UTIL = re.compile(r"gpu_memory_utilization=(?P<util>[\d.]+)")


def _reserved_unallocated(msg: str, det: dict[str, Any]) -> None:
    m = _OOM_RESERVED.search(msg)
    if m:
        scale = {"K": 1 / 1024**2, "M": 1 / 1024, "G": 1.0}[m.group("u")]
        det["reserved_unallocated_gib"] = float(m.group("v")) * scale


def _vllm_util(msg: str, det: dict[str, Any]) -> None:
    m = _UTIL.search(msg)
    if m:
        det["util"] = m.group("util")


def _vllm_kv_budget(ctx: AdviceContext) -> str:
    util = ctx.details.get("util")
    now = f" (now {util})" if util else ""
    return (
        f"vLLM's share of the GPU, generator.gpu_memory_utilization{now}, leaves no room for the KV cache after "
        "the weights: raise it, or lower generator.max_input_length / generator.sampling_params.max_generate_length; "
        "if training then runs out, turn on trainer.policy.fsdp_config.cpu_offload=true"
    )


def _vllm_free_memory(ctx: AdviceContext) -> str:
    d = ctx.details
    free, total, util = d.get("free_gib"), d.get("total_gib"), d.get("util")
    frac = ""
    try:
        frac = f" (below {float(free) / float(total):.2f})"
    except (TypeError, ValueError, ZeroDivisionError):
        pass
    return (
        f"vLLM wanted {util} of the GPU but only {free}/{total} GiB was free at start-up: lower "
        f"generator.gpu_memory_utilization{frac}, or free the GPU (a leftover process, or the colocated trainer "
        "not offloaded: `nvidia-smi`, `nccl-tune doctor`)"
    )


_KERNEL_OOM = host_memory(
    "the kernel's OOM killer killed a process (a cgroup's: Slurm's job or step memory limit, a container's, "
    "Kubernetes' OOMKilled or eviction for memory)"
)


def _engine_args(ctx: AdviceContext) -> str:
    arg = ctx.details.get("arg")
    what = f" ({arg})" if arg else ""
    return (
        f"vLLM refused its engine arguments{what}: fix the value the evidence names (the generator/engine settings "
        "in the search space or --set), e.g. max_num_batched_tokens at least max_model_len, a tensor parallel size "
        "that divides the attention heads, max_model_len within the model's limit"
    )


HOST: tuple[Rule, ...] = (
    Rule(
        "ray_memory_monitor",
        F.HOST_OOM,
        Kind.ROOT,
        (
            "killed due to memory pressure",
            "running low on memory",
            "NODE_OUT_OF_MEMORY",
            "ray.exceptions.OutOfMemoryError",
            "exceeds the memory usage threshold",
            "ray-oom-prevention",
        ),
        None,
        "ray_memory_monitor",
        advice=host_memory("Ray's memory monitor killed a worker (host RAM above RAY_memory_usage_threshold)"),
    ),
    Rule(
        "kernel_oom_killer",
        F.HOST_OOM,
        Kind.ROOT,
        (
            "Out of memory: Killed process",
            "invoked oom-killer",
            "oom-kill:",
            "oom_reaper",
            "Memory cgroup out of memory",
            "oom_kill event",
            "oom-kill event",
            "OOMKilled",
            "xceeded job memory limit",
            "xceeded step memory limit",
            "exceeded memory limit",
            "has been killed by the OOM killer",
            "low on resource: memory",
        ),
        None,
        "kernel_oom",
        advice=_KERNEL_OOM,
    ),
    Rule(
        "slurm_task_oom",
        F.HOST_OOM,
        Kind.ROOT,
        (": Out Of Memory",),
        rx(r"srun: error: \S+: tasks? [\d,-]+: Out Of Memory"),
        "kernel_oom",
        advice=_KERNEL_OOM,
    ),
    Rule(
        "host_alloc_failed",
        F.HOST_OOM,
        Kind.ROOT,
        ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "can't allocate memory"),
        rx(r"(?<![A-Za-z])MemoryError\b|std::bad_alloc|Cannot allocate memory|DefaultCPUAllocator: can't allocate"),
        "host_alloc",
        exclude=("OutOfMemoryError",),
        advice=host_memory("a host (CPU) allocation failed"),
    ),
)
"""Host memory (tried before device memory: Ray's ``OutOfMemoryError`` is host RAM)."""

DEVICE: tuple[Rule, ...] = (
    Rule(
        "vllm_kv_budget",
        F.OOM,
        Kind.ROOT,
        (
            "No available memory for the cache blocks",
            "larger than the available KV cache memory",
            "stored in KV cache",
            "kv_cache_size=-",
            "Insufficient memory for KV cache",
        ),
        rx(
            r"No available memory for the cache blocks|larger than the available KV cache memory"
            r"|stored in KV cache|kv_cache_size=-(?P<kv_gib>[\d.]+)GiB|Insufficient memory for KV cache"
        ),
        "vllm_kv_budget",
        details=_vllm_util,
        advice=_vllm_kv_budget,
    ),
    Rule(
        "vllm_free_memory",
        F.OOM,
        Kind.ROOT,
        ("on startup is less than desired GPU memory utilization",),
        rx(
            r"\((?P<free_gib>[\d.]+)/(?P<total_gib>[\d.]+) GiB\) on startup is less than desired GPU memory "
            r"utilization \((?P<util>[\d.]+), (?P<want_gib>[\d.]+) GiB\)"
        ),
        "vllm_free_memory",
        advice=_vllm_free_memory,
    ),
    # a GPU without bfloat16 (compute capability below 8.0: V100, T4), told to run in it (vLLM's "Bfloat16 is
    # only supported on GPUs with compute capability of at least 8.0", torch's "Current CUDA Device does not
    # support bfloat16")
    Rule(
        "no_bf16",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("Error: Bfloat", "Error: Current CUDA Device does not support bfloat"),
        rx(r"Bfloat16 is only supported on GPUs|does not support bfloat16"),
        "no_bf16",
        advice="This GPU has no bfloat16 (compute capability below 8.0: V100, T4) and the run asks for it: run the model in "
        "float16 (SkyRL: generator.inference_engine.model_dtype=float16, generator.model_dtype in the legacy "
        "skyrl_train layout, and the trainer's mixed precision to fp16; vLLM alone: --dtype=half), or move to a "
        "GPU that has it (A100, H100)",
    ),
    # vLLM's Ray executor placed where Ray gives it no GPU: the process that builds the engine (an RL trainer's
    # inference actor, a server on a CPU head node) holds no GPU bundle ("ValueError: Current node has no GPU
    # available. current_node_resource={...}. vLLM engine cannot start without GPU.", before 0.7 "Ray does not
    # allocate any GPUs on the driver node. Consider adjusting the Ray placement group ...")
    Rule(
        "vllm_ray_no_gpu",
        F.INIT_FAILURE,
        Kind.ROOT,
        ("ValueError",),
        rx(r"ValueError: (?:Current node has no GPU available|Ray does not allocate any GPUs on the driver node)"),
        "ray_no_gpu",
        advice="vLLM's Ray executor found no GPU where it runs: the process that builds the engine (the inference actor "
        "or driver) sits on a node, or in a placement-group bundle, without a GPU; give it a GPU bundle on a GPU "
        "node (the trainer's placement/colocation settings for its inference engines; run a server's driver on a "
        "GPU node) and check `ray status` lists the GPUs on every node",
    ),
    Rule(
        "vllm_engine_args",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("ValueError", "TypeError", "Value error,"),
        rx(
            r"(?:ValueError|TypeError|Value error,)[: ].*?\b(?P<arg>max_model_len|max_num_batched_tokens|max_num_seqs"
            r"|tensor parallel size|tensor_parallel_size|pipeline parallel size|pipeline_parallel_size|attention heads"
            r"|gpu_memory_utilization|GPU memory utilization|kv_cache_dtype|block_size|swap_space|quantization"
            r"|max_seq_len_to_capture|max_lora_rank|enforce_eager|data_parallel_size|EngineArgs|SamplingParams|dtype)\b"
        ),
        "engine_args",
        advice=_engine_args,
        once_training=MID_RUN,
    ),
    Rule(
        "cuda_oom",
        F.OOM,
        Kind.ROOT,
        (
            "CUDA out of memory",
            "OutOfMemoryError",
            "CUDA error: out of memory",
            "CUDA Error: out of memory",
            "HIP out of memory",
            "CUBLAS_STATUS_ALLOC_FAILED",
            "'out of memory'",
            "cudaErrorMemoryAllocation",
            "CUDA driver error: out of memory",
            "Failed to CUDA calloc",
            "Failed to CUDA malloc",
        ),
        None,
        "cuda_oom",
        details=_reserved_unallocated,
        advice=oom_by_phase,
    ),
    # PyTorch before 1.5: "THCudaCheck FAIL file=... line=N error=2 : out of memory", "cuda runtime error (2) : ..."
    Rule(
        "thc_cuda_oom",
        F.OOM,
        Kind.ROOT,
        ("error=", "cuda runtime error ("),
        rx(THC + r"out of memory"),
        "cuda_oom",
        advice=oom_by_phase,
    ),
)
"""Device memory: vLLM's start-up checks and refusals (their ``ValueError`` may name memory), then
CUDA's out of memory."""
