"""Progress presets: how the trainers people run print their steps, throughput and memory.

A space names one with ``progress: {preset: NAME}`` (and may replace its rules one by one), or
names none and the preset is recognised from a trial's output (``DETECT_ORDER``, most specific
first). The formats are those of each project's own logging code:

- ``skyrl``: SkyRL's ``Timer`` lines (``skyrl/train/utils/utils.py``, the same in the legacy
  ``skyrl_train``): ``Started: 'step'`` / ``Finished: 'step', time cost: 12.34s``, behind loguru's
  ``YYYY-MM-DD HH:mm:ss.SSS | INFO | module:function:line -`` and Ray's ``(pid=N)`` prefix;
  ``print_mem`` (``Allocated: X GiB, Reserved: Y GiB, Free: .. GiB, Total: Z GiB``); ``Training done!``.
- ``hf-trainer``: Hugging Face Trainer/TRL. ``ProgressCallback`` draws a tqdm bar over optimizer
  steps (``  5%|▌    | 10/200 [00:05<01:30,  2.10it/s]``, ``5.20s/it`` when slower than one step per
  second) and writes ``str(logs)`` (``{'loss': 2.31, 'grad_norm': 1.06, 'learning_rate': 4.5e-05,
  'epoch': 0.1}``; ``PrinterCallback`` prints the same without a bar); the last dict holds
  ``'train_runtime'``, ``'train_samples_per_second'``, ``'train_steps_per_second'``.
- ``torchtitan``: ``components/metrics.py``: ``step: 10  loss:  7.1234  grad_norm: 1.23  memory:
  33.86GiB(35.65%)  tps: 1,234  tflops: 12.34  mfu: 5.67%`` in colours, tokens per second per GPU.
- ``megatron``: ``training.py`` ``training_log``: `` [date] iteration       10/     100 | consumed
  samples: 640 | elapsed time per iteration (ms): 1234.5 | ... | global batch size:    64 | ...``;
  ``report_memory``: ``[Rank 0] (after 10 iterations) memory (MB) | allocated: ... | max reserved: ...``.
- ``lightning``: ``TQDMProgressBar``: ``Epoch 1:   4%|▎   | 40/1095 [00:03<01:37, 10.84it/s, v_num=10]``
  (the rate is always ``it/s``); ``Trainer.fit`` stopped: ``max_steps=N`` reached.
- ``deepspeed``: the engine's ``ThroughputTimer`` every ``steps_per_print`` steps: ``epoch=0/micro_step=10/
  global_step=10, RunningAvgSamplesPerSec=.., CurrSamplesPerSec=.., MemAllocated=1.2GB,
  MaxMemAllocated=2.3GB`` (older releases: ``0/50, SamplesPerSec=1292.6``).
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Mapping

from nccl_tune.trial import ProgressRules

_NUM = r"\d+(?:\.\d+)?"
_TQDM_RATE = rf"(?:(?P<it_per_s>{_NUM})it/s|(?P<seconds>{_NUM})s/it)"
"""tqdm's rate: ``2.10it/s``, or ``5.20s/it`` below one step per second (never both)."""

SKYRL = ProgressRules(
    step_end=(rf"Finished: 'step', time cost: (?P<seconds>{_NUM})s",),
    phase_start=r"Started: '(?P<phase>[^']+)'",
    phase_end=rf"Finished: '(?P<phase>[^']+)', time cost: (?P<seconds>{_NUM})s",
    memory=(
        rf"Reserved: (?P<gib>{_NUM}) GiB, Free: {_NUM} GiB, Total: (?P<total_gib>{_NUM}) GiB",
        rf"(?:rank[ =:]*(?P<rank>\d+)\b.*?)?memory: (?P<gib>{_NUM})GiB(?:\s*\((?P<pct>{_NUM})%\))?",
    ),
    training_done=r"Training done!",
    preset="skyrl",
)

