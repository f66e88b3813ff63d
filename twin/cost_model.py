"""The cost model of one 8xH100 node running SkyRL's colocated GRPO (FSDP2 trainer + vLLM engines).

Every number that shapes the twin's behaviour is a named constant below, with where it comes from.
``(assumption)`` marks a value chosen to be plausible where no public measurement exists; the
README lists them. Units: bytes, seconds, GiB (2**30 bytes) where a name ends in ``_gib``.

The functions are pure: a :class:`~twin.config.SimConfig` in, phase times (modelled
seconds, unscaled) and per-GPU memory out. ``evaluate`` turns them into a run: noise, the first
step, failures and their timing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import TYPE_CHECKING

from twin.nccl_env import NcclSettings

if TYPE_CHECKING:  # pragma: no cover
    from twin.config import SimConfig

GIB = float(1 << 30)

# --------------------------------------------------------------------------------------------
# The node: an HGX H100 SXM5 80GB board (8 GPUs on NVSwitch, NVLink 4; the GPU count and the
# models' shapes are in shapes.py)
# --------------------------------------------------------------------------------------------
H100_CAPACITY_GIB = 79.15
"""What CUDA reports as total capacity on an H100 80GB HBM3 (CUDA OOM messages on this card read
``GPU 0 has a total capacity of 79.15 GiB``; NVML reports 81559 MiB, part of it reserved)."""
H100_BF16_DENSE_FLOPS = 989e12
"""NVIDIA H100 SXM5 datasheet: 989 TFLOPS dense BF16 Tensor Core (1,979 with sparsity)."""
H100_HBM_BYTES_PER_S = 3.35e12
"""NVIDIA H100 SXM5 datasheet: HBM3, 3.35 TB/s."""
HBM_EFFICIENCY = 0.8
"""Fraction of HBM bandwidth a memory-bound decode step reaches (typical of vLLM on H100)."""
H100_SMS = 132
"""Streaming multiprocessors on an H100 SXM5 (each NCCL channel occupies one while it runs)."""
NVLINK_ONE_WAY_BYTES_PER_S = 450e9
"""NVLink 4: 18 links x 25 GB/s per direction = 450 GB/s each way (900 GB/s bidirectional)."""
RING_BUSBW_BYTES_PER_S = 370e9
"""Bus bandwidth of NCCL ring all_gather/reduce_scatter on 8xH100 SXM, large messages, as
nccl-tests reports it (~360-380 GB/s): about 80% of one-way NVLink bandwidth."""
PER_CHANNEL_BYTES_PER_S = 24e9
"""What one NCCL ring channel moves on NVLink 4 (~20-25 GB/s); ~16 channels saturate the links."""
DEFAULT_NCHANNELS = 16
"""Channels NCCL picks for rings on an 8xH100 NVSwitch node."""
NVLS_SPEEDUP = 1.3
"""NVLink SHARP (NVSwitch multicast and in-switch reduction) over ring on H100: ~480 vs ~370 GB/s
bus bandwidth in nccl-tests."""
PROTOCOL_FACTOR = {"Simple": 1.0, "LL128": 0.92, "LL": 0.3}
"""Large-message bandwidth per protocol relative to Simple. LL128: NCCL's tuning model scales ring
bandwidth by 0.92 on NVLink with 8 GPUs (src/graph/tuning.cc); LL: half the line carries flags
and NCCL caps its bandwidth (``llMaxBw``), so it is only good for small messages."""
TREE_FACTOR = 0.85
"""NCCL's tuning model: tree all-reduce at 0.85 of the ring's bandwidth within a node."""
SHM_BUSBW_BYTES_PER_S = 20e9
"""``NCCL_P2P_DISABLE=1``: the SHM transport stages every chunk through host memory (assumption:
~20 GB/s bus bandwidth on a dual-socket host)."""
SOCKET_BUSBW_BYTES_PER_S = 3e9
"""P2P and SHM both disabled: NCCL's socket transport over the host TCP stack (assumption)."""
PCIE_BYTES_PER_S = 16e9
"""Host<->device copies per GPU while all eight copy at once: PCIe Gen5 x16 is 64 GB/s raw, two GPUs
share a PCIe switch on HGX boards and all share host memory (assumption for the effective rate)."""
NODE_INTERFACES = ("lo", "eth0", "ib0", "ib1", "ib2", "ib3", "docker0")
"""Network interfaces of the modelled node (for ``NCCL_SOCKET_IFNAME``)."""
DISK_BYTES_PER_S = 2e9
"""Checkpoint writes to local NVMe (assumption)."""
CPU_ADAM_S_PER_PARAM = 5e-9
"""torch's CPU Adam step per parameter with eight trainer processes sharing the host (assumption:
~0.2 G params/s per process)."""

