"""A tiny real training command for the tuner's tests: takes Hydra-style key=value overrides,
prints SkyRL-format timing and memory lines, and fails the way trainers fail.

Keys: trainer.micro=<int> (bigger: faster steps, more memory), trainer.offload=<bool> (less memory,
slower), trainer.mode=<ok|crash|refuse|bigline> and trainer.ckpt_path=<dir>. ``bigline`` first prints
TINY_BIGLINE_MB (default 300) megabytes without a newline, then trains as usual. Any other key is refused like
Hydra refuses it. Memory = 20 + 12 * micro GiB (x0.5 with offload) on an 80 GiB GPU: above it, a CUDA OOM.
TINY_STEP_S scales the step time (default 0.15 s for micro=1). It never stops by itself (no step cap),
like skyrl_train: the tuner stops it after its measured steps. TINY_FLAKY_ALGO=<algo>: NCCL_ALGO=<algo>
makes steps 30% faster, and a run with it hangs in its first step unless trainer.micro=4 (a setting
that hangs now and then, spared by the runs of one config). TINY_STALL_STEP=<n>: step n takes three
times as long (a garbage collection, a checkpoint write). TINY_EXACT_TIMES=1: each step prints the
time it was meant to take, not the time it took (a test whose figures must not move with the
machine's load).
"""

import os
import sys
import time

KNOWN = {"trainer.micro": "1", "trainer.offload": "false", "trainer.mode": "ok", "trainer.ckpt_path": "/tmp"}


def main() -> int:
    cfg = dict(KNOWN)
    for arg in sys.argv[1:]:
        key, _, value = arg.partition("=")
        if key not in cfg:
            print(f"Could not override '{key}'.", file=sys.stderr)
            print(f"To append to your config use +{key}={value}", file=sys.stderr)
            print(f"Key '{key.split('.')[-1]}' is not in struct", file=sys.stderr)
            print("\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.", file=sys.stderr)
            return 1
        cfg[key] = value
    micro = int(cfg["trainer.micro"])
    offload = cfg["trainer.offload"] == "true"
    mem = (20 + 12 * micro) * (0.5 if offload else 1.0)
    base = float(os.environ.get("TINY_STEP_S", "0.15"))
    step_s = base * (1.0 + 2.0 / micro) / 3.0 * (1.6 if offload else 1.0)
    flaky = os.environ.get("TINY_FLAKY_ALGO")
    flaky = flaky is not None and os.environ.get("NCCL_ALGO") == flaky
    step_s *= 0.7 if flaky else 1.0
    pid = os.getpid()
    pre = f"(skyrl_entrypoint pid={pid}) "

    def log(msg: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S") + ".000"
        print(f"{pre}\x1b[32m{stamp}\x1b[0m | INFO     | skyrl_train.trainer:train:209 - {msg}", flush=True)

    log(f"NCCL_ALGO={os.environ.get('NCCL_ALGO', '<unset>')} marker={os.environ.get('NCCL_TUNE_TRIAL')}")
    if cfg["trainer.mode"] == "bigline":
        blob = b"x" * (1 << 20)
        for _ in range(int(os.environ.get("TINY_BIGLINE_MB", "300"))):
            sys.stdout.buffer.write(blob)
        sys.stdout.buffer.flush()
    step = 0
    while True:
        step += 1
        log("Started: 'step'")
        log("Started: 'policy_train'")
        t0 = time.time()
        if cfg["trainer.mode"] == "crash" and step == 2:
            print(
                "RuntimeError: [/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
                "[127.0.0.1]:29500",
                file=sys.stderr,
                flush=True,
            )
            print("Segmentation fault (core dumped)", file=sys.stderr, flush=True)
            os.abort()
        if flaky and micro != 4:
            time.sleep(3600)
        if mem > 80:
            print(
                f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {mem - 78:.2f} GiB. GPU 0 has a total "
                f"capacity of 79.19 GiB of which 1.21 GiB is free.",
                file=sys.stderr,
                flush=True,
            )
            return 1
        stall = step == int(os.environ.get("TINY_STALL_STEP", "0"))
        planned = step_s * (2.0 if step == 1 else 3.0 if stall else 1.0)
        time.sleep(planned)
        dt = planned if os.environ.get("TINY_EXACT_TIMES") else time.time() - t0
        log(f"Finished: 'policy_train', time cost: {dt:.2f}s")
        print(
            f"(FSDPPolicyWorkerBase pid={pid}) rank 0 step {step} memory: {mem:.2f}GiB({mem / 80 * 100:.1f}%)",
            flush=True,
        )
        log(f"Finished: 'step', time cost: {dt:.2f}s")


if __name__ == "__main__":
    sys.exit(main())
