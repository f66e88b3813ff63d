"""Rendezvous, stores, ports and connections: c10d, gloo, NCCL's bootstrap and id store, Ray's
cluster and placement groups."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from nccl_tune.diagnose.rules.nccl import transport_failed
from nccl_tune.diagnose.rules.rule import Kind, Rule, rx
from nccl_tune.diagnose.wording import AdviceContext
from nccl_tune.failure import FailureClass as F

_PORT = re.compile(r"(?P<host>\]|\b[\w.-]+):(?P<port>\d{2,5})\b")

_SOURCE_FILE = re.compile(r"\.(?:cpp|cc|c|h|hpp|py|cu)$")


def _listen_port(msg: str, det: dict[str, Any]) -> None:
    """The port named as ``host:port`` (not a source file's ``file.cpp:601``)."""
    for m in _PORT.finditer(msg):
        if not _SOURCE_FILE.search(m.group("host")):
            det["port"] = int(m.group("port"))
            break


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

LOOPBACK = ("127.", "::1", "localhost")
"""How a loopback peer address begins: no other node can be reached there."""


def _nccl_connect(ctx: AdviceContext) -> str:
    """``_CONNECT``, led by what a loopback peer says: NCCL took the loopback interface for its
    sockets (the one it finds first when no other is named), an address no other node answers on."""
    peer = ctx.details.get("peer") or ""
    if not peer.startswith(LOOPBACK):
        return _CONNECT
    return (
        f"NCCL dialled {peer.split('<')[0]}, a loopback address: it took the loopback interface for its sockets, "
        "which no other node answers on; set NCCL_SOCKET_IFNAME to the interface that reaches the other nodes "
        "(`ip -br addr`: the one with the address MASTER_ADDR is on, e.g. NCCL_SOCKET_IFNAME=eth0, or ^lo,docker to "
        "leave those out), and check /etc/hosts does not map the node's own name to 127.0.x.x"
    )


_PLACEMENT_GROUP = (
    "Ray could not create the placement group in time: the cluster has fewer free GPUs/CPUs than the job asks "
    "for (another job or a leftover Ray cluster holds them: `ray status`); free them, ask for fewer "
    "(placement/colocation settings), or raise SKYRL_RAY_PG_TIMEOUT_IN_S if an autoscaler is still adding nodes"
)

_RENDEZVOUS_FRAME = re.compile(
    rb'File "[^"\n]+", line \d+, in (?:init_process_group|_store_based_barrier|_create_c10d_store|next_rendezvous'
    rb"|_rendezvous_helper|rendezvous)\b"
)

_PEER_RESET_RAISED = re.compile(r"\b\w*(?:Error|Exception): Connection (?:reset|closed) by peer\s*$")


RENDEZVOUS_RESET = Rule("rendezvous_reset_frame", F.INIT_FAILURE, Kind.INIT, (), None, "rendezvous")
"""A peer's reset raised inside ``init_process_group`` (gloo's, or the store's): the rendezvous failed."""


def rendezvous_reset(m: re.Match[str] | None, msg: str, before: Callable[[], bytes]) -> Rule | None:
    """``Connection reset by peer`` raised from a frame of the rendezvous (``init_process_group``,
    the store's barrier) in the same traceback is a rendezvous that failed (a peer or the master
    went away while the group formed), not a peer's teardown: the same line mid-training is."""
    if not _PEER_RESET_RAISED.search(msg):
        return None
    window = before()
    head = window.rfind(b"Traceback (most recent call last)")
    return RENDEZVOUS_RESET if head >= 0 and _RENDEZVOUS_FRAME.search(window, head) else None


RAY_PLACEMENT_WAIT = Rule(
    "ray_placement_group_wait", F.INIT_FAILURE, Kind.ROOT, (), None, "placement_group", advice=_PLACEMENT_GROUP
)
"""Ray's bare ``GetTimeoutError`` raised by a wait for a placement group (``ray.get(pg.ready(),
timeout=...)``): the group was never ready."""

_PG_WAIT_FRAME = re.compile(
    rb"\b(?:pg|placement_group|pgs?\[\w*\]|pg_\w*)\.ready\(\)|wait_placement_group_ready|placement_group_table"
    rb"|_create_placement_group|get_placement_group|\bpg\.wait\("
)


def placement_group_wait(m: re.Match[str] | None, msg: str, before: Callable[[], bytes]) -> Rule | None:
    """A ``GetTimeoutError`` whose traceback (the bytes before it, from its last ``Traceback`` head)
    waits for a placement group is a placement group never ready, not a task that timed out."""
    if m is None or not (m.group("exception") or "").endswith("GetTimeoutError"):
        return None
    window = before()
    head = window.rfind(b"Traceback (most recent call last)")
    return RAY_PLACEMENT_WAIT if _PG_WAIT_FRAME.search(window, max(head, 0)) else None


RENDEZVOUS: tuple[Rule, ...] = (
    Rule(
        "c10d_connect_retry",
        F.INIT_FAILURE,
        Kind.SUPPORT,
        ("failed to connect to",),
        rx(
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
        rx(
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
        rx(r"(?:socketStartConnect|socketPollConnect|Net|NET/Socket|NET/IB)\w*\s*: Connect to (?P<peer>\S+) failed"),
        "nccl_connect",
        advice=_nccl_connect,
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
        rx(
            r"socketProgress\w*: (?:Connection closed by remote peer|Call to (?:recv from|send to) (?P<peer>\S+) failed)"
            r"|NET/Socket : socket progress error|Net : Call to \w+ (?:from|to) \S+ failed|Connection closed by remote peer"
            r"|Call to (?:recv|send) failed\b"
        ),
        "transport",
        advice=transport_failed,
    ),
    # a rank setting up an NCCL communicator, whose peer (the rank that publishes NCCL's id in the c10d
    # store) went away or stayed late: "... retrieving ncclUniqueId from [0] via c10d key-value store by
    # key '0', but store->get('0') got error: Connection reset by peer"
    Rule(
        "nccl_id_store",
        F.INIT_FAILURE,
        Kind.INIT,
        ("got error:",),
        rx(r"retrieving ncclUniqueId from \[(?P<peer_rank>\d+)\].*got error: (?P<error>[^.]+)"),
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
        rx(r"connectFullMesh failed|Unable to find address for:? (?P<iface>\S+)"),
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
            "timed out",  # c10d's "waitForInput: socket ... timed out"
            "DistNetworkError",
            "DistStoreError",
            "Socket Timeout",
            "waiting for clients",
        ),
        rx(
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
        rx(r"Connect timeout \[|\[Errno 11[03]\]|ConnectTimeout(?:Error)?\b|Connection timed out|No route to host"),
        "connect",
        exclude=("NCCL WARN", "NCCL INFO"),
        advice=_CONNECT,
    ),
    Rule(
        "ray_placement_group",
        F.INIT_FAILURE,
        Kind.ROOT,
        ("placement group", "Placement group"),
        rx(
            r"Failed to create placement group|[Pp]lacement group creation timed out|PlacementGroupSchedulingError"
            r"|[Tt]imed out waiting for (?:the )?placement groups?\b"
            r"|[Pp]lacement groups? \S*.{0,60}?(?:timed out|not ready|never (?:became )?ready|could not be (?:created|scheduled))"
        ),
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
)
"""Rendezvous, store, ports, connect."""
