"""Synthetic landscape families for the search benchmark: analytic trainers of different shapes.

Each family is a search space (YAML, as a user would write it) and a generator of random instances
(``instance(family, seed)``): the constants of the job (model size, activation memory, link speed,
which NCCL settings help or hang ...) are drawn from ranges, and a family's ``check`` keeps only
instances that have the family's defining shape. Configs are judged exactly: every config of the
space is enumerated (``enumerate_configs``), since each costs microseconds.

- ``enabler-trap``: ZeRO SFT where activation checkpointing makes a step ~30% slower at the same
  micro-batch but frees room for a micro-batch several times larger, which wins.
- ``comm-bound``: data-parallel training across two nodes over TCP sockets: gradient all-reduce
  dominates, and NCCL's algorithm, protocol, socket threads, buffers and the bucket size decide.
  More than 64 sockets run as 64 (NCCL clamps them: ``node.nccl_clamps``).
- ``flat-top``: a generation-heavy RL job whose optimum is a plateau (two or three values of each
  parameter within a fraction of a percent, 6-12% lost per value off it), under 6-10% step noise;
  its memory peaks in ``generate`` (the engines' pool) or in ``policy_train`` (the trainer), given
  per phase.
- ``narrow-wall``: a 26-38B model on one node: most configs run out of memory and the best sits
  just under the wall (ZeRO-3, offloads, packing length, micro-batch).
- ``hang-region``: NVSwitch node where some NCCL combinations hang (NVLS without cuMem, P2P off
  with many channels, LL128 on trees) and the fastest settings sit next to them. Those three hang
  the collectives alone too (``Truth.nccl_failure``, ``nccl_hang_p``: the NCCL check meets them);
  cuMem buffers next to the colocated engines, and a rank near the memory wall, hang only in the job.

The constants are plausible, not measured: the families exist to vary the shape of the search
problem, and the twin (``twin``) is the one grounded in real numbers.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from nccl_tune.node.nccl_clamps import effective
from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.search_spaces.space import SearchSpace
from twin.analytic import AnalyticNode, Landscape, Truth

PEAK_FLOPS = 989e12
"""H100 SXM dense BF16."""
NVLINK_BUSBW = 370e9
GB = 1e9
OVERHEAD_GIB = 3.0
"""CUDA context, NCCL buffers and workspaces per GPU."""

_COMMON = """
stop: {warmup_steps: 1, measured_steps: 3, screen_steps: 1}
clocks: {startup_timeout_s: 900, stall_timeout_s: 600, stall_floor_s: 60, stall_multiplier: 3,
         trial_timeout_s: 5400, grace_s: 10}
stability: {min_headroom_frac: 0.05}
"""


@dataclass(frozen=True)
class Family:
    name: str
    shape: str
    space_yaml: str
    build: Callable[[random.Random], tuple[Landscape, AnalyticNode]]
    check: Callable[[Instance, Exact], bool]
    """True when an instance has the family's defining shape."""


@dataclass(frozen=True)
class Instance:
    family: str
    seed: int
    space: SearchSpace
    landscape: Landscape
    node: AnalyticNode

    @property
    def baseline(self) -> dict[str, Any]:
        return self.space.defaults()


@dataclass(frozen=True)
class Exact:
    """The landscape of one instance, exactly."""

    best_values: Mapping[str, Any]
    best: Truth
    best_throughput: float
    admissible: int
    """Rule-satisfying configs."""
    stable: int
    within: int
    """Stable configs within ``within_frac`` of the best."""
    within_frac: float

    @property
    def p(self) -> float:
        return self.within / self.admissible if self.admissible else 0.0


def throughput(space: SearchSpace, values: Mapping[str, Any], truth: Truth) -> float:
    return (space.samples(values) or 1.0) / truth.step_s


def enumerate_configs(space: SearchSpace) -> Iterator[dict[str, Any]]:
    names = [p.name for p in space.parameters]
    for combo in itertools.product(*(p.choices for p in space.parameters)):
        values = dict(zip(names, combo))
        if not space.violations(values):
            yield values


