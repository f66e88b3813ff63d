"""What NCCL runs with when a setting is past its limit: the clamps NCCL applies, not refusals.

Source (read, not copied): NCCL's ``src/transport/net_socket.cc`` (``ncclNetSocketGetNsockNthread``).
``NCCL_SOCKET_NTHREADS`` above 16 is set to 16, and when the threads times
``NCCL_NSOCKS_PERTHREAD`` exceed 64 sockets, the sockets per thread become ``64 // threads``; NCCL
warns (``NET/Socket : the total number of sockets is greater than the maximum allowed, setting
NCCL_NSOCKS_PERTHREAD to 4``) and runs. Either variable left unset is chosen by NCCL per cloud
(AWS 2 threads x 8 sockets, GCP 4 x 1, else none), so no clamp is known for it here.

Two configs that differ only past such a limit are the same run: the tuner launches one of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nccl_tune.node.env_catalog import strtoll

MAX_SOCKET_THREADS = 16
"""``NCCL_SOCKET_NTHREADS`` NCCL uses at most."""
MAX_SOCKETS = 64
"""``NCCL_SOCKET_NTHREADS`` x ``NCCL_NSOCKS_PERTHREAD`` NCCL opens at most per connection."""
THREADS, SOCKS = "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD"


@dataclass(frozen=True)
class Clamp:
    """One variable NCCL will not run as given."""

    name: str
    given: int
    runs_as: int
    why: str

    def describe(self) -> str:
        return f"NCCL runs {self.name}={self.given} as {self.runs_as} ({self.why})"


def _int(env: Mapping[str, Any], name: str) -> int | None:
    value = env.get(name)
    if value is None or isinstance(value, bool):
        return None
    return value if isinstance(value, int) else strtoll(str(value))


def clamps(env: Mapping[str, Any]) -> tuple[Clamp, ...]:
    """The clamps NCCL applies to ``env`` (variable -> value, as text or numbers; ``unset`` and
    missing variables are left to NCCL and clamp nothing)."""
    out = []
    threads, socks = _int(env, THREADS), _int(env, SOCKS)
    if threads is not None and threads > MAX_SOCKET_THREADS:
        out.append(Clamp(THREADS, threads, MAX_SOCKET_THREADS, f"at most {MAX_SOCKET_THREADS} threads"))
        threads = MAX_SOCKET_THREADS
    if threads is not None and socks is not None and threads > 0 and threads * socks > MAX_SOCKETS:
        out.append(
            Clamp(
                SOCKS,
                socks,
                MAX_SOCKETS // threads,
                f"{THREADS}={threads} x {socks} sockets is more than {MAX_SOCKETS}",
            )
        )
    return tuple(out)


def effective(env: Mapping[str, Any]) -> dict[str, Any]:
    """``env`` with the values NCCL runs with in place of the ones it clamps (as text where the
    given value was text)."""
    out = dict(env)
    for c in clamps(env):
        out[c.name] = str(c.runs_as) if isinstance(env[c.name], str) else c.runs_as
    return out
