"""The ``nccl-tune`` command line. Thin: each command parses its options, calls one library
function and maps ``NcclTuneError`` to its exit code. Libraries are imported inside the
commands so that ``--help`` stays fast."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
import typer.core
from rich.console import Console
from rich.markup import escape

from nccl_tune.errors import NcclTuneError

app = typer.Typer(
    name="nccl-tune",
    help="Tune a distributed training command for the fastest stable config, and explain every failure.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
spaces_app = typer.Typer(help="List, show and start search spaces.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(spaces_app, name="spaces")

PIPED_WIDTH = 10_000
"""The width of output that goes to a file or a pipe: no line is broken, tables included."""


def _console(stderr: bool = False) -> Console:
    """A console for stdout or stderr: the terminal's width on a terminal; piped or redirected,
    whole lines (``PIPED_WIDTH``), which a pager or ``grep`` reads as the program wrote them."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=PIPED_WIDTH, soft_wrap=True)


out = _console()
err = _console(stderr=True)


def _fail(exc: NcclTuneError) -> None:
    err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


def _emit_json(obj: object) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def _deliver(text: str, output: Path | None) -> None:
    """``text`` to stdout, or atomically to ``output`` (one-line error when it cannot be written)."""
    from nccl_tune.userfile import write_output

    if output is None:
        sys.stdout.write(text)
    else:
        write_output(output, text)
        err.print(escape(f"wrote {output}"), highlight=False, soft_wrap=True)


def _storage_errors(url: str):
    """The storage or the disk failing under a command: one line (``storage_faults``)."""
    from nccl_tune.tuner.records.storage import sqlite_path
    from nccl_tune.tuner.records.storage_faults import storage_errors

    return storage_errors(url, sqlite_path(url))


