"""A user's training command for one landscape of ``shapes.py``: it prints what its trainer would.

    LANDSCAPE_SEED=3 python benchmarks/landscapes/trainer.py offload-trap --micro-batch 16 --offload-optimizer

The config is the command line (``--name-with-dashes VALUE``, booleans as switches) and, for the
NCCL variables, the environment; ``LANDSCAPE_SEED`` picks the instance. No GPU is used: the step
times, peaks and failures are the instance's (``shapes.py``), printed in the format of the trainer
the landscape stands for, in real time ``TIME_SCALE`` times the modelled one (a start-up, then
each step's time):

- ``offload-trap``: torchtitan's metrics line (``step: 3  loss: ...  memory: 61.25GiB(77.43%)  tps: ...``);
- ``pairs``: the user's own line (``[train] step 3/20 | loss 2.31 | step_time 2.345s | peak_mem 41.2GiB``);
- ``flat`` and ``pipeline``: Megatron-LM's ``training_log`` line and ``report_memory`` after the first
  iteration;
- ``minefield`` and ``interior``: a ``logging`` line per step (``2026-12-02 08:01:02,345 INFO iter=3
  time_ms=812.4 ...``); ``interior``'s booleans take a value (``--compile true``);
- ``zero-sft``: Hugging Face Trainer's bar on stderr, redrawn with carriage returns, and its log dict
  per step on stdout (``logging_steps=1``), no memory lines; its flags are spelled as
  ``HfArgumentParser`` takes them (``--per_device_train_batch_size 4 --gradient_checkpointing false``);
- ``rl-colocate``: verl's console line per step behind Ray's prefix (``(TaskRunner pid=2177) step:3 -
  ... - perf/max_memory_reserved_gb:np.float64(41.2) - ... - perf/throughput:np.float64(1234.5)``),
  the actor's peak only, and ``Final validation metrics:`` at the end; its config is Hydra overrides
  (``actor_rollout_ref.rollout.gpu_memory_utilization=0.7``).
- ``two-node``: DeepSpeed's engine line per step (``[Rank 0] step=3, skipped=0, lr=...``) and its
  throughput timer's from step 3 (``epoch=0/micro_step=96/global_step=3, ... CurrSamplesPerSec=...,
  MemAllocated=...GB, MaxMemAllocated=...GB``), the allocator's peak only.

Under a fake NVML (``NCCL_TUNE_FAKE_NVML``, ``landscapes.py`` unless ``--blind``) the command also holds its
device peak on every GPU while it runs, as NVML would read it on a node (``hold_device_memory``).

Failures are printed as trainers print them: a CUDA out-of-memory traceback at the end of the step
that runs out (exit 1), a silent hang from the failing step on (the process sleeps until it is
stopped), a CUDA error traceback (exit 1), and a refusal of the batch sizes before the first step
(exit 1). Each step's time carries noise (1.5%; ``flat``: 5%, a first step three times as long and
one step in ten twice as long), drawn from the seed, the config and the trial (``NCCL_TUNE_TRIAL``),
so re-runs differ.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shapes import (  # noqa: E402
    FIRST_STEP_FACTOR,
    FIRST_STEP_SLOWER,
    LANDSCAPES,
    REFUSAL_S,
    SEED_ENV,
    STARTUP_S,
    STEP_NOISE_FRAC,
    STRAGGLER_EVERY,
    TIME_SCALE,
    USABLE_GIB,
    Landscape,
    Outcome,
)

FAKE_NVML_ENV = "NCCL_TUNE_FAKE_NVML"
"""The fake NVML's state file (``nccl_tune.gpu_fake``); the command stays free of the tool's package."""
START = time.monotonic()


HF_FLAGS = {"zero-sft"}
"""Landscapes whose flags keep their underscores and take booleans as values (``HfArgumentParser``)."""
VALUE_BOOLS = {"zero-sft", "interior"}
"""Landscapes whose boolean flags take a value (``--compile true``) rather than being bare switches."""
MEGATRON_LOG = {"flat", "pipeline"}
"""Landscapes that print Megatron-LM's ``training_log`` line and its memory report after the first step."""
HYDRA = {"rl-colocate"}
"""Landscapes configured by Hydra overrides (``key=value``; ``trainer.total_training_steps`` ends the job)."""
DEEPSPEED_LOG = {"two-node"}
"""Landscapes that print DeepSpeed's engine line per step and its throughput timer's from step 3
(``steps_per_print`` 1), whose ``MaxMemAllocated`` is the printed peak."""