# --------------------------------------------------------------------------------------------
# The workload: SkyRL-SQL-653 (text-to-SQL, multi-turn with SQL execution feedback)
# --------------------------------------------------------------------------------------------
DATASET_PROMPTS = 653
"""NovaSky-AI/SkyRL-SQL-653-data-newfmt: 653 training prompts (the data set's name)."""
VALIDATION_PROMPTS = 1034
"""Evaluation questions (assumption: the size of the Spider dev set)."""
PROMPT_MEDIAN_TOKENS = 1400.0
PROMPT_SIGMA = 0.55
"""Prompt tokens (database schema + question) are lognormal with this median and sigma
(assumption: p90 ~2.8k, p99 ~5k, longest of 653 ~7k tokens)."""
PROMPT_LONGEST_TOKENS = 7000.0
"""The data set's longest prompt (assumption, as above): the prompt filter cannot keep a longer one."""
GEN_MEAN_TOKENS_PER_TURN = 340.0
"""Tokens the policy generates per turn on average: reasoning + one SQL query (assumption)."""
GEN_TAIL_TOKENS_PER_TURN = 1200.0
"""A long turn (p99), before ``max_generate_length`` caps it (assumption)."""
OBS_TOKENS_PER_TURN = 200.0
"""SQL execution feedback appended after each turn but the last (assumption)."""
TURNS_MEAN = 2.0
TURNS_TAIL = 4
"""Turns a trajectory takes on average / for the longest trajectories of a batch (assumption),
never more than ``generator.max_turns``."""
COMPANION_LENGTH_FACTOR = 1.3
"""With sample packing, the micro-batch that holds a step's longest sequence packs it with
sequences ~1.3x the mean length (assumption)."""
STEP_TAIL_ALPHA = 4.5
STEP_TAIL_FLOOR = 0.75
"""How a step's longest trajectory varies from step to step: the typical longest (``response_peak``)
times a Pareto factor ``STEP_TAIL_FLOOR * (1 - u) ** (-1 / STEP_TAIL_ALPHA)`` (assumption: median
0.87, p90 1.25, p99 2.1, the longest of 200 steps ~2.2), never beyond what the config allows. A
config measured on its first few steps has usually seen ~0.9-1.1 of it; a long run reaches about
twice that, so ~10-15% headroom on the first steps is not enough for 200."""
ENV_STEP_TAIL_S = 0.5
"""Slowest SQL execution per turn in a batch (assumption)."""

# --------------------------------------------------------------------------------------------
# Training-side efficiency
# --------------------------------------------------------------------------------------------
TRAIN_MFU_MAX = 0.50
FWD_MFU_MAX = 0.55
"""Model FLOPs utilisation reached on large micro-batches (7B dense, bf16, flash attention,
FSDP2 on H100: 45-55% is typical)."""
MFU_HALF_TOKENS = 4000.0
"""Tokens per micro-batch at which MFU is half its maximum: small micro-batches leave the GPU
under-used (kernel launch and small-GEMM efficiency; assumption)."""
FSDP_OVERLAP = 0.7
"""Fraction of FSDP all-gather/reduce-scatter time hidden behind compute (prefetching), up to
the compute time itself."""
MICRO_BATCH_OVERHEAD_S = 0.02
"""Python, dispatch and stream sync per micro-batch (assumption)."""
OFFLOAD_OVERLAP = 0.2
"""Fraction of FSDP2 CPU-offload copies hidden behind compute (assumption: copies gate the
all-gathers)."""
ATTN_FLOPS_FACTOR = 2.0
"""Attention FLOPs per token per layer: 2 x 2 x hidden x context/2 (causal), relative to the dense
FLOPs."""

# --------------------------------------------------------------------------------------------
# Generation (vLLM engines, colocated)
# --------------------------------------------------------------------------------------------
DECODE_MFU = 0.35
PREFILL_MFU = 0.5
VLLM_ACTIVATION_GIB_PER_8K_TOKENS = 1.5
"""vLLM's profiled activation peak for ``max_num_batched_tokens`` = 8192 on a 7B model (assumption,
scaled linearly with the token budget and hidden size)."""
VLLM_NON_TORCH_GIB = 0.5
"""NCCL and CUDA memory vLLM counts outside the torch allocator (assumption)."""
DECODE_STEP_OVERHEAD_S = {True: 0.004, False: 0.0015}
"""Scheduler and kernel-launch time per decode step with ``enforce_eager`` true/false (CUDA graphs
remove most launch overhead; assumption)."""
CUDA_GRAPH_CAPTURE_S = 25.0
TP_ALLREDUCE_LATENCY_S = {"p2p": 10e-6, "shm": 40e-6, "socket": 150e-6}
"""One small tensor-parallel all-reduce in a decode step: vLLM's custom all-reduce over NVLink
(~10 us); without P2P it falls back to NCCL over SHM or sockets (assumption)."""
CONTEXT_IN_FLIGHT_FRACTION = 0.6
"""Average KV-cache context of a sequence while it decodes, as a fraction of its final length."""

# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------
CUDA_CONTEXT_GIB = 0.6
"""CUDA context + cuBLAS workspaces per process on a GPU (the trainer and the engine share each GPU)."""
VLLM_SLEEP_RESIDUAL_GIB = 1.2
"""What a sleeping vLLM engine keeps on the GPU (sleep level 1 offloads weights and frees the KV
cache; allocator pools and non-torch memory remain; assumption)."""
ALLOCATOR_OVERHEAD = 1.06
"""PyTorch caching allocator: reserved / allocated on transient buffers (fragmentation)."""
LOGITS_COPIES_TRAIN = 3
"""fp32 buffers of micro-batch x sequence x vocabulary alive at the training peak: the logits,
the log-softmax kept for backward and the logits' gradient."""
LOGITS_COPIES_FWD = 2
"""In the forward-only pass: the fp32 logits and their log-softmax."""
NCCL_BUFFSIZE_DEFAULT = 4 << 20
"""NCCL_BUFFSIZE default: 4 MiB (NCCL documentation)."""
NCCL_PROTOCOL_BUFFER_FACTOR = 1.3
"""LL and LL128 buffers on top of the Simple protocol's (assumption)."""
NCCL_COMMUNICATORS = 2
"""Communicators per trainer GPU: the FSDP group and the weight-sync group with the engines."""
NVLS_BUFFER_GIB = 2.0
"""Device memory NVLink SHARP buffers take per GPU (assumption; NCCL notes NVLS's memory cost)."""
CUMEM_COLOCATED_EXTRA_GIB = 6.0
"""``NCCL_CUMEM_ENABLE=1`` with colocated engines: NCCL's cuMem-backed buffers of the engines are not
released when they sleep (vLLM sets NCCL_CUMEM_ENABLE=0 for this reason; the amount is an assumption)."""
HANG_BAND_FRAC = 0.96
"""Above this fraction of capacity a rank may stall inside a collective instead of raising OOM
(allocator retries, NCCL failing to register buffers; assumption)."""
HANG_P_AT_BAND = 0.15
HANG_P_AT_WALL = 0.6
"""Chance per step that a rank in the band stalls, at the band's edge and at the wall (assumption)."""

# --------------------------------------------------------------------------------------------
# Fixed times
# --------------------------------------------------------------------------------------------
RAY_INIT_S = 6.0
DATASET_LOAD_S = 3.0
INIT_WEIGHT_SYNC_STATE_S = 4.0
"""NCCL group creation between the trainer's rank 0 and every engine worker."""
LOAD_CHECKPOINT_PROBE_S = 0.2
FIRST_STEP_TRAIN_FACTOR = 1.25
FIRST_STEP_GENERATE_FACTOR = 1.1
FIRST_STEP_EXTRA_S = 8.0
"""The first step is slower: allocator warm-up, FSDP lazy init, the engines' first wake-up."""
NOISE_SIGMA = 0.03
"""Run-to-run noise of a phase's duration (lognormal sigma)."""
WEIGHT_SYNC_PER_TENSOR_S = 0.004
"""Per-tensor overhead of SkyRL's NCCL weight sync (one broadcast per parameter tensor; assumption)."""


# --------------------------------------------------------------------------------------------
# Token statistics
# --------------------------------------------------------------------------------------------
_NORMAL = NormalDist()


@dataclass(frozen=True)
class TokenProfile:
    """Sequence lengths of a step's batch (tokens)."""

    kept_prompts: int
    """Training prompts left after prompts longer than ``trainer.max_prompt_length`` are dropped."""
    prompt_mean: float
    prompt_peak: float
    response_mean: float
    response_peak: float
    seq_mean: float
    seq_peak: float
    seq_cap: float
    """``generator.max_input_length + max_generate_length``: no trajectory grows beyond it."""
    turns_tail: int
    gen_tail: float
    response_cap: float = 0.0
    """The longest response the config allows: ``max_turns`` turns of ``max_generate_length`` tokens
    with the observations between them, within ``seq_cap`` after the longest prompt."""
    prompt_cap: float = 0.0
    """The longest prompt the filter keeps (``trainer.max_prompt_length``, at most the data's longest)."""

    @property
    def seq_worst(self) -> float:
        """The longest sequence the config allows: the longest prompt plus the longest response."""
        return min(self.prompt_cap + self.response_cap, self.seq_cap)


@lru_cache(maxsize=4096)
def _prompt_stats(max_prompt: int, batch: int) -> tuple[int, float, float]:
    """(kept prompts, mean, peak-of-a-batch) of the lognormal prompt lengths cut at ``max_prompt``."""
    mu, s = math.log(PROMPT_MEDIAN_TOKENS), PROMPT_SIGMA
    z_cut = (math.log(max(max_prompt, 1)) - mu) / s
    kept_frac = _NORMAL.cdf(z_cut)
    kept = int(DATASET_PROMPTS * kept_frac)
    # Mean of a lognormal truncated above: E[X | X <= c] = e^(mu + s^2/2) * Phi(z - s) / Phi(z).
    mean = math.exp(mu + s * s / 2) * _NORMAL.cdf(z_cut - s) / max(kept_frac, 1e-12)
    # The longest prompt among `batch` draws: quantile 1 - 1/(batch+1) of the kept distribution.
    q = kept_frac * (1.0 - 1.0 / (batch + 1))
    peak = math.exp(mu + s * _NORMAL.inv_cdf(min(max(q, 1e-9), 1 - 1e-12)))
    return kept, mean, min(peak, float(max_prompt))


