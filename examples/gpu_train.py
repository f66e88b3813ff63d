"""A small transformer trained on random tokens: a real CUDA job on NCCL to tune (gloo on a CPU).

    torchrun --standalone --nproc-per-node 1 examples/gpu_train.py --micro-batch-size 4 --seq-len 2048
    nccl-tune run --space examples/gpu_train.yaml -- torchrun --standalone --nproc-per-node 1 examples/gpu_train.py

A decoder-only transformer (pre-norm blocks of causal self-attention and a GELU MLP, no position
embedding: the causal mask orders the tokens) built from a config (``--model``) with random
weights: nothing is downloaded. ``auto`` picks ``1b`` on a GPU and ``tiny`` on a CPU. Each step
trains one micro-batch of ``--micro-batch-size`` sequences of ``--seq-len`` random tokens per rank:
forward and backward (under bf16 autocast on a GPU), DistributedDataParallel's gradient all-reduce
(NCCL on a GPU, gloo on a CPU), an AdamW step, and the loss summed over the ranks. Rank 0 prints
torchtitan's metrics line after every step and its end line after the last::

    step:  3  loss: 10.5312  grad_norm:  1.0938  memory: 61.27GiB(43.95%)  tps: 98,304  tflops: 512.31
    Training completed

``memory`` is ``torch.cuda.max_memory_reserved()`` in GiB and as a share of the device's memory, as
torchtitan prints it; on a CPU there is no device memory and the field is left out. ``tps`` is
tokens per second per rank, ``tflops`` the model's FLOPs per second per rank.

Memory, ``1b`` (0.94 B parameters: fp32 weights and gradients hold 7 GiB from the start, AdamW's
two moments 7 GiB more from the first optimizer step on): each token of a micro-batch keeps about
1.5 MiB of activations for backward without checkpointing and about 0.3 MiB with
``--activation-checkpointing`` (each block's input only, the block recomputed in backward), and the
loss adds about 0.25 MiB per token while it runs (estimates from the tensors autograd saves,
counted on a CPU). On a 140 GiB H200, 131,072 tokens (32 x 4096) without checkpointing need well
over the GPU and run out of memory in the first forward, seconds after start-up; 65,536 tokens come
near the wall; with checkpointing 131,072 tokens fit.

``--stall-at-step N`` makes rank 0 sleep ``--stall-s`` seconds inside step N, after its backward and
before the optimizer step, holding its memory: a stalled rank, for a tuner's hang detection.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.checkpoint import checkpoint

GIB = float(1 << 30)


@dataclass(frozen=True)
class ModelConfig:
    """The shape of the transformer."""

    dim: int
    """Width of the residual stream."""
    layers: int
    """Transformer blocks."""
    heads: int
    """Attention heads (``dim`` must divide by it)."""
    vocab: int
    """Vocabulary size: the embedding's rows and the output head's columns."""
    ffn_mult: int = 4
    """Width of the MLP's hidden layer, as a multiple of ``dim``."""

    def parameters(self) -> int:
        """Parameters of the model (embedding and head untied, norms included)."""
        block = 4 * self.dim * self.dim + 2 * self.ffn_mult * self.dim * self.dim + 2 * self.dim
        return self.layers * block + 2 * self.vocab * self.dim + self.dim

    def flops_per_token(self, seq_len: int) -> float:
        """FLOPs of forward and backward per token: 6 per weight, and the causal attention's
        score and value products (half of a full square)."""
        return 6.0 * self.parameters() + 6.0 * self.layers * self.dim * seq_len


