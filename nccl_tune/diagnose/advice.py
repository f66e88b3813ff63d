"""One line of advice per verdict, specific to the class and to what the evidence says.

Advice names the real knobs: SkyRL's config keys (``trainer.micro_train_batch_size_per_gpu``,
``trainer.policy.fsdp_config.cpu_offload``, ``generator.gpu_memory_utilization``, ...), the NCCL and
PyTorch environment variables that exist (``SKYRL_WORKER_NCCL_TIMEOUT_IN_S`` sets the collective
timeout; PyTorch reads no ``NCCL_TIMEOUT``), and the command that shows more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nccl_tune.failure import FailureClass as F
from nccl_tune.trial import MemoryKnob

_TRAIN_PHASES = {"policy_train", "train_critic_and_policy", "critic_train"}
_FORWARD_PHASES = {"fwd_logprobs_values_reward", "compute_advantages_and_returns", "apply_reward_kl_penalty"}
_GENERATE_PHASES = {"generate", "eval"}
_SYNC_PHASES = {"sync_weights", "init_weight_sync_state", "update_ref_with_policy"}
_SAVE_PHASES = {"save_checkpoints", "save_hf_model"}

SKYRL_TIMEOUT_CLAUSE = "; lower SKYRL_WORKER_NCCL_TIMEOUT_IN_S to fail faster instead of raising it"
"""How SkyRL sets its collective timeout (the clause ends the timeout advice)."""
TIMEOUT_CLAUSE = (
    "; a shorter process-group timeout (init_process_group(timeout=...)) fails faster than a longer one helps"
)
"""The same for any other trainer."""

FR_ENV_HINT = "TORCH_FR_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_FR_DUMP_TEMP_FILE=<dir>/nccl_trace_rank_"


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


def _gib(value: Any) -> str:
    try:
        return f"{float(value):.2f} GiB"
    except (TypeError, ValueError):
        return str(value)


def _oom(ctx: AdviceContext) -> str:
    d = ctx.details
    if ctx.subtype == "vllm_kv_budget":
        util = d.get("util")
        now = f" (now {util})" if util else ""
        return (
            f"vLLM's share of the GPU, generator.gpu_memory_utilization{now}, leaves no room for the KV cache after "
            "the weights: raise it, or lower generator.max_input_length / generator.sampling_params.max_generate_length; "
            "if training then runs out, turn on trainer.policy.fsdp_config.cpu_offload=true"
        )
    if ctx.subtype == "vllm_free_memory":
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
    frag = ""
    reserved = d.get("reserved_unallocated_gib")
    if reserved is not None and reserved >= 1.0:
        frag = (
            f"; {reserved:.2f} GiB was reserved but unallocated (fragmentation): also set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        )
    phase = ctx.phase or ""
    if ctx.vllm_context and (ctx.before_first_step or phase in _GENERATE_PHASES or not phase):
        if (ctx.before_first_step or not phase) and not ctx.vllm_stepping:
            return (
                "CUDA ran out while the vLLM engines started: lower generator.gpu_memory_utilization (each colocated "
                "engine claims that fraction of the GPU), or generator.max_num_seqs" + frag
            )
        return (
            "CUDA ran out in vLLM during generation: lower generator.max_num_seqs or generator.max_num_batched_tokens, "
            "or generator.gpu_memory_utilization" + frag
        )
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
    return (
        "Out of GPU memory: lower the micro-batch sizes (trainer.micro_train_batch_size_per_gpu, "
        "trainer.micro_forward_batch_size_per_gpu) or the sequence lengths, or turn on CPU offload "
        "(trainer.policy.fsdp_config.cpu_offload=true)" + frag
    )


def _host_oom(ctx: AdviceContext) -> str:
    if ctx.subtype == "sigkill_after_climb":
        peak = ctx.host_mem_peak_frac or 0.0
        return (
            f"Killed by SIGKILL after host RAM reached {peak:.0%}: the kernel's OOM killer (`dmesg | grep -i oom`); "
            "CPU offload (trainer.*.fsdp_config.cpu_offload) and rollouts live in host RAM: turn offload off where GPU "
            "memory allows, or lower trainer.train_batch_size / generator.n_samples_per_prompt"
        )
    what = {
        "ray_memory_monitor": "Ray's memory monitor killed a worker (host RAM above RAY_memory_usage_threshold)",
        "kernel_oom": "the kernel's OOM killer killed a process",
        "host_alloc": "a host (CPU) allocation failed",
    }.get(ctx.subtype, "host RAM ran out")
    return (
        f"Host memory, not GPU memory: {what}; CPU offload (trainer.policy/ref.fsdp_config.cpu_offload) and rollouts "
        "live in host RAM: turn offload off where GPU memory allows, lower trainer.train_batch_size or "
        "generator.n_samples_per_prompt, and check other tenants with `free -g`"
    )


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


def _dump_signal_head(d: Mapping[str, Any]) -> str:
    """A rank's watchdog timed out and signalled every rank to dump its Flight Recorder (``dump_signal``)."""
    who = d.get("from_rank")
    if who is not None:
        first = (
            f"Rank {who}'s watchdog timed out on a collective first and signalled this rank to dump its Flight "
            f"Recorder (this rank did not time out itself): rank {who}'s log names the collective"
        )
    elif d.get("other"):
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


