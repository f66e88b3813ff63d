"""A real 2-rank gloo job under torchrun whose rank 1 breaks it.

Usage: torchrun --nproc-per-node 2 gloo_torchrun_job.py MODE
MODE ``size``: rank 1 all-reduces a tensor twice as long as rank 0's (gloo aborts the receiving rank:
``Received data size doesn't match expected size``). MODE ``exit``: rank 1 exits with code 3 after the
first all_reduce, printing nothing (its peer loses the connection in the second).
"""

from __future__ import annotations

import datetime
import os
import signal
import sys

import torch
import torch.distributed as dist


def main() -> int:
    mode = sys.argv[1]
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
    signal.alarm(60)  # never outlive a broken test
    rank = dist.get_rank()
    if mode == "size":
        dist.all_reduce(torch.ones(4 if rank == 0 else 8))
    elif mode == "exit":
        t = torch.ones(4)
        dist.all_reduce(t)
        if rank == 1:
            os._exit(3)
        dist.all_reduce(t)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