class _RunCommand(typer.core.TyperCommand):
    """``run`` remembers its raw arguments, to tell a command given after ``--`` from a stray word."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        ctx.meta["raw_args"] = list(args)
        return super().parse_args(ctx, args)


def _check_dashdash(ctx: typer.Context, command: list[str]) -> None:
    """The training command must be exactly what follows ``--``: a word before it (``--dry-run true``)
    would otherwise be run as the command."""
    raw = ctx.meta.get("raw_args", [])
    if not command or ("--" in raw and command == raw[raw.index("--") + 1 :]):
        return
    raise NcclTuneError(
        f"{command[0]!r} comes before --: put the training command after -- "
        f"({ctx.command_path or 'nccl-tune run'} [OPTIONS] -- COMMAND ...); --dry-run and --json take no value"
    )


@app.command("run", cls=_RunCommand, context_settings={"allow_interspersed_args": False})
def run_cmd(
    ctx: typer.Context,
    command: list[str] | None = typer.Argument(
        None, help="The training command, after --.", show_default=False, metavar="-- COMMAND"
    ),
    space: str | None = typer.Option(
        None,
        "--space",
        help="Built-in space name or a space YAML file (default: the SkyRL space of the layout the command runs).",
    ),
    study: str | None = typer.Option(
        None, "--study", help="Study name (default: from the space and command; the same name resumes)."
    ),
    storage: str | None = typer.Option(
        None, "--storage", help="Optuna storage URL (default: sqlite:///RESULTS/nccl-tune.db)."
    ),
    results: Path = typer.Option(
        Path("results"), "--results", help="Folder for trial folders and the default storage."
    ),
    trials: int = typer.Option(
        20, "--trials", help="Trials to launch in this run (re-runs for confirmation come on top)."
    ),
    budget: str | None = typer.Option(
        None, "--budget", help="Wall-clock budget of the run: no new trial after it (e.g. 8h, 45m).", metavar="DURATION"
    ),
    steps: int | None = typer.Option(None, "--steps", help="Measured steps per trial (after the warm-up step)."),
    warmup_steps: int | None = typer.Option(
        None, "--warmup-steps", help="Unmeasured steps at the start of each trial."
    ),
    stall_timeout: str | None = typer.Option(
        None, "--stall-timeout", help="Silence in an unknown phase before a trial is called hung.", metavar="DURATION"
    ),
    startup_timeout: str | None = typer.Option(
        None, "--startup-timeout", help="Time allowed before the first progress line.", metavar="DURATION"
    ),
    trial_timeout: str | None = typer.Option(None, "--trial-timeout", help="Budget of one trial.", metavar="DURATION"),
    grace: str | None = typer.Option(
        None, "--grace", help="SIGTERM-to-SIGKILL grace period at teardown.", metavar="DURATION"
    ),
    gate_timeout: str | None = typer.Option(
        None,
        "--gate-timeout",
        help="How long to wait for a clean node (GPU memory back, the study's processes gone) before a trial; default 60s.",
        metavar="DURATION",
    ),
    pin: list[str] = typer.Option(
        [], "--set", help="Hold a parameter (or context value) fixed: KEY=VALUE; repeatable.", metavar="KEY=VALUE"
    ),
    seed: int | None = typer.Option(None, "--seed", help="Sampler seed."),
    sampler: str = typer.Option("local", "--sampler", help="local (walk from the incumbent), tpe or random."),
    launcher: str = typer.Option(
        "local", "--launcher", help="Where trials run: local (this node) or ray (one node of a Ray cluster per trial)."
    ),
    ray_address: str | None = typer.Option(
        None,
        "--ray-address",
        help="Ray cluster for --launcher ray (default: RAY_ADDRESS, then the running local one).",
        metavar="HOST:PORT",
    ),
    parallel: int = typer.Option(
        1, "--parallel", help="Trials at once (several need --launcher ray: one trial per node)."
    ),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the tuned YAML here at the end."),
    confirm: int = typer.Option(
        2,
        "--confirm",
        help="Re-run the best N candidates once to confirm them; one left over confirms the best that keeps the training (0: none).",
    ),
    force_worst_case: bool = typer.Option(
        True,
        "--force-worst-case/--no-force-worst-case",
        help="Run the winner-to-be once at its longest batch where the space says how (stability.force_worst_case).",
    ),
    nccl_check: str = typer.Option(
        "auto",
        "--nccl-check",
        help="Run each new set of NCCL values on the collectives alone before its trial, so a setting that fails does so in seconds: auto (when the space sets NCCL variables and GPUs are visible), on or off.",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Validate the space and print the first trial's argv and env; run nothing."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout (progress goes to stderr)."),
    series: str | None = typer.Option(
        None, "--series", help="Keep this run as a night of the named series (a new study per night).", metavar="NAME"
    ),
    warm_start: bool = typer.Option(
        False,
        "--warm-start",
        help="Run the baseline config (the series' previous best, or --baseline) first, 3 times, then search.",
    ),
    baseline: Path | None = typer.Option(
        None,
        "--baseline",
        help="A tuned YAML to compare with (default: the series' previous good night).",
        metavar="FILE",
    ),
    fail_on_regression: float | None = typer.Option(
        None,
        "--fail-on-regression",
        help="Exit 3 when the best is slower than the baseline's by more than PCT and the noise, or the baseline config now fails.",
        metavar="PCT",
    ),
) -> None:
    """Tune COMMAND: run short trials under an Optuna search and report the fastest stable config."""
    from nccl_tune.tuner.records.pins import parse_pin
    from nccl_tune.tuner.settings import RunSettings, parse_duration

    try:
        _check_dashdash(ctx, command or [])
        given = {
            "--budget": budget,
            "--stall-timeout": stall_timeout,
            "--startup-timeout": startup_timeout,
            "--trial-timeout": trial_timeout,
            "--grace": grace,
            "--gate-timeout": gate_timeout,
        }
        secs = {opt: None if text is None else parse_duration(text, opt) for opt, text in given.items()}
        settings = RunSettings(
            command=tuple(command or ()),
            space=space,
            study=study,
            storage=storage,
            results=results,
            trials=trials,
            steps=steps,
            warmup_steps=warmup_steps,
            pins=tuple(parse_pin(p) for p in pin),
            seed=seed,
            sampler=sampler,
            launcher=launcher,
            parallel=parallel,
            ray_address=ray_address,
            output=output,
            dry_run=dry_run,
            confirm=confirm,
            force_worst_case=force_worst_case,
            nccl_check=nccl_check,
            budget_s=secs["--budget"],
            stall_timeout_s=secs["--stall-timeout"],
            startup_timeout_s=secs["--startup-timeout"],
            trial_timeout_s=secs["--trial-timeout"],
            grace_s=secs["--grace"],
            gate_timeout_s=secs["--gate-timeout"],
            series=series,
            warm_start=warm_start,
            baseline_file=baseline,
            fail_on_regression_pct=fail_on_regression,
        )
        _run(settings, as_json)
    except NcclTuneError as exc:
        _fail(exc)


def _run(settings, as_json: bool) -> None:
    from nccl_tune.reporting.report import end_of_run
    from nccl_tune.tuner.study.dry_run import plan_dry_run
    from nccl_tune.tuner.study.loop import run_study

    if settings.dry_run:
        plan = plan_dry_run(settings)
        if as_json:
            _emit_json(plan.to_json())
        else:
            for line in plan.lines():
                out.print(escape(line), highlight=False, soft_wrap=True)
        raise typer.Exit(0)
    live = err if as_json else out
    outcome = run_study(settings, console=live)
    end_of_run(outcome, live, err, as_json)
    raise typer.Exit(outcome.exit_code)


@app.command("export")
def export_cmd(
    study: str | None = typer.Option(None, "--study", help="Study name (default: the only study in the storage)."),
    storage: str | None = typer.Option(None, "--storage", help="Optuna storage URL."),
    results: Path = typer.Option(Path("results"), "--results", help="Folder of the default storage."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
    fmt: str = typer.Option(
        "yaml", "--format", help="yaml (overrides + env + provenance), args (key=value) or env (export lines)."
    ),
    speed_only: bool = typer.Option(
        False,
        "--speed-only",
        help="The fastest stable config that keeps the training as you run it (the report's speed-only line).",
    ),
) -> None:
    """Write the best stable trial of a study as tuned YAML, key=value arguments or env lines."""
    from nccl_tune.tuner.settings import default_storage_url
    from nccl_tune.tuner.winner.export import export_study

    try:
        url = storage or default_storage_url(results)
        with _storage_errors(url):
            _deliver(export_study(url, study, fmt, speed_only), output)
    except NcclTuneError as exc:
        _fail(exc)


@app.command("apply")
def apply_cmd(
    tuned: Path = typer.Argument(..., help="A tuned YAML written by `nccl-tune export`."),
    into: Path = typer.Option(..., "--into", help="The training config to merge the overrides into."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write here instead of stdout."),
    allow_new_keys: bool = typer.Option(
        False, "--allow-new-keys", help="Add keys the config lacks instead of refusing."
    ),
) -> None:
    """Merge a tuned YAML's overrides into a training config (OmegaConf.merge)."""
    from nccl_tune.tuner.winner.export import apply_tuned

    try:
        applied = apply_tuned(tuned, into, allow_new_keys)
        _deliver(applied.config_yaml, output)
    except NcclTuneError as exc:
        _fail(exc)
    for head, lines in (
        (f"{tuned} changes the training itself, not only its speed:", applied.training),
        ("speed only (the training stays as it was):", applied.speed_only),
    ):
        if lines:
            err.print(escape(f"# {head}"), highlight=False, soft_wrap=True)
            for line in lines:
                err.print(escape(f"#   {line}"), highlight=False, soft_wrap=True)
    for note in applied.notes:
        err.print(escape(f"# {note}"), highlight=False, soft_wrap=True)
    if applied.env_lines:  # the config cannot carry them: say what to run before the training command
        err.print(
            escape(f"# {tuned} also sets the environment; run before the training command:"),
            highlight=False,
            soft_wrap=True,
        )
        for line in applied.env_lines:
            err.print(escape(line), highlight=False, soft_wrap=True)


