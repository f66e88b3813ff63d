"""A small real data-parallel training job for CPUs: run it with torchrun (gloo), tune it with nccl-tune.

    torchrun --standalone --nproc-per-node 2 examples/ddp_train.py --batch-size 2 --grad-accum 8
    nccl-tune run --space examples/ddp_train.yaml -- torchrun --standalone --nproc-per-node 2 examples/ddp_train.py

A next-token MLP language model on random tokens, wrapped in DistributedDataParallel over gloo.
Each step runs ``--grad-accum`` micro-batches of ``--batch-size`` sequences of ``--seq-len`` tokens
per rank (gradients all-reduced once per step), then an optimizer step. Rank 0 prints Hugging Face
Trainer-style log dicts (``{'loss': ..., 'step': N, 'train_samples_per_second': ...}``) and, at the
end, the Trainer's summary dict. Speed depends on the flags for real: small micro-batches pay the
per-micro-batch overhead many times, ``--gradient-checkpointing`` recomputes activations.

Device memory does not exist on a CPU, so the job stands one in: the bytes autograd really saves for
backward are counted during the first forward, and above ``--memory-limit-mb`` the job stops with
``torch.OutOfMemoryError`` as a GPU would (the message says it is this example's limit).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.checkpoint import checkpoint


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--batch-size", type=int, default=2, help="sequences per rank per forward/backward (micro-batch)")
    p.add_argument("--grad-accum", type=int, default=8, help="micro-batches per optimizer step")
    p.add_argument("--seq-len", type=int, default=32, help="tokens per sequence")
    p.add_argument("--hidden", type=int, default=64, help="model width")
    p.add_argument("--layers", type=int, default=4, help="MLP blocks")
    p.add_argument("--vocab", type=int, default=512, help="vocabulary size")
    p.add_argument(
        "--gradient-checkpointing", action="store_true", help="recompute each block's activations in backward"
    )
    p.add_argument("--max-steps", type=int, default=200, help="optimizer steps before the job ends")
    p.add_argument("--lr", type=float, default=1e-3, help="learning rate")
    p.add_argument(
        "--memory-limit-mb", type=float, default=4.0, help="stand-in for device memory: saved activations allowed"
    )
    return p.parse_args()


class Block(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(hidden, 4 * hidden)
        self.down = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(x)))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, hidden: int, layers: int, checkpointing: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden) for _ in range(layers))
        self.head = nn.Linear(hidden, vocab)
        self.checkpointing = checkpointing

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointing else block(x)
        return self.head(x)


def saved_bytes(model: nn.Module, tokens: torch.Tensor) -> int:
    """Bytes autograd keeps for backward in one forward of ``tokens`` (what a GPU would hold)."""
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = model(tokens).sum()
    loss.backward()
    model.zero_grad(set_to_none=True)
    return total


def main() -> None:
    args = parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    # no torch.set_num_threads: with it, torch's CPU build aborted at exit now and then (gpu_train.py)
    torch.manual_seed(0)
    model = TinyLM(args.vocab, args.hidden, args.layers, args.gradient_checkpointing)
    gen = torch.Generator().manual_seed(rank)
    batch = lambda: torch.randint(0, args.vocab, (args.batch_size, args.seq_len + 1), generator=gen)  # noqa: E731
    need_mb = saved_bytes(model, batch()[:, :-1]) / 2**20
    if need_mb > args.memory_limit_mb:
        raise torch.OutOfMemoryError(
            f"Tried to keep {need_mb:.2f} MiB of activations with --batch-size {args.batch_size}; this example's device "
            f"memory stand-in is --memory-limit-mb {args.memory_limit_mb:g} MiB"
        )
    ddp = DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr)
    samples_per_step = args.batch_size * args.grad_accum * world
    t_start = time.perf_counter()
    for step in range(1, args.max_steps + 1):
        t0 = time.perf_counter()
        total = 0.0
        for micro in range(args.grad_accum):
            tokens = batch()
            sync = micro == args.grad_accum - 1
            with contextlib.nullcontext() if sync else ddp.no_sync():
                logits = ddp(tokens[:, :-1])
                loss = F.cross_entropy(logits.reshape(-1, args.vocab), tokens[:, 1:].reshape(-1)) / args.grad_accum
                loss.backward()
            total += loss.item()
        grad_norm = float(nn.utils.clip_grad_norm_(ddp.parameters(), 1.0))
        opt.step()
        opt.zero_grad(set_to_none=True)
        rate = samples_per_step / (time.perf_counter() - t0)
        if rank == 0:
            print(
                {
                    "loss": round(total, 4),
                    "grad_norm": round(grad_norm, 4),
                    "learning_rate": args.lr,
                    "epoch": round(step / args.max_steps, 2),
                    "step": step,
                    "train_samples_per_second": round(rate, 3),
                },
                flush=True,
            )
    runtime = time.perf_counter() - t_start
    if rank == 0:
        print(
            {
                "train_runtime": round(runtime, 4),
                "train_samples_per_second": round(samples_per_step * args.max_steps / runtime, 3),
                "train_steps_per_second": round(args.max_steps / runtime, 3),
                "train_loss": round(total, 4),
                "epoch": 1.0,
            },
            flush=True,
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
