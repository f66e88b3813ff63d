"""Fake trainers that print what the real ones print (the formats of ``nccl_tune/presets.py``), with
sleep-based steps, for running ``nccl-tune run`` on each preset's output as a user would.

    python fake_trainers.py PRESET [--micro N]

A step takes ``FT_STEP_S / micro`` seconds (FT_STEP_S: default 0.6); the first (warm-up) step takes
twice that. Figures printed per step: ``TOKENS`` tokens and ``SAMPLES`` samples; the memory printed
is ``20 + 4 * micro`` GiB of an ``80`` GiB GPU. Under torchrun each rank prints what the real
trainer prints on that rank (most print on one rank only). Other knobs (environment):

- ``FT_STEPS``: stop (exit 0) after this many steps (default: run until stopped);
- ``FT_STARTUP_S``: print nothing for this long before the first line;
- ``FT_CRLF=1``: Windows line ends (``\\r\\n``) on every line;
- ``FT_LONG=N``: pad every step line with N characters of metrics (a very long line).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

TOKENS = 8192
SAMPLES = 16
TOTAL_GIB = 80.0
MAX_STEPS = 200


def env_float(name: str, default: float) -> float:
    """``float(os.environ[name])``, or ``default`` when unset."""
    return float(os.environ.get(name) or default)


RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
END = "\r\n" if os.environ.get("FT_CRLF") == "1" else "\n"
PAD = int(env_float("FT_LONG", 0))


def out(text: str, stream=None, end: str | None = None) -> None:
    """Write ``text`` and a line end (``FT_CRLF``) to ``stream`` (stdout), flushed."""
    stream = stream or sys.stdout
    stream.write(text + (END if end is None else end))
    stream.flush()


def padding() -> str:
    """Extra metrics that make a step line ``FT_LONG`` characters longer."""
    return "x" * PAD


def stamp(fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    return time.strftime(fmt)


def skyrl(step: int, dt: float, gib: float) -> None:
    """SkyRL: loguru lines behind Ray's coloured prefix; ``print_mem`` on a worker."""
    pre = f"\x1b[36m(skyrl_entrypoint pid={os.getpid()})\x1b[0m "

    def log(msg: str) -> None:
        out(f"{pre}{stamp()}.123 | INFO     | skyrl_train.trainer:train:209 - {msg}")

    log("Started: 'step'")
    log("Started: 'generate'")
    time.sleep(dt * 0.5)
    log(f"Finished: 'generate', time cost: {dt * 0.5:.2f}s")
    time.sleep(dt * 0.5)
    out(
        f"\x1b[36m(FSDPPolicyWorkerBase pid={os.getpid() + 1})\x1b[0m {stamp()}.456 | INFO     | "
        f"skyrl_train.utils.utils:print_mem:420 - after step, Allocated: {gib - 4:.2f} GiB, Reserved: {gib:.2f} GiB, "
        f"Free: {TOTAL_GIB - gib:.2f} GiB, Total: {TOTAL_GIB:.2f} GiB"
    )
    log(f"Finished: 'step', time cost: {dt:.2f}s{padding()}")


def torchtitan(step: int, dt: float, gib: float) -> None:
    """torchtitan's metrics line in colour, every rank through the ``[titan]`` logger (stderr). With
    ``FT_TEE_LAG=1``, one process stands for two ranks as ``torchrun --tee 3`` shows them: each line
    behind its ``[rankN]:`` prefix, rank 1's line one step behind rank 0's (the tailer reads each
    rank's file on its own clock)."""
    time.sleep(dt)
    if os.environ.get("FT_TEE_LAG") != "1":
        out(titan_line(step, dt, gib), sys.stderr)
        return
    out("[rank0]:" + titan_line(step, dt, gib), sys.stderr)
    if step > 1:
        out("[rank1]:" + titan_line(step - 1, dt * (2 if step == 2 else 1), gib), sys.stderr)


