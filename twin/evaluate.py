"""One run of the modelled node: the phases in SkyRL's order with their times, per-GPU memory per
step, and the failure the configuration meets, with when it happens and when the command exits.

Two seeds shape a run. ``trainer.seed`` fixes the data order, hence which GPU gets each step's
longest sequence and how long it is: a config that runs out of memory at step 3 does so on every
re-run. The run seed (``seed``; the program takes ``SIM_SEED`` or a fresh one) draws the timing
noise and the chance events (a stall near the memory wall, a hang in a weight sync).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from nccl_tune.failure import FailureClass
from twin import cost_model as cm
from twin import logfmt
from twin.config import SimConfig
from twin.shapes import GPUS_PER_NODE

DEFAULT_STEPS = 3
ABORT_GRACE_S = 3.0
"""Modelled seconds from the last rank's error to the command's exit (Ray tears the actors down)."""

_NORMAL = NormalDist()
_MASK = (1 << 64) - 1


def _mix(*keys: int) -> float:
    """A uniform number in [0, 1) from integer keys (splitmix64; stable across processes)."""
    x = 0x9E3779B97F4A7C15
    for k in keys:
        x = (x ^ (k & _MASK)) & _MASK
        x = (x + 0x9E3779B97F4A7C15) & _MASK
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        x = z ^ (z >> 31)
    return (x >> 11) / float(1 << 53)


PHASES = (
    "startup",
    "init_weight_sync_state",
    "load_checkpoints",
    "sync_weights",
    "eval",
    "step",
    "generate",
    "postprocess_generator_output",
    "convert_to_training_input",
    "fwd_logprobs_values_reward",
    "compute_advantages_and_returns",
    "dump_data_batch",
    "train_critic_and_policy",
    "policy_train",
    "save_checkpoints",
    "save_hf_model",
)
_PHASE_ID = {p: i for i, p in enumerate(PHASES)}
WORKER_PHASES = frozenset(
    {
        "init_weight_sync_state",
        "sync_weights",
        "fwd_logprobs_values_reward",
        "policy_train",
        "save_checkpoints",
        "save_hf_model",
    }
)
"""Phases the trainer's ranks run (with collectives); the others run in the driver or the engines."""


@dataclass(frozen=True)
class PhaseSpan:
    """One timed phase of the run (modelled seconds since launch)."""

    step: int
    """Training step (1-based); 0 before the first step, ``-1`` after the last."""
    name: str
    start_s: float
    end_s: float | None
    """None when the phase never finished (the failure happened in it)."""
    depth: int
    """0: top level (``step`` and the phases around the loop); 1: inside a step; 2: inside
    ``train_critic_and_policy``."""
    planned_s: float = 0.0
    """How long the phase takes (or would have taken, had it not failed)."""

    @property
    def duration_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.start_s

    @property
    def worker(self) -> bool:
        """Run by the trainer ranks (with collectives) rather than the driver or the engines."""
        return self.name in WORKER_PHASES


@dataclass(frozen=True)
class StepRecord:
    """A finished training step."""

    step: int
    duration_s: float
    gpu_peak_gib: tuple[float, ...]
    """Peak device memory of every modelled GPU in the step's trainer phases."""


@dataclass(frozen=True)
class StepTokens:
    """One step's token statistics, as SkyRL's generator reports them (``generate/min_num_tokens``,
    ``generate/max_num_tokens``, ``generate/avg_num_tokens``, ``generate/std_num_tokens``: tokens
    of each trajectory's response), and the step's longest sequence (prompt and response)."""

    min_num_tokens: int
    max_num_tokens: int
    avg_num_tokens: float
    std_num_tokens: float
    longest_seq: float

    def metrics(self) -> dict[str, float]:
        """The console metrics SkyRL prints for these figures."""
        return {
            "generate/min_num_tokens": self.min_num_tokens,
            "generate/max_num_tokens": self.max_num_tokens,
            "generate/avg_num_tokens": self.avg_num_tokens,
            "generate/std_num_tokens": self.std_num_tokens,
        }


