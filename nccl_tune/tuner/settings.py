"""Options of one tuning run, as data (the CLI fills it; the loop reads it).

``RunSettings`` checks its own values when it is made: a bad option is one ``NcclTuneError``
naming it, before any storage is opened or trial started. Whether the command itself can run
is the launcher's check (``Launcher.prepare``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from nccl_tune.errors import NcclTuneError
from nccl_tune.launchers.registry import launcher_problem, parallel_problem
from nccl_tune.tuner.records.storage import default_study_name, name_problem

SAMPLERS = ("local", "tpe", "random")
"""The samplers ``make_sampler`` builds (see ``tuner/search/samplers.py``)."""
DEFAULT_SAMPLER = "local"


def default_storage_url(results: Path) -> str:
    """The storage a ``--results`` folder holds: ``sqlite:///<results>/nccl-tune.db``."""
    return f"sqlite:///{(Path(results) / 'nccl-tune.db').resolve()}"


@dataclass(frozen=True)
class RunSettings:
    command: tuple[str, ...]
    """The user's training command, e.g. ``("bash", "run_skyrl_sql.sh")``."""
    space: str | None = None
    """Built-in space name or path to a space YAML file; None: the SkyRL space of the layout the
    command runs (``search_spaces.skyrl_layout``), else the default."""
    study: str | None = None
    """Study name; derived from the space, the command and the results folder when not given (the same
    command into the same ``--results`` resumes)."""
    storage: str | None = None
    """Optuna storage URL; default ``sqlite:///<results>/nccl-tune.db``."""
    results: Path = Path("results")
    """Folder for the default storage, trial folders and exported YAML."""
    trials: int = 20
    """Trials to launch in this run (rule-rejected and predicted-to-fail configs are not launched and not counted)."""
    budget_s: float | None = None
    """Wall-clock budget for the whole run: a search trial starts only when it and the confirmation re-runs
    fit in the time left (as measured so far); no trial starts after it (see ``tuner/study/budget.py``)."""
    steps: int | None = None
    """Measured steps per trial (overrides the space's stop rule)."""
    warmup_steps: int | None = None
    stall_timeout_s: float | None = None
    startup_timeout_s: float | None = None
    trial_timeout_s: float | None = None
    grace_s: float | None = None
    gate_timeout_s: float | None = None
    """``--gate-timeout``: how long the gate before a trial waits for the node's GPU memory and the study's
    processes to be gone before the run stops with one line naming what holds the node (default 60 s)."""
    pins: tuple[tuple[str, str], ...] = ()
    """``--set KEY=VALUE`` pairs: parameters (or context values) held fixed."""
    seed: int | None = None
    launcher: str = "local"
    parallel: int = 1
    ray_address: str | None = None
    """``--ray-address``: the Ray cluster of ``--launcher ray`` (default: RAY_ADDRESS, then the local one)."""
    output: Path | None = None
    """Write the tuned YAML here at the end of the run."""
    dry_run: bool = False
    confirm: int = 2
    """Re-run the best N candidates once to confirm they are stable (0: no re-runs); one left once the
    winner is confirmed confirms the speed-only pick (``study.confirmation``)."""
    force_worst_case: bool = True
    """Run the winner-to-be once forced to its longest batch where the space says how
    (``stability.force_worst_case``); False: never (the winner's worst case is then predicted, or unproven)."""
    early_stop_ratio: float = 0.7
    """Stop a trial whose measured steps so far (stragglers left out) ran below this fraction of the
    incumbent as the study's model estimates it, or a warm-up step below it of its warm-up (0: never)."""
    predict_oom: bool = True
    """Skip configs the memory model refuses (``memory_model.py``): those that dominate a known OOM, and
    those predicted with confidence to run out or to come within the headroom of the wall."""
    screening: bool = True
    """Screen candidates when the space asks for it (``stop.screen_steps``): stop a trial after the
    warm-up and those steps when it is not within reach of the incumbent."""
    nccl_check: str = "auto"
    """``--nccl-check``: before a trial whose NCCL values were not checked yet, run its NCCL variables on
    the collectives alone (``launchers/nccl_check.py``); a setting that fails there fails in seconds,
    without the trainer's start-up and stall timeout. ``auto``: when the space sets NCCL variables and
    the launcher can run the check (GPUs visible to NVML on this machine); ``on``: always, or an error
    when it cannot; ``off``: never."""
    extra_env: dict[str, str] = field(default_factory=dict)
    sampler: str = DEFAULT_SAMPLER
    """``local`` (pattern search from the incumbent, TPE when its neighbourhood is exhausted), ``tpe``
    (models the whole space) or ``random`` (the benchmarks' yardstick). All learn from failures."""

    series: str | None = None
    """``--series NAME``: keep this run as a night of the named series (a new study per night)."""
    warm_start: bool = False
    """``--warm-start``: run the baseline config first, several times, to know its noise."""
    baseline_file: Path | None = None
    """``--baseline FILE``: a tuned YAML to compare with (else the series' previous good night)."""
    fail_on_regression_pct: float | None = None
    """``--fail-on-regression PCT``: exit 3 when the night's best is slower than the baseline's by
    more than PCT percent and the noise, or the baseline config now fails."""

    def __post_init__(self) -> None:
        problems = settings_problems(self)
        if problems:
            raise NcclTuneError(problems[0])

    @property
    def storage_url(self) -> str:
        return self.storage or default_storage_url(self.results)

    def study_name(self, space_name: str) -> str:
        """``--study``; in a series, a new study per night (``SERIES.YYYYMMDD-HHMMSS``); else the
        name derived from the space, the command and the results folder (the same command into the same
        ``--results`` resumes)."""
        if self.study:
            return self.study
        if self.series:
            from nccl_tune.tuner.records.series import night_study_name

            return night_study_name(self.series)
        return default_study_name(space_name, self.command, self.results)


