"""What advice reads, and the wording advice lines share.

``AdviceContext`` is what the classifier knows about a failure, as far as advice needs it. An
``Advice`` is a line, or a function of the context giving it: a rule carries its own
(``Rule.advice``), ``advice`` holds the classes' own and the decision's. What several of them say
alike lives here, once: the Flight Recorder hint, how a time-out's advice ends, host memory's
wording, a kill's, GPU memory by training phase, a crash with no recognised cause.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nccl_tune.failure import FailureClass as F


@dataclass(frozen=True)
class AdviceContext:
    """What the classifier knows about a failure, as far as advice needs it."""

    failure_class: F
    subtype: str = ""
    phase: str | None = None
    before_first_step: bool = False
    vllm_context: bool = False
    """The failing lines or the traceback right before them come from vLLM."""
    vllm_stepping: bool = False
    """The traceback before the failure shows a vLLM engine running a model step (generating), not starting."""
    weight_sync_context: bool = False
    after_training: bool = False
    rank: int | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    """Values the rule read from the line (key, port, util, op, seq, timeout_ms, ...)."""
    signal_name: str | None = None
    exit_code: int | None = None
    host_mem_peak_frac: float | None = None
    fr: Mapping[str, Any] | None = None
    """``FlightRecorderSummary.to_json()`` when dumps were analysed."""


Advice = str | Callable[[AdviceContext], str]
"""An advice line, or a function of the context giving it."""


def say(advice: Advice, ctx: AdviceContext) -> str:
    """The line ``advice`` gives in ``ctx``."""
    return advice(ctx) if callable(advice) else advice


FR_ENV_HINT = "TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_FR_DUMP_TEMP_FILE=<dir>/nccl_trace_rank_"
"""The variables that make every rank dump its Flight Recorder on a time-out."""

SKYRL_TIMEOUT_CLAUSE = "; lower SKYRL_WORKER_NCCL_TIMEOUT_IN_S to fail faster instead of raising it"
"""How SkyRL sets its collective timeout (the clause ends the timeout advice)."""
TIMEOUT_CLAUSE = (
    "; a shorter process-group timeout (init_process_group(timeout=...)) fails faster than a longer one helps"
)
"""The same for any other trainer."""
ANY_TIMEOUT_CLAUSE = (
    "; a shorter process-group timeout fails faster than a longer one helps (init_process_group(timeout=...); "
    "SkyRL sets it from SKYRL_WORKER_NCCL_TIMEOUT_IN_S)"
)
"""The same for a log whose trainer is not known (``nccl-tune diagnose`` on a log of any origin)."""


def timeout_line(head: str, ctx: AdviceContext) -> str:
    """A time-out's advice: ``head``, the phase, then how to fail faster."""
    if ctx.phase:
        head += f" (phase {ctx.phase})"
    return head + SKYRL_TIMEOUT_CLAUSE


def timed_out(head: Advice) -> Callable[[AdviceContext], str]:
    """The advice of a time-out that ``head`` (a line, or a function of the context) tells: ``timeout_line``."""

    def advice(ctx: AdviceContext) -> str:
        return timeout_line(say(head, ctx), ctx)

    return advice


HOST_RAM_USERS = (
    "CPU offload (trainer.policy/ref.fsdp_config.cpu_offload) and rollouts live in host RAM: turn offload off where "
    "GPU memory allows, lower trainer.train_batch_size or generator.n_samples_per_prompt, and check other tenants "
    "with `free -g`"
)
"""What lives in host RAM in an RL run and what to lower."""
ANY_HOST_RAM_USERS = (
    "CPU offload of parameters or optimizer states (FSDP's or DeepSpeed's offload settings; SkyRL: "
    "trainer.policy/ref.fsdp_config.cpu_offload) and rollouts live in host RAM: turn offload off where GPU memory "
    "allows, lower the batch or the samples per prompt, and check other tenants with `free -g`"
)
"""The same for a log whose trainer is not known (``nccl-tune diagnose`` on a log of any origin)."""


def host_memory(what: str) -> str:
    """Host RAM ran out (``what`` says how): what lives there and what to lower."""
    return f"Host memory, not GPU memory: {what}; {HOST_RAM_USERS}"


WHERE_ENDS_ARE_RECORDED = (
    "the node's kernel log (`dmesg -T | grep -i -E 'killed process|out of memory'`, `journalctl -k`), the "
    "scheduler's record (`sacct -j <job> -o JobID,State,ExitCode,MaxRSS,ReqMem`: OUT_OF_MEMORY), the container's "
    "(`kubectl describe pod`: Last State, Reason OOMKilled; `docker inspect -f '{{.State.OOMKilled}} "
    "{{.State.ExitCode}}' <container>`), Ray's (/tmp/ray/session_latest/logs/raylet.out)"
)
"""Where a run's end is recorded when its own log does not say: a kill, an OOM killer's choice, an
exit status."""

KILLED = (
    "Killed by SIGKILL from outside, with no error of its own and no sign of memory pressure in the log: the "
    "kernel's or the container's OOM killer (host RAM, a cgroup limit) or a kill by a scheduler, `ray stop` or a "
    f"person; who sent it is recorded in {WHERE_ENDS_ARE_RECORDED}"
)
"""A process SIGKILL ended: whatever printed it, a kill says this first."""