def token_profile(cfg: SimConfig) -> TokenProfile:
    """Sequence lengths implied by the prompt filter, turns and generation limits."""
    kept, p_mean, p_peak = _prompt_stats(cfg.max_prompt_length, max(cfg.train_batch_size, 1))
    turns_mean = min(float(cfg.max_turns), TURNS_MEAN)
    turns_tail = min(cfg.max_turns, TURNS_TAIL)
    gen_mean = min(float(cfg.max_generate_length), GEN_MEAN_TOKENS_PER_TURN)
    gen_tail = min(float(cfg.max_generate_length), GEN_TAIL_TOKENS_PER_TURN)
    r_mean = turns_mean * gen_mean + (turns_mean - 1) * OBS_TOKENS_PER_TURN
    r_peak = turns_tail * gen_tail + (turns_tail - 1) * OBS_TOKENS_PER_TURN
    cap = float(cfg.max_input_length + cfg.max_generate_length)
    prompt_cap = min(float(cfg.max_prompt_length), PROMPT_LONGEST_TOKENS)
    r_cap = cfg.max_turns * float(cfg.max_generate_length) + (cfg.max_turns - 1) * OBS_TOKENS_PER_TURN
    if cfg.forced_longest:  # every turn runs to the cap, for as many turns as the config allows
        turns_tail, gen_tail = cfg.max_turns, float(cfg.max_generate_length)
        r_mean = r_peak = min(r_cap, cap - p_mean)
    return TokenProfile(
        kept_prompts=kept,
        prompt_mean=p_mean,
        prompt_peak=p_peak,
        response_mean=r_mean,
        response_peak=r_peak,
        seq_mean=min(p_mean + r_mean, cap),
        seq_peak=min(p_peak + r_peak, cap),
        seq_cap=cap,
        turns_tail=turns_tail,
        gen_tail=gen_tail,
        response_cap=max(0.0, min(r_cap, cap - prompt_cap)),
        prompt_cap=prompt_cap,
    )


def step_tail_factor(u: float) -> float:
    """A step's longest response over the typical longest, for a uniform draw ``u`` (``STEP_TAIL_*``)."""
    return STEP_TAIL_FLOOR * (1.0 - min(max(u, 0.0), 1.0 - 1e-12)) ** (-1.0 / STEP_TAIL_ALPHA)


# --------------------------------------------------------------------------------------------
# Communication
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NcclFailure:
    """NCCL refuses to run: what it prints and returns."""

    warn: str
    error: str
    """ncclResult_t text as PyTorch prints it (``invalid usage``)."""
    function: str | None = None


@dataclass(frozen=True)
class CommModel:
    """How collectives perform on the modelled node under the NCCL settings."""

    busbw: Mapping[str, float]
    """Bytes/s of bus bandwidth per NCCL function (AllGather, ReduceScatter, AllReduce, Broadcast)."""
    choice: Mapping[str, tuple[str, str]]
    """(algorithm, protocol) NCCL picks per function."""
    transport: str
    """``p2p``, ``shm`` or ``socket``."""
    nvls: bool
    channels: int
    buffers_gib: float
    """Device memory NCCL's buffers take per trainer GPU (NVLS included)."""
    sm_steal: float
    """Extra SM share the channels take from compute while collectives run."""
    failure: NcclFailure | None = None
    cumem: bool = False


_DTYPE = {
    "Broadcast": "ncclFloat32",
    "Reduce": "ncclFloat32",
    "AllGather": "ncclBfloat16",
    "ReduceScatter": "ncclFloat32",
    "AllReduce": "ncclFloat32",
}
_FIRST_USE = ("Broadcast", "AllGather", "ReduceScatter", "AllReduce")
"""Order in which the trainer first calls each collective (model init broadcasts, then FSDP)."""


def _ifname_matches(spec: str) -> bool:
    """Whether ``NCCL_SOCKET_IFNAME`` selects any interface of the node (``^`` excludes, ``=`` exact)."""
    exclude = spec.startswith("^")
    body = spec[1:] if exclude else spec
    exact = body.startswith("=")
    body = body[1:] if exact else body
    names = [n.strip() for n in body.split(",") if n.strip()]

    def hit(iface: str) -> bool:
        return any(iface == n if exact else iface.startswith(n) for n in names)

    return any((not hit(i)) if exclude else hit(i) for i in NODE_INTERFACES)


