"""Each trainer's settings for a short, safe trial: a step cap at the trial's own steps, no
evaluation, no checkpoints, no uploads, progress printed every step (what the SkyRL space's
``trial.overrides`` do for SkyRL). ``spaces init`` writes those the command's ``--help`` shows as
the space's trial overrides, and the others as comments to check: a flag the help does not show
may still be one the command passes on (``$@``), or may not exist in its version.

The settings, as each trainer spells them (facts from their sources and docs):

- Hugging Face Trainer/TRL (``TrainingArguments``): ``--max_steps``, ``--eval_strategy no``
  (``--evaluation_strategy`` before transformers 4.46), ``--save_strategy no``, ``--logging_steps 1``,
  ``--report_to none``.
- torchtitan (``JobConfig``): ``--training.steps``, ``--metrics.log_freq 1``,
  ``--checkpoint.enable_checkpoint false`` (``--checkpoint.enable`` in later releases).
- Megatron-LM: ``--train-iters``, ``--log-interval 1``, ``--eval-iters 0`` (no evaluation); a
  command that passes ``--save`` checkpoints (every ``--save-interval`` iterations and at the end).
- DeepSpeed: ``"steps_per_print": 1`` in the DeepSpeed config (with ``"log_level": "info"`` from
  0.17.6, whose engine logs at WARNING); the step cap is the training script's own.
- Lightning (``LightningCLI``): ``--trainer.max_steps``, ``--trainer.limit_val_batches 0``,
  ``--trainer.enable_checkpointing false``, ``--trainer.logger false``.
- verl (Hydra): ``trainer.total_training_steps``, ``trainer.test_freq=-1``, ``trainer.save_freq=-1``,
  ``trainer.val_before_train=false``, ``trainer.logger=['console']``.
- SkyRL: ``trainer.max_training_steps`` (today's layout), ``trainer.eval_interval=-1``,
  ``trainer.eval_before_train=false``, ``trainer.ckpt_interval=-1``, ``trainer.hf_save_interval=-1``,
  ``trainer.logger=console``.
- nanoGPT (``configurator.py``: ``--key=value`` only, so ``trial.arg_style: equals``; values are
  Python literals, ``--compile=False``, so ``trial.booleans: python``):
  ``--max_iters``, ``--log_interval=1``, ``--eval_iters=1`` (it evaluates at iteration 0 whatever
  ``--eval_interval`` says; past the last iteration, no other evaluation), ``--always_save_checkpoint=False``,
  ``--wandb_log=False``.
- torchtune (``tune run RECIPE --config CONFIG key=value ...``, OmegaConf overrides; ``~key``
  removes a key): ``max_steps_per_epoch`` with ``epochs=1``, ``log_every_n_steps=1``,
  ``log_peak_memory_stats=True``, and ``metric_logger=torchtune.training.metric_logging.StdoutLogger``
  (a component named by its parent key) with ``~metric_logger.log_dir`` (and any other key of the
  config's logger): the configs' ``DiskLogger`` writes the metric lines to a file, and
  ``StdoutLogger`` takes no arguments. The recipes save a checkpoint at every epoch's end, with no
  setting to turn it off.
- Composer, as llm-foundry's ``train.py CONFIG.yaml key=value ...`` runs it (OmegaConf overrides):
  ``max_duration={total_steps}ba``, ``log_to_console=true`` with ``progress_bar=false`` and
  ``console_log_interval=1ba`` (the console block every batch; the bar is not read),
  ``callbacks.speed_monitor.window_size=1`` (a samples rate from the second batch on: the default
  window of 100 batches, 10 in llm-foundry's configs, gives none in a short trial),
  ``eval_first=false``; no ``save_folder`` (llm-foundry's configs leave it out).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

STEP_CAP = "{total_steps}"
"""The trial's warm-up plus measured steps, filled in per trial."""


