"""Stable on four steps or at the worst batch: how often each winner runs out of memory in a long run.

On the twin (``twin.evaluate``, today's SkyRL text-to-SQL script, no eval, checkpoints or dumps),
for each data order (``trainer.seed`` 0..SEEDS-1) every config of a grid over the parameters that
move memory (``micro_train_batch_size_per_gpu``, ``micro_forward_batch_size_per_gpu``,
``max_prompt_length``, policy CPU offload) runs a trial of the space's length (one warm-up and
two measured steps). Three judges pick a winner among the configs whose trial finished:

- ``first steps``: the fastest whose trial peak kept ``min_headroom_frac`` (5%) of the GPU free
  (what a tuner that measures a few steps calls stable);
- ``predicted``: the fastest whose worst case, fitted on the trial's steps (their
  ``generate/max_num_tokens`` and peaks) and read at the longest response the config allows
  (``nccl_tune.tuner.records.worst_case.predict``), fits (a prediction whose slope the steps
  could not pin judges nothing, as in the tool);
- ``forced``: the fastest whose trial run with the space's ``stability.force_worst_case`` (vLLM's
  ``min_tokens`` at ``max_generate_length``, rendered by the tool: ``render.forced_values``) kept
  the headroom; its throughput is the normal run's, not the forced one's;
- ``forced by the tool`` (``--tool-seeds`` data orders): the winner of ``nccl-tune run`` itself
  (``run_study`` on the twin's cost model, ``twin.launcher.ModelLauncher``; ``--trials`` search
  trials, the default two confirmation re-runs, its own forced trials), with how many forced trials
  it ran and what they cost in modelled GPU hours, against the whole study's.

Each winner then runs 200 modelled steps with the same data order (run seed 0): the table gives
how many of the data orders ran out of memory (or stalled at the wall) and the winners' mean
throughput (samples per noise-free step second), and what judging at the worst case costs.
Target: the winners judged at the worst case (predicted or forced) never run out of memory.

    python benchmarks/worst_case.py [--seeds 20] [--steps 200] [--tool-seeds 3] [--trials 16] [--json PATH]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from nccl_tune.search_spaces.loader import load_space
from nccl_tune.search_spaces.render import forced_values
from nccl_tune.tuner.records.study_records import TrialKind
from nccl_tune.tuner.records.worst_case import forced as forced_case
from nccl_tune.tuner.records.worst_case import predict
from nccl_tune.tuner.settings import RunSettings
from nccl_tune.tuner.study.loop import run_study
from twin import evaluate, parse_overrides, skyrl_sql_overrides
from twin.launcher import ModelLauncher

MIN_HEADROOM_FRAC = 0.05
TRIAL_STEPS = 3
GRID = {
    "trainer.micro_train_batch_size_per_gpu": (1, 2, 4, 8),
    "trainer.micro_forward_batch_size_per_gpu": (1, 2, 4, 8, 16),
    "trainer.max_prompt_length": (2048, 4096, 6000),
    "trainer.policy.fsdp_config.cpu_offload": ("false", "true"),
}
QUIET = (
    "trainer.eval_before_train=false",
    "trainer.eval_interval=-1",
    "trainer.ckpt_interval=-1",
    "trainer.hf_save_interval=-1",
    "trainer.resume_mode=none",
    "trainer.dump_data_batch=false",
    "trainer.epochs=100",
)
SPACE = load_space("skyrl-text2sql")
JUDGES = ("first steps", "predicted", "forced")
TOOL = "forced by the tool"
SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "run_skyrl_sql_sim.sh"


@dataclass(frozen=True)
class Row:
    judge: str
    runs: int
    """Data orders with a winner."""
    out_of_memory: int
    """Of those, the runs whose winner ran out of memory or stalled at the wall within the steps."""
    mean_failing_step: float | None
    samples_per_s: float
    """Mean throughput of the winners (noise-free)."""
    winners: dict[str, int]
    """Winner (its non-default values) -> data orders it won."""


def _cfg(values: dict[str, object], seed: int, *extra: str):
    tokens = [*skyrl_sql_overrides("/h"), *QUIET, f"trainer.seed={seed}", *(f"{k}={v}" for k, v in values.items())]
    return parse_overrides([*tokens, *extra], {"HOME": "/h"})


def _step_peaks(out) -> list[float]:
    return [max(out.step_memory_gib[k]) / out.gpu_capacity_gib for k in sorted(out.step_memory_gib)]


def _judged(seed: int) -> dict[str, tuple[float, dict[str, object]] | None]:
    """Per judge, the fastest config it calls stable for data order ``seed`` (throughput, values)."""
    best: dict[str, tuple[float, dict[str, object]] | None] = dict.fromkeys(JUDGES)
    for combo in itertools.product(*GRID.values()):
        values = dict(zip(GRID, combo))
        trial = evaluate(_cfg(values, seed), seed=0, steps=TRIAL_STEPS)
        if not trial.ok or not trial.steps:
            continue
        speed = trial.samples_per_step / trial.step_s
        peaks = _step_peaks(trial)
        fits = {"first steps": max(peaks) <= 1.0 - MIN_HEADROOM_FRAC}
        tokens = [trial.step_tokens[k].max_num_tokens for k in sorted(trial.step_tokens)]
        worst = predict(tokens, peaks, trial.worst_response_tokens)
        fits["predicted"] = fits["first steps"] and not (worst is not None and worst.unfit(MIN_HEADROOM_FRAC))
        if fits["first steps"]:
            args, _ = forced_values(SPACE, {**SPACE.defaults(), **_typed(values)})
            forced = evaluate(_cfg(values, seed, *args), seed=0, steps=TRIAL_STEPS)
            judged = forced_case(_step_peaks(forced)) if forced.ok and forced.steps else None
            fits["forced"] = judged is not None and judged.fits(MIN_HEADROOM_FRAC)
        for judge in JUDGES:
            if fits.get(judge) and (best[judge] is None or speed > best[judge][0]):
                best[judge] = (speed, values)
    return best


def _typed(values: dict[str, object]) -> dict[str, object]:
    """The grid's values as the space holds them (booleans, not the strings the overrides spell)."""
    return {k: {"true": True, "false": False}.get(v, v) if isinstance(v, str) else v for k, v in values.items()}


