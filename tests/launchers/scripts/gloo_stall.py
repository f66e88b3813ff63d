"""A real torch.distributed job on gloo for the stack tests: WORLD ranks in their own processes
(RANK set as torchrun sets it) run steps of all_reduce; rank 0 prints SkyRL-format step lines.
At step STALL_STEP, rank STALL_RANK sleeps instead of joining the collective, so the others wait
in all_reduce and no progress line comes: the launcher's stall clock must fire.

    python gloo_stall.py WORLD STALL_RANK STALL_STEP
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stall_here() -> None:
    time.sleep(600)


def rank_main(rank: int, world: int, stall_rank: int, stall_step: int) -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world)
    x = torch.ones(1024)
    for step in range(100):
        if rank == 0:
            print(f"(skyrl_entrypoint pid={os.getpid()}) Started: 'step'", flush=True)
        t0 = time.monotonic()
        if rank == stall_rank and step == stall_step:
            stall_here()
        dist.all_reduce(x)
        time.sleep(0.05)
        if rank == 0:
            print(
                f"(skyrl_entrypoint pid={os.getpid()}) Finished: 'step', time cost: {time.monotonic() - t0:.2f}s",
                flush=True,
            )
    dist.destroy_process_group()
    return 0


def main() -> int:
    world, stall_rank, stall_step = (int(a) for a in sys.argv[1:4])
    env = dict(
        os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world), OMP_NUM_THREADS="1"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "rank", str(r), str(world), str(stall_rank), str(stall_step)],
            env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
        )
        for r in range(world)
    ]
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    if sys.argv[1] == "rank":
        sys.exit(rank_main(*(int(a) for a in sys.argv[2:6])))
    sys.exit(main())