@dataclass(frozen=True)
class SimFailure:
    """The failure a run meets: its class, where, when, and what it prints."""

    failure_class: FailureClass
    kind: str
    """``oom``, ``oom_fault``, ``vllm_memory``, ``hang_memory``, ``hang_fault``,
    ``crash_fault``, ``nccl_error`` or ``placement``."""
    rank: int | None
    """Modelled GPU index of the root cause (for ``SIM_FAULT`` faults, the process rank)."""
    step: int
    phase: str | None
    at_s: float
    """Modelled seconds since launch when it happens."""
    exit_s: float
    """When the command exits (after the cascade: other ranks' collective timeouts, Ray's tear-down)."""
    exit_code: int = 1
    signal_name: str | None = None
    evidence: tuple[str, ...] = ()
    """Root-cause lines first, in the format the command prints them (no colours)."""
    advice: str = ""
    detail: Mapping[str, Any] = field(default_factory=dict)
    """Figures the program needs to print the failure (sizes, the NCCL text, ...)."""


@dataclass(frozen=True)
class Outcome:
    """What one run of a configuration does on the modelled node."""

    samples_per_step: int
    total_steps: int
    """Steps the command would run by itself: ``epochs * (kept prompts // train_batch_size)``."""
    steps_planned: int
    startup_s: float
    phases: tuple[PhaseSpan, ...]
    steps: tuple[StepRecord, ...]
    """Finished steps, in order."""
    step_s: float
    """Steady-state step time without noise (modelled seconds)."""
    first_step_s: float
    phase_s: Mapping[str, float]
    """Steady-state duration of each phase of a step, without noise."""
    gpu_capacity_gib: float
    gpu_peak_gib: tuple[float, ...]
    """Peak device memory per modelled GPU over the trainer's phases of the run, up to the failure
    (what the sleeping engines keep included; the engines' own pool while they generate is in
    ``memory_phase_gib["generate"]``)."""
    failure: SimFailure | None
    end_s: float
    """Modelled seconds from launch to the command's own exit (after its last planned step, or
    after the failure's cascade)."""
    steps_per_epoch: int = 0
    """Batches in one pass over the kept prompts."""
    stopped_early: bool = False
    """The run ended at ``trainer.max_training_steps`` (today's SkyRL logs ``Reached max_training_steps=N``)."""
    step_memory_gib: Mapping[int, tuple[float, ...]] = field(default_factory=dict)
    """Per step (the failing one included, up to the failure): peak per modelled GPU, at most the
    capacity."""
    memory_phase_gib: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """Steady-state per-GPU peak of ``fwd_logprobs_values_reward``, ``policy_train`` and
    ``generate`` for the first step's data (diagnostics)."""
    step_phase_memory_gib: Mapping[int, Mapping[str, float]] = field(default_factory=dict)
    """Per step (as ``step_memory_gib``): the highest per-GPU peak of ``fwd_logprobs_values_reward``
    and ``policy_train`` when they ran (a failing phase: what it reached), at most the capacity; the
    largest is the step's peak. The engines' pool in ``generate`` is left out, as in ``gpu_peak_gib``."""
    step_tokens: Mapping[int, StepTokens] = field(default_factory=dict)
    """Per step that generated (the failing one included): its token statistics."""
    worst_seq_tokens: float = 0.0
    """The longest sequence the config allows (``TokenProfile.seq_worst``)."""
    worst_response_tokens: float = 0.0
    """The longest response the config allows (``TokenProfile.response_cap``)."""

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def peak_mem_gib(self) -> float:
        return max(self.gpu_peak_gib) if self.gpu_peak_gib else 0.0

    @property
    def step_times_s(self) -> tuple[float, ...]:
        return tuple(s.duration_s for s in self.steps)


# --------------------------------------------------------------------------------------------


@dataclass
class _Clock:
    t: float = 0.0


