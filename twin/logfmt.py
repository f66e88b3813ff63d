"""The lines the twin prints, in the formats of the programs it imitates.

- loguru as SkyRL configures it (``skyrl_train/utils/utils.py``): ``<green>{time:YYYY-MM-DD
  HH:mm:ss.SSS}</green> | <level>{level: <8}</level> | <cyan>{name}</cyan>:<cyan>{function}</cyan>:
  <cyan>{line}</cyan> - <level>{message}</level>``, colourised even without a terminal, INFO in
  bold green;
- Ray's prefix on every line a worker prints, ``(ActorName pid=N)`` in cyan;
- PyTorch's CUDA out-of-memory message and its size formatting (``c10/util`` ``format_size``);
- NCCL's ``WARN`` lines and PyTorch's ``DistBackendError`` text for NCCL errors;
- the NCCL watchdog's timeout line (for the model launcher's evidence: the real node runs NCCL).
"""

from __future__ import annotations

import pprint
import socket
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

RESET = "\x1b[0m"
GREEN = "\x1b[32m"
CYAN = "\x1b[36m"
BOLD = "\x1b[1m"
LEVEL_STYLE = {
    "DEBUG": "\x1b[34m\x1b[1m",
    "INFO": "\x1b[1m\x1b[32m",
    "WARNING": "\x1b[33m\x1b[1m",
    "ERROR": "\x1b[31m\x1b[1m",
}

ENTRYPOINT_ACTOR = "skyrl_entrypoint"
POLICY_ACTOR = "FSDPPolicyWorkerBase"
ENGINE_ACTOR = "AsyncVLLMInferenceEngine"

TRAINER_SITES: Mapping[str, tuple[str, int]] = {
    "init_weight_sync_state": ("train", 178),
    "load_checkpoints": ("train", 183),
    "sync_weights@0": ("train", 187),
    "eval@0": ("train", 192),
    "step": ("train", 206),
    "generate": ("train", 221),
    "postprocess_generator_output": ("train", 242),
    "convert_to_training_input": ("train", 254),
    "number_of_sequences": ("train", 256),
    "fwd_logprobs_values_reward": ("train", 259),
    "compute_advantages_and_returns": ("train", 268),
    "dump_data_batch": ("train", 280),
    "train_critic_and_policy": ("train", 285),
    "save_checkpoints": ("train", 290),
    "save_hf_model": ("train", 296),
    "sync_weights": ("train", 310),
    "status": ("train", 314),
    "eval": ("train", 321),
    "save_checkpoints@end": ("train", 344),
    "save_hf_model@end": ("train", 348),
    "training_done": ("train", 351),
    "policy_train": ("train_critic_and_policy", 1102),
}
"""Function and line of each log call in ``skyrl_train/trainer.py`` (Timer logs with ``depth=1``,
so loguru names the caller)."""


def stamp(when: datetime | None = None) -> str:
    """``YYYY-MM-DD HH:MM:SS.mmm`` as loguru prints ``{time:YYYY-MM-DD HH:mm:ss.SSS}``."""
    when = when or datetime.now()
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d}"


def loguru_line(
    message: str,
    *,
    level: str = "INFO",
    name: str = "skyrl_train.trainer",
    function: str = "train",
    line: int = 0,
    when: datetime | None = None,
    color: bool = True,
) -> str:
    """One loguru record in SkyRL's format (a multi-line message keeps its newlines)."""
    if not color:
        return f"{stamp(when)} | {level:<8} | {name}:{function}:{line} - {message}"
    style = LEVEL_STYLE.get(level, "")
    return (
        f"{GREEN}{stamp(when)}{RESET} | {style}{level:<8}{RESET} | "
        f"{CYAN}{name}{RESET}:{CYAN}{function}{RESET}:{CYAN}{line}{RESET} - {style}{message}{RESET}"
    )


def trainer_line(
    site: str,
    message: str,
    *,
    level: str = "INFO",
    when: datetime | None = None,
    color: bool = True,
    name: str = "skyrl_train.trainer",
    sites: Mapping[str, tuple[str, int]] = TRAINER_SITES,
) -> str:
    """A loguru line from the trainer module ``name`` at the call site named ``site``."""
    function, line = sites.get(site, ("train", 0))
    return loguru_line(message, level=level, name=name, function=function, line=line, when=when, color=color)


def nccl_info_line(gpu: int, pid: int, text: str, host: str | None = None) -> str:
    """NCCL's ``host:pid:tid [dev] NCCL INFO text`` line."""
    host = host or socket.gethostname()
    return f"{host}:{pid}:{pid + 17} [{gpu}] NCCL INFO {text}"


def ray_prefix(actor: str, pid: int, color: bool = True) -> str:
    """Ray's prefix on a line a worker printed: ``(actor pid=N) ``."""
    return f"{CYAN}({actor} pid={pid}){RESET} " if color else f"({actor} pid={pid}) "


