"""A small trainer stand-in for launcher tests: prints SkyRL-format progress lines and misbehaves
on request (hangs, crashes, floods, detached children that ignore SIGTERM, GPU memory held in a
fake NVML state file). Hydra-style ``key=value`` arguments (a tuner's overrides) are accepted and
echoed. Standard library only, so it starts fast."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

KNOWN_SECTIONS = ("trainer.", "generator.", "data.", "environment.")
ANSI = {"green": "\x1b[32m", "cyan": "\x1b[36m", "bold": "\x1b[1m", "reset": "\x1b[0m"}


def line(msg: str, args: argparse.Namespace, prefix: str = "skyrl_entrypoint") -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S") + ".123"
    if args.ansi:
        c = ANSI
        text = (
            f"{c['green']}{stamp}{c['reset']} | {c['bold']}INFO    {c['reset']} | "
            f"{c['cyan']}skyrl_train.trainer{c['reset']}:{c['cyan']}train{c['reset']}:{c['cyan']}209{c['reset']} - "
            f"{c['bold']}{msg}{c['reset']}"
        )
        head = f"{c['cyan']}({prefix} pid={os.getpid()}){c['reset']} " if args.ray_prefix else ""
    else:
        text = f"{stamp} | INFO     | skyrl_train.trainer:train:209 - {msg}"
        head = f"({prefix} pid={os.getpid()}) " if args.ray_prefix else ""
    sys.stdout.write(head + text + "\n")
    sys.stdout.flush()


DETACHED = r"""
import os, signal, sys, time
try:  # print before ignoring SIGTERM: the parent returns once SIGTERM is ignored, and its reader may be gone
    print(f"detached child {os.getpid()} ignores SIGTERM", flush=True)
except OSError:
    pass
signal.signal(signal.SIGTERM, signal.SIG_IGN)
while True:
    time.sleep(0.2)
