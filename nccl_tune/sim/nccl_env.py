"""The NCCL environment variables the twin models, read the way NCCL reads them.

Sources (NVIDIA/nccl): ``src/graph/tuning.cc`` (``parseList``: ``NCCL_ALGO``/``NCCL_PROTO`` are
``;``-separated entries, each an optional ``function:`` prefix and a ``,``-separated list, ``^``
negates, names are case-insensitive; an unknown name is ``ncclInvalidUsage`` with
``Unrecognized element token "x" when parsing "y"``), ``src/init.cc`` (the names: functions
Broadcast, Reduce, AllGather, ReduceScatter, AllReduce; algorithms Tree, Ring, CollNetDirect,
CollNetChain, NVLS, NVLSTree, PAT; protocols LL, LL128, Simple), ``src/misc/param.cc`` (integer
variables are read with ``strtoll``; a value that is not a number is not an error), and
``src/enqueue.cc`` (no usable algorithm/protocol pair for a collective is
``No algorithm/protocol available for function F with datatype T. NCCL_ALGO was set to X.``).

Which algorithms exist for which collective, and on this node, is decided in ``cost_model``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from nccl_tune.node.env_catalog import strtoll as catalog_strtoll

FUNCTIONS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")


@dataclass(frozen=True)
class NcclEnvProblem:
    """An NCCL variable NCCL itself rejects: the WARN line it prints and the error it returns."""

    variable: str
    value: str
    warn: str
    """The text after ``NCCL WARN``."""
    error: str = "invalid usage"
    """``ncclResult_t`` as PyTorch prints it (``invalid usage``, ``internal error``, ``unhandled system error``)."""


@dataclass(frozen=True)
class NcclSettings:
    """What NCCL will do on the modelled node, from its environment variables."""

    algo: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Per function: the algorithms allowed (all when the variable is unset)."""
    proto: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Per function: the protocols allowed."""
    algo_env: str | None = None
    proto_env: str | None = None
    p2p_disable: bool = False
    shm_disable: bool = False
    cumem_enable: bool | None = None
    """None: not set (the colocated vLLM engines set it to 0 in their processes)."""
    nvls_enable: int = 2
    """0 off, 1 on, 2 (default) when supported."""
    min_nchannels: int | None = None
    max_nchannels: int | None = None
    buffsize_bytes: int | None = None
    socket_ifname: str | None = None
    debug: str | None = None
    debug_subsys: str | None = None
    problems: tuple[NcclEnvProblem, ...] = ()
    """Variables NCCL refuses (the run fails at its first collective)."""

    def allowed(self, function: str) -> tuple[frozenset[str], frozenset[str]]:
        """(algorithms, protocols) allowed for ``function``."""
        return (
            self.algo.get(function, frozenset(ALGORITHMS)),
            self.proto.get(function, frozenset(PROTOCOLS)),
        )


def _parse_list(
    variable: str, text: str, names: tuple[str, ...]
) -> tuple[dict[str, frozenset[str]], NcclEnvProblem | None]:
    """NCCL's ``parseList``: per-function enabled sets, or the problem NCCL reports."""
    enabled = {f: set(names) for f in FUNCTIONS}
    lower = {n.lower(): n for n in names}
    lower_funcs = {f.lower(): f for f in FUNCTIONS}
    entries = text.split(";")
    for i, entry in enumerate(entries):
        if entry == "" and i == len(entries) - 1 and i > 0:
            continue
        prefix, sep, elems = entry.partition(":")
        if not sep:
            if i > 0:
                return {}, NcclEnvProblem(variable, text, f'All entries except the first must have a prefix: "{text}"')
            prefix, elems = "", entry
        targets = list(FUNCTIONS)
        if prefix:
            f = lower_funcs.get(prefix.strip().lower())
            if f is None:
                return {}, NcclEnvProblem(variable, text, f'Unrecognized prefix token "{prefix}" when parsing "{text}"')
            targets = [f]
        negate = elems.startswith("^")
        if negate:
            elems = elems[1:]
        chosen: set[str] = set()
        for tok in elems.split(","):
            name = lower.get(tok.strip().lower())
            if name is None:
                return {}, NcclEnvProblem(variable, text, f'Unrecognized element token "{tok}" when parsing "{text}"')
            chosen.add(name)
        for f in targets:
            enabled[f] = (set(names) - chosen) if negate else set(chosen)
    return {f: frozenset(v) for f, v in enabled.items()}, None


def strtoll(text: str) -> int:
    """C's ``strtoll(text, NULL, 0)``: the leading number (hex ``0x``, octal ``0``), 0 when none
    (``node.env_catalog.strtoll``, which says None there)."""
    return catalog_strtoll(text) or 0