@app.command("report")
def report_cmd(
    study: str | None = typer.Option(None, "--study", help="Study name (default: the only study in the storage)."),
    series: str | None = typer.Option(
        None, "--series", help="Report the latest night of this series (instead of --study)."
    ),
    storage: str | None = typer.Option(None, "--storage", help="Optuna storage URL."),
    results: Path = typer.Option(Path("results"), "--results", help="Folder of the default storage."),
    fmt: str | None = typer.Option(
        None, "--format", help="html (one self-contained file with plots), md (for $GITHUB_STEP_SUMMARY) or json."
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the report here (format from --format or the suffix)."
    ),
    junit: Path | None = typer.Option(None, "--junit", help="Also write the night's checks as JUnit XML here."),
    plots: Path | None = typer.Option(
        None, "--plots", help="Also write the report's figures (those the HTML shows) into this folder, as SVG."
    ),
    as_json: bool = typer.Option(False, "--json", help="The report as JSON (the same as --format json)."),
) -> None:
    """What was tried, what failed and why, and the winner against the baseline; as HTML,
    Markdown, JSON or JUnit XML for nightly runs."""
    from nccl_tune.reporting.report import ReportRequest, report
    from nccl_tune.tuner.settings import default_storage_url

    try:
        url = storage or default_storage_url(results)
        with _storage_errors(url):
            report(ReportRequest(url, study, series, fmt, as_json, output, junit, plots), out, err)
    except NcclTuneError as exc:
        _fail(exc)