def exact(inst: Instance, within_frac: float = 0.02, where: Callable[[Mapping[str, Any]], bool] | None = None) -> Exact:
    """The best stable config and the size of the target region (``where`` restricts the configs)."""
    rows = []
    admissible = 0
    for values in enumerate_configs(inst.space):
        if where is not None and not where(values):
            continue
        admissible += 1
        t = inst.landscape(values)
        if t.stable(inst.node.capacity_gib, inst.space.min_headroom_frac):
            rows.append((throughput(inst.space, values, t), values, t))
    if not rows:
        return Exact({}, Truth(math.inf, 0.0, "none"), 0.0, admissible, 0, 0, within_frac)
    best_tput, best_values, best = max(rows, key=lambda r: r[0])
    within = sum(1 for r in rows if r[0] >= best_tput * (1 - within_frac))
    return Exact(best_values, best, best_tput, admissible, len(rows), within, within_frac)


def mfu(tokens_per_micro: float, mfu_max: float, half_tokens: float) -> float:
    """Model FLOPs utilisation: small kernels waste the GPU, large ones saturate it."""
    return mfu_max * tokens_per_micro / (tokens_per_micro + half_tokens)


def compute_s(params_b: float, tokens: float, util: float) -> float:
    return 6.0 * params_b * 1e9 * tokens / (PEAK_FLOPS * util)


def zero_static_gib(params_b: float, stage: int, optimizer_offload: bool, param_offload: bool = False) -> float:
    """Parameters (bf16), gradients (bf16) and Adam state (fp32 master + 2 moments) per GPU of 8."""
    p = params_b * GB / 2**30
    params = 2 * p / (8 if stage == 3 else 1)
    grads = 2 * p / (8 if stage >= 2 else 1)
    optim = 0.0 if optimizer_offload else 12 * p / 8
    if param_offload:
        params = 0.05 * params
    return params + grads + optim


# ---------------------------------------------------------------------------------------------
# enabler-trap
# ---------------------------------------------------------------------------------------------

_TRAP = (
    """
name: synthetic-enabler-trap
description: ZeRO SFT of a dense model; activation checkpointing frees room for a larger micro-batch
command: train
parameters:
  - {name: train.micro_batch_size, kind: pow2, low: 1, high: 32, default: 2, memory: increasing}
  - {name: train.gradient_checkpointing, kind: bool, default: false, memory: decreasing}
  - {name: train.zero_stage, kind: categorical, choices: [1, 2, 3], default: 2, memory: decreasing}
  - {name: train.optimizer_offload, kind: bool, default: false, memory: decreasing}
  - {name: train.attention, kind: categorical, choices: [eager, sdpa, flash], default: sdpa, memory: decreasing}
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree], default: unset, memory: none}
  - {name: NCCL_BUFFSIZE, kind: categorical, choices: [unset, 2097152, 8388608], default: unset, memory: small}
context: {train.batch_per_gpu: 32}
constraints:
  - {expr: "train.batch_per_gpu % train.micro_batch_size == 0", message: "micro-batch must divide the batch per GPU"}
throughput: {samples_per_step: "train.batch_per_gpu * 8"}
"""
    + _COMMON
)

_ATTENTION = {"eager": (1.45, 0.86), "sdpa": (1.0, 0.96), "flash": (0.9, 1.0)}
"""Activation memory factor and speed of each attention implementation."""