def _timeout(ctx: AdviceContext) -> str:
    d = ctx.details
    fr = _fr_clause(ctx.fr)
    op, seq = d.get("op"), d.get("seq")
    where = f" in {op} (SeqNum {seq})" if op and seq is not None else (f" in {op}" if op else "")
    if fr:
        head = f"{fr}: look at that rank's last log lines or `py-spy dump --pid <pid>`"
    elif ctx.rank is not None:
        head = f"Rank {ctx.rank} is the likely one behind (it reported no timeout): look at its last lines or `py-spy dump`"
    elif ctx.subtype == "gloo":
        head = "A gloo collective timed out waiting for a peer that never arrived (a rank is stuck or died silently)"
    elif ctx.subtype == "nccl_tests":
        return (
            "nccl-tests gave up on a collective after its -T timeout: a rank, GPU or link is stuck (not slow); rerun "
            "with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET and compare the ranks' last lines"
        )
    elif ctx.subtype == "dump_signal":
        head = _dump_signal_head(d)
    elif ctx.subtype == "heartbeat":
        head = (
            "The watchdog itself hung (heartbeat monitor): a CUDA/NCCL call never returned, usually a rank stuck "
            "in a collective"
        )
    else:
        head = (
            f"Ranks waited{where} until the timeout with no error before it: a hang (a rank behind or stuck, not a "
            "slow network); the Flight Recorder says which rank (`nccl-tune diagnose <trial folder>`)"
        )
        if not ctx.fr:
            head += f", with {FR_ENV_HINT} set"
    if ctx.phase:
        head += f" (phase {ctx.phase})"
    return head + SKYRL_TIMEOUT_CLAUSE


def _size_on_wire(d: Mapping[str, Any]) -> str:
    """A transport got more bytes than the collective posted (``transport_size_mismatch``)."""
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


def _mismatch(ctx: AdviceContext) -> str:
    d = ctx.details
    if ctx.subtype == "size_on_wire":
        return _size_on_wire(d)
    groups = d.get("groups")
    shown = f" ({groups})" if groups else ""
    fr = _fr_clause(ctx.fr)
    lead = f"{fr}; r" if fr else "R"
    if ctx.subtype == "seq_desync":
        behind = f"rank {ctx.rank} is the one behind: " if ctx.rank is not None else ""
        return (
            f"{lead}anks are out of step, waiting at different sequence numbers{shown}: {behind}it skipped or added "
            "collectives (a rank-only branch, an early exit, uneven batches or data); make every rank issue the same "
            "collectives in the same order; TORCH_DISTRIBUTED_DEBUG=DETAIL reports it at the call"
        )
    return (
        f"{lead}anks called different collectives at the same sequence number{shown}: some code path runs a collective "
        "on some ranks only (a rank-0-only branch, a value from dist.reduce deciding control flow, uneven batches); make "
        "every rank issue the same collectives in the same order; TORCH_DISTRIBUTED_DEBUG=DETAIL reports it at the call"
    )