def flag(name: str, ls: Landscape) -> str:
    return "--" + (name if ls.name in HF_FLAGS else name.replace("_", "-"))


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text!r}")


def parse(argv: list[str]) -> tuple[Landscape, dict[str, Any], int]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("landscape", choices=sorted(LANDSCAPES))
    p.add_argument(
        "--max-steps", "--max_steps", dest="max_steps", type=int, default=20, help="steps before the job ends"
    )
    known, rest = p.parse_known_args(argv)
    ls = LANDSCAPES[known.landscape]
    if ls.name in HYDRA:
        return hydra_parse(ls, rest, p, known.max_steps)
    q = argparse.ArgumentParser(prog=f"trainer.py {ls.name}")
    for name, values in ls.params.items():
        if name.isupper():
            continue
        if isinstance(values[0], bool) and ls.name in VALUE_BOOLS:
            q.add_argument(flag(name, ls), dest=name, type=_bool, default=ls.default[name])
        elif isinstance(values[0], bool):
            q.add_argument(flag(name, ls), dest=name, action="store_true", default=ls.default[name])
        else:
            q.add_argument(flag(name, ls), dest=name, type=type(values[0]), default=ls.default[name])
    args = {**vars(q.parse_args(rest)), **env_args(ls)}
    for name, values in ls.params.items():
        if args[name] not in values:
            q.error(f"{flag(name, ls)} {args[name]!r}: not one of {list(values)}")
    return ls, args, known.max_steps


def hydra_parse(
    ls: Landscape, argv: list[str], p: argparse.ArgumentParser, steps: int
) -> tuple[Landscape, dict[str, Any], int]:
    """A Hydra job's overrides: the landscape's keys, ``trainer.total_training_steps``, and any other
    ``trainer.*`` key (taken and ignored, as the job's own config would)."""
    args = dict(ls.default)
    for token in argv:
        key, sep, text = token.partition("=")
        if not sep:
            p.error(f"{token!r}: not a key=value override")
        if key == "trainer.total_training_steps":
            steps = int(text)
        elif key in ls.params:
            kind = type(ls.params[key][0])
            args[key] = _bool(text) if kind is bool else kind(text)
            if args[key] not in ls.params[key]:
                p.error(f"{key}={text}: not one of {list(ls.params[key])}")
        elif not key.startswith("trainer."):
            p.error(f"Could not override '{key}': key not in the config")
    return ls, {**args, **env_args(ls)}, steps


def env_args(ls: Landscape) -> dict[str, Any]:
    """The NCCL variables of the config (the upper-case names), from the environment or their defaults."""
    return {
        name: ls.default[name] if os.environ.get(name) is None else type(values[0])(os.environ[name])
        for name, values in ls.params.items()
        if name.isupper()
    }


def step_times(ls: Landscape, outcome: Outcome, rng: random.Random, steps: int) -> list[float]:
    """Real seconds of each step (the modelled ones, with noise, times ``TIME_SCALE``)."""
    noisy = ls.name == "flat"
    spread = STEP_NOISE_FRAC if noisy else 0.015
    times = []
    for i in range(1, steps + 1):
        t = outcome.step_s * max(0.5, rng.gauss(1.0, spread))
        if i == 1:
            t *= FIRST_STEP_FACTOR if noisy else FIRST_STEP_SLOWER
        elif noisy and rng.randrange(STRAGGLER_EVERY) == 0:
            t *= 2.0
        times.append(t * TIME_SCALE)
    return times


