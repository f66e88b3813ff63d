"""The knobs a parameter's name suggests: a micro-batch, a batch size, a sequence length, CPU
offload, activation checkpointing, data-loader workers (``ROLES``), and how each moves memory.

``spaces init`` (``starter``) picks an option as a parameter by its role, and writes its kind,
``memory:``, ``host_memory:`` and ``semantic:`` from it. A space file that leaves ``memory:`` or
``host_memory:`` out gets them from the same roles (``memory_from_name``), for the values whose
order the effect can follow (a number, a bool; not a categorical's words, whose order is the
space's), and NCCL's variables (``NCCL_*``) a ``small`` effect; the loader marks what it filled in
(``Parameter.memory_from_name``) and ``spaces show`` and ``run`` say so. An effect a space writes,
``unknown`` included, is never replaced here (the search may read an unknown one's direction from
its runs: ``tuner/search/memory_effects``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nccl_tune.search_spaces.space import MemoryEffect, ParamKind, Target, ordered_choices


@dataclass(frozen=True)
class Role:
    """What kind of knob an option name suggests, and how it moves memory and the training."""

    name: str
    pattern: str
    memory: str
    semantic: bool
    help: str
    host_memory: str = "unknown"
    """How it moves host RAM (``increasing``: data-loader workers, CPU offload)."""


ROLES = (
    Role("micro", r"micro.*batch|batch.*micro", "increasing", False, "micro-batch per forward/backward"),
    Role(
        "batch",
        r"(?<!eval_)(?<!val_)(?<!test_)batch_?size|batch$|per_device_train_batch",
        "increasing",
        True,
        "samples per step per device",
    ),
    Role("accum", r"accum", "none", True, "gradient accumulation steps"),
    Role(
        "seq",
        r"seq_?len|max_?(seq_?)?length|block_size|max_prompt_length|context_len",
        "increasing",
        True,
        "tokens per sample",
    ),
    Role("offload", r"offload", "decreasing", False, "CPU offload (less GPU memory, slower steps)", "increasing"),
    Role(
        "checkpointing",
        r"checkpointing|recompute|activation_ckpt|grad_ckpt",
        "decreasing",
        False,
        "activation checkpointing (less GPU memory, slower steps)",
    ),
    Role(
        "workers",
        r"num_workers|dataloader_workers|workers$",
        "none",
        False,
        "data-loader worker processes",
        "increasing",
    ),
)
SKIP = re.compile(r"dir|path|file|url|seed|interval|every|save|eval|valid|test|log")
EVAL_SECTION = re.compile(r"eval|valid|test")


def norm_key(key: str) -> str:
    """The identifier a flag or key is called by in expressions (``--batch-size`` -> ``batch_size``)."""
    return re.sub(r"[^A-Za-z0-9_.]+", "_", key.lstrip("-+")).strip("_.").lower()


def role_of(key: str) -> Role | None:
    """The knob an option's name suggests (the last part of a dotted key decides), or None; none in
    a section for evaluation (``eval_loader.num_workers``)."""
    *parents, name = norm_key(key).split(".")
    if SKIP.search(name) or any(EVAL_SECTION.search(part) for part in parents):
        return None
    return next((r for r in ROLES if re.search(r.pattern, name)), None)


def param_role(name: str, arg: str | None) -> Role | None:
    """The knob a parameter's name suggests, else its flag's (``role_of``)."""
    return role_of(name) or (role_of(arg) if arg else None)


def memory_from_name(
    name: str, arg: str | None, kind: ParamKind, choices: tuple[Any, ...], target: Target
) -> tuple[MemoryEffect | None, MemoryEffect | None]:
    """(``memory``, ``host_memory``) a parameter's name (or its flag) suggests; None for either when
    it suggests nothing, or a direction the values' order cannot carry."""
    if target is Target.ENV and name.upper().startswith("NCCL_"):
        return MemoryEffect.SMALL, None  # NCCL's buffers: a few hundred MiB either way
    role = param_role(name, arg)
    if role is None:
        return None, None
    return _along(MemoryEffect(role.memory), kind, choices), _along(MemoryEffect(role.host_memory), kind, choices)


def _along(effect: MemoryEffect, kind: ParamKind, choices: tuple[Any, ...]) -> MemoryEffect | None:
    """``effect``, unless it is a direction and ``choices`` are words (their order is not memory's)."""
    if effect is MemoryEffect.UNKNOWN:
        return None
    return effect if not effect.signed or ordered_choices(kind, choices) else None
