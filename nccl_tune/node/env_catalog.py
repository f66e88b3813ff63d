"""The NCCL and PyTorch environment variables that exist, their renamed spellings, and their values.

Sources (read, not copied): NCCL's ``src/`` (every ``NCCL_PARAM(Name, "SUFFIX", ...)`` is an
integer read with ``strtoll(..., 0)``, which silently yields 0 for text; ``ncclGetEnv`` names are
strings; ``NCCL_PROTO``/``NCCL_ALGO`` are parsed as ``[func:][^]elem,elem;...`` against ``LL,
LL128, Simple`` and ``Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT``, case-
insensitively, and an unknown element fails communicator init with ``ncclInvalidUsage``;
``NCCL_P2P_LEVEL``/``NCCL_NET_GDR_LEVEL`` take a path type or an old-style number, anything else
is ignored). PyTorch's ``ProcessGroupNCCL.hpp`` and Flight Recorder (the ``TORCH_NCCL_*`` names
and the deprecated spellings each still accepts), verified against the strings of the installed
torch 2.13. Nothing reads ``NCCL_TIMEOUT``: the collective timeout is ``init_process_group(
timeout=...)``, which SkyRL sets from ``SKYRL_WORKER_NCCL_TIMEOUT_IN_S``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from nccl_tune.search_spaces.spelling import nearest

# --- NCCL ---------------------------------------------------------------------------------------

NCCL_INT_PARAMS = frozenset(
    """
    ALLGATHERV_ENABLE ALLOC_P2P_NET_LL_BUFFERS BUFFSIZE CGA_CLUSTER_SIZE CHECK_POINTERS CHUNK_SIZE COLLNET_ENABLE
    COLLNET_NODE_THRESHOLD COMM_BLOCKING COMM_SHRINK_SHARE_RESOURCES COMM_SPLIT_SHARE_RESOURCES CONNECT_ROUND_MAX_PEERS
    CROSS_NIC CUMEM_ENABLE CUMEM_HOST_ENABLE DEV_API_JIT DISABLE_MEM_MANAGER DMABUF_ENABLE ELASTIC_BUFFER_REGISTER
    ENABLE_VERSION_CHECK GDAKI_USE_RELIABLE_DB GDRCOPY_ENABLE GDRCOPY_FIFO_ENABLE GDRCOPY_FLUSH_ENABLE GDRCOPY_SYNC_ENABLE
    GDR_FLUSH_DISABLE GIN_ENABLE GIN_ERROR_QUERY_SEC GIN_GDAKI_MAX_DEST_RD_ATOMIC GIN_GDAKI_MAX_QP_RD_ATOMIC
    GIN_GDAKI_NIC_HANDLER GIN_GDAKI_QP_DEPTH GIN_IB_TC GIN_NCONNECTIONS GIN_PLUGIN_REF_COUNT GIN_PROXY_QUEUE_SIZE GIN_TYPE
    GRAPH_DUMP_FILE_RANK GRAPH_HELPER_DISABLE GRAPH_MIXING_SUPPORT GRAPH_REGISTER GRAPH_STREAM_ORDERING GROUP_CUDA_STREAM
    IB_ADAPTIVE_ROUTING IB_AR_THRESHOLD IB_DATA_DIRECT IB_DEVICE_PCI_ORDER IB_DISABLE IB_ECE_ENABLE IB_FIFO_TC IB_GID_INDEX
    IB_MERGE_NICS IB_MERGE_VFS IB_MQP_RETRY_ALL IB_MQP_RETRY_CNT IB_MQP_RETRY_SLEEP_MSEC IB_OOO_RQ IB_PCI_RELAXED_ORDERING
    IB_PKEY IB_PREPOST_RECEIVE_WORK_REQUESTS IB_QPS_PER_CONNECTION IB_QUERY_PORT_SPEED IB_RECEIVER_SIDE_MATCHING_SCHEME
    IB_RESILIENCY_PORT_FAILOVER IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS IB_RESILIENCY_PORT_FAILOVER_PROBE_DELAY
    IB_RESILIENCY_PORT_RECOVERY IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL
    IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_SIZE IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_SEQUENCE_SIZE
    IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_TIMEOUT IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX
    IB_RESILIENCY_PORT_RECOVERY_START_DELAY IB_RETRY_CNT IB_RETURN_ASYNC_EVENTS IB_ROCE_VERSION_NUM
    IB_ROUTABLE_FLID_GID_INDEX IB_SL IB_SPLIT_DATA_ON_QPS IB_SUBNET_AWARE_ROUTING IB_SUBNET_PREFIX_LEN IB_TC IB_TIMEOUT
    IB_USE_INLINE IB_WARN_RAIL_LOCAL IGNORE_COLLNET_MISMATCH IGNORE_CPU_AFFINITY IGNORE_DISABLED_P2P IGNORE_NET_MISMATCH
    IPC_USE_ABSTRACT_SOCKET L1_SHARED_MEMORY_CARVEOUT LAUNCH_ORDER_IMPLICIT LAUNCH_RACE_FATAL LEGACY_CUDA_REGISTER
    LL128_BUFFSIZE LL128_C2C LL128_NTHREADS LL_BUFFSIZE LOCAL_REGISTER LSA_TEAM_SIZE MAX_CTAS MAX_NCHANNELS MAX_NRINGS
    MAX_P2P_NCHANNELS MEM_SYNC_DOMAIN MIN_CTAS MIN_NCHANNELS MIN_NRINGS MIN_P2P_NCHANNELS MLOPART_RDMA_ENABLE
    MNNVL_CLIQUE_ID MNNVL_CROSS_CLIQUE MNNVL_ENABLE MNNVL_RAIL_PER_HOST MNNVL_SCATTER_NETS_ENABLE MNNVL_UUID
    MULTI_RANK_GPU_ENABLE MULTI_SEGMENT_REGISTER NCHANNELS_PER_NET_PEER NET_DISABLE_INTRA NET_FORCE_FLUSH NET_GDR_C2C
    NET_GDR_MLOPART NET_GDR_READ NET_OPTIONAL_RECV_COMPLETION NET_OVERHEAD NET_PLUGIN_REF_COUNT NET_SHARED_BUFFERS
    NET_SHARED_COMMS NSOCKS_PERTHREAD NTHREADS NUM_RMA_CTX NVB_DISABLE NVB_PRECONNECT NVLINK_UTIL_CENTRIC_SCHED_ENABLE
    NVLSTREE_MAX_CHUNKSIZE NVLS_CHUNKSIZE NVLS_ENABLE NVLS_NCHANNELS NVTX_DISABLE OOB_NET_ENABLE P2P_DIRECT_DISABLE
    P2P_EPOCH_ENABLE P2P_LL_THRESHOLD P2P_MAX_PEERS P2P_NET_CHUNKSIZE P2P_NVL_CHUNKSIZE P2P_PCI_CHUNKSIZE
    P2P_PER_CHANNEL_NET_BW P2P_PXN_LEVEL P2P_READ_ENABLE P2P_SCHEDULE_GROUP_SIZE P2P_USE_CUDA_MEMCPY PAT_ENABLE
    PROGRESS_APPENDOP_FREQ PROXY_APPEND_BATCH_SIZE PROXY_DUMP_SIGNAL PXN_C2C PXN_DISABLE RAS_ENABLE RAS_TIMEOUT_FACTOR
    REPORT_CONNECT_PROGRESS RMA_DISABLE RMA_PLUGIN_REF_COUNT RMA_PROXY_DUMP_SIGNAL RMA_PROXY_QUEUE_SIZE RUNTIME_CONNECT
    SET_CPU_STACK_SIZE SET_STACK_SIZE SHADOW_MEMPOOL_MAX_SIZE SHM_DISABLE SHM_LOCALITY SINGLE_PROC_MEM_REG_ENABLE
    SOCKET_INLINE SOCKET_MIN_TASKSIZE SOCKET_NTHREADS SOCKET_POLL_TIMEOUT_MSEC SOCKET_RCVBUF SOCKET_RETRY_CNT
    SOCKET_RETRY_SLEEP_MSEC SOCKET_SNDBUF SYM_CE_THRESHOLD SYM_CTAS SYM_GIN_KERNELS_ENABLE SYM_NOWIN_ENABLE
    SYM_REUSE_SYSMEM_HANDLES SYM_RS_GIN_CHUNK_SIZE SYM_TMA_ENABLE TOPO_DUMP_FILE_RANK TOPO_SPLIT_MLOPART UID_STAGGER_RATE
    UID_STAGGER_THRESHOLD UNPACK_DOUBLE_NCHANNELS WIN_ENABLE WIN_STRIDE WORK_ARGS_BYTES WORK_FIFO_BYTES
    P2P_DISABLE NO_CACHE WARN_ENABLE_DEBUG_INFO SET_THREAD_NAME PARAM_DUMP_ALL
    """.split()
)
"""Integer variables, without the ``NCCL_`` prefix."""

NCCL_STRING_VARS = frozenset(
    """
    ALGO CHECK_MODE COLLNET_ENABLE COMM_ID CONF_FILE CTA_POLICY ENV_PLUGIN GIN_PLUGIN GRAPH_DUMP_FILE GRAPH_FILE HOSTID
    IBVERBS_LIB IB_ADDR_FAMILY IB_ADDR_RANGE IB_HCA LAUNCH_MODE NET NETDEVS_POLICY NET_FORCE_MERGE NET_MERGE_LEVEL
    NET_MERGE_POLICY NET_PLUGIN NVLS_CHUNKSIZE OOB_NET_IFNAME PROFILER_PLUGIN PROTO PROXY_CPUSET RAS_ADDR RMA_PLUGIN
    SOCKET_FAMILY SOCKET_IFNAME SOCKET_MAGIC SYM_KERNEL THREAD_THRESHOLDS TOPO_DUMP_FILE TOPO_FILE TUNER_PLUGIN
    DEBUG DEBUG_SUBSYS DEBUG_FILE DEBUG_TIMESTAMP_FORMAT DEBUG_TIMESTAMP_LEVELS P2P_LEVEL NET_GDR_LEVEL
    """.split()
)
"""Variables read as text (or with a parser of their own), without the ``NCCL_`` prefix."""

NCCL_RETIRED = {
    "NCCL_IB_GDR_LEVEL": ("NCCL_NET_GDR_LEVEL", "renamed"),
    "NCCL_IB_CUDA_SUPPORT": ("NCCL_NET_GDR_LEVEL", "replaced"),
    "NCCL_LL_THRESHOLD": ("NCCL_PROTO", "removed"),
    "NCCL_TREE_THRESHOLD": ("NCCL_ALGO", "removed"),
    "NCCL_SINGLE_RING_THRESHOLD": ("NCCL_ALGO", "removed"),
    "NCCL_CHECKS_DISABLE": ("", "removed"),
    "NCCL_RINGS": ("", "removed"),
}
"""Names older NCCL releases read and current ones do not: (what to use, how it went)."""

NOT_NCCL_LIBRARY = frozenset(
    {"NCCL_VERSION", "NCCL_ROOT", "NCCL_HOME", "NCCL_LIB_DIR", "NCCL_INCLUDE_DIR", "NCCL_LIBRARY"}
)
"""``NCCL_*`` names that build systems and container images set; NCCL itself does not read them."""

NCCL_FUNCS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
NCCL_PROTOS = ("LL", "LL128", "Simple")
NCCL_ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT", "CollNet")
NCCL_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "ABORT", "TRACE")
NCCL_DEBUG_SUBSYSTEMS = (
    "INIT",
    "COLL",
    "P2P",
    "SHM",
    "NET",
    "GRAPH",
    "TUNING",
    "ENV",
    "ALLOC",
    "ALLOC_HOST",
    "CALL",
    "PROXY",
    "NVLS",
    "BOOTSTRAP",
    "REG",
    "PROFILE",
    "RAS",
    "DESTROY",
    "ALL",
)
NCCL_PATH_LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")

# --- PyTorch ------------------------------------------------------------------------------------

TORCH_NCCL_VARS = frozenset(
    """
    TORCH_NCCL_BCAST_UNIQUEID TORCH_NCCL_SHOW_EAGER_INIT_P2P_SERIALIZATION_WARNING TORCH_NCCL_HIGH_PRIORITY
    TORCH_NCCL_BLOCKING_WAIT TORCH_NCCL_ASYNC_ERROR_HANDLING TORCH_NCCL_DUMP_ON_TIMEOUT TORCH_NCCL_PROPAGATE_ERROR
    TORCH_NCCL_DESYNC_DEBUG TORCH_NCCL_ENABLE_TIMING TORCH_NCCL_ENABLE_MONITORING TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC
    TORCH_NCCL_RETHROW_CUDA_ERRORS TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC TORCH_NCCL_COORD_CHECK_MILSEC
    TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN TORCH_NCCL_CUDA_EVENT_CACHE TORCH_NCCL_RANKS_PER_ROOT TORCH_NCCL_NAN_CHECK
    TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK TORCH_NCCL_DEBUG_INFO_PIPE_FILE TORCH_NCCL_USE_COMM_NONBLOCKING
    TORCH_NCCL_NONBLOCKING_TIMEOUT TORCH_NCCL_AVOID_RECORD_STREAMS
    TORCH_FR_BUFFER_SIZE TORCH_FR_DUMP_TEMP_FILE TORCH_FR_CPP_STACK TORCH_FR_DUMP_DYNAMIC_FILE_NAME
    """.split()
)

RENAMED = {
    # PyTorch's Flight Recorder moved from TORCH_NCCL_* to TORCH_FR_* (the old names still work, for now)
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "TORCH_FR_BUFFER_SIZE",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "TORCH_FR_DUMP_TEMP_FILE",
    "TORCH_NCCL_TRACE_CPP_STACK": "TORCH_FR_CPP_STACK",
    # PyTorch's own variables that used to be spelled as if NCCL read them
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG",
    "NCCL_ENABLE_TIMING": "TORCH_NCCL_ENABLE_TIMING",
    "NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK": "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK",
}
"""Deprecated spelling -> the name PyTorch reads first."""

NOBODY_READS = {
    "NCCL_TIMEOUT": (
        "neither NCCL nor PyTorch reads NCCL_TIMEOUT: the collective timeout is init_process_group(timeout=...), "
        "which SkyRL sets from SKYRL_WORKER_NCCL_TIMEOUT_IN_S",
        "unset NCCL_TIMEOUT; set SKYRL_WORKER_NCCL_TIMEOUT_IN_S (seconds) instead",
    ),
}

TORCH_DEPRECATED_NOOP = {
    "TORCH_NCCL_AVOID_RECORD_STREAMS": "avoiding recordStream is the default now; PyTorch warns that the variable is deprecated",
}

_BOOL_WORDS = {"0", "1", "true", "false", "yes", "no", "on", "off", "y", "n"}
_STRTOLL = re.compile(r"^\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


# --- value checks -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValueProblem:
    """A value a reader will reject or misread."""

    severity: str
    """``fail``: the run will break or do the opposite of what was meant; ``warn``: ignored."""
    detail: str
    fix: str


def strtoll(value: str) -> int | None:
    """The integer NCCL's ``strtoll(value, 0)`` reads from the start of ``value`` (decimal, 0x hex, or
    octal after a leading 0: ``010`` is 8, and ``08`` reads as 0), or None."""
    m = _STRTOLL.match(value)
    if not m:
        return None
    sign, digits = m.groups()
    number = (
        int(digits, 16) if digits[:2].lower() == "0x" else int(digits, 8) if digits.startswith("0") else int(digits)
    )
    return -number if sign == "-" else number


def _check_int(name: str, value: str) -> ValueProblem | None:
    if value.strip() == "":
        return None
    m, parsed = _STRTOLL.match(value), strtoll(value)
    if m is None or parsed is None:
        return ValueProblem(
            "fail", f"{name}={value!r} is not a number: NCCL reads it as 0", f"set {name} to an integer"
        )
    if m.end() != len(value.rstrip()):
        return ValueProblem("warn", f"{name}={value!r}: NCCL reads only the leading {parsed}", f"set {name}={parsed}")
    digits = m.group(2)
    if len(digits) > 1 and digits.startswith("0") and digits[1] not in "xX":
        return ValueProblem(
            "warn",
            f"{name}={value!r}: NCCL reads a leading 0 as octal, so this is {parsed}",
            f"set {name}={parsed} or write the number without the leading 0",
        )
    return None


def _check_list(name: str, value: str, elems: tuple[str, ...]) -> ValueProblem | None:
    """NCCL's ``[func:][^]elem,elem;func:...`` syntax for NCCL_PROTO and NCCL_ALGO."""
    allowed = {e.lower(): e for e in elems}
    funcs = {f.lower() for f in NCCL_FUNCS}
    for i, token in enumerate(t for t in value.split(";") if t != ""):
        prefix, sep, rest = token.partition(":")
        if sep:
            if prefix.strip().lower() not in funcs:
                return ValueProblem(
                    "fail",
                    f"{name}={value!r}: unknown collective {prefix!r}",
                    f"use one of {', '.join(NCCL_FUNCS)} before ':' or drop the prefix",
                )
            elems_part = rest
        else:
            if i > 0:
                return ValueProblem(
                    "fail",
                    f"{name}={value!r}: every entry but the first needs a 'Func:' prefix",
                    f"write {name} as 'elem,elem' or 'Func:elem;Func:elem'",
                )
            elems_part = token
        for elem in elems_part.lstrip("^").split(","):
            if elem.strip().lower() not in allowed:
                return ValueProblem(
                    "fail",
                    f"{name}={value!r}: {elem!r} is not one of {', '.join(e for e in elems if e != 'CollNet')}; "
                    "NCCL fails at init (ncclInvalidUsage)",
                    f"set {name} to a comma list of {', '.join(e for e in elems if e != 'CollNet')} or unset it",
                )
    return None


