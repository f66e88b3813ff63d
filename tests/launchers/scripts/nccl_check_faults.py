"""A rank of an NCCL check on gloo whose collectives break the way bad NCCL settings break them, for
the check's tests (gloo reads no NCCL variable, so this program reads them itself):

- ``NCCL_ALGO=NVLS``: rank 1 never joins the second round's all-reduce, so rank 0 waits in it (a
  real collective hang: no round line comes);
- ``NCCL_ALGO=bogus``: every rank exits 1 with NCCL's refusal before its first collective;
- anything else: the real worker's rounds.

Run under ``torch.distributed.run`` with the real worker's options (``--rounds``, ``--backend``).
"""

from __future__ import annotations

import os
import sys
import time

from nccl_tune.launchers import nccl_check_worker


def main() -> int:
    algo = os.environ.get("NCCL_ALGO")
    if algo == "bogus":
        print("NCCL WARN Invalid NCCL_ALGO: bogus", flush=True)
        print("torch.distributed.DistBackendError: NCCL error: invalid usage", flush=True)
        return 1
    if algo != "NVLS":
        return nccl_check_worker.main(sys.argv[1:])
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = torch.ones(16)
    dist.all_reduce(x)
    if rank == 0:
        print(nccl_check_worker.ROUND_START_LINE.format(round=1, rounds=6), flush=True)
        print(nccl_check_worker.ROUND_LINE.format(round=1, rounds=6, seconds=0.01), flush=True)
        print(nccl_check_worker.ROUND_START_LINE.format(round=2, rounds=6), flush=True)
    if rank == 1:
        time.sleep(3600)
    dist.all_reduce(x)
    return 0


if __name__ == "__main__":
    sys.exit(main())
