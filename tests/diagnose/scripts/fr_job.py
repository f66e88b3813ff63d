"""A real torch.distributed gloo job that leaves per-rank Flight Recorder dumps.

Usage: fr_job.py RANK WORLD PORT MODE DUMP_PREFIX
MODE ``stall``: rank 1 sleeps instead of entering the 4th all_reduce of the default group, so the
others time out in it. MODE ``mismatch``: in a second group made with ``new_group``, rank 1 calls
broadcast where the others call all_reduce (same sequence number). Every rank then writes its
Flight Recorder dump to ``<DUMP_PREFIX><rank>`` and prints what happened.

The rendezvous store waits a generous minute for every rank (start-up on a loaded machine varies);
only the collectives time out after ``FR_JOB_TIMEOUT_S``.
"""

from __future__ import annotations

import datetime
import os
import signal
import sys
import time

os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")  # before the process group exists

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

TIMEOUT_S = float(os.environ.get("FR_JOB_TIMEOUT_S", "3"))


def main() -> int:
    rank, world, port, mode, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    store = dist.TCPStore("127.0.0.1", int(port), world, rank == 0, timeout=datetime.timedelta(seconds=60))
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=TIMEOUT_S)
    )
    signal.alarm(int(TIMEOUT_S * 10))  # never outlive a broken test: SIGALRM ends the process
    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    group = dist.new_group(list(range(world)), backend="gloo", timeout=timeout) if mode == "mismatch" else None
    t = torch.ones(16)
    for _ in range(3):
        dist.all_reduce(t, group=group)
    print(f"[rank{rank}]: 3 all_reduce done", flush=True)
    try:
        if mode == "stall" and rank == 1:
            others = [f"{prefix}{r}" for r in range(world) if r != rank]
            deadline = time.monotonic() + TIMEOUT_S * 4
            while time.monotonic() < deadline and not all(os.path.exists(o) for o in others):
                time.sleep(0.1)
        elif mode == "mismatch" and rank == 1:
            dist.broadcast(t, 0, group=group)
        else:
            dist.all_reduce(t, group=group)
    except RuntimeError as exc:
        print(f"[rank{rank}]: {type(exc).__name__}: {exc}", flush=True)
    tmp = f"{prefix}{rank}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(torch._C._distributed_c10d._dump_fr_trace())
    os.replace(tmp, f"{prefix}{rank}")
    print(f"[rank{rank}]: Flight Recorder dump written", flush=True)
    sys.stdout.flush()
    os._exit(0)  # the group is broken: skip a destroy that could block


if __name__ == "__main__":
    sys.exit(main())