def _check_debug(name: str, value: str) -> ValueProblem | None:
    if value.strip().upper() not in NCCL_DEBUG_LEVELS:
        return ValueProblem(
            "warn",
            f"{name}={value!r} is not a level NCCL knows: it is ignored",
            f"set {name} to one of {', '.join(NCCL_DEBUG_LEVELS)}",
        )
    return None


def _check_subsys(name: str, value: str) -> ValueProblem | None:
    bad = [s for s in value.lstrip("^").split(",") if s.strip() and s.strip().upper() not in NCCL_DEBUG_SUBSYSTEMS]
    if bad:
        return ValueProblem(
            "warn",
            f"{name}={value!r}: unknown subsystem(s) {', '.join(bad)}",
            f"use a comma list of {', '.join(NCCL_DEBUG_SUBSYSTEMS)} (a leading ^ inverts)",
        )
    return None


def _check_level(name: str, value: str) -> ValueProblem | None:
    if value.strip().upper() in NCCL_PATH_LEVELS or value.strip().isdigit():
        return None
    return ValueProblem(
        "fail",
        f"{name}={value!r} is not a path level: NCCL ignores it and uses its default",
        f"set {name} to one of {', '.join(NCCL_PATH_LEVELS)}",
    )


def _check_bool(name: str, value: str) -> ValueProblem | None:
    if value.strip().lower() not in _BOOL_WORDS:
        return ValueProblem("warn", f"{name}={value!r} is not a boolean", f"set {name} to 0 or 1")
    return None


