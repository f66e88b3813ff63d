"""NCCL's own errors: InfiniBand verbs and completions, its bootstrap, environment values it refuses,
no algorithm left, remote errors, sockets without an interface, shared memory, two ranks on one GPU;
and its warnings, which name the cause of a failure that follows."""

from __future__ import annotations

from typing import Any

from nccl_tune.diagnose.rules.rule import Kind, Rule, rx
from nccl_tune.diagnose.wording import AdviceContext
from nccl_tune.failure import FailureClass as F


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
    if d.get("call") == "ibv_create_qp":
        return (
            "NCCL could not create its InfiniBand queue pairs (ibv_create_qp failed): their buffers are locked memory, "
            "so raise the locked-memory limit (ulimit -l unlimited; the container's --ulimit memlock=-1); NCCL creates "
            "NCCL_IB_QPS_PER_CONNECTION queue pairs per channel and peer, so values set above their defaults "
            "(NCCL_IB_QPS_PER_CONNECTION, NCCL_MIN_NCHANNELS) multiply them: set them back; NCCL_IB_DISABLE=1 falls "
            "back to sockets (slower)"
        )
    call = d.get("call") or "an InfiniBand verbs call"
    return (
        f"NCCL could not use the InfiniBand device ({call} failed): memory registration needs the locked-memory "
        "limit raised (ulimit -l unlimited; the container's --ulimit memlock=-1) and the GPU peer-memory module "
        "loaded; NCCL_IB_DISABLE=1 falls back to sockets (slower)"
    )


def transport_failed(ctx: AdviceContext) -> str:
    """NCCL's transport failed first (an IB completion error, a socket closed or reset): the rest followed."""
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

_IB_VERBS_CALL = rx(r"Call to (?P<call>ibv_\w+) failed(?: with error (?P<error>[^,(]+))?")

IB_VERBS: tuple[Rule, ...] = (
    # an IB verbs call NCCL makes while it sets a communicator up (registering its buffers, creating and
    # connecting queue pairs: the memlock limit, a GID the fabric cannot route) fails the set-up: before a
    # training step finished, init_failure; after one (a new group's registration), NCCL's runtime error
    Rule(
        "ib_verbs_call",
        F.INIT_FAILURE,
        Kind.ROOT,
        ("ibv_",),
        _IB_VERBS_CALL,
        "ib_verbs",
        exclude=("retrying",),
        advice=_ib_verbs,
        once_training=Rule(
            "ib_verbs_call", F.NCCL_ERROR, Kind.ROOT, ("ibv_",), _IB_VERBS_CALL, "ib_verbs", advice=_ib_verbs
        ),
    ),
    Rule(
        "ib_completion_error",
        F.NCCL_ERROR,
        Kind.ROOT,
        ("Got completion", "got completion with error", "IBV_WC_"),
        rx(r"NET/IB\w*\s*:\s*Got completion from peer (?P<peer>\S+)|got completion with error|IBV_WC_\w+"),
        "transport",
        advice=transport_failed,
    ),
)
"""NCCL's InfiniBand verbs (tried first: their errno texts read like host memory)."""

ERRORS: tuple[Rule, ...] = (
    # NCCL's bootstrap receiving a message of another size than it expects from a peer ("bootstrap.cc:77 NCCL
    # WARN Message truncated : received 1024 bytes instead of 256", then ncclInternalError): ranks that disagree
    # on how the communicator is set up (NCCL builds or settings that differ between nodes, a group created
    # with different rank lists)
    Rule(
        "nccl_bootstrap_truncated",
        F.NCCL_ERROR,
        Kind.ROOT,
        ("NCCL WARN Message truncated",),
        rx(r"Message truncated : received (?P<got>\d+) bytes instead of (?P<want>\d+)"),
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
        rx(
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
        rx(
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
        rx(r"connecting to address .*with family (?P<family>\d+) is neither AF_INET|no socket interface found"),
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
        rx(
            r"Duplicate GPU detected : rank (?P<rank_a>\d+) and rank (?P<rank_b>\d+) both on CUDA device (?P<device>\w+)"
        ),
        "duplicate_gpu",
        advice="Two ranks of one NCCL communicator are on the same GPU (Duplicate GPU detected): give each process its own "
        "device (CUDA_VISIBLE_DEVICES, LOCAL_RANK) and check where colocated actors are placed (inference engines and "
        "trainer ranks that share a device must not join one NCCL group, e.g. for weight sync)",
    ),
    # nccl-tests' NCCLCHECK prints "host: Test NCCL failure file.cu:N '<ncclGetErrorString> / <last error>'":
    # its 'unhandled cuda error' and 'remote process exited' are read by the rules tried before it, as in
    # PyTorch's wording
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
        rx(
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
)
"""NCCL's own errors."""

WARNINGS: tuple[Rule, ...] = (
    Rule(
        "nccl_warn",
        F.NCCL_ERROR,
        Kind.SUPPORT,
        ("NCCL WARN",),
        rx(r"NCCL WARN .*(?:[Ff]ail|[Ee]rror|[Tt]imeout|[Uu]nable|No space|Cuda failure|[Ii]nvalid|[Aa]bort)"),
        "nccl_warn",
        details=_nccl_warn_subtype,
        refined={
            "shm": _NCCL_SHM,
            "network": "NCCL's network transport failed: check the interface (NCCL_SOCKET_IFNAME, NCCL_IB_HCA) and the fabric; "
            "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET shows which device it used",
        },
    ),
)
"""NCCL's warnings: the cause of a failure that follows."""
