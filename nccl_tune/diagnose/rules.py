"""The rules: which message formats of PyTorch, NCCL, gloo, CUDA, Ray, vLLM, torchrun, Hydra and
the kernel mean which failure, how much they weigh, what they read and what to do about them.

Every rule is keyed on a program's own message text (``Watchdog caught collective operation
timeout``, ``CUDA out of memory``, ``No available memory for the cache blocks``, ...), never on a
particular log. A rule has cheap substring ``keys`` (any one must occur) checked before its
regular expression, so that lines no rule can match cost a few substring tests. A rule carries all
it means: its pattern's named groups and its ``details`` reader say what the line tells (a port, a
collective's sequence number, an exit code), ``in_context`` what the traceback before it changes,
and ``advice`` what to do (a line, or a function of the context); adding a rule is adding one
``Rule``. Rules of one class and subtype carry one advice (``RULE_ADVICE``).

Weights (``Kind``) drive root-cause selection in ``classify``:

- ``ROOT``: a specific cause (device or host OOM, CUDA error, NCCL error, init failure, refused
  config, explicit collective mismatch). The earliest one wins over everything else.
- ``INIT``: rendezvous/store/connect failures. A root cause before the first training step; after
  it, a consequence of another rank's failure (a collective timeout if nothing better is found).
- ``TIMEOUT``: a collective did not complete (NCCL watchdog, blocking wait, gloo, heartbeat).
- ``CRASH``: a process died without a recognised cause (exception, signal, actor death).
- ``SYMPTOM``: what a failure drags along (aborts, ``terminate called``, peers reset, SIGTERM to
  the other ranks, ``ray.kill``): evidence at most, a crash only when nothing else is there.
- ``SUPPORT``: lines that say something went wrong without being fatal by themselves (``NCCL
  WARN``, c10d connect retries, loguru ``ERROR`` lines); an ``NCCL WARN`` error before a timeout or
  an NCCL failure names the cause.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from nccl_tune.diagnose.wording import (
    FR_ENV_HINT,
    KILLED,
    Advice,
    AdviceContext,
    host_memory,
    oom_by_phase,
    timed_out,
    unrecognised_crash,
)
from nccl_tune.failure import FailureClass as F
from nccl_tune.failure import signal_from_exit


class Kind(str, Enum):
    """How much a matching line weighs in root-cause selection (see the module docstring)."""

    ROOT = "root"
    INIT = "init"
    TIMEOUT = "timeout"
    CRASH = "crash"
    SYMPTOM = "symptom"
    SUPPORT = "support"


Details = Callable[[str, dict[str, Any]], None]
"""Reads more from a matching message into its event's details, in place."""
InContext = Callable[["re.Match[str] | None", str, Callable[[], bytes]], "Rule | None"]
"""``(match, message, before)``: the rule the line means given ``before()``, the bytes printed just
before it (``CONTEXT_BYTES``); None: its own."""


@dataclass(frozen=True)
class Rule:
    """One message format: what it means, what it reads from a line, and what to do about it."""

    name: str
    failure_class: F
    kind: Kind
    keys: tuple[str, ...]
    """Substrings of the message; the rule is tried only when one of them occurs."""
    pattern: re.Pattern[str] | None = None
    """Must match (``search``) when given; its named groups become the event's details."""
    subtype: str = ""
    """Refines the advice: ``ecc``, ``shm``, ``vllm_kv_budget``, ``port_in_use``, ..."""
    exclude: tuple[str, ...] = field(default=())
    """Substrings that veto the rule (e.g. ``NCCL WARN`` for the c10d port rule)."""
    details: Details | None = None
    """What the advice and the decision need beyond the named groups (numbers as ``int``, a
    ``signal``, a finer ``subtype``): read from the message into the details, in place."""
    whole: re.Pattern[str] | None = None
    """The whole message, for a line a terminal may wrap in the middle of it: a match whose
    ``closed`` group is empty is joined with the next lines when they complete it into this."""
    in_context: InContext | None = None
    """Another rule the line means where the traceback before it says so (an ``AssertionError``
    raised in a config validation function is a refused config, not a crash)."""
    advice: Advice | None = None
    """The advice line of a verdict of this class and subtype, or a function of the context giving
    it; None: the class's own (``advice``). Rules of one class and subtype carry the same."""
    refined: Mapping[str, Advice] = field(default_factory=dict, compare=False)
    """The advice of the finer subtypes ``details`` may name (``nccl_warn``'s ``shm``)."""


