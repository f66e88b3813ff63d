"""The twin's default configuration: the key tree of skyrl_train's ``ppo_base_config.yaml``.

Key names, nesting and default values follow skyrl_train (``skyrl_train/config/ppo_base_config.yaml``
with its defaults list: ``megatron_config@trainer.{policy,ref}.megatron_config`` and
``skyrl_gym_config/default.yaml`` under ``environment.skyrl_gym``), so that an override SkyRL accepts
is accepted here and a key SkyRL does not know is refused. Values of the form ``${a.b}`` are
interpolations (resolved after overrides, as OmegaConf does); ``${oc.env:HOME}`` reads the
environment.

Only the values the cost model reads change the twin's behaviour; the rest exist so that the
twin's key set is SkyRL's.
"""

from __future__ import annotations

import copy
from typing import Any


def _lora(init_method: str = "kaiming", sync_path: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"rank": 0, "alpha": 16, "dropout": 0}
    if sync_path:
        out["lora_sync_path"] = "/tmp/skyrl_lora_sync"
    out.update({"target_modules": "all-linear", "exclude_modules": None, "init_method": init_method})
    return out


def _optimizer(lr: float) -> dict[str, Any]:
    return {
        "lr": lr,
        "adam_betas": [0.9, 0.999],
        "weight_decay": 1e-2,
        "max_grad_norm": 1.0,
        "offload_after_step": True,
        "num_warmup_steps": 0,
        "scheduler": "constant_with_warmup",
    }


def _fsdp() -> dict[str, Any]:
    return {"cpu_offload": False, "reshard_after_forward": True, "fsdp_size": -1}


def _megatron_policy() -> dict[str, Any]:
    return {
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 1,
        "context_parallel_size": 1,
        "expert_model_parallel_size": 1,
        "expert_tensor_parallel_size": None,
        "ddp_config": {
            "grad_reduce_in_fp32": True,
            "overlap_grad_reduce": False,
            "overlap_param_gather": False,
            "average_in_collective": True,
        },
        "model_config_kwargs": {},
        "torch_profiler_config": {"enable": False, "ranks": [], "save_path": None},
        "lora_config": {"lora_type": "lora"},
        "optimizer_config_kwargs": {
            "overlap_cpu_optimizer_d2h_h2d": False,
            "use_precision_aware_optimizer": False,
            "optimizer_cpu_offload": False,
            "optimizer_offload_fraction": 0.0,
        },
        "transformer_config_kwargs": {
            "recompute_granularity": "full",
            "recompute_modules": ["core_attn"],
            "recompute_method": "uniform",
            "recompute_num_layers": 1,
        },
        "empty_cuda_cache": True,
    }


def _megatron_ref() -> dict[str, Any]:
    return {
        "tensor_model_parallel_size": 1,
        "pipeline_model_parallel_size": 1,
        "context_parallel_size": 1,
        "expert_model_parallel_size": 1,
        "expert_tensor_parallel_size": 1,
        "model_config_kwargs": {},
        "transformer_config_kwargs": {},
    }


def _sampling(max_generate_length: Any, temperature: float) -> dict[str, Any]:
    return {
        "max_generate_length": max_generate_length,
        "repetition_penalty": 1.0,
        "temperature": temperature,
        "top_p": 1.0,
        "min_p": 0.0,
        "top_k": -1,
        "logprobs": 1,
        "stop": None,
    }


