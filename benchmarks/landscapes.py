"""Search efficiency through the CLI, on landscapes the sampler was not written against.

Each landscape of ``benchmarks/landscapes/shapes.py`` is a user's command (``trainer.py NAME``,
which prints what its trainer would: torchtitan's, Megatron-LM's, the Hugging Face Trainer's, verl's
or its own step lines, a CUDA OOM traceback, a hang, a CUDA error, a refusal at start-up) with a
space written for it (``benchmarks/landscapes/NAME.yaml``). Per landscape and seed
(``LANDSCAPE_SEED``: the instance), the harness runs the real CLI once per sampler, as a user
would::

    nccl-tune run --space NAME.yaml --storage sqlite:///TMP/NAME-SAMPLER-SEED.db --study S \\
        --trials 24 --seed SEED [--sampler random] --json -- python trainer.py NAME

(the command sleeps its start-up and steps at ``shapes.TIME_SCALE`` of the modelled times, so a
study of 24 trials takes about a minute) and reads the study back from its SQLite storage
(``TrialRecord``: values, status, steps, the odds the sampler gave). Every launched trial (re-runs included; rejected, predicted and duplicate
configs are free) is judged exactly against the instance, whose configs the script enumerates:

- trials to reach: launched trials up to and including the first whose config is stable (runs
  without a failure, peak at most 95% of the GPU) and within 2% of the best stable config's
  noise-free throughput; trials + 1 when never reached (censored);
- best found: the fastest stable config the study launched, as a share of the best's noise-free
  throughput (where few configs come within 2%, how close a study came);
- failed GPU time: modelled seconds of launched trials that failed over those of all launched
  trials. A trial costs a start-up (``STARTUP_S``; ``REFUSAL_S`` for a refusal before the first
  step) plus its steps at the config's modelled step time: the steps its record holds when it ran,
  the steps before the failing one otherwise, and for a hang what a real run waits before the
  tool calls it under the spaces' default clocks (``hang_s``: in the first step, the start-up
  deadline, ``stall_multiplier`` times a start-up and first step; later, ``stall_multiplier``
  times a step, at least ``stall_floor_s``);
- odds: each launched proposal's stored chance to fit (``TrialRecord.predicted_fits``) against
  whether its config fits the instance (its peak, refusals included, at most 95% of the GPU):
  proposals rated 90%+ and the share that fit, the Brier score (``calibration.py``);
- the GPUs: the tool reads them through a fake NVML (``nccl_tune.gpu_fake``, one state file per
  study) that each command fills with its device peak while it runs, as NVML reads a node's GPUs
  (the source the tool takes first on a node): every run's peak is measured, the memory its trainer
  leaves unprinted included. With ``--blind`` it has what a trainer prints and the OOMs' messages
  alone, as on a machine with no GPU to read;
- stopped: studies a stop rule ended (the CLI's exit 1, no summary); no winner: studies that ended
  without a confirmed stable config (exit 2).

Targets, per landscape (issue: landscapes it never saw): the tuner's median trials to reach
<= 12; random search's median at least 2x the tuner's; the tuner's median failed GPU time <= 10%;
over all its studies, proposals rated 90%+ to fit fit at least 90% of the time. Exit 1 when one is
missed, 2 on a bad argument.

    python benchmarks/landscapes.py [--landscapes offload-trap,pairs,flat,minefield,zero-sft,interior,pipeline,rl-colocate,two-node] [--seeds 6]
                                    [--first-seed 0] [--trials 24] [--samplers tuner,random] [--json PATH]
                                    [--jobs 2] [--keep DIR] [--blind]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna
from rich.console import Console
from rich.table import Table

from nccl_tune.gpu import FAKE_NVML_ENV
from nccl_tune.gpu_fake import h100_node, write_state
from nccl_tune.trial import STARTUP_PHASE, Clocks
from nccl_tune.tuner.records.study_records import FINISHED, Outcome, TrialRecord, records

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "landscapes"))
sys.path.insert(0, str(HERE))
from calibration import calibrate  # noqa: E402
from shapes import FIRST_STEP_SLOWER, GPU_GIB, LANDSCAPES, REFUSAL_S, SEED_ENV, STARTUP_S, Instance  # noqa: E402
from shapes import Outcome as LandscapeOutcome  # noqa: E402

WITHIN_FRAC = 0.02
TARGET_MEDIAN_TRIALS = 12
TARGET_RANDOM_RATIO = 2.0
TARGET_FAILED_GPU_FRAC = 0.10
REAL_CLOCKS = Clocks()
"""The clocks a real run waits out a hang by (the spaces' defaults, which the fast spaces shorten)."""
SAMPLERS = {"tuner": (), "random": ("--sampler", "random")}
STUDY_TIMEOUT_S = 900


@dataclass(frozen=True)
class Study:
    landscape: str
    sampler: str
    seed: int
    exit_code: int
    stopped_by: str
    launched: int
    trials_to_reach: int
    censored: bool
    failed_gpu_frac: float
    best_found_frac: float
    """The fastest stable config the study launched: its noise-free throughput over the best's (0: none)."""
    statuses: Mapping[str, int]
    odds: tuple[tuple[float, bool], ...]
    winner_frac: float | None
    """The exported winner's noise-free throughput over the best's (None: no winner)."""
    winner_stable: bool | None
    wall_s: float
    judged: tuple[str, ...] = field(default=())
    """Per launched trial: its status as the tool gave it and the landscape's verdict."""


def best_stable(inst: Instance) -> float:
    return max(inst.throughput(c) for c in inst.landscape.configs() if inst.outcome(c).stable)


def fits(inst: Instance, values: Mapping[str, Any]) -> bool:
    return inst.outcome(values).fits


def modelled_s(inst: Instance, record: TrialRecord, longest_start_s: float | None = None) -> float:
    """Modelled seconds a launched trial cost (see the module docstring); ``longest_start_s``: the
    longest start-up (launch to the first step's line) the study's earlier runs measured."""
    out = inst.outcome(record.values)
    if out.kind == "refused":
        return REFUSAL_S
    steps = len(record.result.step_times_s) if record.result is not None else 0
    if out.kind == "hang":
        return hang_s(out, longest_start_s)
    if out.kind != "ok":
        steps = out.fail_step
    return STARTUP_S + steps * out.step_s


def start_s(out: LandscapeOutcome) -> float | None:
    """The start-up a run measured, launch to its first step's line (None: it ended before one)."""
    reached = out.kind == "ok" or (out.kind != "refused" and out.fail_step > 1)
    return STARTUP_S + FIRST_STEP_SLOWER * out.step_s if reached else None


def hang_s(out: LandscapeOutcome, longest_start_s: float | None) -> float:
    """Modelled seconds a run that hangs costs, start-up included, as the tool's default clocks call
    it. In the first step no progress line has come (the landscapes' trainers print none before it),
    so the start-up deadline calls it (``Clocks.startup_deadline_s``: a multiple of the longest
    start-up the study's runs measured, ``longest_start_s``; the whole start-up timeout before one
    did); later, the stall deadline, a multiple of a step (``Clocks.stall_deadline_s``)."""
    c = REAL_CLOCKS
    if out.fail_step <= 1:
        measured = {} if longest_start_s is None else {STARTUP_PHASE: longest_start_s}
        return replace(c, phase_max_s=measured).startup_deadline_s()
    timed = replace(c, phase_max_s={"step": out.step_s}, silence_steps=out.fail_step)
    wait = timed.stall_deadline_s(None, steps_done=out.fail_step - 1)
    return STARTUP_S + (out.fail_step - 1) * out.step_s + wait


def judge(inst: Instance, sampler: str, recs: Sequence[TrialRecord], trials: int, run: Mapping[str, Any]) -> Study:
    best = best_stable(inst)
    launched = [r for r in sorted(recs, key=lambda r: r.number) if r.outcome is Outcome.LAUNCHED]
    reach = None
    for i, r in enumerate(launched, start=1):
        if inst.outcome(r.values).stable and inst.throughput(r.values) >= (1 - WITHIN_FRAC) * best:
            reach = i
            break
    cost, longest = [], None
    for r in launched:
        cost.append((r.status, modelled_s(inst, r, longest)))
        started = start_s(inst.outcome(r.values))
        longest = started if longest is None or (started is not None and started > longest) else longest
    total = sum(s for _, s in cost)
    failed = sum(s for st, s in cost if st not in FINISHED)
    found = max((inst.throughput(r.values) / best for r in launched if inst.outcome(r.values).stable), default=0.0)
    winner = (run.get("json") or {}).get("best") or {}
    params = winner.get("params")
    return Study(
        landscape=inst.landscape.name,
        sampler=sampler,
        seed=inst.seed,
        exit_code=run["exit_code"],
        stopped_by=run["stopped_by"],
        launched=len(launched),
        trials_to_reach=reach if reach is not None else trials + 1,
        censored=reach is None,
        failed_gpu_frac=failed / total if total else 0.0,
        best_found_frac=found,
        statuses=dict(Counter(r.status.value for r in launched if r.status)),
        odds=tuple((r.predicted_fits, fits(inst, r.values)) for r in launched if r.predicted_fits is not None),
        winner_frac=inst.throughput(params) / best if params else None,
        winner_stable=inst.outcome(params).stable if params else None,
        wall_s=run["wall_s"],
        judged=tuple(
            f"{r.number} {r.status.value if r.status else '-'} / {inst.outcome(r.values).kind}" for r in launched
        ),
    )


def run_cli(name: str, sampler: str, seed: int, trials: int, root: Path, nvml: bool = True) -> dict[str, Any]:
    """One study through ``nccl-tune run``; its JSON summary, exit code and last error line. With
    ``nvml``, the tool reads a fake NVML of eight GPUs that the command fills as it runs; without,
    only what the command prints."""
    study = f"{name}-{sampler}-{seed}"
    storage = f"sqlite:///{root / (study + '.db')}"
    cli = Path(sys.executable).with_name("nccl-tune")
    cmd = [
        str(cli), "run", "--space", str(HERE / "landscapes" / f"{name}.yaml"), "--storage", storage,
        "--study", study, "--results", str(root / study), "--trials", str(trials), "--seed", str(seed),
        *SAMPLERS[sampler], "--json", "--", sys.executable, str(HERE / "landscapes" / "trainer.py"), name,
    ]  # fmt: skip
    env = {**os.environ, SEED_ENV: str(seed)}
    if nvml:
        state = root / f"{study}.nvml.json"
        write_state(state, [{**gpu, "total_gib": GPU_GIB, "used_gib": 0.0} for gpu in h100_node()])
        env[FAKE_NVML_ENV] = str(state)
    t0 = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=STUDY_TIMEOUT_S, cwd=root)
    try:
        summary = json.loads(proc.stdout) if proc.stdout.strip() else None
    except json.JSONDecodeError:
        summary = None
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith(("error", "nccl-tune: error", "stopped"))]
    (root / f"{study}.stderr.txt").write_text(proc.stderr)
    return {
        "study": study,
        "storage": storage,
        "exit_code": proc.returncode,
        "stopped_by": errors[-1]
        if proc.returncode and errors
        else (proc.stderr.strip().splitlines() or [""])[-1]
        if proc.returncode
        else "",
        "json": summary,
        "wall_s": time.monotonic() - t0,
    }


