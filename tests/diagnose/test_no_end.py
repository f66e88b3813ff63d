"""Property: no log without positive evidence of its end is ``ok``.

Healthy logs in many trainers' shapes (Megatron, the Hugging Face Trainer, torchtitan, verl, SkyRL,
DeepSpeed, OpenRLHF, NeMo RL, Lightning, a plain script), with and without noise (NCCL INFO, vLLM's
engine lines, Ray and torchrun prefixes, colours, tqdm's carriage returns, wandb, blank lines,
interleaved ranks), cut at a random point (also inside a line): with no exit status they are
``no_end``, never ``ok``. The same logs with their trainer's end line, a launcher's report of a
clean exit or an exit status 0 are ``ok``: the generator is not what makes the property hold."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from nccl_tune.diagnose.verdict import classify_log
from nccl_tune.failure import FailureClass as F

CASES = 120
E = "\x1b"


def _megatron(rnd: random.Random, i: int) -> str:
    return (
        f" [2026-02-11 17:{i % 60:02d}:{rnd.randrange(60):02d}] iteration {i * 10:8d}/  500000 | consumed samples: "
        f"{i * 5120:12d} | elapsed time per iteration (ms): {rnd.uniform(900, 12000):.1f} | learning rate: "
        f"{rnd.uniform(1e-6, 3e-4):.6E} | global batch size:   512 | lm loss: {rnd.uniform(1, 9):.6E} | loss scale: 1.0 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |"
    )


def _hf(rnd: random.Random, i: int) -> str:
    if rnd.random() < 0.5:
        bar = "".join(
            f"\r {s * 100 // 900:2d}%|{'█' * (s // 90):<10}| {s}/900 [00:{s % 60:02d}<09:00,  1.{s % 9}1it/s]"
            for s in range(i, i + 3)
        )
        return bar
    return f"{{'loss': {rnd.uniform(0.1, 2):.4f}, 'grad_norm': {rnd.random():.4f}, 'learning_rate': 2e-05, 'epoch': {i / 100:.2f}}}"


def _torchtitan(rnd: random.Random, i: int) -> str:
    return (
        f"[rank{rnd.randrange(8)}]:[titan] 2026-02-13 21:02:44,101 - root - INFO - {E}[31mstep: {i:4d}  {E}[32mloss: "
        f"{rnd.uniform(2, 10):7.4f}  {E}[33mmemory: 61.47GiB(64.71%)  {E}[34mtps: 6,{rnd.randrange(1000):03d}  {E}[39m"
    )


def _verl(rnd: random.Random, i: int) -> str:
    return (
        f"{E}[36m(TaskRunner pid=2291){E}[0m step:{i} - actor/pg_loss:{rnd.uniform(-0.01, 0.01):.4f} - "
        f"perf/max_memory_allocated_gb:52.7 - timing_s/step:{rnd.uniform(50, 150):.1f} - perf/throughput:{rnd.uniform(900, 2000):.1f}"
    )


def _skyrl(rnd: random.Random, i: int) -> str:
    what = rnd.choice(
        [
            "Started: 'step'",
            "Started: 'generate'",
            f"Finished: 'generate', time cost: {rnd.uniform(100, 400):.2f}s",
            f"Finished: 'step', time cost: {rnd.uniform(300, 600):.2f}s",
        ]
    )
    return (
        f"{E}[36m(skyrl_entrypoint pid=40117){E}[0m {E}[32m2026-02-14 03:00:{i % 60:02d}.118{E}[0m | {E}[1mINFO    {E}[0m | "
        f"{E}[36mskyrl_train.trainer{E}[0m:{E}[36mtrain{E}[0m:{E}[36m228{E}[0m - {E}[1m{what}{E}[0m"
    )


def _deepspeed(rnd: random.Random, i: int) -> str:
    return (
        f"[2026-02-16 14:20:{i % 60:02d},114] [INFO] [timer.py:264:stop] epoch=0/micro_step={i}/global_step={i}, "
        f"RunningAvgSamplesPerSec={rnd.uniform(10, 90):.4f}, CurrSamplesPerSec={rnd.uniform(10, 90):.4f}, MemAllocated=14.21GB"
    )


def _openrlhf(rnd: random.Random, i: int) -> str:
    return (
        f"(PPOTrainer pid=6101) Global step {i}: {{'policy_loss': {rnd.random():.4f}, 'kl': {rnd.random() / 100:.5f}}}"
    )


def _nemo_rl(rnd: random.Random, i: int) -> str:
    return rnd.choice(
        [
            f"========================= Step {i}/500 =========================",
            f"  • Total step time: {rnd.uniform(50, 200):.2f}s",
            f"  • Training throughput: {rnd.uniform(500, 900):.1f} tokens/s",
        ]
    )


def _lightning(rnd: random.Random, i: int) -> str:
    return f"Epoch {i // 50}:  {i % 50 * 2:2d}%|{'█' * (i % 10)}| {i % 50 * 20}/1000 [00:{i % 60:02d}<01:37, 10.84it/s, v_num=7]"


def _plain(rnd: random.Random, i: int) -> str:
    return f"epoch {i // 100} batch {i % 100:4d} loss {rnd.uniform(0.1, 3):.4f} lr {rnd.uniform(1e-5, 1e-3):.2e} {rnd.randrange(300, 900)} img/s"


TRAINERS: dict[str, tuple[Callable[[random.Random, int], str], str]] = {
    "megatron": (_megatron, "[after training is done] datetime: 2026-02-12 01:02:03 "),
    "hf": (
        _hf,
        "{'train_runtime': 3601.2, 'train_samples_per_second': 14.2, 'train_steps_per_second': 0.278, 'train_loss': 1.05}",
    ),
    "torchtitan": (_torchtitan, "[rank0]:[titan] 2026-02-14 07:12:43,006 - root - INFO - Training completed"),
    "verl": (_verl, "(TaskRunner pid=2291) Final validation metrics: {'val-core/openai/gsm8k/reward/mean@1': 0.81}"),
    "skyrl": (
        _skyrl,
        "(skyrl_entrypoint pid=40117) 2026-02-14 05:00:00.118 | INFO | skyrl_train.trainer:train:300 - Training done!",
    ),
    "deepspeed": (
        _deepspeed,
        "[2026-02-16 14:41:12,660] [INFO] [launch.py:351:main] Process 61202 exits successfully.",
    ),
    "openrlhf": (
        _openrlhf,
        "\n------------------------------------------\nJob 'raysubmit_Qm2xd81FhVt4c7Ru' succeeded\n------------------------------------------",
    ),
    "nemo-rl": (_nemo_rl, "Max number of steps has been reached, stopping training early"),
    "lightning": (_lightning, "`Trainer.fit` stopped: `max_epochs=3` reached."),
    "plain": (
        _plain,
        "I0215 11:48:09.201000 7711 torch/distributed/elastic/agent/server/api.py:879] [default] worker group successfully finished. Waiting 300 seconds for other agents to finish.",
    ),
}


def _noise(rnd: random.Random) -> str:
    pid = rnd.randrange(1000, 99999)
    r = rnd.randrange(8)
    return rnd.choice(
        [
            f"gpu-{r}:{pid}:{pid + 7} [{r}] NCCL INFO Channel {rnd.randrange(32):02d}/0 : {r}[{r}] -> {(r + 1) % 8}[{(r + 1) % 8}] via P2P/CUMEM/read",
            f"gpu-{r}:{pid}:{pid + 7} [{r}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
            f"(WorkerDict pid={pid}) INFO 02-11 09:15:02 [model_runner.py:1562] Graph capturing finished in 9 secs, took 0.39 GiB",
            f"{E}[36m(AsyncVLLMInferenceEngine pid={pid}){E}[0m INFO 02-14 03:00:01 [loggers.py:116] Engine 000: Avg prompt throughput: 1412.6 tokens/s, Running: 256 reqs",
            f"[rank{r}]:[W214 03:00:01.000000000 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank {r}]  using GPU {r} to perform barrier as devices used by this process are currently unknown.",
            "wandb: Syncing run quiet-river-12",
            "Processed prompts: 100%|██████████| 256/256 [00:10<00:00, 25.12it/s, est. speed input: 2311.41 toks/s]",
            f"2026-02-14 03:00:{rnd.randrange(60):02d},001 - INFO - data: shard {rnd.randrange(999)} opened",
            "",
        ]
    )


def healthy(rnd: random.Random, trainer: str, noisy: bool) -> list[str]:
    make, _ = TRAINERS[trainer]
    lines: list[str] = []
    for i in range(1, rnd.randrange(2, 300)):
        lines.append(make(rnd, i))
        while noisy and rnd.random() < 0.4:
            lines.append(_noise(rnd))
    return lines


def cut(rnd: random.Random, lines: list[str]) -> list[str]:
    """The log cut at a random point: between lines, or inside the last line kept."""
    kept = lines[: rnd.randrange(1, len(lines) + 1)]
    if kept and rnd.random() < 0.3 and len(kept[-1]) > 2:
        kept[-1] = kept[-1][: rnd.randrange(1, len(kept[-1]))]
    return kept


def _case(seed: int) -> tuple[random.Random, str, bool]:
    rnd = random.Random(seed)
    return rnd, rnd.choice(sorted(TRAINERS)), rnd.random() < 0.6


@pytest.mark.parametrize("seed", range(CASES))
def test_a_healthy_log_cut_anywhere_without_an_end_is_never_ok(seed: int) -> None:
    rnd, trainer, noisy = _case(seed)
    lines = cut(rnd, healthy(rnd, trainer, noisy))
    v = classify_log(lines)
    assert v.failure_class is F.NO_END, (trainer, [str(e) for e in v.evidence])
    assert v.evidence and "sacct" in v.advice


@pytest.mark.parametrize("seed", range(CASES))
def test_the_same_log_with_an_end_line_or_a_clean_exit_status_is_ok(seed: int) -> None:
    rnd, trainer, noisy = _case(seed)
    lines = cut(rnd, healthy(rnd, trainer, noisy))
    if lines and lines[-1]:
        lines[-1] += "\n"  # the cut line ends where the log went on
    assert classify_log(lines, exit_code=0).ok
    v = classify_log([*lines, *TRAINERS[trainer][1].split("\n")])
    assert v.ok, (trainer, [str(e) for e in v.evidence])