_NCCL_FIXED = {
    "shm": (
        "NCCL could not create its shared-memory segment (/dev/shm too small; Docker's default is 64 MB): run the "
        "container with --shm-size=16g or --ipc=host, or set NCCL_SHM_DISABLE=1 (slower)"
    ),
    "duplicate_gpu": (
        "Two ranks of one NCCL communicator are on the same GPU (Duplicate GPU detected): give each process its own "
        "device (CUDA_VISIBLE_DEVICES, LOCAL_RANK) and check where colocated actors are placed (inference engines and "
        "trainer ranks that share a device must not join one NCCL group, e.g. for weight sync)"
    ),
    "invalid_usage": (
        "NCCL reported invalid usage: rerun with NCCL_DEBUG=WARN to see the call it refused; a forced NCCL_ALGO or "
        "NCCL_PROTO that a collective cannot use, or mismatched tensors across ranks, are the usual causes"
    ),
    "remote": (
        "A peer process exited or the network dropped (NCCL remote error / connection reset): find the first error on "
        "the other ranks or nodes; on several nodes check the fabric with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET"
    ),
    "socket_ifname": (
        "NCCL found no usable address for its sockets: the interface NCCL_SOCKET_IFNAME names is missing on this "
        "host or has no IPv4/IPv6 address; set it to an interface `ip -br addr` lists on every node (a prefix such "
        "as eth, or ^docker,lo to exclude) or unset it; `nccl-tune doctor` checks it"
    ),
    "network": (
        "NCCL's network transport failed: check the interface (NCCL_SOCKET_IFNAME, NCCL_IB_HCA) and the fabric; "
        "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET shows which device it used"
    ),
    "bootstrap_mismatch": (
        "NCCL's bootstrap got a message of another size than it expects from a peer (Message truncated): the ranks "
        "disagree on how the communicator is set up: NCCL or torch builds that differ between nodes or containers "
        "(`python -c 'import torch; print(torch.cuda.nccl.version())'` on each), NCCL variables set on some nodes "
        "only, or a group created with different rank lists on different ranks (new_group must get the same ranks, "
        "in the same order, on every rank)"
    ),
    "system": (
        "NCCL hit a system error: rerun with NCCL_DEBUG=INFO to see the failing call; the usual causes are /dev/shm "
        "size, the memlock limit (ulimit -l) and the socket interface (NCCL_SOCKET_IFNAME)"
    ),
}
"""The NCCL subtypes whose advice names no value read from the log."""