def _rx(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


CONTEXT_BYTES = 2048
"""Bytes before a line searched for its context (a traceback's frames, vLLM, weight sync, a time stamp)."""


# --- what a rule reads beyond its named groups ----------------------------------------------

_WORK_FIELD = re.compile(r"(SeqNum|OpType|NumelIn|NumelOut|Timeout\(ms\))=([^,)\s]+)")
_PG = re.compile(r"\[PG (?:ID )?(?P<pg>\d+)(?: PG GUID (?P<guid>[^\s\]]+))?[^\]]*Rank \d+\]")
_PORT = re.compile(r"(?P<host>\]|\b[\w.-]+):(?P<port>\d{2,5})\b")
_SOURCE_FILE = re.compile(r"\.(?:cpp|cc|c|h|hpp|py|cu)$")
_OOM_RESERVED = re.compile(r"(?P<v>[\d.]+) (?P<u>[KMG])i?B is reserved by PyTorch but unallocated")
_UTIL = re.compile(r"gpu_memory_utilization=(?P<util>[\d.]+)")
_SIGNAL_IN_TEXT = re.compile(
    r"<Signals\.(?P<a>SIG\w+): \d+>|terminated with signal (?P<b>SIG\w+)|terminated with code (?P<c>-\d+)"
    r"|non-zero exit status (?P<d>-\d+)"
)
_WATCHDOG_WHOLE = re.compile(
    r"(?:[Cc]aught collective operation timeout: |Work )WorkNCCL\([A-Za-z]+(?:\(ms\))?=[^,()\s]*"
    r"(?:, [A-Za-z]+(?:\(ms\))?=[^,()\s]*)*\) (?:ran for \d+ milliseconds before timing out"
    r"|timed out in blocking wait(?: \((?:TORCH_)?NCCL_BLOCKING_WAIT=1\))?)\.?\s*$"
)
"""A watchdog message from its head to the end of its line, every field of its work whole: what the
lines after a wrapped one must complete it into."""


def _watchdog_work(msg: str, det: dict[str, Any]) -> None:
    """The work's op, sequence number, sizes and timeout, and the process group; a work still cut
    short (no rows after it complete it: ``Rule.whole``) names no fields: its last one may be cut."""
    fields = dict(_WORK_FIELD.findall(det.get("work", ""))) if det.pop("closed", None) else {}
    if "SeqNum" in fields:
        det["seq"] = int(fields["SeqNum"])
    if "OpType" in fields:
        det["op"] = fields["OpType"]
    for key, name in (("NumelIn", "numel_in"), ("NumelOut", "numel_out"), ("Timeout(ms)", "timeout_ms")):
        if key in fields and fields[key].lstrip("-").isdigit():
            det[name] = int(fields[key])
    pg = _PG.search(msg)
    det["pg"] = (pg.group("guid") or pg.group("pg")) if pg else "0"
    det.pop("work", None)


def _work_seq(msg: str, det: dict[str, Any]) -> None:
    det["seq"] = int(det["seq"])


def _gloo_op(msg: str, det: dict[str, Any]) -> None:
    det["op"] = f"gloo {det.get('direction', '')}".strip()


def _barrier_culprits(msg: str, det: dict[str, Any]) -> None:
    if "ranks" in det:
        det["culprits"] = [int(r) for r in re.findall(r"\d+", det.pop("ranks"))]


def _dump_from_rank(msg: str, det: dict[str, Any]) -> None:
    if det.get("from_rank") is not None:
        det["from_rank"] = int(det["from_rank"])


def _gloo_sizes(msg: str, det: dict[str, Any]) -> None:
    got, want = det.pop("received_gloo", None), det.pop("expected_gloo", None)
    if got is not None:
        det["received"], det["expected"] = got, want


def _listen_port(msg: str, det: dict[str, Any]) -> None:
    """The port named as ``host:port`` (not a source file's ``file.cpp:601``)."""
    for m in _PORT.finditer(msg):
        if not _SOURCE_FILE.search(m.group("host")):
            det["port"] = int(m.group("port"))
            break


def _reserved_unallocated(msg: str, det: dict[str, Any]) -> None:
    m = _OOM_RESERVED.search(msg)
    if m:
        scale = {"K": 1 / 1024**2, "M": 1 / 1024, "G": 1.0}[m.group("u")]
        det["reserved_unallocated_gib"] = float(m.group("v")) * scale


def _vllm_util(msg: str, det: dict[str, Any]) -> None:
    m = _UTIL.search(msg)
    if m:
        det["util"] = m.group("util")


def _nccl_warn_subtype(msg: str, det: dict[str, Any]) -> None:
    low = msg.lower()
    if "shared memory" in low or "shm" in low or "no space left" in low:
        det["subtype"] = "shm"
    elif "net/" in low or "socket" in low or "connection" in low or "ibv" in low:
        det["subtype"] = "network"


def _nccl_error_subtype(msg: str, det: dict[str, Any]) -> None:
    low = msg.lower()
    if "system error" in low:
        det["subtype"] = "system"
    elif "invalid usage" in low or "ncclinvalidusage" in low:
        det["subtype"] = "invalid_usage"


def _exception_signal(msg: str, det: dict[str, Any]) -> None:
    m = _SIGNAL_IN_TEXT.search(msg)
    if m:
        code = m.group("c") or m.group("d")
        det["signal"] = m.group("a") or m.group("b") or signal_from_exit(int(code))


def _exit_code(msg: str, det: dict[str, Any]) -> None:
    if "exit_code" in det:
        det["exit_code"] = int(det["exit_code"])
        det["signal"] = signal_from_exit(det["exit_code"])


def _signal_named(msg: str, det: dict[str, Any]) -> None:
    det["signal"] = det.pop("signal2", None) or det.get("signal")


def _signal_number(msg: str, det: dict[str, Any]) -> None:
    num = det.pop("signum", None) or det.pop("signum2", None)
    if num:
        det["signal"] = signal_from_exit(-int(num))


def _sigkill(msg: str, det: dict[str, Any]) -> None:
    det["signal"] = "SIGKILL"


# --- advice that reads the details or the context -------------------------------------------
# A rule's advice is a line written in the rule, or one of these functions; what several rules say
# alike is a constant or a function here, or in ``wording`` when the classes' own advice says it too.


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


_KERNEL_OOM = host_memory("the kernel's OOM killer killed a process")


def _unknown_key(ctx: AdviceContext) -> str:
    d = ctx.details
    if d.get("config"):  # a dataclass config (today's SkyRL) names its class
        return (
            f"The command's {d['config']} has no field {d.get('key', '')}: check the key against the trainer's config "
            "classes (the search space or --set); SkyRL's two layouts spell some keys differently, and the '+' prefix "
            "adds nothing there"
        )
    key = d.get("key", "")
    return (
        f"The command refused the key '{key}': check its spelling against the training config (the search space "
        "or --set), or add a new key with +key=value"
    )


def _plus_prefix(ctx: AdviceContext) -> str:
    return (
        f"The command refuses the '+' prefix ({ctx.details.get('key', '')}): give the key without '+', it must already "
        "exist"
    )


def _validation(ctx: AdviceContext) -> str:
    what = ctx.details.get("detail", "a validation assertion")
    return f"The command refused the config ({what}): fix the values or pin them with --set"


def _command(ctx: AdviceContext) -> str:
    return f"The command was not found ({ctx.details.get('cmd', '')}): check the command line and PATH"


def _engine_args(ctx: AdviceContext) -> str:
    arg = ctx.details.get("arg")
    what = f" ({arg})" if arg else ""
    return (
        f"vLLM refused its engine arguments{what}: fix the value the evidence names (the generator/engine settings "
        "in the search space or --set), e.g. max_num_batched_tokens at least max_model_len, a tensor parallel size "
        "that divides the attention heads, max_model_len within the model's limit"
    )


def _ib_verbs(ctx: AdviceContext) -> str:
    d = ctx.details
    if d.get("call") == "ibv_modify_qp":
        error = f": {d['error'].strip()}" if d.get("error") else ""
        return (
            f"NCCL could not connect an InfiniBand/RoCE queue pair (ibv_modify_qp failed{error}): on RoCE set "
            "NCCL_IB_GID_INDEX to the RoCEv2 GID of a routed address (`show_gids`), and check that NCCL_IB_HCA names "
            "ports that are up and reach the other nodes (`ibstat`, `ib_write_bw` between two nodes); NCCL_IB_DISABLE=1 "
            "falls back to sockets (slower)"
        )
    call = d.get("call") or "an InfiniBand verbs call"
    return (
        f"NCCL could not use the InfiniBand device ({call} failed): memory registration needs the locked-memory "
        "limit raised (ulimit -l unlimited; the container's --ulimit memlock=-1) and the GPU peer-memory module "
        "loaded; NCCL_IB_DISABLE=1 falls back to sockets (slower)"
    )


def _transport(ctx: AdviceContext) -> str:
    who = f" on rank {ctx.rank}" if ctx.rank is not None else ""
    return (
        f"NCCL's network transport failed{who} first (IB completion error or socket closed/reset); the other ranks' "
        "time-outs followed from it: a link, NIC or peer node dropped; check the fabric (ibstat, NCCL_DEBUG=INFO "
        "NCCL_DEBUG_SUBSYS=NET), NCCL_IB_TIMEOUT / NCCL_IB_RETRY_CNT, and the peer node's own log"
    )


def _invalid_env(ctx: AdviceContext) -> str:
    value = ctx.details.get("value")
    shown = f' ("{value}")' if value else ""
    return (
        f"An NCCL environment value is invalid{shown}: NCCL_ALGO takes Ring,Tree,CollnetDirect,CollnetChain,NVLS,"
        "NVLSTree,PAT and NCCL_PROTO takes LL,LL128,Simple; fix or unset it (`nccl-tune doctor` checks them)"
    )


def _no_algorithm(ctx: AdviceContext) -> str:
    d = ctx.details
    fn = d.get("function") or "a collective"
    forced = ", ".join(f"{k}={v}" for k, v in (("NCCL_ALGO", d.get("algo")), ("NCCL_PROTO", d.get("proto"))) if v)
    shown = f" ({forced})" if forced else ""
    return (
        f"NCCL has no algorithm/protocol left for {fn} under the forced choice{shown}: force it only where it "
        'applies with NCCL\'s per-collective syntax (e.g. NCCL_ALGO="allreduce:Tree") or unset the variable'
    )


_NCCL_SHM = (
    "NCCL could not create its shared-memory segment (/dev/shm too small; Docker's default is 64 MB): run the "
    "container with --shm-size=16g or --ipc=host, or set NCCL_SHM_DISABLE=1 (slower)"
)


def _device_assert(ctx: AdviceContext) -> str:
    kernel, cond = ctx.details.get("kernel"), ctx.details.get("cond")
    what = f" ({kernel}: {cond})" if kernel and cond else ""
    return (
        f"A device-side assert{what}: usually an index out of range (token ids beyond the embedding/vocab size, "
        "labels out of range); check the tokenizer against the model; rerun with CUDA_LAUNCH_BLOCKING=1 for the op"
    )


def _nccl_cuda(ctx: AdviceContext) -> str:
    d = ctx.details
    if "nvls" in (d.get("where") or "").lower():
        return (
            f"NCCL's NVLS transport (NVLink SHARP multicast) failed a CUDA call ('{d.get('detail', '')}' in {d['where']}): "
            "multicast does not work on this node (its fabric manager, a VM or container, the driver): set "
            "NCCL_NVLS_ENABLE=0 and leave NCCL_ALGO=NVLS out of the search; `nvidia-smi -q` shows the fabric's state"
        )
    return (
        "NCCL hit a CUDA error (unhandled cuda error): rerun with NCCL_DEBUG=INFO to see the CUDA call; frequent "
        "causes are GPU memory exhausted by NCCL buffers (lower NCCL_BUFFSIZE) and NCCL_CUMEM_ENABLE with old drivers"
    )


def _port_in_use(ctx: AdviceContext) -> str:
    port = ctx.details.get("port")
    p = f" {port}" if port else ""
    return (
        f"Port{p} is already in use (another job or a leftover process): pick a free MASTER_PORT (torchrun "
        f"--master_port / --rdzv-endpoint) or stop the holder (`ss -ltnp | grep :{port or '<port>'}`)"
    )


def _nccl_id_store(ctx: AdviceContext) -> str:
    peer = ctx.details.get("peer_rank", "0")
    error = (ctx.details.get("error") or "").strip()
    late = "timeout" in error.lower()
    return (
        f"Setting up an NCCL communicator, this rank waited for rank {peer} to publish NCCL's id in the c10d store, and "
        f"the store failed ({error or 'an error'}): "
        + (
            f"rank {peer} is alive but late (a slow start-up): raise the process group's timeout, or find what holds it"
            if late
            else f"rank {peer} (or the store's host) went away first: its own log has the first error (often an OOM or an "
            "exception at start-up)"
        )
    )


def _gloo_connect(ctx: AdviceContext) -> str:
    iface = ctx.details.get("iface")
    if iface:
        return (
            f"gloo found no network interface named {iface} on this node (GLOO_SOCKET_IFNAME, or gloo's default): "
            "set GLOO_SOCKET_IFNAME to an interface every node has and reaches the others on (`ip -br addr`)"
        )
    return (
        "gloo could not connect every pair of ranks while setting up a process group: a firewall between the nodes, "
        "an interface the others cannot reach (set GLOO_SOCKET_IFNAME to the one they share: `ip -br addr`), or a "
        "rank that died during the set-up (its own log has the first error)"
    )


def _unresolved_host(ctx: AdviceContext) -> str:
    d = ctx.details
    host, reason = d.get("host", "the store's host"), (d.get("reason") or "").strip()
    why = f" ({reason})" if reason else ""
    return (
        f"The rendezvous host name {host} does not resolve on this node{why}: MASTER_ADDR (or --rdzv-endpoint) "
        "names a host this node's DNS or /etc/hosts does not know; give an IP address or a name every node "
        "resolves (`getent hosts <name>` on each; on Kubernetes the headless service must exist before the pods "
        "dial it)"
    )


_CONNECT = (
    "A process could not connect to its master before the first step (connect timeout: an unroutable or "
    "firewalled address, a master that never started): check the address it dialled (MASTER_ADDR, the "
    "weight-sync or server host) is reachable from every node, and the interface NCCL_SOCKET_IFNAME / "
    "GLOO_SOCKET_IFNAME"
)
_PLACEMENT_GROUP = (
    "Ray could not create the placement group in time: the cluster has fewer free GPUs/CPUs than the job asks "
    "for (another job or a leftover Ray cluster holds them: `ray status`); free them, ask for fewer "
    "(placement/colocation settings), or raise SKYRL_RAY_PG_TIMEOUT_IN_S if an autoscaler is still adding nodes"
)


def _size_on_wire(ctx: AdviceContext) -> str:
    """A transport got more bytes than the collective posted."""
    d = ctx.details
    sizes = ""
    if d.get("local_size") and d.get("remote_size"):  # NCCL's IB: what this rank sends, what its peer posted
        sizes = f" (this rank sends {d['local_size']} bytes where its peer posted {d['remote_size']})"
    elif d.get("received") and d.get("expected"):
        sizes = f" ({d['received']} bytes arrived where {d['expected']} were posted)"
    return (
        f"The ranks disagree on a collective's size{sizes}: the transport received a message of another size than "
        "this rank posted. Either the ranks call the collective with different tensor shapes or in a different "
        "order (uneven last batches, a rank-only branch; TORCH_DISTRIBUTED_DEBUG=DETAIL checks shapes at the call), "
        "or NCCL settings differ between nodes (NCCL_PROTO, NCCL_ALGO, NCCL_BUFFSIZE or the NCCL version: compare "
        "each node's environment); if neither, on InfiniBand check the NICs' PCI write ordering (NCCL_IB_DISABLE=1 "
        "tells the fabric apart)"
    )


_GLOO_WAIT = timed_out(
    "A gloo collective timed out waiting for a peer that never arrived (a rank is stuck or died silently)"
)


def _dump_signal_head(ctx: AdviceContext) -> str:
    """A rank's watchdog timed out and signalled every rank to dump its Flight Recorder."""
    who = ctx.details.get("from_rank")
    if who is not None:
        first = (
            f"Rank {who}'s watchdog timed out on a collective first and signalled this rank to dump its Flight "
            f"Recorder (this rank did not time out itself): rank {who}'s log names the collective"
        )
    elif ctx.details.get("other"):
        first = (
            "Another rank's watchdog timed out on a collective and signalled this rank to dump its Flight "
            "Recorder (this rank did not time out itself): the rank whose log has `Watchdog caught collective "
            "operation timeout` names the collective"
        )
    else:
        first = (
            "A collective timed out and the watchdog dumped its debug info and ended the process (a collective "
            "timeout, not a hung watchdog)"
        )
    return (
        f"{first}; the rank behind is the one that never entered it: the dumps say which (`nccl-tune diagnose` "
        f"on the folder of dumps; {FR_ENV_HINT} makes them)"
    )


def _scheduler(ctx: AdviceContext) -> str:
    """Slurm ended the step or one of its tasks."""
    reason = (ctx.details.get("reason") or "").strip()
    if reason == "TIME LIMIT":
        return (
            "Slurm ended the job at its time limit (CANCELLED ... DUE TO TIME LIMIT), not a failure of the run: "
            "raise --time, or checkpoint before the limit (#SBATCH --signal) and requeue"
        )
    if reason:
        return f"Slurm cancelled the job ({reason.lower()}): `sacct -j <job>` says why; resubmit if it was the node"
    if ctx.details.get("how") == "Killed":
        return (
            "Slurm reports a task Killed (SIGKILL) with no error of its own: usually the job's memory limit (--mem); "
            "`sacct -j <job> -o State,MaxRSS,ReqMem` shows it"
        )
    return (
        "Slurm ended the step (scancel, a node failure, or another task's failure under --kill-on-bad-exit): the "
        "first task that failed is above; `sacct -j <job>` says why"
    )


def _outside_signal(ctx: AdviceContext) -> str:
    return (
        f"torchrun was sent {ctx.signal_name or 'a signal'} from outside and stopped its workers, with no error of the "
        "run's before it: a scheduler's time limit or preemption, `scancel`, `kill`, or a container or node shutting "
        "down; the scheduler's own record says which (`sacct -j <job>`, `kubectl describe pod`)"
    )


_SIGNAL_ADVICE = {
    "SIGBUS": (
        "Ended by SIGBUS with no error of its own: a write to shared memory or a memory-mapped file past its end, "
        "almost always /dev/shm full (Docker's default is 64 MB; NCCL's buffers and DataLoader workers live there): "
        "run the container with --shm-size=16g or --ipc=host (`df -h /dev/shm`), or a checkpoint file cut short while "
        "it was mapped"
    ),
    "SIGABRT": (
        "Ended by SIGABRT with no error of its own in this log: the process aborted itself, usually a C++ exception "
        "nothing caught (`terminate called after throwing ...`: the NCCL watchdog taking the process down after a "
        "collective error or timeout, a gloo enforce) or a failed assert in native code; that rank's own stderr "
        "before the abort has the reason (torchrun --tee 3, or its log file), and the other ranks' logs the first error"
    ),
}
"""Advice for a process a signal ended that says more than the signal's name (kills have their own)."""


def _signalled(ctx: AdviceContext) -> str:
    return _SIGNAL_ADVICE.get(ctx.signal_name or "") or unrecognised_crash(ctx)


def _child_exit(ctx: AdviceContext) -> str:
    """A launched process exited: by a signal that says more, else with a code of its own and no error the
    log shows."""
    if ctx.signal_name in _SIGNAL_ADVICE:
        return _SIGNAL_ADVICE[ctx.signal_name]
    code = ctx.details.get("exit_code")
    if (code or 0) <= 0:
        return unrecognised_crash(ctx)
    who = f"Rank {ctx.rank}" if ctx.rank is not None else "A worker process"
    return (
        f"{who} exited first with code {code} (its own exit, not a signal) and no error this log shows: its own "
        "output has the reason (torchrun --tee 3 or --log-dir keeps each rank's; an `error_file` in the failure "
        "summary holds its traceback when the script uses @record); the other ranks' lost connections or timeouts "
        "followed from it"
    )


def _build_mismatch(ctx: AdviceContext) -> str:
    lib = ctx.details.get("library") or "a compiled extension"
    return (
        f"{lib} was built against another torch or CUDA (undefined symbol): reinstall it against the installed torch "
        "(`pip install --no-build-isolation --force-reinstall <package>`), or pin torch to the version it was built for"
    )


def _exception(ctx: AdviceContext) -> str:
    exc = ctx.details.get("exception")
    return f"The program raised {exc or 'an exception'} that is not a known infrastructure failure: read the evidence lines"


# --- rules a line means in the context of its traceback -------------------------------------

_VALIDATION_FRAME = re.compile(rb'File "[^"\n]+", line \d+, in (?:validate|_?check|verify)\w*')
_RENDEZVOUS_FRAME = re.compile(
    rb'File "[^"\n]+", line \d+, in (?:init_process_group|_store_based_barrier|_create_c10d_store|next_rendezvous'
    rb"|_rendezvous_helper|rendezvous)\b"
)
_PEER_RESET_RAISED = re.compile(r"\b\w*(?:Error|Exception): Connection (?:reset|closed) by peer\s*$")

CONFIG_ASSERTION = Rule("config_assertion_frame", F.CONFIG_ERROR, Kind.ROOT, (), None, "validation", advice=_validation)
"""A bare ``AssertionError`` raised inside a config validation function."""
RENDEZVOUS_RESET = Rule("rendezvous_reset_frame", F.INIT_FAILURE, Kind.INIT, (), None, "rendezvous")
"""A peer's reset raised inside ``init_process_group`` (gloo's, or the store's): the rendezvous failed."""
TORCHRUN_ROOT_CAUSE = Rule("torchrun_root_cause", F.CRASH, Kind.CRASH, (), None, "child_exit", advice=_child_exit)
"""torchrun's ``Root Cause (first observed failure)`` block (its rank, exit code and signal)."""


def _validation_assertion(m: re.Match[str] | None, msg: str, before: Callable[[], bytes]) -> Rule | None:
    """An ``AssertionError`` raised in a config validation function (a traceback frame ``in
    validate_...``, as SkyRL's batch-size checks are) is the command refusing its config."""
    if m is None or m.group("exception") != "AssertionError":
        return None
    return CONFIG_ASSERTION if _VALIDATION_FRAME.search(before()) else None


def _rendezvous_reset(m: re.Match[str] | None, msg: str, before: Callable[[], bytes]) -> Rule | None:
    """``Connection reset by peer`` raised from a frame of the rendezvous (``init_process_group``,
    the store's barrier) in the same traceback is a rendezvous that failed (a peer or the master
    went away while the group formed), not a peer's teardown: the same line mid-training is."""
    if not _PEER_RESET_RAISED.search(msg):
        return None
    window = before()
    head = window.rfind(b"Traceback (most recent call last)")
    return RENDEZVOUS_RESET if head >= 0 and _RENDEZVOUS_FRAME.search(window, head) else None


# --- the rules, in the order they are tried -------------------------------------------------

_THC = r"(?:THCudaCheck FAIL file=\S+ line=\d+ error=(?P<code>\d+)|cuda runtime error \((?P<code2>\d+)\)) : "
"""The head of PyTorch's CUDA error before 1.5 (its THC library's check)."""

RULES: tuple[Rule, ...] = (
    # --- the command refused its configuration -------------------------------------------
    Rule(
        "hydra_unknown_key",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("Could not override",),
        _rx(r"Could not override '(?P<key>[^']+)'"),
        "unknown_key",
        advice=_unknown_key,
    ),
    Rule(
        "hydra_not_in_struct",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("is not in struct",),
        _rx(r"Key '(?P<key>[^']+)' is not in struct"),
        "unknown_key",
        advice=_unknown_key,
    ),
    Rule(
        "dataclass_unknown_key",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("Invalid fields",),
        _rx(r"Invalid fields? \{(?P<key>[^}]*)\} for (?P<config>\w+)"),
        "unknown_key",
        advice=_unknown_key,
    ),
    Rule(
        "dataclass_plus_prefix",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("prefix for adding new config fields is not supported",),
        _rx(r"prefix for adding new config fields is not supported: '(?P<key>[^']*)'"),
        "plus_prefix",
        advice=_plus_prefix,
    ),
    Rule(
        "hydra_bad_override",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("Error merging override", "Error parsing override", "mismatched input", "no viable alternative"),
        None,
        "bad_value",
    ),
    Rule(
        "config_validation",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("ValidationError", "ConfigKeyError", "ConfigAttributeError"),
        _rx(r"(?:omegaconf\.errors\.|pydantic[\w.]*\.)?(?:ValidationError|ConfigKeyError|ConfigAttributeError)\b"),
        "bad_value",
    ),
    Rule(
        "config_assertion",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("AssertionError",),
        _rx(
            r"AssertionError: (?P<detail>.*(?:should be|must be|divisible|batch_size|max_prompt_length"
            r"|max_input_length|max_generate_length|num_gpus|placement).*)"
        ),
        "validation",
        advice=_validation,
    ),
    Rule(
        "argparse_error",
        F.CONFIG_ERROR,
        Kind.ROOT,
        (": error: ",),
        _rx(r"^[\w./-]+: error: (?:unrecognized arguments|argument |the following arguments are required)"),
        "bad_value",
    ),
    Rule(
        "command_not_found",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("command not found",),
        _rx(r"(?P<cmd>[\w./-]+): command not found"),
        "command",
        advice=_command,
    ),
    # --- NCCL's InfiniBand verbs (first: their errno texts read like host memory) -------------
    Rule(
        "ib_verbs_call",
        F.NCCL_ERROR,
        Kind.ROOT,
        ("ibv_",),
        _rx(r"Call to (?P<call>ibv_\w+) failed(?: with error (?P<error>[^,(]+))?"),
        "ib_verbs",
        exclude=("retrying",),
        advice=_ib_verbs,
    ),
    Rule(
        "ib_completion_error",
        F.NCCL_ERROR,
        Kind.ROOT,
        ("Got completion", "got completion with error", "IBV_WC_"),
        _rx(r"NET/IB\w*\s*:\s*Got completion from peer (?P<peer>\S+)|got completion with error|IBV_WC_\w+"),
        "transport",
        advice=_transport,
    ),
    # --- host memory (before device OOM: Ray's OutOfMemoryError is host RAM) ----------------
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
        _rx(r"srun: error: \S+: tasks? [\d,-]+: Out Of Memory"),
        "kernel_oom",
        advice=_KERNEL_OOM,
    ),
    Rule(
        "host_alloc_failed",
        F.HOST_OOM,
        Kind.ROOT,
        ("MemoryError", "std::bad_alloc", "Cannot allocate memory", "can't allocate memory"),
        _rx(r"(?<![A-Za-z])MemoryError\b|std::bad_alloc|Cannot allocate memory|DefaultCPUAllocator: can't allocate"),
        "host_alloc",
        exclude=("OutOfMemoryError",),
        advice=host_memory("a host (CPU) allocation failed"),
    ),
    # --- device memory ----------------------------------------------------------------------
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
        _rx(
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
        _rx(
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
        _rx(r"Bfloat16 is only supported on GPUs|does not support bfloat16"),
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
        _rx(r"ValueError: (?:Current node has no GPU available|Ray does not allocate any GPUs on the driver node)"),
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
        _rx(
            r"(?:ValueError|TypeError|Value error,)[: ].*?\b(?P<arg>max_model_len|max_num_batched_tokens|max_num_seqs"
            r"|tensor parallel size|tensor_parallel_size|pipeline parallel size|pipeline_parallel_size|attention heads"
            r"|gpu_memory_utilization|GPU memory utilization|kv_cache_dtype|block_size|swap_space|quantization"
            r"|max_seq_len_to_capture|max_lora_rank|enforce_eager|data_parallel_size|EngineArgs|SamplingParams|dtype)\b"
        ),
        "engine_args",
        advice=_engine_args,
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
        _rx(_THC + r"out of memory"),
        "cuda_oom",
        advice=oom_by_phase,
    ),
    # --- CUDA errors other than OOM ---------------------------------------------------------
    Rule(
        "cuda_ecc",
        F.CUDA_ERROR,
        Kind.ROOT,
        ("ECC error", "uncorrectable ECC"),
        None,
        "ecc",
        advice="Uncorrectable ECC error: this GPU's memory is faulty; not a config problem: drain the node and have the GPU "
        "reset or replaced (`nvidia-smi -q -d ECC`)",
    ),
    Rule(
        "cuda_device_assert",
        F.CUDA_ERROR,
        Kind.ROOT,
        ("device-side assert", "Assertion `"),
        _rx(
            r"(?P<kernel>[\w:()<>]+): block: \[[^\]]*\], thread: \[[^\]]*\] Assertion `(?P<cond>[^`]+)` failed"
            r"|device-side assert"
        ),
        "device_assert",
        advice=_device_assert,
    ),
    Rule(
        "cuda_illegal_access",
        F.CUDA_ERROR,
        Kind.ROOT,
        (
            "illegal memory access",
            "illegal address",
            "misaligned address",
            "unspecified launch failure",
            "illegal instruction",
            "ILLEGAL_ADDRESS",
            "MISALIGNED_ADDRESS",
            "ILLEGAL_INSTRUCTION",
        ),
        None,
        "illegal_access",
        advice="Illegal memory access in a kernel: rerun with CUDA_LAUNCH_BLOCKING=1 to find it; if it is in NCCL, try "
        "NCCL_CUMEM_ENABLE=0 or another NCCL_PROTO; check `dmesg | grep Xid` for a hardware fault",
    ),
    Rule(
        "gpu_lost",
        F.CUDA_ERROR,
        Kind.ROOT,
        ("fallen off the bus", "GPU is lost", "NVRM: Xid"),
        _rx(r"fallen off the bus|GPU is lost|NVRM: Xid \([^)]*\): (?P<xid>\d+)"),
        "gpu_lost",
        advice="The GPU was lost (Xid / fell off the bus): a hardware or driver fault; drain the node (`dmesg | grep Xid`)",
    ),
    # cudaErrorDevicesUnavailable: another process holds the GPU in exclusive compute mode, or it cannot be used
    Rule(
        "gpu_busy",
        F.CUDA_ERROR,
        Kind.ROOT,
        ("cudaErrorDevicesUnavailable", "CUDA-capable device(s) is/are busy"),
        None,
        "gpu_busy",
        advice="The GPU is busy or unavailable to this process (cudaErrorDevicesUnavailable): another process holds it in "
        "exclusive compute mode, or the device cannot be used; `nvidia-smi` shows its compute mode and processes "
        "(`nccl-tune doctor` too): free it, or set the compute mode back to Default (`nvidia-smi -c 0`)",
    ),
    # a build with no code for this GPU's architecture (torch, or an extension: flash-attn, vLLM's kernels)
    Rule(
        "cuda_no_kernel_image",
        F.CUDA_ERROR,
        Kind.ROOT,
        ("error: no kernel image",),
        None,
        "no_kernel_image",
        advice="This build has no GPU code for the device's architecture (no kernel image): install torch, or the "
        "extension in the traceback (flash-attn, vLLM's kernels), built for this GPU (H100: sm_90); "
        "`python -c 'import torch; print(torch.cuda.get_arch_list())'` lists what torch carries",
    ),
    Rule(
        "nccl_unhandled_cuda",
        F.CUDA_ERROR,
        Kind.ROOT,
        ("unhandled cuda error", "ncclUnhandledCudaError"),
        None,
        "nccl_cuda",
        advice=_nccl_cuda,
    ),
    # NCCL's CUDACHECK warns "Cuda failure 'message'" and fails the call (its 'out of memory' is read above)
    Rule(
        "nccl_warn_cuda_failure",
        F.CUDA_ERROR,
        Kind.ROOT,
        ("Cuda failure",),
        _rx(r"(?:(?P<where>[\w./-]+\.(?:cc|cu|h)):\d+ )?NCCL WARN .*Cuda failure (?:\d+ )?'(?P<detail>[^']*)'"),
        "nccl_cuda",
        advice=_nccl_cuda,
    ),
    # nccl-tests' CUDACHECK prints "host: Test CUDA failure file.cu:N '<cudaGetErrorString>'": its
    # 'out of memory', illegal accesses and busy devices are read by the rules above, the rest here
    Rule(
        "cuda_error",
        F.CUDA_ERROR,
        Kind.ROOT,
        (
            "CUDA error:",
            "CUDA driver error",
            "CUBLAS_STATUS_",
            "CUDNN_STATUS_",
            "cuDNN error",
            "CUDA_ERROR_",
            "CUDBG_EXCEPTION_",
            "Test CUDA failure",
        ),
        _rx(
            r"(?:CUDA (?:driver )?error: |Test CUDA failure \S+:\d+ ')(?P<detail>[^.'\n]+)|CUBLAS_STATUS_\w+"
            r"|CUDNN_STATUS_\w+|cuDNN error|CUDA_ERROR_\w+|CUDBG_EXCEPTION_\w+"
        ),
        "cuda",
    ),
    Rule(
        "thc_cuda_error",
        F.CUDA_ERROR,
        Kind.ROOT,
        ("error=", "cuda runtime error ("),
        _rx(_THC + r"(?P<detail>.+?)(?: at \S+:\d+)?\s*$"),
        "cuda",
    ),
    # --- NCCL's own errors ------------------------------------------------------------------
    # NCCL's bootstrap receiving a message of another size than it expects from a peer ("bootstrap.cc:77 NCCL
    # WARN Message truncated : received 1024 bytes instead of 256", then ncclInternalError): ranks that disagree
    # on how the communicator is set up (NCCL builds or settings that differ between nodes, a group created
    # with different rank lists)
    Rule(
        "nccl_bootstrap_truncated",
        F.NCCL_ERROR,
        Kind.ROOT,
        ("NCCL WARN Message truncated",),
        _rx(r"Message truncated : received (?P<got>\d+) bytes instead of (?P<want>\d+)"),
        "bootstrap_mismatch",
        advice="NCCL's bootstrap got a message of another size than it expects from a peer (Message truncated): the ranks "
        "disagree on how the communicator is set up: NCCL or torch builds that differ between nodes or containers "
        "(`python -c 'import torch; print(torch.cuda.nccl.version())'` on each), NCCL variables set on some nodes "
        "only, or a group created with different rank lists on different ranks (new_group must get the same ranks, "
        "in the same order, on every rank)",
    ),
    Rule(
        "nccl_bad_env_value",
        F.NCCL_ERROR,
        Kind.ROOT,
        ("Unrecognized element token", "Unrecognized prefix token", "All entries except the first must have a prefix"),
        _rx(
            r"Unrecognized (?:element|prefix) token \"(?P<token>[^\"]*)\" when parsing \"(?P<value>[^\"]*)\"|must have a prefix"
        ),
        "invalid_env",
        advice=_invalid_env,
    ),
    Rule(
        "nccl_no_algorithm",
        F.NCCL_ERROR,
        Kind.ROOT,
        ("No algorithm/protocol available",),
        _rx(
            r"No algorithm/protocol available for function (?P<function>\w+)"
            r"(?:.*?NCCL_ALGO was set to (?P<algo>[^.]*)\.)?(?:.*?NCCL_PROTO was set to (?P<proto>[^.]*)\.)?"
        ),
        "no_algorithm",
        advice=_no_algorithm,
    ),
    Rule(
        "nccl_remote",
        F.NCCL_ERROR,
        Kind.ROOT,
        ("remote process exited", "ncclRemoteError"),
        None,
        "remote",
        advice="A peer process exited or the network dropped (NCCL remote error / connection reset): find the first error on "
        "the other ranks or nodes; on several nodes check the fabric with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET",
    ),
    # NCCL's sockets given no usable address (the interface NCCL_SOCKET_IFNAME names is missing or has
    # none): NCCL warns, then fails the call with ncclInternalError
    Rule(
        "nccl_no_interface",
        F.NCCL_ERROR,
        Kind.ROOT,
        ("is neither AF_INET", "no socket interface found"),
        _rx(r"connecting to address .*with family (?P<family>\d+) is neither AF_INET|no socket interface found"),
        "socket_ifname",
        advice="NCCL found no usable address for its sockets: the interface NCCL_SOCKET_IFNAME names is missing on this "
        "host or has no IPv4/IPv6 address; set it to an interface `ip -br addr` lists on every node (a prefix such "
        "as eth, or ^docker,lo to exclude) or unset it; `nccl-tune doctor` checks it",
    ),
    # NCCL could not create or grow its shared-memory segment (a small /dev/shm): the call fails with a system error
    Rule(
        "nccl_shm",
        F.NCCL_ERROR,
        Kind.ROOT,
        (
            "Error while creating shared memory segment",
            "Error while attaching to shared memory segment",
            "posix_fallocate failed",
            "failed to extend /dev/shm",
        ),
        None,
        "shm",
        advice=_NCCL_SHM,
    ),
    # two ranks of one communicator on one GPU (ranks or colocated engines given the same device)
    Rule(
        "nccl_duplicate_gpu",
        F.NCCL_ERROR,
        Kind.ROOT,
        ("Duplicate GPU detected",),
        _rx(
            r"Duplicate GPU detected : rank (?P<rank_a>\d+) and rank (?P<rank_b>\d+) both on CUDA device (?P<device>\w+)"
        ),
        "duplicate_gpu",
        advice="Two ranks of one NCCL communicator are on the same GPU (Duplicate GPU detected): give each process its own "
        "device (CUDA_VISIBLE_DEVICES, LOCAL_RANK) and check where colocated actors are placed (inference engines and "
        "trainer ranks that share a device must not join one NCCL group, e.g. for weight sync)",
    ),
    # nccl-tests' NCCLCHECK prints "host: Test NCCL failure file.cu:N '<ncclGetErrorString> / <last error>'":
    # its 'unhandled cuda error' and 'remote process exited' are read by the rules above, as in PyTorch's wording
    Rule(
        "nccl_error",
        F.NCCL_ERROR,
        Kind.ROOT,
        (
            "NCCL error",
            "NCCL Error",
            "ncclSystemError",
            "ncclInternalError",
            "ncclInvalidUsage",
            "ncclInvalidArgument",
            "NCCL communicator was aborted",
            "ncclCommInitRank failed",
            "Test NCCL failure",
        ),
        _rx(
            r"NCCL [Ee]rror|nccl(?:System|Internal|InvalidUsage|InvalidArgument)\w*|communicator was aborted"
            r"|ncclCommInitRank failed|Test NCCL failure"
        ),
        "nccl",
        # torch 1.x's "communicator was aborted ... Original reason for failure was: [Rank 0] Watchdog caught
        # collective operation timeout: ..." is the time-out, read by nccl_watchdog_timeout
        exclude=("collective operation timeout",),
        details=_nccl_error_subtype,
        refined={
            "system": "NCCL hit a system error: rerun with NCCL_DEBUG=INFO to see the failing call; the usual causes are /dev/shm "
            "size, the memlock limit (ulimit -l) and the socket interface (NCCL_SOCKET_IFNAME)",
            "invalid_usage": "NCCL reported invalid usage: rerun with NCCL_DEBUG=WARN to see the call it refused; a forced NCCL_ALGO or "
            "NCCL_PROTO that a collective cannot use, or mismatched tensors across ranks, are the usual causes",
        },
    ),
    # --- rendezvous, store, ports, connect ---------------------------------------------------
    Rule(
        "c10d_connect_retry",
        F.INIT_FAILURE,
        Kind.SUPPORT,
        ("failed to connect to",),
        _rx(
            r"socket has failed to connect to .*(?:Connection refused|errno: 11[01]|No route to host|Connection timed out)"
        ),
        "rendezvous",
    ),
    # c10d could not resolve the store's host name ("[c10d] The IPv6 network addresses of (trainer-master-0,
    # 29500) cannot be retrieved (gai error: -2 - Name or service not known)"; torch 2.13 prints it only when
    # no address of either family resolves): names the cause of a rendezvous that then times out dialling
    # that host (``classify`` checks the host)
    Rule(
        "c10d_unresolved_host",
        F.INIT_FAILURE,
        Kind.SUPPORT,
        ("gai error",),
        _rx(
            r"IPv[46] network addresses of \((?P<host>[^,]+), (?P<port>\d+)\) cannot be retrieved \(gai error: -?\d+ - "
            r"(?P<reason>[^)]+)\)"
        ),
        "unresolved_host",
        advice=_unresolved_host,
    ),
    Rule(
        "nccl_connect",
        F.INIT_FAILURE,
        Kind.INIT,
        ("Connect to",),
        _rx(r"(?:socketStartConnect|socketPollConnect|Net|NET/Socket|NET/IB)\w*\s*: Connect to (?P<peer>\S+) failed"),
        "nccl_connect",
        advice=_CONNECT,
    ),
    Rule(
        "nccl_socket_transport",
        F.NCCL_ERROR,
        Kind.ROOT,
        (
            "socketProgress",
            "NET/Socket : socket progress error",
            "Connection closed by remote peer",
            "Net : Call to",
            "Call to recv failed",
            "Call to send failed",
        ),
        # older NCCL: "NCCL WARN Call to recv failed : Connection reset by peer"
        _rx(
            r"socketProgress\w*: (?:Connection closed by remote peer|Call to (?:recv from|send to) (?P<peer>\S+) failed)"
            r"|NET/Socket : socket progress error|Net : Call to \w+ (?:from|to) \S+ failed|Connection closed by remote peer"
            r"|Call to (?:recv|send) failed\b"
        ),
        "transport",
        advice=_transport,
    ),
    # a rank setting up an NCCL communicator, whose peer (the rank that publishes NCCL's id in the c10d
    # store) went away or stayed late: "... retrieving ncclUniqueId from [0] via c10d key-value store by
    # key '0', but store->get('0') got error: Connection reset by peer"
    Rule(
        "nccl_id_store",
        F.INIT_FAILURE,
        Kind.INIT,
        ("got error:",),
        _rx(r"retrieving ncclUniqueId from \[(?P<peer_rank>\d+)\].*got error: (?P<error>[^.]+)"),
        "nccl_id_store",
        advice=_nccl_id_store,
    ),
    # gloo (CPU process groups, also next to NCCL ones) setting up its pairs of ranks: "Gloo connectFullMesh
    # failed with [.../pair.cc:144] no error", or no interface of the name GLOO_SOCKET_IFNAME gives
    # ("[enforce fail at .../device.cc:83] ifa != nullptr. Unable to find address for: eth0")
    Rule(
        "gloo_connect",
        F.INIT_FAILURE,
        Kind.INIT,
        ("connectFullMesh failed", "Unable to find address for"),
        _rx(r"connectFullMesh failed|Unable to find address for:? (?P<iface>\S+)"),
        "gloo_connect",
        advice=_gloo_connect,
    ),
    Rule(
        "port_in_use",
        F.INIT_FAILURE,
        Kind.ROOT,
        ("Address already in use", "EADDRINUSE", "failed to listen on any local network address"),
        None,
        "port_in_use",
        exclude=("NCCL WARN", "NCCL INFO"),
        details=_listen_port,
        advice=_port_in_use,
    ),
    Rule(
        "rendezvous_timeout",
        F.INIT_FAILURE,
        Kind.INIT,
        (
            "RendezvousTimeoutError",
            "RendezvousConnectionError",
            "RendezvousClosedError",
            "store based barrier",
            "while trying to connect to",
            "waitForInput",
            "DistNetworkError",
            "DistStoreError",
            "Socket Timeout",
            "waiting for clients",
        ),
        _rx(
            r"Rendezvous\w*Error|store based barrier|timed out after \d+ ?ms while trying to connect to"
            r"|waitForInput: socket .* timed out|DistNetworkError|DistStoreError|Socket Timeout"
            r"|Timed out after \d+ seconds waiting for clients"
        ),
        "rendezvous",
        exclude=("NCCL INFO",),
    ),
    Rule(
        "ray_connect",
        F.INIT_FAILURE,
        Kind.INIT,
        (
            "Failed to connect to GCS",
            "Could not find any running Ray instance",
            "Can't find a `node_ip_address.json`",
            "Unable to connect to GCS",
        ),
        None,
        "ray",
        advice="Could not reach the Ray cluster: start it (`ray start --head`) or point RAY_ADDRESS at it; check `ray status`",
    ),
    Rule(
        "connect_timeout",
        F.INIT_FAILURE,
        Kind.INIT,
        ("Connect timeout", "ConnectTimeout", "Connection timed out", "No route to host"),
        _rx(r"Connect timeout \[|\[Errno 11[03]\]|ConnectTimeout(?:Error)?\b|Connection timed out|No route to host"),
        "connect",
        exclude=("NCCL WARN", "NCCL INFO"),
        advice=_CONNECT,
    ),
    Rule(
        "ray_placement_group",
        F.INIT_FAILURE,
        Kind.ROOT,
        ("placement group", "Placement group"),
        _rx(r"Failed to create placement group|[Pp]lacement group creation timed out|PlacementGroupSchedulingError"),
        "placement_group",
        advice=_PLACEMENT_GROUP,
    ),
    Rule(
        "ray_unschedulable",
        F.INIT_FAILURE,
        Kind.SUPPORT,
        ("cannot be scheduled right now", "No available node types can fulfill"),
        None,
        "placement_group",
        advice=_PLACEMENT_GROUP,
    ),
    # --- collectives that did not complete --------------------------------------------------
    Rule(
        "collective_fingerprint_mismatch",
        F.COLLECTIVE_MISMATCH,
        Kind.ROOT,
        ("Detected mismatch between collectives",),
        None,
        "fingerprint",
    ),
    # a transport receiving more bytes than the collective posted: the ranks disagree on the size (or on the
    # NCCL settings that shape the messages): NCCL's IB ("NET/IB : req 0/1 tag 3 peer ... collective mismatch
    # error, local size 786432 remote size 262144"; before 2.12 "... mismatch error local size N remote N"),
    # its sockets ("NET/Socket : peer ... message truncated : receiving N bytes instead of M. If you believe
    # ... a mismatch in collective sizes or environment settings ... between ranks"), gloo ("[enforce fail
    # at .../pair.cc:456] op.preamble.length <= op.nbytes. 8 vs 4. Received data size doesn't match expected
    # size. Is there a distributed collective mismatch in your code?")
    Rule(
        "transport_size_mismatch",
        F.COLLECTIVE_MISMATCH,
        Kind.ROOT,
        ("collective mismatch error", "mismatch in collective sizes", "collective mismatch in your code"),
        _rx(
            r"collective mismatch error,? local size (?P<local_size>\d+) remote (?:size )?(?P<remote_size>\d+)"
            r"|message truncated : receiving (?P<received>\d+) bytes instead of (?P<expected>\d+)"
            r"|(?:op\.preamble\.length <= op\.nbytes\. (?P<received_gloo>\d+) vs (?P<expected_gloo>\d+)\. )?"
            r"Received data size doesn't match expected size"
        ),
        "size_on_wire",
        details=_gloo_sizes,
        advice=_size_on_wire,
    ),
    Rule(
        "nccl_watchdog_timeout",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        (
            "Watchdog caught collective operation timeout",
            "Caught collective operation timeout",
            "timed out in blocking wait",
        ),
        # the work may be cut short where a terminal wrapped the line (the reader joins the rows that complete it)
        _rx(
            r"(?:[Cc]aught collective operation timeout|Work (?=WorkNCCL\())(?::\s*)?"
            r"(?:WorkNCCL\((?P<work>(?:[^()]|\([^()]*\))*)(?P<closed>\))?)?"
        ),
        "nccl_watchdog",
        details=_watchdog_work,
        whole=_WATCHDOG_WHOLE,
    ),
    Rule(
        "gloo_timeout",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        ("Timed out waiting",),
        _rx(r"Timed out waiting (?P<timeout_ms>\d+) ?ms for (?P<direction>recv|send) operation"),
        "gloo",
        details=_gloo_op,
        advice=_GLOO_WAIT,
    ),
    Rule(
        "monitored_barrier",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        ("monitoredBarrier",),
        _rx(r"[Rr]anks? (?P<ranks>\d+(?:, ?\d+)*) failed to pass monitoredBarrier"),
        "monitored_barrier",
        details=_barrier_culprits,
    ),
    Rule(
        "watchdog_check_timeout_frame",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        ("checkTimeout",),
        _rx(r"WorkNCCL::checkTimeout"),
        "watchdog_frames",
    ),
    Rule(
        "heartbeat_monitor",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        (
            "Heartbeat monitor timed out",
            "watchdog got stuck",
            "Watchdog thread got stuck",
            "heartbeat monitor timed out",
        ),
        None,
        "heartbeat",
        advice=timed_out(
            "The watchdog itself hung (heartbeat monitor): a CUDA/NCCL call never returned, usually a rank stuck "
            "in a collective"
        ),
    ),
    # the Flight Recorder's dump signal, not a hung watchdog: a rank's watchdog timed out on a collective and
    # told every rank through the store to dump ("Received a dump signal due to a collective timeout from rank
    # 0 and we will try our best to dump the debug info", "... from this local rank ...", torch 2.6+'s
    # "Observed flight recorder dump signal from another rank via TCPStore"), then each rank ends itself
    # ("Terminating the process after attempting to dump debug info, due to collective timeout or exception")
    Rule(
        "dump_signal",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        (
            "Received a dump signal due to a collective timeout",
            "Received a global dump signal",
            "Observed flight recorder dump signal",
            "Terminating the process after attempting to dump debug info",
        ),
        _rx(
            r"dump signal due to a collective timeout from\s+(?:rank (?P<from_rank>\d+)|(?P<local>this local rank))"
            r"|(?P<other>dump signal from another rank)|dump signal|Terminating the process after attempting to dump"
        ),
        "dump_signal",
        details=_dump_from_rank,
        advice=timed_out(_dump_signal_head),
    ),
    Rule(
        "nccl_tests_timeout",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        ("Test timeout (",),
        _rx(r"Test timeout \((?P<timeout_s>\d+)s\)"),
        "nccl_tests",
        advice="nccl-tests gave up on a collective after its -T timeout: a rank, GPU or link is stuck (not slow); rerun "
        "with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and compare the ranks' last lines",
    ),
    # PyTorch 2.4+'s watchdog: "[PG ID 0 PG GUID 0(default_pg) Rank 0] Timeout at NCCL work: 25, last enqueued
    # NCCL work: 25, last completed NCCL work: 24."
    Rule(
        "nccl_work_timeout",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        ("Timeout at NCCL work",),
        _rx(
            r"Timeout at NCCL work: (?P<seq>\d+), last enqueued NCCL work: (?P<enqueued>-?\d+), last completed NCCL "
            r"work: (?P<completed>-?\d+)"
        ),
        "nccl_watchdog",
        details=_work_seq,
    ),
    Rule(
        "some_nccl_ops_failed",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        ("Some NCCL operations have failed or timed out",),
        None,
        "nccl_generic",
    ),
    Rule(
        "watchdog_exception",
        F.COLLECTIVE_TIMEOUT,
        Kind.TIMEOUT,
        ("detected by watchdog at work",),
        None,
        "nccl_generic",
    ),
    Rule(
        "gloo_pair_closed",
        F.COLLECTIVE_TIMEOUT,
        Kind.SYMPTOM,
        ("pair closure", "Application timeout caused"),
        None,
        "gloo",
        advice=_GLOO_WAIT,
    ),
    # --- a process died ---------------------------------------------------------------------
    # Slurm ending a step or job ("slurmstepd: error: *** STEP 12.0 ON node3 CANCELLED AT ... DUE TO TIME LIMIT ***")
    # or reporting a task it ended ("srun: error: node3: task 0: Terminated"): after the run's own error, if any
    Rule(
        "slurm_task_end",
        F.CRASH,
        Kind.SYMPTOM,
        ("error: *** JOB", "error: *** STEP", "srun: error:"),
        _rx(
            r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT \S+(?: DUE TO (?P<reason>[A-Z][A-Z ]*?))? \*\*\*"
            r"|srun: error: \S+: tasks? [\d,-]+: (?P<how>Terminated|Killed)\b"
        ),
        "scheduler",
        advice=_scheduler,
    ),
    # torchrun's agent itself sent a signal from outside ("Received 15 death signal, shutting down
    # workers" in torch 2.13, "Received Signals.SIGTERM death signal" in others, then "SignalException:
    # Process N got signal: 15"): a scheduler, a container stop, a user; after the run's own error, if
    # any (its consequence)
    Rule(
        "torchrun_signalled",
        F.CRASH,
        Kind.SYMPTOM,
        ("death signal", "SignalException: Process"),
        _rx(
            r"Received (?:Signals\.)?(?:(?P<signal>SIG[A-Z0-9]+)|(?P<signum2>\d+)) death signal"
            r"|SignalException: Process \d+ got signal: (?P<signum>\d+)"
        ),
        "outside_signal",
        details=_signal_number,
        advice=_outside_signal,
    ),
    Rule(
        "torchrun_child_failed",
        F.CRASH,
        Kind.CRASH,
        ("exitcode",),
        _rx(r"failed \(exitcode: (?P<exit_code>-?\d+)\) local_rank: (?P<rank>\d+)"),
        "child_exit",
        details=_exit_code,
        advice=_child_exit,
    ),
    Rule(
        "launcher_exit",
        F.CRASH,
        Kind.CRASH,
        ("exits with return code", "exited with code", "Exited with exit code", "command failed with exit code"),
        _rx(
            r"(?:--local_rank=(?P<rank>\d+)\S*.*)?(?:exits with return code = |exited with code |Exited with exit code "
            r"|[Cc]ommand failed with exit code )(?P<exit_code>-?[1-9]\d*)"
        ),
        "child_exit",
        details=_exit_code,
        advice=_child_exit,
    ),
    # nccl-tests relaying a failure up its calls (" .. host pid N: Test failure common.cu:N") before it exits
    Rule(
        "nccl_tests_failed",
        F.CRASH,
        Kind.CRASH,
        ("Test failure",),
        _rx(r"(?:^|\s)\.\. \S+ pid \d+: Test failure \S+:\d+\s*$"),
        "nccl_tests",
    ),
    Rule(
        "signal_received",
        F.CRASH,
        Kind.CRASH,
        ("received by PID", "Received SIG"),
        _rx(r"Signal (?P<signum>\d+) \((?P<signal>SIG\w+)\) received by PID|Received (?P<signal2>SIG\w+)"),
        "signal",
        details=_signal_named,
        advice=_signalled,
    ),
    # a DataLoader worker the kernel killed ("is killed by signal: Killed.": SIGKILL, host memory as a rule)
    Rule(
        "dataloader_killed",
        F.CRASH,
        Kind.CRASH,
        ("is killed by signal: Killed",),
        None,
        "killed",
        details=_sigkill,
        advice=KILLED,
    ),
    # a DataLoader worker's SIGBUS writing to a too small /dev/shm (before segfault: its "Bus error")
    Rule(
        "dataloader_bus_error",
        F.CRASH,
        Kind.CRASH,
        ("Unexpected bus error encountered in worker", "is killed by signal: Bus error"),
        None,
        "dataloader_shm",
        advice="A DataLoader worker died of SIGBUS writing to shared memory: /dev/shm is too small (Docker's default is 64 MB): "
        "run the container with --shm-size=16g or --ipc=host, or lower num_workers",
    ),
    # a compiled extension built against another torch ("ImportError: .../flash_attn_2_cuda...so: undefined
    # symbol: _ZN3c10...")
    Rule(
        "build_mismatch",
        F.CRASH,
        Kind.CRASH,
        ("ImportError", "OSError"),
        _rx(r"(?:ImportError|OSError): (?P<library>\S+?\.so[.\d]*): undefined symbol"),
        "build_mismatch",
        advice=_build_mismatch,
    ),
    # the model or tokenizer the command names could not be fetched from the Hugging Face Hub
    Rule(
        "hf_hub_unreachable",
        F.CRASH,
        Kind.CRASH,
        (
            "Error: We couldn't connect to 'https://huggingface.co'",
            "LocalEntryNotFoundError",
            "RepositoryNotFoundError",
            "GatedRepoError",
        ),
        None,
        "model_fetch",
        advice="The model or tokenizer could not be fetched from the Hugging Face Hub (no network from the node, a misspelled "
        "or gated repository): check the model path in the command, HF_TOKEN for a gated model, or download it once "
        "and run with HF_HUB_OFFLINE=1 so that every trial reads the local copy",
    ),
    # a weights or checkpoint file cut short or not what it claims (an interrupted download or copy, a write
    # that ran out of disk, a Git LFS pointer in place of the file): safetensors, torch.load, pickle
    Rule(
        "corrupt_checkpoint",
        F.CRASH,
        Kind.CRASH,
        ("SafetensorError", "PytorchStreamReader failed reading", "UnpicklingError: invalid load key"),
        None,
        "corrupt_checkpoint",
        advice="A weights or checkpoint file could not be read: it is cut short or is not the file it claims to be (an "
        "interrupted download or copy, a save that ran out of disk, a Git LFS pointer checked out in its place); delete "
        "it and fetch it again (`huggingface-cli download <repo>`, or `git lfs pull`), or resume from an earlier "
        "checkpoint; every trial reading it fails the same way",
    ),
    Rule(
        "disk_full",
        F.CRASH,
        Kind.CRASH,
        ("No space left on device",),
        None,
        "disk_full",
        exclude=("NCCL WARN", "posix_fallocate", "/dev/shm"),
        advice="The disk is full: a checkpoint or log write failed; free space or point the checkpoint and output directories "
        "at a larger volume, and keep fewer checkpoints",
    ),
    Rule(
        "segfault",
        F.CRASH,
        Kind.CRASH,
        ("Segmentation fault", "SIGSEGV", "Bus error", "SIGBUS", "Illegal instruction (core dumped)"),
        None,
        "segfault",
        # Ray's worker-death message lists a segfault among the causes it might have had
        exclude=("unexpectedly due to SIGSEGV",),
        advice="A segmentation fault in native code: note the library in the stack (NCCL, CUDA, a kernel) and rerun with "
        "CUDA_LAUNCH_BLOCKING=1",
    ),
    # bash's job report: "line 12:  4410 Killed   python ...", on macOS "Killed: 9"
    Rule(
        "killed",
        F.CRASH,
        Kind.CRASH,
        ("Killed",),
        _rx(r"^\s*Killed\s*$|line \d+:\s+\d+ Killed(?::\s*\d+)?\s"),
        "killed",
        details=_sigkill,
        advice=KILLED,
    ),
    Rule(
        "ray_kill",
        F.CRASH,
        Kind.SYMPTOM,
        ("killed by `ray.kill`", "ray.kill"),
        _rx(r"killed by `?ray\.kill"),
        "ray_kill",
    ),
    # a node of the Ray cluster died under the run (its raylet missed its heartbeats: crashed, host OOM, the
    # machine or its network gone)
    Rule(
        "ray_node_died",
        F.CRASH,
        Kind.CRASH,
        ("NodeDiedError",),
        None,
        "node_died",
        advice="A node of the Ray cluster died under the run (its raylet stopped answering: crashed, host memory, the machine "
        "or its network gone): the node's raylet log (/tmp/ray/session_latest/logs/raylet.out) and `dmesg` there say "
        "why; not a config problem unless host memory ran out",
    ),
    Rule(
        "ray_actor_died",
        F.CRASH,
        Kind.CRASH,
        (
            "ActorDiedError",
            "The actor died unexpectedly",
            "The actor is dead because",
            "RayActorError",
            "WorkerCrashedError",
            "ActorUnavailableError",
            "Worker exit type: SYSTEM_ERROR",
            "died because of an error raised in its creation task",
            "Exception raised in creation task",
        ),
        None,
        "actor_died",
        advice="A Ray actor died without a recorded cause: read the worker's own log (`ray logs`, /tmp/ray/session_latest/"
        "logs) for its first error; SIGKILL there usually means host memory",
    ),
    # a vLLM engine-core or worker process that died with no Python error of its own (killed, a segfault or an
    # abort in native code): "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
    # "Worker proc VllmWorker-2 died unexpectedly, shutting down executor."; then every request fails with
    # "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause." (an
    # error before either one names the crash: ``classify`` keeps it)
    Rule(
        "vllm_proc_died",
        F.CRASH,
        Kind.CRASH,
        ("died unexpectedly, shutting down",),
        _rx(r"(?P<proc>(?:Engine core|Worker) proc \S+) died unexpectedly"),
        "engine_died",
        advice="A vLLM engine-core or worker process died with no Python error of its own (killed or crashed in native "
        "code), and the engine died with it: read that process's last lines (its `(EngineCore_DP0 pid=N)` or "
        "`(VllmWorker ...)` prefix); SIGKILL is usually host memory (`dmesg | grep -i -E 'oom|killed process'`), a "
        "segfault or abort points at a kernel, CUDA graph or NCCL (rerun with NCCL_DEBUG=WARN)",
    ),
    Rule(
        "vllm_engine_dead",
        F.CRASH,
        Kind.CRASH,
        ("EngineDeadError", "AsyncEngineDeadError"),
        None,
        "engine_dead",
        advice="The vLLM engine died earlier (EngineDeadError is every later request failing): the cause is the engine "
        "core's or its workers' first error above this line (lines prefixed `(EngineCore_DP0 pid=N)` or "
        "`(VllmWorker ...)`, or the inference actor's log); with none, the process was killed (host memory: `dmesg`)",
    ),
    # vLLM's own stall watchdog: one engine step ran past its time limit (a tensor-parallel worker stuck,
    # often in a collective); the engine dies after it
    Rule(
        "vllm_engine_iteration_timeout",
        F.CRASH,
        Kind.CRASH,
        ("Engine iteration timed out",),
        None,
        "engine_stall",
        advice="The inference engine's step stalled past vLLM's own time limit (`Engine iteration timed out`): a hang in one "
        "of its workers, usually a tensor-parallel rank stuck in a collective; its workers' last lines or `py-spy dump` "
        "of each say which (NCCL_DEBUG=INFO for the collective)",
    ),
    # SGLang's engine refusing the trainer's weights (left partially updated), and its scheduler dying
    Rule(
        "sglang_weight_update_failed",
        F.CRASH,
        Kind.CRASH,
        ("Failed to update parameter online",),
        None,
        "weight_sync",
        advice="The inference engine refused the trainer's weights (a weight update failed and left them partially updated): "
        "the trainer's conversion does not match the engine's model (tensor or expert-parallel sharding, parameter "
        "names, the trainer's and the engine's versions)",
    ),
    Rule(
        "sglang_scheduler_exception",
        F.CRASH,
        Kind.CRASH,
        ("Scheduler hit an exception",),
        None,
        "engine",
        advice="The inference engine's scheduler died (SGLang's `Scheduler hit an exception`): the traceback after that line "
        "names the error; the rollout cannot go on without the engine",
    ),
    # --- what a failure drags along ---------------------------------------------------------
    # a rank whose peer died or aborted under it (gloo's wording): it was waiting on that peer
    Rule(
        "peer_gone",
        F.CRASH,
        Kind.SYMPTOM,
        ("Connection reset by peer", "Connection closed by peer"),
        None,
        "peer_gone",
        in_context=_rendezvous_reset,
        advice="This process's peer went away under it (connection closed or reset by peer), with no error of its own before: "
        "another rank, node or server died or aborted first, and its own log has the first error; read that rank's or "
        "node's output (`nccl-tune diagnose` on the trial folder reads every rank's log together)",
    ),
    Rule(
        "nccl_abort_teardown",
        F.CRASH,
        Kind.SYMPTOM,
        (
            "To avoid data inconsistency",
            "terminate called after throwing",
            "Fatal Python error: Aborted",
            "Aborted (core dumped)",
            "ncclCommAbort",
            "Process group watchdog thread terminated",
            "closing signal SIGTERM",
            "Exiting main process due to a failure",
            "ChildFailedError",
            "Broken pipe",
            "Killing subprocess",
        ),
        None,
        "teardown",
    ),
    # --- warnings that name a cause when a failure follows ----------------------------------
    Rule(
        "nccl_warn",
        F.NCCL_ERROR,
        Kind.SUPPORT,
        ("NCCL WARN",),
        _rx(r"NCCL WARN .*(?:[Ff]ail|[Ee]rror|[Tt]imeout|[Uu]nable|No space|Cuda failure|[Ii]nvalid|[Aa]bort)"),
        "nccl_warn",
        details=_nccl_warn_subtype,
        refined={
            "shm": _NCCL_SHM,
            "network": "NCCL's network transport failed: check the interface (NCCL_SOCKET_IFNAME, NCCL_IB_HCA) and the fabric; "
            "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET shows which device it used",
        },
    ),
    Rule(
        "loguru_error",
        F.CRASH,
        Kind.SUPPORT,
        ("| ERROR", "| CRITICAL"),
        _rx(r"\|\s*(?:ERROR|CRITICAL)\s*\|"),
        "logged_error",
    ),
    # --- any other exception ----------------------------------------------------------------
    Rule(
        "exception",
        F.CRASH,
        Kind.CRASH,
        ("Error", "Exception", "KeyboardInterrupt"),
        _rx(
            r"(?:^|[\s\]>|(:])(?P<exception>(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception)|Exception|KeyboardInterrupt))"
            r"(?::\s|:?\s*$)"
        ),
        "exception",
        exclude=("Warning:",),
        details=_exception_signal,
        in_context=_validation_assertion,
        advice=_exception,
    ),
)

CONTEXT_RULES: tuple[Rule, ...] = (CONFIG_ASSERTION, RENDEZVOUS_RESET, TORCHRUN_ROOT_CAUSE)
"""Rules no key finds: the reader applies them from a line's context (``Rule.in_context``, torchrun's
root-cause block)."""


def advice_by_cause(rules: Iterable[Rule]) -> dict[tuple[F, str], Advice | None]:
    """The advice of each class and subtype the rules name (with the finer subtypes their ``details``
    name); raises ``ValueError`` when two rules of one class and subtype carry different advice."""
    out: dict[tuple[F, str], Advice | None] = {}
    for rule in rules:
        for subtype, advice in ((rule.subtype, rule.advice), *rule.refined.items()):
            key = (rule.failure_class, subtype)
            if out.setdefault(key, advice) is not advice:
                raise ValueError(
                    f"rule {rule.name}: the rules of {rule.failure_class.value}/{subtype} carry different advice"
                )
    return out


RULE_ADVICE = advice_by_cause((*RULES, *CONTEXT_RULES))
"""``(class, subtype) -> advice`` (None: the class's own)."""


TRAINING_END: tuple[str, ...] = (
    "Training done",
    "Training completed",
    "Training finished",
    "training finished",
    "Training complete",
    "'train_runtime'",
    "[after training is done]",
    "Finished training",
)
"""A trainer's own end-of-training line (SkyRL, OpenRLHF, Hugging Face Trainer, Megatron, ...): failures
after it happened after training."""

PROGRAM_EXIT: tuple[str, ...] = (
    "destroy_process_group() was not called before program exit",
    "has NOT been destroyed before it is being destructed",
)
"""Lines a program prints as it exits (PyTorch's warning from a process group's destructor,
``destroy_process_group() was not called before program exit``, before 2.4 ``process group has NOT
been destroyed before it is being destructed``): the run did not hang there."""

HOST_MEMORY_KEYS: tuple[str, ...] = (
    "CPU Virtual Memory",
    "host RAM",
    "Host RAM",
    "RAM usage",
    "RAM used",
    "host memory",
    "Host memory",
    "System memory",
)
"""Host-memory readouts a trainer prints (DeepSpeed's ``see_memory_usage``, per-step RAM lines)."""
HOST_MEMORY = _rx(
    r"(?:CPU Virtual Memory|[Hh]ost (?:RAM|memory)|System memory|RAM usage|RAM used)\b[^%\n]*?"
    r"(?P<pct>\d{1,3}(?:\.\d+)?)\s*%"
)

PREFILTER: tuple[str, ...] = tuple(
    sorted(
        {k for r in RULES for k in r.keys}
        | {
            "Started: '",
            "Finished: '",
            *TRAINING_END,
            *PROGRAM_EXIT,
            *HOST_MEMORY_KEYS,
            "Init START",
            "Root Cause",
            "Traceback (most recent call last)",
        }
    )
)
"""Every substring that can make a line interesting; a line with none of them is skipped."""


_DIGITS = bytes.maketrans(b"0123456789", b"##########")


def template(line: str) -> bytes:
    """The line as bytes with every digit masked (``#``): lines that differ only in numbers (steps,
    losses, ranks, channels) share a template. No prefilter key holds a digit or ``#``, so a key
    occurs in a line exactly when it occurs in its template: the prefilter's answer can be cached
    per template."""
    return line.encode("utf-8", "surrogatepass").translate(_DIGITS)


def _build_prefilter(keys: tuple[str, ...]):
    """A function ``line -> bool`` testing ``k in line`` for every key, as one chain of ``or``s
    (several times faster than a regular expression alternation on CPython; ``str`` containment
    is also several times faster than ``bytes``)."""
    bad = [k for k in keys if any(c.isdigit() or c == "#" for c in k)]
    if bad:
        raise ValueError(f"prefilter keys must hold no digit or '#': {bad}")
    # keys that contain other keys are redundant: "CUDA error: out of memory" needs no test of its
    # own when "CUDA error:" is tested
    needed = sorted(k for k in set(keys) if not any(o != k and o in k for o in keys))
    body = " or ".join(f"{k!r} in line" for k in needed)
    namespace: dict[str, object] = {}
    exec(f"def prefilter(line):\n    return {body}\n", namespace)  # noqa: S102 - built from the constant table above
    return namespace["prefilter"], tuple(needed)


prefilter, PREFILTER_KEYS = _build_prefilter(PREFILTER)
"""``prefilter(line) -> bool``: True when some rule or progress line could match the line."""