def _trap(rng: random.Random) -> tuple[Landscape, AnalyticNode]:
    params_b = math.exp(rng.uniform(math.log(3), math.log(9)))
    seq = rng.choice([2048, 4096])
    act = rng.uniform(0.9, 1.3) * params_b * seq / 4096
    logits = seq * rng.choice([32000, 50000, 64000]) * 6 / 2**30
    ckpt_mem, ckpt_time = rng.uniform(0.1, 0.2), rng.uniform(0.25, 0.35)
    mfu_max, half = rng.uniform(0.42, 0.55), rng.uniform(8000, 20000)
    adam_s = rng.uniform(2.0, 4.0) * params_b
    tree = rng.uniform(0.85, 0.95)

    def landscape(v: Mapping[str, Any]) -> Truth:
        m, ck, stage = v["train.micro_batch_size"], v["train.gradient_checkpointing"], v["train.zero_stage"]
        mem_f, speed = _ATTENTION[v["train.attention"]]
        per_sample = act * mem_f * (ckpt_mem if ck else 1.0) + logits
        peak = zero_static_gib(params_b, stage, v["train.optimizer_offload"]) + OVERHEAD_GIB + m * per_sample
        compute = compute_s(params_b, 32 * seq, mfu(m * seq, mfu_max, half)) / speed * (1 + ckpt_time * ck)
        busbw = NVLINK_BUSBW * (tree if v["NCCL_ALGO"] == "Tree" else 1.0)
        busbw *= {"unset": 1.0, 2097152: 0.95, 8388608: 1.02}[v["NCCL_BUFFSIZE"]]
        comm_gb = 2 * params_b * (2 if stage == 1 else 1) + (2 * 2 * params_b * 32 / m if stage == 3 else 0.0)
        exposed = max(0.0, comm_gb * GB / busbw - 0.8 * compute)
        step = compute + exposed + 0.04 * 32 / m + (adam_s if v["train.optimizer_offload"] else 0.0)
        return Truth(step, peak, check_time_factor=NVLINK_BUSBW / busbw)

    return landscape, AnalyticNode(startup_s=rng.uniform(90, 240), step_noise=rng.uniform(0.01, 0.03))


def _trap_check(inst: Instance, ex: Exact) -> bool:
    """The best needs checkpointing, and wins by 10% over every config without it."""
    if not ex.best_values.get("train.gradient_checkpointing"):
        return False
    without = exact(inst, where=lambda v: not v["train.gradient_checkpointing"])
    return without.best_throughput < 0.9 * ex.best_throughput


# ---------------------------------------------------------------------------------------------
# comm-bound
# ---------------------------------------------------------------------------------------------

_COMM = (
    """
name: synthetic-comm-bound
description: DDP across two 8-GPU nodes over TCP sockets; the gradient all-reduce dominates the step
command: train
parameters:
  - {name: train.micro_batch_size, kind: pow2, low: 1, high: 16, default: 4, memory: increasing}
  - {name: train.bucket_mb, kind: categorical, choices: [25, 50, 100, 200], default: 25, memory: small}
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree], default: unset, memory: none}
  - {name: NCCL_PROTO, kind: categorical, choices: [unset, Simple, LL128, LL], default: unset, memory: none}
  - {name: NCCL_SOCKET_NTHREADS, kind: categorical, choices: [unset, 1, 2, 4, 8, 16], default: unset, memory: none}
  - {name: NCCL_NSOCKS_PERTHREAD, kind: categorical, choices: [unset, 1, 2, 4, 8], default: unset, memory: none}
  - {name: NCCL_BUFFSIZE, kind: categorical, choices: [unset, 1048576, 4194304, 16777216], default: unset, memory: small}
context: {train.batch_per_gpu: 16}
constraints:
  - {expr: "train.batch_per_gpu % train.micro_batch_size == 0", message: "micro-batch must divide the batch per GPU"}
throughput: {samples_per_step: "train.batch_per_gpu * 16"}
"""
    + _COMMON
)


