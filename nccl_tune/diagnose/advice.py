"""One line of advice per verdict: what its class says first, else its rule's own, else its class's.

Advice names the real knobs: SkyRL's config keys (``trainer.micro_train_batch_size_per_gpu``,
``trainer.policy.fsdp_config.cpu_offload``, ``generator.gpu_memory_utilization``, ...), the NCCL and
PyTorch environment variables that exist (``SKYRL_WORKER_NCCL_TIMEOUT_IN_S`` sets the collective
timeout; PyTorch reads no ``NCCL_TIMEOUT``), and the command that shows more.

``advise`` picks, in order:

1. what the class says first, whatever the rule: a time-out whose rank behind is known (the Flight
   Recorder's culprit, or the rank the decision found behind) names it; a SIGKILL is a kill;
2. the advice of the verdict's class and subtype: the rules' (``Rule.advice``: a line or a
   function of the context, ``rules.RULE_ADVICE``), or that of a subtype the decision makes itself
   (a SIGKILL after host memory climbed, ranks out of step, no cause found);
3. else the class's own.

A failure after training finished says so first. The wording several lines share is in
``wording``. ``advice_for_space`` then says a memory failure in a search space's own parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nccl_tune.diagnose.pressure import HEAVY_PHASE_WORDS
from nccl_tune.diagnose.rules import RULE_ADVICE
from nccl_tune.diagnose.wording import (
    FR_ENV_HINT,
    HOST_RAM_USERS,
    KILLED,
    NO_END,
    SKYRL_TIMEOUT_CLAUSE,
    SKYRL_WORDING,
    TIMEOUT_CLAUSE,
    WHERE_ENDS_ARE_RECORDED,
    Advice,
    AdviceContext,
    host_memory,
    oom_by_phase,
    say,
    timed_out,
    timeout_line,
    unrecognised_crash,
)
from nccl_tune.failure import FailureClass as F
from nccl_tune.trial import MemoryKnob


def _fr_clause(fr: Mapping[str, Any] | None) -> str:
    if not fr:
        return ""
    culprit = fr.get("culprit_rank")
    op, seq, pg = fr.get("op"), fr.get("seq"), fr.get("process_group")
    where = f"{op} #{seq}" if op and seq is not None else "the collective"
    if pg:
        where += f" (pg {pg})"
    if fr.get("mismatch"):
        return f"Flight Recorder: rank {culprit} disagrees on {where} ({fr.get('mismatch_kind') or 'mismatch'})"
    missing = fr.get("ranks_missing") or []
    if culprit is not None:
        return f"Flight Recorder: rank {culprit} is behind, it never entered {where}"
    if missing:
        return f"Flight Recorder: no dump from rank(s) {', '.join(map(str, missing))}, the likely culprit(s)"
    return ""


# --- what a class says first, whatever the rule ----------------------------------------------


def _rank_behind_named(ctx: AdviceContext) -> str | None:
    """A time-out whose rank behind the Flight Recorder or the decision names."""
    fr = _fr_clause(ctx.fr)
    if fr:
        return timeout_line(f"{fr}: look at that rank's last log lines or `py-spy dump --pid <pid>`", ctx)
    if ctx.rank is not None:
        return timeout_line(
            f"Rank {ctx.rank} is the likely one behind (it reported no timeout): look at its last lines or `py-spy dump`",
            ctx,
        )
    return None


def _killed(ctx: AdviceContext) -> str | None:
    return KILLED if ctx.signal_name == "SIGKILL" else None


_FIRST: dict[F, Callable[[AdviceContext], str | None]] = {
    F.COLLECTIVE_TIMEOUT: _rank_behind_named,
    F.CRASH: _killed,
}


# --- subtypes the decision makes itself ------------------------------------------------------


def _sigkill_after_climb(ctx: AdviceContext) -> str:
    peak = ctx.host_mem_peak_frac or 0.0
    return (
        f"Killed by SIGKILL after host RAM reached {peak:.0%}: the kernel's OOM killer (`dmesg | grep -i oom`); "
        "CPU offload (trainer.*.fsdp_config.cpu_offload) and rollouts live in host RAM: turn offload off where GPU "
        "memory allows, or lower trainer.train_batch_size / generator.n_samples_per_prompt"
    )


def _sigkill_climbing(ctx: AdviceContext) -> str:
    return (
        "Killed by SIGKILL while the log's host-memory readouts climbed step after step (the last is in the evidence): "
        "host RAM ran out, the kernel's or the container's OOM killer; something piles up in host RAM (rollouts kept, "
        f"offloaded state, a leak): {HOST_RAM_USERS}"
    )


_HEAVY_FIX = {
    "save": "save sharded checkpoints (no full state dict gathered on one rank), keep fewer saves in flight, or give "
    "the node or container more RAM",
    "load": "lower the data workers (num_workers, num_proc), stream or pre-tokenise the dataset, load weights with "
    "low_cpu_mem_usage, or give the node or container more RAM",
    "gather": "gather less at once (a sharded or distributed checkpoint, offload_to_cpu with rank0_only), merge "
    "offline on a host with more RAM",
}


def _sigkill_in_heavy_phase(ctx: AdviceContext) -> str:
    kind = str(ctx.details.get("heavy_phase") or "save")
    what = HEAVY_PHASE_WORDS.get(kind, kind)
    return (
        f"Killed by SIGKILL with no error of its own while {what} (the line before the kill is in the evidence): that "
        f"phase ran host RAM out and the kernel's or the container's OOM killer ended the process; "
        f"{_HEAVY_FIX.get(kind, _HEAVY_FIX['save'])}; the kill is recorded in {WHERE_ENDS_ARE_RECORDED}"
    )


def _sigkill_under_limit(ctx: AdviceContext) -> str:
    return (
        "Killed by SIGKILL with no error of its own, under a memory limit the log names (in the evidence): the "
        "container's or the job's OOM killer ends a process that crosses it without a word; raise the limit (docker "
        "--memory, the pod's resources.limits.memory, Slurm --mem) or lower the run's host RAM (CPU offload, data "
        f"workers, rollouts kept); the kill is recorded in {WHERE_ENDS_ARE_RECORDED}"
    )


def _mismatch_lead(ctx: AdviceContext) -> str:
    """The Flight Recorder's finding, then the sentence (``R``anks ...)."""
    fr = _fr_clause(ctx.fr)
    return f"{fr}; r" if fr else "R"