def _check_nonneg_int(name: str, value: str) -> ValueProblem | None:
    try:
        if int(value) >= 0:
            return None
    except ValueError:
        pass
    return ValueProblem("fail", f"{name}={value!r} is not a non-negative integer", f"set {name} to an integer >= 0")


def _check_positive_int(name: str, value: str) -> ValueProblem | None:
    try:
        if int(value) > 0:
            return None
    except ValueError:
        pass
    return ValueProblem("fail", f"{name}={value!r} is not a positive integer", f"set {name} to an integer > 0")


def _check_error_handling(name: str, value: str) -> ValueProblem | None:
    if value.strip() in {"0", "1", "2", "3"}:
        return None
    return ValueProblem(
        "fail",
        f"{name}={value!r}: PyTorch takes 0 (none), 1 (tear down), 2 (clean up only) or 3 (skip clean-up, the default)",
        f"set {name} to 0, 1, 2 or 3",
    )


def _check_dist_debug(name: str, value: str) -> ValueProblem | None:
    if value.strip().upper() in {"OFF", "INFO", "DETAIL"}:
        return None
    return ValueProblem(
        "fail",
        f"{name}={value!r}: PyTorch accepts OFF, INFO or DETAIL and raises otherwise",
        f"set {name} to OFF, INFO or DETAIL",
    )