class _Run:
    """Builds an Outcome step by step; stops at the first failure."""

    def __init__(self, cfg: SimConfig, seed: int, steps: int | None) -> None:
        self.cfg = cfg
        self.seed = seed
        self.data_seed = cfg.seed
        self.comm = cm.comm_model(cfg.env.nccl, cfg.n_gpus)
        self.tokens = cm.token_profile(cfg)
        self.per_epoch = self.tokens.kept_prompts // max(cfg.train_batch_size, 1)
        self.total_steps = max(0, cfg.epochs * self.per_epoch)
        if cfg.max_training_steps is not None:  # today's SkyRL caps the loop
            self.total_steps = min(self.total_steps, cfg.max_training_steps)
        self.saved_at_last = {"save_checkpoints": False, "save_hf_model": False}
        want = DEFAULT_STEPS if steps is None else steps
        self.steps_planned = max(0, min(want, self.total_steps))
        self.slow = cfg.env.faults.slow_factor
        self.clock = _Clock()
        self.phases: list[PhaseSpan] = []
        self.step_records: list[StepRecord] = []
        self.failure: SimFailure | None = None
        self.cap = cm.H100_CAPACITY_GIB
        self.gpu_peak = [0.0] * cfg.n_gpus
        self.step_peaks: dict[int, tuple[float, ...]] = {}
        self.step_phase_peaks: dict[int, dict[str, float]] = {}
        self.base = self._base_phase_times()

    # -- times -------------------------------------------------------------------------------
    def _base_phase_times(self) -> dict[str, float]:
        cfg, comm, tok = self.cfg, self.comm, self.tokens
        out = {
            "generate": cm.generate_s(cfg, comm, tok, cfg.samples_per_step),
            "postprocess_generator_output": cm.small_phase_s(cfg, tok, "postprocess_generator_output"),
            "convert_to_training_input": cm.small_phase_s(cfg, tok, "convert_to_training_input"),
            "fwd_logprobs_values_reward": cm.fwd_logprobs_s(cfg, comm, tok),
            "compute_advantages_and_returns": cm.small_phase_s(cfg, tok, "compute_advantages_and_returns"),
            "dump_data_batch": cm.small_phase_s(cfg, tok, "dump_data_batch"),
            "policy_train": cm.policy_train_s(cfg, comm, tok),
            "save_checkpoints": cm.small_phase_s(cfg, tok, "save_checkpoints"),
            "save_hf_model": cm.small_phase_s(cfg, tok, "save_hf_model"),
            "sync_weights": cm.sync_weights_s(cfg, comm),
            "init_weight_sync_state": cm.small_phase_s(cfg, tok, "init_weight_sync_state"),
            "load_checkpoints": cm.small_phase_s(cfg, tok, "load_checkpoints"),
            "startup": cm.startup_s(cfg, comm),
        }
        # Evaluation generates every validation prompt once per eval sample, eval_batch_size at a time.
        samples = cm.VALIDATION_PROMPTS * max(cfg.eval_n_samples, 1)
        batches = max(1, math.ceil(cm.VALIDATION_PROMPTS / max(cfg.eval_batch_size, 1)))
        out["eval"] = batches * cm.generate_s(
            cfg, comm, tok, math.ceil(samples / batches), cfg.eval_max_generate_length
        )
        return out

    def _noisy(self, phase: str, step: int, base: float) -> float:
        u = _mix(self.seed, 11, step, _PHASE_ID.get(phase, 99))
        z = _NORMAL.inv_cdf(min(max(u, 1e-9), 1 - 1e-9))
        return base * math.exp(cm.NOISE_SIGMA * z) * self.slow

    def _duration(self, phase: str, step: int) -> float:
        base = self.base[phase]
        if step == 1:
            if phase == "generate":
                base *= cm.FIRST_STEP_GENERATE_FACTOR
            elif phase in ("fwd_logprobs_values_reward", "policy_train"):
                base *= cm.FIRST_STEP_TRAIN_FACTOR
            if phase == "policy_train":
                base += cm.FIRST_STEP_EXTRA_S
        return self._noisy(phase, step, base)

    # -- memory ------------------------------------------------------------------------------
    def step_tokens(self, step: int) -> StepTokens:
        """``step``'s response lengths (what SkyRL's ``generate/*_num_tokens`` report) and its
        longest sequence. The longest response is the typical longest times a long-tailed factor
        (``cost_model.step_tail_factor``), never beyond what the config allows; a run forced to its
        longest batch (``SimConfig.forced_longest``) reaches that every step."""
        tok = self.tokens
        prompt = tok.prompt_peak * (0.85 + 0.15 * _mix(self.data_seed, 22, step))
        if self.cfg.forced_longest:
            longest_response = tok.response_cap
        else:
            factor = cm.step_tail_factor(_mix(self.data_seed, 24, step))
            longest_response = min(tok.response_peak * factor, tok.response_cap)
        longest_response = max(1.0, min(longest_response, tok.seq_cap - prompt))
        avg = min(tok.response_mean * (0.9 + 0.2 * _mix(self.data_seed, 25, step)), longest_response)
        shortest = min(avg, 40.0 + 80.0 * _mix(self.data_seed, 26, step))
        spread = (longest_response - shortest) / 4.0
        return StepTokens(
            min_num_tokens=int(shortest),
            max_num_tokens=int(longest_response),
            avg_num_tokens=avg,
            std_num_tokens=min(spread, avg),
            longest_seq=min(prompt + longest_response, tok.seq_cap),
        )

    def step_memory(self, step: int) -> tuple[list[float], list[float], float]:
        """(fwd peak per GPU, train peak per GPU, generate peak) for ``step``'s data: the GPU that
        gets the step's longest sequence (``step_tokens``) and the others with shorter ones."""
        cfg, tok = self.cfg, self.tokens
        n = cfg.n_gpus
        star = int(_mix(self.data_seed, 21, step) * n)
        star_longest = self.step_tokens(step).longest_seq
        fwd, train = [], []
        for g in range(n):
            if g == star:
                longest = star_longest
            else:
                longest = min(star_longest, tok.seq_peak * (0.65 + 0.25 * _mix(self.data_seed, 23, step, g)))
            t_fwd = cm.micro_tokens(cfg, tok, cfg.micro_fwd, longest)
            t_train = cm.micro_tokens(cfg, tok, cfg.micro_train, longest)
            fwd.append(cm.fwd_memory(cfg, self.comm, t_fwd, longest).total_gib)
            train.append(cm.train_memory(cfg, self.comm, t_train, longest).total_gib)
        return fwd, train, cm.generate_memory_gib(cfg, self.comm)

    # -- timeline ----------------------------------------------------------------------------
    def _span(self, step: int, name: str, depth: int, duration: float) -> PhaseSpan:
        start = self.clock.t
        self.clock.t += duration
        span = PhaseSpan(step, name, start, self.clock.t, depth, duration)
        self.phases.append(span)
        return span

    def _fail_in(self, step: int, name: str, depth: int, duration: float, failure_factory) -> None:
        start = self.clock.t
        frac = 0.2 + 0.6 * _mix(self.seed, 31, step, _PHASE_ID.get(name, 99))
        at = start + frac * duration
        self.phases.append(PhaseSpan(step, name, start, None, depth, duration))
        self.failure = failure_factory(at)

    def run(self) -> Outcome:
        cfg = self.cfg
        startup = self._noisy("startup", 0, self.base["startup"])
        if not self._startup_checks(startup):
            self.clock.t = startup
            self._pre_loop()
        if self.failure is None:
            for step in range(1, self.steps_planned + 1):
                if not self._step(step):
                    break
        end = self.failure.exit_s if self.failure else self._epilogue()
        steady = {k: self.base[k] for k in self._step_phases()}
        step_s = sum(steady.values())
        first = (
            sum(
                self.base[k]
                * (
                    cm.FIRST_STEP_GENERATE_FACTOR
                    if k == "generate"
                    else cm.FIRST_STEP_TRAIN_FACTOR
                    if k in ("fwd_logprobs_values_reward", "policy_train")
                    else 1.0
                )
                for k in steady
            )
            + cm.FIRST_STEP_EXTRA_S
        )
        steady["step"] = step_s
        f1, t1, gen = self.step_memory(1)
        return Outcome(
            samples_per_step=cfg.samples_per_step,
            total_steps=self.total_steps,
            steps_planned=self.steps_planned,
            startup_s=startup,
            phases=tuple(self.phases),
            steps=tuple(self.step_records),
            step_s=step_s,
            first_step_s=first,
            phase_s=steady,
            gpu_capacity_gib=self.cap,
            gpu_peak_gib=tuple(self.gpu_peak),
            failure=self.failure,
            end_s=end,
            steps_per_epoch=self.per_epoch,
            stopped_early=self._stopped_early(),
            step_memory_gib=dict(self.step_peaks),
            step_phase_memory_gib=dict(self.step_phase_peaks),
            step_tokens={k: self.step_tokens(k) for k in self.step_peaks},
            worst_seq_tokens=self.tokens.seq_worst,
            worst_response_tokens=self.tokens.response_cap,
            memory_phase_gib={
                "fwd_logprobs_values_reward": tuple(f1),
                "policy_train": tuple(t1),
                "generate": (gen,) * cfg.n_gpus,
            },
        )

    def _stopped_early(self) -> bool:
        cap = self.cfg.max_training_steps
        return self.failure is None and cap is not None and self.steps_planned == self.total_steps == cap

    def _step_phases(self) -> list[str]:
        out = [
            "generate",
            "postprocess_generator_output",
            "convert_to_training_input",
            "fwd_logprobs_values_reward",
            "compute_advantages_and_returns",
        ]
        if self.cfg.dump_data_batch:
            out.append("dump_data_batch")
        out += ["policy_train", "sync_weights"]
        return out

    def _startup_checks(self, startup: float) -> bool:
        """Failures before the first timed phase; True when one happened."""
        cfg, env = self.cfg, self.cfg.env
        if cfg.gpus_needed > GPUS_PER_NODE:
            at = cm.RAY_INIT_S + env.pg_timeout_s
            self.failure = _placement_failure(cfg, at)
            return True
        budget = cm.engine_budget(cfg, self.comm)
        if cfg.colocate_all and budget.requested_gib > budget.free_at_start_gib:
            self.failure = _vllm_failure(cfg, budget, "free", startup * 0.6)
            return True
        if budget.kv_cache_gib <= 0:
            self.failure = _vllm_failure(cfg, budget, "no_blocks", startup * 0.6)
            return True
        if budget.kv_tokens < budget.max_model_len:
            self.failure = _vllm_failure(cfg, budget, "max_len", startup * 0.6)
            return True
        if self.comm.failure is not None:
            self.failure = _nccl_failure(cfg, self.comm.failure, startup * 0.9)
            return True
        return False

    def _pre_loop(self) -> None:
        cfg = self.cfg
        self._span(0, "init_weight_sync_state", 0, self._duration("init_weight_sync_state", 0))
        if str(cfg.resume_mode).lower() not in ("none", "null"):
            self._span(0, "load_checkpoints", 0, self._duration("load_checkpoints", 0))
        hang = self._sync_hang(0)
        if hang is not None:
            self._fail_in(0, "sync_weights", 0, self._duration("sync_weights", 0), hang)
            return
        self._span(0, "sync_weights", 0, self._duration("sync_weights", 0))
        if cfg.eval_interval > 0 and cfg.eval_before_train:
            self._span(0, "eval", 0, self._noisy("eval", 0, self.base["eval"]))

    def _sync_hang(self, step: int):
        cfg = self.cfg
        for f in cfg.env.faults.rank_faults:
            if f.kind == "hang" and f.step == step == 0:
                return lambda at, f=f: _fault_failure(cfg, self, f, "sync_weights", at)
        return None

    def _step(self, step: int) -> bool:
        """Run one step; False when it failed."""
        cfg = self.cfg
        step_start = self.clock.t
        self.phases.append(PhaseSpan(step, "step", step_start, None, 0))
        step_index = len(self.phases) - 1
        fwd_mem, train_mem, _ = self.step_memory(step)
        peaks = [max(a, b) for a, b in zip(fwd_mem, train_mem)]
        both = {"fwd_logprobs_values_reward": fwd_mem, "policy_train": train_mem}

        def done(name: str, depth: int = 1) -> None:
            self._span(step, name, depth, self._duration(name, step))

        done("generate")
        done("postprocess_generator_output")
        done("convert_to_training_input")
        check = self._memory_check(step, "fwd_logprobs_values_reward", fwd_mem)
        if check is not None:
            self._fail_in(
                step, "fwd_logprobs_values_reward", 1, self._duration("fwd_logprobs_values_reward", step), check
            )
            self._record_peaks(step, {"fwd_logprobs_values_reward": fwd_mem})
            return False
        done("fwd_logprobs_values_reward")
        done("compute_advantages_and_returns")
        if cfg.dump_data_batch:
            done("dump_data_batch")
        tcp_start = self.clock.t
        self.phases.append(PhaseSpan(step, "train_critic_and_policy", tcp_start, None, 1))
        tcp_index = len(self.phases) - 1
        check = self._fault_check(step) or self._memory_check(step, "policy_train", train_mem)
        if check is not None:
            self._fail_in(step, "policy_train", 2, self._duration("policy_train", step), check)
            self._record_peaks(step, both)
            return False
        done("policy_train", 2)
        self.phases[tcp_index] = PhaseSpan(
            step, "train_critic_and_policy", tcp_start, self.clock.t, 1, self.clock.t - tcp_start
        )
        epoch_end = self.per_epoch > 0 and step % self.per_epoch == 0
        for phase, interval in (("save_checkpoints", cfg.ckpt_interval), ("save_hf_model", cfg.hf_save_interval)):
            self.saved_at_last[phase] = interval > 0 and (epoch_end or step % interval == 0)
            if self.saved_at_last[phase]:
                done(phase)
        hang = self._sync_hang(step)
        if hang is not None:
            self._fail_in(step, "sync_weights", 1, self._duration("sync_weights", step), hang)
            self._record_peaks(step, both)
            return False
        done("sync_weights")
        self.phases[step_index] = PhaseSpan(step, "step", step_start, self.clock.t, 0, self.clock.t - step_start)
        self._record_peaks(step, both)
        self.step_records.append(StepRecord(step, self.clock.t - step_start, tuple(peaks)))
        if cfg.eval_interval > 0 and (step % cfg.eval_interval == 0 or step == self.total_steps):
            self._span(step, "eval", 0, self._noisy("eval", step, self.base["eval"]))
        return True

    def _record_peaks(self, step: int, by_phase: Mapping[str, list[float]]) -> None:
        """``step``'s peaks per GPU (the largest over the phases that ran) and per phase (the
        largest over GPUs), each at most the capacity."""
        peaks = [max(per_gpu) for per_gpu in zip(*by_phase.values())]
        clamped = tuple(min(p, self.cap) for p in peaks)
        self.step_peaks[step] = clamped
        self.step_phase_peaks[step] = {name: min(max(mem), self.cap) for name, mem in by_phase.items()}
        for g, p in enumerate(clamped):
            self.gpu_peak[g] = max(self.gpu_peak[g], p)

    def _fault_check(self, step: int):
        cfg = self.cfg
        for f in cfg.env.faults.rank_faults:
            if f.step == step:
                return lambda at, f=f: _fault_failure(cfg, self, f, "policy_train", at)
        return None

    def _memory_check(self, step: int, phase: str, mem: list[float]):
        cfg = self.cfg
        g = max(range(len(mem)), key=lambda i: mem[i])
        frac = mem[g] / self.cap
        if frac > 1.0:
            return lambda at: _oom_failure(cfg, self, step, phase, g, mem[g], at)
        if frac >= cm.HANG_BAND_FRAC:
            span = (frac - cm.HANG_BAND_FRAC) / (1.0 - cm.HANG_BAND_FRAC)
            p = cm.HANG_P_AT_BAND + (cm.HANG_P_AT_WALL - cm.HANG_P_AT_BAND) * span
            if _mix(self.seed, 51, step, _PHASE_ID[phase]) < p:
                return lambda at: _memory_hang(cfg, step, phase, g, mem[g], self.cap, at)
        return None

    def _epilogue(self) -> float:
        cfg = self.cfg
        if self.steps_planned < self.total_steps:
            return self.clock.t  # the run was cut short by the caller: it would go on
        # SkyRL's safety net: a final checkpoint (and HF model) unless the last step saved one.
        for phase, interval in (("save_checkpoints", cfg.ckpt_interval), ("save_hf_model", cfg.hf_save_interval)):
            if interval > 0 and not self.saved_at_last[phase]:
                self._span(-1, phase, 0, self._duration(phase, -1))
        return self.clock.t + 2.0