def _int_var(env: Mapping[str, str | None], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    return strtoll(raw)


def read_nccl_env(env: Mapping[str, str | None]) -> NcclSettings:
    """The NCCL settings a process started with ``env`` gets (unset and ``None`` values are ignored)."""
    problems: list[NcclEnvProblem] = []
    algo: dict[str, frozenset[str]] = {}
    proto: dict[str, frozenset[str]] = {}
    algo_env = env.get("NCCL_ALGO") or None
    proto_env = env.get("NCCL_PROTO") or None
    if proto_env is not None:
        proto, problem = _parse_list("NCCL_PROTO", proto_env, PROTOCOLS)
        if problem:
            problems.append(problem)
    if algo_env is not None:
        algo, problem = _parse_list("NCCL_ALGO", algo_env, ALGORITHMS)
        if problem:
            problems.append(problem)
    cumem = _int_var(env, "NCCL_CUMEM_ENABLE")
    nvls = _int_var(env, "NCCL_NVLS_ENABLE")
    buff = _int_var(env, "NCCL_BUFFSIZE")
    return NcclSettings(
        algo=algo,
        proto=proto,
        algo_env=algo_env,
        proto_env=proto_env,
        p2p_disable=bool(_int_var(env, "NCCL_P2P_DISABLE")),
        shm_disable=bool(_int_var(env, "NCCL_SHM_DISABLE")),
        cumem_enable=None if cumem is None else bool(cumem),
        nvls_enable=2 if nvls is None else nvls,
        min_nchannels=_int_var(env, "NCCL_MIN_NCHANNELS"),
        max_nchannels=_int_var(env, "NCCL_MAX_NCHANNELS"),
        buffsize_bytes=buff if buff is not None and buff > 0 else None,
        socket_ifname=env.get("NCCL_SOCKET_IFNAME") or None,
        debug=env.get("NCCL_DEBUG") or None,
        debug_subsys=env.get("NCCL_DEBUG_SUBSYS") or None,
        problems=tuple(problems),
    )


# -- what NCCL reports about its environment (NCCL_DEBUG=INFO) ----------------------------------

STRING_VARS = (
    "NCCL_ALGO", "NCCL_PROTO", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_NET", "NCCL_NET_PLUGIN", "NCCL_TOPO_FILE",
    "NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL", "NCCL_LAUNCH_MODE",
)  # fmt: skip
"""Variables NCCL reads as text (reported as given)."""
INT_VARS = (
    "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_CUMEM_ENABLE", "NCCL_NVLS_ENABLE", "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE", "NCCL_IB_DISABLE", "NCCL_NCHANNELS_PER_NET_PEER", "NCCL_COLLNET_ENABLE",
    "NCCL_CROSS_NIC", "NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_NSOCKS_PERTHREAD", "NCCL_SOCKET_NTHREADS",
)  # fmt: skip
"""Integer parameters (``NCCL_PARAM``): read with ``strtoll`` and reported as the number read, with
``ncclLoadParam``'s full stop after it (``NCCL_BUFFSIZE set by environment to 4194304.``)."""
SUBSYSTEMS = (
    "INIT",
    "COLL",
    "P2P",
    "SHM",
    "NET",
    "GRAPH",
    "TUNING",
    "ENV",
    "ALLOC",
    "CALL",
    "PROXY",
    "NVLS",
    "BOOTSTRAP",
    "REG",
)
DEFAULT_SUBSYSTEMS = frozenset({"INIT", "BOOTSTRAP", "ENV"})
"""NCCL's subsystems when ``NCCL_DEBUG_SUBSYS`` is unset (NCCL's environment documentation)."""


def debug_subsystems(text: str | None) -> frozenset[str]:
    """The subsystems ``NCCL_DEBUG_SUBSYS`` selects: a comma list, ``ALL``, or ``^`` to exclude."""
    if text is None or text.strip() == "":
        return DEFAULT_SUBSYSTEMS
    raw = text.strip()
    invert = raw.startswith("^")
    names = {t.strip().upper() for t in raw.lstrip("^").split(",") if t.strip()}
    chosen = set(SUBSYSTEMS) if "ALL" in names else names & set(SUBSYSTEMS)
    return frozenset(set(SUBSYSTEMS) - chosen if invert else chosen)


def info_enabled(env: Mapping[str, str | None], subsystem: str) -> bool:
    """Does NCCL print INFO lines of ``subsystem`` with this environment?"""
    level = (env.get("NCCL_DEBUG") or "").strip().upper()
    return level in ("INFO", "TRACE") and subsystem in debug_subsystems(env.get("NCCL_DEBUG_SUBSYS"))


def env_report(env: Mapping[str, str | None]) -> list[str]:
    """NCCL's ``NCCL_X set by environment to V`` texts for the variables it reads, when its ENV
    subsystem is on (the order is the twin's; NCCL reports each parameter when it first reads it)."""
    if not info_enabled(env, "ENV"):
        return []
    out = []
    for name in STRING_VARS + INT_VARS:
        raw = env.get(name)
        if raw is None or raw == "":
            continue
        value = f"{strtoll(raw)}." if name in INT_VARS else raw
        out.append(f"{name} set by environment to {value}")
    return out
