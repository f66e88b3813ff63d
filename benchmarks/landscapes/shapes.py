"""Nine landscapes for ``benchmarks/landscapes.py``, each a user's job as its trainer would run it.

Each landscape is a set of parameters (the values its space ``<name>.yaml`` lets the search vary),
an instance drawn from a seed (``Landscape.instance(seed)``: every constant of its cost and memory
model), and what one config does on that instance (``Instance.outcome(config)``): it runs at a
noise-free step time with a peak of device memory, or it fails (out of memory, a hang, a crash, a
refusal at start-up), at a step. ``trainer.py`` prints what a trainer would for that outcome;
``landscapes.py`` enumerates every config to judge a study's trials exactly.

- ``offload-trap``: a ZeRO SFT job whose optimizer states can go to the CPU. Offloading alone makes
  every step slower (the CPU optimizer step), but it frees room for micro-batches about four times
  larger, which win: the best config is reached only through a setting that loses on its own.
- ``pairs``: packing sequences with a larger micro-batch, and NCCL's Simple protocol with larger
  DDP buckets: each of the four changes loses alone (packing's collation at small micro-batches,
  padding waste at large unpacked ones, Simple's latency on small buckets, LL128 on large ones) and
  each pair wins together.
- ``flat``: six knobs of small effect (NCCL threads, buffers and channels, data-loader workers,
  pinned memory, prefetching): a plateau of configs within a few percent, measured through 5% step
  noise, a slow first step and stragglers (one step in ten twice as long).
- ``minefield``: micro-batch, tensor parallelism, NCCL algorithm and protocol, CUDA graphs, a fused
  optimizer: about a third of the configs fail, four ways, next to the best: out of memory at large
  micro-batches without tensor parallelism, a hang of one NCCL combination without tensor
  parallelism, an illegal memory access of CUDA graphs with the LL protocol, and the trainer's
  start-up batch rule (the global batch must divide by micro-batch x data-parallel size; CUDA graphs
  need an even micro-batch), which the space does not know.
- ``zero-sft``: a Hugging Face Trainer + DeepSpeed SFT job that prints no memory: per-device batch,
  ZeRO stage, gradient checkpointing, attention kernel, data-loader workers, NCCL's NVLink SHARP.
  Larger batches and no checkpointing win where a higher stage or a leaner attention kernel makes
  room; the eager kernel needs 1.7x the activations; seven workers or more run the host out of
  memory (a worker killed a few steps in); ZeRO-3 with checkpointing and FlashAttention-2 crashes in
  its first step (three values together). The space leaves the kernel's and NVLS's memory unknown.
- ``interior``: FSDP pre-training with ``torch.compile``: the best micro-batch sits inside its axis
  (larger ones are efficient up to 2 or 4, then slower), against the prior that more memory is
  faster; activation checkpointing (none, selective, full) and keeping the weights gathered after
  the forward trade memory for speed; compile is faster and keeps fewer activations (undeclared),
  and crashes in its first step with selective checkpointing; a fused or foreach optimizer is a
  little faster; NCCL's P2P level ``LOC`` slows the collectives, the other levels do nothing.
- ``pipeline``: Megatron-LM pre-training of a 13B model on one node: tensor- and pipeline-parallel
  sizes share the 8 GPUs with data parallelism; the weights and Adam's states fit only split (by the
  parallel sizes, or over data parallelism by the distributed optimizer), the activations shrink
  with tensor parallelism only with sequence parallelism, and pipelining keeps them (the first stage
  holds as many micro-batches as there are stages) while its bubble grows as the micro-batches per
  step shrink; sequence parallelism pays only with ``CUDA_DEVICE_MAX_CONNECTIONS=1`` (its
  communication then overlaps), and costs a little without; recomputation (selective, full) trades
  time for activations; NCCL's NVLS is the fastest data-parallel all-reduce and hangs with a
  pipeline; Megatron refuses a pipeline size that does not divide the model's 36 layers (8), which
  the space does not state.
- ``rl-colocate``: verl GRPO of a 14B model with vLLM engines colocated with the FSDP actor: the
  engines' share of the GPU (``gpu_memory_utilization``), their tensor parallelism and CUDA graphs
  set how fast a step's 1024 responses are generated (a larger KV cache runs more sequences at once);
  the actor's micro-batches, gradient checkpointing and offloading set its two phases (old
  log-probs, update). Memory fails in three places the actor's printed peak never shows: the engine
  refuses to start when the actor's weights leave less free than its share, or when its share leaves
  no KV cache for one longest sequence (too low a share: a memory failure of a smaller value), and it
  runs out waking up next to the actor's resident weights and Adam's states, which only offloading
  removes. The space leaves the engines' tensor parallelism and CUDA graphs without a memory effect.
- ``two-node``: DeepSpeed ZeRO-3 pre-training of a 13B model over two nodes of 8 GPUs: ZeRO-3
  gathers the weights over both nodes for every micro-batch's forward and backward and
  reduce-scatters its gradients, so a larger micro-batch (fewer per step) trades activations for
  inter-node traffic, and checkpointing trades recomputation for room. ZeRO++ shortens the
  collectives (hpZ: a copy of the weights sharded in each node, gathered over NVLink in the
  backward, for its memory; quantized weights and gradients: half the volume, for a little compute),
  as do NCCL's InfiniBand queue pairs, channels and GPUDirect RDMA level; all of it pays only while
  the prefetch bucket cannot hide the collectives behind the compute. DeepSpeed prints the
  allocator's peak, not its cache nor NCCL's buffers (more channels, more of them); forcing the
  LL128 protocol hangs the first gather; 8 queue pairs per connection with 32 channels fail to
  create their queue pairs (an NCCL system error at the first collective). The space leaves NCCL's
  variables without a memory effect.

Each instance is the landscape's constants drawn from ``random.Random(f"{name}:{seed}")``.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

GPU_GIB = 80.0
"""The device every landscape runs on (an 80 GiB GPU; trainers print 79.1 GiB usable)."""
OOM_FRAC = 0.985
"""A peak above this share of the GPU runs out of memory (allocator fragmentation takes the rest)."""
USABLE_GIB = GPU_GIB - 0.9
"""What PyTorch and vLLM count as the GPU's memory (vLLM's utilization is a share of this)."""
HEADROOM_FRAC = 0.05
"""The spaces' ``stability.min_headroom_frac`` (the default): stable configs leave this much free."""


@dataclass(frozen=True)
class Outcome:
    """What one config does on one instance."""

    kind: str
    """``ok``, ``oom``, ``hang``, ``crash`` or ``refused`` (at start-up, before the first step)."""
    step_s: float
    """Noise-free seconds a step takes (the modelled time of the steps it runs before failing)."""
    peak_gib: float
    """Per-GPU peak memory of a step (for an OOM: what the step asked for in all; for a refusal:
    what the config would have needed)."""
    fail_step: int = 0
    """The step a failure happens in (1-based); 0 for a refusal at start-up; 0 when ok."""
    message: str = ""
    """The failure's own words (the trainer prints them), empty when ok."""
    short_of_memory: bool = False
    """A refusal for want of memory whatever the peak (vLLM's KV cache too small for one sequence):
    the config does not fit."""
    reported_gib: float | None = None
    """The peak the trainer prints when it is not ``peak_gib`` (``rl-colocate``: the actor's, which
    leaves out the engine's pool); None: ``peak_gib``."""

    @property
    def stable(self) -> bool:
        return self.kind == "ok" and self.fits

    @property
    def fits(self) -> bool:
        """Its peak (a refusal's: what it would have needed) leaves the headroom free."""
        return not self.short_of_memory and self.peak_gib <= (1 - HEADROOM_FRAC) * GPU_GIB

    @property
    def printed_gib(self) -> float:
        return self.peak_gib if self.reported_gib is None else self.reported_gib


