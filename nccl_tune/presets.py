"""Progress presets: how the trainers people run print their steps, throughput and memory.

A space names one with ``progress: {preset: NAME}`` (and may replace its rules one by one), or
names none and the preset is recognised from a trial's output (``DETECT_ORDER``, most specific
first). The formats are those of each project's own logging code:

- ``skyrl``: SkyRL's ``Timer`` lines (``skyrl/train/utils/utils.py``, the same in the legacy
  ``skyrl_train``): ``Started: 'step'`` / ``Finished: 'step', time cost: 12.34s``, behind loguru's
  ``YYYY-MM-DD HH:mm:ss.SSS | INFO | module:function:line -`` and Ray's ``(pid=N)`` prefix;
  ``print_mem`` (``Allocated: X GiB, Reserved: Y GiB, Free: .. GiB, Total: Z GiB``); ``Training done!``;
  the console logger's ``Step N:`` dict after the step timer (pprint, one key a line, values as
  quoted strings): ``'trainer/tokens_per_second_per_gpu': '1234.5'`` is the step's rate.
- ``hf-trainer``: Hugging Face Trainer/TRL (``trainer_callback.py``). ``ProgressCallback`` draws a
  tqdm bar over optimizer steps (``  5%|▌    | 10/200 [00:05<01:30,  2.10it/s]``, ``5.20s/it`` when
  slower than one step per second) and writes the log dict; ``PrinterCallback`` prints it without a
  bar. Since transformers 5 both print floats as strings formatted ``.4g`` (``{'loss': '2.312',
  'grad_norm': '1.062', 'learning_rate': '4.5e-05', 'epoch': '0.1'}``); 4.x prints bare floats
  (``{'loss': 2.3125, ..., 'epoch': 0.1}``). The bar's steps are timed by the wall clock, not by the
  rate it prints (``_TQDM_RATE``). The last dict holds ``'train_runtime'``,
  ``'train_samples_per_second'``, ``'train_steps_per_second'``; only ``'train_steps_per_second'``
  marks the end, as ``include_num_input_tokens_seen`` adds ``'train_runtime'`` to every step's dict.
- ``torchtitan``: ``components/metrics.py``: ``step: 10  loss:  7.12345  grad_norm:  1.2345  memory:
  33.86GiB(35.65%)  tps: 1,234  tflops: 12.34  mfu: 5.67%`` in colours, tokens per second per GPU
  (``wps:`` before November 2024; ``mfu: N/A`` under quantisation); ``Training completed``.
- ``megatron``: ``training.py`` ``training_log``: `` [date] iteration       10/     100 | consumed
  samples: 640 | elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 345.6 |
  ... | global batch size:    64 | ...`` every ``--log-interval`` iterations (the throughput, when
  printed, is carried in its own unit);
  ``report_memory``: ``[Rank 0] (after 10 iterations) memory (MB) | allocated: ... | max reserved: ...``.
- ``lightning``: ``TQDMProgressBar``: ``Epoch 1:   4%|▎   | 40/1095 [00:03<01:37, 10.84it/s, v_num=10]``
  (the rate, always ``it/s``, is the mean since the epoch started: its steps are timed by the wall
  clock); ``Trainer.fit`` stopped: ``max_steps=N`` reached. Lightning 1.x's bar runs to the training
  and validation batches together and moves with each ``Validation DataLoader 0:`` (``Validating:``)
  redraw: the step line after one is no step (``not_training``).
- ``deepspeed``: the engine's ``ThroughputTimer`` (``utils/timer.py``) every ``steps_per_print``
  steps from step 3: ``epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=.., CurrSamplesPerSec=..,
  MemAllocated=1.2GB, MaxMemAllocated=2.3GB`` (GiB; older releases: ``0/50, SamplesPerSec=1292.6``),
  after the engine's own ``[Rank 0] step=10, skipped=0, lr=[..], mom=[..]`` (from step 1), whose
  step the throughput line then gives its rate.
  Since 0.15.3 ``steps_per_print`` has no default and since 0.17.6 DeepSpeed logs at WARNING: the
  line needs ``"steps_per_print": N`` and ``"log_level": "info"`` in the DeepSpeed config.
- ``verl``: the ``console`` logger (``verl/utils/logger/aggregate_logger.py``), one line per step:
  ``step:3 - training/global_step:3 - ... - perf/max_memory_allocated_gb:35.2 -
  perf/max_memory_reserved_gb:40.1 - ... - timing_s/step:95.3 - ... - perf/throughput:1234.5``,
  values as ``pprint.pformat`` gives them (``np.float64(40.1)`` under numpy 2; ``:.3f`` before
  July 2025), behind Ray's ``(TaskRunner pid=N)``; ``perf/throughput`` is tokens per second per
  GPU, memory in GiB (from the FSDP and Megatron workers; the new engine workers print none);
  ``Final validation metrics:`` at the end.
- ``openrlhf``: the PPO trainer (``openrlhf/trainer/ppo_trainer.py``): ``✨ Global step 3: {'policy_loss':
  0.01, ..., 'timing/step_total': 83.6}`` (``Global step 3: {...}`` in the async trainer), behind
  ``INFO MM-DD HH:MM:SS ppo_trainer.py:N]``; ``'timing/step_total'`` (seconds) since March 2026,
  earlier releases (from May 2025) print the dict without it, timed by the wall clock.
- ``nanogpt``: nanoGPT's ``train.py`` (and the many scripts built on it), every ``log_interval``
  iterations: ``iter 10: loss 3.1462, time 54.25ms, mfu 6.88%`` (``mfu -100.00%`` for the first
  five), the duration that of the last iteration alone (each line stands for the iterations since
  the one before, at that duration); the evaluation's ``step 0: train loss 4.2874, val loss
  4.2823`` is no step, and the iteration after it also waits out the evaluation. No end line (the
  script leaves its loop past ``max_iters``) and no memory.
- ``torchtune``: the recipes (``recipes/full_finetune_distributed.py``, the LoRA, DPO and
  distillation ones alike) draw a tqdm bar on stderr whose description is ``epoch|global step|Loss:
  x`` (``1|52|Loss: 2.3697:   0%|▏   | 52/25880 [00:24<3:55:01,  1.83it/s]``), its steps timed by
  the wall clock; with the ``StdoutLogger`` metric logger (the configs' default, ``DiskLogger``,
  writes to a file) a line every ``log_every_n_steps`` steps: ``Step 5 | loss:1.61 lr:2e-05
  tokens_per_second_per_gpu:2456.7 peak_memory_active:31.0 peak_memory_alloc:31.0
  peak_memory_reserved:39.1 ``, the rate that of the step it follows, memory in GiB (with
  ``log_peak_memory_stats``). Since v0.5 the token count is a tensor, and the loss and rate divided
  by it print as ``tensor(2456.7012, device='cuda:0')``; printed without a flush, the line may
  follow the bar's text on its line. No end line.
- ``composer``: Composer's ``ConsoleLogger`` (``composer/loggers/console_logger.py``; llm-foundry's
  configs turn it on with ``log_to_console: true``, ``console_log_interval: 1ba``) prints a block
  every ``console_log_interval``: ``[batch=10/4800]:`` then a line per metric, ``\t Train
  time/batch: 9`` (the batches done before the logged one), ``\t Train
  throughput/samples_per_sec: 1234.5678`` (``SpeedMonitor``, a rolling mean over its
  ``window_size`` batches, printed once that many ran), ``\t Train memory/peak_reserved_mem:
  38.541`` (``MemoryMonitor``, in GB of 10^9 bytes; ``memory/reserved_mem`` in older releases),
  floats as ``.4f``, behind ``0: `` under srun. Its default tqdm bar (unit ``ba``) is not read.
- ``nemo-rl``: NeMo RL's algorithms (``nemo_rl/algorithms/grpo.py``, ``dpo.py``, ``ppo.py``,
  ``distillation.py``) print a block per step; its ``  • Total step time: 95.30s`` line ends the
  step (the throughputs follow on lines of their own); ``Max number of steps has been reached``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

from nccl_tune.patterns import TORCHRUN_PREFIX
from nccl_tune.trial import ProgressRules

_NUM = r"\d+(?:\.\d+)?"
_FLOAT = rf"{_NUM}(?:[eE][-+]?\d+)?"
"""A float as Python prints it (``repr``, ``:.4g``): ``95.3``, ``1.235e+04``."""
_PY_SCALAR = r"(?:np\.float\d+\()?"
"""What ``repr`` of a numpy scalar puts before the number under numpy 2 (``np.float64(40.1)``)."""
_TENSOR = r"(?:tensor\()?"
"""What ``str`` of a 0-d tensor puts before the number (``tensor(2456.7012, device='cuda:0')``)."""
_TORCHRUN = rf"(?:^|{TORCHRUN_PREFIX})"
"""A line's start, or torchrun's prefix in front of a rank's line (``[rank0]:``, ``[default0]:``)."""
_TQDM_RATE = rf"{_NUM}(?:it/s|s/it)"
"""tqdm's rate: ``2.10it/s``, or ``5.20s/it`` below one step per second; matched, never read. It is
an average over the bar's life, warm-up included (tqdm's moving average in the Trainer's bar, the
mean since the bar started in Lightning's, ``smoothing=0``): 20% below the real rate three steps
after a warm-up step twice as long. A bar's steps are timed by the wall clock between redraws of
new step numbers instead. Before its first step the bar prints ``?it/s`` (no step)."""