def _nccl(ctx: AdviceContext) -> str:
    d = ctx.details
    if ctx.subtype in _NCCL_FIXED:
        return _NCCL_FIXED[ctx.subtype]
    if ctx.subtype == "invalid_env":
        value = d.get("value")
        shown = f' ("{value}")' if value else ""
        return (
            f"An NCCL environment value is invalid{shown}: NCCL_ALGO takes Ring,Tree,CollnetDirect,CollnetChain,NVLS,"
            "NVLSTree,PAT and NCCL_PROTO takes LL,LL128,Simple; fix or unset it (`nccl-tune doctor` checks them)"
        )
    if ctx.subtype == "no_algorithm":
        fn = d.get("function") or "a collective"
        forced = ", ".join(f"{k}={v}" for k, v in (("NCCL_ALGO", d.get("algo")), ("NCCL_PROTO", d.get("proto"))) if v)
        shown = f" ({forced})" if forced else ""
        return (
            f"NCCL has no algorithm/protocol left for {fn} under the forced choice{shown}: force it only where it "
            'applies with NCCL\'s per-collective syntax (e.g. NCCL_ALGO="allreduce:Tree") or unset the variable'
        )
    if ctx.subtype == "ib_verbs" and d.get("call") == "ibv_modify_qp":
        error = f": {d['error'].strip()}" if d.get("error") else ""
        return (
            f"NCCL could not connect an InfiniBand/RoCE queue pair (ibv_modify_qp failed{error}): on RoCE set "
            "NCCL_IB_GID_INDEX to the RoCEv2 GID of a routed address (`show_gids`), and check that NCCL_IB_HCA names "
            "ports that are up and reach the other nodes (`ibstat`, `ib_write_bw` between two nodes); NCCL_IB_DISABLE=1 "
            "falls back to sockets (slower)"
        )
    if ctx.subtype == "ib_verbs":
        call = d.get("call") or "an InfiniBand verbs call"
        return (
            f"NCCL could not use the InfiniBand device ({call} failed): memory registration needs the locked-memory "
            "limit raised (ulimit -l unlimited; the container's --ulimit memlock=-1) and the GPU peer-memory module "
            "loaded; NCCL_IB_DISABLE=1 falls back to sockets (slower)"
        )
    if ctx.subtype == "transport":
        who = f" on rank {ctx.rank}" if ctx.rank is not None else ""
        return (
            f"NCCL's network transport failed{who} first (IB completion error or socket closed/reset); the other ranks' "
            "time-outs followed from it: a link, NIC or peer node dropped; check the fabric (ibstat, NCCL_DEBUG=INFO "
            "NCCL_DEBUG_SUBSYS=NET), NCCL_IB_TIMEOUT / NCCL_IB_RETRY_CNT, and the peer node's own log"
        )
    return "NCCL reported an error: rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV to see the failing call"


def _cuda(ctx: AdviceContext) -> str:
    d = ctx.details
    if ctx.subtype == "ecc":
        return (
            "Uncorrectable ECC error: this GPU's memory is faulty; not a config problem: drain the node and have the GPU "
            "reset or replaced (`nvidia-smi -q -d ECC`)"
        )
    if ctx.subtype == "gpu_busy":
        return (
            "The GPU is busy or unavailable to this process (cudaErrorDevicesUnavailable): another process holds it in "
            "exclusive compute mode, or the device cannot be used; `nvidia-smi` shows its compute mode and processes "
            "(`nccl-tune doctor` too): free it, or set the compute mode back to Default (`nvidia-smi -c 0`)"
        )
    if ctx.subtype == "no_kernel_image":
        return (
            "This build has no GPU code for the device's architecture (no kernel image): install torch, or the "
            "extension in the traceback (flash-attn, vLLM's kernels), built for this GPU (H100: sm_90); "
            "`python -c 'import torch; print(torch.cuda.get_arch_list())'` lists what torch carries"
        )
    if ctx.subtype == "gpu_lost":
        return (
            "The GPU was lost (Xid / fell off the bus): a hardware or driver fault; drain the node (`dmesg | grep Xid`)"
        )
    if ctx.subtype == "device_assert":
        kernel = d.get("kernel")
        cond = d.get("cond")
        what = f" ({kernel}: {cond})" if kernel and cond else ""
        return (
            f"A device-side assert{what}: usually an index out of range (token ids beyond the embedding/vocab size, "
            "labels out of range); check the tokenizer against the model; rerun with CUDA_LAUNCH_BLOCKING=1 for the op"
        )
    if ctx.subtype == "illegal_access":
        return (
            "Illegal memory access in a kernel: rerun with CUDA_LAUNCH_BLOCKING=1 to find it; if it is in NCCL, try "
            "NCCL_CUMEM_ENABLE=0 or another NCCL_PROTO; check `dmesg | grep Xid` for a hardware fault"
        )
    if ctx.subtype == "nccl_cuda" and "nvls" in (d.get("where") or "").lower():
        return (
            f"NCCL's NVLS transport (NVLink SHARP multicast) failed a CUDA call ('{d.get('detail', '')}' in {d['where']}): "
            "multicast does not work on this node (its fabric manager, a VM or container, the driver): set "
            "NCCL_NVLS_ENABLE=0 and leave NCCL_ALGO=NVLS out of the search; `nvidia-smi -q` shows the fabric's state"
        )
    if ctx.subtype == "nccl_cuda":
        return (
            "NCCL hit a CUDA error (unhandled cuda error): rerun with NCCL_DEBUG=INFO to see the CUDA call; frequent "
            "causes are GPU memory exhausted by NCCL buffers (lower NCCL_BUFFSIZE) and NCCL_CUMEM_ENABLE with old drivers"
        )
    return "A CUDA error: rerun with CUDA_LAUNCH_BLOCKING=1 to see the failing op; check `dmesg | grep Xid`"