@dataclass(frozen=True)
class Landscape:
    name: str
    params: Mapping[str, tuple[Any, ...]]
    """Parameter name -> its values, as the space lists them."""
    default: Mapping[str, Any]
    samples_per_step: int
    draw: Callable[[random.Random], Mapping[str, float]]
    """The instance's constants from its random stream."""
    judge: Callable[[Mapping[str, float], Mapping[str, Any]], Outcome]
    allowed: Callable[[Mapping[str, Any]], bool] = lambda c: True
    """The space's own constraints (configs that break them are never launched)."""
    tokens_per_sample: int = 2048
    """Tokens in one sample, for trainers that print tokens per second per GPU."""
    gpus: int = 8
    """The GPUs a step's samples are spread over (one node's, or two nodes')."""

    def instance(self, seed: int) -> Instance:
        return Instance(self, seed, dict(self.draw(random.Random(f"{self.name}:{seed}"))))

    def configs(self) -> Iterator[dict[str, Any]]:
        names = list(self.params)
        for values in itertools.product(*(self.params[n] for n in names)):
            config = dict(zip(names, values, strict=True))
            if self.allowed(config):
                yield config


@dataclass(frozen=True)
class Instance:
    landscape: Landscape
    seed: int
    k: Mapping[str, float]

    def outcome(self, config: Mapping[str, Any]) -> Outcome:
        return self.landscape.judge(self.k, config)

    def throughput(self, config: Mapping[str, Any]) -> float:
        """Samples per second, noise-free."""
        return self.landscape.samples_per_step / self.outcome(config).step_s


def _oom_message(peak_gib: float, ask_gib: float) -> str:
    free = max(USABLE_GIB - (peak_gib - ask_gib), 0.05)
    in_use = USABLE_GIB - free
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {ask_gib:.2f} GiB. GPU 0 has a total "
        f"capacity of {USABLE_GIB:.2f} GiB of which {free:.2f} GiB is free. Including non-PyTorch memory, this "
        f"process has {in_use:.2f} GiB memory in use. Of the allocated memory {in_use - 1.3:.2f} GiB is allocated "
        "by PyTorch, and 1.30 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
        "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
    )


def _fits(step_s: float, peak: float, ask: float) -> Outcome:
    if peak > OOM_FRAC * GPU_GIB:
        return Outcome("oom", step_s, peak, 1, _oom_message(peak, ask))
    return Outcome("ok", step_s, peak)


# -- offload-trap ---------------------------------------------------------------------------------


def _offload_draw(r: random.Random) -> dict[str, float]:
    return {
        "base_gib": r.uniform(59.0, 64.0),  # weights, grads and optimizer states per GPU (ZeRO-1)
        "offloaded_frac": r.uniform(0.68, 0.74),  # the share offloading moves to the CPU
        "act_gib": r.uniform(2.6, 3.4),  # activations per sample
        "per_sample_s": r.uniform(0.017, 0.024),
        "per_micro_s": r.uniform(0.10, 0.16),  # launch, sync and the small-batch inefficiency
        "optim_s": r.uniform(0.30, 0.50),
        "offload_s": r.uniform(0.95, 1.5),  # the CPU optimizer step and its transfers
        "comm_s": r.uniform(0.2, 0.4),
        "tree_factor": r.choice((0.8, 1.25)),
        "fused_gib": r.uniform(1.0, 2.0),
    }


def _offload_judge(k: Mapping[str, float], c: Mapping[str, Any]) -> Outcome:
    mb, offload = c["micro_batch"], c["offload_optimizer"]
    accum = 64 / mb
    compute = 64 * k["per_sample_s"] + accum * (k["per_micro_s"] + 0.8 * k["per_sample_s"])
    optim = k["optim_s"] * (0.7 if c["fused_optimizer"] else 1.0) + (k["offload_s"] if offload else 0.0)
    comm = k["comm_s"] * (k["tree_factor"] if c["NCCL_ALGO"] == "Tree" else 1.0)
    data = {1: 0.35, 2: 0.1, 4: 0.0, 8: 0.02}[c["num_workers"]]
    step_s = compute + optim + comm + data
    base = k["base_gib"] * ((1 - k["offloaded_frac"]) if offload else 1.0) + 1.5
    fused = 0.0 if offload else (k["fused_gib"] if c["fused_optimizer"] else 0.0)
    ask = mb * k["act_gib"]
    return _fits(step_s, base + fused + ask, ask * 0.4)


OFFLOAD_TRAP = Landscape(
    name="offload-trap",
    params={
        "micro_batch": (1, 2, 4, 8, 16, 32, 64),
        "offload_optimizer": (False, True),
        "fused_optimizer": (False, True),
        "NCCL_ALGO": ("Ring", "Tree"),
        "num_workers": (1, 2, 4, 8),
    },
    default={
        "micro_batch": 2,
        "offload_optimizer": False,
        "fused_optimizer": False,
        "NCCL_ALGO": "Ring",
        "num_workers": 2,
    },
    samples_per_step=64,
    draw=_offload_draw,
    judge=_offload_judge,
)


# -- pairs ----------------------------------------------------------------------------------------


def _pairs_draw(r: random.Random) -> dict[str, float]:
    return {
        "step_s": r.uniform(2.0, 3.0),
        "pack_cost": r.uniform(0.03, 0.06),  # packing alone: collation and varlen kernels
        "pad_waste": r.uniform(0.02, 0.04),  # per doubling of an unpacked micro-batch above 4
        "pack_gain": r.uniform(0.06, 0.09),  # per doubling of a packed micro-batch above 4
        "small_cost": r.uniform(0.03, 0.05),  # per halving below 4: launch overhead
        "simple_cost": r.uniform(0.03, 0.05),  # Simple on 25 MB buckets
        "simple_gain": r.uniform(0.02, 0.03),  # per doubling of the bucket, with Simple
        "ll128_cost": r.uniform(0.01, 0.02),  # per doubling of the bucket, with LL128
        "ll_cost": r.uniform(0.04, 0.06),
        "base_gib": r.uniform(30.0, 40.0),
        "seq_gib": r.uniform(1.0, 1.3),
    }