SKYRL = ProgressRules(
    step_end=(rf"Finished: 'step', time cost: (?P<seconds>{_NUM})s",),
    phase_start=r"Started: '(?P<phase>[^']+)'",
    phase_end=rf"Finished: '(?P<phase>[^']+)', time cost: (?P<seconds>{_NUM})s",
    memory=(
        rf"Reserved: (?P<gib>{_NUM}) GiB, Free: {_NUM} GiB, Total: (?P<total_gib>{_NUM}) GiB",
        rf"(?:rank[ =:]*(?P<rank>\d+)\b(?: step (?P<step>\d+)\b)?.*?)?memory: (?P<gib>{_NUM})GiB"
        rf"(?:\s*\((?P<pct>{_NUM})%\))?",
    ),
    training_done=r"Training done!",
    # the console logger's dict after the step (pprint, one key a line), values as quoted strings
    step_rate=r"'trainer/tokens_per_second_per_gpu': '?(?P<tokens_per_s>\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?)",
    step_tokens=r"'generate/max_num_tokens': '?(?P<tokens>\d+(?:\.\d+)?)",
    preset="skyrl",
)

HF_TRAINER = ProgressRules(
    step_end=(
        # the Trainer's bar has no description: the line starts with the percentage
        rf"{_TORCHRUN}\s*\d{{1,3}}%\|[^|]*\|\s*(?P<step>\d+)/(?P<of>\d+) \[[^\]]*?,\s*{_TQDM_RATE}",
        # a log dict with a 'loss' key (not the last one's 'train_loss'); 'step' and a samples rate if
        # printed, bare (4.x), as a string (5.x) or as a numpy scalar
        rf"{_TORCHRUN}\{{(?=(?:[^{{}}]*?, )?'loss': )"
        r"(?=(?:[^{}]*?'step': (?P<step>\d+))?)"
        rf"(?=(?:[^{{}}]*?'(?:train_)?samples_per_second': '?{_PY_SCALAR}(?P<samples_per_s>{_FLOAT}))?)",
    ),
    training_done=r"'train_steps_per_second': ",
    preset="hf-trainer",
)