MODELS = {
    "tiny": ModelConfig(dim=64, layers=2, heads=4, vocab=256),
    "1b": ModelConfig(dim=2048, layers=16, heads=16, vocab=32768),
}
"""The configs ``--model`` names: ``tiny`` runs a step in milliseconds on a CPU; ``1b`` fills an
H200 with a micro-batch of tens of thousands of tokens."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--micro-batch-size", type=int, default=2, help="sequences per rank per step")
    p.add_argument("--seq-len", type=int, default=1024, help="tokens per sequence")
    p.add_argument(
        "--activation-checkpointing", action="store_true", help="recompute each block's activations in backward"
    )
    p.add_argument("--steps", type=int, default=200, help="optimizer steps before the job ends")
    p.add_argument(
        "--model", choices=("auto", *MODELS), default="auto", help="model config: auto is 1b on a GPU, tiny on a CPU"
    )
    p.add_argument("--lr", type=float, default=3e-4, help="AdamW learning rate")
    p.add_argument("--stall-at-step", type=int, default=0, help="rank 0 sleeps inside this step (0: never)")
    p.add_argument("--stall-s", type=float, default=3600.0, help="how long the stalled step sleeps")
    args = p.parse_args(argv)
    for name in ("micro_batch_size", "seq_len", "steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, not {getattr(args, name)}")
    return args


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.out = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.norm2 = nn.RMSNorm(cfg.dim)
        self.up = nn.Linear(cfg.dim, cfg.ffn_mult * cfg.dim, bias=False)
        self.down = nn.Linear(cfg.ffn_mult * cfg.dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, checkpointing: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.RMSNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)
        self.checkpointing = checkpointing

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointing else block(x)
        return self.head(self.norm(x))


def step_line(
    step: int, loss: float, grad_norm: float, tokens_per_s: float, tflops: float, memory: tuple[float, float] | None
) -> str:
    """torchtitan's metrics line; ``memory``: (max reserved GiB, its percentage of the device), or
    None on a CPU."""
    mem = f"  memory: {memory[0]:5.2f}GiB({memory[1]:.2f}%)" if memory is not None else ""
    return (
        f"step: {step:2}  loss: {loss:7.4f}  grad_norm: {grad_norm:7.4f}{mem}"
        f"  tps: {round(tokens_per_s):,}  tflops: {tflops:,.2f}"
    )


def device_memory(device: torch.device) -> tuple[float, float] | None:
    """(``max_memory_reserved`` in GiB, its percentage of the device's memory) on a GPU, else None."""
    if device.type != "cuda":
        return None
    reserved = torch.cuda.max_memory_reserved(device)
    total = torch.cuda.get_device_properties(device).total_memory
    return reserved / GIB, 100.0 * reserved / total


def setup() -> tuple[torch.device, int, int]:
    """The process group (NCCL with this rank's GPU, else gloo) and (device, rank, world size)."""
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)  # the communicator comes up now, not at the first collective
    else:
        device = torch.device("cpu")
        # no torch.set_num_threads here: with it, the CPU build aborted at exit now and then, after the
        # last line ("terminate called without an active exception", SIGABRT; 1-3 runs in 40, 0 without)
        dist.init_process_group("gloo")
    return device, dist.get_rank(), dist.get_world_size()


def describe(cfg: ModelConfig, name: str, args: argparse.Namespace, device: torch.device, world: int) -> str:
    where = "cpu (gloo)"
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        where = f"{device} {props.name} ({props.total_memory / GIB:.1f} GiB, nccl)"
    ckpt = "on" if args.activation_checkpointing else "off"
    return (
        f"model {name}: {cfg.parameters() / 1e9:.2f} B parameters, micro-batch {args.micro_batch_size} x "
        f"{args.seq_len} tokens, activation checkpointing {ckpt}, {world} rank(s) on {where}"
    )


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device, rank, world = setup()
    name = args.model if args.model != "auto" else ("1b" if device.type == "cuda" else "tiny")
    cfg = MODELS[name]
    if rank == 0:
        print(describe(cfg, name, args, device, world), flush=True)
    torch.manual_seed(0)
    with device:  # weights made where they live: a GPU initialises a billion parameters in milliseconds
        model = Transformer(cfg, args.activation_checkpointing)
    ddp = DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, gradient_as_bucket_view=True
    )
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr)
    gen = torch.Generator(device=device).manual_seed(1000 + rank)
    autocast = torch.autocast("cuda", torch.bfloat16, enabled=device.type == "cuda")
    flops_per_token = cfg.flops_per_token(args.seq_len)
    tokens = args.micro_batch_size * args.seq_len
    for step in range(1, args.steps + 1):
        t0 = time.perf_counter()
        batch = torch.randint(0, cfg.vocab, (args.micro_batch_size, args.seq_len + 1), device=device, generator=gen)
        with autocast:
            logits = ddp(batch[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, cfg.vocab), batch[:, 1:].reshape(-1))
        del logits
        loss.backward()
        if step == args.stall_at_step and rank == 0:
            stall(args.stall_s)
        grad_norm = float(nn.utils.clip_grad_norm_(ddp.parameters(), 1.0))
        opt.step()
        opt.zero_grad(set_to_none=True)
        total = loss.detach().clone()
        dist.all_reduce(total)  # every rank's loss, as trainers log it (and a collective on every step)
        mean_loss = float(total) / world
        seconds = time.perf_counter() - t0
        if rank == 0:
            rate = tokens / seconds
            tflops = rate * flops_per_token / 1e12
            print(step_line(step, mean_loss, grad_norm, rate, tflops, device_memory(device)), flush=True)
        if not math.isfinite(mean_loss):
            raise FloatingPointError(f"loss is {mean_loss} at step {step}")
    if rank == 0:
        print("Training completed", flush=True)
    dist.destroy_process_group()


def stall(seconds: float) -> None:
    """Sleep inside the step, as a rank stuck in data loading or a deadlock would sit."""
    print(f"rank 0 stalls for {seconds:g} s inside this step (--stall-at-step)", flush=True)
    time.sleep(seconds)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
    if not torch.cuda.is_available():
        # torch's CPU build aborts now and then as the interpreter tears down after a gloo group
        # ("terminate called without an active exception", SIGABRT after the last line: once in a
        # CI run of the torchrun tests, 0 in 32 runs here); the job's work and output are done,
        # so the process leaves without the teardown
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
