"""Today's SkyRL configuration checks (``skyrl/train/utils/utils.py``: ``validate_cfg``,
``validate_generator_cfg``, ``validate_inference_engine_cfg``), in their order and with their
messages, for the keys the twin reads. The batch-size relations are the same as skyrl_train's
(:func:`twin.validate.validate_batch_sizes`).

``validate_cfg_today`` returns the warnings SkyRL prints (``trainer.strategy=fsdp2`` is renamed to
``fsdp``) and raises ``AssertionError``/``ValueError`` with SkyRL's message for a refusal.
"""

from __future__ import annotations

from collections.abc import Mapping

from twin.overrides import AppliedConfig
from twin.validate import _check, validate_batch_sizes

POLICY_LOSSES = (
    "regular", "dual_clip", "gspo", "cispo", "rollout_is", "clip_cov", "kl_cov", "sapo", "cross_entropy",
    "importance_sampling", "dppo",
)  # fmt: skip
"""``PolicyLossType`` of ``skyrl/backends/skyrl_train/utils/ppo_utils.py``."""
ADVANTAGE_ESTIMATORS = ("gae", "grpo", "rloo", "reinforce++", "maxrl")
LOSS_REDUCTIONS = ("token_mean", "token_mean_legacy", "sequence_mean", "seq_mean_token_sum_norm", "prompt_mean")


def _generator(cfg: AppliedConfig, env: Mapping[str, str | None]) -> None:
    g = cfg.get
    if g("generator.max_turns") == 1:
        _check(
            g("generator.max_input_length") == g("trainer.max_prompt_length"),
            "max_input_length should be set equal to trainer.max_prompt_length for single-turn generation",
        )
    else:
        _check(
            g("generator.max_input_length") >= g("trainer.max_prompt_length"),
            "max_input_length should be set greater than or equal to trainer.max_prompt_length for multi-turn generation",
        )
    if g("trainer.logger") == "wandb":
        _check(bool(env.get("WANDB_API_KEY")), "`WANDB_API_KEY` is required for `wandb` logger")
    logprobs = g("generator.sampling_params.logprobs")
    if logprobs is not None:
        _check(isinstance(logprobs, int) and not isinstance(logprobs, bool))
        if logprobs > 1:
            raise ValueError(
                f"`logprobs` if set should be 0 or 1 (both return only the chosen token's logprob), got {logprobs}"
            )
    ie = "generator.inference_engine."
    ep, dp, tp = g(ie + "expert_parallel_size"), g(ie + "data_parallel_size"), g(ie + "tensor_parallel_size")
    if ep > 1:
        _check(
            dp * tp == ep,
            "If inference expert parallel is enabled, data parallel size * tensor parallel size must equal expert "
            f"parallel size. Got dp_size={dp}, tp_size={tp}, ep_size={ep}",
        )
    _check(g(ie + "distributed_executor_backend") in ("mp", "ray"), "invalid distributed executor backend")
    external = g(ie + "external_proxy_url") is not None or g(ie + "external_server_urls") is not None
    if g("trainer.placement.colocate_all") and external:
        raise ValueError("Cannot use external_proxy_url or external_server_urls with colocate_all=true.")
    if not g(ie + "run_engines_locally") and not external:
        raise ValueError(
            "generator.inference_engine.run_engines_locally=false requires external_proxy_url or external_server_urls."
        )


def _placement(cfg: AppliedConfig) -> None:
    g = cfg.get
    if not g("trainer.placement.colocate_all"):
        return
    policy_gpus = g("trainer.placement.policy_num_gpus_per_node") * g("trainer.placement.policy_num_nodes")
    ie = "generator.inference_engine."
    rollout_gpus = (
        g(ie + "num_engines")
        * g(ie + "tensor_parallel_size")
        * g(ie + "pipeline_parallel_size")
        * g(ie + "data_parallel_size")
    )
    _check(
        policy_gpus == rollout_gpus,
        f"num_policy_gpus ({policy_gpus}) and num_rollout_gpus ({rollout_gpus}) must be the same when colocating all models",
    )


def validate_cfg_today(cfg: AppliedConfig, env: Mapping[str, str | None]) -> list[str]:
    """Today's ``validate_cfg``; returns SkyRL's warnings, raises with its message on a refusal."""
    g = cfg.get
    warnings: list[str] = []
    if g("trainer.strategy") == "fsdp2":
        warnings.append("DeprecationWarning: trainer.strategy='fsdp2' has been renamed to 'fsdp'; use 'fsdp' instead.")
        cfg.tree["trainer"]["strategy"] = "fsdp"  # type: ignore[index]
    steps = g("trainer.max_training_steps")
    if steps is not None and steps <= 0:
        raise ValueError(f"max_training_steps must be > 0, got {steps}")
    _generator(cfg, env)
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
    validate_batch_sizes(cfg)
    if g("trainer.max_ckpts_to_keep") == 0:
        raise ValueError(
            "`max_ckpts_to_keep` must be greater than 0 to keep the last N checkpoints or negative to keep all checkpoints"
        )
    loss = g("trainer.algorithm.policy_loss_type")
    _check(loss in POLICY_LOSSES, f"invalid policy_loss_type: {loss}. Must be one of {list(POLICY_LOSSES)}")
    estimator = g("trainer.algorithm.advantage_estimator")
    _check(
        estimator in ADVANTAGE_ESTIMATORS,
        f"invalid advantage_estimator: {estimator}. Must be one of {list(ADVANTAGE_ESTIMATORS)}",
    )
    reduction = g("trainer.algorithm.loss_reduction")
    _check(
        reduction in LOSS_REDUCTIONS, f"invalid loss_reduction: {reduction}. Must be one of `{list(LOSS_REDUCTIONS)}`"
    )
    _placement(cfg)
    return warnings