def _groups(ctx: AdviceContext) -> str:
    groups = ctx.details.get("groups")
    return f" ({groups})" if groups else ""


def _out_of_step(ctx: AdviceContext) -> str:
    behind = f"rank {ctx.rank} is the one behind: " if ctx.rank is not None else ""
    return (
        f"{_mismatch_lead(ctx)}anks are out of step, waiting at different sequence numbers{_groups(ctx)}: {behind}it "
        "skipped or added collectives (a rank-only branch, an early exit, uneven batches or data); make every rank "
        "issue the same collectives in the same order; TORCH_DISTRIBUTED_DEBUG=DETAIL reports it at the call"
    )


def _no_cause(ctx: AdviceContext) -> str:
    how = f"the command exited with code {ctx.exit_code}" if ctx.exit_code else "the log ends in error lines"
    return (
        f"No cause found: {how} but no known failure message is in the log; read the last lines shown and the "
        "output before them"
    )


def _first_error(ctx: AdviceContext) -> str:
    d = ctx.details
    who = f"Rank {ctx.rank}" if ctx.rank is not None else "One process"
    line = d.get("first_error_line")
    what = d.get("exception") or "an error"
    unnamed = " that no rule names" if d.get("unnamed") else ""
    at = f" (line {line})" if line else ""
    return (
        f"{who} failed first, with {what}{unnamed}{at}, before the others timed out: they waited in a collective "
        "it never reached, so their time-outs are its consequence, not the cause; read that rank's traceback for "
        "what failed (a bug on its code path, a connection it could not make, a library's internal error) and fix "
        "that; raising the collective timeout would only make the others wait longer"
    )


