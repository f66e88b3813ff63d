"""Starter spaces from a command's --help: argparse and Hydra programs, the preset guess, and a
command that ignores --help (stopped, never waited for)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from nccl_tune.errors import NcclTuneError
from nccl_tune.launchers.help import help_text
from nccl_tune.search_spaces.loader import parse_space
from nccl_tune.search_spaces.render import render_values
from nccl_tune.search_spaces.space import ArgStyle, BoolSpelling
from nccl_tune.search_spaces.starter import guess_preset, init_space, parse_argparse, role_of

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ddp_train.py"
HYDRA_APP = Path(__file__).parent / "scripts" / "hydra_app.py"


def test_an_argparse_job_gives_flags_with_kinds_defaults_and_checks():
    text = init_space([sys.executable, str(EXAMPLE)])
    space = parse_space(text, source="t", label="t")
    p = {q.name: q for q in space.parameters}
    assert set(p) == {"batch_size", "grad_accum", "seq_len", "gradient_checkpointing"}
    assert (
        p["batch_size"].arg == "--batch-size" and p["batch_size"].default == 2 and p["batch_size"].kind.value == "pow2"
    )
    assert p["grad_accum"].default == 8 and p["seq_len"].choices == (16, 32, 64) and p["seq_len"].semantic
    assert (
        p["gradient_checkpointing"].arg_style.value == "switch"
        and p["gradient_checkpointing"].memory.value == "decreasing"
    )
    args, _ = render_values(space, space.defaults())
    assert args[:2] == ["--batch-size", "2"] and "--gradient-checkpointing" not in args
    assert "# check:" in text and "# throughput:" in text
    assert "progress: {}" in text  # nothing in `python ddp_train.py` names a trainer: the first trial decides


def test_a_hydra_program_gives_its_config_keys():
    text = init_space([sys.executable, str(HYDRA_APP)])
    space = parse_space(text, source="t", label="t")
    names = [q.name for q in space.parameters]
    assert names == [
        "trainer.train_batch_size",
        "trainer.micro_train_batch_size_per_gpu",
        "trainer.max_prompt_length",
        "trainer.policy.fsdp_config.cpu_offload",
        "trainer.gradient_checkpointing",
        "data.num_workers",
    ]
    micro = space.param("trainer.micro_train_batch_size_per_gpu")
    assert micro.arg is None and micro.default == 1 and not micro.semantic
    # offload and data-loader workers move host RAM: a host out of memory names them
    host = {p.name: p.host_memory.value for p in space.parameters}
    assert host["trainer.policy.fsdp_config.cpu_offload"] == "increasing" and host["data.num_workers"] == "increasing"
    assert host["trainer.train_batch_size"] == "unknown"
    assert (
        space.param("trainer.train_batch_size").semantic
        and space.param("trainer.gradient_checkpointing").default is True
    )
    args, _ = render_values(space, space.defaults())
    assert "trainer.train_batch_size=256" in args
    assert space.trial_overrides == {"trainer.log_every_n_steps": "1"}


@pytest.mark.parametrize(
    "command, preset",
    [
        (["uv", "run", "-m", "skyrl.train.entrypoints.main_base"], "skyrl"),
        (["torchrun", "-m", "torchtitan.train"], "torchtitan"),
        (["python3", "-m", "verl.trainer.main_ppo", "actor_rollout_ref.actor.strategy=megatron"], "verl"),
        (["python3", "-m", "openrlhf.cli.train_ppo_ray", "--zero_stage", "3", "--deepspeed_enable_sleep"], "openrlhf"),
        (["uv", "run", "python", "examples/run_grpo_math.py"], "nemo-rl"),
        (["torchrun", "pretrain_gpt.py"], "megatron"),
        (["deepspeed", "train.py"], "deepspeed"),
        (["python", "train_lightning.py"], "lightning"),
        (["accelerate", "launch", "sft.py"], "hf-trainer"),
        (["python", "-m", "nanogpt.train", "config/train_shakespeare_char.py"], "nanogpt"),
        (
            ["tune", "run", "--nproc_per_node", "8", "lora_finetune_distributed", "--config", "llama3_1/8B_lora"],
            "torchtune",
        ),
        (["composer", "scripts/train/train.py", "scripts/train/yamls/pretrain/mpt-125m.yaml"], "composer"),
        (["python", "train.py"], None),
    ],
)
def test_the_preset_is_guessed_from_the_command(command, preset):
    assert guess_preset(command, "") == preset


def test_options_that_are_not_knobs_are_left_out():
    for key in ("--output-dir", "--checkpoint-dir", "--eval-batch-size", "--save-steps", "--seed", "--log-interval"):
        assert role_of(key) is None, key
    assert role_of("--per_device_train_batch_size").name == "batch"
    assert role_of("--micro-batch-size").name == "micro"
    hf = "  --gradient_checkpointing [GRADIENT_CHECKPOINTING]\n                        If True, use gradient checkpointing. (default: False)\n"
    (opt,) = parse_argparse(hf)
    assert opt.key == "--gradient_checkpointing" and opt.takes_value and opt.default is False


def test_a_command_that_ignores_help_is_stopped_not_waited_for(tmp_path):
    marker = tmp_path / "started"
    code = f"import pathlib, time; pathlib.Path({str(marker)!r}).write_text('x'); time.sleep(60)"
    t0 = time.monotonic()
    with pytest.raises(NcclTuneError, match="printed nothing in 1s and was stopped"):
        help_text([sys.executable, "-c", code], timeout_s=1.0)
    assert time.monotonic() - t0 < 10 and marker.exists()


def test_help_without_options_is_one_line():
    with pytest.raises(NcclTuneError, match="shows no argparse or Hydra options") as info:
        init_space([sys.executable, "-c", "print('hello')"])
    assert "\n" not in str(info.value)


HF_HELP = """usage: sft.py [-h] [--per_device_train_batch_size PER_DEVICE_TRAIN_BATCH_SIZE]