def comm_model(nccl: NcclSettings, n_gpus: int) -> CommModel:
    """Algorithm/protocol choice, bandwidth and memory of NCCL on the node, or the error NCCL raises."""
    cumem = bool(nccl.cumem_enable)
    if nccl.p2p_disable and nccl.shm_disable:
        transport, link = "socket", SOCKET_BUSBW_BYTES_PER_S
    elif nccl.p2p_disable:
        transport, link = "shm", SHM_BUSBW_BYTES_PER_S
    else:
        transport, link = "p2p", RING_BUSBW_BYTES_PER_S
    channels = DEFAULT_NCHANNELS
    if nccl.min_nchannels is not None and nccl.min_nchannels > 0:
        channels = max(channels, nccl.min_nchannels)
    if nccl.max_nchannels is not None and nccl.max_nchannels > 0:
        channels = min(channels, nccl.max_nchannels)
    channels = max(1, min(channels, 64))
    buff = nccl.buffsize_bytes or NCCL_BUFFSIZE_DEFAULT
    buff_factor = min(1.05, max(0.85, (buff / NCCL_BUFFSIZE_DEFAULT) ** 0.05))
    ring_bw = min(link, channels * PER_CHANNEL_BYTES_PER_S) * buff_factor if transport == "p2p" else link * buff_factor
    nvls_ok = nccl.nvls_enable != 0 and cumem and transport == "p2p" and n_gpus >= 2
    available = {
        "Broadcast": {"Ring"},
        "Reduce": {"Ring"},
        "AllGather": {"Ring"} | ({"NVLS"} if nvls_ok else set()),
        "ReduceScatter": {"Ring"} | ({"NVLS"} if nvls_ok else set()),
        "AllReduce": {"Ring", "Tree"} | ({"NVLS"} if nvls_ok else set()),
    }
    failure: NcclFailure | None = None
    if nccl.problems:
        p = nccl.problems[0]
        failure = NcclFailure(p.warn, p.error)
    elif nccl.socket_ifname and not _ifname_matches(nccl.socket_ifname):
        failure = NcclFailure("Bootstrap : no socket interface found", "invalid usage")
    busbw: dict[str, float] = {}
    choice: dict[str, tuple[str, str]] = {}
    for fn in _FIRST_USE:
        algos, protos = nccl.allowed(fn)
        best: tuple[float, str, str] | None = None
        for a in sorted(available[fn] & algos):
            for p in sorted(protos):
                if a == "NVLS" and p != "Simple":
                    continue
                if a == "NVLS":
                    bw = RING_BUSBW_BYTES_PER_S * NVLS_SPEEDUP
                elif a == "Tree":
                    bw = ring_bw * TREE_FACTOR * PROTOCOL_FACTOR[p]
                else:
                    bw = ring_bw * PROTOCOL_FACTOR[p]
                if best is None or bw > best[0]:
                    best = (bw, a, p)
        if best is None:
            if failure is None:
                algo_txt = f" NCCL_ALGO was set to {nccl.algo_env}." if nccl.algo_env else ""
                proto_txt = f" NCCL_PROTO was set to {nccl.proto_env}." if nccl.proto_env else ""
                failure = NcclFailure(
                    f"No algorithm/protocol available for function {fn} with datatype {_DTYPE[fn]}.{algo_txt}{proto_txt}",
                    "invalid usage" if (nccl.algo_env or nccl.proto_env) else "internal error",
                    fn,
                )
            busbw[fn] = ring_bw
            choice[fn] = ("Ring", "Simple")
        else:
            busbw[fn] = best[0]
            choice[fn] = (best[1], best[2])
    nvls_used = any(a == "NVLS" for a, _ in choice.values())
    buffers = NCCL_COMMUNICATORS * channels * 2 * buff * NCCL_PROTOCOL_BUFFER_FACTOR / GIB
    if nvls_used:
        buffers += NVLS_BUFFER_GIB
    extra_channels = max(0, channels - DEFAULT_NCHANNELS)
    return CommModel(
        busbw=busbw,
        choice=choice,
        transport=transport,
        nvls=nvls_used,
        channels=channels,
        buffers_gib=buffers,
        sm_steal=extra_channels / H100_SMS,
        failure=failure,
        cumem=cumem,
    )


def exposed_comm_s(comm_s: float, compute_s: float) -> float:
    """Communication left on the critical path when FSDP overlaps it with ``compute_s``."""
    return comm_s - FSDP_OVERLAP * min(comm_s, compute_s)


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryBreakdown:
    """Peak device memory of one trainer GPU in one phase (GiB), by part."""

    states_gib: float
    working_params_gib: float
    activations_gib: float
    logits_gib: float
    fixed_gib: float

    @property
    def total_gib(self) -> float:
        return (
            self.states_gib
            + self.fixed_gib
            + ALLOCATOR_OVERHEAD * (self.working_params_gib + self.activations_gib + self.logits_gib)
        )

    @property
    def largest_alloc_gib(self) -> float:
        """The allocation that fails first when memory runs out: one fp32 logits buffer."""
        return self.logits_gib / LOGITS_COPIES_TRAIN if self.logits_gib else self.activations_gib


def micro_tokens(cfg: SimConfig, tokens: TokenProfile, micro: int, longest: float) -> float:
    """Tokens in the micro-batch that holds a sequence of ``longest`` tokens (per GPU, after
    sequence parallelism splits it)."""
    if cfg.use_sample_packing:
        t = longest + (micro - 1) * min(tokens.seq_cap, tokens.seq_mean * COMPANION_LENGTH_FACTOR)
    else:
        t = micro * longest
    return t / cfg.sp


def fixed_gib(cfg: SimConfig, comm: CommModel) -> float:
    """Memory every trainer GPU holds throughout: CUDA contexts, the sleeping engine, NCCL buffers."""
    fixed = CUDA_CONTEXT_GIB + comm.buffers_gib
    if cfg.colocate_all:
        fixed += CUDA_CONTEXT_GIB + VLLM_SLEEP_RESIDUAL_GIB
        if comm.cumem:
            fixed += CUMEM_COLOCATED_EXTRA_GIB
    return fixed


