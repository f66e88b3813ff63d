"""From command-line overrides and environment to the twin's typed configuration.

``parse_overrides(argv, env)`` does what SkyRL's entry point does before training starts: apply
the Hydra overrides to the default tree, resolve interpolations, run ``validate_cfg``; then it reads
the twin's own environment (``SIM_*``), PyTorch's Flight Recorder variables, SkyRL's process-group
timeout and the NCCL variables. Anything SkyRL would refuse raises
:class:`~twin.refusal.SimConfigError` carrying the lines SkyRL prints.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from twin.faults import FAULT_ENV, Faults, parse_faults
from twin.layout import Layout, names
from twin.nccl_env import NcclSettings, read_nccl_env
from twin.overrides import AppliedConfig, apply_overrides, convert_checked
from twin.refusal import HYDRA_FULL_ERROR_HINT, SimConfigError
from twin.shapes import ARCHITECTURES, GPUS_PER_NODE, Architecture
from twin.validate import validate_cfg

DEFAULT_TIME_SCALE = 0.006
"""Wall seconds per modelled second: a 150-300 s step of the real node takes ~1-2 s."""
DEFAULT_RANKS = 2
TIMEOUT_FLOOR_S = 3.0
"""The scaled process-group timeout never goes below this many wall seconds (gloo needs a margin
over scheduling jitter on a loaded machine)."""
DEFAULT_FR_DUMP_PREFIX = "/tmp/nccl_trace_rank_"
"""PyTorch's default for ``TORCH_FR_DUMP_TEMP_FILE``."""


@dataclass(frozen=True)
class RunEnv:
    """What the environment tells the twin (the twin's knobs and the variables SkyRL, PyTorch and
    NCCL read)."""

    ranks: int
    """Processes in the gloo group (``SIM_RANKS``; at most the modelled GPUs)."""
    time_scale: float
    """Wall seconds per modelled second (``SIM_TIME_SCALE``)."""
    sim_seed: int | None
    """``SIM_SEED``: fixes noise and chance events; None draws a fresh seed per run."""
    faults: Faults
    nccl: NcclSettings
    nccl_timeout_s: float
    """``SKYRL_WORKER_NCCL_TIMEOUT_IN_S`` (modelled seconds; default 600)."""
    pg_timeout_s: float
    """``SKYRL_RAY_PG_TIMEOUT_IN_S`` (placement group; default 180)."""
    fr_buffer_size: int
    """``TORCH_FR_BUFFER_SIZE`` (0 disables the Flight Recorder)."""
    fr_dump_prefix: str
    """``TORCH_FR_DUMP_TEMP_FILE``: rank ``r`` dumps to ``f"{prefix}{r}"``."""
    dump_on_timeout: bool
    """``TORCH_NCCL_DUMP_ON_TIMEOUT`` (default on)."""
    abort_on_error: bool
    """False when ``TORCH_NCCL_ASYNC_ERROR_HANDLING`` is 0 or 2 (no tear-down on a collective error)."""
    infra_to_stdout: bool = False
    """``SKYRL_DUMP_INFRA_LOG_TO_STDOUT``: workers and engines print to stdout instead of the infra log."""
    forced: Mapping[str, str] = field(default_factory=dict)
    """Variables SkyRL sets for its workers whatever the environment says (``NCCL_CUMEM_ENABLE=0``
    with NCCL weight sync); ``nccl`` is read with them applied."""

    @property
    def fr_dumps(self) -> bool:
        """True when a rank dumps its Flight Recorder trace on a failed collective: the recorder is
        on (``TORCH_FR_BUFFER_SIZE`` > 0) and so is ``TORCH_NCCL_DUMP_ON_TIMEOUT``."""
        return self.fr_buffer_size > 0 and self.dump_on_timeout

    @property
    def gloo_timeout_s(self) -> float:
        """Wall seconds a rank waits in a collective before gloo gives up."""
        return max(TIMEOUT_FLOOR_S, self.nccl_timeout_s * self.time_scale)


