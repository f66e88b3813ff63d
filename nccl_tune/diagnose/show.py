"""Printing diagnoses for a person (``nccl-tune diagnose`` without ``--json``)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape

from nccl_tune.diagnose.api import Diagnosis

_STYLE = {"ok": "bold green", "budget": "bold yellow", "interrupted": "bold yellow", "no_end": "bold yellow"}


def _headline(d: Diagnosis) -> str:
    v = d.verdict
    style = _STYLE.get(v.failure_class.value, "bold red")
    parts = [f"[{style}]{v.failure_class.value}[/]"]
    if v.rank is not None:
        parts.append(f"rank {v.rank}")
    if v.phase:
        parts.append(f"in {escape(v.phase)}")
    if v.after_training:
        parts.append("[yellow]after training finished[/]")
    return " ".join(parts)


def print_diagnoses(diagnoses: Sequence[Diagnosis], console: Console) -> None:
    """Each diagnosis: path and class (rank, phase), the advice, the evidence lines, and the
    Flight Recorder's finding when dumps were read."""
    for i, d in enumerate(diagnoses):
        if i:
            console.print()
        console.print(f"[bold]{escape(str(d.path))}[/]: {_headline(d)}", highlight=False, soft_wrap=True)
        v = d.verdict
        if v.advice:
            console.print(f"  [cyan]advice:[/] {escape(v.advice)}", highlight=False, soft_wrap=True)
        if v.evidence:
            console.print("  [dim]evidence:[/]", highlight=False)
            for e in v.evidence:
                console.print(f"    [dim]{escape(str(e))}[/]", highlight=False, soft_wrap=True)
        fr = d.flight_recorder
        if fr is not None and (fr.ranks_dumped or fr.errors):
            console.print(f"  [magenta]flight recorder:[/] {escape(fr.note)}", highlight=False, soft_wrap=True)
            if fr.library_verdict:
                console.print(f"    [dim]torch: {escape(fr.library_verdict)}[/]", highlight=False, soft_wrap=True)
            for st in fr.per_rank:
                console.print(
                    f"    [dim]rank {st.rank} ({escape(st.process_group)}): entered #{st.last_entered_seq} "
                    f"{escape(str(st.last_op))}, completed #{st.last_completed_seq}[/]",
                    highlight=False,
                )
            for err in fr.errors:
                console.print(f"    [yellow]{escape(err)}[/]", highlight=False, soft_wrap=True)