def titan_line(step: int, dt: float, gib: float) -> str:
    """torchtitan's line for ``step``, which took ``dt`` seconds."""
    red, green, orange, turq = "\x1b[31m", "\x1b[32m", "\x1b[38;2;255;165;0m", "\x1b[38;2;54;234;195m"
    blue, cyan, magenta, reset = "\x1b[34m", "\x1b[36m", "\x1b[35m", "\x1b[39m"
    tps = TOKENS / dt
    return (
        f"[titan] {stamp()},123 - root - INFO - {red}step: {step:2}  {green}loss: {8.0 - step * 0.01:8.5f}  "
        f"{orange}grad_norm: {1.2345:7.4f}  {turq}memory: {gib:5.2f}GiB({gib / TOTAL_GIB * 100:.2f}%)  "
        f"{blue}tps: {round(tps):,}  {cyan}tflops: {123.45:,.2f}  {magenta}mfu: {12.34:.2f}%{reset}{padding()}"
    )


def megatron(step: int, dt: float, gib: float) -> None:
    """Megatron's ``training_log`` (last rank) and ``report_memory`` (after the first step, per rank)."""
    time.sleep(dt)
    if RANK == WORLD - 1:
        out(
            f" [{stamp()}] iteration {step:8d}/{MAX_STEPS:8d} | consumed samples: {step * SAMPLES:12d} | "
            f"elapsed time per iteration (ms): {dt * 1000:.1f} | throughput per GPU (TFLOP/s/GPU): 123.4 | "
            f"learning rate: 1.000000E-04 | global batch size: {SAMPLES:5d} | lm loss: 7.123456E+00 | "
            f"loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | "
            f"number of nan iterations:   0 |{padding()}"
        )
    if step == 1:
        mib = gib * 1024
        out(
            f"[Rank {RANK}] (after {step} iterations) memory (MB) | allocated: {mib - 2048:.1f} | "
            f"max allocated: {mib - 1024:.1f} | reserved: {mib:.1f} | max reserved: {mib:.1f}"
        )


def deepspeed(step: int, dt: float, gib: float) -> None:
    """DeepSpeed's ``ThroughputTimer`` line on rank 0 (``steps_per_print: 1``)."""
    time.sleep(dt)
    if RANK == 0:
        rate = SAMPLES / dt
        out(
            f"[{stamp()},123] [INFO] [timer.py:264:stop] epoch=0/micro_step={step}/global_step={step}, "
            f"RunningAvgSamplesPerSec={rate:.6f}, CurrSamplesPerSec={rate:.6f}, MemAllocated={gib - 4:.2f}GB, "
            f"MaxMemAllocated={gib:.2f}GB{padding()}"
        )


def verl(step: int, dt: float, gib: float) -> None:
    """verl's console logger on the TaskRunner, values as numpy 2 prints them."""
    time.sleep(dt)
    out(
        f"(TaskRunner pid={os.getpid()}) step:{step} - training/global_step:{step} - actor/pg_loss:np.float64(0.01) - "
        f"perf/max_memory_allocated_gb:np.float64({gib - 4}) - perf/max_memory_reserved_gb:np.float64({gib}) - "
        f"timing_s/step:np.float64({dt:.3f}) - perf/throughput:np.float64({TOKENS / dt:.1f}){padding()}"
    )


def openrlhf(step: int, dt: float, gib: float) -> None:
    """OpenRLHF's PPO trainer: the step's dict with its total time."""
    time.sleep(dt)
    out(
        f"INFO {stamp('%m-%d %H:%M:%S')} ppo_trainer.py:512] \u2728 Global step {step}: {{'policy_loss': 0.01, "
        f"'reward': 0.5, 'timing/step_total': {dt}}}{padding()}"
    )