def study_records(run: Mapping[str, Any]) -> list[TrialRecord]:
    try:
        study = optuna.load_study(study_name=run["study"], storage=run["storage"])
    except KeyError:  # the run stopped before it made its study
        return []
    return records(study)


def run_one(name: str, sampler: str, seed: int, trials: int, root: Path, nvml: bool = True) -> Study:
    run = run_cli(name, sampler, seed, trials, root, nvml)
    return judge(LANDSCAPES[name].instance(seed), sampler, study_records(run), trials, run)


@dataclass(frozen=True)
class Summary:
    landscape: str
    sampler: str
    median_trials_to_reach: float
    censored: int
    trials_to_reach: tuple[int, ...]
    median_failed_gpu_frac: float
    max_failed_gpu_frac: float
    median_best_found_frac: float
    stopped: int
    """Studies a stop rule ended (exit 1: the CLI's error; no summary)."""
    unconfirmed: int
    """Studies that ended without a confirmed stable winner (exit 2)."""
    winners_unstable: int
    statuses: Mapping[str, int]


def summarise(studies: Sequence[Study]) -> Summary:
    statuses: Counter[str] = Counter()
    for s in studies:
        statuses.update(s.statuses)
    return Summary(
        landscape=studies[0].landscape,
        sampler=studies[0].sampler,
        median_trials_to_reach=statistics.median(s.trials_to_reach for s in studies),
        censored=sum(s.censored for s in studies),
        trials_to_reach=tuple(s.trials_to_reach for s in studies),
        median_failed_gpu_frac=statistics.median(s.failed_gpu_frac for s in studies),
        max_failed_gpu_frac=max(s.failed_gpu_frac for s in studies),
        median_best_found_frac=statistics.median(s.best_found_frac for s in studies),
        stopped=sum(1 for s in studies if s.exit_code not in (0, 2)),
        unconfirmed=sum(1 for s in studies if s.exit_code == 2),
        winners_unstable=sum(1 for s in studies if s.winner_stable is False),
        statuses=dict(statuses),
    )