def _comm(rng: random.Random) -> tuple[Landscape, AnalyticNode]:
    params_b = rng.uniform(1.0, 3.0)
    link = rng.uniform(10, 25) * GB
    per_socket = rng.uniform(2.0, 4.0) * GB
    tree = rng.uniform(0.75, 1.3)
    ll128 = rng.uniform(0.85, 1.08)
    big_buffers = rng.uniform(0.98, 1.12)
    bucket_half = rng.uniform(5, 25)
    algo_auto, proto_auto = rng.uniform(0.94, 1.0), rng.uniform(0.96, 1.0)
    """How close NCCL's own choice of algorithm and protocol (the variables unset) comes to the best."""
    mfu_max, half = rng.uniform(0.35, 0.5), rng.uniform(2000, 8000)
    one_node = _one_node_comm(random.Random(f"comm-one-node:{tree}:{ll128}:{big_buffers}"), ll128, big_buffers)

    def landscape(v: Mapping[str, Any]) -> Truth:
        runs = effective(v)  # NCCL clamps the sockets to 64 per connection, and runs
        threads = 1 if runs["NCCL_SOCKET_NTHREADS"] == "unset" else runs["NCCL_SOCKET_NTHREADS"]
        socks = 1 if runs["NCCL_NSOCKS_PERTHREAD"] == "unset" else runs["NCCL_NSOCKS_PERTHREAD"]
        m, bucket = v["train.micro_batch_size"], v["train.bucket_mb"]
        bw = min(0.92 * link, per_socket * threads * socks)
        bw *= {"unset": max(1.0, tree) * algo_auto, "Ring": 1.0, "Tree": tree}[v["NCCL_ALGO"]]
        bw *= {"unset": max(1.0, ll128) * proto_auto, "Simple": 1.0, "LL128": ll128, "LL": 0.35}[v["NCCL_PROTO"]]
        bw *= {"unset": 1.0, 1048576: 0.85, 4194304: 1.0, 16777216: big_buffers}[v["NCCL_BUFFSIZE"]]
        bw *= bucket / (bucket + bucket_half)
        comm = 2 * 15 / 16 * 2 * params_b * GB / bw
        compute = compute_s(params_b, 16 * 2048, mfu(m * 2048, mfu_max, half)) * (1.03 if threads * socks > 16 else 1.0)
        hidden = 0.66 * compute * 0.9 * (1 - bucket / 400)
        step = compute + max(0.0, comm - hidden) + 0.01 * 16 / m
        peak = 16 * params_b * GB / 2**30 + OVERHEAD_GIB + m * 1.1 * params_b + 2 * bucket / 1024
        return Truth(step, peak, check_time_factor=_check_factor(one_node, v))

    return landscape, AnalyticNode(startup_s=rng.uniform(60, 150), step_noise=rng.uniform(0.01, 0.03), gpus=16)


def _one_node_comm(rng: random.Random, ll128: float, big_buffers: float) -> dict[str, dict[Any, float]]:
    """Bus bandwidth of one node's collectives (what the NCCL check measures) per NCCL value, relative
    to NCCL's defaults: within a node over NVLink, trees rarely beat rings, the protocols rank as they
    do between nodes give or take 5%, and the socket variables act only between nodes."""
    tree, ll128_node = rng.uniform(0.85, 1.0), ll128 * rng.uniform(0.95, 1.05)
    return {
        "NCCL_ALGO": {"unset": 1.0, "Ring": 1.0, "Tree": tree},
        "NCCL_PROTO": {
            "unset": 1.0,
            "Simple": 1.0 / max(1.0, ll128_node),
            "LL128": ll128_node / max(1.0, ll128_node),
            "LL": 0.45,
        },
        "NCCL_BUFFSIZE": {"unset": 1.0, 1048576: 0.9, 4194304: 1.0, 16777216: math.sqrt(big_buffers)},
    }


def _check_factor(bandwidth: Mapping[str, Mapping[Any, float]], v: Mapping[str, Any]) -> float:
    """``Truth.check_time_factor`` of ``v``: the inverse of its values' one-node bandwidth factors."""
    return 1.0 / math.prod(levels[v[name]] for name, levels in bandwidth.items())


def _comm_check(inst: Instance, ex: Exact) -> bool:
    """NCCL settings matter: the best is 25% faster than the best with every NCCL variable unset."""
    unset = exact(inst, where=lambda v: all(v[k] == "unset" for k in v if k.startswith("NCCL_")))
    return unset.best_throughput < ex.best_throughput / 1.25


