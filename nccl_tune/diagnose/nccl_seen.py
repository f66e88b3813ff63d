"""What NCCL itself says it read from the environment, per rank, against what a trial set.

A trial sets NCCL variables in its environment, but the processes that run NCCL may never get
them: a trainer can set its own values for its workers (SkyRL sets ``NCCL_CUMEM_ENABLE=0`` when
weights sync over NCCL), and workers of a Ray cluster started earlier inherit that cluster's
environment, not the trial's. NCCL reports every variable it read when its debug output includes
the ENV subsystem::

    node-0:4242:4259 [3] NCCL INFO NCCL_PROTO set by environment to LL128
    node-0:4242:4259 [3] NCCL INFO NCCL_BUFFSIZE set by environment to 4194304.

(integer parameters as the number NCCL parsed, followed by a full stop: ``ncclLoadParam``'s
``%s set by environment to %lld.``; the value read is the number). :func:`probe_env` turns that report on for a
trial (``NCCL_DEBUG=INFO``, ``NCCL_DEBUG_SUBSYS=INIT,ENV``: a bounded volume), :func:`parse_seen`
collects it per rank from the trial's log lines, and :func:`unreached` compares it with what the
trial set. Pure: text in, facts out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from nccl_tune.diagnose.text import strip_ansi

PROBE_LEVEL = "INFO"
PROBE_SUBSYS = "INIT,ENV"
_LINE = re.compile(
    r"(?P<host>[^\s:()]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL INFO "
    r"(?P<name>NCCL_[A-Z0-9_]+) set by environment to (?P<value>.*?)\s*$"
)
_KEY = "set by environment to"
_INT_STOP = re.compile(r"[-+]?\d+\.")
"""An integer parameter's value as NCCL reports it: the number, then a full stop."""
KNOWN_OVERRIDES: Mapping[tuple[str, str], str] = {
    ("NCCL_CUMEM_ENABLE", "0"): "weight sync over NCCL",
    ("NCCL_P2P_DISABLE", "1"): "no peer access between its GPUs",
    ("NCCL_SHM_DISABLE", "1"): "no peer access between its GPUs",
}
"""Values trainers are known to set for their workers, and why (SkyRL's
``prepare_runtime_environment``; vLLM sets ``NCCL_CUMEM_ENABLE=0`` in its own processes too)."""


@dataclass(frozen=True)
class Unreached:
    """A variable whose value, as the trial set it, did not reach NCCL."""

    name: str
    set_value: str | None
    """What the trial set (None: the trial removed it)."""
    seen: tuple[str | None, ...]
    """What NCCL reported on each rank that reported its environment (None: nothing)."""
    reason: str
    """One line: ``NCCL_CUMEM_ENABLE: the trainer sets it to 0 on its workers (weight sync over NCCL)``."""


def probe_env(env: Mapping[str, str | None]) -> dict[str, str]:
    """The variables to add to a trial's environment ``env`` (the tuner's environment with the
    trial's overlay) so that NCCL reports what it read: ``NCCL_DEBUG=INFO`` unless already INFO or
    TRACE, and the ENV subsystem in ``NCCL_DEBUG_SUBSYS`` (``INIT,ENV`` when unset or exclusive)."""
    out: dict[str, str] = {}
    level = (env.get("NCCL_DEBUG") or "").strip().upper()
    if level not in ("INFO", "TRACE"):
        out["NCCL_DEBUG"] = PROBE_LEVEL
    subsys = (env.get("NCCL_DEBUG_SUBSYS") or "").strip()
    names = {s.strip().upper() for s in subsys.split(",")}
    if not subsys or subsys.startswith("^"):
        out["NCCL_DEBUG_SUBSYS"] = PROBE_SUBSYS
    elif not names & {"ENV", "ALL"}:
        out["NCCL_DEBUG_SUBSYS"] = subsys + ",ENV"
    return out


def parse_seen(lines: Iterable[str], seen: dict[str, dict[str, str]] | None = None) -> dict[str, dict[str, str]]:
    """Per rank (``host:pid [device]``), the variables NCCL reported reading and their values;
    adds to ``seen`` when given (several files)."""
    out = seen if seen is not None else {}
    for raw in lines:
        if _KEY not in raw:
            continue
        m = _LINE.search(strip_ansi(raw.rstrip("\r\n")))
        if m is None:
            continue
        rank = f"{m.group('host')}:{m.group('pid')} [{m.group('dev')}]"
        value = m.group("value")
        out.setdefault(rank, {})[m.group("name")] = value[:-1] if _INT_STOP.fullmatch(value) else value
    return out


def _int(text: str) -> int | None:
    try:
        return int(text.strip(), 0)
    except ValueError:
        return None


def same_value(set_value: str | None, seen: str | None) -> bool:
    """Does NCCL's report match what was set? (integers compare as numbers: NCCL prints ``4194304``
    for ``0x400000``)."""
    if set_value is None or seen is None:
        return set_value is None and seen is None
    if set_value.strip() == seen.strip():
        return True
    a, b = _int(set_value), _int(seen)
    return a is not None and a == b


def _reason(name: str, set_value: str | None, seen: tuple[str | None, ...]) -> str:
    values = set(seen)
    if values == {None}:
        return (
            f"{name}: NCCL reported no {name} on any rank (the trial set {set_value}): the processes running "
            "NCCL did not get the trial's environment"
        )
    if len(values) == 1:
        (value,) = values
        why = KNOWN_OVERRIDES.get((name, str(value)))
        return f"{name}: the trainer sets it to {value} on its workers" + (f" ({why})" if why else "")
    shown = ", ".join(sorted("nothing" if v is None else v for v in values))
    return f"{name}: NCCL read different values on different ranks ({shown}), not what the trial set ({set_value})"


def unreached(
    names: Iterable[str], trial_env: Mapping[str, str | None], seen: Mapping[str, Mapping[str, str]]
) -> list[Unreached]:
    """The variables among ``names`` whose value in ``trial_env`` (None or absent: the trial removed
    it) differs from what NCCL reported on some rank. Empty when no rank reported its environment
    (nothing can be told: NCCL never started, or its ENV report was off)."""
    ranks = [dict(v) for _, v in sorted(seen.items()) if v]
    if not ranks:
        return []
    out = []
    for name in names:
        want = trial_env.get(name)
        got = tuple(r.get(name) for r in ranks)
        if all(same_value(want, g) for g in got):
            continue
        out.append(Unreached(name, want, got, _reason(name, want, got)))
    return out