def _init(ctx: AdviceContext) -> str:
    d = ctx.details
    if ctx.subtype == "port_in_use":
        port = d.get("port")
        p = f" {port}" if port else ""
        return (
            f"Port{p} is already in use (another job or a leftover process): pick a free MASTER_PORT (torchrun "
            f"--master_port / --rdzv-endpoint) or stop the holder (`ss -ltnp | grep :{port or '<port>'}`)"
        )
    if ctx.subtype == "nccl_id_store":
        peer = d.get("peer_rank", "0")
        error = (d.get("error") or "").strip()
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
    if ctx.subtype == "gloo_connect":
        iface = d.get("iface")
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
    if ctx.subtype == "ray":
        return "Could not reach the Ray cluster: start it (`ray start --head`) or point RAY_ADDRESS at it; check `ray status`"
    if ctx.subtype == "unresolved_host":
        host, reason = d.get("host", "the store's host"), (d.get("reason") or "").strip()
        why = f" ({reason})" if reason else ""
        return (
            f"The rendezvous host name {host} does not resolve on this node{why}: MASTER_ADDR (or --rdzv-endpoint) "
            "names a host this node's DNS or /etc/hosts does not know; give an IP address or a name every node "
            "resolves (`getent hosts <name>` on each; on Kubernetes the headless service must exist before the pods "
            "dial it)"
        )
    if ctx.subtype == "ray_no_gpu":
        return (
            "vLLM's Ray executor found no GPU where it runs: the process that builds the engine (the inference actor "
            "or driver) sits on a node, or in a placement-group bundle, without a GPU; give it a GPU bundle on a GPU "
            "node (the trainer's placement/colocation settings for its inference engines; run a server's driver on a "
            "GPU node) and check `ray status` lists the GPUs on every node"
        )
    if ctx.subtype == "placement_group":
        return (
            "Ray could not create the placement group in time: the cluster has fewer free GPUs/CPUs than the job asks "
            "for (another job or a leftover Ray cluster holds them: `ray status`); free them, ask for fewer "
            "(placement/colocation settings), or raise SKYRL_RAY_PG_TIMEOUT_IN_S if an autoscaler is still adding nodes"
        )
    if ctx.subtype in ("connect", "nccl_connect"):
        return (
            "A process could not connect to its master before the first step (connect timeout: an unroutable or "
            "firewalled address, a master that never started): check the address it dialled (MASTER_ADDR, the "
            "weight-sync or server host) is reachable from every node, and the interface NCCL_SOCKET_IFNAME / "
            "GLOO_SOCKET_IFNAME"
        )
    return (
        "The rendezvous did not complete before the first step: a process or node never joined (wrong MASTER_ADDR/port, "
        "firewall, unequal --nproc-per-node, a node that never started); check every node reaches the same endpoint"
    )