options:
  --per_device_train_batch_size PER_DEVICE_TRAIN_BATCH_SIZE
                        Batch size per device accelerator core/CPU for training. (default: 8)
  --max_steps MAX_STEPS
                        If > 0: set total number of training steps to perform. (default: -1)
  --evaluation_strategy {no,steps,epoch}
                        The evaluation strategy to use. (default: no)
  --logging_steps LOGGING_STEPS
                        Log every X updates steps. (default: 500)
"""
MEGATRON_HELP = """usage: pretrain_gpt.py [-h] [--micro-batch-size MICRO_BATCH_SIZE]

options:
  --micro-batch-size MICRO_BATCH_SIZE
                        Batch size per model instance (local batch size).
  --train-iters TRAIN_ITERS
                        Total number of iterations to train over all training runs.
  --log-interval LOG_INTERVAL
                        Report loss and timing interval.
"""


def test_the_trainers_short_trial_settings_come_with_its_preset():
    from nccl_tune.search_spaces.starter import starter_yaml

    hf = starter_yaml(["accelerate", "launch", "sft.py"], HF_HELP)
    space = parse_space(hf, source="t", label="t")
    # what the help shows becomes the trial's overrides, in the command's own spelling (an older
    # transformers: --evaluation_strategy); the step cap is the trial's own steps
    assert space.trial_overrides == {
        "--max_steps": "{total_steps}",
        "--evaluation_strategy": "no",
        "--logging_steps": "1",
    }
    # what it does not show is there to check, not passed
    assert '# "--save_strategy": "no"' in hf and '# "--report_to": "none"' in hf
    megatron = starter_yaml(["torchrun", "pretrain_gpt.py"], MEGATRON_HELP)
    space = parse_space(megatron, source="t", label="t")
    assert space.trial_overrides == {"--train-iters": "{total_steps}", "--log-interval": "1"}
    assert '# "--eval-iters": 0' in megatron and "without --save" in megatron
    # DeepSpeed's every-step line is a setting of its config file: a note, no override
    deepspeed = starter_yaml(["deepspeed", "train.py"], HF_HELP.replace("sft.py", "train.py"))
    assert parse_space(deepspeed, source="t", label="t").trial_overrides == {}
    assert '"steps_per_print": 1' in deepspeed
    # a trainer without settings keeps the logging flag the help shows
    plain_help = (
        "options:\n  --batch-size BATCH_SIZE  samples per step (default: 8)\n  --log-interval N  (default: 10)\n"
    )
    plain = starter_yaml(["python", "train.py"], plain_help)
    assert parse_space(plain, source="t", label="t").trial_overrides == {"--log-interval": "1"}
    # nanoGPT takes --key=value only: the trial's flags are spelled so
    nano_help = "options:\n  --batch_size BATCH_SIZE  (default: 12)\n  --max_iters MAX_ITERS  (default: 600000)\n"
    nano = parse_space(starter_yaml(["python", "-m", "nanogpt.train"], nano_help), source="t", label="t")
    assert nano.trial_arg_style is ArgStyle.EQUALS and nano.trial_overrides == {"--max_iters": "{total_steps}"}
    assert nano.trial_booleans is BoolSpelling.PYTHON


def test_a_trainer_that_packs_its_sequences_is_written_with_every_step_the_longest():
    """Megatron-LM's, torchtitan's and nanoGPT's steps each carry a full batch of fixed-length
    sequences: the starter says so (to check); a fine-tuning trainer's batches vary and it does not."""
    from nccl_tune.search_spaces.starter import starter_yaml

    for command in (["torchrun", "pretrain_gpt.py"], ["torchrun", "-m", "torchtitan.train"], ["python", "nanogpt.py"]):
        text = starter_yaml(command, MEGATRON_HELP)
        assert parse_space(text, source="t", label="t").every_step_longest, command
        assert "every_step_longest: true   # check:" in text
    hf = starter_yaml(["accelerate", "launch", "sft.py"], HF_HELP)
    assert not parse_space(hf, source="t", label="t").every_step_longest and "every_step_longest" not in hf


