"""Speed-up of parallel trials on Ray: the same study run with K = 1, 2, 4 slots.

Starts a Ray cluster on loopback with 4 logical nodes (each offering ``nccl_tune_node: 1``), then
runs ``nccl-tune``'s study loop (``run_study``, ``--launcher ray --parallel K``) over trials of
fixed length: a command printing SkyRL's step lines, one every ``--step-s`` seconds (the first,
warm-up step twice as long), sleeping in between like a trainer waiting on its GPUs. The speed-up
for K is the wall time of the K=1 study over that of the K study (same number of trials).
Target: at least 0.8 K.

Each trial also pays a fixed cost that is not its command: a new Ray actor (a Python worker
started on the node, ~1-2 s on a loaded 2-core machine), its GPU gate, the start of the command
and its teardown; each study pays for connecting and one task per node (baseline, orphan sweep).
Real trials run for minutes; trials of a few seconds would measure those costs, not the slots,
so the default step is 5 s (a trial of 20 s). The JSON holds ``fixed_s_per_trial``: the K=1
wall time per trial beyond its steps.

    python benchmarks/parallel.py [--trials 8] [--step-s 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

STEP_COMMAND = (
    "import sys, time\n"
    "steps, step_s = int(sys.argv[1]), float(sys.argv[2])\n"
    "for i in range(steps):\n"
    "    print(\"Started: 'step'\", flush=True)\n"
    "    took = step_s * (2 if i == 0 else 1)\n"
    "    time.sleep(took)\n"
    "    print(f\"Finished: 'step', time cost: {took:.2f}s\", flush=True)\n"
    "print('Training done!', flush=True)\n"
)
SPACE = """name: fixed-length
description: trials of fixed length for the parallel benchmark
parameters:
  - name: trainer.tag
    kind: int
    low: 1
    high: 4000
    default: 1
    memory: none
stop:
  warmup_steps: 1
  measured_steps: {measured}
progress:
  preset: skyrl
throughput:
  samples_per_step: 8
"""
SLOTS = (1, 2, 4)
STEPS_PER_TRIAL_S = 4
"""A trial's steps last this many ``--step-s``: a warm-up step of two, then two measured."""
TARGET = 0.8


def one_study(address: str, slots: int, trials: int, step_s: float, root: Path) -> float:
    """Wall seconds of one study with ``slots`` trials at once."""
    from rich.console import Console as _C

    from nccl_tune.tuner.settings import RunSettings
    from nccl_tune.tuner.study.loop import run_study

    space = root / "space.yaml"
    settings = RunSettings(
        command=(sys.executable, "-c", STEP_COMMAND, "3", str(step_s)),
        space=str(space),
        study=f"par-{slots}",
        results=root / f"k{slots}",
        trials=trials,
        seed=1,
        sampler="random",
        launcher="ray",
        parallel=slots,
        ray_address=address,
        confirm=0,
    )
    t0 = time.monotonic()
    outcome = run_study(settings, _C(stderr=True, quiet=True))
    wall = time.monotonic() - t0
    if outcome.launched != trials:
        raise SystemExit(f"K={slots}: {outcome.launched} of {trials} trials ran")
    return wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--step-s", type=float, default=5.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    import ray
    from ray.cluster_utils import Cluster

    from nccl_tune.launchers.ray_launcher import NODE_RESOURCE

    node = {"num_cpus": 1, "resources": {NODE_RESOURCE: 1}}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    for _ in range(max(SLOTS) - 1):
        cluster.add_node(**node)
    cluster.wait_for_nodes()
    walls: dict[int, float] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="ntpar") as tmp:
            root = Path(tmp)
            (root / "space.yaml").write_text(SPACE.format(measured=2))
            for k in SLOTS:
                walls[k] = one_study(cluster.address, k, args.trials, args.step_s, root)
    finally:
        ray.shutdown()
        cluster.shutdown()
    speedup = {str(k): walls[SLOTS[0]] / walls[k] for k in SLOTS}
    fixed = walls[SLOTS[0]] / args.trials - STEPS_PER_TRIAL_S * args.step_s
    table = Table(
        title=f"parallel trials on Ray ({args.trials} trials of {STEPS_PER_TRIAL_S * args.step_s:g} s, "
        f"{fixed:.1f} s fixed cost each)"
    )
    for col in ("K", "wall s", "speed-up", "target"):
        table.add_column(col, justify="right")
    for k in SLOTS:
        table.add_row(str(k), f"{walls[k]:.1f}", f"{speedup[str(k)]:.2f}", f">= {TARGET * k:.1f}")
    Console().print(table)
    report = {
        "speedup": speedup,
        "wall_s": {str(k): walls[k] for k in SLOTS},
        "trials": args.trials,
        "step_s": args.step_s,
        "fixed_s_per_trial": fixed,
        "target_frac": TARGET,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if all(speedup[str(k)] >= TARGET * k for k in SLOTS) else 1


if __name__ == "__main__":
    sys.exit(main())