def _config(ctx: AdviceContext) -> str:
    d = ctx.details
    if ctx.subtype == "unknown_key" and d.get("config"):  # a dataclass config (today's SkyRL) names its class
        return (
            f"The command's {d['config']} has no field {d.get('key', '')}: check the key against the trainer's config "
            "classes (the search space or --set); SkyRL's two layouts spell some keys differently, and the '+' prefix "
            "adds nothing there"
        )
    if ctx.subtype == "unknown_key":
        key = d.get("key", "")
        return (
            f"The command refused the key '{key}': check its spelling against the training config (the search space "
            "or --set), or add a new key with +key=value"
        )
    if ctx.subtype == "plus_prefix":
        return (
            f"The command refuses the '+' prefix ({d.get('key', '')}): give the key without '+', it must already exist"
        )
    if ctx.subtype == "validation":
        return f"The command refused the config ({d.get('detail', 'a validation assertion')}): fix the values or pin them with --set"
    if ctx.subtype == "no_bf16":
        return (
            "This GPU has no bfloat16 (compute capability below 8.0: V100, T4) and the run asks for it: run the model in "
            "float16 (SkyRL: generator.inference_engine.model_dtype=float16, generator.model_dtype in the legacy "
            "skyrl_train layout, and the trainer's mixed precision to fp16; vLLM alone: --dtype=half), or move to a "
            "GPU that has it (A100, H100)"
        )
    if ctx.subtype == "engine_args":
        arg = d.get("arg")
        what = f" ({arg})" if arg else ""
        return (
            f"vLLM refused its engine arguments{what}: fix the value the evidence names (the generator/engine settings "
            "in the search space or --set), e.g. max_num_batched_tokens at least max_model_len, a tensor parallel size "
            "that divides the attention heads, max_model_len within the model's limit"
        )
    if ctx.subtype == "command":
        return f"The command was not found ({d.get('cmd', '')}): check the command line and PATH"
    return "The command refused its config: fix the value named in the evidence (the search space or --set)"


def _scheduler(ctx: AdviceContext) -> str:
    """Slurm ended the step or one of its tasks (``slurm_task_end``)."""
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


_CRASH_FIXED = {
    "dataloader_shm": (
        "A DataLoader worker died of SIGBUS writing to shared memory: /dev/shm is too small (Docker's default is 64 MB): "
        "run the container with --shm-size=16g or --ipc=host, or lower num_workers"
    ),
    "model_fetch": (
        "The model or tokenizer could not be fetched from the Hugging Face Hub (no network from the node, a misspelled "
        "or gated repository): check the model path in the command, HF_TOKEN for a gated model, or download it once "
        "and run with HF_HUB_OFFLINE=1 so that every trial reads the local copy"
    ),
    "peer_gone": (
        "This process's peer went away under it (connection closed or reset by peer), with no error of its own before: "
        "another rank, node or server died or aborted first, and its own log has the first error; read that rank's or "
        "node's output (`nccl-tune diagnose` on the trial folder reads every rank's log together)"
    ),
    "corrupt_checkpoint": (
        "A weights or checkpoint file could not be read: it is cut short or is not the file it claims to be (an "
        "interrupted download or copy, a save that ran out of disk, a Git LFS pointer checked out in its place); delete "
        "it and fetch it again (`huggingface-cli download <repo>`, or `git lfs pull`), or resume from an earlier "
        "checkpoint; every trial reading it fails the same way"
    ),
    "disk_full": (
        "The disk is full: a checkpoint or log write failed; free space or point the checkpoint and output directories "
        "at a larger volume, and keep fewer checkpoints"
    ),
    "weight_sync": (
        "The inference engine refused the trainer's weights (a weight update failed and left them partially updated): "
        "the trainer's conversion does not match the engine's model (tensor or expert-parallel sharding, parameter "
        "names, the trainer's and the engine's versions)"
    ),
    "engine_stall": (
        "The inference engine's step stalled past vLLM's own time limit (`Engine iteration timed out`): a hang in one "
        "of its workers, usually a tensor-parallel rank stuck in a collective; its workers' last lines or `py-spy dump` "
        "of each say which (NCCL_DEBUG=INFO for the collective)"
    ),
    "engine": (
        "The inference engine's scheduler died (SGLang's `Scheduler hit an exception`): the traceback after that line "
        "names the error; the rollout cannot go on without the engine"
    ),
    "segfault": (
        "A segmentation fault in native code: note the library in the stack (NCCL, CUDA, a kernel) and rerun with "
        "CUDA_LAUNCH_BLOCKING=1"
    ),
    "node_died": (
        "A node of the Ray cluster died under the run (its raylet stopped answering: crashed, host memory, the machine "
        "or its network gone): the node's raylet log (/tmp/ray/session_latest/logs/raylet.out) and `dmesg` there say "
        "why; not a config problem unless host memory ran out"
    ),
    "engine_died": (
        "A vLLM engine-core or worker process died with no Python error of its own (killed or crashed in native "
        "code), and the engine died with it: read that process's last lines (its `(EngineCore_DP0 pid=N)` or "
        "`(VllmWorker ...)` prefix); SIGKILL is usually host memory (`dmesg | grep -i -E 'oom|killed process'`), a "
        "segfault or abort points at a kernel, CUDA graph or NCCL (rerun with NCCL_DEBUG=WARN)"
    ),
    "engine_dead": (
        "The vLLM engine died earlier (EngineDeadError is every later request failing): the cause is the engine "
        "core's or its workers' first error above this line (lines prefixed `(EngineCore_DP0 pid=N)` or "
        "`(VllmWorker ...)`, or the inference actor's log); with none, the process was killed (host memory: `dmesg`)"
    ),
    "actor_died": (
        "A Ray actor died without a recorded cause: read the worker's own log (`ray logs`, /tmp/ray/session_latest/"
        "logs) for its first error; SIGKILL there usually means host memory"
    ),
}
"""The crash subtypes whose advice names no value read from the log (as ``_NCCL_FIXED``)."""


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


