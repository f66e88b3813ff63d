"""``nccl-tune spaces show``: a space as a person reads it."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from nccl_tune.search_spaces.space import MemoryEffect, SearchSpace
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.trial import rate_unit_text


def print_space(space: SearchSpace, console: Console) -> None:
    console.print(f"[bold]{escape(space.name)}[/]  [dim]{escape(space.source)}[/]", highlight=False)
    if space.description:
        console.print(escape(space.description), highlight=False, soft_wrap=True)
    table = Table(title="parameters")
    for col in ("name", "values", "default", "notes"):
        table.add_column(col, overflow="fold")
    for p in space.parameters:
        notes = [
            p.target.value
            if p.arg is None
            else f"arg {p.arg}" + ("" if p.arg_style.value == "separate" else f" ({p.arg_style.value})")
        ]
        named = " (from its name)"
        if p.memory.value != "unknown":
            notes.append(f"memory {p.memory.value}" + named * ("memory" in p.memory_from_name))
        if p.host_memory.value != "unknown":
            notes.append(f"host memory {p.host_memory.value}" + named * ("host_memory" in p.memory_from_name))
        if p.semantic:
            notes.append("semantic")
        table.add_row(
            escape(p.name),
            escape(", ".join(format_value(c) for c in p.choices)),
            "-" if p.default is None else escape(format_value(p.default)),
            ", ".join(notes),
        )
    console.print(table)
    for p in space.parameters:
        if p.help:
            console.print(f"  [bold]{escape(p.name)}[/]: {escape(p.help)}", highlight=False, soft_wrap=True)
    if space.context:
        console.print("[bold]context[/] (the command's values the rules read; change with --set):", highlight=False)
        for k, v in space.context.items():
            console.print(f"  {escape(k)} = {escape(format_value(v))}", highlight=False)
    if space.derived:
        console.print("[bold]derived[/]:", highlight=False)
        for d in space.derived:
            spelled = f" ({d.arg})" if d.arg else ""
            console.print(f"  {escape(d.key + spelled)} = {escape(d.expr.text)}", highlight=False, soft_wrap=True)
    if space.constraints:
        console.print("[bold]rules[/]:", highlight=False)
        for c in space.constraints:
            console.print(f"  {escape(c.expr.text)}  [dim]# {escape(c.message)}[/]", highlight=False, soft_wrap=True)
    if space.trial_overrides or space.trial_env:
        console.print("[bold]every trial[/]:", highlight=False)
        for k, v in space.trial_overrides.items():
            console.print(escape(f"  {k}={v}"), highlight=False)
        for k, v in space.trial_env.items():
            console.print(escape(f"  env {k}={v}"), highlight=False)
    progress = space.progress
    if progress.detect:
        how = "the preset is recognised from the first trial's output"
    else:
        how = f"preset {progress.preset}" if progress.preset else f"its own step rule {progress.step_end[0]!r}"
    units = {
        "samples" if u == "steps" and space.samples_per_step is not None else u for u in progress.throughput_units()
    }
    shown = " or ".join(rate_unit_text(u) for u in sorted(units)) or "a unit known after the first trial"
    console.print(escape(f"progress: {how}; throughput in {shown}"), highlight=False, soft_wrap=True)
    console.print(escape(worst_batch_text(space)), highlight=False, soft_wrap=True)
    said = memory_text(space)
    if said:
        console.print(escape(said), highlight=False, soft_wrap=True)
    clocks = space.clocks
    console.print(
        f"[bold]stop[/] after {space.stop.warmup_steps} warm-up + {space.stop.measured_steps} measured steps "
        "(more once a study's trials measure steps that scatter beyond the run-to-run noise); "
        f"start-up {clocks.startup_timeout_s:g}s, stall {clocks.stall_timeout_s:g}s "
        f"(adaptive: {clocks.stall_multiplier:g}x the longest known phase, at least {clocks.stall_floor_s:g}s), "
        f"trial {clocks.trial_timeout_s:g}s, grace {clocks.grace_s:g}s",
        highlight=False,
        soft_wrap=True,
    )


def worst_batch_text(space: SearchSpace) -> str:
    """How a winner is proven stable at the longest batch its config allows (``stability``), in a line."""
    ways = []
    if space.every_step_longest:
        ways.append("every step carries it, so a trial's own peak is its worst case")
    if space.force_worst_case:
        ways.append("the winner-to-be runs once with " + ", ".join(f.key for f in space.force_worst_case))
    if space.worst_case_tokens is not None:
        ways.append(f"step peaks are extrapolated to {' '.join(space.worst_case_tokens.text.split())} tokens")
    how = "; ".join(ways) or (
        "the space names no way to reach it: a winner reads unproven there (stability in docs/search-spaces.md)"
    )
    return f"worst batch: {how}; a stable config leaves {space.min_headroom_frac:.0%} of the GPU free"


def memory_text(space: SearchSpace) -> str | None:
    """The device-memory effects the space did not write, in a line (None when it wrote them all):
    those its parameters' names gave, and those left unknown."""
    named = [f"{p.name} {p.memory.value}" for p in space.parameters if "memory" in p.memory_from_name]
    unknown = [p.name for p in space.parameters if p.memory is MemoryEffect.UNKNOWN]
    parts = []
    if named:
        parts.append(f"taken from their names: {', '.join(named)} (write memory: to say otherwise)")
    if unknown:
        parts.append(
            f"unknown: {', '.join(unknown)} (a run out of memory bounds their other values only loosely: "
            "write memory: where you know it)"
        )
    return "memory effects " + "; ".join(parts) if parts else None