# --------------------------------------------------------------------------------------------
# Failures: class, timing, evidence, advice
# --------------------------------------------------------------------------------------------


def _cascade_exit(cfg: SimConfig, at: float) -> float:
    """A rank stopped without leaving: the others time out in their next collective, then Ray
    tears everything down."""
    return at + cfg.env.nccl_timeout_s + ABORT_GRACE_S


def _worker(gpu: int) -> str:
    return f"({logfmt.POLICY_ACTOR} pid={400100 + gpu}) "


def _timeout_line(cfg: SimConfig, rank: int) -> str:
    a = cfg.arch
    numel_out = a.embedding_params
    return _worker(rank) + logfmt.watchdog_timeout_line(
        rank,
        19000 + 7 * rank,
        "_ALLGATHER_BASE",
        numel_out // cfg.n_gpus,
        numel_out,
        int(cfg.env.nccl_timeout_s * 1000),
    )


def _oom_failure(cfg: SimConfig, run: _Run, step: int, phase: str, gpu: int, total_gib: float, at: float) -> SimFailure:
    cap = cm.H100_CAPACITY_GIB
    detail = oom_detail(cfg, run.comm, run.tokens, phase, gpu, total_gib)
    msg = logfmt.cuda_oom_message(gpu=gpu, capacity_gib=cap, **detail)
    other = (gpu + 1) % cfg.n_gpus
    micro_key = (
        "trainer.micro_train_batch_size_per_gpu"
        if phase == "policy_train"
        else "trainer.micro_forward_batch_size_per_gpu"
    )
    micro = cfg.micro_train if phase == "policy_train" else cfg.micro_fwd
    advice = f"GPU {gpu} needed {total_gib:.1f} of {cap:.2f} GiB in {phase}: lower {micro_key} (now {micro})"
    if phase == "policy_train" and not cfg.policy_offload:
        advice += " or set trainer.policy.fsdp_config.cpu_offload=true"
    advice += f", or trainer.max_prompt_length (now {cfg.max_prompt_length})"
    return SimFailure(
        FailureClass.OOM,
        "oom",
        gpu,
        step,
        phase,
        at,
        _cascade_exit(cfg, at),
        evidence=(_worker(gpu) + "torch.OutOfMemoryError: " + msg, _timeout_line(cfg, other)),
        advice=advice,
        detail={"message": msg, "tried_gib": detail["tried_gib"], "total_gib": total_gib},
    )