def _pairs_judge(k: Mapping[str, float], c: Mapping[str, Any]) -> Outcome:
    mb, pack, proto = c["micro_batch"], c["packing"], c["NCCL_PROTO"]
    doublings = math.log2(mb / 4)
    gain = 0.0
    if pack:
        gain -= k["pack_cost"]
    if doublings > 0:
        gain += doublings * (k["pack_gain"] if pack else -k["pad_waste"])
    else:
        gain += doublings * k["small_cost"]
    bucket_doublings = math.log2(c["bucket_mb"] / 25)
    if proto == "Simple":
        gain += -k["simple_cost"] + bucket_doublings * k["simple_gain"]
    elif proto == "LL128":
        gain -= bucket_doublings * k["ll128_cost"]
    else:
        gain -= k["ll_cost"] + bucket_doublings * k["ll128_cost"] * 1.5
    gain += {2: -0.02, 4: 0.0, 8: 0.005}[c["num_workers"]]
    step_s = k["step_s"] * math.exp(-gain)
    ask = mb * k["seq_gib"] * (1.6 if pack else 1.0)
    peak = k["base_gib"] + ask + 2 * c["bucket_mb"] / 1024
    return _fits(step_s, peak, ask * 0.5)


PAIRS = Landscape(
    name="pairs",
    params={
        "micro_batch": (1, 2, 4, 8, 16, 32),
        "packing": (False, True),
        "NCCL_PROTO": ("LL", "LL128", "Simple"),
        "bucket_mb": (25, 50, 100, 200, 400),
        "num_workers": (2, 4, 8),
    },
    default={"micro_batch": 4, "packing": False, "NCCL_PROTO": "LL128", "bucket_mb": 25, "num_workers": 4},
    samples_per_step=128,
    draw=_pairs_draw,
    judge=_pairs_judge,
)


# -- flat -----------------------------------------------------------------------------------------


def _flat_draw(r: random.Random) -> dict[str, float]:
    return {
        "step_s": r.uniform(1.5, 2.5),
        "threads_best": r.choice((128, 256, 512)),
        "threads_amp": r.uniform(0.004, 0.008),
        "buff_best": r.choice((2, 4, 8)),
        "buff_amp": r.uniform(0.005, 0.01),
        "chan_best": r.choice((4, 8, 16)),
        "chan_amp": r.uniform(0.008, 0.015),
        "workers_need": r.choice((2, 3, 4)),
        "workers_amp": r.uniform(0.02, 0.035),
        "pin_gain": r.uniform(0.003, 0.008),
        "prefetch_amp": r.uniform(0.003, 0.008),
    }


def _bump(value: float, best: float, amp: float) -> float:
    """A loss of ``amp`` per doubling away from ``best``."""
    return amp * abs(math.log2(value / best))


def _flat_judge(k: Mapping[str, float], c: Mapping[str, Any]) -> Outcome:
    loss = _bump(c["NCCL_NTHREADS"], k["threads_best"], k["threads_amp"])
    loss += _bump(c["NCCL_BUFFSIZE"] / (1 << 20), k["buff_best"], k["buff_amp"])
    loss += _bump(c["NCCL_MIN_NCHANNELS"], k["chan_best"], k["chan_amp"])
    loss += k["workers_amp"] * max(0.0, k["workers_need"] - c["num_workers"]) / k["workers_need"]
    loss += 0.002 * max(0, c["num_workers"] - k["workers_need"] - 2)
    loss += 0.0 if c["pin_memory"] else k["pin_gain"]
    loss += _bump(c["prefetch_factor"], 2, k["prefetch_amp"])
    step_s = k["step_s"] * math.exp(loss)
    return Outcome("ok", step_s, 41.0 + 0.4 * c["num_workers"] * c["prefetch_factor"] / 4)


FLAT = Landscape(
    name="flat",
    params={
        "NCCL_NTHREADS": (64, 128, 256, 512),
        "NCCL_BUFFSIZE": tuple(m << 20 for m in (1, 2, 4, 8, 16)),
        "NCCL_MIN_NCHANNELS": (2, 4, 8, 16, 32),
        "num_workers": tuple(range(1, 9)),
        "pin_memory": (False, True),
        "prefetch_factor": (1, 2, 4),
    },
    default={
        "NCCL_NTHREADS": 512,
        "NCCL_BUFFSIZE": 4 << 20,
        "NCCL_MIN_NCHANNELS": 2,
        "num_workers": 2,
        "pin_memory": False,
        "prefetch_factor": 2,
    },
    samples_per_step=256,
    draw=_flat_draw,
    judge=_flat_judge,
)
STEP_NOISE_FRAC = 0.05
"""``flat``: the spread (standard deviation) of a step's time around its mean."""
STRAGGLER_EVERY = 10
"""``flat``: one step in this many takes twice as long."""
FIRST_STEP_FACTOR = 3.0
"""``flat``: the first step takes this many times a step."""
FIRST_STEP_SLOWER = 1.5
"""Every other landscape: the first step takes this many times a step (compilation, allocator warm-up)."""


# -- minefield ------------------------------------------------------------------------------------

GLOBAL_BATCH = 96
GPUS = 8


def _mine_draw(r: random.Random) -> dict[str, float]:
    return {
        "per_sample_s": r.uniform(0.02, 0.03),
        "per_micro_s": r.uniform(0.06, 0.1),
        "tp_cost": r.uniform(0.10, 0.16),  # per doubling of tensor parallelism
        "graphs_gain": r.uniform(0.5, 0.7),  # the share of per-micro-batch overhead CUDA graphs remove
        "comm_s": r.uniform(0.25, 0.45),
        "proto_ll128": r.uniform(0.6, 0.75),
        "proto_ll": r.uniform(0.85, 1.05),
        "tree": r.uniform(0.8, 0.95),
        "model_gib": r.uniform(44.0, 52.0),
        "act_gib": r.uniform(4.0, 4.8),
        "fused_gain": r.uniform(0.02, 0.04),
    }


def refusal(c: Mapping[str, Any]) -> str | None:
    """The trainer's start-up batch rules (the space does not state them)."""
    mb, dp = c["micro_batch"], GPUS // c["tensor_parallel"]
    if GLOBAL_BATCH % (mb * dp):
        return (
            f"ValueError: global batch size {GLOBAL_BATCH} is not divisible by micro batch size ({mb}) times "
            f"data parallel size ({dp})"
        )
    if c["cuda_graphs"] and mb % 2:
        return f"AssertionError: CUDA graph capture needs an even micro batch size per GPU, got {mb}"
    return None


def _mine_judge(k: Mapping[str, float], c: Mapping[str, Any]) -> Outcome:
    mb, tp = c["micro_batch"], c["tensor_parallel"]
    dp = GPUS // tp
    per_gpu = GLOBAL_BATCH / dp
    accum = per_gpu / mb
    overhead = k["per_micro_s"] * (1 - k["graphs_gain"] if c["cuda_graphs"] else 1.0)
    compute = (per_gpu * k["per_sample_s"] / tp) * (1 + k["tp_cost"] * math.log2(tp)) + accum * overhead
    proto = {"LL128": k["proto_ll128"], "LL": k["proto_ll"], "Simple": 1.0}[c["NCCL_PROTO"]]
    comm = k["comm_s"] * proto * (k["tree"] if c["NCCL_ALGO"] == "Tree" else 1.0)
    step_s = (compute + comm) * (1 - k["fused_gain"] if c["fused_adam"] else 1.0)
    ask = mb * k["act_gib"] / tp
    peak = 12.0 + k["model_gib"] / tp + ask + (0.8 if c["cuda_graphs"] else 0.0)
    refused = refusal(c)
    if refused:
        return Outcome("refused", step_s, peak, 0, refused)
    if peak > OOM_FRAC * GPU_GIB:
        return Outcome("oom", step_s, peak, 1, _oom_message(peak, ask * 0.5))
    if c["NCCL_ALGO"] == "Tree" and c["NCCL_PROTO"] == "LL128" and tp == 1:
        return Outcome("hang", step_s, peak, 2, "")
    if c["cuda_graphs"] and c["NCCL_PROTO"] == "LL" and tp == 4:
        return Outcome(
            "crash",
            step_s,
            peak,
            2,
            "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
            "asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
        )
    return Outcome("ok", step_s, peak)