@dataclass(frozen=True)
class TrialSetting:
    """One setting of a short trial: the names the trainer's versions spell it by (the first is
    written when the help shows none), its value, and why. No names: a setting only a file or the
    command itself holds (written as a note). A name ``~prefix.*`` removes every key the config
    shows under ``prefix`` (its component aside), and is written only for those."""

    names: tuple[str, ...]
    value: str | int | None
    why: str


_HF = (
    TrialSetting(("--max_steps",), STEP_CAP, "stop after the trial's steps"),
    TrialSetting(("--eval_strategy", "--evaluation_strategy"), "no", "no evaluation between steps"),
    TrialSetting(("--save_strategy",), "no", "no checkpoints"),
    TrialSetting(("--logging_steps",), 1, "a log line every step"),
    TrialSetting(("--report_to",), "none", "no uploads (wandb, ...)"),
)
_TORCHTITAN = (
    TrialSetting(("--training.steps",), STEP_CAP, "stop after the trial's steps"),
    TrialSetting(("--metrics.log_freq",), 1, "a metrics line every step"),
    TrialSetting(("--checkpoint.enable_checkpoint", "--checkpoint.enable"), "false", "no checkpoints"),
)
_MEGATRON = (
    TrialSetting(("--train-iters",), STEP_CAP, "stop after the trial's iterations"),
    TrialSetting(("--log-interval",), 1, "a log line every iteration"),
    TrialSetting(("--eval-iters",), 0, "no evaluation"),
    TrialSetting((), None, "no checkpoints: run the trials without --save"),
)
_DEEPSPEED = (
    TrialSetting(
        (),
        None,
        'a throughput line every step: "steps_per_print": 1 in the DeepSpeed config ("log_level": "info" '
        "from DeepSpeed 0.17.6); stop after the trial's steps with the script's own step cap",
    ),
)
_LIGHTNING = (
    TrialSetting(("--trainer.max_steps",), STEP_CAP, "stop after the trial's steps"),
    TrialSetting(("--trainer.limit_val_batches",), 0, "no validation (its batches move Lightning 1.x's bar)"),
    TrialSetting(("--trainer.enable_checkpointing",), "false", "no checkpoints"),
    TrialSetting(("--trainer.logger",), "false", "no logger uploads"),
)
_VERL = (
    TrialSetting(("trainer.total_training_steps",), STEP_CAP, "stop after the trial's steps"),
    TrialSetting(("trainer.test_freq",), -1, "no validation"),
    TrialSetting(("trainer.val_before_train",), "false", "no validation before the first step"),
    TrialSetting(("trainer.save_freq",), -1, "no checkpoints"),
    TrialSetting(("trainer.logger",), "['console']", "the console line every step, no uploads"),
)
_SKYRL = (
    TrialSetting(("trainer.max_training_steps",), STEP_CAP, "stop after the trial's steps"),
    TrialSetting(("trainer.eval_before_train",), "false", "no evaluation before the first step"),
    TrialSetting(("trainer.eval_interval",), -1, "no evaluation"),
    TrialSetting(("trainer.ckpt_interval",), -1, "no checkpoints"),
    TrialSetting(("trainer.hf_save_interval",), -1, "no exports"),
    TrialSetting(("trainer.logger",), "console", "the step dict on the console, no uploads"),
)

_NANOGPT = (
    TrialSetting(("--max_iters",), STEP_CAP, "stop after the trial's iterations"),
    TrialSetting(("--log_interval",), 1, "a log line every iteration"),
    TrialSetting(("--eval_iters",), 1, "the evaluation at iteration 0 on one batch"),
    TrialSetting(("--eval_interval",), 1000000, "no evaluation after iteration 0"),
    TrialSetting(("--always_save_checkpoint",), "False", "no checkpoints"),
    TrialSetting(("--wandb_log",), "False", "no uploads"),
)