def oom_detail(
    cfg: SimConfig, comm: cm.CommModel, tokens: cm.TokenProfile, phase: str, gpu: int, total_gib: float
) -> dict[str, Any]:
    """Figures of the CUDA OOM message for a GPU that needed ``total_gib`` in ``phase``."""
    cap = cm.H100_CAPACITY_GIB
    micro = cfg.micro_train if phase == "policy_train" else cfg.micro_fwd
    t = cm.micro_tokens(cfg, tokens, micro, tokens.seq_peak)
    tried = t * cfg.arch.vocab * 4 / cm.GIB
    before = min(max(total_gib - tried * cm.ALLOCATOR_OVERHEAD, 0.0), cap - 0.05)
    if before + tried <= cap:
        tried = cap - before + 0.37
    free = cap - before
    engine = cm.CUDA_CONTEXT_GIB + cm.VLLM_SLEEP_RESIDUAL_GIB if cfg.colocate_all else 0.0
    process = max(before - engine, 0.5)
    allocated = max(process - cm.CUDA_CONTEXT_GIB - comm.buffers_gib, 0.1) / cm.ALLOCATOR_OVERHEAD
    reserved_unalloc = max(process - cm.CUDA_CONTEXT_GIB - comm.buffers_gib - allocated, 0.0)
    others = [(500200 + gpu, engine)] if engine else []
    return {
        "tried_gib": tried,
        "free_gib": free,
        "process_gib": process,
        "allocated_gib": allocated,
        "reserved_unallocated_gib": reserved_unalloc,
        "other_processes": others,
    }