def tune_command(tmp_path: Path, *overrides: str) -> list[str]:
    """``tune run ...`` with ``tune`` a stand-in for torchtune's CLI (``scripts/tune_cli.py``)."""
    tune = tmp_path / "tune"
    tune.write_text(f'#!/bin/sh\nexec {sys.executable} {Path(__file__).parent / "scripts" / "tune_cli.py"} "$@"\n')
    tune.chmod(0o755)
    return [
        str(tune),
        "run",
        "--nproc_per_node",
        "8",
        "full_finetune_distributed",
        "--config",
        "llama3_1/8B_full",
        *overrides,
    ]


def test_a_torchtune_command_gives_its_configs_keys_and_short_trial_settings(tmp_path):
    """torchtune's recipes read their config's keys, which no --help lists: the starter reads the
    config ``tune cat`` prints, with the command's own overrides as the defaults."""
    space = parse_space(init_space(tune_command(tmp_path, "batch_size=4")), source="t", label="t")
    assert [q.name for q in space.parameters] == [
        "tokenizer.max_seq_len",
        "batch_size",
        "gradient_accumulation_steps",
        "enable_activation_checkpointing",
        "enable_activation_offloading",
        "fsdp_cpu_offload",
    ]
    assert space.name == "8b-full"  # the config's name, not an override's
    assert space.param("batch_size").default == 4 and space.param("batch_size").arg is None
    assert space.progress.preset == "torchtune"
    args, _ = render_values(space, space.defaults())
    assert "batch_size=4" in args and "enable_activation_checkpointing=true" in args
    # the metric line on the console every step, the step cap at the trial's steps
    assert space.trial_overrides == {
        "max_steps_per_epoch": "{total_steps}",
        "epochs": "1",
        "log_every_n_steps": "1",
        "log_peak_memory_stats": "True",
        "metric_logger": "torchtune.training.metric_logging.StdoutLogger",
        "~metric_logger.log_dir": "None",
    }