@dataclass(frozen=True)
class SimConfig:
    """The run the twin models: SkyRL's configuration, typed, plus its environment."""

    applied: AppliedConfig
    layout: Layout
    warnings: tuple[str, ...]
    """What SkyRL prints while checking the config (a renamed strategy)."""
    arch: Architecture
    model_path: str
    strategy: str
    n_gpus: int
    sp: int
    colocate_all: bool
    policy_offload: bool
    ref_offload: bool
    use_ref: bool
    reshard_after_forward: bool
    offload_optimizer_after_step: bool
    gradient_checkpointing: bool
    use_sample_packing: bool
    flash_attn: bool
    train_batch_size: int
    policy_mini_batch_size: int
    micro_train: int
    micro_fwd: int
    update_epochs_per_batch: int
    n_samples: int
    max_turns: int
    max_prompt_length: int
    max_input_length: int
    max_generate_length: int
    num_engines: int
    engine_tp: int
    engine_pp: int
    engine_dp: int
    gpu_memory_utilization: float
    max_num_seqs: int
    max_num_batched_tokens: int
    enforce_eager: bool
    weight_sync_backend: str
    epochs: int
    max_training_steps: int | None
    """``trainer.max_training_steps`` (today's layout; None: no cap)."""
    eval_batch_size: int
    eval_before_train: bool
    eval_interval: int
    eval_n_samples: int
    eval_max_generate_length: int
    ckpt_interval: int
    hf_save_interval: int
    dump_data_batch: bool
    resume_mode: str
    log_path: str
    """``trainer.log_path``: where the infra log goes (today's layout)."""
    loggers: tuple[str, ...]
    seed: int
    lr: float
    max_grad_norm: float
    env: RunEnv

    forced_longest: bool = False
    """Every turn generates ``max_generate_length`` tokens: ``generator.sampling_params.additional_kwargs``
    holds vLLM's ``min_tokens`` at least that (stop strings and EOS wait for it) or ``ignore_eos``
    true (EOS is ignored; the twin takes the stop strings as ignored too). The batch is the longest
    the config allows, every step."""

    @property
    def dp(self) -> int:
        """Data-parallel size of the policy (GPUs / sequence-parallel size)."""
        return max(1, self.n_gpus // self.sp)

    @property
    def samples_per_step(self) -> int:
        """Trajectories per training step: ``train_batch_size * n_samples_per_prompt``."""
        return self.train_batch_size * self.n_samples

    @property
    def rollout_gpus(self) -> int:
        return self.num_engines * self.engine_tp * self.engine_pp * self.engine_dp

    @property
    def gpus_needed(self) -> int:
        """GPUs the placement group asks for."""
        return self.n_gpus if self.colocate_all else self.n_gpus + self.rollout_gpus


def _sim_env_error(name: str, value: str, why: str) -> SimConfigError:
    return SimConfigError("sim_env", f"{name}={value!r}: {why}", [f"error: {name}={value!r}: {why}"])


def _env_int(env: Mapping[str, str | None], name: str, default: int, *, python_style: bool = False) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        if python_style:
            raise SimConfigError(
                "sim_env",
                f"{name}={raw!r} is not an integer (skyrl_train reads it with int())",
                ["Traceback (most recent call last):", f"ValueError: invalid literal for int() with base 10: {raw!r}"],
            ) from None
        raise _sim_env_error(name, raw, "expected an integer") from None


def skyrl_worker_env(weight_sync_backend: str) -> dict[str, str]:
    """What SkyRL's ``prepare_runtime_environment`` sets for its workers, for the variables the twin
    models: ``NCCL_CUMEM_ENABLE=0`` when weights are synced over NCCL. (It also sets
    ``NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1`` when GPUs lack peer access, which H100s with NVLink have.)"""
    return {"NCCL_CUMEM_ENABLE": "0"} if weight_sync_backend == "nccl" else {}


def _truthy(raw: str | None) -> bool:
    return str(raw or "").strip().lower() in ("true", "1", "yes")


def read_run_env(env: Mapping[str, str | None], n_gpus: int, forced: Mapping[str, str] | None = None) -> RunEnv:
    """The twin's, SkyRL's, PyTorch's and NCCL's environment variables; ``forced`` are what SkyRL
    sets for its workers (they win over ``env`` for the NCCL settings the ranks get)."""
    forced = dict(forced or {})
    ranks = _env_int(env, "SIM_RANKS", DEFAULT_RANKS)
    if not 1 <= ranks <= GPUS_PER_NODE:
        raise _sim_env_error("SIM_RANKS", str(ranks), f"expected 1..{GPUS_PER_NODE} processes")
    ranks = min(ranks, max(1, n_gpus))
    raw_scale = env.get("SIM_TIME_SCALE")
    scale = DEFAULT_TIME_SCALE
    if raw_scale:
        try:
            scale = float(raw_scale)
        except ValueError:
            raise _sim_env_error("SIM_TIME_SCALE", raw_scale, "expected a positive number") from None
        if not scale > 0:
            raise _sim_env_error("SIM_TIME_SCALE", raw_scale, "expected a positive number")
    raw_seed = env.get("SIM_SEED")
    seed: int | None = None
    if raw_seed:
        try:
            seed = int(raw_seed)
        except ValueError:
            raise _sim_env_error("SIM_SEED", raw_seed, "expected an integer") from None
    fr = _env_int(env, "TORCH_FR_BUFFER_SIZE", 2000)
    dump_raw = (env.get("TORCH_NCCL_DUMP_ON_TIMEOUT") or "1").strip().lower()
    aeh = _env_int(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING", 3)
    return RunEnv(
        ranks=ranks,
        time_scale=scale,
        sim_seed=seed,
        faults=parse_faults(env.get(FAULT_ENV), ranks),
        nccl=read_nccl_env({**env, **forced}),
        nccl_timeout_s=float(_env_int(env, "SKYRL_WORKER_NCCL_TIMEOUT_IN_S", 600, python_style=True)),
        pg_timeout_s=float(_env_int(env, "SKYRL_RAY_PG_TIMEOUT_IN_S", 180, python_style=True)),
        fr_buffer_size=fr,
        fr_dump_prefix=env.get("TORCH_FR_DUMP_TEMP_FILE") or DEFAULT_FR_DUMP_PREFIX,
        dump_on_timeout=dump_raw not in ("0", "false", "no", "off"),
        abort_on_error=aeh not in (0, 2),
        infra_to_stdout=_truthy(env.get("SKYRL_DUMP_INFRA_LOG_TO_STDOUT")),
        forced=forced,
    )


def _validation_refusal(
    cfg_tokens: Sequence[str], exc: BaseException, layout: Layout = Layout.LEGACY
) -> SimConfigError:
    """A ``validate_cfg`` refusal as the layout prints it: Hydra's job error around the traceback
    (skyrl_train), or a plain Python traceback (today's entry point is not a Hydra app)."""
    hydra = layout is Layout.LEGACY
    lines = [f"Error executing job with overrides: {list(cfg_tokens)!r}"] if hydra else []
    lines.append("Traceback (most recent call last):")
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.name != "_check"]
    for chunk in traceback.format_list(frames):
        lines.extend(chunk.rstrip("\n").split("\n"))
    lines.extend(part.rstrip("\n") for part in traceback.format_exception_only(type(exc), exc))
    if hydra:
        lines += ["", HYDRA_FULL_ERROR_HINT]
    message = str(exc)
    if not message and frames:
        message = f"assertion failed in {frames[-1].name}: {frames[-1].line}"
    return SimConfigError(
        "validation", f"{layout.value}'s validate_cfg refused the config: {type(exc).__name__}: {message}", lines
    )


def _set(tree: Any, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for part in parents:
        tree = tree[part]
    tree[last] = value


def _unsupported(what: str, fix: str) -> SimConfigError:
    return SimConfigError(
        "unsupported",
        f"the synthetic twin does not model {what}; {fix}",
        [f"error: the synthetic twin does not model {what}; {fix}"],
    )


def _today_type_refusal(exc: SimConfigError, path: str, value: Any) -> SimConfigError:
    """Today's SkyRL keeps a value's YAML type: a number given as text fails in ``validate_cfg``."""
    from twin.dataclass_config import python_traceback

    lines = python_traceback(
        names(Layout.TODAY).entrypoint_module.replace(".", "/") + ".py",
        ('  File "skyrl/train/utils/utils.py", line 73, in validate_batch_sizes',),
        f"TypeError: '>=' not supported between instances of '{type(value).__name__}' and 'int'",
    )
    return SimConfigError(
        "type", f"{path}={value!r}: not a number (today's SkyRL keeps it as text and its checks fail)", lines
    )


def _apply(argv: Sequence[str], env_map: Mapping[str, str | None], layout: Layout) -> tuple[AppliedConfig, list[str]]:
    """Apply the overrides as the layout's entry point does, type-check the keys the twin compares
    as numbers, run SkyRL's ``validate_cfg``; returns the warnings SkyRL prints."""
    if layout is Layout.TODAY:
        from twin.dataclass_config import apply_dataclass_overrides

        applied = apply_dataclass_overrides(list(argv), env_map)
    else:
        applied = apply_overrides(list(argv), env_map)
    keys = names(layout).keys
    for name, want in _TYPED_KEYS:
        path = keys.get(name, name)
        try:
            _set(applied.tree, path, convert_checked(path, applied.get(path), want, applied.source_token))
        except SimConfigError as exc:
            if layout is Layout.TODAY:
                raise _today_type_refusal(exc, path, applied.get(path)) from None
            raise
    try:
        if layout is Layout.TODAY:
            from twin.validate_today import validate_cfg_today

            return applied, validate_cfg_today(applied, env_map)
        validate_cfg(applied, env_map)
    except (AssertionError, ValueError) as exc:
        raise _validation_refusal(argv, exc, layout) from None
    return applied, []


def _check_supported(get, applied: AppliedConfig, layout: Layout) -> Architecture:
    """What the twin does not model, and an unknown model, refused with one line."""
    strategy = get("trainer.strategy", str)
    if strategy not in ("fsdp", "fsdp2"):
        raise _unsupported(f"trainer.strategy={strategy}", "use trainer.strategy=fsdp")
    if applied.get("trainer.critic.model.path") is not None:
        raise _unsupported("a critic model (trainer.critic.model.path)", "use a critic-free estimator such as grpo")
    backend_key = names(layout).keys["backend"]
    if get(backend_key, str) != "vllm":
        raise _unsupported(f"{backend_key}={applied.get(backend_key)}", f"use {backend_key}=vllm")
    nodes = get("trainer.placement.policy_num_nodes", int)
    if nodes != 1:
        raise _unsupported(f"{nodes} nodes (trainer.placement.policy_num_nodes)", "model one node")
    model_path = get("trainer.policy.model.path", str)
    arch = ARCHITECTURES.get(model_path)
    if arch is None:
        raise SimConfigError(
            "unknown_model",
            f"trainer.policy.model.path={model_path!r} is not a model the twin knows (known: Qwen/Qwen2.5[-Coder]-{{0.5B,1.5B,3B,7B,14B,32B}}-Instruct)",
            [
                "Traceback (most recent call last):",
                f"OSError: {model_path} is not a local folder and is not a valid model identifier listed on "
                "'https://huggingface.co/models'",
                "If this is a private repository, make sure to pass a token having permission to this repo either "
                "by logging in with `huggingface-cli login` or by passing `token=<your_token>`",
            ],
        )
    return arch


def parse_overrides(
    argv: Sequence[str], env: Mapping[str, str | None] | None = None, layout: Layout = Layout.TODAY
) -> SimConfig:
    """Parse SkyRL-style ``key=value`` tokens (the last value of a key wins) and the environment
    into a :class:`SimConfig`, the way ``layout``'s entry point does; raise :class:`SimConfigError`
    for what SkyRL (or the twin) refuses."""
    layout = Layout(layout)
    env_map: Mapping[str, str | None] = dict(os.environ) if env is None else env
    applied, warnings = _apply(argv, env_map, layout)
    src = applied.source_token
    keys = names(layout).keys

    def get(path: str, want: type) -> Any:
        return convert_checked(path, applied.get(path), want, src)

    arch = _check_supported(get, applied, layout)
    loggers = applied.get("trainer.logger")
    loggers_t = (loggers,) if isinstance(loggers, str) else tuple(str(x) for x in loggers or ())
    nodes = get("trainer.placement.policy_num_nodes", int)
    n_gpus = nodes * get("trainer.placement.policy_num_gpus_per_node", int)
    sync_backend = get(keys["weight_sync_backend"], str)
    steps_cap = applied.get("trainer.max_training_steps") if layout is Layout.TODAY else None
    return SimConfig(
        applied=applied,
        layout=layout,
        warnings=tuple(warnings),
        arch=arch,
        model_path=get("trainer.policy.model.path", str),
        strategy=get("trainer.strategy", str),
        n_gpus=n_gpus,
        sp=max(1, get("trainer.policy.sequence_parallel_size", int)),
        colocate_all=get("trainer.placement.colocate_all", bool),
        policy_offload=get("trainer.policy.fsdp_config.cpu_offload", bool),
        ref_offload=get("trainer.ref.fsdp_config.cpu_offload", bool),
        use_ref=bool(get("trainer.algorithm.use_kl_loss", bool) or get("trainer.algorithm.use_kl_in_reward", bool)),
        reshard_after_forward=bool(applied.get("trainer.policy.fsdp_config.reshard_after_forward")),
        offload_optimizer_after_step=get("trainer.policy.optimizer_config.offload_after_step", bool),
        gradient_checkpointing=get("trainer.gradient_checkpointing", bool),
        use_sample_packing=get(keys["sample_packing"], bool),
        flash_attn=get("trainer.flash_attn", bool),
        train_batch_size=get("trainer.train_batch_size", int),
        policy_mini_batch_size=get("trainer.policy_mini_batch_size", int),
        micro_train=get("trainer.micro_train_batch_size_per_gpu", int),
        micro_fwd=get("trainer.micro_forward_batch_size_per_gpu", int),
        update_epochs_per_batch=max(1, get("trainer.update_epochs_per_batch", int)),
        n_samples=get("generator.n_samples_per_prompt", int),
        max_turns=max(1, get("generator.max_turns", int)),
        max_prompt_length=get("trainer.max_prompt_length", int),
        max_input_length=get("generator.max_input_length", int),
        max_generate_length=get("generator.sampling_params.max_generate_length", int),
        num_engines=get(keys["num_engines"], int),
        engine_tp=get(keys["engine_tp"], int),
        engine_pp=get(keys["engine_pp"], int),
        engine_dp=get(keys["engine_dp"], int),
        gpu_memory_utilization=get(keys["gpu_memory_utilization"], float),
        max_num_seqs=get(keys["max_num_seqs"], int),
        max_num_batched_tokens=get(keys["max_num_batched_tokens"], int),
        enforce_eager=get(keys["enforce_eager"], bool),
        weight_sync_backend=sync_backend,
        epochs=get("trainer.epochs", int),
        max_training_steps=None if steps_cap is None else get("trainer.max_training_steps", int),
        eval_batch_size=get("trainer.eval_batch_size", int),
        eval_before_train=get("trainer.eval_before_train", bool),
        eval_interval=get("trainer.eval_interval", int),
        eval_n_samples=get("generator.eval_n_samples_per_prompt", int),
        eval_max_generate_length=get("generator.eval_sampling_params.max_generate_length", int),
        ckpt_interval=get("trainer.ckpt_interval", int),
        hf_save_interval=get("trainer.hf_save_interval", int),
        dump_data_batch=get("trainer.dump_data_batch", bool),
        resume_mode=str(applied.get("trainer.resume_mode")),
        log_path=get("trainer.log_path", str),
        loggers=loggers_t,
        seed=get("trainer.seed", int),
        lr=get("trainer.policy.optimizer_config.lr", float),
        max_grad_norm=get("trainer.policy.optimizer_config.max_grad_norm", float),
        env=read_run_env(env_map, n_gpus, skyrl_worker_env(sync_backend)),
        forced_longest=_forced_longest(applied, get),
    )


def _forced_longest(applied: AppliedConfig, get) -> bool:
    """True when the sampling arguments vLLM gets (``generator.sampling_params.additional_kwargs``,
    where the layout has it) make every turn run to ``max_generate_length``."""
    try:
        extra = applied.get("generator.sampling_params.additional_kwargs")
    except KeyError:
        return False
    if not isinstance(extra, Mapping):
        return False
    if str(extra.get("ignore_eos", "")).lower() in ("true", "1"):
        return True
    try:
        return int(extra.get("min_tokens") or 0) >= get("generator.sampling_params.max_generate_length", int)
    except (TypeError, ValueError):
        return False


_TYPED_KEYS: tuple[tuple[str, type], ...] = (
    ("trainer.train_batch_size", int),
    ("trainer.policy_mini_batch_size", int),
    ("trainer.micro_train_batch_size_per_gpu", int),
    ("trainer.micro_forward_batch_size_per_gpu", int),
    ("trainer.placement.policy_num_nodes", int),
    ("trainer.placement.policy_num_gpus_per_node", int),
    ("trainer.placement.ref_num_nodes", int),
    ("trainer.placement.ref_num_gpus_per_node", int),
    ("trainer.policy.sequence_parallel_size", int),
    ("trainer.ref.sequence_parallel_size", int),
    ("trainer.max_prompt_length", int),
    ("generator.max_input_length", int),
    ("generator.n_samples_per_prompt", int),
    ("generator.max_turns", int),
    ("num_engines", int),
    ("engine_tp", int),
    ("engine_pp", int),
    ("engine_dp", int),
    ("generator.sampling_params.max_generate_length", int),
    ("generator.eval_sampling_params.max_generate_length", int),
    ("gpu_memory_utilization", float),
    ("trainer.max_ckpts_to_keep", int),
)
"""Keys (a dotted key, or a logical name of :data:`twin.layout.Names.keys` for keys that moved) ``validate_cfg`` compares as numbers: checked before it runs, so a wrongly typed value gets
the merge error a structured config gives, not a TypeError deep in validation."""