VALUE_CHECKS: Mapping[str, Callable[[str, str], ValueProblem | None]] = {
    "NCCL_PROTO": lambda n, v: _check_list(n, v, NCCL_PROTOS),
    "NCCL_ALGO": lambda n, v: _check_list(n, v, NCCL_ALGOS),
    "NCCL_DEBUG": _check_debug,
    "NCCL_DEBUG_SUBSYS": _check_subsys,
    "NCCL_P2P_LEVEL": _check_level,
    "NCCL_NET_GDR_LEVEL": _check_level,
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": _check_error_handling,
    "NCCL_ASYNC_ERROR_HANDLING": _check_error_handling,
    "TORCH_NCCL_BLOCKING_WAIT": _check_bool,
    "TORCH_NCCL_DUMP_ON_TIMEOUT": _check_bool,
    "TORCH_NCCL_DESYNC_DEBUG": _check_bool,
    "TORCH_NCCL_ENABLE_MONITORING": _check_bool,
    "TORCH_NCCL_ENABLE_TIMING": _check_bool,
    "TORCH_NCCL_PROPAGATE_ERROR": _check_bool,
    "TORCH_NCCL_NAN_CHECK": _check_bool,
    "TORCH_NCCL_RETHROW_CUDA_ERRORS": _check_bool,
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": _check_positive_int,
    "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": _check_nonneg_int,
    "TORCH_FR_BUFFER_SIZE": _check_nonneg_int,
    "TORCH_NCCL_TRACE_BUFFER_SIZE": _check_nonneg_int,
    "TORCH_DISTRIBUTED_DEBUG": _check_dist_debug,
    "SKYRL_WORKER_NCCL_TIMEOUT_IN_S": _check_positive_int,
}


