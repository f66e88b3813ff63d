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
- ``forced``: the fastest whose trial run with vLLM's ``min_tokens`` at ``max_generate_length``
  (``generator.sampling_params.additional_kwargs``) kept the headroom; its throughput is the
  normal run's, not the forced one's.

Each winner then runs 200 modelled steps with the same data order (run seed 0): the table gives
how many of the data orders ran out of memory (or stalled at the wall) and the winners' mean
throughput (samples per noise-free step second), and what judging at the worst case costs.
Target: the winners judged at the worst case (predicted or forced) never run out of memory.

    python benchmarks/worst_case.py [--seeds 20] [--steps 200] [--json PATH]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from nccl_tune.tuner.records.worst_case import predict
from twin import evaluate, parse_overrides, skyrl_sql_overrides

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
FORCE = "generator.sampling_params.additional_kwargs={min_tokens:3000}"
JUDGES = ("first steps", "predicted", "forced")


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
            forced = evaluate(_cfg(values, seed, FORCE), seed=0, steps=TRIAL_STEPS)
            fits["forced"] = forced.ok and max(_step_peaks(forced)) <= 1.0 - MIN_HEADROOM_FRAC
        for judge in JUDGES:
            if fits.get(judge) and (best[judge] is None or speed > best[judge][0]):
                best[judge] = (speed, values)
    return best


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
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    start = time.perf_counter()
    rows = run(args.seeds, args.steps)
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
        }
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