def _working_params_gib(cfg: SimConfig, with_grads: bool) -> float:
    a = cfg.arch
    if not cfg.reshard_after_forward:
        unsharded = a.params * 2
    else:
        unsharded = 2 * a.layer_params * 2 + a.embedding_params * 2
    grads = a.embedding_params * 4 + a.layer_params * 4 if with_grads else 0
    return (unsharded + grads) / GIB


def _layer_activation_bytes_per_token(cfg: SimConfig) -> float:
    a = cfg.arch
    return (10 * a.hidden + 3 * a.intermediate) * 2.0


def train_memory(cfg: SimConfig, comm: CommModel, tokens: float, longest: float) -> MemoryBreakdown:
    """Peak of ``policy_train`` on one GPU whose largest micro-batch holds ``tokens`` tokens."""
    a = cfg.arch
    dp = cfg.dp
    states = 0.0 if cfg.policy_offload else a.params * 16 / dp / GIB
    if cfg.use_ref and not cfg.ref_offload:
        states += a.params * 2 / cfg.n_gpus / GIB
    per_layer = _layer_activation_bytes_per_token(cfg)
    if cfg.gradient_checkpointing:
        act = tokens * (a.layers * a.hidden * 2 + per_layer)
    else:
        act = tokens * a.layers * per_layer
    if not cfg.flash_attn:
        act += (a.heads / cfg.sp) * (longest / 1.0) ** 2 * 4 / max(cfg.sp, 1)
    logits = tokens * a.vocab * 4 * LOGITS_COPIES_TRAIN
    return MemoryBreakdown(states, _working_params_gib(cfg, True), act / GIB, logits / GIB, fixed_gib(cfg, comm))


def fwd_memory(cfg: SimConfig, comm: CommModel, tokens: float, longest: float) -> MemoryBreakdown:
    """Peak of ``fwd_logprobs_values_reward`` on one GPU (forward only, optimizer state offloaded)."""
    a = cfg.arch
    if cfg.policy_offload:
        states = 0.0
    else:
        states = a.params * (4 if cfg.offload_optimizer_after_step else 16) / cfg.dp / GIB
    if cfg.use_ref and not cfg.ref_offload:
        states += a.params * 2 / cfg.n_gpus / GIB
    act = tokens * _layer_activation_bytes_per_token(cfg)
    if not cfg.flash_attn:
        act += (a.heads / cfg.sp) * longest**2 * 4 / max(cfg.sp, 1)
    logits = tokens * a.vocab * 4 * LOGITS_COPIES_FWD
    return MemoryBreakdown(states, _working_params_gib(cfg, False), act / GIB, logits / GIB, fixed_gib(cfg, comm))


def generate_memory_gib(cfg: SimConfig, comm: CommModel) -> float:
    """Device memory on a GPU while the engines generate: their share plus the offloaded trainer's rest."""
    trainer = CUDA_CONTEXT_GIB + comm.buffers_gib
    if not cfg.colocate_all:
        return trainer
    return cfg.gpu_memory_utilization * H100_CAPACITY_GIB + trainer


# --------------------------------------------------------------------------------------------
# vLLM start-up checks
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineBudget:
    """One engine GPU's memory budget as vLLM computes it at start-up (GiB)."""

    requested_gib: float
    free_at_start_gib: float
    weights_gib: float
    activation_gib: float
    kv_cache_gib: float
    kv_bytes_per_token: float
    max_model_len: int

    @property
    def kv_tokens(self) -> float:
        return max(0.0, self.kv_cache_gib) * GIB / self.kv_bytes_per_token


def engine_budget(cfg: SimConfig, comm: CommModel) -> EngineBudget:
    """vLLM's profile of one engine GPU: weights, activation peak and what is left for the KV cache."""
    a = cfg.arch
    tp = cfg.engine_tp * cfg.engine_pp
    weights = a.params * 2 / tp / GIB
    act = VLLM_ACTIVATION_GIB_PER_8K_TOKENS * (cfg.max_num_batched_tokens / 8192) * (a.hidden / 3584)
    requested = cfg.gpu_memory_utilization * H100_CAPACITY_GIB
    trainer_resident = CUDA_CONTEXT_GIB + (CUMEM_COLOCATED_EXTRA_GIB if comm.cumem and cfg.colocate_all else 0.0)
    # vLLM compares the request with the memory free when it starts: its own CUDA context is
    # already there, and so is the colocated trainer's.
    free = H100_CAPACITY_GIB - CUDA_CONTEXT_GIB - (trainer_resident if cfg.colocate_all else 0.0)
    kv_heads_per_gpu = max(1, math.ceil(a.kv_heads / cfg.engine_tp))
    kv_bytes = 2 * a.layers * kv_heads_per_gpu * a.head_dim * 2 / max(cfg.engine_pp, 1)
    kv = requested - weights - act - VLLM_NON_TORCH_GIB
    return EngineBudget(requested, free, weights, act, kv, kv_bytes, cfg.max_input_length + cfg.max_generate_length)


# --------------------------------------------------------------------------------------------
# Phase times (modelled seconds, before noise)
# --------------------------------------------------------------------------------------------