_DEFAULTS: dict[str, Any] = {
    "data": {
        "train_data": ["${oc.env:HOME}/data/gsm8k/train.parquet"],
        "val_data": ["${oc.env:HOME}/data/gsm8k/validation.parquet"],
    },
    "trainer": {
        "placement": {
            "colocate_all": True,
            "colocate_policy_ref": True,
            "policy_num_nodes": 1,
            "policy_num_gpus_per_node": 1,
            "critic_num_nodes": 1,
            "critic_num_gpus_per_node": 1,
            "ref_num_nodes": 1,
            "ref_num_gpus_per_node": 1,
        },
        "sequence_parallel_backend": "ulysses",
        "strategy": "fsdp2",
        "policy": {
            "model": {"path": "Qwen/Qwen2.5-1.5B-Instruct", "lora": _lora(sync_path=True)},
            "optimizer_config": _optimizer(1.0e-6),
            "fsdp_config": _fsdp(),
            "sequence_parallel_size": 1,
            "use_torch_compile": False,
            "record_memory": False,
            "model_config_kwargs": {},
            "megatron_config": _megatron_policy(),
        },
        "ref": {
            "model": {"path": "${trainer.policy.model.path}"},
            "sequence_parallel_size": 1,
            "fsdp_config": _fsdp(),
            "model_config_kwargs": {},
            "megatron_config": _megatron_ref(),
        },
        "critic": {
            "model": {"path": None, "lora": _lora()},
            "optimizer_config": _optimizer(5.0e-6),
            "fsdp_config": _fsdp(),
            "sequence_parallel_size": 1,
            "model_config_kwargs": {},
        },
        "algorithm": {
            "advantage_estimator": "grpo",
            "kl_ctrl": {"type": "fixed", "kl_target": 0.1, "horizon": 10000},
            "kl_estimator_type": "k3",
            "use_kl_in_reward": False,
            "use_kl_loss": True,
            "kl_loss_coef": 0.001,
            "use_entropy_loss": False,
            "entropy_loss_coef": 0.01,
            "advantage_batch_normalize": False,
            "value_head_prefix": "value_head",
            "policy_loss_type": "regular",
            "loss_reduction": "token_mean",
            "grpo_norm_by_std": True,
            "zero_variance_filter": False,
            "lambd": 1.0,
            "gamma": 1.0,
            "eps_clip_low": 0.2,
            "eps_clip_high": 0.2,
            "clip_ratio_c": 3.0,
            "tis_imp_ratio_cap": -1.0,
            "use_tis": False,
            "max_seq_len": None,
            "off_policy_correction": {
                "tis_ratio_type": None,
                "token_tis_ratio_clip_high": 2.0,
                "sequence_tis_ratio_clip_high": 5.0,
                "sequence_mask_metric": None,
                "geo_mask_high": 1.01,
                "geo_mask_low": 0.99,
                "product_mask_high": 2.0,
                "product_mask_low": 0.5,
                "outlier_token_is_threshold_low": None,
                "outlier_token_is_threshold_high": None,
            },
            "sapo": {"tau_pos": 1.0, "tau_neg": 1.05},
            "value_clip": 0.2,
            "dynamic_sampling": {"type": None, "max_sample_batches": 30, "min_replace_ratio": 0.3},
            "clip_cov": {"clip_ratio": 0.0002, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0},
            "kl_cov": {"kl_cov_frac": 0.2, "ppo_kl_coef": 1.0},
            "cispo": {"cispo_eps_clip_low": 0, "cispo_eps_clip_high": 5},
        },
        "fully_async": {"max_staleness_steps": 4, "num_parallel_generation_workers": 768},
        "gradient_checkpointing": True,
        "gradient_checkpointing_use_reentrant": False,
        "seed": 42,
        "resume_mode": "latest",
        "resume_path": None,
        "log_path": "/tmp/skyrl-logs",
        "ckpt_path": "${oc.env:HOME}/ckpts/",
        "max_ckpts_to_keep": -1,
        "ckpt_interval": 10,
        "hf_save_interval": -1,
        "export_path": "${oc.env:HOME}/exports/",
        "bf16": True,
        "epochs": 1,
        "update_epochs_per_batch": 1,
        "train_batch_size": 1024,
        "policy_mini_batch_size": 256,
        "critic_mini_batch_size": 256,
        "micro_train_batch_size_per_gpu": 1,
        "micro_forward_batch_size_per_gpu": 1,
        "update_ref_every_epoch": False,
        "use_sample_packing": True,
        "eval_batch_size": 1024,
        "eval_before_train": True,
        "eval_interval": 5,
        "max_prompt_length": 512,
        "flash_attn": True,
        "disable_fast_tokenizer": False,
        "project_name": "skyrl",
        "run_name": "test_run",
        "logger": "wandb",
        "dump_data_batch": False,
        "dump_eval_results": True,
        "rope_scaling": None,
        "rope_theta": None,
    },
    "generator": {
        "model_name": "${trainer.policy.model.path}",
        "model_dtype": "bfloat16",
        "run_engines_locally": True,
        "num_inference_engines": 1,
        "backend": "vllm",
        "weight_sync_backend": "nccl",
        "weight_transfer_threshold_cuda_ipc_GB": 1.0,
        "external_proxy_url": None,
        "external_server_urls": None,
        "inference_engine_tensor_parallel_size": 1,
        "inference_engine_pipeline_parallel_size": 1,
        "inference_engine_expert_parallel_size": 1,
        "inference_engine_data_parallel_size": 1,
        "n_samples_per_prompt": 5,
        "async_engine": True,
        "batched": False,
        "max_input_length": "${trainer.max_prompt_length}",
        "vllm_v1_disable_multiproc": True,
        "enable_prefix_caching": True,
        "enable_chunked_prefill": True,
        "max_num_batched_tokens": 8192,
        "enforce_eager": True,
        "fully_sharded_loras": False,
        "enable_ray_prometheus_stats": False,
        "gpu_memory_utilization": 0.8,
        "max_num_seqs": 1024,
        "remote_inference_engine_urls": ["127.0.0.1:8001"],
        "enable_http_endpoint": False,
        "http_endpoint_host": "127.0.0.1",
        "http_endpoint_port": 8000,
        "served_model_name": None,
        "max_turns": 1,
        "chat_template": {"source": "name", "name_or_path": None},
        "chat_template_kwargs": {},
        "engine_init_kwargs": {},
        "override_existing_update_group": "auto",
        "sampling_params": _sampling(1024, 1.0),
        "use_conversation_multi_turn": True,
        "append_eos_token_after_stop_str_in_multi_turn": True,
        "eval_sampling_params": _sampling("${generator.sampling_params.max_generate_length}", 0.0),
        "eval_n_samples_per_prompt": 1,
        "zero_reward_on_non_stop": False,
        "apply_overlong_filtering": False,
        "rope_scaling": "${trainer.rope_scaling}",
        "rope_theta": "${trainer.rope_theta}",
        "step_wise_trajectories": False,
    },
    "environment": {
        "env_class": "gsm8k",
        "skyrl_gym": {
            "max_env_workers": 32,
            "text2sql": {"db_path": "/home/ray/default/sql_data"},
            "llm_as_a_judge": {"model": "gpt-4o-mini", "base_url": None},
            "search": {
                "log_requests": False,
                "search_url": "http://127.0.0.1:8000/retrieve",
                "topk": 3,
                "timeout": 30,
            },
        },
    },
}


def default_tree() -> dict[str, Any]:
    """A fresh, mutable copy of the default configuration tree."""
    return copy.deepcopy(_DEFAULTS)


# Keys whose type the twin checks (the structured-config schema of newer skyrl_train would refuse a
# wrongly typed value at merge time; the plain YAML layout would crash later with a TypeError).
def default_value(path: str) -> Any:
    """Default value at dotted ``path`` (``KeyError`` if the key does not exist)."""
    node: Any = _DEFAULTS
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(path)
        node = node[part]
    return node