NO_END = (
    "No failure in the log, and no sign of its end either (no end-of-training line, no clean exit reported, no exit "
    "status): the run may have finished, still be running or hung, or have been killed without a word; the last "
    "progress line is in the evidence. How it ended is recorded in the exit status (the launcher's own log; "
    f"`nccl-tune diagnose` on a trial folder with its result.json) and in {WHERE_ENDS_ARE_RECORDED}; if it still runs "
    "without progress, `py-spy dump --pid <pid>` of each rank shows where it waits"
)
"""A log that just stops (``FailureClass.NO_END``): what to look at."""


def unrecognised_crash(ctx: AdviceContext) -> str:
    """A crash no rule explains: the signal or the exit code, else the evidence."""
    if ctx.signal_name:
        return f"The process ended by {ctx.signal_name} with no recognised cause: read the last lines"
    if ctx.exit_code:
        return f"The command exited with code {ctx.exit_code} and no recognised cause: read the last lines"
    return "The run died without a recognised cause: read the evidence lines"


_TRAIN_PHASES = {"policy_train", "train_critic_and_policy", "critic_train"}
_FORWARD_PHASES = {"fwd_logprobs_values_reward", "compute_advantages_and_returns", "apply_reward_kl_penalty"}
_GENERATE_PHASES = {"generate", "eval"}
_SYNC_PHASES = {"sync_weights", "init_weight_sync_state", "update_ref_with_policy"}
_SAVE_PHASES = {"save_checkpoints", "save_hf_model"}


def _fragmentation(ctx: AdviceContext) -> str:
    reserved = ctx.details.get("reserved_unallocated_gib")
    if reserved is not None and reserved >= 1.0:
        return (
            f"; {reserved:.2f} GiB was reserved but unallocated (fragmentation): also set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        )
    return ""


def _vllm_oom(ctx: AdviceContext, frag: str) -> str | None:
    """CUDA ran out in a vLLM engine: while it started, or while it generated."""
    phase = ctx.phase or ""
    if not (ctx.vllm_context and (ctx.before_first_step or phase in _GENERATE_PHASES or not phase)):
        return None
    if (ctx.before_first_step or not phase) and not ctx.vllm_stepping:
        return (
            "CUDA ran out while the vLLM engines started: lower generator.gpu_memory_utilization (each colocated "
            "engine claims that fraction of the GPU), or generator.max_num_seqs" + frag
        )
    return (
        "CUDA ran out in vLLM during generation: lower generator.max_num_seqs or generator.max_num_batched_tokens, "
        "or generator.gpu_memory_utilization" + frag
    )


SKYRL_OOM = (
    "Out of GPU memory: lower the micro-batch sizes (trainer.micro_train_batch_size_per_gpu, "
    "trainer.micro_forward_batch_size_per_gpu) or the sequence lengths, or turn on CPU offload "
    "(trainer.policy.fsdp_config.cpu_offload=true)"
)
"""Out of GPU memory in no phase the log names, in SkyRL's keys."""
ANY_OOM = (
    "Out of GPU memory: lower the micro-batch size or the sequence length, or turn on activation checkpointing or "
    "CPU offload (SkyRL: trainer.micro_train_batch_size_per_gpu, trainer.policy.fsdp_config.cpu_offload=true)"
)
"""The same for a log whose trainer is not known."""


def oom_by_phase(ctx: AdviceContext) -> str:
    """Out of GPU memory: the knobs of the phase (or the vLLM engine) it ran out in."""
    frag = _fragmentation(ctx)
    phase = ctx.phase or ""
    in_vllm = _vllm_oom(ctx, frag)
    if in_vllm is not None:
        return in_vllm
    if phase in _TRAIN_PHASES:
        offload = (
            "trainer.critic.fsdp_config.cpu_offload=true"
            if phase == "critic_train"
            else ("trainer.policy.fsdp_config.cpu_offload=true")
        )
        return (
            f"Out of GPU memory in {phase}: lower trainer.micro_train_batch_size_per_gpu or turn on {offload} "
            "(or shorten trainer.max_prompt_length / generator.sampling_params.max_generate_length)" + frag
        )
    if phase in _FORWARD_PHASES:
        return (
            f"Out of GPU memory in {phase}: lower trainer.micro_forward_batch_size_per_gpu or turn on "
            "trainer.ref.fsdp_config.cpu_offload=true" + frag
        )
    if phase in _SYNC_PHASES or ctx.weight_sync_context:
        return (
            "Out of GPU memory while syncing weights to the inference engines (their KV cache is still resident): lower "
            "generator.gpu_memory_utilization or turn on trainer.policy.fsdp_config.cpu_offload=true" + frag
        )
    if phase in _GENERATE_PHASES:
        return (
            "Out of GPU memory during generation: lower generator.max_num_seqs or generator.gpu_memory_utilization"
            + frag
        )
    if phase in _SAVE_PHASES:
        return (
            f"Out of GPU memory in {phase} (gathering the full state dict): turn on "
            "trainer.policy.fsdp_config.cpu_offload=true or save less often (trainer.ckpt_interval)" + frag
        )
    return SKYRL_OOM + frag


SKYRL_WORDING = (
    (SKYRL_TIMEOUT_CLAUSE, ANY_TIMEOUT_CLAUSE),
    (HOST_RAM_USERS, ANY_HOST_RAM_USERS),
    (SKYRL_OOM, ANY_OOM),
)
"""Advice that names SkyRL's keys, and how a log of unknown origin (``nccl-tune diagnose`` on any
log) is told the same: in general terms, SkyRL's keys named as SkyRL's."""
