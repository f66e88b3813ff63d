"""One rank of the NCCL check: the collectives a training step makes, with the trial's NCCL
variables and no trainer (run under ``torch.distributed.run``; ``nccl_check`` starts it).

Each round runs an all-reduce, an all-gather, a reduce-scatter, a broadcast and (on NCCL) an
all-to-all at a small size (NCCL picks its low-latency protocols there) and a large one (its
bandwidth algorithms: rings, trees, NVLS), ``REPEATS`` times each, checks the all-reduce's sums,
synchronises the device and prints one line on rank 0 (the NCCL sweep compares these times)::

    nccl-tune check: round 3/6: step starts
    nccl-tune check: round 3/6 in 0.412 s

The first line opens the round as the phase ``step``: the launcher's stall clock then allows a few
times the longest round measured, not the whole start-up timeout, to the round's end.

A setting NCCL refuses raises in the first collective (the command exits non-zero with NCCL's
message); a setting that deadlocks leaves the round unfinished, and the supervising launcher's
stall clock calls it a hang. A wrong sum exits with code 3.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROUND_LINE = "nccl-tune check: round {round}/{rounds} in {seconds:.3f} s"
ROUND_PATTERN = r"nccl-tune check: round (?P<step>\d+)/\d+ in (?P<seconds>\d+(?:\.\d+)?) s"
"""The line each round prints, and the progress rule that reads it."""
ROUND_START_LINE = "nccl-tune check: round {round}/{rounds}: step starts"
ROUND_START_PATTERN = r"nccl-tune check: round \d+/\d+: (?P<phase>step) starts"
"""The line before each round, and the rule that opens the phase ``step`` with it."""
SIZES_BYTES = (64 << 10, 64 << 20)
GLOO_SIZES_BYTES = (64 << 10, 1 << 20)
"""On gloo (the CPU stand-in where no GPU is) the check only exercises the machinery: its large size
is 1 MiB, which a CPU reduces in milliseconds, not 64 MiB (about a second of two cores per round)."""
ROUNDS = 6
"""Rounds of collectives a check runs: the first is the warm-up (communicator set-up), the rest are timed."""
REPEATS = 8
"""Times a round runs each size's collectives: on a GPU node one pass takes a millisecond or two, and
a round of several is timed well above the launch and barrier jitter."""


def _collectives(dist, torch, device, world: int, rank: int, numel: int, all_to_all: bool) -> bool:  # noqa: ANN001
    """One size of every collective; True when the all-reduce's sum is right."""
    x = torch.full((numel,), float(rank + 1), device=device)
    dist.all_reduce(x)
    ok = bool(torch.all(x == world * (world + 1) / 2).item())
    part = torch.ones(numel // world, device=device)
    gathered = torch.empty(numel, device=device)
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(gathered, part)
    (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(part, gathered)
    dist.broadcast(x, src=0)
    if all_to_all:
        out = torch.empty_like(gathered)
        dist.all_to_all_single(out, gathered)
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--repeats", type=int, default=REPEATS)
    ap.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    args = ap.parse_args(argv)
    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    if args.backend == "nccl":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    dist.init_process_group(args.backend, device_id=device if args.backend == "nccl" else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    for i in range(1, args.rounds + 1):
        if rank == 0:
            print(ROUND_START_LINE.format(round=i, rounds=args.rounds), flush=True)
        t0 = time.perf_counter()
        for size in SIZES_BYTES if args.backend == "nccl" else GLOO_SIZES_BYTES:
            numel = max(world, size // 4 // world * world)
            for _ in range(args.repeats):
                if not _collectives(dist, torch, device, world, rank, numel, args.backend == "nccl"):
                    print(f"nccl-tune check: rank {rank}: the all-reduce's sum is wrong at {size} bytes", flush=True)
                    return 3
        if args.backend == "nccl":
            torch.cuda.synchronize(device)
        dist.barrier()
        if rank == 0:
            print(ROUND_LINE.format(round=i, rounds=args.rounds, seconds=time.perf_counter() - t0), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