def test_a_torchtune_config_without_a_log_dir_is_not_asked_to_remove_one(tmp_path, monkeypatch):
    config = tmp_path / "mine.yaml"
    config.write_text("batch_size: 8\nmetric_logger:\n  _component_: torchtune.training.metric_logging.StdoutLogger\n")
    monkeypatch.setenv("TUNE_CONFIG", str(config))
    space = parse_space(init_space(tune_command(tmp_path)), source="t", label="t")
    assert not any(k.startswith("~") for k in space.trial_overrides)
    assert space.trial_overrides["metric_logger"] == "torchtune.training.metric_logging.StdoutLogger"
    # a logger with keys of its own (WandBLogger's project): each is removed, StdoutLogger takes none
    config.write_text(
        "batch_size: 8\nmetric_logger:\n  _component_: torchtune.training.metric_logging.WandBLogger\n"
        "  project: ft\n  log_dir: /tmp/logs\n"
    )
    space = parse_space(init_space(tune_command(tmp_path)), source="t", label="t")
    assert [k for k in space.trial_overrides if k.startswith("~")] == [
        "~metric_logger.project",
        "~metric_logger.log_dir",
    ]


def test_the_config_of_a_torchtune_command_is_found_however_it_is_passed():
    from nccl_tune.search_spaces.starter import config_command

    run = ["tune", "run", "--nproc_per_node", "8", "lora_finetune_distributed"]
    assert config_command([*run, "--config", "my.yaml", "batch_size=8"]) == (
        ["tune", "cat", "my.yaml"],
        ["batch_size=8"],
    )
    assert config_command(["/opt/bin/tune", *run[1:], "--config=my.yaml"]) == (["/opt/bin/tune", "cat", "my.yaml"], [])
    assert config_command([*run, "--config"]) is None and config_command(["python", "tune.py", "run"]) is None


LLM_FOUNDRY = """\
variables:
  max_seq_len: 2048
max_seq_len: ${variables.max_seq_len}
train_loader:
  name: text
  num_workers: 8
eval_loader:
  name: text
  num_workers: 8
max_duration: 4800ba
eval_interval: 500ba
eval_first: false
global_train_batch_size: 256
device_train_microbatch_size: 16
fsdp_config:
  activation_checkpointing: false
  activation_cpu_offload: false
progress_bar: false
log_to_console: true
console_log_interval: 1ba
callbacks:
  speed_monitor:
    window_size: 10
  memory_monitor: {}
"""
"""A trimmed ``scripts/train/yamls/pretrain/mpt-125m.yaml`` of llm-foundry."""


def test_an_llm_foundry_command_gives_its_yaml_configs_keys_and_short_trial_settings(tmp_path, monkeypatch):
    """llm-foundry's train.py takes a YAML file and OmegaConf overrides, and no --help (it would reach
    the training script through Composer's launcher): the starter reads the file, running nothing."""
    (tmp_path / "mpt-125m.yaml").write_text(LLM_FOUNDRY)
    monkeypatch.chdir(tmp_path)
    command = ["composer", "train.py", "mpt-125m.yaml", "device_train_microbatch_size=8"]
    space = parse_space(init_space(command), source="t", label="t")
    assert [q.name for q in space.parameters] == [
        "variables.max_seq_len",
        "train_loader.num_workers",  # not the evaluation loader's
        "global_train_batch_size",
        "device_train_microbatch_size",
        "fsdp_config.activation_checkpointing",
        "fsdp_config.activation_cpu_offload",
    ]
    assert space.param("device_train_microbatch_size").default == 8 and space.progress.preset == "composer"
    assert space.trial_overrides == {
        "max_duration": "{total_steps}ba",
        "log_to_console": "true",
        "progress_bar": "false",
        "console_log_interval": "1ba",
        "callbacks.speed_monitor.window_size": "1",
        "eval_first": "false",
    }
    with pytest.raises(NcclTuneError, match=r"the command's config missing.yaml does not exist") as info:
        init_space(["composer", "train.py", "missing.yaml"])
    assert "\n" not in str(info.value)