# ---------------------------------------------------------------------------------------------
# flat-top
# ---------------------------------------------------------------------------------------------

_FLAT = (
    """
name: synthetic-flat-top
description: generation-heavy RL with colocated engines; a broad optimum under 6-10% step noise
command: train
parameters:
  - {name: rollout.max_num_seqs, kind: pow2, low: 32, high: 1024, default: 128, memory: none}
  - {name: rollout.gpu_memory_utilization, kind: categorical, choices: [0.5, 0.6, 0.7, 0.8, 0.9], default: 0.6, memory: increasing}
  - {name: rollout.tensor_parallel_size, kind: categorical, choices: [1, 2, 4], default: 2, memory: decreasing}
  - {name: train.micro_batch_size, kind: pow2, low: 1, high: 16, default: 2, memory: increasing}
  - {name: train.offload, kind: bool, default: true, memory: decreasing}
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree], default: unset, memory: none}
  - {name: NCCL_PROTO, kind: categorical, choices: [unset, Simple, LL128], default: unset, memory: none}
throughput: {samples_per_step: 1024}
"""
    + _COMMON
)


def _plateau(index: int, top: tuple[int, int], slope: float) -> float:
    """1.0 on the plateau (choice positions ``top[0]..top[1]``), falling by ``slope`` per position off it."""
    off = max(top[0] - index, index - top[1], 0)
    return max(0.3, 1.0 - slope * off)


def _flat(rng: random.Random) -> tuple[Landscape, AnalyticNode]:
    seqs_top = rng.randint(2, 4)
    tp_top = rng.choice([(0, 1), (1, 2), (1, 1)])
    micro_top = rng.randint(2, 3)
    slopes = [rng.uniform(0.06, 0.12) for _ in range(4)]
    kv_sat = rng.choice([0.7, 0.8])
    static, act = rng.uniform(14, 20), rng.uniform(2.5, 4.0)
    gen_s, train_s = rng.uniform(60, 120), rng.uniform(30, 50)
    nccl = {k: rng.uniform(0.997, 1.003) for k in ("unset", "Ring", "Tree", "Simple", "LL128")}
    seq_levels, tps = (32, 64, 128, 256, 512, 1024), (1, 2, 4)
    one = random.Random(f"flat-one-node:{sorted(nccl.items())}")
    one_node = {
        "NCCL_ALGO": {"unset": 1.0, "Ring": one.uniform(0.97, 1.0), "Tree": one.uniform(0.85, 0.95)},
        "NCCL_PROTO": {"unset": 1.0, "Simple": one.uniform(0.95, 1.0), "LL128": one.uniform(0.98, 1.05)},
    }
    """What the NCCL check measures: one node's collectives do change with the settings, but the
    job's step spends well under 1% in them (``nccl``)."""

    def landscape(v: Mapping[str, Any]) -> Truth:
        util, tp, m = (
            v["rollout.gpu_memory_utilization"],
            v["rollout.tensor_parallel_size"],
            v["train.micro_batch_size"],
        )
        gen = gen_s / (
            _plateau(seq_levels.index(v["rollout.max_num_seqs"]), (seqs_top, seqs_top + 1), slopes[0])
            * _plateau(tps.index(tp), tp_top, slopes[1])
            * (1.0 - slopes[2] * max(0.0, kv_sat - util) / 0.1)
        )
        train = train_s / _plateau(int(math.log2(m)), (micro_top, micro_top + 1), slopes[3])
        train *= 1.4 if v["train.offload"] else 1.0
        step = (gen + train) / (nccl[v["NCCL_ALGO"]] * nccl[v["NCCL_PROTO"]])
        residual = (1.0 + 0.5 * util) * (4 / tp) ** 0.5
        pool = util * 79.15 + 1.0  # the engines' pool while they generate
        trainer = (6 if v["train.offload"] else static) + OVERHEAD_GIB + m * act + residual + 8 * util
        return Truth(
            step,
            max(pool, trainer),
            phase_peak_gib={"generate": pool, "policy_train": trainer},
            check_time_factor=_check_factor(one_node, v),
        )

    node = AnalyticNode(
        startup_s=rng.uniform(150, 300), step_noise=rng.uniform(0.06, 0.10), run_noise=rng.uniform(0.02, 0.04)
    )
    return landscape, node