def prefixed(actor: str, pid: int, text: str, color: bool = True) -> list[str]:
    """``text`` split into lines, each behind Ray's prefix (as Ray's log monitor forwards them)."""
    head = ray_prefix(actor, pid, color)
    return [head + part for part in text.split("\n")]


def started(phase: str) -> str:
    """SkyRL's Timer line at the start of a phase."""
    return f"Started: '{phase}'"


def finished(phase: str, seconds: float) -> str:
    """SkyRL's Timer line at the end of a phase."""
    return f"Finished: '{phase}', time cost: {seconds:.2f}s"


def memory_line(gpu: int, step: int, peak_gib: float, capacity_gib: float) -> str:
    """A trainer's per-GPU peak memory report, ``memory: 61.20GiB(77.1%)``."""
    return f"rank {gpu} step {step} peak memory: {peak_gib:.2f}GiB({100.0 * peak_gib / capacity_gib:.1f}%)"


def format_size(num_bytes: float) -> str:
    """PyTorch's size formatting in allocator messages (``2.00 GiB``, ``301.44 MiB``)."""
    if num_bytes < 1024:
        return f"{int(num_bytes)} bytes"
    if num_bytes < 1024 * 1024:
        return f"{num_bytes / 1024:.2f} KiB"
    if num_bytes < 1024**3:
        return f"{num_bytes / 1024**2:.2f} MiB"
    return f"{num_bytes / 1024**3:.2f} GiB"


def cuda_oom_message(
    *,
    gpu: int,
    tried_gib: float,
    capacity_gib: float,
    free_gib: float,
    process_gib: float,
    allocated_gib: float,
    reserved_unallocated_gib: float,
    other_processes: Iterable[tuple[int, float]] = (),
) -> str:
    """PyTorch's ``torch.OutOfMemoryError`` text for a failed CUDA allocation."""
    g = 1024**3
    others = "".join(f"Process {pid} has {format_size(gib * g)} memory in use. " for pid, gib in other_processes)
    return (
        f"CUDA out of memory. Tried to allocate {format_size(tried_gib * g)}. GPU {gpu} has a total capacity of "
        f"{format_size(capacity_gib * g)} of which {format_size(free_gib * g)} is free. {others}"
        f"Including non-PyTorch memory, this process has {format_size(process_gib * g)} memory in use. "
        f"Of the allocated memory {format_size(allocated_gib * g)} is allocated by PyTorch, and "
        f"{format_size(reserved_unallocated_gib * g)} is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


NCCL_VERSION = "2.27.3"
"""The NCCL version PyTorch wheels of the 2.8-2.9 line bundle (shown in error texts)."""
_NCCL_RESULT_HINT = {
    "invalid usage": "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
    "internal error": "ncclInternalError: Internal check failed.",
    "unhandled system error": "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
}


def nccl_warn_line(gpu: int, pid: int, text: str, host: str | None = None) -> str:
    """NCCL's ``host:pid:tid [dev] NCCL WARN text`` line."""
    host = host or socket.gethostname()
    return f"{host}:{pid}:{pid + 17} [{gpu}] NCCL WARN {text}"


def nccl_error_text(error: str, warn: str) -> str:
    """PyTorch's ``DistBackendError`` message for an NCCL error."""
    return (
        f"NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, {error} "
        f"(run with NCCL_DEBUG=WARN for details), NCCL version {NCCL_VERSION}\n"
        f"{_NCCL_RESULT_HINT.get(error, error)}\nLast error:\n{warn}"
    )


def watchdog_timeout_line(
    rank: int, seq: int, op: str, numel_in: int, numel_out: int, timeout_ms: int, when: datetime | None = None
) -> str:
    """The NCCL watchdog's line when a collective times out (PyTorch 2.x)."""
    w = when or datetime.now()
    ts = w.strftime("%m%d %H:%M:%S.") + f"{w.microsecond:06d}"
    return (
        f"[rank{rank}]:[E{ts} ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught collective operation timeout: "
        f"WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel_in}, NumelOut={numel_out}, Timeout(ms)={timeout_ms}) "
        f"ran for {timeout_ms + 12} milliseconds before timing out."
    )


def console_metrics(step: int, metrics: Mapping[str, Any]) -> str:
    """SkyRL's console tracker: ``Step N: `` then the pprint of the metrics with floats as ``%.4f``."""

    def fmt(obj: Any) -> Any:
        if isinstance(obj, float):
            return f"{obj:.4f}"
        if isinstance(obj, dict):
            return {k: fmt(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(fmt(v) for v in obj)
        return obj

    return f"Step {step}: \n{pprint.pformat(fmt(dict(metrics)))}"