@dataclass(frozen=True)
class ToolRun:
    seed: int
    winner: dict[str, object] | None
    worst_how: str | None
    stable: str | None
    """``metrics.worst_case.stable`` of its tuned YAML."""
    forced_trials: int
    forced_gpu_h: float
    """Modelled GPU hours of its forced trials."""
    study_gpu_h: float
    """Modelled GPU hours of every launched trial of the study."""
    long_oom: bool | None
    """Its winner ran out of memory in the long run (None: no winner)."""
    samples_per_s: float


def _tool(seed: int, steps: int, trials: int, folder: Path) -> ToolRun:
    """``nccl-tune run`` on the twin for data order ``seed``; its winner run for ``steps`` steps."""
    from nccl_tune.tuner.winner.export import tuned_document

    settings = RunSettings(
        command=("bash", str(SCRIPT), f"trainer.seed={seed}"),
        space="skyrl-text2sql",
        results=folder,
        storage=f"sqlite:///{folder / f'tool-{seed}.db'}",
        study=f"tool-{seed}",
        trials=trials,
        seed=seed,
        nccl_check="off",
    )
    out = run_study(settings, console=Console(file=open(os.devnull, "w")), launcher=ModelLauncher(env={"HOME": "/h"}))
    launched = [r for r in out.records if r.result is not None]
    forced = [r for r in launched if r.kind is TrialKind.FORCED]
    gpu_h = sum(r.result.gpu_s or 0.0 for r in launched) / 3600
    forced_h = sum(r.result.gpu_s or 0.0 for r in forced) / 3600
    w = out.winner
    if w is None:
        return ToolRun(seed, None, None, None, len(forced), round(forced_h, 2), round(gpu_h, 2), None, 0.0)
    values = {k: v for k, v in w.values.items() if k in GRID or k.startswith("trainer.")}
    long = evaluate(_cfg(values, seed), seed=0, steps=steps)
    oom = long.failure is not None and long.failure.kind in ("oom", "hang_memory")
    doc = tuned_document(out.stored, w)["metrics"]["worst_case"]
    speed = long.samples_per_step / long.step_s if long.steps else 0.0
    return ToolRun(
        seed, values, doc["how"], doc["stable"], len(forced), round(forced_h, 2), round(gpu_h, 2), oom, round(speed, 3)
    )