def nemo_rl(step: int, dt: float, gib: float) -> None:
    """NeMo RL's block per step (the step time line, then throughputs on lines of their own)."""
    out(f"\n{'=' * 25} Step {step}/{MAX_STEPS} {'=' * 25}")
    out("\u25b6 Preparing batch...")
    time.sleep(dt)
    out("\n\U0001f4ca Training Results:")
    out("  \u2022 Loss: 0.1234")
    out("\n\u23f1\ufe0f  Timing:")
    out(f"  \u2022 Total step time: {dt:.2f}s{padding()}")
    out(f"  \u2022 generation: {dt * 0.6:.2f}s (60.0%)")
    out("  \u2022 Training FLOPS: 12.34 TFLOPS (1.23 TFLOPS per rank)")
    out(f"  \u2022 Tokens per second per GPU: {TOKENS / dt:.2f}")


STEPPERS = {
    "skyrl": skyrl,
    "torchtitan": torchtitan,
    "megatron": megatron,
    "deepspeed": deepspeed,
    "verl": verl,
    "openrlhf": openrlhf,
    "nemo-rl": nemo_rl,
}

ENDINGS = {
    "skyrl": "Training done!",
    "torchtitan": "[titan] {stamp} - root - INFO - Training completed",
    "megatron": "[after training is done] datetime: {stamp} ",
    "verl": "(TaskRunner pid=1) Final validation metrics: {{'val-core/gsm8k/reward/mean@1': np.float64(0.5)}}",
    "nemo-rl": "Max number of steps has been reached, stopping training early",
}


def bar_trainer(preset: str, micro: int, steps: int | None, dt: float) -> None:
    """The Trainer's or Lightning's tqdm bar (real tqdm, ``\\r`` redraws) on rank 0, and the
    Trainer's log dicts (transformers 5 strings with ``FT_HF4=1`` unset)."""
    from tqdm.auto import tqdm

    v4 = os.environ.get("FT_HF4") == "1"
    total = steps or MAX_STEPS
    if preset == "lightning":
        bar = tqdm(
            total=total,
            desc="Epoch 0",
            file=sys.stdout,
            dynamic_ncols=True,
            smoothing=0,
            disable=RANK != 0,
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]",
        )
        bar.set_postfix(v_num=0)
    else:
        bar = tqdm(total=total, dynamic_ncols=True, disable=RANK != 0)
    start = time.time()
    for step in range(1, total + 1):
        time.sleep(dt * (2 if step == 1 else 1))
        bar.update(1)
        if preset == "hf-trainer" and RANK == 0 and step % 2 == 0:
            logs = {"loss": 2.3125, "grad_norm": 1.0625, "learning_rate": 4.5e-05, "epoch": 0.1}
            bar.write(str(logs if v4 else {k: format(v, ".4g") for k, v in logs.items()}))
    bar.close()
    if preset == "hf-trainer" and RANK == 0:
        run = time.time() - start
        done = {
            "train_runtime": run,
            "train_samples_per_second": total * SAMPLES / run,
            "train_steps_per_second": total / run,
            "train_loss": 2.3,
            "epoch": 1.0,
        }
        out(str(done if v4 else {k: format(v, ".4g") for k, v in done.items()}))
    if preset == "lightning" and RANK == 0:
        out(f"`Trainer.fit` stopped: `max_steps={total}` reached.", sys.stderr)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("preset")
    p.add_argument("--micro", type=int, default=1)
    args = p.parse_args()
    time.sleep(env_float("FT_STARTUP_S", 0))
    steps = int(env_float("FT_STEPS", 0)) or None
    dt = env_float("FT_STEP_S", 0.6) / args.micro
    gib = 20 + 4 * args.micro
    if args.preset in ("hf-trainer", "lightning"):
        bar_trainer(args.preset, args.micro, steps, dt)
        return 0
    stepper = STEPPERS[args.preset]
    step = 0
    while steps is None or step < steps:
        step += 1
        stepper(step, dt * (2 if step == 1 else 1), gib)
    if args.preset in ENDINGS and RANK == 0:
        out(ENDINGS[args.preset].format(stamp=stamp()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
