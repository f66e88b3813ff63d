"""Search efficiency of the tuner on a family of landscapes: the twin and five synthetic families.

Whole studies (``nccl_tune.tuner.study.loop.run_study``) run against ``ModelLauncher``: the twin's cost
model for ``twin`` (space ``skyrl-text2sql``), an analytic landscape (``twin.families``,
through ``ModelLauncher(cost=...)``) for the others, so the same supervision clocks, stop rule,
early stop and screening apply. Per family, each seed is an instance (for the twin, one landscape
and a new study seed), studied by three samplers in the same run:

- ``tuner``: the tuner as shipped (``RunSettings`` defaults: its sampler, the memory model's
  admission rule, early stopping, screening, confirmation re-runs);
- ``tpe``: the same with ``--sampler tpe``;
- ``random``: random search (no prediction, no early stop or screening, no re-runs): the yardstick.

Every launched config is judged against the landscape, computed exactly (``search_twin.py`` for the
twin; full enumeration for the synthetic families):

- trials to reach: launched trials (rejected, predicted and duplicate configs are free) up to and
  including the first whose config is stable and within 2% of the best's throughput; budget + 1
  when never reached (censored);
- GPU time on failures: modelled GPU-seconds of launched trials that failed (not ok, not stopped
  early) over those of all launched trials, re-runs included;
- GPU time saved by stopping early (screening and the early stop): the steps a stopped trial did not
  run, at its own mean step time, over what the study would have spent without stopping.

Targets, per family, in one run: the tuner's median trials to reach <= 12, random search's median
at least 3x the tuner's, the tuner's median GPU time on failures <= 15%.

    python benchmarks/search.py [--families twin,enabler-trap,...] [--seeds 10] [--first-seed 0] [--trials 40]
                                [--samplers tuner,tpe,random] [--json PATH] [--quick] [--set KEY=VALUE]
                                [--memory model|logged]

``--memory logged`` gives the trials the memory ``nccl-tune run`` reads from a trainer's log (the
per-GPU peaks of the steps that finished) instead of the model's per-phase peaks: the path a user
runs.

``--first-seed`` studies instances no change was judged on: every change to the sampler so far was
measured on seeds 0-23, so seeds from 24 on are held out, and what holds there generalises.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import math
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from rich.console import Console
from rich.table import Table

from nccl_tune.errors import NcclTuneError
from nccl_tune.failure import FailureClass
from nccl_tune.launchers.base import Launcher
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.tuner.records.nccl_sweep import load as load_sweep
from nccl_tune.tuner.records.pins import apply_pins, parse_pin
from nccl_tune.tuner.records.storage import load_existing, open_storage
from nccl_tune.tuner.records.study_records import FINISHED, Outcome, TrialRecord, records
from nccl_tune.tuner.settings import DEFAULT_SAMPLER, RunSettings
from nccl_tune.tuner.study.loop import run_study
from twin.analytic import analytic_cost
from twin.families import FAMILIES, Instance, instance, throughput
from twin.launcher import ModelLauncher

sys.path.insert(0, str(Path(__file__).resolve().parent))
import search_twin as twin  # noqa: E402
from calibration import Calibration, calibrate, measured_gains  # noqa: E402

WITHIN_FRAC = twin.WITHIN_FRAC
TARGET_MEDIAN_TRIALS = 12
TARGET_RANDOM_RATIO = 3.0
TARGET_FAILED_GPU_FRAC = 0.15
CHECKPOINTS = (5, 10, 15, 20, 30, 40, 60, 80)
"""Launched-trial counts at which the best throughput found so far is reported."""
QUICK_PINS = (("trainer.train_batch_size", "256"), ("trainer.max_prompt_length", "4096"))
"""``--quick`` studies the twin on this smaller subspace (micro-batches, offload and NCCL variables still free)."""
FAMILY_NAMES = ("twin", *FAMILIES)
SAMPLERS = ("tuner", "tpe", "random")
SHIPPED = DEFAULT_SAMPLER

DEFINITIONS = {
    "stable": (
        "twin: satisfies the space's rules, its modelled run finishes every step without a failure at run seeds "
        f"0..{twin.CHANCE_SEEDS - 1} with peak memory <= (1 - min_headroom_frac) of the GPU; synthetic: no failure, "
        "no chance of a hang, peak memory <= (1 - min_headroom_frac) of the GPU"
    ),
    "throughput": "samples per step / noise-free step time",
    "best": "the stable config of highest throughput, found exactly (twin: search_twin.py; synthetic: every config)",
    "trials_to_reach": (
        f"launched trials up to and including the first whose config is stable and within {WITHIN_FRAC:.0%} of the "
        "best's throughput; budget + 1 when never reached (censored)"
    ),
    "failed_gpu_frac": (
        "modelled GPU-seconds of launched trials whose status is a failure (not ok, not budget) / modelled "
        "GPU-seconds of all launched trials (re-runs included, with the NCCL checks before them)"
    ),
    "check_gpu_frac": (
        "modelled GPU-seconds of the NCCL checks that passed (each new set of NCCL values, before its trial; "
        "--nccl-check) / modelled GPU-seconds of all launched trials, checks included; a failed check is its trial"
    ),
    "failed_gpu_by_cause": (
        "failed_gpu_frac split by the landscape's reason the config fails (out of memory; a failure every run meets; "
        "a chance per step of a hang), with its one line on the trigger; on the twin, by the class the tool gave the "
        "trial"
    ),
    "saved_gpu_frac": (
        "GPU-seconds not spent because trials were stopped early (screening, early stop): steps not run x the "
        "trial's mean step time x GPUs / (spent + saved)"
    ),
    "best_frac_after": "throughput of the best stable config launched within the first N trials / the best's",
    "winner_frac": "the study's winner's noise-free throughput / the best's (0 when the winner is not stable)",
    "p": (
        "share of rule-satisfying configs that are stable and within the target; random search's median trials "
        "to reach is then 1 (the baseline) + ceil(ln 0.5 / ln(1 - p))"
    ),
    "tuner": "RunSettings defaults (sampler, memory model admission, early stop, screening, confirmation re-runs)",
    "tpe": "as tuner with sampler=tpe",
    "random": "sampler=random, predict_oom=False, early_stop_ratio=0, screening off, confirm=0",
}


# ---------------------------------------------------------------------------------------------
# Problems: one landscape instance with its exact judge
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    family: str
    seed: int
    space: str
    """What ``RunSettings.space`` takes (a built-in name or a YAML path)."""
    command: tuple[str, ...]
    pins: tuple[tuple[str, str], ...]
    judge: Callable[[Mapping[str, Any]], tuple[bool, float]]
    """(stable, throughput / the best's) of a config."""
    launcher: Callable[[], Launcher]
    best_values: Mapping[str, Any]
    best_throughput: float
    p: float | None
    cause: Callable[[Mapping[str, Any]], str] | None = None
    """Why the landscape makes a config fail (synthetic families); None for the twin, whose failed
    trials are then told apart by the class the tool gave them."""

    @property
    def implied_random_median(self) -> int | None:
        if self.p is None or not 0 < self.p < 1:
            return None
        return 1 + math.ceil(math.log(0.5) / math.log(1 - self.p))


def twin_problems(
    seeds: range,
    trials: int,
    pins: tuple[tuple[str, str], ...],
    cache: Path | None,
    root: Path,
    console: Console,
    as_logged: bool = False,
) -> tuple[list[Problem], twin.Landscape]:
    """The twin: one exact landscape (cached in the JSON), one problem per study seed."""
    space, pin_set = apply_pins(load_space(twin.SPACE), pins)
    settings = RunSettings(command=("bash", str(twin.TWIN)), results=root, pins=pins, trials=trials)
    model = twin.ConfigModel(space, pin_set, settings)
    fp = twin.fingerprint(space, pin_set, model.steps)
    land = twin.load_cached(cache, fp)
    if land is None:
        land = twin.compute_landscape(model, console)
    else:
        console.print(f"twin landscape: reused from {cache} (fingerprint {fp})")

    def judge(values: Mapping[str, Any]) -> tuple[bool, float]:
        m = model.judge(values)
        return m.stable, land.frac(m)

    problems = [
        Problem(
            "twin",
            seed,
            twin.SPACE,
            ("bash", str(twin.TWIN)),
            pins,
            judge,
            lambda: ModelLauncher(env=twin.BASE_ENV, memory_as_logged=as_logged),
            land.best_values,
            land.best.throughput_samples_per_s,
            land.target_region.get("p"),
        )
        for seed in seeds
    ]
    return problems, land


def synthetic_problems(name: str, seeds: range, root: Path, as_logged: bool = False) -> list[Problem]:
    """Instances ``seeds`` of a synthetic family, each with its space written as a YAML file."""
    out = []
    for seed in seeds:
        inst, ex = instance(name, seed)
        path = root / f"{name}-{seed}.yaml"
        path.write_text(FAMILIES[name].space_yaml)

        def judge(values: Mapping[str, Any], inst=inst, ex=ex) -> tuple[bool, float]:
            t = inst.landscape(values)
            stable = t.stable(inst.node.capacity_gib, inst.space.min_headroom_frac)
            return stable, (throughput(inst.space, values, t) / ex.best_throughput if stable else 0.0)

        cost = analytic_cost(inst.landscape, inst.node)
        out.append(
            Problem(
                name,
                seed,
                str(path),
                ("true",),
                (),
                judge,
                lambda cost=cost, gpus=inst.node.gpus: ModelLauncher(
                    env=twin.BASE_ENV, cost=cost, nccl_check_gpus=gpus, memory_as_logged=as_logged
                ),
                ex.best_values,
                ex.best_throughput,
                ex.p,
                cause=failure_cause(inst),
            )
        )
    return out


def failure_cause(inst: Instance) -> Callable[[Mapping[str, Any]], str]:
    """The landscape's reason a config's runs fail: out of memory, a failure every run meets, or a
    chance per step of a hang, each with the landscape's one line on its trigger."""

    def cause(values: Mapping[str, Any]) -> str:
        t = inst.landscape(values)
        if t.peak_gib > inst.node.capacity_gib:
            return "out of memory"
        if t.failure:
            return f"{t.failure}: {t.detail}" if t.detail else t.failure
        if t.hang_p > 0:
            return f"hangs in {t.hang_p:.0%} of steps: {t.detail}"
        return "nothing in the landscape"

    return cause


# ---------------------------------------------------------------------------------------------
# The studies
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StudyStats:
    """One study, judged against its landscape."""

    family: str
    sampler: str
    seed: int
    trials: int
    launched: int
    """Launched trials, confirmation re-runs included."""
    trials_to_reach: int
    censored: bool
    best_frac_after: Mapping[int, float]
    gpu_s: float
    failed_gpu_frac: float
    failed_gpu_by_cause: Mapping[str, float]
    """``failed_gpu_frac`` split by why the runs failed (``Problem.cause``, or the tool's class on the
    twin): what a change to the sampler has to win back, and where."""
    saved_gpu_frac: float
    check_gpu_frac: float
    """Share of ``gpu_s`` the NCCL checks that passed took (run before their trials; a check that
    failed is its trial's whole cost, counted as a failed trial)."""
    stopped_early: int
    statuses: Mapping[str, int]
    outcomes: Mapping[str, int]
    winner_frac: float | None
    """None when the study has no winner."""
    winner_stable: bool | None
    wall_s: float
    stopped_by: str = ""
    """The stop rule's line when one ended the study (``tuner.study.stop_rules``), as it would a user's."""
    odds: tuple[tuple[float, bool], ...] = ()
    """(predicted chance to fit, fitted) of each launched proposal of the default sampler (``calibration``)."""
    gains: tuple[tuple[float, float], ...] = ()
    """(modelled, measured) log-throughput gain of each of its proposals that ran ``ok``."""
    sweep_trials: float = 0.0
    """GPU time of the NCCL sweep's checks (``tuner.records.nccl_sweep``: run before the trials they time,
    not in ``gpu_s`` nor in the failed share), in units of the study's median launched trial."""


def settings_for(problem: Problem, sampler: str, trials: int, results: Path) -> RunSettings:
    common: dict[str, Any] = dict(
        command=problem.command,
        space=problem.space,
        results=results,
        storage=f"sqlite:///{results / 'bench.db'}",
        study=f"bench-{problem.family}-{sampler}-{problem.seed}",
        trials=trials,
        seed=problem.seed,
        pins=problem.pins,
        force_worst_case=False,  # the samplers' search is measured here; forced trials in worst_case.py
    )
    if sampler == "tuner":
        return RunSettings(**common)
    if sampler == "tpe":
        return RunSettings(**common, sampler="tpe")
    return RunSettings(
        **common,
        sampler="random",
        predict_oom=False,
        early_stop_ratio=0.0,
        screening=False,
        confirm=0,
        nccl_check="off",
    )


def trial_gpu_s(record: TrialRecord) -> float:
    """Modelled GPU-seconds of a launched trial, with the NCCL check that passed before it."""
    res = record.result
    return (res.gpu_s or 0.0) + (res.nccl_check_gpu_s or 0.0) if res is not None else 0.0


def saved_gpu_s(record: TrialRecord) -> float:
    """GPU-seconds a trial stopped early did not spend: ``TrialRecord.unspent_s`` (its planned steps
    not reached, at its own mean step time) times the GPUs it held."""
    res = record.result
    if res is None or not res.wall_s:
        return 0.0
    return (record.unspent_s or 0.0) * (res.gpu_s or 0.0) / res.wall_s


def judge_study(
    problem: Problem,
    sampler: str,
    trials: int,
    records: Iterable[TrialRecord],
    winner: Mapping[str, Any] | None,
    wall_s: float,
    stopped_by: str = "",
    sweep_gpu_s: float = 0.0,
) -> StudyStats:
    recs = sorted(records, key=lambda r: r.number)
    launched = [r for r in recs if r.outcome is Outcome.LAUNCHED]
    reach, best_so_far, after = None, 0.0, {}
    for i, r in enumerate(launched, start=1):
        stable, frac = problem.judge(r.values)
        if stable:
            best_so_far = max(best_so_far, frac)
            if reach is None and frac >= 1.0 - WITHIN_FRAC:
                reach = i
        if i in CHECKPOINTS:
            after[i] = best_so_far
    spent = [(r.status, trial_gpu_s(r)) for r in launched]
    total = sum(s for _, s in spent)
    checks = sum((r.result.nccl_check_gpu_s or 0.0) for r in launched if r.result)
    failed = sum(s for st, s in spent if st not in FINISHED)
    by_cause: Counter[str] = Counter()
    for r, (status, gpu_s) in zip(launched, spent):
        if status not in FINISHED and gpu_s:
            by_cause[problem.cause(r.values) if problem.cause else status.value] += gpu_s / total
    saved = sum(saved_gpu_s(r) for r in launched)
    proposed = [r for r in launched if r.predicted_fits is not None]
    odds = tuple((r.predicted_fits, fitted(r)) for r in proposed)
    gains = tuple(measured_gains([(r.predicted_gain, r.throughput if r.ok else None) for r in launched]))
    judged = problem.judge(winner) if winner is not None else None
    return StudyStats(
        family=problem.family,
        sampler=sampler,
        seed=problem.seed,
        trials=trials,
        launched=len(launched),
        trials_to_reach=reach if reach is not None else trials + 1,
        censored=reach is None,
        best_frac_after=after,
        gpu_s=total,
        failed_gpu_frac=failed / total if total else 0.0,
        failed_gpu_by_cause=dict(by_cause),
        saved_gpu_frac=saved / (total + saved) if total + saved else 0.0,
        check_gpu_frac=checks / total if total else 0.0,
        stopped_early=sum(1 for r in launched if r.stopped_early),
        statuses=dict(Counter(r.status.value for r in launched if r.status)),
        outcomes=dict(Counter(r.outcome.value for r in recs)),
        winner_frac=judged[1] if judged else None,
        winner_stable=judged[0] if judged else None,
        wall_s=wall_s,
        stopped_by=stopped_by,
        odds=odds,
        gains=gains,
        sweep_trials=sweep_gpu_s / statistics.median(s for _, s in spent) if sweep_gpu_s and spent else 0.0,
    )


def fitted(record: TrialRecord) -> bool:
    """A launched trial ran with the headroom free: no OOM, not near the memory wall."""
    return record.status not in (FailureClass.OOM, FailureClass.HOST_OOM) and not record.near_wall


def sweep_gpu_s(settings: RunSettings, space: str) -> float:
    """GPU-seconds of the NCCL sweep's checks in the study of ``settings`` (0 when none ran)."""
    study = optuna.load_study(study_name=settings.study, storage=settings.storage_url)
    return load_sweep(study, load_space(space)).gpu_s


def run_one(problem: Problem, sampler: str, trials: int, root: Path) -> StudyStats:
    settings = settings_for(problem, sampler, trials, root / f"{problem.family}-{sampler}-{problem.seed}")
    settings.results.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        study = run_study(settings, console=Console(file=io.StringIO()), launcher=problem.launcher())
    except NcclTuneError as exc:  # a stop rule ended it: judged on what it launched, without a winner
        url = settings.storage_url
        recs = records(load_existing(open_storage(url, create=False), url, settings.study))
        return judge_study(
            problem, sampler, trials, recs, None, time.monotonic() - t0, str(exc), sweep_gpu_s(settings, problem.space)
        )
    if study.interrupted:  # Ctrl-C or a SIGTERM reached the study, which stopped: so does the benchmark
        raise KeyboardInterrupt
    winner = dict(study.winner.values) if study.winner is not None else None
    return judge_study(
        problem,
        sampler,
        trials,
        study.records,
        winner,
        time.monotonic() - t0,
        sweep_gpu_s=sweep_gpu_s(settings, problem.space),
    )


# ---------------------------------------------------------------------------------------------
# Summary, targets, tables
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """The studies of one sampler on one family, over seeds."""

    family: str
    sampler: str
    seeds: int
    trials: int
    median_trials_to_reach: float
    censored: int
    trials_to_reach: tuple[int, ...]
    median_best_frac_after: Mapping[int, float]
    failed_gpu_frac_median: float
    failed_gpu_frac_max: float
    failed_gpu_by_cause_mean: Mapping[str, float]
    """Per cause of failure, its share of a study's GPU time, averaged over the studies (the shares
    add up to the mean of ``failed_gpu_frac``), largest first."""
    saved_gpu_frac_median: float
    check_gpu_frac_mean: float
    sweep_trials_median: float
    """The NCCL sweep's GPU time in trials (``StudyStats.sweep_trials``), median over the studies."""
    winner_frac_median: float | None
    winners_unstable: int
    study_wall_s_median: float
    calibration: Calibration
    """The default sampler's odds against what happened, over the studies (``calibration``)."""

    @property
    def median_censored(self) -> bool:
        """True when half the studies or more never reached the target: the median is then a lower bound."""
        return 2 * self.censored >= self.seeds


def mean_by_cause(stats: list[StudyStats]) -> dict[str, float]:
    """Each cause's share of a study's GPU time, averaged over ``stats`` (a study without it counts 0), largest first."""
    total: Counter[str] = Counter()
    for s in stats:
        total.update(s.failed_gpu_by_cause)
    return {cause: share / len(stats) for cause, share in total.most_common()}


def summarize(stats: list[StudyStats]) -> Summary:
    after = {
        n: statistics.median(s.best_frac_after[n] for s in stats)
        for n in CHECKPOINTS
        if all(n in s.best_frac_after for s in stats)
    }
    winners = [s.winner_frac for s in stats if s.winner_frac is not None]
    return Summary(
        family=stats[0].family,
        sampler=stats[0].sampler,
        seeds=len(stats),
        trials=stats[0].trials,
        median_trials_to_reach=statistics.median(s.trials_to_reach for s in stats),
        censored=sum(s.censored for s in stats),
        trials_to_reach=tuple(s.trials_to_reach for s in stats),
        median_best_frac_after=after,
        failed_gpu_frac_median=statistics.median(s.failed_gpu_frac for s in stats),
        failed_gpu_frac_max=max(s.failed_gpu_frac for s in stats),
        failed_gpu_by_cause_mean=mean_by_cause(stats),
        saved_gpu_frac_median=statistics.median(s.saved_gpu_frac for s in stats),
        check_gpu_frac_mean=statistics.mean(s.check_gpu_frac for s in stats),
        sweep_trials_median=statistics.median(s.sweep_trials for s in stats),
        winner_frac_median=statistics.median(winners) if winners else None,
        winners_unstable=sum(1 for s in stats if s.winner_stable is False),
        study_wall_s_median=statistics.median(s.wall_s for s in stats),
        calibration=calibrate([o for s in stats for o in s.odds], [g for s in stats for g in s.gains]),
    )


def targets(family: str, sums: Mapping[str, Summary], implied: int | None) -> list[dict[str, Any]]:
    """The design targets on one family (a censored median is budget + 1, so only a bound)."""
    tuner = sums.get("tuner")
    if tuner is None:
        return []
    out = [
        {
            "family": family,
            "what": "median trials to reach (tuner)",
            "measured": tuner.median_trials_to_reach,
            "target": f"<= {TARGET_MEDIAN_TRIALS}",
            "met": not tuner.median_censored and tuner.median_trials_to_reach <= TARGET_MEDIAN_TRIALS,
            "note": "censored" if tuner.median_censored else "",
        }
    ]
    rnd = sums.get("random")
    if rnd is not None:
        ratio = rnd.median_trials_to_reach / tuner.median_trials_to_reach
        exact = implied / tuner.median_trials_to_reach if implied is not None else None
        judged, note = ratio, "" if exact is None else f"exact random median {implied}: {exact:.1f}x"
        if rnd.median_censored and exact is not None:
            # random search censored at the budget gives a lower bound only; its exact median (from the
            # target region's share: the median of a geometric law) is then the yardstick
            judged, note = (
                exact,
                f"random censored: its exact median {implied}; same-run ratio {ratio:.1f}x (a lower bound)",
            )
        elif rnd.median_censored:
            note = "a lower bound: random's median is censored"
        met = not tuner.median_censored and judged >= TARGET_RANDOM_RATIO
        out.append(
            {
                "family": family,
                "what": "random / tuner median trials to reach",
                "measured": round(judged, 2),
                "target": f">= {TARGET_RANDOM_RATIO:g}",
                "met": met,
                "note": note,
            }
        )
    cal = tuner.calibration
    if cal.n:
        out.append(
            {
                "family": family,
                "what": "proposals rated >= 90% to fit that fitted (tuner)",
                "measured": None if cal.high_fitted_share is None else round(cal.high_fitted_share, 3),
                "target": ">= 90%",
                "met": cal.met,
                "note": f"{cal.high_n} of {cal.n} proposals rated so; Brier {cal.brier:.3f}",
            }
        )
    out.append(
        {
            "family": family,
            "what": "GPU time on failed trials (tuner, median)",
            "measured": round(tuner.failed_gpu_frac_median, 4),
            "target": f"<= {TARGET_FAILED_GPU_FRAC:.0%}",
            "met": tuner.failed_gpu_frac_median <= TARGET_FAILED_GPU_FRAC,
            "note": f"max {tuner.failed_gpu_frac_max:.1%}; saved by stopping early {tuner.saved_gpu_frac_median:.1%}"
            + (f"; NCCL checks that passed {tuner.check_gpu_frac_mean:.1%} (mean)" if tuner.check_gpu_frac_mean else "")
            + (
                f"; NCCL sweep {tuner.sweep_trials_median:.1f} trials' GPU time (median), not counted"
                if tuner.sweep_trials_median
                else ""
            ),
        }
    )
    return out


def render(
    console: Console, sums: list[Summary], tgt: list[dict[str, Any]], problems: Mapping[str, list[Problem]], trials: int
) -> None:
    shown = [n for n in CHECKPOINTS if n <= trials]
    table = Table(
        title=(
            f"search on {len(problems)} landscape families ({sums[0].seeds} seeds x {trials} trials per sampler)\n"
            f"reach: launched trials up to the first stable config within {WITHIN_FRAC:.0%} of the best (budget+1 if "
            "never); best@N: best stable launched in N trials / the best; failed: GPU-s of failed trials / all; "
            "saved: GPU-s not spent by stopping early; sweep: the NCCL sweep's GPU-s, in trials (median); winner / best: median, "
            "and the studies whose winner is not stable"
        )
    )
    for col in (
        "family",
        "sampler",
        "reach (median)",
        "censored",
        "per seed",
        *(f"best@{n}" for n in shown),
        "failed med / max",
        "saved",
        "sweep",
        "winner / best",
        "s/study",
    ):
        table.add_column(col, justify="left" if col in ("family", "sampler", "per seed") else "right")
    for s in sums:
        table.add_row(
            s.family,
            s.sampler,
            f"{s.median_trials_to_reach:g}",
            f"{s.censored}/{s.seeds}",
            " ".join(str(x) for x in s.trials_to_reach),
            *(f"{s.median_best_frac_after[n]:.1%}" if n in s.median_best_frac_after else "-" for n in shown),
            f"{s.failed_gpu_frac_median:.1%} / {s.failed_gpu_frac_max:.1%}",
            f"{s.saved_gpu_frac_median:.1%}",
            f"{s.sweep_trials_median:.1f}" if s.sweep_trials_median else "-",
            ("-" if s.winner_frac_median is None else f"{s.winner_frac_median:.1%}")
            + (f" ({s.winners_unstable} not stable)" if s.winners_unstable else ""),
            f"{s.study_wall_s_median:.1f}",
        )
    console.print(table)
    land = Table(title="landscapes (per seed: exact random median from the target region's share p)")
    for col in ("family", "shape", "random median (exact) per seed"):
        land.add_column(col)
    for name, probs in problems.items():
        shape = "the twin's cost model" if name == "twin" else FAMILIES[name].shape
        land.add_row(name, shape, " ".join(str(p.implied_random_median or "-") for p in probs))
    console.print(land)
    causes = Table(title="GPU time on failed trials by cause (share of a study's GPU time, mean over its studies)")
    for col in ("family", "sampler", "cause", "share"):
        causes.add_column(col, justify="right" if col == "share" else "left")
    for s in sums:
        for cause, share in s.failed_gpu_by_cause_mean.items():
            causes.add_row(s.family, s.sampler, cause, f"{share:.1%}")
    console.print(causes)
    render_calibration(console, sums)
    summary = Table(title="targets")
    for col in ("family", "what", "measured", "target", "met", "note"):
        summary.add_column(col)
    for t in tgt:
        summary.add_row(
            t["family"],
            t["what"],
            "-" if t["measured"] is None else f"{t['measured']:g}",
            t["target"],
            "yes" if t["met"] else "NO",
            t["note"],
        )
    console.print(summary)


def render_calibration(console: Console, sums: list[Summary]) -> None:
    """The reliability table: per family, the proposals per band of predicted odds, the band's mean
    prediction and the share that fitted; the Brier score; the modelled gain's error."""
    cal = [s for s in sums if s.calibration.n]
    if not cal:
        return
    table = Table(title="odds to fit: predicted (mean) / fitted (share) and proposals, per band of predicted odds")
    table.add_column("family / sampler")
    for band in cal[0].calibration.bands:
        table.add_column(f"{band.low:.0%}-{band.high:.0%}", justify="right")
    for col in ("Brier", "gain MAE", "gain sign"):
        table.add_column(col, justify="right")
    for s in cal:
        c = s.calibration
        table.add_row(
            f"{s.family} / {s.sampler}",
            *(
                "-" if b.n == 0 else f"{b.mean_odds:.0%}/{b.fitted_share:.0%} ({b.n})"  # type: ignore[str-format]
                for b in c.bands
            ),
            f"{c.brier:.3f}",
            "-" if c.gain_mae is None else f"{c.gain_mae:.3f}",
            "-" if c.gain_sign_right is None else f"{c.gain_sign_right:.0%}",
        )
    console.print(table)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Options, with ``--quick``'s smaller defaults; one-line errors for bad values."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", default=",".join(FAMILY_NAMES), help="comma-separated (default: all)")
    p.add_argument("--samplers", default=",".join(SAMPLERS), help="comma-separated (default: tuner,tpe,random)")
    p.add_argument(
        "--seeds", type=int, default=None, help="instances per family, from --first-seed on (default 10; --quick 2)"
    )
    p.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="the first instance (and twin study seed): seeds FIRST..FIRST+N-1 (default 0; 24 and on are held out)",
    )
    p.add_argument("--trials", type=int, default=None, help="launched search trials per study (default 40; --quick 12)")
    p.add_argument(
        "--set",
        dest="pins",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="hold a parameter of the twin's space fixed in its studies and landscape (repeatable)",
    )
    p.add_argument(
        "--memory",
        choices=("model", "logged"),
        default="model",
        help="what trials report of memory: the model's per-phase peaks (default), or what `nccl-tune run` reads "
        "from a trainer's log (per-GPU peaks of finished steps only)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: few seeds and trials; the twin on " + ", ".join("=".join(x) for x in QUICK_PINS),
    )
    p.add_argument(
        "--json", type=Path, default=None, help="write the results here (and reuse the twin's landscape cached there)"
    )
    args = p.parse_args(argv)
    args.seeds = args.seeds if args.seeds is not None else (2 if args.quick else 10)
    args.trials = args.trials if args.trials is not None else (12 if args.quick else 40)
    for name in ("seeds", "trials"):
        if getattr(args, name) < 1:
            raise NcclTuneError(f"--{name} {getattr(args, name)}: must be at least 1")
    if args.first_seed < 0:
        raise NcclTuneError(f"--first-seed {args.first_seed}: must be 0 or more")
    args.seed_range = range(args.first_seed, args.first_seed + args.seeds)
    args.family_list = [f.strip() for f in args.families.split(",") if f.strip()]
    for f in args.family_list:
        if f not in FAMILY_NAMES:
            raise NcclTuneError(f"--families: unknown family {f!r}; choose from {', '.join(FAMILY_NAMES)}")
    args.sampler_list = [s.strip() for s in args.samplers.split(",") if s.strip()]
    for s in args.sampler_list:
        if s not in SAMPLERS:
            raise NcclTuneError(f"--samplers: unknown sampler {s!r}; choose from {', '.join(SAMPLERS)}")
    pins = [parse_pin(text) for text in args.pins]
    if args.quick:
        given = {key for key, _ in pins}
        pins = [pin for pin in QUICK_PINS if pin[0] not in given] + pins
    args.pin_pairs = tuple(pins)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every target is met, 1 when one is missed, 2 on a usage error, 130
    when interrupted (Ctrl-C or SIGTERM)."""
    t0 = time.monotonic()
    console = Console(width=190)
    try:
        args = parse_args(argv)
        if "twin" in args.family_list and not twin.TWIN.exists():
            raise NcclTuneError(f"{twin.TWIN} not found: the synthetic twin's script is needed for this benchmark")
        with tempfile.TemporaryDirectory(prefix="nccl-tune-search-") as tmp:
            root = Path(tmp)
            problems: dict[str, list[Problem]] = {}
            land = None
            for name in args.family_list:
                if name == "twin":
                    problems[name], land = twin_problems(
                        args.seed_range, args.trials, args.pin_pairs, args.json, root, console, args.memory == "logged"
                    )
                else:
                    problems[name] = synthetic_problems(name, args.seed_range, root, args.memory == "logged")
            stats = {
                (name, s): [run_one(p, s, args.trials, root) for p in problems[name]]
                for name in args.family_list
                for s in args.sampler_list
            }
    except NcclTuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"interrupted after {time.monotonic() - t0:.0f} s: no table and no JSON written", file=sys.stderr)
        return 130
    sums = [summarize(v) for v in stats.values()]
    tgt = []
    for name in args.family_list:
        by_sampler = {s.sampler: s for s in sums if s.family == name}
        implied = [p.implied_random_median for p in problems[name] if p.implied_random_median]
        tgt += targets(name, by_sampler, int(statistics.median(implied)) if implied else None)
    render(console, sums, tgt, problems, args.trials)
    if args.json:
        write_json(args, problems, land, sums, stats, tgt, time.monotonic() - t0)
    return 0 if tgt and all(t["met"] for t in tgt) else 1


def write_json(
    args: argparse.Namespace,
    problems: Mapping[str, list[Problem]],
    land: Any,
    sums: list[Summary],
    stats: Mapping[tuple[str, str], list[StudyStats]],
    tgt: list[dict[str, Any]],
    wall_s: float,
) -> None:
    families: dict[str, Any] = {}
    for name, probs in problems.items():
        families[name] = {
            "shape": "the twin's cost model" if name == "twin" else FAMILIES[name].shape,
            "instances": [
                {
                    "seed": p.seed,
                    "best_values": dict(p.best_values),
                    "best_throughput": p.best_throughput,
                    "p": p.p,
                    "implied_random_median": p.implied_random_median,
                }
                for p in probs
            ],
            "samplers": {s.sampler: dataclasses.asdict(s) for s in sums if s.family == name},
            "studies": {
                sampler: [dataclasses.asdict(x) for x in v] for (fam, sampler), v in stats.items() if fam == name
            },
        }
        if name == "twin" and land is not None:
            families[name]["landscape"] = land.to_json()
            families[name]["pins"] = dict(args.pin_pairs)
    payload = {
        "benchmark": "search",
        "families": families,
        "seeds": args.seeds,
        "first_seed": args.first_seed,
        "trials": args.trials,
        "quick": args.quick,
        "memory": args.memory,
        "samplers": args.sampler_list,
        "shipped_sampler": SHIPPED,
        "within_frac": WITHIN_FRAC,
        "definitions": DEFINITIONS,
        "targets": tgt,
        "all_met": bool(tgt) and all(t["met"] for t in tgt),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "wall_s": round(wall_s, 1),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    import json

    args.json.write_text(json.dumps(payload, indent=2, default=str) + "\n")


if __name__ == "__main__":
    sys.exit(main())