_DECIDED: dict[tuple[F, str], Advice] = {
    (F.HOST_OOM, "sigkill_after_climb"): _sigkill_after_climb,
    (F.HOST_OOM, "sigkill_memory_climbing"): _sigkill_climbing,
    (F.HOST_OOM, "sigkill_in_heavy_phase"): _sigkill_in_heavy_phase,
    (F.HOST_OOM, "sigkill_under_limit"): _sigkill_under_limit,
    (F.COLLECTIVE_MISMATCH, "seq_desync"): _out_of_step,
    (F.CRASH, "no_cause"): _no_cause,
    (F.CRASH, "first_error"): _first_error,
}


# --- each class's own ------------------------------------------------------------------------


def _waited(ctx: AdviceContext) -> str:
    """Ranks waited with no error before: a hang; the Flight Recorder says which rank."""
    op, seq = ctx.details.get("op"), ctx.details.get("seq")
    where = f" in {op} (SeqNum {seq})" if op and seq is not None else (f" in {op}" if op else "")
    head = (
        f"Ranks waited{where} until the timeout with no error before it: a hang (a rank behind or stuck, not a "
        "slow network); the Flight Recorder says which rank (`nccl-tune diagnose <trial folder>`)"
    )
    if not ctx.fr:
        head += f", with {FR_ENV_HINT} set"
    return head


def _different_collectives(ctx: AdviceContext) -> str:
    return (
        f"{_mismatch_lead(ctx)}anks called different collectives at the same sequence number{_groups(ctx)}: some code "
        "path runs a collective on some ranks only (a rank-0-only branch, a value from dist.reduce deciding control "
        "flow, uneven batches); make every rank issue the same collectives in the same order; "
        "TORCH_DISTRIBUTED_DEBUG=DETAIL reports it at the call"
    )


_BY_CLASS: dict[F, Advice] = {
    F.OOM: oom_by_phase,
    F.HOST_OOM: host_memory("host RAM ran out"),
    F.COLLECTIVE_TIMEOUT: timed_out(_waited),
    F.COLLECTIVE_MISMATCH: _different_collectives,
    F.NCCL_ERROR: "NCCL reported an error: rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV to see the failing call",
    F.CUDA_ERROR: "A CUDA error: rerun with CUDA_LAUNCH_BLOCKING=1 to see the failing op; check `dmesg | grep Xid`",
    F.INIT_FAILURE: (
        "The rendezvous did not complete before the first step: a process or node never joined (wrong MASTER_ADDR/port, "
        "firewall, unequal --nproc-per-node, a node that never started); check every node reaches the same endpoint"
    ),
    F.CONFIG_ERROR: "The command refused its config: fix the value named in the evidence (the search space or --set)",
    F.CRASH: unrecognised_crash,
}


def _hang(ctx: AdviceContext) -> str:
    where = f" in {ctx.phase}" if ctx.phase else ""
    return (
        f"No progress{where} for longer than the stall timeout: a rank is stuck; set {FR_ENV_HINT} and run "
        "`nccl-tune diagnose` on the trial folder to see which rank and collective"
    )


_NOT_FROM_A_RULE: dict[F, Advice] = {
    F.HANG: _hang,
    F.BUDGET: "Alive and progressing but too slow for the trial budget: this config is slower than the others tried",
    F.INTERRUPTED: "Interrupted: the study can be resumed with the same --study",
    F.NO_END: NO_END,
}
"""Classes no log line decides (the supervisor's): their advice as it is, even after training."""


def advise(ctx: AdviceContext) -> str:
    """The advice line for a failure (empty for ``ok``); see the module docstring."""
    cls = ctx.failure_class
    if cls is F.OK:
        return ""
    if cls in _NOT_FROM_A_RULE:
        return say(_NOT_FROM_A_RULE[cls], ctx)
    first = _FIRST.get(cls)
    text = first(ctx) if first is not None else None
    if text is None:
        key = (cls, ctx.subtype)
        text = say(RULE_ADVICE.get(key) or _DECIDED.get(key) or _BY_CLASS[cls], ctx)
    if ctx.after_training:
        head = text[0].lower() if text[1:2].islower() else text[0]
        text = (
            "Training had finished; this failed afterwards (final checkpoint or teardown), the measured steps stand: "
            + (head + text[1:])
        )
    return text