MINEFIELD = Landscape(
    name="minefield",
    params={
        "micro_batch": (1, 2, 3, 4, 6, 8, 12),
        "tensor_parallel": (1, 2, 4),
        "NCCL_ALGO": ("Ring", "Tree"),
        "NCCL_PROTO": ("LL", "LL128", "Simple"),
        "cuda_graphs": (False, True),
        "fused_adam": (False, True),
    },
    default={
        "micro_batch": 1,
        "tensor_parallel": 2,
        "NCCL_ALGO": "Ring",
        "NCCL_PROTO": "Simple",
        "cuda_graphs": False,
        "fused_adam": False,
    },
    samples_per_step=GLOBAL_BATCH,
    draw=_mine_draw,
    judge=_mine_judge,
)


# -- zero-sft -------------------------------------------------------------------------------------

ZERO_GLOBAL_BATCH = 128
"""``zero-sft``: samples per optimizer step over the 8 GPUs (16 per GPU, in micro-batches)."""


def _zero_draw(r: random.Random) -> dict[str, float]:
    return {
        "per_sample_s": r.uniform(0.11, 0.16),  # sdpa, no checkpointing, per sample on one GPU
        "per_micro_s": r.uniform(0.02, 0.05),  # launch and bookkeeping per micro-batch
        "ckpt_cost": r.uniform(0.25, 0.38),  # recomputation's share of the compute
        "eager_cost": r.uniform(0.15, 0.30),
        "flash_gain": r.uniform(0.04, 0.10),
        "z1_boundary_s": r.uniform(0.25, 0.40),  # ZeRO-1: gradients all-reduced at the boundary
        "z2_micro_s": r.uniform(0.08, 0.14),  # ZeRO-2: gradients reduce-scattered every micro-batch
        "z3_micro_s": r.uniform(0.22, 0.34),  # ZeRO-3: parameters all-gathered every micro-batch
        "nvls_gain": r.uniform(0.08, 0.15),  # collectives over NVLink SHARP
        "loader_s": r.uniform(0.15, 0.30),  # loading a step's data in the main process
        "act_gib": r.uniform(2.6, 3.4),  # activations per sample, sdpa, no checkpointing
        "states_gib": r.uniform(106.0, 116.0),  # weights, gradients and Adam for the model (16 bytes/param)
    }


def _zero_judge(k: Mapping[str, float], c: Mapping[str, Any]) -> Outcome:
    mb, stage, ckpt, attn = (
        c["per_device_train_batch_size"],
        c["zero_stage"],
        c["gradient_checkpointing"],
        c["attn_implementation"],
    )
    per_gpu = ZERO_GLOBAL_BATCH // GPUS
    micro = per_gpu // mb
    speed = {"eager": 1.0 + k["eager_cost"], "sdpa": 1.0, "flash_attention_2": 1.0 - k["flash_gain"]}[attn]
    compute = per_gpu * k["per_sample_s"] * speed * (1.0 + k["ckpt_cost"] if ckpt else 1.0) + micro * k["per_micro_s"]
    collective = 1.0 - k["nvls_gain"] if c["NCCL_NVLS_ENABLE"] else 1.0
    comm = {1: k["z1_boundary_s"], 2: micro * k["z2_micro_s"], 3: micro * k["z3_micro_s"]}[stage] * collective
    workers = c["dataloader_num_workers"]
    data = k["loader_s"] if workers == 0 else k["loader_s"] * max(0.0, 1.0 - workers / 2) * 0.5
    step_s = compute + comm + data
    states = k["states_gib"]
    model = {1: states * (4 + 12 / GPUS) / 16, 2: states * (2 + 14 / GPUS) / 16, 3: states / GPUS + 2.0}[stage]
    act_mem = {"eager": 1.7, "sdpa": 1.0, "flash_attention_2": 0.95}[attn] * (0.2 if ckpt else 1.0)
    ask = mb * k["act_gib"] * act_mem
    peak = 5.5 + model + ask + (1.2 if c["NCCL_NVLS_ENABLE"] else 0.0)
    if peak > OOM_FRAC * GPU_GIB:
        return Outcome("oom", step_s, peak, 1, _oom_message(peak, ask * 0.5))
    if workers >= 7:
        return Outcome(
            "crash",
            step_s,
            peak,
            3,
            f"RuntimeError: DataLoader worker (pid {4100 + workers}) is killed by signal: Killed.",
        )
    if stage == 3 and ckpt and attn == "flash_attention_2":
        return Outcome(
            "crash",
            step_s,
            peak,
            1,
            "RuntimeError: The size of tensor a (4096) must match the size of tensor b (0) at non-singleton "
            "dimension 1",
        )
    return Outcome("ok", step_s, peak)


ZERO_SFT = Landscape(
    name="zero-sft",
    params={
        "per_device_train_batch_size": (1, 2, 4, 8, 16),
        "zero_stage": (1, 2, 3),
        "gradient_checkpointing": (False, True),
        "attn_implementation": ("eager", "sdpa", "flash_attention_2"),
        "dataloader_num_workers": tuple(range(0, 9)),
        "NCCL_NVLS_ENABLE": (0, 1),
    },
    default={
        "per_device_train_batch_size": 2,
        "zero_stage": 2,
        "gradient_checkpointing": True,
        "attn_implementation": "sdpa",
        "dataloader_num_workers": 0,
        "NCCL_NVLS_ENABLE": 1,
    },
    samples_per_step=ZERO_GLOBAL_BATCH,
    draw=_zero_draw,
    judge=_zero_judge,
)

# -- interior -------------------------------------------------------------------------------------

FSDP_GLOBAL_BATCH = 64
"""``interior``: sequences of 4096 tokens per optimizer step over the 8 GPUs (8 per GPU)."""


def _interior_draw(r: random.Random) -> dict[str, float]:
    return {
        "per_sample_s": r.uniform(0.30, 0.40),  # one 4096-token sequence, fwd + bwd, on one GPU
        "per_micro_s": r.uniform(0.03, 0.06),  # launch and the FSDP all-gathers per micro-batch
        "mb_best": r.choice((2, 4)),  # larger micro-batches are efficient up to here
        "mb_gain": r.uniform(0.05, 0.09),  # per doubling, up to mb_best
        "mb_loss": r.uniform(0.04, 0.08),  # per doubling past it (allocator churn, cache misses)
        "selective_cost": r.uniform(0.06, 0.10),
        "full_cost": r.uniform(0.22, 0.30),
        "compile_gain": r.uniform(0.08, 0.14),
        "compile_act": r.uniform(0.85, 0.95),  # fused kernels keep fewer activations: undeclared
        "reshard_gain": r.uniform(0.04, 0.07),  # no re-gather in the backward
        "gathered_gib": r.uniform(10.0, 14.0),  # the weights kept gathered between forward and backward
        "foreach_gain": r.uniform(0.02, 0.05),
        "fused_gain": r.uniform(0.03, 0.08),
        "comm_s": r.uniform(0.25, 0.45),  # exposed reduce-scatter time per step
        "act_gib": r.uniform(10.0, 13.0),  # activations per sequence, no checkpointing
        "states_gib": r.uniform(18.0, 22.0),  # sharded weights, gradients, Adam, buffers
    }