def _child_exit(ctx: AdviceContext) -> str:
    """A launched process exited with a code of its own and no error the log shows."""
    who = f"Rank {ctx.rank}" if ctx.rank is not None else "A worker process"
    code = ctx.details.get("exit_code")
    return (
        f"{who} exited first with code {code} (its own exit, not a signal) and no error this log shows: its own "
        "output has the reason (torchrun --tee 3 or --log-dir keeps each rank's; an `error_file` in the failure "
        "summary holds its traceback when the script uses @record); the other ranks' lost connections or timeouts "
        "followed from it"
    )


def _crash(ctx: AdviceContext) -> str:
    sig = ctx.signal_name
    if ctx.subtype in ("killed", "signal", "child_exit") or sig == "SIGKILL":
        if sig == "SIGKILL" or ctx.subtype == "killed":
            return (
                "Killed by SIGKILL with no error of its own: usually the kernel's OOM killer on host RAM (`dmesg | grep -i "
                "oom`) or an external kill (scheduler, `ray stop`)"
            )
    if sig in _SIGNAL_ADVICE and ctx.subtype in ("signal", "child_exit"):
        return _SIGNAL_ADVICE[sig]
    if ctx.subtype == "child_exit" and (ctx.details.get("exit_code") or 0) > 0:
        return _child_exit(ctx)
    if ctx.subtype == "scheduler":
        return _scheduler(ctx)
    if ctx.subtype == "build_mismatch":
        lib = ctx.details.get("library") or "a compiled extension"
        return (
            f"{lib} was built against another torch or CUDA (undefined symbol): reinstall it against the installed torch "
            "(`pip install --no-build-isolation --force-reinstall <package>`), or pin torch to the version it was built for"
        )
    if ctx.subtype == "outside_signal":
        return (
            f"torchrun was sent {sig or 'a signal'} from outside and stopped its workers, with no error of the run's "
            "before it: a scheduler's time limit or preemption, `scancel`, `kill`, or a container or node shutting down; "
            "the scheduler's own record says which (`sacct -j <job>`, `kubectl describe pod`)"
        )
    if ctx.subtype in _CRASH_FIXED:
        return _CRASH_FIXED[ctx.subtype]
    if ctx.subtype == "no_cause":
        how = f"the command exited with code {ctx.exit_code}" if ctx.exit_code else "the log ends in error lines"
        return (
            f"No cause found: {how} but no known failure message is in the log; read the last lines shown and the "
            "output before them"
        )
    if ctx.subtype == "exception":
        exc = ctx.details.get("exception")
        return f"The program raised {exc or 'an exception'} that is not a known infrastructure failure: read the evidence lines"
    if sig:
        return f"The process ended by {sig} with no recognised cause: read the last lines"
    if ctx.exit_code:
        return f"The command exited with code {ctx.exit_code} and no recognised cause: read the last lines"
    return "The run died without a recognised cause: read the evidence lines"


