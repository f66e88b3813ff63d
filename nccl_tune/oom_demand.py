"""How much device memory a failed CUDA allocation shows the process needed, read from PyTorch's
out-of-memory message: ``Tried to allocate X. GPU N has a total capacity of C of which F is free``.
At the failing allocation the GPU held ``C - F`` and the allocator asked for ``X`` more, so the
run needed at least ``C - F + X``: a lower bound on its peak, often well above the capacity.
Pure text in, figures out."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_SIZE = r"(?P<{name}>\d+(?:\.\d+)?) ?(?P<{name}_unit>[KMGT]?i?B)"
_MESSAGE = re.compile(
    r"Tried to allocate "
    + _SIZE.format(name="tried")
    + r"\. GPU \d+ has a total capacity of "
    + _SIZE.format(name="total")
    + r" of which "
    + _SIZE.format(name="free")
    + r" is free"
)
_SCALE = {
    "B": 1 / 2**30,
    "KiB": 1 / 2**20,
    "MiB": 1 / 2**10,
    "GiB": 1.0,
    "TiB": 2**10,
    "KB": 1e3 / 2**30,
    "MB": 1e6 / 2**30,
    "GB": 1e9 / 2**30,
    "TB": 1e12 / 2**30,
}


@dataclass(frozen=True)
class OomDemand:
    needed_gib: float
    """At least this much device memory (in use at the failure plus the allocation that failed)."""
    capacity_gib: float
    tried_gib: float = 0.0
    """The allocation that failed (what PyTorch asked for beyond what the GPU held)."""

    @property
    def needed_frac(self) -> float:
        return self.needed_gib / self.capacity_gib if self.capacity_gib else 0.0


def _gib(match: re.Match, name: str) -> float:
    return float(match.group(name)) * _SCALE.get(match.group(f"{name}_unit"), 1.0)


def oom_demand(lines: Iterable[str]) -> OomDemand | None:
    """The largest demand any of ``lines`` shows (None when none holds PyTorch's OOM message)."""
    best: OomDemand | None = None
    for line in lines:
        m = _MESSAGE.search(line)
        if m is None:
            continue
        total = _gib(m, "total")
        tried = _gib(m, "tried")
        demand = OomDemand(total - _gib(m, "free") + tried, total, tried)
        if best is None or demand.needed_gib > best.needed_gib:
            best = demand
    return best