def _memory_hang(
    cfg: SimConfig, step: int, phase: str, gpu: int, total_gib: float, cap: float, at: float
) -> SimFailure:
    pct = 100 * total_gib / cap
    return SimFailure(
        FailureClass.HANG,
        "hang_memory",
        gpu,
        step,
        phase,
        at,
        _cascade_exit(cfg, at),
        evidence=(
            _worker(gpu) + f"rank {gpu} step {step} peak memory: {total_gib:.2f}GiB({pct:.1f}%)",
            _timeout_line(cfg, (gpu + 1) % cfg.n_gpus),
        ),
        advice=f"GPU {gpu} ran at {pct:.1f}% of its memory in {phase} and stalled in a collective: leave more headroom "
        f"(lower trainer.micro_train_batch_size_per_gpu, now {cfg.micro_train})",
        detail={"total_gib": total_gib},
    )


def _fault_failure(cfg: SimConfig, run: _Run, fault, phase: str, at: float) -> SimFailure:
    rank = fault.rank
    fault_text = f"SIM_FAULT {fault.kind}:{fault.rank}:{fault.step}"
    if fault.kind == "oom":
        total = cm.H100_CAPACITY_GIB + 1.5
        detail = oom_detail(cfg, run.comm, run.tokens, phase, rank, total)
        msg = logfmt.cuda_oom_message(gpu=rank, capacity_gib=cm.H100_CAPACITY_GIB, **detail)
        return SimFailure(
            FailureClass.OOM,
            "oom_fault",
            rank,
            fault.step,
            phase,
            at,
            _cascade_exit(cfg, at),
            evidence=(_worker(rank) + "torch.OutOfMemoryError: " + msg,),
            advice=f"injected by {fault_text}",
            detail={"message": msg, "tried_gib": detail["tried_gib"], "total_gib": total},
        )
    if fault.kind == "crash":
        return SimFailure(
            FailureClass.CRASH,
            "crash_fault",
            rank,
            fault.step,
            phase,
            at,
            at + ABORT_GRACE_S,
            evidence=(_worker(rank) + "Fatal Python error: Segmentation fault",),
            advice=f"injected by {fault_text}",
        )
    return SimFailure(
        FailureClass.HANG,
        "hang_fault",
        rank,
        fault.step,
        phase,
        at,
        _cascade_exit(cfg, at),
        evidence=(_timeout_line(cfg, (rank + 1) % max(cfg.n_gpus, 1)),),
        advice=f"injected by {fault_text}",
    )


