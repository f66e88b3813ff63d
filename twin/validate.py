"""skyrl_train's configuration checks, in its order and with its messages.

Mirrors ``skyrl_train/utils/utils.py``: ``validate_cfg`` (which starts with
``validate_generator_cfg``, then the algorithm and strategy checks, then ``validate_batch_sizes``,
the checkpoint and registry checks and the colocated placement check). SkyRL's checks are plain
``assert`` statements, so a refusal is an ``AssertionError`` whose message is SkyRL's; the
functions here raise the same (``raise AssertionError(...)``, which ``python -O`` keeps).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from twin.overrides import AppliedConfig

POLICY_LOSSES = ("regular", "dual_clip", "gspo", "clip_cov", "kl_cov", "cispo", "sapo")
"""skyrl_train's PolicyLossRegistry (built-in losses)."""
ADVANTAGE_ESTIMATORS = ("gae", "grpo", "rloo", "reinforce++")
"""skyrl_train's AdvantageEstimatorRegistry (built-in estimators)."""
LOGGERS = ("wandb", "mlflow", "swanlab", "tensorboard", "console")
"""skyrl_train's Tracking backends."""


def _check(ok: bool, message: str = "") -> None:
    if not ok:
        raise AssertionError(message) if message else AssertionError()


def validate_generator_cfg(cfg: AppliedConfig, env: Mapping[str, str | None]) -> None:
    """skyrl_train's ``validate_generator_cfg``."""
    g = cfg.get
    if g("generator.max_turns") == 1:
        _check(
            g("generator.max_input_length") == g("trainer.max_prompt_length"),
            "generator.max_input_length should be set equal to trainer.max_prompt_length for single-turn generation",
        )
    else:
        _check(
            g("generator.max_input_length") >= g("trainer.max_prompt_length"),
            "generator.max_input_length should be set greater than or equal to trainer.max_prompt_length "
            "for multi-turn generation",
        )
    if not g("generator.run_engines_locally"):
        _check(
            g("generator.num_inference_engines") == len(g("generator.remote_inference_engine_urls") or []),
            "num_inference_engines should be equal to the number of remote_inference_engine_urls",
        )
    if not g("generator.async_engine") and g("generator.backend") == "vllm":
        _check(
            bool(g("generator.batched")),
            "if we are using the offline vLLM engine, we need to put generator in batched mode for faster generation",
        )
    loggers = g("trainer.logger")
    loggers = [loggers] if isinstance(loggers, str) else list(loggers or [])
    if "wandb" in loggers:
        _check(bool(env.get("WANDB_API_KEY")), "`WANDB_API_KEY` is required for `wandb` logger")
    logprobs = g("generator.sampling_params.logprobs")
    if logprobs is not None:
        _check(isinstance(logprobs, int) and not isinstance(logprobs, bool))
        if logprobs > 1:
            raise ValueError(
                f"`logprobs` if set should be 0 or 1 (both return only the chosen token's logprob), got {logprobs}"
            )


def validate_batch_sizes(cfg: AppliedConfig) -> None:
    """skyrl_train's ``validate_batch_sizes`` (FSDP strategies)."""
    g = cfg.get
    train_bs = g("trainer.train_batch_size")
    mini_bs = g("trainer.policy_mini_batch_size")
    micro_train = g("trainer.micro_train_batch_size_per_gpu")
    micro_fwd = g("trainer.micro_forward_batch_size_per_gpu")
    n_samples = g("generator.n_samples_per_prompt")
    _check(train_bs >= mini_bs)
    _check(mini_bs > 0, "policy_mini_batch_size must be greater than 0")
    critic = g("trainer.critic.model.path") is not None
    if critic:
        _check(train_bs >= g("trainer.critic_mini_batch_size"))
        _check(g("trainer.critic_mini_batch_size") > 0, "critic_mini_batch_size must be greater than 0")
    _check(micro_train > 0, "micro_train_batch_size_per_gpu must be greater than 0")
    _check(micro_fwd > 0, "micro_forward_batch_size_per_gpu must be greater than 0")
    policy_world = g("trainer.placement.policy_num_nodes") * g("trainer.placement.policy_num_gpus_per_node")
    policy_dp = policy_world // g("trainer.policy.sequence_parallel_size")
    _check(
        train_bs % mini_bs == 0,
        f"train_batch_size {train_bs} should be divisible by policy_mini_batch_size {mini_bs}",
    )
    mini_per_gpu = mini_bs * n_samples // policy_dp if policy_dp else 0
    _check(
        mini_per_gpu > 0,
        f"Invalid policy_mini_batch_size_per_gpu: {mini_per_gpu}. mini_batch_size={mini_bs}, "
        f"n_samples_per_prompt={n_samples}, dp_size={policy_dp}",
    )
    _check(
        mini_per_gpu % micro_train == 0,
        f"normalized policy_mini_batch_size_per_gpu {mini_per_gpu} should be divisible "
        f"by micro_train_batch_size_per_gpu {micro_train}",
    )
    _check(
        mini_per_gpu // micro_train > 0,
        f"normalized policy_mini_batch_size_per_gpu {mini_per_gpu} should be larger than "
        f"micro_train_batch_size_per_gpu {micro_train}",
    )
    train_per_gpu = train_bs * n_samples // policy_dp
    _check(
        train_per_gpu % mini_per_gpu == 0,
        "normalized policy_train_batch_size_per_gpu (train_batch_size * n_samples_per_prompt // policy_dp_size) "
        f"{train_per_gpu} should be divisible by policy_mini_batch_size_per_gpu "
        f"(policy_mini_batch_size * n_samples_per_prompt // policy_dp_size) {mini_per_gpu}",
    )
    lcm_dp = policy_dp
    use_ref = bool(g("trainer.algorithm.use_kl_loss") or g("trainer.algorithm.use_kl_in_reward"))
    ref_dp: Any = "None"
    if use_ref:
        ref_world = g("trainer.placement.ref_num_nodes") * g("trainer.placement.ref_num_gpus_per_node")
        ref_dp = ref_world // g("trainer.ref.sequence_parallel_size")
        lcm_dp = math.lcm(lcm_dp, ref_dp)
    _check(
        train_bs * n_samples >= lcm_dp,
        f"train_batch_size * n_samples_per_prompt ({train_bs * n_samples}) should be larger than or equal to the "
        f"least common multiple of the data parallel sizes of the enabled models: policy_dp_size={policy_dp}, "
        f"ref_dp_size={ref_dp}, lcm_dp_size={lcm_dp}",
    )