def _flat_check(inst: Instance, ex: Exact) -> bool:
    """A broad top: at least 8 stable configs within 2% of the best."""
    return ex.within >= 8


# ---------------------------------------------------------------------------------------------
# narrow-wall
# ---------------------------------------------------------------------------------------------

_WALL = (
    """
name: synthetic-narrow-wall
description: a 26-38B model on one 8-GPU node with ZeRO; most configs run out of memory
command: train
parameters:
  - {name: train.micro_batch_size, kind: pow2, low: 1, high: 8, default: 1, memory: increasing}
  - {name: train.packing_length, kind: categorical, choices: [2048, 4096, 8192, 16384], default: 8192, memory: increasing}
  - {name: train.gradient_checkpointing, kind: bool, default: true, memory: decreasing}
  - {name: train.optimizer_offload, kind: bool, default: true, memory: decreasing}
  - {name: train.zero_stage, kind: categorical, choices: [2, 3], default: 3, memory: decreasing}
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree], default: unset, memory: none}
  - {name: NCCL_BUFFSIZE, kind: categorical, choices: [unset, 2097152, 8388608], default: unset, memory: small}
context: {train.tokens_per_gpu: 65536}
constraints:
  - {expr: "train.micro_batch_size * train.packing_length <= train.tokens_per_gpu", message: "a micro-batch holds at most the step's tokens"}
throughput: {samples_per_step: "train.tokens_per_gpu * 8"}
"""
    + _COMMON
)


def _wall(rng: random.Random) -> tuple[Landscape, AnalyticNode]:
    params_b = rng.uniform(26, 38)
    act_ckpt = rng.uniform(0.6, 1.0) * params_b / 30
    no_ckpt = rng.uniform(5, 8)
    logits = rng.uniform(0.6, 0.9)
    mfu_max, half = rng.uniform(0.45, 0.55), rng.uniform(4000, 12000)
    adam_s = rng.uniform(2.0, 4.0) * params_b
    tree = rng.uniform(0.9, 1.02)

    def landscape(v: Mapping[str, Any]) -> Truth:
        m, pack, ck = v["train.micro_batch_size"], v["train.packing_length"], v["train.gradient_checkpointing"]
        stage, opt_off = v["train.zero_stage"], v["train.optimizer_offload"]
        tokens = m * pack
        peak = zero_static_gib(params_b, stage, opt_off) + OVERHEAD_GIB
        peak += tokens / 1000 * (act_ckpt * (1 if ck else no_ckpt) + logits)
        compute = compute_s(params_b, 65536, mfu(tokens, mfu_max, half)) * (1.3 if ck else 1.0)
        micro_steps = 65536 / tokens
        busbw = NVLINK_BUSBW * (tree if v["NCCL_ALGO"] == "Tree" else 1.0)
        busbw *= {"unset": 1.0, 2097152: 0.97, 8388608: 1.01}[v["NCCL_BUFFSIZE"]]
        comm = (micro_steps * 2 * 2 * params_b if stage == 3 else 2 * params_b) * GB / busbw
        step = compute + max(0.0, comm - 0.8 * compute) + 0.05 * micro_steps
        step += adam_s if opt_off else 0.0
        return Truth(step, peak, check_time_factor=NVLINK_BUSBW / busbw)

    return landscape, AnalyticNode(startup_s=rng.uniform(240, 480), step_noise=rng.uniform(0.01, 0.03))


def _wall_check(inst: Instance, ex: Exact) -> bool:
    """Narrow and near the wall: the best uses at least 80% of the GPU, at most 30% of configs are stable."""
    return ex.best.peak_gib >= 0.8 * inst.node.capacity_gib and ex.stable <= 0.3 * ex.admissible