def _mfu(peak: float, tokens_per_micro: float) -> float:
    return peak * tokens_per_micro / (tokens_per_micro + MFU_HALF_TOKENS)


def generate_s(
    cfg: SimConfig, comm: CommModel, tokens: TokenProfile, samples: int, max_gen: float | None = None
) -> float:
    """Rollout of ``samples`` trajectories by the engines (wake-up, prefill, decode of the longest
    trajectory at the batch's concurrency, environment steps)."""
    a = cfg.arch
    budget = engine_budget(cfg, comm)
    engines = max(cfg.num_engines * cfg.engine_dp, 1)
    tp = cfg.engine_tp * cfg.engine_pp
    per_engine = math.ceil(samples / engines)
    ctx = tokens.seq_mean * CONTEXT_IN_FLIGHT_FRACTION
    by_kv = budget.kv_tokens / max(ctx, 1.0)
    conc = max(1.0, min(per_engine, cfg.max_num_seqs, by_kv))
    waves = max(1.0, per_engine / conc)
    weights_bytes = a.params * 2 / tp
    mem_s = (weights_bytes + conc * ctx * budget.kv_bytes_per_token) / (H100_HBM_BYTES_PER_S * HBM_EFFICIENCY)
    flop_s = 2 * a.params / tp * conc / (H100_BF16_DENSE_FLOPS * DECODE_MFU)
    ar = TP_ALLREDUCE_LATENCY_S[comm.transport] * 2 * a.layers if cfg.engine_tp > 1 else 0.0
    t_iter = max(mem_s, flop_s) + ar + DECODE_STEP_OVERHEAD_S[cfg.enforce_eager]
    gen_tail = tokens.gen_tail if max_gen is None else min(tokens.gen_tail, max_gen)
    decode = waves * tokens.turns_tail * gen_tail * t_iter
    prefill_tokens = per_engine * (tokens.prompt_mean + (min(cfg.max_turns, TURNS_MEAN) - 1) * OBS_TOKENS_PER_TURN)
    prefill = prefill_tokens * 2 * a.params / tp / (H100_BF16_DENSE_FLOPS * PREFILL_MFU)
    env = tokens.turns_tail * ENV_STEP_TAIL_S
    wake = weights_bytes / PCIE_BYTES_PER_S if cfg.colocate_all else 0.0
    return wake + prefill + decode + env


def _fsdp_micro_comm_s(cfg: SimConfig, comm: CommModel, train: bool) -> float:
    a = cfg.arch
    share = (cfg.dp - 1) / cfg.dp if cfg.dp > 1 else 0.0
    ag = a.params * 2 * share / comm.busbw["AllGather"]
    if not train:
        return ag
    bwd_ag = ag if cfg.reshard_after_forward else 0.0
    rs = a.params * 4 * share / comm.busbw["ReduceScatter"]
    return ag + bwd_ag + rs


def _sp_comm_s(cfg: SimConfig, comm: CommModel, tokens_per_gpu: float, passes: int) -> float:
    """Ulysses all-to-alls: 4 per layer per pass over the activations of the local tokens."""
    if cfg.sp <= 1:
        return 0.0
    a = cfg.arch
    vol = 4 * a.layers * tokens_per_gpu * a.hidden * 2 * (cfg.sp - 1) / cfg.sp
    return passes * vol / comm.busbw["AllGather"]


def fwd_logprobs_s(cfg: SimConfig, comm: CommModel, tokens: TokenProfile) -> float:
    """``fwd_logprobs_values_reward``: policy (and reference) forward over the batch."""
    a = cfg.arch
    samples_per_gpu = cfg.samples_per_step / cfg.dp
    mb = cfg.micro_fwd
    n_micro = math.ceil(samples_per_gpu / mb)
    pad = 1.0 if cfg.use_sample_packing else 1.0 + 0.8 * (1 - 1 / mb)
    tok_gpu = cfg.samples_per_step * tokens.seq_mean * pad / cfg.n_gpus
    attn = 1.0 + ATTN_FLOPS_FACTOR * tokens.seq_mean / (12 * a.hidden)
    models = 2 if cfg.use_ref else 1
    flops = 2 * a.params * tok_gpu * attn * models
    compute = flops / (H100_BF16_DENSE_FLOPS * _mfu(FWD_MFU_MAX, mb * tokens.seq_mean / cfg.sp))
    comm_s = n_micro * models * _fsdp_micro_comm_s(cfg, comm, False) + _sp_comm_s(cfg, comm, tok_gpu, models)
    compute *= 1 + comm.sm_steal * min(1.0, comm_s / max(compute, 1e-9))
    total = compute + exposed_comm_s(comm_s, compute) + n_micro * models * MICRO_BATCH_OVERHEAD_S
    shard_fp32 = a.params * 4 / cfg.dp
    if cfg.policy_offload:
        total += n_micro * shard_fp32 / PCIE_BYTES_PER_S * (1 - OFFLOAD_OVERLAP)
    elif cfg.colocate_all:
        total += shard_fp32 / PCIE_BYTES_PER_S  # back-load the policy after generation
    if cfg.use_ref and cfg.ref_offload:
        total += n_micro * a.params * 2 / cfg.n_gpus / PCIE_BYTES_PER_S * (1 - OFFLOAD_OVERLAP)
    return total