def validate_cfg(cfg: AppliedConfig, env: Mapping[str, str | None]) -> None:
    """skyrl_train's ``validate_cfg``; raises ``AssertionError`` (or ``ValueError``) with SkyRL's message."""
    g = cfg.get
    validate_generator_cfg(cfg, env)
    backend = g("trainer.sequence_parallel_backend")
    _check(backend == "ulysses", f"only ulysses is supported as of now, got {backend}")
    if g("trainer.algorithm.advantage_estimator") == "gae":
        _check(
            bool(g("trainer.critic.model.path")),
            "`trainer.critic.model.path` should be provided for PPO training, got `None`",
        )
    _check(
        not (g("trainer.algorithm.use_kl_in_reward") and g("trainer.algorithm.use_kl_loss")),
        "use_kl_in_reward and use_kl_loss should be mutually exclusive",
    )
    strategy = g("trainer.strategy")
    if strategy in ("fsdp", "fsdp2"):
        _check(
            not (g("trainer.policy.fsdp_config.cpu_offload") and strategy == "fsdp"),
            "fwd pass cpu offloading is not supported for FSDP1 policy worker, use FSDP2 instead",
        )
        _check(
            not (g("trainer.critic.fsdp_config.cpu_offload") and strategy == "fsdp"),
            "fwd pass cpu offloading is not supported for FSDP1 critic worker, use FSDP2 instead",
        )
    validate_batch_sizes(cfg)
    if g("trainer.max_ckpts_to_keep") == 0:
        raise ValueError(
            "`max_ckpts_to_keep` must be greater than 0 to keep the last N checkpoints or negative to keep all checkpoints"
        )
    loss_type = g("trainer.algorithm.policy_loss_type")
    _check(
        loss_type in POLICY_LOSSES,
        f"invalid policy_loss_type: {loss_type}. Must be one of {list(POLICY_LOSSES)}",
    )
    estimator = g("trainer.algorithm.advantage_estimator")
    _check(
        estimator in ADVANTAGE_ESTIMATORS,
        f"invalid advantage_estimator: {estimator}. Must be one of {list(ADVANTAGE_ESTIMATORS)}",
    )
    reduction = g("trainer.algorithm.loss_reduction")
    _check(
        reduction in ("token_mean", "sequence_mean", "seq_mean_token_sum_norm"),
        f"invalid loss_reduction: {reduction}. Must be one of `['token_mean', 'sequence_mean', 'seq_mean_token_sum_norm']`",
    )
    if g("trainer.placement.colocate_all"):
        policy_gpus = g("trainer.placement.policy_num_gpus_per_node") * g("trainer.placement.policy_num_nodes")
        rollout_gpus = (
            g("generator.num_inference_engines")
            * g("generator.inference_engine_tensor_parallel_size")
            * g("generator.inference_engine_pipeline_parallel_size")
            * g("generator.inference_engine_data_parallel_size")
        )
        _check(
            policy_gpus == rollout_gpus,
            f"num_policy_gpus ({policy_gpus}) and num_rollout_gpus ({rollout_gpus}) must be the same when colocating all models",
        )
    loggers = g("trainer.logger")
    for name in [loggers] if isinstance(loggers, str) else list(loggers or []):
        _check(name in LOGGERS, f"{name} is not supported")