_BY_CLASS = {
    F.OOM: _oom,
    F.HOST_OOM: _host_oom,
    F.COLLECTIVE_TIMEOUT: _timeout,
    F.COLLECTIVE_MISMATCH: _mismatch,
    F.NCCL_ERROR: _nccl,
    F.CUDA_ERROR: _cuda,
    F.INIT_FAILURE: _init,
    F.CONFIG_ERROR: _config,
    F.CRASH: _crash,
}


def advise(ctx: AdviceContext) -> str:
    """The advice line for a failure (empty for ``ok``)."""
    if ctx.failure_class is F.OK:
        return ""
    if ctx.failure_class is F.HANG:
        where = f" in {ctx.phase}" if ctx.phase else ""
        return (
            f"No progress{where} for longer than the stall timeout: a rank is stuck; set {FR_ENV_HINT} and run "
            "`nccl-tune diagnose` on the trial folder to see which rank and collective"
        )
    if ctx.failure_class is F.BUDGET:
        return "Alive and progressing but too slow for the trial budget: this config is slower than the others tried"
    if ctx.failure_class is F.INTERRUPTED:
        return "Interrupted: the study can be resumed with the same --study"
    text = _BY_CLASS[ctx.failure_class](ctx)
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
    """The move of ``k`` that saves device memory."""
    if k.effect == "increasing":
        return f"lower {_shown(k)}"
    return f"turn on {_shown(k)}" if k.value in ("false", "0") else f"raise {_shown(k)}"


def advice_for_space(failure: F, advice: str, knobs: Sequence[MemoryKnob], trainer: str | None) -> str:
    """``advice`` (the log's) as the trial's search space should read it: a memory failure in the
    space's own parameters (``space_memory_advice``); for a trainer known not to be SkyRL, no SkyRL
    timeout variable."""
    in_space_terms = space_memory_advice(failure, knobs, trainer)
    if in_space_terms:
        return in_space_terms
    if trainer not in (None, "skyrl") and advice.endswith(SKYRL_TIMEOUT_CLAUSE):
        return advice[: -len(SKYRL_TIMEOUT_CLAUSE)] + TIMEOUT_CLAUSE
    return advice


def space_memory_advice(failure: F, knobs: Sequence[MemoryKnob], trainer: str | None) -> str | None:
    """The advice line for a memory failure in the trial's search-space terms: its parameters that
    declare ``memory: increasing``/``decreasing``, with their values in the trial. None for other
    classes, for SkyRL (its advice names SkyRL's keys), and for an unknown trainer without such
    parameters (the log's own advice stands)."""
    if failure not in (F.OOM, F.HOST_OOM) or trainer == "skyrl" or (trainer is None and not knobs):
        return None
    movable = [k for k in knobs if k.room]
    if failure is F.OOM:
        if movable:
            return "Out of GPU memory: " + ", or ".join(_saving(k) for k in movable)
        if knobs:
            return (
                "Out of GPU memory with every memory parameter of the space at its smallest setting "
                f"({', '.join(_shown(k) for k in knobs)}): shorten sequences or shrink the model's footprint"
            )
        return (
            "Out of GPU memory: lower the batch size or sequence length (declare memory: increasing or decreasing "
            "on the space's parameters to have them named here)"
        )
    grow = [k for k in movable if k.effect == "increasing"]
    offload = [k for k in knobs if k.effect == "decreasing" and k.value not in ("false", "0")]
    parts = ["Host memory, not GPU memory, ran out"]
    if grow:
        parts.append("lower " + " or ".join(_shown(k) for k in grow))
    if offload:
        parts.append(
            f"{', '.join(_shown(k) for k in offload)} may keep state in host RAM: turn it off where GPU memory allows"
        )
    parts.append("check other tenants with `free -g` and `dmesg | grep -i oom`")
    return "; ".join(parts)
