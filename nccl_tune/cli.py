"""The ``nccl-tune`` command line. Thin: each command parses its options, calls one library
function and maps ``NcclTuneError`` to its exit code. Libraries are imported inside the
commands so that ``--help`` stays fast."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from nccl_tune.errors import NcclTuneError

app = typer.Typer(
    name="nccl-tune",
    help="Tune a distributed training command for the fastest stable config, and explain every failure.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
spaces_app = typer.Typer(help="List and show search spaces.", no_args_is_help=True)
app.add_typer(spaces_app, name="spaces")

out = Console()
err = Console(stderr=True)


def _fail(exc: NcclTuneError) -> None:
    err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


def _emit_json(obj: object) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


@app.command("diagnose")
def diagnose_cmd(
    paths: List[Path] = typer.Argument(..., help="Log files, trial folders or folders of Flight Recorder dumps."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per input, one per line."),
) -> None:
    """Why a run died: root cause, rank, evidence lines and advice, from any log."""
    from nccl_tune.diagnose.api import diagnose_paths
    from nccl_tune.diagnose.render import print_diagnoses

    try:
        diagnoses = diagnose_paths(paths)
    except NcclTuneError as exc:
        _fail(exc)
    if as_json:
        for d in diagnoses:
            sys.stdout.write(json.dumps(d.to_json(), default=str) + "\n")
    else:
        print_diagnoses(diagnoses, out)


@app.command("doctor")
def doctor_cmd(as_json: bool = typer.Option(False, "--json", help="Machine-readable checks.")) -> None:
    """Is this node fit to tune on? GPUs, memory holders, ECC, NVLink, NCCL variables, limits, Ray."""
    from nccl_tune.diagnose.doctor import print_doctor, run_doctor

    report = run_doctor()
    if as_json:
        _emit_json(report.to_json())
    else:
        print_doctor(report, out)
    raise typer.Exit(report.exit_code)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