"""


def ignores_sigterm(pid: int) -> bool:
    """True once ``pid`` has installed SIG_IGN for SIGTERM (read from /proc/<pid>/status)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for row in fh:
                if row.startswith("SigIgn:"):
                    return bool(int(row.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except OSError:
        pass
    return False


def detach(args: argparse.Namespace) -> int:
    """Start a child in a new session that ignores SIGTERM; return once it does."""
    child = subprocess.Popen([sys.executable, "-c", DETACHED], start_new_session=True)
    deadline = time.monotonic() + 30
    while not ignores_sigterm(child.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return child.pid


def hold_gpu(args: argparse.Namespace, pids: list[int]) -> None:
    """Register ``pids`` as holding GPU memory in the fake NVML state file."""
    with open(args.gpu_state) as fh:
        state = json.load(fh)
    for i, pid in enumerate(pids):
        gpu = state["gpus"][i % len(state["gpus"])]
        gpu.setdefault("processes", []).append({"pid": pid, "used_gib": args.gpu_gib})
    tmp = args.gpu_state + f".{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(state, fh)
    os.replace(tmp, args.gpu_state)


def count_launch() -> int | None:
    """With FAKE_TRAINER_COUNTER=<file>, the number of this launch (1, 2, ...) among all launches
    that used the file; FAKE_TRAINER_SLOW_LAUNCH=<n> makes the n-th launch slow to start."""
    path = os.environ.get("FAKE_TRAINER_COUNTER")
    if not path:
        return None
    import fcntl

    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        n = len(fh.read()) + 1
        fh.write("x")
    return n


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--step-s", type=float, default=0.2, help="wall seconds per step")
    p.add_argument("--phases", default="generate,policy_train", help="phases inside a step")
    p.add_argument("--no-step-start", action="store_true", help="end each step with a line, open none for it")
    p.add_argument("--startup-s", type=float, default=0.0, help="seconds before the first progress line")
    p.add_argument("--hang-at-step", type=int, default=None, help="stop printing inside this step (0-based)")
    p.add_argument("--crash-at-step", type=int, default=None)
    p.add_argument("--oom-at-step", type=int, default=None)
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--linger-s", type=float, default=0.0, help="stay alive this long after the last step")
    p.add_argument("--detach", type=int, default=0, help="spawn N detached children that ignore SIGTERM")
    p.add_argument("--ignore-term", action="store_true", help="this process ignores SIGTERM too")
    p.add_argument("--pidfile", default=None, help="write the pids of this process and its detached children")
    p.add_argument("--flood", type=int, default=0, help="NCCL INFO lines per step")
    p.add_argument("--memory", type=int, default=0, help="print a memory line for this many ranks per step")
    p.add_argument("--mem-gib", type=float, default=61.2)
    p.add_argument("--ansi", action="store_true")
    p.add_argument("--ray-prefix", action="store_true")
    p.add_argument("--gpu-state", default=None, help="fake NVML state file to register held memory in")
    p.add_argument("--gpu-gib", type=float, default=40.0)
    p.add_argument("--fr-dump", action="store_true", help="write a dump per rank to TORCH_FR_DUMP_TEMP_FILE on failure")
    p.add_argument("--no-done", action="store_true", help="do not print 'Training done!'")
    p.add_argument(
        "--oom-then-hang", action="store_true", help="after --oom-at-step, stay alive (the other ranks wait)"
    )
    p.add_argument("--print-env", default="", help="comma-separated variables to print as NAME=value")
    args, overrides = p.parse_known_args()
    bad = [o for o in overrides if "=" not in o or o.startswith("-")]
    if bad:
        p.error(f"unrecognized arguments: {' '.join(bad)}")
    for override in overrides:
        key, _, value = override.partition("=")
        if not key.startswith(KNOWN_SECTIONS):  # refused the way Hydra refuses a key not in the config
            sys.stderr.write(
                f"Could not override '{key}'.\nTo append to your config use +{key}={value}\n"
                f"Key '{key.split('.')[-1]}' is not in struct\n    full_key: {key}\n    object_type=dict\n\n"
                "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
            )
            return 1
    launch = count_launch()
    if launch is not None and launch == int(os.environ.get("FAKE_TRAINER_SLOW_LAUNCH", "0")):
        args.startup_s = float(os.environ.get("FAKE_TRAINER_SLOW_S", "120"))

    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    children = [detach(args) for _ in range(args.detach)]
    if args.pidfile:
        with open(args.pidfile + ".tmp", "w") as fh:
            json.dump({"main": os.getpid(), "detached": children}, fh)
        os.replace(args.pidfile + ".tmp", args.pidfile)
    if args.gpu_state:
        hold_gpu(args, [os.getpid()] + children)
    print(
        f"starting fake trainer pid={os.getpid()} marker={os.environ.get('NCCL_TUNE_TRIAL')} overrides={overrides}",
        flush=True,
    )
    for name in filter(None, args.print_env.split(",")):
        print(f"env {name}={os.environ.get(name, '<unset>')}", flush=True)
    time.sleep(args.startup_s)
    phases = [x for x in args.phases.split(",") if x]
    flood = (
        "gpu-node-3:{pid}:{pid} [0] NCCL INFO Channel 03/0 : 0[0] -> 1[1] via P2P/CUMEM/read "
        "comm 0x55d2c1a0 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0\n"
    ).format(pid=os.getpid())
    for step in range(args.steps):
        t_step = time.monotonic()
        if not args.no_step_start:
            line("Started: 'step'", args)
        for phase in phases:
            line(f"Started: '{phase}'", args)
            if args.hang_at_step == step:
                while True:
                    time.sleep(1)
            if args.crash_at_step == step:
                sys.stdout.write('Traceback (most recent call last):\n  File "trainer.py", line 9\n')
                sys.stdout.write("RuntimeError: something broke in the trainer\n")
                sys.stdout.flush()
                return 1
            if args.oom_at_step == step:
                sys.stdout.write(
                    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.50 GiB. GPU 3 has a total "
                    "capacity of 79.65 GiB of which 1.20 GiB is free.\n"
                )
                sys.stdout.flush()
                if args.fr_dump and os.environ.get("TORCH_FR_DUMP_TEMP_FILE"):
                    for rank in range(2):
                        with open(os.environ["TORCH_FR_DUMP_TEMP_FILE"] + str(rank), "wb") as fh:
                            fh.write(b"not a real pickle")
                while args.oom_then_hang:
                    time.sleep(1)
                return 1
            if args.flood:
                sys.stdout.write(flood * args.flood)
                sys.stdout.flush()
            t_phase = time.monotonic()
            time.sleep(args.step_s / max(1, len(phases)))
            line(f"Finished: '{phase}', time cost: {time.monotonic() - t_phase:.2f}s", args)
        while args.hang_at_step == step and not phases:  # with no phase open
            time.sleep(1)
        if not phases:
            time.sleep(args.step_s)
        for rank in range(args.memory):
            sys.stdout.write(
                f"rank {rank} step {step} memory: {args.mem_gib + rank:.2f}GiB({(args.mem_gib + rank) / 79.65 * 100:.1f}%)\n"
            )
        line(f"Finished: 'step', time cost: {time.monotonic() - t_step:.2f}s", args)
    if not args.no_done:
        line("Training done!", args)
    time.sleep(args.linger_s)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