def _interior_judge(k: Mapping[str, float], c: Mapping[str, Any]) -> Outcome:
    mb, ac, comp = c["micro_batch"], c["activation_checkpointing"], c["compile"]
    doublings = math.log2(mb)
    best = math.log2(k["mb_best"])
    eff = (1.0 - k["mb_gain"]) ** min(doublings, best) * (1.0 + k["mb_loss"]) ** max(0.0, doublings - best)
    recompute = {"none": 1.0, "selective": 1.0 + k["selective_cost"], "full": 1.0 + k["full_cost"]}[ac]
    optimizer = {"for_loop": 1.0, "foreach": 1.0 - k["foreach_gain"], "fused": 1.0 - k["fused_gain"]}
    per_gpu = FSDP_GLOBAL_BATCH // GPUS
    compute = per_gpu * k["per_sample_s"] * eff * recompute * (1.0 - k["compile_gain"] if comp else 1.0)
    compute += (per_gpu // mb) * k["per_micro_s"]
    comm = k["comm_s"] * (1.8 if c["NCCL_P2P_LEVEL"] == "LOC" else 1.0)
    step_s = (compute + comm) * optimizer[c["optimizer_impl"]]
    if not c["reshard_after_forward"]:
        step_s *= 1.0 - k["reshard_gain"]
    act = {"none": 1.0, "selective": 0.55, "full": 0.2}[ac] * (k["compile_act"] if comp else 1.0)
    ask = mb * k["act_gib"] * act
    peak = 4.0 + k["states_gib"] + ask + (0.0 if c["reshard_after_forward"] else k["gathered_gib"])
    if peak > OOM_FRAC * GPU_GIB:
        return Outcome("oom", step_s, peak, 1, _oom_message(peak, ask * 0.4))
    if comp and ac == "selective":
        return Outcome(
            "crash",
            step_s,
            peak,
            1,
            "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nRuntimeError: "
            "checkpoint_wrapper: selective activation checkpointing is not traceable under torch.compile",
        )
    return Outcome("ok", step_s, peak)


INTERIOR = Landscape(
    name="interior",
    params={
        "micro_batch": (1, 2, 4, 8, 16),
        "activation_checkpointing": ("none", "selective", "full"),
        "compile": (False, True),
        "reshard_after_forward": (False, True),
        "optimizer_impl": ("for_loop", "foreach", "fused"),
        "NCCL_P2P_LEVEL": ("unset", "LOC", "NVL", "SYS"),
    },
    default={
        "micro_batch": 1,
        "activation_checkpointing": "full",
        "compile": False,
        "reshard_after_forward": True,
        "optimizer_impl": "for_loop",
        "NCCL_P2P_LEVEL": "unset",
    },
    samples_per_step=FSDP_GLOBAL_BATCH,
    draw=_interior_draw,
    judge=_interior_judge,
)

# -- pipeline -------------------------------------------------------------------------------------

MEGATRON_GLOBAL_BATCH = 128
"""``pipeline``: sequences of 4096 tokens per optimizer step over the 8 GPUs."""
MEGATRON_LAYERS = 36
"""``pipeline``: the model's layers; Megatron refuses a pipeline size that does not divide them."""


def _pipeline_draw(r: random.Random) -> dict[str, float]:
    return {
        "params_b": r.uniform(12.0, 14.0),  # billions of parameters
        "per_sample_s": r.uniform(0.7, 0.9),  # fwd + bwd of one sequence, whole model, one GPU
        "mb_gain": r.uniform(0.03, 0.07),  # per doubling of the micro-batch, up to 4
        "tp_cost": r.uniform(0.05, 0.14),  # per doubling of tensor parallelism: smaller GEMMs, exposed all-reduces
        "overlap": r.uniform(0.4, 0.6),  # the share of that cost overlapped by sequence parallelism with one connection
        "sp_alone_cost": r.uniform(0.01, 0.03),  # sequence parallelism without CUDA_DEVICE_MAX_CONNECTIONS=1
        "p2p_cost": r.uniform(0.005, 0.015),  # per doubling of the pipeline: send/recv between stages
        "selective_cost": r.uniform(0.03, 0.05),
        "selective_act": r.uniform(0.70, 0.80),
        "full_cost": r.uniform(0.28, 0.34),
        "dp_comm_s": r.uniform(0.6, 1.2),  # exposed gradient all-reduce at tp = pp = 1, Ring
        "nvls": r.uniform(0.55, 0.7),  # NVLS's share of Ring's time on the NVSwitch
        "tree": r.uniform(1.1, 1.3),  # Tree inside one node
        "distopt_cost": r.uniform(0.005, 0.015),  # the parameters' all-gather after the step
        "act_gib": r.uniform(24.0, 30.0),  # activations of one sequence, whole model, no recompute
    }


def _pipeline_states_gib(k: Mapping[str, float], c: Mapping[str, Any]) -> float:
    """Weights (bf16), main gradients (fp32) and Adam's fp32 states per GPU, in GiB."""
    tp, pp = c["tensor_model_parallel_size"], c["pipeline_model_parallel_size"]
    dp = GPUS // (tp * pp)
    params = k["params_b"] * 1e9 / (tp * pp) * (1.03 if pp > 1 else 1.0)  # stage 0 holds the embedding
    optimizer = 12 * params / (dp if c["use_distributed_optimizer"] else 1)
    return (6 * params + optimizer) / 2**30


def _pipeline_judge(k: Mapping[str, float], c: Mapping[str, Any]) -> Outcome:
    tp, pp, mb = c["tensor_model_parallel_size"], c["pipeline_model_parallel_size"], c["micro_batch_size"]
    dp = GPUS // (tp * pp)
    micro = MEGATRON_GLOBAL_BATCH // (mb * dp)  # micro-batches per step in each pipeline
    sp = c["sequence_parallel"] and tp > 1  # Megatron turns it off at tp = 1
    one_conn = c["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    tp_cost = k["tp_cost"] * (1 - k["overlap"] if sp and one_conn else 1.0)
    per_gpu = MEGATRON_GLOBAL_BATCH * k["per_sample_s"] / GPUS
    compute = per_gpu * (1 - k["mb_gain"]) ** min(math.log2(mb), 2) * (1 + tp_cost) ** math.log2(tp)
    compute *= {"none": 1.0, "selective": 1 + k["selective_cost"], "full": 1 + k["full_cost"]}[
        c["recompute_granularity"]
    ]
    compute *= 1 + (k["sp_alone_cost"] if sp and not one_conn else 0.0) + k["p2p_cost"] * math.log2(pp)
    compute *= 1 + (pp - 1) / micro  # the 1F1B bubble
    algo = {"unset": 1.0, "Ring": 1.0, "Tree": k["tree"], "NVLS": k["nvls"]}[c["NCCL_ALGO"]]
    comm = k["dp_comm_s"] / (tp * pp) * (2 * (dp - 1) / dp if dp > 1 else 0.0) * algo
    step_s = (compute + comm) * (1 + (k["distopt_cost"] if c["use_distributed_optimizer"] else 0.0))
    act = k["act_gib"] * (1 / tp if sp else 0.3 + 0.7 / tp)
    act *= {"none": 1.0, "selective": k["selective_act"], "full": 0.08}[c["recompute_granularity"]]
    ask = mb * act * min(pp, micro) / pp  # 1F1B: the first stage holds up to pp micro-batches of its layers
    peak = 3.0 + _pipeline_states_gib(k, c) + ask
    if MEGATRON_LAYERS % pp:
        return Outcome(
            "refused",
            step_s,
            peak,
            0,
            f"AssertionError: num_layers ({MEGATRON_LAYERS}) must be divisible by pipeline_model_parallel_size ({pp})",
        )
    if peak > OOM_FRAC * GPU_GIB:
        return Outcome("oom", step_s, peak, 1, _oom_message(peak, ask * 0.3))
    if c["NCCL_ALGO"] == "NVLS" and pp > 1:
        return Outcome("hang", step_s, peak, 2, "")
    return Outcome("ok", step_s, peak)


PIPELINE = Landscape(
    name="pipeline",
    params={
        "tensor_model_parallel_size": (1, 2, 4, 8),
        "pipeline_model_parallel_size": (1, 2, 4, 8),
        "micro_batch_size": (1, 2, 4, 8),
        "sequence_parallel": (False, True),
        "recompute_granularity": ("none", "selective", "full"),
        "use_distributed_optimizer": (False, True),
        "CUDA_DEVICE_MAX_CONNECTIONS": ("unset", "1"),
        "NCCL_ALGO": ("unset", "Ring", "Tree", "NVLS"),
    },
    default={
        "tensor_model_parallel_size": 2,
        "pipeline_model_parallel_size": 2,
        "micro_batch_size": 1,
        "sequence_parallel": False,
        "recompute_granularity": "full",
        "use_distributed_optimizer": False,
        "CUDA_DEVICE_MAX_CONNECTIONS": "unset",
        "NCCL_ALGO": "unset",
    },
    samples_per_step=MEGATRON_GLOBAL_BATCH,
    draw=_pipeline_draw,
    judge=_pipeline_judge,
    allowed=lambda c: c["tensor_model_parallel_size"] * c["pipeline_model_parallel_size"] <= GPUS,
)

# -- rl-colocate ----------------------------------------------------------------------------------

RL_SEQUENCES = 1024
"""``rl-colocate``: responses per step (128 prompts, 8 samples each), over the 8 GPUs."""
RL_MAX_MODEL_LEN = 8192
"""``rl-colocate``: the engine's longest sequence (prompt and response), in tokens."""
RL_MAX_NUM_SEQS = 1024
"""``rl-colocate``: vLLM's cap on the sequences one engine decodes at once."""
RL_WEIGHTS_GIB = 27.5
"""``rl-colocate``: the 14B model's weights in bf16, which the engines split by tensor parallelism."""


def _rl_draw(r: random.Random) -> dict[str, float]:
    return {
        "prompt_tokens": r.uniform(500, 700),
        "response_tokens": r.uniform(3000, 4000),
        "tail": r.uniform(1.2, 1.4),  # the longest responses of a wave hold it open
        "kv_mib_per_token": r.uniform(0.18, 0.20),  # the KV cache of one token, whole model
        "engine_reserve_gib": r.uniform(2.5, 4.0),  # vLLM's activations and buffers inside its share
        "weights_ms": r.uniform(9.0, 11.0),  # one decode step's reading of the weights, one GPU
        "per_seq_ms": r.uniform(0.06, 0.08),  # one decode step's work per running sequence, one GPU
        "tp_eff": r.uniform(0.75, 0.92),  # how well tensor parallelism splits the weights' reading
        "tp_comm": r.uniform(0.06, 0.16),  # per doubling of tensor parallelism: the all-reduces
        "eager_cost": r.uniform(0.25, 0.40),  # decoding without CUDA graphs
        "graphs_gib": r.uniform(1.0, 2.0),  # the graphs' memory pool, outside the engine's share
        "fwd_ms_per_token": r.uniform(0.020, 0.026),  # the actor's forward, per token, one GPU
        "lp_micro": r.uniform(0.8, 1.4),  # the old log-probs' overhead at one sequence per micro-batch
        "train_micro": r.uniform(0.5, 0.9),  # the update's overhead at one sequence per micro-batch
        "ckpt_cost": r.uniform(0.28, 0.36),
        "fsdp_comm_s": r.uniform(3.0, 6.0),  # exposed all-gathers and reduce-scatters per step
        "tree": r.uniform(1.05, 1.3),
        "param_offload_s": r.uniform(3.0, 6.0),  # moving the weights to the CPU and back, per step
        "optim_offload_s": r.uniform(4.0, 8.0),  # moving Adam's states to the CPU and back, per step
        "states_gib": r.uniform(26.0, 30.0),  # fp32 weights (1/4), gradients (1/4), Adam (1/2), sharded
        "gather_gib": r.uniform(1.2, 1.8),  # a layer gathered, and FSDP's buffers
        "act_ckpt_gib": r.uniform(1.6, 2.2),  # activations of one sequence, checkpointed
        "act_full_gib": r.uniform(10.0, 12.6),  # activations of one sequence, kept
        "logits_gib": r.uniform(3.6, 4.7),  # fp32 logits and their gradient, one sequence
        "lp_logits_gib": r.uniform(4.0, 5.0),  # fp32 logits and log-softmax of one sequence, no grad
    }


def _rl_generation(k: Mapping[str, float], c: Mapping[str, Any]) -> tuple[float, float, float]:
    """Seconds to generate a step's responses, the KV cache each GPU has (GiB), and what one
    longest sequence needs of it."""
    util, tp = (
        c["actor_rollout_ref.rollout.gpu_memory_utilization"],
        c["actor_rollout_ref.rollout.tensor_model_parallel_size"],
    )
    kv_gib = util * USABLE_GIB - RL_WEIGHTS_GIB / tp - k["engine_reserve_gib"]
    tokens = k["prompt_tokens"] + k["response_tokens"]
    per_seq_gib = tokens * k["kv_mib_per_token"] / 1024 / tp
    need_gib = RL_MAX_MODEL_LEN * k["kv_mib_per_token"] / 1024 / tp
    per_engine = RL_SEQUENCES * tp / GPUS
    running = min(per_engine, RL_MAX_NUM_SEQS, max(kv_gib, 1e-3) / per_seq_gib)
    decode_ms = k["weights_ms"] / tp ** k["tp_eff"] + k["per_seq_ms"] * running / tp
    decode_ms *= (1 + k["tp_comm"] * math.log2(tp)) * (
        1 + k["eager_cost"] if c["actor_rollout_ref.rollout.enforce_eager"] else 1.0
    )
    waves = per_engine / max(running, 1.0)
    return waves * k["response_tokens"] * k["tail"] * decode_ms / 1000, kv_gib, need_gib


def _rl_judge(k: Mapping[str, float], c: Mapping[str, Any]) -> Outcome:
    util = c["actor_rollout_ref.rollout.gpu_memory_utilization"]
    mb, lmb = (
        c["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"],
        c["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"],
    )
    ckpt = c["actor_rollout_ref.model.enable_gradient_checkpointing"]
    p_off, o_off = (
        c["actor_rollout_ref.actor.fsdp_config.param_offload"],
        c["actor_rollout_ref.actor.fsdp_config.optimizer_offload"],
    )
    gen_s, kv_gib, need_gib = _rl_generation(k, c)
    tokens = RL_SEQUENCES * (k["prompt_tokens"] + k["response_tokens"]) / GPUS
    lp_s = tokens * k["fwd_ms_per_token"] / 1000 * (1 + k["lp_micro"] / lmb)
    train_s = (
        3 * tokens * k["fwd_ms_per_token"] / 1000 * (1 + k["ckpt_cost"] if ckpt else 1.0) * (1 + k["train_micro"] / mb)
    )
    train_s += k["fsdp_comm_s"] * (k["tree"] if c["NCCL_ALGO"] == "Tree" else 1.0)
    train_s += (k["param_offload_s"] if p_off else 0.0) + (k["optim_offload_s"] if o_off else 0.0)
    step_s = gen_s + lp_s + train_s
    states = k["states_gib"]
    train_ask = mb * ((k["act_ckpt_gib"] if ckpt else k["act_full_gib"]) + k["logits_gib"])
    train_peak = 0.6 + states + k["gather_gib"] + train_ask
    lp_ask = lmb * k["lp_logits_gib"]
    lp_peak = 0.6 + states * (0.25 if o_off else 0.75) + k["gather_gib"] + lp_ask
    resident = (0.0 if p_off else states / 4) + (0.0 if o_off else states / 2)
    graphs = 0.0 if c["actor_rollout_ref.rollout.enforce_eager"] else k["graphs_gib"]
    gen_peak = 0.6 + util * USABLE_GIB + resident + graphs
    reported = max(train_peak, lp_peak)  # the actor's allocator: vLLM's pool is not in its statistics
    peak = max(reported, gen_peak)
    free_gib = USABLE_GIB - 0.6 - (0.0 if p_off else states / 4)  # at the engine's start: the actor's weights
    if util * USABLE_GIB > free_gib:
        return Outcome(
            "refused", step_s, max(peak, util * USABLE_GIB + USABLE_GIB - free_gib), 0,
            f"ValueError: Free memory on device ({free_gib:.2f}/{USABLE_GIB:.2f} GiB) on startup is less than "
            f"desired GPU memory utilization ({util}, {util * USABLE_GIB:.2f} GiB). Decrease GPU memory "
            "utilization or reduce GPU memory used by other processes.",
            reported_gib=0.0,
        )  # fmt: skip
    if kv_gib < need_gib:
        message = (
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine."
            if kv_gib <= 0
            else f"ValueError: To serve at least one request with the models's max seq len ({RL_MAX_MODEL_LEN}), "
            f"({need_gib:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
            f"({kv_gib:.2f} GiB). Based on the available memory, the estimated maximum model length is "
            f"{int(RL_MAX_MODEL_LEN * kv_gib / need_gib)}. Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine."
        )
        return Outcome("refused", step_s, peak, 0, message, short_of_memory=True, reported_gib=0.0)
    if gen_peak > OOM_FRAC * GPU_GIB:  # waking the engine up next to the actor's resident states
        frame = '  File "/usr/local/lib/python3.12/site-packages/vllm/device_allocator/cumem.py", line 231, in wake_up'
        return Outcome(
            "oom", step_s, peak, 1, frame + "\n" + _oom_message(gen_peak, util * USABLE_GIB * 0.6), reported_gib=0.0
        )
    for phase_peak, ask, where in ((lp_peak, lp_ask, "compute_log_prob"), (train_peak, train_ask, "update_policy")):
        if phase_peak > OOM_FRAC * GPU_GIB:
            frame = f'  File "/workspace/verl/verl/workers/actor/dp_actor.py", line 312, in {where}'
            return Outcome("oom", step_s, peak, 1, frame + "\n" + _oom_message(phase_peak, ask * 0.4), reported_gib=0.0)
    return Outcome("ok", step_s, peak, reported_gib=reported)


RL_COLOCATE = Landscape(
    name="rl-colocate",
    params={
        "actor_rollout_ref.rollout.gpu_memory_utilization": (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),
        "actor_rollout_ref.rollout.tensor_model_parallel_size": (1, 2, 4),
        "actor_rollout_ref.rollout.enforce_eager": (False, True),
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": (1, 2, 4, 8, 16),
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": (1, 2, 4, 8, 16),
        "actor_rollout_ref.model.enable_gradient_checkpointing": (False, True),
        "actor_rollout_ref.actor.fsdp_config.param_offload": (False, True),
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload": (False, True),
        "NCCL_ALGO": ("unset", "Ring", "Tree"),
    },
    default={
        "actor_rollout_ref.rollout.gpu_memory_utilization": 0.5,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 2,
        "actor_rollout_ref.rollout.enforce_eager": True,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 4,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
        "actor_rollout_ref.model.enable_gradient_checkpointing": True,
        "actor_rollout_ref.actor.fsdp_config.param_offload": False,
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload": False,
        "NCCL_ALGO": "unset",
    },
    samples_per_step=RL_SEQUENCES,
    draw=_rl_draw,
    judge=_rl_judge,
    tokens_per_sample=4100,
)

# -- two-node -------------------------------------------------------------------------------------

ZPP_GLOBAL_BATCH = 512
"""``two-node``: sequences of 2048 tokens per optimizer step over the 16 GPUs of two nodes (32 each)."""
ZPP_GPUS = 16
"""``two-node``: two nodes of 8 GPUs, one 400 Gb/s InfiniBand NIC per GPU."""
ZPP_BUCKETS = (50_000_000, 200_000_000, 500_000_000)
"""``two-node``: ZeRO-3's prefetch bucket sizes (elements) the space offers; DeepSpeed's default first."""


def _zpp_draw(r: random.Random) -> dict[str, float]:
    return {
        "per_sample_s": r.uniform(0.33, 0.40),  # one sequence, fwd + bwd, on one GPU
        "mb_gain": r.uniform(0.04, 0.07),  # per doubling of the micro-batch: larger kernels
        "ckpt_cost": r.uniform(0.28, 0.36),  # recomputing the forward
        "ag_s": r.uniform(0.16, 0.24),  # one all-gather of the bf16 weights over both nodes
        "rs_s": r.uniform(0.20, 0.30),  # one reduce-scatter of the gradients over both nodes
        "ag_intra_s": r.uniform(0.03, 0.05),  # hpZ's backward all-gather inside a node (NVLink)
        "quant_cost": r.uniform(0.02, 0.04),  # qwZ's or qgZ's (de)quantization, of the compute
        "overlap_small": r.uniform(0.25, 0.35),  # the compute a prefetch bucket hides the gathers behind
        "overlap_mid": r.uniform(0.50, 0.60),
        "overlap_large": r.uniform(0.65, 0.75),
        "qps_4": r.uniform(0.76, 0.84),  # inter-node time with 4 queue pairs per connection (rails spread)
        "gdr_off": r.uniform(1.4, 1.7),  # inter-node time through host memory (no GPUDirect RDMA)
        "states_gib": r.uniform(11.5, 13.0),  # ZeRO-3: weights, gradients, Adam over 16 GPUs
        "persist_gib": r.uniform(1.6, 2.4),  # persistent small parameters, buffers, the optimizer's
        "act_gib": r.uniform(12.0, 13.5),  # activations of one sequence, kept
        "act_ckpt_gib": r.uniform(1.4, 1.9),  # activations of one sequence, checkpointed
        "logits_gib": r.uniform(0.9, 1.2),  # fp32 logits and their gradient, one sequence
        "frag": r.uniform(0.04, 0.07),  # reserved over allocated (the allocator's cache)
        "hpz_gib": r.uniform(2.9, 3.1),  # hpZ's secondary copy of the weights, a node's shard
    }


def _zpp_nccl(k: Mapping[str, float], c: Mapping[str, Any]) -> float:
    """How much longer than with NCCL's defaults an inter-node collective takes."""
    qps = {1: 1.0, 2: (1.0 + k["qps_4"]) / 2, 4: k["qps_4"], 8: k["qps_4"] + 0.03}[c["NCCL_IB_QPS_PER_CONNECTION"]]
    channels = {"unset": 1.0, "4": 1.12, "16": 0.92, "32": 0.9}[c["NCCL_MIN_NCHANNELS"]]
    gdr = {"unset": 1.0, "LOC": k["gdr_off"], "PHB": 1.0, "SYS": 0.98}[c["NCCL_NET_GDR_LEVEL"]]
    proto = {"unset": 1.0, "Simple": 1.0, "LL": 1.3, "LL128": 1.0}[c["NCCL_PROTO"]]
    return qps * channels * gdr * proto


def _zpp_judge(k: Mapping[str, float], c: Mapping[str, Any]) -> Outcome:
    mb, ckpt, hpz = c["micro_batch"], c["gradient_checkpointing"], c["zero_hpz_partition_size"] == 8
    qwz, qgz = c["zero_quantized_weights"], c["zero_quantized_gradients"]
    per_gpu = ZPP_GLOBAL_BATCH // ZPP_GPUS
    compute = per_gpu * k["per_sample_s"] * (1.0 - k["mb_gain"]) ** math.log2(mb)
    compute *= (1.0 + k["ckpt_cost"] if ckpt else 1.0) * (1.0 + k["quant_cost"]) ** (qwz + qgz)
    inter = _zpp_nccl(k, c)
    gather = k["ag_s"] * (0.55 if qwz else 1.0) * inter
    per_micro = gather + (k["ag_intra_s"] if hpz else gather) + k["rs_s"] * (0.6 if qgz else 1.0) * inter
    comm = (per_gpu // mb) * per_micro
    overlap = dict(zip(ZPP_BUCKETS, (k["overlap_small"], k["overlap_mid"], k["overlap_large"]), strict=True))
    exposed = max(0.1 * comm, comm - overlap[c["stage3_prefetch_bucket_size"]] * compute)
    step_s = compute + exposed + 0.3  # and the optimizer's step
    ask = mb * ((k["act_ckpt_gib"] if ckpt else k["act_gib"]) + k["logits_gib"])
    bucket_gib = 4 * c["stage3_prefetch_bucket_size"] / 2**30  # two buckets in flight, bf16
    allocated = k["states_gib"] + k["persist_gib"] + bucket_gib + (k["hpz_gib"] if hpz else 0.0) + ask
    nccl_gib = {"unset": 0.4, "4": 0.3, "16": 0.9, "32": 1.8}[c["NCCL_MIN_NCHANNELS"]]  # outside PyTorch's allocator
    peak = 0.6 + allocated * (1.0 + k["frag"]) + nccl_gib
    if c["NCCL_IB_QPS_PER_CONNECTION"] == 8 and c["NCCL_MIN_NCHANNELS"] == "32":
        return Outcome(
            "crash", step_s, peak, 1,
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
            "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error. \n"
            "Last error:\nCall to ibv_create_qp failed with error Cannot allocate memory",
            reported_gib=allocated,
        )  # fmt: skip
    if c["NCCL_PROTO"] == "LL128":  # forced on a fabric NCCL does not enable it on: the first gather never ends
        return Outcome("hang", step_s, peak, 1, reported_gib=allocated)
    if peak > OOM_FRAC * GPU_GIB:
        return Outcome("oom", step_s, peak, 1, _oom_message(peak, ask * 0.3), reported_gib=allocated)
    return Outcome("ok", step_s, peak, reported_gib=allocated)


TWO_NODE = Landscape(
    name="two-node",
    params={
        "micro_batch": (1, 2, 4, 8, 16),
        "gradient_checkpointing": (False, True),
        "zero_hpz_partition_size": (1, 8),
        "zero_quantized_weights": (False, True),
        "zero_quantized_gradients": (False, True),
        "stage3_prefetch_bucket_size": ZPP_BUCKETS,
        "NCCL_IB_QPS_PER_CONNECTION": (1, 2, 4, 8),
        "NCCL_MIN_NCHANNELS": ("unset", "4", "16", "32"),
        "NCCL_NET_GDR_LEVEL": ("unset", "LOC", "PHB", "SYS"),
        "NCCL_PROTO": ("unset", "Simple", "LL", "LL128"),
    },
    default={
        "micro_batch": 1,
        "gradient_checkpointing": False,
        "zero_hpz_partition_size": 1,
        "zero_quantized_weights": False,
        "zero_quantized_gradients": False,
        "stage3_prefetch_bucket_size": ZPP_BUCKETS[0],
        "NCCL_IB_QPS_PER_CONNECTION": 1,
        "NCCL_MIN_NCHANNELS": "unset",
        "NCCL_NET_GDR_LEVEL": "unset",
        "NCCL_PROTO": "unset",
    },
    samples_per_step=ZPP_GLOBAL_BATCH,
    draw=_zpp_draw,
    judge=_zpp_judge,
    gpus=ZPP_GPUS,
)

TIME_SCALE = 0.01
"""``trainer.py`` runs the modelled times this much faster: a step of 2 s takes 20 ms, the start-up
0.6 s, and it prints the times it took, so that what a trial's wall clock and its log say agree as
on a real node (start-up against steps decides how many steps a trial can afford to measure)."""
STARTUP_S = 60.0
"""Modelled seconds from launch to the first step (imports, model load, NCCL's start-up)."""
REFUSAL_S = 10.0
"""Modelled seconds to a refusal of the config at start-up (before the model is loaded)."""

LANDSCAPES: dict[str, Landscape] = {
    ls.name: ls for ls in (OFFLOAD_TRAP, PAIRS, FLAT, MINEFIELD, ZERO_SFT, INTERIOR, PIPELINE, RL_COLOCATE, TWO_NODE)
}
SEED_ENV = "LANDSCAPE_SEED"
"""The environment variable that picks a landscape's instance (``trainer.py`` reads it; 0 when unset)."""