# -- advice in a search space's own terms ------------------------------------------------------


def _shown(k: MemoryKnob) -> str:
    spelled = f"{k.arg}, " if k.arg and k.arg != k.name else ""
    return f"{k.name} ({spelled}now {k.value})"


def _saving(k: MemoryKnob) -> str:
    """The move of ``k`` that saves memory (device memory, or host RAM for a host knob)."""
    if k.effect == "increasing":
        return f"turn off {_shown(k)}" if k.value == "true" else f"lower {_shown(k)}"
    return f"turn on {_shown(k)}" if k.value in ("false", "0") else f"raise {_shown(k)}"


def advice_for_space(failure: F, advice: str, knobs: Sequence[MemoryKnob], trainer: str | None) -> str:
    """``advice`` (the log's) as the trial's search space should read it: a memory failure in the
    space's own parameters (``space_memory_advice``); a time-out's way to fail faster in its
    trainer's terms: SkyRL's variable for SkyRL, PyTorch's for a trainer known not to be SkyRL, both
    for a log of unknown origin, which is told what lives in host RAM in general terms too."""
    in_space_terms = space_memory_advice(failure, knobs, trainer)
    if in_space_terms:
        return in_space_terms
    if trainer is None:
        for skyrl, anywhere in SKYRL_WORDING:
            advice = advice.replace(skyrl, anywhere)
    elif trainer != "skyrl" and advice.endswith(SKYRL_TIMEOUT_CLAUSE):
        return advice[: -len(SKYRL_TIMEOUT_CLAUSE)] + TIMEOUT_CLAUSE
    return advice


def space_memory_advice(failure: F, knobs: Sequence[MemoryKnob], trainer: str | None) -> str | None:
    """The advice line for a memory failure in the trial's search-space terms: for a GPU OOM its
    parameters that declare ``memory: increasing``/``decreasing``, for a host OOM those that declare
    ``host_memory``, with their values in the trial. None for other classes, for SkyRL (its advice
    names SkyRL's keys), and for an unknown trainer without such parameters (the log's own advice
    stands)."""
    if failure not in (F.OOM, F.HOST_OOM) or trainer == "skyrl" or (trainer is None and not knobs):
        return None
    if failure is F.HOST_OOM:
        return _host_advice(knobs)
    device = [k for k in knobs if not k.host]
    movable = [k for k in device if k.room]
    if movable:
        return "Out of GPU memory: " + ", or ".join(_saving(k) for k in movable)
    if device:
        return (
            "Out of GPU memory with every memory parameter of the space at its smallest setting "
            f"({', '.join(_shown(k) for k in device)}): shorten sequences or shrink the model's footprint"
        )
    return (
        "Out of GPU memory: lower the batch size or sequence length (declare memory: increasing or decreasing "
        "on the space's parameters to have them named here)"
    )


def _host_advice(knobs: Sequence[MemoryKnob]) -> str:
    """A host out of memory in the space's terms: the parameters that declare ``host_memory``; one
    that also saves GPU memory (CPU offload) is turned off only where the GPU has room."""
    host = [k for k in knobs if k.host]
    frees_gpu = {k.name for k in knobs if not k.host and k.effect == "decreasing"}
    movable = [k for k in host if k.room]
    parts = ["Host memory, not GPU memory, ran out"]
    if movable:
        parts.append(
            ", or ".join(_saving(k) + (" where GPU memory allows" if k.name in frees_gpu else "") for k in movable)
        )
    elif host:
        parts.append(
            f"every host-memory parameter of the space is at its smallest setting ({', '.join(_shown(k) for k in host)}): "
            "lower what the run keeps in host RAM outside the space, or run on a host with more"
        )
    else:
        parts.append(
            "declare host_memory: increasing or decreasing on the space's parameters that move host RAM "
            "(data-loader workers, CPU offload) to have them named here"
        )
    parts.append("check other tenants with `free -g` and `dmesg | grep -i oom`")
    return "; ".join(parts)