@app.command("history")
def history_cmd(
    series: str | None = typer.Option(None, "--series", help="Series name (default: the only series in the storage)."),
    storage: str | None = typer.Option(None, "--storage", help="Optuna storage URL."),
    results: Path = typer.Option(Path("results"), "--results", help="Folder of the default storage."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable history."),
) -> None:
    """A series of nightly runs over time: best throughput, fingerprint changes, verdicts, steps."""
    from nccl_tune.nightly.history import history_json, print_history
    from nccl_tune.tuner.records.series import load_history
    from nccl_tune.tuner.settings import default_storage_url

    try:
        url = storage or default_storage_url(results)
        with _storage_errors(url):
            history = load_history(url, series)
    except NcclTuneError as exc:
        _fail(exc)
    if as_json:
        _emit_json(history_json(history))
    else:
        print_history(history, out)


@spaces_app.command("list")
def spaces_list_cmd() -> None:
    """The built-in search spaces."""
    from nccl_tune.search_spaces.loader import builtin_names, load_space

    for name in builtin_names():
        out.print(f"[bold]{escape(name)}[/]  {escape(load_space(name).description)}", highlight=False, soft_wrap=True)


@spaces_app.command("init", cls=_RunCommand, context_settings={"allow_interspersed_args": False})
def spaces_init_cmd(
    ctx: typer.Context,
    command: list[str] | None = typer.Argument(
        None, help="The training command, after --.", show_default=False, metavar="-- COMMAND"
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write the space here (a new file) instead of stdout."
    ),
    timeout: float = typer.Option(30.0, "--timeout", help="Seconds COMMAND --help may take."),
) -> None:
    """A starter space for COMMAND from its --help (argparse or Hydra): tunable options, a progress preset, checks."""
    from nccl_tune.search_spaces.starter import init_space

    try:
        _check_dashdash(ctx, command or [])
        if not command:
            raise NcclTuneError("no command after --; usage: nccl-tune spaces init [-o FILE] -- COMMAND [ARGS...]")
        if output is not None and output.exists():
            raise NcclTuneError(f"{output} already exists; choose another --output or remove it")
        _deliver(init_space(tuple(command), timeout), output)
    except NcclTuneError as exc:
        _fail(exc)


@spaces_app.command("show")
def spaces_show_cmd(
    name: str = typer.Argument(..., help="Built-in space name or a space YAML file."),
    as_yaml: bool = typer.Option(False, "--yaml", help="Print the space's YAML as it is."),
) -> None:
    """A space's parameters, rules, trial settings and stop rule."""
    from nccl_tune.search_spaces.loader import load_space
    from nccl_tune.search_spaces.show import print_space

    try:
        space = load_space(name)
    except NcclTuneError as exc:
        _fail(exc)
    if as_yaml:
        sys.stdout.write(space.text)
    else:
        print_space(space, out)


@app.command("diagnose")
def diagnose_cmd(
    paths: list[Path] = typer.Argument(..., help="Log files, trial folders or folders of Flight Recorder dumps."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per input, one per line."),
) -> None:
    """Why a run died: root cause, rank, evidence lines and advice, from any log."""
    from nccl_tune.diagnose.api import diagnose_paths
    from nccl_tune.diagnose.show import print_diagnoses

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
    from nccl_tune.node.doctor import print_doctor, run_doctor

    report = run_doctor()
    if as_json:
        _emit_json(report.to_json())
    else:
        print_doctor(report, out)
    raise typer.Exit(report.exit_code)


def main() -> None:
    """Console-script entry point. Usage errors (unknown option, bad value) are one line and exit 1:
    exit 2 means "no stable config". The tuner's own output cannot fail a run (``streams``)."""
    from nccl_tune.streams import guard_std_streams

    guard_std_streams()
    try:
        code = app(standalone_mode=False)
    except typer.TyperException as exc:  # the parser's usage errors (unknown option, bad value, ...)
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.stdout.write(exc.format_message() + "\n")
        else:
            where = f"{ctx.command_path}: " if ctx is not None else ""
            hint = f"; see {ctx.command_path} --help" if ctx is not None else ""
            text = " ".join(exc.format_message().split()).rstrip(".")
            err.print(f"[bold red]error:[/] {escape(where + text + hint)}", highlight=False, soft_wrap=True)
        code = 1
    except typer.Abort:
        code = 130
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
