"""SkyRL's two layouts, and what differs between them for the twin.

SkyRL's training entry point picks its configuration by the module that runs: today's package
``skyrl.train`` (``skyrl/train/entrypoints/main_base.py``: dataclass configs built with
``SkyRLTrainConfig.from_cli_overrides``) or the legacy package ``skyrl_train`` (removed from SkyRL
in March 2026: Hydra over ``ppo_base_config.yaml``). The twin does the same: its entry modules
mirror SkyRL's paths under ``twin`` (``twin.skyrl.train.entrypoints.main_base``
and ``twin.skyrl_train.entrypoints.main_base``), and each passes its layout on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType


class Layout(str, Enum):
    """Which SkyRL package the command runs."""

    TODAY = "skyrl.train"
    """``skyrl.train``: dataclass configs, ``generator.inference_engine.*``, ``trainer.max_training_steps``."""
    LEGACY = "skyrl_train"
    """``skyrl_train``: Hydra over ``ppo_base_config.yaml``, no step cap."""


@dataclass(frozen=True)
class Names:
    """Module, actor and key names that differ between the layouts."""

    twin_module: str
    """The twin's entry module for this layout."""
    trainer_module: str
    """The module loguru names on the trainer loop's lines."""
    worker_module: str
    """The module loguru names on an FSDP policy worker's lines."""
    tracking_module: str
    utils_module: str
    entrypoint_module: str
    engine_actor: str
    """Ray actor class of a vLLM engine (the prefix Ray puts on its lines)."""
    keys: Mapping[str, str]
    """Logical name -> the dotted key of this layout, for keys that moved."""
    sites: Mapping[str, tuple[str, int]]
    """Function and line of each trainer log call (loguru names the caller of a ``Timer``)."""


_MOVED_KEYS = {
    # logical name: (today, legacy)
    "num_engines": ("generator.inference_engine.num_engines", "generator.num_inference_engines"),
    "engine_tp": ("generator.inference_engine.tensor_parallel_size", "generator.inference_engine_tensor_parallel_size"),
    "engine_pp": (
        "generator.inference_engine.pipeline_parallel_size",
        "generator.inference_engine_pipeline_parallel_size",
    ),
    "engine_dp": ("generator.inference_engine.data_parallel_size", "generator.inference_engine_data_parallel_size"),
    "gpu_memory_utilization": ("generator.inference_engine.gpu_memory_utilization", "generator.gpu_memory_utilization"),
    "max_num_seqs": ("generator.inference_engine.max_num_seqs", "generator.max_num_seqs"),
    "max_num_batched_tokens": ("generator.inference_engine.max_num_batched_tokens", "generator.max_num_batched_tokens"),
    "enforce_eager": ("generator.inference_engine.enforce_eager", "generator.enforce_eager"),
    "weight_sync_backend": ("generator.inference_engine.weight_sync_backend", "generator.weight_sync_backend"),
    "backend": ("generator.inference_engine.backend", "generator.backend"),
    "run_engines_locally": ("generator.inference_engine.run_engines_locally", "generator.run_engines_locally"),
    "sample_packing": ("trainer.remove_microbatch_padding", "trainer.use_sample_packing"),
}

# Line numbers of SkyRL's log calls: skyrl/train/trainer.py (today), skyrl_train/trainer.py (legacy).
_TODAY_SITES = {
    "init_weight_sync_state": ("train", 279), "load_checkpoints": ("train", 284), "sync_weights@0": ("train", 288),
    "eval@0": ("train", 303), "step": ("train", 342), "generate": ("train", 361),
    "postprocess_generator_output": ("train", 391), "convert_to_training_input": ("train", 420),
    "number_of_sequences": ("convert_to_training_input", 975), "fwd_logprobs_values_reward": ("train", 424),
    "compute_advantages_and_returns": ("train", 433), "dump_data_batch": ("train", 443),
    "train_critic_and_policy": ("train", 450), "save_checkpoints": ("train", 475), "save_hf_model": ("train", 479),
    "sync_weights": ("train", 493), "status": ("train", 497), "eval": ("train", 518), "max_steps": ("train", 551),
    "save_checkpoints@end": ("train", 578), "save_hf_model@end": ("train", 583), "final_checkpoint": ("train", 580),
    "final_model": ("train", 585), "training_done": ("train", 601), "policy_train": ("train_critic_and_policy", 1569),
}  # fmt: skip
_LEGACY_SITES = {
    "init_weight_sync_state": ("train", 178), "load_checkpoints": ("train", 183), "sync_weights@0": ("train", 187),
    "eval@0": ("train", 192), "step": ("train", 206), "generate": ("train", 221),
    "postprocess_generator_output": ("train", 242), "convert_to_training_input": ("train", 254),
    "number_of_sequences": ("train", 256), "fwd_logprobs_values_reward": ("train", 259),
    "compute_advantages_and_returns": ("train", 268), "dump_data_batch": ("train", 280),
    "train_critic_and_policy": ("train", 285), "save_checkpoints": ("train", 290), "save_hf_model": ("train", 296),
    "sync_weights": ("train", 310), "status": ("train", 314), "eval": ("train", 321),
    "save_checkpoints@end": ("train", 344), "save_hf_model@end": ("train", 348), "training_done": ("train", 351),
    "policy_train": ("train_critic_and_policy", 1102),
}  # fmt: skip

NAMES: Mapping[Layout, Names] = MappingProxyType(
    {
        Layout.TODAY: Names(
            twin_module="twin.skyrl.train.entrypoints.main_base",
            trainer_module="skyrl.train.trainer",
            worker_module="skyrl.backends.skyrl_train.workers.fsdp.fsdp_worker",
            tracking_module="skyrl.train.utils.tracking",
            utils_module="skyrl.train.utils.utils",
            entrypoint_module="skyrl.train.entrypoints.main_base",
            engine_actor="VLLMServerActor",
            keys=MappingProxyType({k: v[0] for k, v in _MOVED_KEYS.items()}),
            sites=MappingProxyType(_TODAY_SITES),
        ),
        Layout.LEGACY: Names(
            twin_module="twin.skyrl_train.entrypoints.main_base",
            trainer_module="skyrl_train.trainer",
            worker_module="skyrl_train.workers.fsdp.fsdp_worker",
            tracking_module="skyrl_train.utils.tracking",
            utils_module="skyrl_train.utils.utils",
            entrypoint_module="skyrl_train.entrypoints.main_base",
            engine_actor="AsyncVLLMInferenceEngine",
            keys=MappingProxyType({k: v[1] for k, v in _MOVED_KEYS.items()}),
            sites=MappingProxyType(_LEGACY_SITES),
        ),
    }
)


def names(layout: Layout) -> Names:
    return NAMES[Layout(layout)]
