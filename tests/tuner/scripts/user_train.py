"""A training script as a user writes it: argparse flags, ``torch.distributed`` on gloo when run
under ``torchrun``, the Hugging Face Trainer's progress bar and log dicts, and a fixed length
(``--steps``): it exits 0 after its last step, whatever a tuner would like.

    torchrun --nproc_per_node 1 user_train.py --steps 6 --batch-size 8

A step takes ``UT_STEP_S`` seconds (default 0.3) times 8 / batch size, scattered by ``UT_JITTER``
(default 0.15, uniform either way) from a seed of the batch size; the first step twice that.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()
    if "RANK" in os.environ:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    from tqdm.auto import tqdm

    rnd = random.Random(args.batch_size)
    base = float(os.environ.get("UT_STEP_S", "0.3")) * 8 / args.batch_size
    jitter = float(os.environ.get("UT_JITTER", "0.15"))
    rank0 = int(os.environ.get("RANK", "0")) == 0
    bar = tqdm(total=args.steps, disable=not rank0, mininterval=0)
    start = time.time()
    for step in range(1, args.steps + 1):
        time.sleep(base * (2 if step == 1 else 1) * (1 + rnd.uniform(-jitter, jitter)))
        bar.update(1)
        if rank0 and step % 2 == 0:
            bar.write(str({"loss": format(2.3 - step / 100, ".4g"), "learning_rate": "5e-05", "epoch": "0.1"}))
    bar.close()
    run = time.time() - start
    if rank0:
        print({"train_runtime": format(run, ".4g"), "train_steps_per_second": format(args.steps / run, ".4g")})
    if "RANK" in os.environ:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