def _nccl_failure(cfg: SimConfig, nf: cm.NcclFailure, at: float) -> SimFailure:
    warn = logfmt.nccl_warn_line(0, 400100, nf.warn, host="node-0")
    err = logfmt.nccl_error_text(nf.error, nf.warn).split("\n")[0]
    env = cfg.env.nccl
    if nf.function is not None or "NCCL_ALGO" in nf.warn or "NCCL_PROTO" in nf.warn or "when parsing" in nf.warn:
        fix = " and ".join(
            f"{name}={value!r}" for name, value in (("NCCL_ALGO", env.algo_env), ("NCCL_PROTO", env.proto_env)) if value
        )
        advice = f"NCCL refused {fix or 'its settings'}: {nf.warn}; unset the variable or pick a value NCCL supports for every collective"
    else:
        advice = f"NCCL refused NCCL_SOCKET_IFNAME={env.socket_ifname!r} ({nf.warn}): name an interface the node has"
    return SimFailure(
        FailureClass.NCCL_ERROR,
        "nccl_error",
        0,
        0,
        None,
        at,
        at + ABORT_GRACE_S,
        evidence=(_worker(0) + warn, _worker(0) + "torch.distributed.DistBackendError: " + err),
        advice=advice,
        detail={"warn": nf.warn, "error": nf.error},
    )


