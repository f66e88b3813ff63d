"""The overrides of the twin's example scripts, for in-process use (the model launcher starts
from them): ``examples/run_skyrl_sql_sim.sh`` mirrors today's SkyRL
``examples/train/text_to_sql/run_skyrl_sql.sh``, ``examples/run_skyrl_sql_sim_legacy.sh`` the
legacy ``skyrl-train/examples/text_to_sql/run_skyrl_sql.sh``.

The lists match the scripts' (a test compares them). Differences from SkyRL's scripts: the
data, database and checkpoint paths need not exist, and ``trainer.logger`` is ``console``
because SkyRL refuses ``wandb`` without ``WANDB_API_KEY``.
"""

from __future__ import annotations

import os

from twin.layout import Layout


def skyrl_sql_overrides(home: str | None = None, layout: Layout = Layout.TODAY) -> list[str]:
    """The script's ``key=value`` arguments, with ``$HOME`` expanded to ``home``."""
    home = home if home is not None else os.environ.get("HOME", "/root")
    if Layout(layout) is Layout.LEGACY:
        return _legacy(home)
    data_dir = f"{home}/data/sql"
    db_path = f"{home}/data/sql/db_files/data"
    ckpt_path = f"{home}/ckpts/skyrl_sql_7B_ckpt"
    num_gpus, engines, tp, max_input, max_generate, train_batch = 8, 2, 4, 29000, 3000, 256
    return [
        "trainer.algorithm.advantage_estimator=grpo",
        f"data.train_data=['{data_dir}/train.parquet']",
        f"data.val_data=['{data_dir}/validation.parquet']",
        "trainer.policy.model.path=Qwen/Qwen2.5-Coder-7B-Instruct",
        "trainer.epochs=30",
        "trainer.placement.colocate_all=true",
        "trainer.strategy=fsdp",
        "trainer.policy.fsdp_config.cpu_offload=false",
        "trainer.ref.fsdp_config.cpu_offload=true",
        "trainer.policy.optimizer_config.max_grad_norm=0.5",
        "trainer.policy.sequence_parallel_size=1",
        f"trainer.placement.policy_num_gpus_per_node={num_gpus}",
        f"trainer.placement.ref_num_gpus_per_node={num_gpus}",
        f"generator.inference_engine.num_engines={engines}",
        f"generator.inference_engine.tensor_parallel_size={tp}",
        f"trainer.train_batch_size={train_batch}",
        "trainer.micro_forward_batch_size_per_gpu=8",
        "trainer.micro_train_batch_size_per_gpu=1",
        "trainer.max_prompt_length=6000",
        f"generator.max_input_length={max_input}",
        f"generator.sampling_params.max_generate_length={max_generate}",
        "trainer.policy.optimizer_config.lr=1.0e-6",
        "trainer.policy_mini_batch_size=256",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.ckpt_interval=60",
        "trainer.hf_save_interval=30",
        "trainer.dump_data_batch=true",
        "generator.inference_engine.backend=vllm",
        "generator.inference_engine.run_engines_locally=true",
        "generator.inference_engine.weight_sync_backend=nccl",
        "generator.batched=false",
        "environment.env_class=text2sql",
        "generator.use_conversation_multi_turn=false",
        "generator.n_samples_per_prompt=5",
        "generator.inference_engine.gpu_memory_utilization=0.7",
        "generator.max_turns=6",
        "generator.sampling_params.temperature=0.6",
        "generator.sampling_params.top_p=0.95",
        'generator.sampling_params.stop=["</sql>", "</solution>"]',
        'generator.eval_sampling_params.stop=["</sql>", "</solution>"]',
        f"generator.eval_sampling_params.max_generate_length={max_generate}",
        f"environment.skyrl_gym.text2sql.db_path={db_path}",
        "trainer.logger=console",
        "trainer.project_name=skyrlsql",
        "trainer.run_name=skyrlsql_repro",
        "trainer.resume_mode=latest",
        f"trainer.ckpt_path={ckpt_path}",
        "trainer.eval_batch_size=1024",
        "trainer.eval_before_train=true",
        "trainer.eval_interval=5",
    ]


def _legacy(home: str) -> list[str]:
    data_dir = f"{home}/data/sql"
    db_path = f"{home}/data/sql/db_files/data"
    ckpt_path = f"{home}/ckpts/skyrl_sql_7B_ckpt"
    num_gpus, engines, tp = 8, 2, 4
    return [
        "trainer.algorithm.advantage_estimator=grpo",
        f"data.train_data=['{data_dir}/train.parquet']",
        f"data.val_data=['{data_dir}/validation.parquet']",
        "trainer.policy.model.path=Qwen/Qwen2.5-Coder-7B-Instruct",
        "trainer.epochs=30",
        "trainer.placement.colocate_all=true",
        "trainer.strategy=fsdp2",
        "trainer.policy.fsdp_config.cpu_offload=false",
        "trainer.ref.fsdp_config.cpu_offload=true",
        "trainer.policy.optimizer_config.max_grad_norm=0.5",
        "trainer.policy.sequence_parallel_size=1",
        f"trainer.placement.policy_num_gpus_per_node={num_gpus}",
        f"trainer.placement.ref_num_gpus_per_node={num_gpus}",
        f"generator.num_inference_engines={engines}",
        f"generator.inference_engine_tensor_parallel_size={tp}",
        "trainer.train_batch_size=256",
        "trainer.micro_forward_batch_size_per_gpu=8",
        "trainer.micro_train_batch_size_per_gpu=1",
        "trainer.max_prompt_length=6000",
        "generator.max_input_length=29000",
        "generator.sampling_params.max_generate_length=3000",
        "trainer.policy.optimizer_config.lr=1.0e-6",
        "trainer.policy_mini_batch_size=256",
        "trainer.algorithm.use_kl_loss=false",
        "trainer.ckpt_interval=60",
        "trainer.hf_save_interval=30",
        "trainer.dump_data_batch=true",
        "generator.backend=vllm",
        "generator.run_engines_locally=true",
        "generator.weight_sync_backend=nccl",
        "generator.async_engine=true",
        "generator.batched=false",
        "environment.env_class=text2sql",
        "generator.use_conversation_multi_turn=false",
        "generator.n_samples_per_prompt=5",
        "generator.gpu_memory_utilization=0.7",
        "generator.max_turns=6",
        "generator.sampling_params.temperature=0.6",
        "generator.sampling_params.top_p=0.95",
        'generator.sampling_params.stop=["</sql>", "</solution>"]',
        'generator.eval_sampling_params.stop=["</sql>", "</solution>"]',
        f"environment.skyrl_gym.text2sql.db_path={db_path}",
        "trainer.logger=console",
        "trainer.project_name=skyrlsql",
        "trainer.run_name=skyrlsql_repro",
        "trainer.resume_mode=latest",
        f"trainer.ckpt_path={ckpt_path}",
        "trainer.eval_batch_size=1024",
        "trainer.eval_before_train=true",
        "trainer.eval_interval=5",
    ]
