"""The synthetic twin's cost model: how many modelled runs (``twin.evaluate``) per second.

The twin is called in-process by ``search.py`` (thousands of trials per run) and computes its
exact landscape by evaluating the full grid, so its speed bounds how many studies a benchmark can
afford. Measures the twin's SkyRL text-to-SQL command (``skyrl_sql_overrides``), three steps
per run and one run seed per evaluation, on a config that
trains and on one that fails (an out-of-memory micro-batch). Target: at least 1000 evaluations per second.

    python benchmarks/twin_speed.py [--runs 2000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from twin import evaluate, parse_overrides, skyrl_sql_overrides

TARGET_PER_S = 1000.0
CASES = {
    "healthy": ("trainer.train_batch_size=256", "trainer.micro_train_batch_size_per_gpu=4"),
    "out of memory": ("trainer.train_batch_size=256", "trainer.micro_train_batch_size_per_gpu=16"),
}


@dataclass(frozen=True)
class Row:
    """One case: ``runs`` evaluations at run seeds 0..runs-1."""

    case: str
    runs: int
    seconds: float
    per_s: float
    ok: bool
    meets_target: bool


def measure(case: str, overrides: tuple[str, ...], runs: int) -> Row:
    cfg = parse_overrides([*skyrl_sql_overrides("/h"), *overrides], {"HOME": "/h"})
    ok = evaluate(cfg, seed=0, steps=3).ok
    start = time.perf_counter()
    for seed in range(runs):
        evaluate(cfg, seed=seed, steps=3)
    seconds = time.perf_counter() - start
    per_s = runs / seconds
    return Row(case, runs, round(seconds, 3), round(per_s, 1), ok, per_s >= TARGET_PER_S)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = [measure(case, overrides, args.runs) for case, overrides in CASES.items()]
    table = Table(title=f"twin evaluations (target >= {TARGET_PER_S:.0f}/s)")
    for column in ("case", "runs", "seconds", "per second", "run ok", "target"):
        table.add_column(column)
    for r in rows:
        table.add_row(
            r.case, str(r.runs), f"{r.seconds:.2f}", f"{r.per_s:.0f}", str(r.ok), "met" if r.meets_target else "MISSED"
        )
    Console().print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"target_per_s": TARGET_PER_S, "rows": [asdict(r) for r in rows]}, indent=2))
    return 0 if all(r.meets_target for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