def check_value(name: str, value: str) -> ValueProblem | None:
    """What is wrong with ``name=value`` for the program that reads it (None when fine)."""
    fn = VALUE_CHECKS.get(name)
    if fn is not None:
        return fn(name, value)
    if name.startswith("NCCL_") and name[5:] in NCCL_INT_PARAMS:
        return _check_int(name, value)
    return None


def interfaces_matching(spec: str, names: list[str]) -> list[str]:
    """The interfaces NCCL_SOCKET_IFNAME (or GLOO_SOCKET_IFNAME) selects: comma-separated prefixes,
    ``=`` for exact names, a leading ``^`` to exclude."""
    exclude = spec.startswith("^")
    body = spec[1:] if exclude else spec
    exact = body.startswith("=")
    if exact:
        body = body[1:]
    pats = [p for p in body.split(",") if p]

    def hit(n: str) -> bool:
        return any(n == p if exact else n.startswith(p) for p in pats)

    return [n for n in names if hit(n) != exclude]


# --- names --------------------------------------------------------------------------------------


def known_names() -> frozenset[str]:
    """Every variable name this module knows to be read by NCCL or PyTorch."""
    return frozenset(
        {f"NCCL_{n}" for n in NCCL_INT_PARAMS | NCCL_STRING_VARS} | TORCH_NCCL_VARS | set(RENAMED.values())
    )


def is_ours(name: str) -> bool:
    """Variables of nccl-tune itself (``NCCL_TUNE_*``), not NCCL's."""
    return name.startswith("NCCL_TUNE_")


def relevant(name: str) -> bool:
    """Names the doctor looks at: NCCL's, PyTorch's NCCL/Flight Recorder/distributed ones."""
    if is_ours(name):
        return False
    return name.startswith(("NCCL_", "TORCH_NCCL_", "TORCH_FR_")) or name in VALUE_CHECKS


def close_match(name: str) -> str | None:
    """The known name nearest to a misspelt one (``NCCL_PROTOCOL`` -> ``NCCL_PROTO``)."""
    return nearest(name, known_names(), cutoff=0.8)


def default_env() -> Mapping[str, str]:
    """The process environment (a seam for tests)."""
    return os.environ