NCCL_CHECK_MODES = ("auto", "on", "off")
MAX_SEED = 2**32 - 1
"""Samplers seed numpy's generator, which takes 0 .. 2**32 - 1."""


def settings_problems(s: RunSettings) -> list[str]:
    """One line per option value no run can use, named as the CLI spells it, with the fix."""
    problems: list[str] = []

    def need(ok: bool, option: str, value: object, rule: str) -> None:
        if not ok:
            problems.append(f"{option} {value}: {rule}")

    if not s.command:
        problems.append("no command after --; usage: nccl-tune run [OPTIONS] -- COMMAND [ARGS...]")
    need(
        s.trials >= (0 if s.warm_start else 1),
        "--trials",
        s.trials,
        "must be at least 1 (0 only with --warm-start: re-measure the baseline config, search nothing)",
    )
    need(s.steps is None or s.steps >= 1, "--steps", s.steps, "must be at least 1 (measured steps per trial)")
    need(s.warmup_steps is None or s.warmup_steps >= 0, "--warmup-steps", s.warmup_steps, "must be 0 or more")
    need(s.seed is None or 0 <= s.seed <= MAX_SEED, "--seed", s.seed, f"must be between 0 and {MAX_SEED}")
    need(s.confirm >= 0, "--confirm", s.confirm, "must be 0 or more")
    if s.sampler not in SAMPLERS:
        problems.append(f"--sampler {s.sampler!r} is unknown; use {', '.join(SAMPLERS[:-1])} or {SAMPLERS[-1]}")
    for option, secs in (
        ("--budget", s.budget_s),
        ("--stall-timeout", s.stall_timeout_s),
        ("--startup-timeout", s.startup_timeout_s),
        ("--trial-timeout", s.trial_timeout_s),
        ("--gate-timeout", s.gate_timeout_s),
    ):
        need(
            secs is None or secs > 0,
            option,
            f"{secs:g}s" if secs is not None else secs,
            "must be more than 0 (e.g. 90s, 45m, 8h); leave it out for the default",
        )
    need(s.grace_s is None or s.grace_s >= 0, "--grace", s.grace_s, "must be 0 or more seconds")
    if s.nccl_check not in NCCL_CHECK_MODES:
        problems.append(f"--nccl-check {s.nccl_check!r} is unknown; use auto, on or off")
    launcher = launcher_problem(s.launcher)
    if launcher is not None:
        problems.append(launcher)
    need(s.parallel >= 1, "--parallel", s.parallel, "must be at least 1")
    parallel = parallel_problem(s.launcher, s.parallel) if launcher is None else None
    if parallel is not None:
        problems.append(parallel)
    if s.ray_address is not None and s.launcher != "ray":
        problems.append("--ray-address is for --launcher ray; drop it or add --launcher ray")
    problems += nightly_problems(s)
    study = name_problem(s.study) if s.study is not None else None  # --series names are checked as such
    if study is not None:
        problems.append(study)
    return problems


def nightly_problems(s: RunSettings) -> list[str]:
    """The nightly options that no storage could make right (the rest: ``tuner.study.night.plan_night``)."""
    from nccl_tune.tuner.records.series import nightly_option_problems

    return nightly_option_problems(s.series, s.baseline_file, s.warm_start, s.fail_on_regression_pct)


def parse_duration(text: str, option: str) -> float:
    """Seconds in ``text``: ``3600``, ``90s``, ``45m``, ``8h`` or ``1h30m``; one-line error otherwise."""
    raw = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", raw):
        return float(raw)
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", raw)
    if not parts or "".join(n + u for n, u in parts) != raw:
        raise NcclTuneError(f"{option} {text!r}: expected seconds or a duration such as 90s, 45m, 8h, 1h30m")
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0}
    return sum(float(n) * scale[u] for n, u in parts)