def targets(name: str, by: Mapping[str, Summary], studies: Sequence[Study]) -> list[dict[str, Any]]:
    tuner, rnd = by.get("tuner"), by.get("random")
    out = []
    if tuner is not None:
        out.append(
            {
                "what": "tuner median trials to reach",
                "measured": tuner.median_trials_to_reach,
                "target": f"<= {TARGET_MEDIAN_TRIALS}",
                "met": tuner.median_trials_to_reach <= TARGET_MEDIAN_TRIALS,
            }
        )
        out.append(
            {
                "what": "tuner median failed GPU time",
                "measured": round(tuner.median_failed_gpu_frac, 3),
                "target": f"<= {TARGET_FAILED_GPU_FRAC:.0%}",
                "met": tuner.median_failed_gpu_frac <= TARGET_FAILED_GPU_FRAC,
            }
        )
        cal = calibrate(o for s in studies if s.sampler == "tuner" for o in s.odds)
        out.append(
            {
                "what": "tuner proposals rated >= 90% to fit that fit",
                "measured": None if cal.high_fitted_share is None else round(cal.high_fitted_share, 3),
                "n": cal.high_n,
                "brier": None if cal.brier is None else round(cal.brier, 3),
                "target": ">= 90%",
                "met": cal.met,
            }
        )
        out.append(
            {
                "what": "tuner studies the CLI stopped",
                "measured": tuner.stopped,
                "target": "0",
                "met": not tuner.stopped,
            }
        )
    if tuner is not None and rnd is not None:
        ratio = rnd.median_trials_to_reach / tuner.median_trials_to_reach
        out.append(
            {
                "what": "random / tuner median trials to reach",
                "measured": round(ratio, 2),
                "target": f">= {TARGET_RANDOM_RATIO:g}x",
                "met": ratio >= TARGET_RANDOM_RATIO,
            }
        )
    return [{"landscape": name, **t} for t in out]