_TORCHTUNE = (
    TrialSetting(("max_steps_per_epoch",), STEP_CAP, "stop after the trial's steps"),
    TrialSetting(("epochs",), 1, "one epoch (the step cap counts per epoch)"),
    TrialSetting(("log_every_n_steps",), 1, "a metric line every step"),
    TrialSetting(("log_peak_memory_stats",), "True", "the peak memory on the metric line"),
    TrialSetting(
        ("metric_logger",), "torchtune.training.metric_logging.StdoutLogger", "the metric line on the console"
    ),
    TrialSetting(("~metric_logger.*",), "None", "StdoutLogger takes none of the config's logger's keys"),
    TrialSetting(
        (), None, "the checkpoint saved at the epoch's end: none to turn off; keep the output dir on fast disk"
    ),
)

_COMPOSER = (
    TrialSetting(("max_duration",), STEP_CAP + "ba", "stop after the trial's batches"),
    TrialSetting(("log_to_console",), "true", "the console block every batch (read, where the bar is not)"),
    TrialSetting(("progress_bar",), "false", "no bar between the blocks"),
    TrialSetting(("console_log_interval",), "1ba", "a block every batch"),
    TrialSetting(("callbacks.speed_monitor.window_size",), 1, "a samples rate every batch from the second"),
    TrialSetting(("eval_first",), "false", "no evaluation before the first batch"),
    TrialSetting((), None, "no save_folder while tuning (checkpoints)"),
)

TRIAL_SETTINGS: Mapping[str, tuple[TrialSetting, ...]] = MappingProxyType(
    {
        "hf-trainer": _HF,
        "torchtitan": _TORCHTITAN,
        "megatron": _MEGATRON,
        "deepspeed": _DEEPSPEED,
        "lightning": _LIGHTNING,
        "verl": _VERL,
        "skyrl": _SKYRL,
        "nanogpt": _NANOGPT,
        "torchtune": _TORCHTUNE,
        "composer": _COMPOSER,
    }
)
TRIAL_STYLE: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "nanogpt": (
            "  arg_style: equals          # the command takes --key=value only",
            "  booleans: python           # the command reads True/False (Python literals)",
        ),
    }
)
"""The ``trial:`` keys of presets whose trainer spells its values its own way: ``--key=value`` only
(``arg_style: equals``), Python literals (``booleans: python``)."""


def _key(name: str) -> str:
    """A setting's name as matched against the command's options (no dashes)."""
    return name.lstrip("-").replace("-", "_").lower()


def trial_block(preset: str | None, shown: Sequence[str]) -> list[str]:
    """The space's ``trial:`` block for ``preset`` (no lines for a preset without settings): as
    overrides the settings whose name is among ``shown`` (the command's options as its help spells
    them; a config's component, ``metric_logger._component_``, is shown by its parent's name too),
    as comments to check the others, and the notes of what no flag sets."""
    settings = TRIAL_SETTINGS.get(preset or "", ())
    if not settings:
        return []
    parents = [k.removesuffix("._component_") for k in shown if k.endswith("._component_")]
    by_key = {_key(k): k for k in [*shown, *parents]}
    given: list[str] = []
    unseen: list[str] = []
    notes: list[str] = []
    for s in settings:
        value = json.dumps(s.value) if isinstance(s.value, str) else s.value
        if s.names and s.names[0].startswith("~") and s.names[0].endswith(".*"):
            section = s.names[0][1:-1]
            given += [
                f"    {json.dumps('~' + k)}: {value}   # {s.why}"
                for k in shown
                if k.startswith(section) and not k.endswith("._component_")
            ]
            continue
        found = next((by_key[_key(n)] for n in s.names if _key(n) in by_key), None)
        if not s.names:
            notes.append(f"  # check: {s.why}")
        elif found is not None:
            given.append(f"    {json.dumps(found)}: {value}   # {s.why}")
        else:
            unseen.append(f"    # {json.dumps(s.names[0])}: {value}   # {s.why}")
    if unseen:
        unseen.insert(0, "    # check: not in the command's --help; uncomment those the command takes (its $@):")
    head = f"  overrides:                 # {preset}'s settings for a short, safe trial"
    return ["", "trial:", *TRIAL_STYLE.get(preset or "", ()), head, *given, *unseen, *notes]