def line(
    ls: Landscape, step: int, steps: int, seconds: float, peak_gib: float, rng: random.Random, accumulation: int = 1
) -> str:
    """What the trainer prints after ``step``; ``accumulation``: micro-batches per step."""
    loss = 10.5 - 0.05 * step + rng.uniform(-0.02, 0.02)
    if ls.name == "offload-trap":
        tps = ls.samples_per_step * ls.tokens_per_sample / ls.gpus / seconds
        return (
            f"[rank0]:[titan] {_stamp()} - root - INFO - step: {step:2d}  loss: {loss:7.4f}  grad_norm: "
            f"{rng.uniform(0.9, 1.3):7.4f}  memory: {peak_gib:5.2f}GiB({100 * peak_gib / USABLE_GIB:.2f}%)  "
            f"tps: {tps:,.0f}  tflops: {tps * 0.05:,.2f}  mfu: {tps * 0.005:.2f}%"
        )
    if ls.name == "pairs":
        return f"[train] step {step}/{steps} | loss {loss:.4f} | step_time {seconds:.3f}s | peak_mem {peak_gib:.1f}GiB"
    if ls.name in MEGATRON_LOG:
        return (
            f" [{_stamp()}] iteration {step:8d}/{steps:8d} | consumed samples: {step * ls.samples_per_step:12d} | "
            f"elapsed time per iteration (ms): {seconds * 1000:.1f} | learning rate: 1.000000E-05 | "
            f"global batch size: {ls.samples_per_step:5d} | lm loss: {loss:.6E} | loss scale: 1.0 | "
            "number of skipped iterations:   0 | number of nan iterations:   0 |"
        )
    if ls.name in HYDRA:  # verl's console logger, behind Ray's prefix
        tokens = ls.samples_per_step * ls.tokens_per_sample
        f = "np.float64({:.3f})".format
        return (
            f"(TaskRunner pid=2177) step:{step} - training/global_step:{step} - training/epoch:0 - "
            f"actor/pg_loss:{f(loss / 100)} - actor/entropy:{f(rng.uniform(0.4, 0.6))} - "
            f"perf/mfu/actor:{f(rng.uniform(0.3, 0.4))} - perf/max_memory_allocated_gb:{f(peak_gib * 0.93)} - "
            f"perf/max_memory_reserved_gb:{f(peak_gib)} - perf/cpu_memory_used_gb:{f(rng.uniform(180, 200))} - "
            f"timing_s/gen:{f(seconds * 0.45)} - timing_s/step:{f(seconds)} - perf/total_num_tokens:{tokens} - "
            f"perf/time_per_step:{f(seconds)} - perf/throughput:{f(tokens / seconds / ls.gpus)}"
        )
    if ls.name in DEEPSPEED_LOG:
        engine = f"[{_stamp()}] [INFO] [logging.py:128:log_dist] [Rank 0] step={step}, skipped=0, lr=[3e-05], mom=[(0.9, 0.95)]"
        if step < 3:  # the throughput timer reports from its third step on
            return engine
        return (
            f"{engine}\n[{_stamp()}] [INFO] [timer.py:264:stop] epoch=0/micro_step={step * accumulation}/"
            f"global_step={step}, RunningAvgSamplesPerSec={ls.samples_per_step / seconds * rng.uniform(0.99, 1.01):.3f}, "
            f"CurrSamplesPerSec={ls.samples_per_step / seconds:.3f}, MemAllocated={peak_gib * 0.6:.2f}GB, "
            f"MaxMemAllocated={peak_gib:.2f}GB"
        )
    if ls.name == "zero-sft":
        return f"{{'loss': '{loss:.4g}', 'grad_norm': '{rng.uniform(0.9, 1.3):.4g}', 'learning_rate': '2e-05', 'epoch': '{step / 1000:.4g}'}}"
    return f"{_stamp()} INFO train: iter={step} time_ms={seconds * 1000:.1f} mem_gib={peak_gib:.2f} loss={loss:.4f}"