def show(summaries: Sequence[Summary], checks: Sequence[Mapping[str, Any]], studies: Sequence[Study]) -> None:
    console = Console(width=160)
    table = Table(title="trials to reach within 2% of the best stable config (censored = trials + 1)")
    for col in (
        "landscape",
        "sampler",
        "median",
        "censored",
        "per seed",
        "failed GPU (median/max)",
        "best found",
        "stopped",
        "no winner",
        "statuses",
    ):
        table.add_column(col)
    for s in summaries:
        table.add_row(
            s.landscape,
            s.sampler,
            f"{s.median_trials_to_reach:g}",
            str(s.censored),
            " ".join(map(str, s.trials_to_reach)),
            f"{s.median_failed_gpu_frac:.1%} / {s.max_failed_gpu_frac:.1%}",
            f"{s.median_best_found_frac:.3f}",
            str(s.stopped),
            str(s.unconfirmed),
            " ".join(f"{k}={v}" for k, v in sorted(s.statuses.items())),
        )
    console.print(table)
    cal = calibrate(o for s in studies if s.sampler == "tuner" for o in s.odds)
    bands = " ".join(f"{b.low:.0%}:{b.fitted_share:.0%}({b.n})" for b in cal.bands if b.n)
    console.print(f"tuner odds, all landscapes: band:fitted(n) {bands}; Brier {cal.brier}")
    checks_table = Table(title="targets")
    for col in ("landscape", "what", "measured", "target", "met"):
        checks_table.add_column(col)
    for c in checks:
        checks_table.add_row(c["landscape"], c["what"], str(c["measured"]), c["target"], "yes" if c["met"] else "NO")
    console.print(checks_table)
    for s in studies:
        if s.exit_code not in (0, 2):
            console.print(f"{s.landscape} {s.sampler} seed {s.seed}: exit {s.exit_code}: {s.stopped_by}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--landscapes", default=",".join(LANDSCAPES))
    p.add_argument("--seeds", type=int, default=6)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--trials", type=int, default=24)
    p.add_argument("--samplers", default="tuner,random")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--jobs", type=int, default=2, help="studies run at once (a trial mostly sleeps)")
    p.add_argument("--keep", type=Path, default=None, help="keep the studies' storages and logs in this folder")
    p.add_argument(
        "--blind", action="store_true", help="the tool reads no GPU, only what the commands print (no fake NVML)"
    )
    a = p.parse_args(argv)
    names = [n for n in a.landscapes.split(",") if n]
    unknown = [n for n in names if n not in LANDSCAPES]
    if unknown:
        print(f"error: --landscapes: unknown {unknown}; known: {sorted(LANDSCAPES)}", file=sys.stderr)
        return 2
    samplers = [s for s in a.samplers.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="landscapes-") as tmp:
        root = a.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        plan = [(n, s, seed) for n in names for seed in range(a.first_seed, a.first_seed + a.seeds) for s in samplers]
        with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
            studies = list(pool.map(lambda job: run_one(*job, a.trials, root, not a.blind), plan))
    summaries, checks = [], []
    for n in names:
        by = {}
        for s in samplers:
            group = [st for st in studies if st.landscape == n and st.sampler == s]
            by[s] = summarise(group)
            summaries.append(by[s])
        checks += targets(n, by, [st for st in studies if st.landscape == n])
    show(summaries, checks, studies)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(a).items()},
                    "targets": checks,
                    "summaries": [asdict(s) for s in summaries],
                    "studies": [asdict(s) for s in studies],
                },
                indent=1,
            )
        )
    return 0 if all(c["met"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