TORCHTITAN = ProgressRules(
    step_end=(r"(?<!validate )step:\s*(?P<step>\d+)\s+loss:.*?[tw]ps:\s*(?P<tokens_per_s>\d[\d,]*)",),
    memory=(rf"(?<!validate )step:.*?memory:\s*(?P<gib>{_NUM})GiB\((?P<pct>{_NUM})%\)",),
    training_done=r"Training completed",
    preset="torchtitan",
)

MEGATRON = ProgressRules(
    step_end=(
        rf"iteration\s+(?P<step>\d+)/\s*\d+ \|.*?elapsed time per iteration \(ms\): (?P<ms>{_NUM}) \|"
        rf"(?:.*?throughput per GPU \(TFLOP/s/GPU\): (?P<tflops_per_gpu>{_NUM}) \|)?"
        r"(?:.*?global batch size:\s*(?P<samples_per_step>\d+) \|)?",
    ),
    memory=(rf"\[Rank (?P<rank>\d+)\] \(after \d+ iterations\) memory \(MB\) \|.*?max reserved: (?P<mib>{_NUM})",),
    training_done=r"\[after training is done\]",
    preset="megatron",
)

LIGHTNING = ProgressRules(
    step_end=(rf"Epoch \d+:.*?\|\s*(?P<step>\d+)/(?:\d+|\?) \[[^\]]*?,\s*{_TQDM_RATE}",),
    training_done=r"`Trainer\.fit` stopped: `max_",
    not_training=r"(?:^|\s)Validat(?:ing|ion DataLoader \d+): ",
    preset="lightning",
)

DEEPSPEED = ProgressRules(
    step_end=(
        rf"(?:global_step=|\] \d+/)(?P<step>\d+),(?:.*?Curr)?\s*SamplesPerSec=(?P<samples_per_s>{_NUM})",
        # the engine's own line every steps_per_print steps, from step 1 (the timer's starts at step 3):
        # ``step=N, skipped=N, lr=``, spelled so that its text to look for is "step=" (the log reader's)
        r"\bstep=(?P<step>\d+), s\w*=\d+, lr=",
    ),
    memory=(rf"global_step=\d+,.*?MaxMemAllocated=(?P<gib>{_NUM})GB",),
    preset="deepspeed",
)