def _name(values: dict[str, object]) -> str:
    short = {k.split(".")[-1]: v for k, v in values.items()}
    return " ".join(f"{k}={v}" for k, v in short.items())


def run(seeds: int, steps: int) -> list[Row]:
    tally = {j: {"runs": 0, "oom": 0, "fail_steps": [], "speeds": [], "winners": {}} for j in JUDGES}
    for seed in range(seeds):
        for judge, pick in _judged(seed).items():
            if pick is None:
                continue
            speed, values = pick
            t = tally[judge]
            t["runs"] += 1
            t["speeds"].append(speed)
            t["winners"][_name(values)] = t["winners"].get(_name(values), 0) + 1
            long = evaluate(_cfg(values, seed), seed=0, steps=steps)
            if long.failure is not None and long.failure.kind in ("oom", "hang_memory"):
                t["oom"] += 1
                t["fail_steps"].append(long.failure.step)
    return [
        Row(
            judge,
            t["runs"],
            t["oom"],
            round(statistics.fmean(t["fail_steps"]), 1) if t["fail_steps"] else None,
            round(statistics.fmean(t["speeds"]), 3) if t["speeds"] else 0.0,
            dict(sorted(t["winners"].items(), key=lambda kv: -kv[1])),
        )
        for judge, t in tally.items()
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="data orders (trainer.seed 0..N-1)")
    parser.add_argument("--steps", type=int, default=200, help="modelled steps of each winner's long run")
    parser.add_argument("--tool-seeds", type=int, default=3, help="data orders nccl-tune run itself tunes (0: none)")
    parser.add_argument("--trials", type=int, default=16, help="search trials of each nccl-tune run (make demo's)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    start = time.perf_counter()
    rows = run(args.seeds, args.steps)
    with tempfile.TemporaryDirectory() as folder:
        tool = [_tool(seed, args.steps, args.trials, Path(folder)) for seed in range(args.tool_seeds)]
    if tool:
        won = [t for t in tool if t.winner is not None]
        names: dict[str, int] = {}
        for t in won:
            names[_name(t.winner)] = names.get(_name(t.winner), 0) + 1
        rows.append(
            Row(
                TOOL,
                len(won),
                sum(bool(t.long_oom) for t in won),
                None,
                round(statistics.fmean(t.samples_per_s for t in won), 3) if won else 0.0,
                names,
            )
        )
    seconds = time.perf_counter() - start
    table = Table(title=f"winners run {args.steps} modelled steps, {args.seeds} data orders ({seconds:.1f} s)")
    for col in ("judge", "runs", "out of memory", "mean failing step", "samples/s", "cost vs first steps"):
        table.add_column(col)
    base = next((r.samples_per_s for r in rows if r.judge == "first steps"), 0.0)
    for r in rows:
        cost = f"{1 - r.samples_per_s / base:.1%}" if base and r.samples_per_s else "-"
        table.add_row(
            r.judge, str(r.runs), str(r.out_of_memory), str(r.mean_failing_step or "-"), f"{r.samples_per_s}", cost
        )
    console = Console()
    console.print(table)
    for r in rows:
        console.print(f"{r.judge}: " + "; ".join(f"{name} x{n}" for name, n in r.winners.items()))
    for t in tool:
        console.print(
            f"{TOOL}, data order {t.seed}: {t.forced_trials} forced trials, {t.forced_gpu_h} of the study's "
            f"{t.study_gpu_h} modelled GPU hours; winner {_name(t.winner) if t.winner else 'none'}, worst case "
            f"{t.worst_how} ({t.stable})"
        )
    met = all(r.out_of_memory == 0 for r in rows if r.judge != "first steps")
    console.print(f"worst-case winners never ran out of memory: {'yes' if met else 'NO'}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "seeds": args.seeds,
            "steps": args.steps,
            "seconds": round(seconds, 1),
            "met": met,
            "rows": [asdict(r) for r in rows],
            "tool": [asdict(t) for t in tool],
        }
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