HF_TRAINER = ProgressRules(
    step_end=(
        # the Trainer's bar has no description: the line starts with the percentage
        rf"(?:^|\]:)\s*\d{{1,3}}%\|[^|]*\|\s*(?P<step>\d+)/\d+ \[[^\]]*?,\s*{_TQDM_RATE}",
        # a log dict with a 'loss' key (not the last one's 'train_loss'); 'step' and a samples rate if printed
        r"^\{(?=(?:[^{}]*?, )?'loss': )"
        r"(?=(?:[^{}]*?'step': (?P<step>\d+))?)"
        rf"(?=(?:[^{{}}]*?'(?:train_)?samples_per_second': (?:np\.float\d+\()?(?P<samples_per_s>{_NUM}))?)",
    ),
    training_done=r"'train_runtime': ",
    preset="hf-trainer",
)

TORCHTITAN = ProgressRules(
    step_end=(rf"(?<!validate )step:\s*(?P<step>\d+)\s+loss:.*?tps:\s*(?P<tokens_per_s>\d[\d,]*)",),
    memory=(rf"(?<!validate )step:.*?memory:\s*(?P<gib>{_NUM})GiB\((?P<pct>{_NUM})%\)",),
    training_done=r"Training completed",
    preset="torchtitan",
)

MEGATRON = ProgressRules(
    step_end=(
        rf"iteration\s+(?P<step>\d+)/\s*\d+ \|.*?elapsed time per iteration \(ms\): (?P<ms>{_NUM}) \|"
        r"(?:.*?global batch size:\s*(?P<samples_per_step>\d+) \|)?",
    ),
    memory=(rf"\[Rank (?P<rank>\d+)\] \(after \d+ iterations\) memory \(MB\) \|.*?max reserved: (?P<mib>{_NUM})",),
    training_done=r"\[after training is done\]",
    preset="megatron",
)

LIGHTNING = ProgressRules(
    step_end=(rf"Epoch \d+:.*?\|\s*(?P<step>\d+)/(?:\d+|\?) \[[^\]]*?,\s*(?P<it_per_s>{_NUM})it/s",),
    training_done=r"`Trainer\.fit` stopped: `max_",
    preset="lightning",
)

DEEPSPEED = ProgressRules(
    step_end=(rf"(?:global_step=|\] \d+/)(?P<step>\d+),(?:.*?Curr)?\s*SamplesPerSec=(?P<samples_per_s>{_NUM})",),
    memory=(rf"global_step=\d+,.*?MaxMemAllocated=(?P<gib>{_NUM})GB",),
    preset="deepspeed",
)

PRESETS: Mapping[str, ProgressRules] = MappingProxyType(
    {r.preset: r for r in (SKYRL, HF_TRAINER, TORCHTITAN, MEGATRON, LIGHTNING, DEEPSPEED)}  # type: ignore[misc]
)

DETECT_ORDER: tuple[str, ...] = ("skyrl", "megatron", "torchtitan", "deepspeed", "lightning", "hf-trainer")
"""Order in which a trial's output is tried against the presets (the generic tqdm bar last)."""

_RULE_FIELDS = ("step_end", "phase_start", "phase_end", "memory", "training_done")


def with_overrides(base: ProgressRules, overrides: ProgressRules) -> ProgressRules:
    """``base`` with every rule ``overrides`` gives replacing base's (the preset named by ``base``)."""
    changes = {name: getattr(overrides, name) for name in _RULE_FIELDS if getattr(overrides, name)}
    return dataclasses.replace(base, **changes)


def apply_preset(rules: ProgressRules, preset: str | None) -> ProgressRules:
    """The rules a trial runs with: ``preset``'s rules under the space's own (``rules`` unchanged
    when ``preset`` is None). Raises ``KeyError`` for an unknown preset."""
    if preset is None:
        return rules
    return with_overrides(PRESETS[preset], rules)


def candidates(rules: ProgressRules) -> tuple[ProgressRules, ...]:
    """The rules to try on a trial's output: ``rules`` itself when it has a step rule, else every
    preset (in ``DETECT_ORDER``) under the space's own rules."""
    if not rules.detect:
        return (rules,)
    return tuple(with_overrides(PRESETS[name], rules) for name in DETECT_ORDER)