def policy_train_s(cfg: SimConfig, comm: CommModel, tokens: TokenProfile) -> float:
    """``policy_train``: forward + backward (+ recompute) per micro-batch, optimizer steps."""
    a = cfg.arch
    samples_per_gpu = cfg.samples_per_step / cfg.dp
    mb = cfg.micro_train
    epochs = cfg.update_epochs_per_batch
    n_micro = math.ceil(samples_per_gpu / mb) * epochs
    pad = 1.0 if cfg.use_sample_packing else 1.0 + 0.8 * (1 - 1 / mb)
    tok_gpu = cfg.samples_per_step * tokens.seq_mean * pad / cfg.n_gpus * epochs
    attn = 1.0 + ATTN_FLOPS_FACTOR * tokens.seq_mean / (12 * a.hidden)
    flops = (8 if cfg.gradient_checkpointing else 6) * a.params * tok_gpu * attn
    compute = flops / (H100_BF16_DENSE_FLOPS * _mfu(TRAIN_MFU_MAX, mb * tokens.seq_mean / cfg.sp))
    comm_s = n_micro * _fsdp_micro_comm_s(cfg, comm, True) + _sp_comm_s(cfg, comm, tok_gpu, 3)
    compute *= 1 + comm.sm_steal * min(1.0, comm_s / max(compute, 1e-9))
    total = compute + exposed_comm_s(comm_s, compute) + n_micro * MICRO_BATCH_OVERHEAD_S
    n_updates = max(1, cfg.train_batch_size // max(cfg.policy_mini_batch_size, 1)) * epochs
    shard = a.params / cfg.dp
    if cfg.policy_offload:
        copies = 3 * shard * 4  # params in for forward and backward, gradients out
        total += n_micro * copies / PCIE_BYTES_PER_S * (1 - OFFLOAD_OVERLAP)
        total += n_updates * shard * CPU_ADAM_S_PER_PARAM
    else:
        total += n_updates * shard * 16 / (H100_HBM_BYTES_PER_S * HBM_EFFICIENCY)
        if cfg.offload_optimizer_after_step and cfg.colocate_all:
            total += 2 * shard * 8 / PCIE_BYTES_PER_S  # Adam state back to the GPU, and out after the step
    total += n_updates * 4 * 1024 / comm.busbw["AllReduce"]  # grad-norm all-reduce (latency-bound, tiny)
    return total


def sync_weights_s(cfg: SimConfig, comm: CommModel) -> float:
    """``sync_weights``: gather the policy's full weights and broadcast them to every engine."""
    a = cfg.arch
    full_bf16 = a.params * 2
    gather = full_bf16 * ((cfg.dp - 1) / cfg.dp if cfg.dp > 1 else 0.0) / comm.busbw["AllGather"]
    if cfg.weight_sync_backend == "nccl":
        send = full_bf16 / (comm.busbw["Broadcast"] * 0.5) + a.tensors * WEIGHT_SYNC_PER_TENSOR_S
    else:  # gloo: staged through host memory
        send = full_bf16 / 5e9 + a.tensors * WEIGHT_SYNC_PER_TENSOR_S
    offload = a.params * 4 / cfg.dp / PCIE_BYTES_PER_S if cfg.colocate_all and not cfg.policy_offload else 0.0
    return gather + send + offload


def startup_s(cfg: SimConfig, comm: CommModel) -> float:
    """From the command's start to the trainer's first timed phase."""
    a = cfg.arch
    tp = cfg.engine_tp * cfg.engine_pp
    engines = a.params * 2 / tp / DISK_BYTES_PER_S + 8.0 + (0.0 if cfg.enforce_eager else CUDA_GRAPH_CAPTURE_S)
    policy = a.params * 4 / DISK_BYTES_PER_S + 5.0
    ref = a.params * 2 / DISK_BYTES_PER_S + 3.0 if cfg.use_ref else 0.0
    return RAY_INIT_S + DATASET_LOAD_S + engines + policy + ref


def small_phase_s(cfg: SimConfig, tokens: TokenProfile, phase: str) -> float:
    """Driver-side phases: bookkeeping that scales with the batch."""
    s = cfg.samples_per_step
    if phase == "postprocess_generator_output":
        return 0.1 + s * 1e-4
    if phase == "convert_to_training_input":
        return 0.5 + s * 1.2e-3
    if phase == "compute_advantages_and_returns":
        return 0.05 + s * 5e-5
    if phase == "dump_data_batch":
        return 1.0 + s * tokens.seq_mean * 20 / 1.5e9
    if phase == "save_checkpoints":
        return cfg.arch.params * 16 / DISK_BYTES_PER_S
    if phase == "save_hf_model":
        return cfg.arch.params * 2 / 1e9 + 3.0
    if phase == "init_weight_sync_state":
        return INIT_WEIGHT_SYNC_STATE_S
    if phase == "load_checkpoints":
        return LOAD_CHECKPOINT_PROBE_S
    raise KeyError(phase)