def accumulation(ls: Landscape, config: Mapping[str, Any]) -> int:
    """Micro-batches per optimizer step, where a landscape's micro-batch is a parameter."""
    micro = config.get("micro_batch")
    return max(1, ls.samples_per_step // ls.gpus // micro) if isinstance(micro, int) else 1


def hf_bar(step: int, steps: int, elapsed_s: float) -> str:
    """Hugging Face Trainer's tqdm bar after ``step`` of ``steps``."""
    pct = int(100 * step / steps)
    filled = "\u2588" * (pct // 10)
    if step == 0:  # no rate yet
        return f"{pct:3d}%|{filled:<10}| 0/{steps} [00:00<?, ?it/s]"
    rate = f"{step / elapsed_s:5.2f}it/s" if step / elapsed_s >= 1 else f"{elapsed_s / step:5.2f}s/it"
    left = (steps - step) * elapsed_s / step
    return f"{pct:3d}%|{filled:<10}| {step}/{steps} [{_clock(elapsed_s)}<{_clock(left)}, {rate}]"


def _clock(seconds: float) -> str:
    return f"{int(seconds) // 60:02d}:{int(seconds) % 60:02d}"


def _stamp() -> str:
    return datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]


def fail(outcome: Outcome) -> None:
    if outcome.kind == "hang":
        time.sleep(3600)  # a collective that never completes: the job prints nothing more
    print("Traceback (most recent call last):", flush=True)
    print('  File "train.py", line 212, in <module>', flush=True)
    for text in outcome.message.splitlines():
        print(text, flush=True)
    sys.exit(1)


def main(argv: list[str]) -> None:
    ls, config, steps = parse(argv)
    seed = int(os.environ.get(SEED_ENV, "0"))
    outcome = ls.instance(seed).outcome(config)
    trial = os.environ.get("NCCL_TUNE_TRIAL", "")
    rng = random.Random(f"{seed}:{sorted(config.items())}:{trial}")
    print(f"{_stamp()} INFO {ls.name}: config {_shown(config)}", flush=True)
    if outcome.kind == "refused":
        time.sleep(REFUSAL_S * TIME_SCALE)
        fail(outcome)
    nccl_report(config)
    hold_device_memory(outcome)
    time.sleep(max(0.0, STARTUP_S * TIME_SCALE - (time.monotonic() - START)))
    hf = ls.name in HF_FLAGS
    began = time.monotonic()
    if hf:
        print(f"\r{hf_bar(0, steps, 0.0)}", end="", file=sys.stderr, flush=True)
    for step, seconds in enumerate(step_times(ls, outcome, rng, steps), start=1):
        if outcome.kind != "ok" and step >= outcome.fail_step:
            if outcome.kind != "hang":
                time.sleep(seconds)  # the failing step runs to its failure, which the harness charges whole
            if hf:
                print(file=sys.stderr, flush=True)
            fail(outcome)
        time.sleep(seconds)
        if hf:
            print(f"\r{hf_bar(step, steps, time.monotonic() - began)}", end="", file=sys.stderr, flush=True)
        printed = outcome.printed_gib * rng.uniform(0.995, 1.0)
        print(line(ls, step, steps, seconds, printed, rng, accumulation(ls, config)), flush=True)
        if ls.name in MEGATRON_LOG and step == 1:
            print(_megatron_memory(outcome.peak_gib), flush=True)
    if hf:
        took = time.monotonic() - began
        print(file=sys.stderr, flush=True)
        print(
            f"{{'train_runtime': '{took:.4g}', 'train_samples_per_second': '{steps * ls.samples_per_step / took:.4g}', "
            f"'train_steps_per_second': '{steps / took:.4g}', 'train_loss': '10.2', 'epoch': '{steps / 1000:.4g}'}}",
            flush=True,
        )
        return
    if ls.name in HYDRA:
        print("(TaskRunner pid=2177) 'Final validation metrics: None'", flush=True)
    else:
        print("Training completed" if ls.name == "offload-trap" else f"{_stamp()} INFO training done", flush=True)


def hold_device_memory(outcome: Outcome) -> None:
    """What NVML would read of this run on every GPU, when the tool reads a fake NVML
    (``NCCL_TUNE_FAKE_NVML`` names its state file, which only this run writes while it runs): the
    step's peak from the start-up on (a run that runs out: what was in use when it did), as a
    process entry the reader drops once this process has exited."""
    path = os.environ.get(FAKE_NVML_ENV)
    if not path:
        return
    state = json.loads(Path(path).read_text())
    held = min(outcome.peak_gib, USABLE_GIB)
    for gpu in state["gpus"]:
        gpu["processes"] = [p for p in gpu.get("processes", []) if p["pid"] != os.getpid()]
        gpu["processes"].append({"pid": os.getpid(), "used_gib": round(held, 3)})
    tmp = Path(f"{path}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)  # readers never see half a file


def nccl_report(config: Mapping[str, Any]) -> None:
    """NCCL's own report of the variables it read, per rank, when its debug output asks for it."""
    if os.environ.get("NCCL_DEBUG") != "INFO" or "ENV" not in os.environ.get("NCCL_DEBUG_SUBSYS", ""):
        return
    pid = os.getpid()
    for rank in range(8):
        for name in sorted(n for n in config if n.startswith("NCCL_") and n in os.environ):
            value = os.environ[name]
            shown = f"{value}." if value.lstrip("-").isdigit() else value
            print(f"node-0:{pid + rank}:{pid + rank + 17} [{rank}] NCCL INFO {name} set by environment to {shown}")


def _megatron_memory(peak_gib: float) -> str:
    mib = peak_gib * 1024
    return (
        f"[Rank 0] (after 1 iterations) memory (MB) | allocated: {mib * 0.7:.1f} | max allocated: {mib * 0.9:.1f} | "
        f"reserved: {mib * 0.97:.1f} | max reserved: {mib:.1f}"
    )


def _shown(config: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


if __name__ == "__main__":
    main(sys.argv[1:])