def _vllm_failure(cfg: SimConfig, budget: cm.EngineBudget, why: str, at: float) -> SimFailure:
    from twin.layout import names

    util = cfg.gpu_memory_utilization
    key = names(cfg.layout).keys["gpu_memory_utilization"]
    if why == "free":
        text = (
            f"ValueError: Free memory on device ({budget.free_at_start_gib:.2f}/{cm.H100_CAPACITY_GIB:.2f} GiB) on startup "
            f"is less than desired GPU memory utilization ({util}, {budget.requested_gib:.2f} GiB). Decrease GPU memory "
            "utilization or reduce GPU memory used by other processes."
        )
        advice = f"lower {key} (now {util}): the colocated trainer keeps memory on every GPU"
    elif why == "no_blocks":
        text = "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
        advice = f"raise {key} (now {util}): the engines' weights and activations do not fit in it"
    else:
        text = (
            f"ValueError: The model's max seq len ({budget.max_model_len}) is larger than the maximum number of tokens that "
            f"can be stored in KV cache ({int(budget.kv_tokens)}). Try increasing `gpu_memory_utilization` or decreasing "
            "`max_model_len` when initializing the engine."
        )
        advice = f"raise {key} (now {util}) or lower generator.max_input_length"
    return SimFailure(
        FailureClass.OOM,
        "vllm_memory",
        0,
        0,
        None,
        at,
        at + ABORT_GRACE_S,
        evidence=(f"({names(cfg.layout).engine_actor} pid=500200) " + text,),
        advice=advice,
        detail={"text": text},
    )


def _placement_failure(cfg: SimConfig, at: float) -> SimFailure:
    text = (
        f"Failed to create placement group with {cfg.gpus_needed} bundles (requiring {cfg.gpus_needed} GPUs, "
        f"{cfg.gpus_needed} CPUs total) in {int(cfg.env.pg_timeout_s)} seconds."
    )
    return SimFailure(
        FailureClass.INIT_FAILURE,
        "placement",
        None,
        0,
        None,
        at,
        at + ABORT_GRACE_S,
        evidence=(text,),
        advice=f"the config asks for {cfg.gpus_needed} GPUs and the node has {GPUS_PER_NODE}: lower "
        "trainer.placement.policy_num_gpus_per_node or the engines' GPUs",
        detail={"text": text},
    )


def evaluate(
    config: SimConfig, env: Mapping[str, str | None] | None = None, seed: int = 0, steps: int | None = None
) -> Outcome:
    """Model one run of ``config``: ``steps`` training steps (default 3, at most what the command
    runs), deterministic for ``seed``. ``env``, when given, replaces the environment the config was
    parsed with (NCCL variables, ``SIM_FAULT``, timeouts)."""
    if env is not None:
        from twin.config import read_run_env

        config = _with_env(config, read_run_env(env, config.n_gpus, config.env.forced))
    return _Run(config, seed, steps).run()


def _with_env(config: SimConfig, run_env) -> SimConfig:
    from dataclasses import replace

    return replace(config, env=run_env)