# ---------------------------------------------------------------------------------------------
# hang-region
# ---------------------------------------------------------------------------------------------

_HANG = (
    """
name: synthetic-hang-region
description: an all-to-all heavy job on an NVSwitch node; some NCCL combinations hang next to the fastest ones
command: train
parameters:
  - {name: train.micro_batch_size, kind: pow2, low: 1, high: 16, default: 2, memory: increasing}
  - {name: train.gradient_checkpointing, kind: bool, default: true, memory: decreasing}
  - {name: NCCL_ALGO, kind: categorical, choices: [unset, Ring, Tree, NVLS], default: unset, memory: none}
  - {name: NCCL_PROTO, kind: categorical, choices: [unset, Simple, LL128, LL], default: unset, memory: none}
  - {name: NCCL_MIN_NCHANNELS, kind: categorical, choices: [unset, 4, 8, 16, 32], default: unset, memory: none}
  - {name: NCCL_P2P_LEVEL, kind: categorical, choices: [unset, LOC, NVL, SYS], default: unset, memory: none}
  - {name: NCCL_CUMEM_ENABLE, kind: categorical, choices: [unset, 0, 1], default: unset, memory: small}
context: {train.batch_per_gpu: 16}
constraints:
  - {expr: "train.batch_per_gpu % train.micro_batch_size == 0", message: "micro-batch must divide the batch per GPU"}
throughput: {samples_per_step: "train.batch_per_gpu * 8"}
"""
    + _COMMON
)


def _hang_rule(v: Mapping[str, Any]) -> tuple[str | None, float, str, bool]:
    """(deterministic failure, chance of a hang per step, why, whether NCCL's settings alone cause
    it: the collectives without the trainer meet it too) of the NCCL settings."""
    if v["NCCL_ALGO"] == "NVLS" and v["NCCL_CUMEM_ENABLE"] == 0:
        return "hang", 0.0, "NVLS without cuMem buffers waits forever for its multicast setup", True
    if v["NCCL_P2P_LEVEL"] == "LOC" and v["NCCL_MIN_NCHANNELS"] in (16, 32):
        return "hang", 0.0, "SHM transport with many channels deadlocks in the first all-gather", True
    if v["NCCL_ALGO"] == "Tree" and v["NCCL_PROTO"] == "LL128":
        return None, 0.5, "LL128 on trees hangs at random", True
    if v["NCCL_CUMEM_ENABLE"] == 1:
        return None, 0.15, "cuMem buffers next to colocated engines hang at random", False
    return None, 0.0, "", False


