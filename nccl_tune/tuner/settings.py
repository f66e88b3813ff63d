"""Options of one tuning run, as data (the CLI fills it; the loop reads it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class RunSettings:
    command: tuple[str, ...]
    """The user's training command, e.g. ``("bash", "run_skyrl_sql.sh")``."""
    space: str = "skyrl-text2sql"
    """Built-in space name or path to a space YAML file."""
    study: str | None = None
    """Study name; derived from the space and command when not given (same command resumes)."""
    storage: str | None = None
    """Optuna storage URL; default ``sqlite:///<results>/nccl-tune.db``."""
    results: Path = Path("results")
    """Folder for the default storage, trial folders and exported YAML."""
    trials: int = 20
    """Trials to launch in this run (rule-rejected and predicted-to-fail configs are not launched and not counted)."""
    budget_s: float | None = None
    """Wall-clock budget for the whole run: no new trial starts after it."""
    steps: int | None = None
    """Measured steps per trial (overrides the space's stop rule)."""
    warmup_steps: int | None = None
    stall_timeout_s: float | None = None
    startup_timeout_s: float | None = None
    trial_timeout_s: float | None = None
    grace_s: float | None = None
    pins: tuple[tuple[str, str], ...] = ()
    """``--set KEY=VALUE`` pairs: parameters (or context values) held fixed."""
    seed: int | None = None
    launcher: str = "local"
    parallel: int = 1
    output: Path | None = None
    """Write the tuned YAML here at the end of the run."""
    dry_run: bool = False
    confirm: int = 2
    """Re-run the best N candidates once to confirm they are stable (0: no re-runs)."""
    early_stop_ratio: float = 0.7
    """Stop a trial whose per-step throughput falls below this fraction of the incumbent's (0: never)."""
    predict_oom: bool = True
    """Skip configs that dominate a known OOM in every memory-increasing parameter."""
    extra_env: dict[str, str] = field(default_factory=dict)
    sampler: str = "local"
    """``local`` (pattern search from the incumbent, TPE when its neighbourhood is exhausted), ``tpe``
    (models the whole space) or ``random`` (the benchmarks' yardstick). All learn from failures."""

    def __post_init__(self) -> None:
        check_values(self)

    @property
    def storage_url(self) -> str:
        if self.storage:
            return self.storage
        return f"sqlite:///{(self.results / 'nccl-tune.db').resolve()}"


MAX_SEED = 2**32 - 1
"""Samplers seed numpy's generator, which takes 0 .. 2**32 - 1."""


def check_values(s: RunSettings) -> None:
    """One-line ``NcclTuneError`` for an option value no run can use (named as the CLI spells it)."""
    from nccl_tune.errors import NcclTuneError

    def need(ok: bool, option: str, value: object, rule: str) -> None:
        if not ok:
            raise NcclTuneError(f"{option} {value}: {rule}")

    need(s.trials >= 1, "--trials", s.trials, "must be at least 1")
    need(s.steps is None or s.steps >= 1, "--steps", s.steps, "must be at least 1 (measured steps per trial)")
    need(s.warmup_steps is None or s.warmup_steps >= 0, "--warmup-steps", s.warmup_steps, "must be 0 or more")
    need(s.seed is None or 0 <= s.seed <= MAX_SEED, "--seed", s.seed, f"must be between 0 and {MAX_SEED}")
    need(s.confirm >= 0, "--confirm", s.confirm, "must be 0 or more")
    need(s.parallel >= 1, "--parallel", s.parallel, "must be at least 1")
    for option, secs in (("--budget", s.budget_s), ("--stall-timeout", s.stall_timeout_s),
                         ("--startup-timeout", s.startup_timeout_s), ("--trial-timeout", s.trial_timeout_s)):
        need(secs is None or secs > 0, option, f"{secs:g}s" if secs is not None else secs,
             "must be more than 0 (e.g. 90s, 45m, 8h); leave it out for the default")
    need(s.grace_s is None or s.grace_s >= 0, "--grace", s.grace_s, "must be 0 or more seconds")


def parse_duration(text: str, option: str) -> float:
    """Seconds in ``text``: ``3600``, ``90s``, ``45m``, ``8h`` or ``1h30m``; one-line error otherwise."""
    import re

    raw = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", raw):
        return float(raw)
    parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", raw)
    if not parts or "".join(n + u for n, u in parts) != raw:
        from nccl_tune.errors import NcclTuneError

        raise NcclTuneError(f"{option} {text!r}: expected seconds or a duration such as 90s, 45m, 8h, 1h30m")
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0}
    return sum(float(n) * scale[u] for n, u in parts)