_VERL_LINE = r"(?:^|\s)step:{step}(?= - ).*? - {key}:" + _PY_SCALAR
"""verl's console line up to the value of ``key`` (the validation line before training has no
``perf/`` keys); ``step`` is the step number's pattern."""

VERL = ProgressRules(
    step_end=(_VERL_LINE.format(step=r"(?P<step>\d+)", key="perf/throughput") + rf"(?P<tokens_per_s>{_FLOAT})",),
    memory=tuple(
        _VERL_LINE.format(step=r"\d+", key=f"perf/max_memory_{kind}_gb") + rf"(?P<gib>{_FLOAT})"
        for kind in ("reserved", "allocated")
    ),
    training_done=r"Final validation metrics: ",
    preset="verl",
)

OPENRLHF = ProgressRules(
    step_end=(rf"Global step (?P<step>\d+): \{{(?:.*?'timing/step_total': {_PY_SCALAR}(?P<seconds>{_FLOAT}))?",),
    preset="openrlhf",
)

NANOGPT = ProgressRules(
    # the loss as ``:.4f`` prints it, ``nan`` and ``inf`` included; spelled so that its text to look
    # for is ", time " (the log reader's cover "time")
    step_end=(rf"{_TORCHRUN}iter (?P<step>\d+):\sloss \S+, time (?P<ms>{_NUM})ms,\smfu -?{_NUM}%",),
    preset="nanogpt",
)

_TUNE_LINE = r"(?<![\w/])Step {step} \| (?=.*?\b{key}:" + _TENSOR + rf"(?P<{{group}}>{_FLOAT}))"
"""torchtune's metric line (after the bar's text when it shares the bar's line) holding ``key``;
``step`` is the step number's pattern, ``group`` the value's group."""

TORCHTUNE = ProgressRules(
    # the bar: its description's global step (the count after it restarts every epoch); "Loss" is
    # spelled as a word so that the text to look for is the bar's rate (the log reader's covers)
    step_end=(
        rf"(?:^|\s|{TORCHRUN_PREFIX})\d+\|(?P<step>\d+)\|\w+: [^|]*?:\s+\d{{1,3}}%\|[^|]*\|\s*\d+/\d+ \[[^\]]*?,"
        rf"\s*{_TQDM_RATE}",
    ),
    # the metric line gives its step's rate (a validation's has none)
    step_rate=_TUNE_LINE.format(step=r"(?P<step>\d+)", key="tokens_per_second_per_gpu", group="tokens_per_s"),
    memory=(_TUNE_LINE.format(step=r"\d+", key="peak_memory_reserved", group="gib"),),
    preset="torchtune",
)

COMPOSER = ProgressRules(
    # a block's batch count (its "[batch=N/M]:" head has no text the log reader looks for)
    step_end=(r"(?:^|\s)Train time/batch: (?P<step>\d+)\s*$",),
    step_rate=rf"(?:^|\s)Train throughput/samples_per_sec: (?P<samples_per_s>{_FLOAT})",
    memory=(rf"(?:^|\s)Train memory/(?:peak_)?reserved_mem: (?P<gb>{_FLOAT})",),
    preset="composer",
)

NEMO_RL = ProgressRules(
    step_end=(rf"• Total step time: (?P<seconds>{_NUM})s",),
    training_done=r"Max number of steps has been reached",
    preset="nemo-rl",
)

PRESETS: Mapping[str, ProgressRules] = MappingProxyType(
    {
        r.preset: r  # type: ignore[misc]
        for r in (
            SKYRL,
            HF_TRAINER,
            TORCHTITAN,
            MEGATRON,
            LIGHTNING,
            DEEPSPEED,
            VERL,
            OPENRLHF,
            NEMO_RL,
            NANOGPT,
            TORCHTUNE,
            COMPOSER,
        )
    }
)

DETECT_ORDER: tuple[str, ...] = (
    "skyrl",
    "megatron",
    "torchtitan",
    "deepspeed",
    "verl",
    "openrlhf",
    "nemo-rl",
    "nanogpt",
    "torchtune",
    "composer",
    "lightning",
    "hf-trainer",
)
"""Order in which a trial's output is tried against the presets (the generic tqdm bar last). No
preset's step, phase or end rule matches another preset's lines (``tests/test_presets.py``), so the
order decides only for output that mixes two trainers' lines."""

_RULE_FIELDS = ("step_end", "phase_start", "phase_end", "memory", "training_done", "not_training", "step_rate")


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