def _hang(rng: random.Random) -> tuple[Landscape, AnalyticNode]:
    params_b, comm_ratio = rng.uniform(5, 9), rng.uniform(0.8, 1.4)
    nvls, ll128 = rng.uniform(1.15, 1.35), rng.uniform(1.0, 1.02)
    ch32 = rng.uniform(0.99, 1.01)
    act, mfu_max, half = rng.uniform(0.6, 1.0) * params_b, rng.uniform(0.4, 0.5), rng.uniform(4000, 12000)
    reference = compute_s(params_b, 16 * 4096, mfu(8 * 4096, mfu_max, half))
    """The all-to-all traffic takes about ``comm_ratio`` of a well-batched step's compute at NCCL's defaults."""

    def landscape(v: Mapping[str, Any]) -> Truth:
        failure, hang_p, why, alone = _hang_rule(v)
        nccl = (failure, hang_p) if alone else (None, 0.0)
        m, ck = v["train.micro_batch_size"], v["train.gradient_checkpointing"]
        busbw = NVLINK_BUSBW * {"unset": 1.0, "Ring": 0.97, "Tree": 0.9, "NVLS": nvls}[v["NCCL_ALGO"]]
        busbw *= {"unset": 1.0, "Simple": 1.0, "LL128": ll128, "LL": 0.45}[v["NCCL_PROTO"]]
        busbw *= {"unset": 1.0, 4: 0.55, 8: 0.85, 16: 1.01, 32: ch32}[v["NCCL_MIN_NCHANNELS"]]
        busbw *= {"unset": 1.0, "LOC": 0.25, "NVL": 1.0, "SYS": 0.98}[v["NCCL_P2P_LEVEL"]]
        compute = compute_s(params_b, 16 * 4096, mfu(m * 4096, mfu_max, half)) * (1.3 if ck else 1.0)
        comm = comm_ratio * reference * NVLINK_BUSBW / busbw
        step = compute + max(0.0, comm - 0.3 * compute) + 0.03 * 16 / m
        peak = zero_static_gib(params_b, 3, False) + OVERHEAD_GIB + m * act * (0.15 if ck else 1.0)
        peak += 2.0 if v["NCCL_ALGO"] == "NVLS" else 0.0
        if peak >= 0.92 * 79.15 and peak <= 79.15:
            if failure is None and hang_p < 0.3:
                why = "within 8% of the memory wall a rank stalls in the allocator's retries"
            hang_p = max(hang_p, 0.3)
        return Truth(
            step,
            peak,
            failure,
            hang_p,
            why,
            nccl_failure=nccl[0],
            nccl_hang_p=nccl[1],
            check_time_factor=NVLINK_BUSBW / busbw,
        )

    return landscape, AnalyticNode(startup_s=rng.uniform(90, 200), step_noise=rng.uniform(0.01, 0.03))


def _hang_check(inst: Instance, ex: Exact) -> bool:
    """The best uses NVLS, and one NCCL change away from it a run hangs."""
    if ex.best_values.get("NCCL_ALGO") != "NVLS":
        return False
    for p in inst.space.parameters:
        if p.name.startswith("NCCL_"):
            for c in p.choices:
                t = inst.landscape({**ex.best_values, p.name: c})
                if t.failure == "hang" or t.hang_p > 0:
                    return True
    return False


# ---------------------------------------------------------------------------------------------
# the registry
# ---------------------------------------------------------------------------------------------

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "enabler-trap",
            "checkpointing is slower per step but frees room for a 4-8x micro-batch",
            _TRAP,
            _trap,
            _trap_check,
        ),
        Family(
            "comm-bound",
            "two nodes over TCP: NCCL algorithm, protocol, sockets and buffers decide",
            _COMM,
            _comm,
            _comm_check,
        ),
        Family("flat-top", "a broad optimum under 6-10% step noise", _FLAT, _flat, _flat_check),
        Family(
            "narrow-wall",
            "most configs run out of memory; the best sits just under the wall",
            _WALL,
            _wall,
            _wall_check,
        ),
        Family("hang-region", "hanging NCCL combinations next to the fastest settings", _HANG, _hang, _hang_check),
    )
}
MAX_DRAWS = 200
MAX_TARGET_SHARE = 0.02
"""Every instance keeps its target region (stable configs within 2% of the best) to at most this
share of the rule-satisfying configs: random search then needs 35 trials or more in median, as on a
real space of several parameters, so that a ratio against it measures the search, not luck."""


def instance(name: str, seed: int) -> tuple[Instance, Exact]:
    """Instance ``seed`` of family ``name``: the first draw (of a stream fixed by the seed) that has
    the family's shape and a small target region (``MAX_TARGET_SHARE``), with its exact landscape."""
    family = FAMILIES[name]
    space = parse_space(family.space_yaml, source=f"synthetic:{name}", label=f"synthetic:{name}")
    rng = random.Random(f"{name}:{seed}")
    for _ in range(MAX_DRAWS):
        landscape, node = family.build(rng)
        inst = Instance(name, seed, space, landscape, node)
        ex = exact(inst)
        if ex.stable and ex.p <= MAX_TARGET_SHARE and family.check(inst, ex):
            return inst, ex
    raise RuntimeError(f"family {name}: no instance with its shape in {MAX_DRAWS} draws (seed {seed})")
