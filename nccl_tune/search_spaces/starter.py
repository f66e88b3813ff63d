"""``nccl-tune spaces init -- COMMAND``: a starter search space from what ``COMMAND --help`` says.

From an argparse help (``--batch-size BATCH_SIZE  ... (default: 8)``) or a Hydra help (the YAML
under ``== Config ==``), the options that look tunable (batch and micro-batch sizes, gradient
accumulation, sequence lengths, offload, activation checkpointing, data-loader workers) become
parameters, with kinds and defaults where the help shows them; a progress preset is guessed from
the command, and with it the trainer's settings for a short trial (``trial_settings``); ``# check:``
comments mark what only the user can know. Nothing here runs anything:
``launchers/help.py`` fetches the help text.

A command that reads its options from a config has no help for them. A torchtune command (``tune
run RECIPE --config CONFIG key=value ...``): ``tune cat CONFIG`` prints the config
(``config_command``). An llm-foundry (Composer) command (``composer train.py CONFIG.yaml
key=value ...``): the YAML file is read (``config_file``); its ``--help`` would reach the training
script, which takes none. The config's leaves, with the command's own ``key=value`` overrides, are
read as a Hydra help's are.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nccl_tune.errors import NcclTuneError
from nccl_tune.presets import PRESETS
from nccl_tune.search_spaces.roles import Role, norm_key, role_of
from nccl_tune.search_spaces.spelling import format_value
from nccl_tune.search_spaces.trial_settings import trial_block
from nccl_tune.userfile import read_text


@dataclass(frozen=True)
class HelpOption:
    """One option of the command, as its help shows it."""

    key: str
    """``--batch-size`` (a flag) or ``trainer.train_batch_size`` (a Hydra key)."""
    takes_value: bool = True
    choices: tuple[str, ...] = ()
    default: Any = None
    negatable: bool = False
    """argparse's ``--x/--no-x`` pair."""


_LOGGING = re.compile(r"^(logging_steps|log_interval|log_freq|log_every(_n_steps)?|steps_per_print)$")
_GUESSES = (
    ("skyrl", r"skyrl"),
    # the RL trainers before the engines they drive (a verl command names its megatron strategy, an
    # OpenRLHF one its DeepSpeed ZeRO settings)
    ("verl", r"\bverl\b"),
    ("openrlhf", r"openrlhf"),
    ("nemo-rl", r"nemo[_-]?rl|\brun_(?:grpo|dpo|distillation)\w*\.py"),
    ("nanogpt", r"nano[_-]?gpt"),
    ("torchtune", r"torchtune|\btune\s+run\b"),
    ("composer", r"llm[_-]?foundry|\bcomposer\b"),
    ("torchtitan", r"torchtitan"),
    ("megatron", r"megatron|pretrain_(gpt|bert|t5|llama|mamba)"),
    ("deepspeed", r"deepspeed"),
    ("lightning", r"lightning|LightningCLI|--trainer\.max_steps"),
    (
        "hf-trainer",
        r"transformers|\btrl\b|accelerate|run_clm|run_mlm|\bsft\b|per_device_train_batch_size|TrainingArguments",
    ),
)

_EVERY_STEP_LONGEST = {
    "megatron": "Megatron-LM's GPT data sets pack documents into samples of --seq-length tokens",
    "torchtitan": "torchtitan packs its data into sequences of training.seq_len tokens",
    "nanogpt": "nanoGPT trains on chunks of block_size tokens",
}
"""Presets of trainers whose every step carries the longest batch: why, for the starter's comment."""


def _value(text: str) -> Any:
    text = text.strip().strip("'\"")
    if text in ("None", "null", ""):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


_OPTION_LINE = re.compile(r"^\s{1,8}(-\S.*?)(?:\s{2,}(\S.*))?$")
_DEFAULT = re.compile(r"\(default:?\s*([^)]*)\)|\[default:?\s*([^\]]*)\]|[Dd]efaults? to\s+([^\s,;.)]+)")


def parse_argparse(text: str) -> list[HelpOption]:
    """The options of an argparse (or argparse-like) help text."""
    options: list[HelpOption] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _OPTION_LINE.match(line)
        if not m:
            continue
        help_text = m.group(2) or ""
        for nxt in lines[i + 1 :]:
            if not nxt.strip() or _OPTION_LINE.match(nxt) or not nxt.startswith(" " * 10):
                break
            help_text += " " + nxt.strip()
        option = _option(m.group(1), help_text)
        if option is not None:
            options.append(option)
    return options


def _option(spec: str, help_text: str) -> HelpOption | None:
    forms = [f.strip() for f in spec.split(", ")]
    longs = [f for f in forms if f.startswith("--")]
    if not longs or longs[0].split()[0] == "--help":
        return None
    flag, _, metavar = longs[0].partition(" ")
    negatable = any(f.startswith("--no-") and f[5:] == flag[2:] for f in forms)
    choices = tuple(c.strip() for c in metavar.strip("{}").split(",")) if metavar.startswith("{") else ()
    d = _DEFAULT.search(help_text)
    default = _value(next(g for g in d.groups() if g is not None)) if d else None
    if not metavar and default is None:
        default = False  # a switch (store_true) is off unless given
    return HelpOption(flag, bool(metavar), choices, default, negatable)


def parse_hydra(text: str) -> list[HelpOption]:
    """The leaves of the config a Hydra help prints under ``== Config ==``."""
    head, sep, rest = text.partition("== Config ==")
    if not sep:
        return []
    body = rest.split("Powered by Hydra")[0]
    return parse_config("\n".join(ln for ln in body.splitlines() if not ln.startswith("Override anything")))


def parse_config(text: str, overrides: Sequence[str] = ()) -> list[HelpOption]:
    """The leaves of a YAML config (dotted keys, their values as defaults), with ``overrides``
    (``key=value``, as a command passes them) replacing the values they name."""
    try:
        cfg = yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    given = dict(o.split("=", 1) for o in overrides if "=" in o and not o.startswith(("-", "~")))
    out: list[HelpOption] = []

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{prefix}{k}.")
        else:
            key = prefix[:-1]
            out.append(HelpOption(key, default=_value(given[key]) if key in given else node))

    walk(cfg if isinstance(cfg, dict) else {}, "")
    return out


def config_command(command: Sequence[str]) -> tuple[list[str], list[str]] | None:
    """For a torchtune command (``tune run [launcher flags] RECIPE --config CONFIG [key=value ...]``):
    the command that prints its config (``tune cat CONFIG``) and the command's overrides; None for
    any other command."""
    tune = next((i for i, a in enumerate(command[:-1]) if Path(a).name == "tune" and command[i + 1] == "run"), None)
    if tune is None:
        return None
    for at in range(tune + 2, len(command)):
        arg = command[at]
        if arg.startswith("--config="):
            config, rest = arg.split("=", 1)[1], command[at + 1 :]
        elif arg == "--config" and at + 1 < len(command):
            config, rest = command[at + 1], command[at + 2 :]
        else:
            continue
        return [command[tune], "cat", config], [a for a in rest if "=" in a]
    return None


def config_file(command: Sequence[str]) -> tuple[Path, list[str]] | None:
    """For an llm-foundry (Composer) command: its YAML config (the first ``.yaml`` argument) and the
    overrides after it; None for any other command."""
    if guess_preset(command, "") != "composer":
        return None
    at = next((i for i, a in enumerate(command) if a.endswith((".yaml", ".yml")) and "=" not in a), None)
    return None if at is None else (Path(command[at]), [a for a in command[at + 1 :] if "=" in a])


def guess_preset(command: Sequence[str], help_text: str) -> str | None:
    """The progress preset the command (then its help) suggests; of a path, only the file's own name
    counts (a folder named after a trainer says nothing about the program)."""
    for where in (" ".join(Path(t).name if "/" in t else t for t in command), help_text):
        for preset, pattern in _GUESSES:
            if re.search(pattern, where, re.IGNORECASE):
                return preset
    return None


def _pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _numeric_kind(role: Role, d: Any) -> tuple[dict[str, Any], list[str]]:
    """Kind and values for a numeric knob with default ``d`` (None: the help shows none)."""
    check = (
        [] if isinstance(d, int) else ["the help shows no default: set default: to what your command runs with today"]
    )
    if role.name == "workers":
        d0 = d if isinstance(d, int) else 2
        return {"kind": "int", "low": 0, "high": max(4, 2 * d0)}, check
    if role.name == "seq":
        d0 = d if isinstance(d, int) and d >= 2 else 1024
        return {"kind": "categorical", "choices": sorted({d0 // 2, d0, d0 * 2})}, check
    d0 = d if isinstance(d, int) and d >= 1 else (1 if role.name == "accum" else 8)
    if _pow2(d0):
        low, high = (1, max(8, 2 * d0)) if role.name == "accum" else (max(1, d0 // 4), d0 * 4)
        return {"kind": "pow2", "low": low, "high": high}, check
    return {"kind": "categorical", "choices": sorted({max(1, d0 // 2), d0, d0 * 2})}, check


def _fields(opt: HelpOption, role: Role) -> tuple[dict[str, Any], list[str]] | None:
    """The parameter's kind, values and default, and what to check; None when it cannot be tuned."""
    if opt.choices:
        return {"kind": "categorical", "choices": [_value(c) for c in opt.choices], "default": opt.default}, []
    if not opt.takes_value or isinstance(opt.default, bool):
        checks = []
        if opt.negatable:
            checks.append(f"{opt.key} has a --no- form; a switch only adds the flag, so keep default: false")
        style = {"arg_style": "switch"} if not opt.takes_value and opt.key.startswith("-") else {}
        return {"kind": "bool", **style, "default": bool(opt.default)}, checks
    if role.name in ("offload", "checkpointing"):
        return None  # a value that is not a boolean (a policy name): left to the user
    if opt.default is not None and not isinstance(opt.default, int):
        return None
    kind, checks = _numeric_kind(role, opt.default)
    if opt.default is not None:
        kind["default"] = opt.default
    return kind, checks


def _yaml_value(v: Any) -> str:
    if isinstance(v, (bool, int, float)) or v is None:
        return format_value(v) if v is not None else "null"
    return json.dumps(v)


def _param_block(opt: HelpOption, role: Role, name: str) -> list[str] | None:
    got = _fields(opt, role)
    if got is None:
        return None
    fields, checks = got
    lines = [f"  - name: {name}"]
    if opt.key.startswith("-"):
        lines.append(f"    arg: {opt.key}")
    for key in ("arg_style", "kind", "low", "high", "choices", "default"):
        if key in fields and fields[key] is not None:
            v = fields[key]
            shown = "[" + ", ".join(_yaml_value(c) for c in v) + "]" if key == "choices" else _yaml_value(v)
            lines.append(f"    {key}: {v if key in ('kind', 'arg_style') else shown}")
    lines.append(f"    memory: {role.memory}")
    if role.host_memory != "unknown":
        lines.append(f"    host_memory: {role.host_memory}")
    if role.semantic:
        lines.append("    semantic: true          # check: does it change the training itself (not only its speed)?")
    lines.append(f"    help: {json.dumps(role.help)}")
    lines += [f"    # check: {c}" for c in checks]
    return lines


def starter_yaml(
    command: Sequence[str], help_text: str, options: list[HelpOption] | None = None, source: str = ""
) -> str:
    """A starter space (YAML with ``# check:`` comments) for ``command`` from its ``--help`` output,
    or from ``options`` read elsewhere (``source``: the command that printed them)."""
    source = source or f"{' '.join(command)} --help"
    options = options if options is not None else parse_hydra(help_text) or parse_argparse(help_text)
    if not options:
        first = next((ln.strip() for ln in help_text.splitlines() if ln.strip()), "")
        raise NcclTuneError(
            f"`{source}` shows no argparse or Hydra options (it printed: {first[:120]!r}); "
            "write the space by hand (`nccl-tune spaces show skyrl-text2sql --yaml` is an example)"
        )
    params: list[str] = []
    names: set[str] = set()
    for opt in options:
        role, name = role_of(opt.key), norm_key(opt.key)
        if role is None or name in names:
            continue
        block = _param_block(opt, role, name if opt.key.startswith("-") else opt.key)
        if block:
            names.add(name)
            params += block
    if not params:
        raise NcclTuneError(
            f"`{source}` shows no option that looks tunable (batch or micro-batch size, "
            "accumulation, sequence length, offload, checkpointing, workers); write the parameters by hand"
        )
    return _document(command, help_text, options, params, names)


def _space_name(command: Sequence[str]) -> str:
    script = next((a for a in command if a.endswith((".py", ".sh"))), None)
    script = script or next((a for a in reversed(command) if not a.startswith("-") and "=" not in a), "job")
    stem = re.sub(r"[^a-z0-9]+", "-", Path(script).stem.lower()).strip("-")
    return stem or "job"


def _document(
    command: Sequence[str], help_text: str, options: list[HelpOption], params: list[str], names: set[str]
) -> str:
    import shlex

    from nccl_tune.search_spaces.loader import parse_space

    preset = guess_preset(command, help_text)
    shown = shlex.join(command)
    lines = [
        f"# Starter search space for: {shown}",
        "# Written by `nccl-tune spaces init` from the command's --help (or its config); nothing was run.",
        "# Before tuning, check: each default is what the command runs with today (the first trial is that",
        "# baseline), each range is one the job accepts, and memory:/semantic: say what each knob really does.",
        f"name: {_space_name(command)}",
        f"description: {json.dumps('Starter space for ' + shown)}",
        f"command: {json.dumps(shown)}",
        "",
        "parameters:",
        *params,
        "",
        "progress:",
    ]
    if preset:
        lines.append(f"  preset: {preset}          # check: guessed from the command; presets: {', '.join(PRESETS)}")
    else:
        lines.append(
            "  {}                       # no preset guessed: the first trial's output decides (or name one: "
            + ", ".join(PRESETS)
            + ")"
        )
        lines[-2] = "progress:"
    logging = [o for o in options if _LOGGING.match(norm_key(o.key).split(".")[-1]) and o.takes_value]
    settings = trial_block(preset, [o.key for o in options])
    if settings:
        lines += settings
    elif logging:
        key = logging[0].key
        lines += [
            "",
            "trial:",
            "  overrides:",
            f"    {json.dumps(key)}: 1      # print progress every step while tuning",
        ]
    lines += [
        "",
        "stop:",
        "  warmup_steps: 1",
        "  measured_steps: 3",
        "",
        "clocks:                     # check: model loading and the slowest step of the baseline fit in these",
        "  startup_timeout_s: 900",
        "  stall_timeout_s: 600",
        "  trial_timeout_s: 3600",
    ]
    if preset in _EVERY_STEP_LONGEST:
        lines += [
            "",
            "stability:",
            f"  every_step_longest: true   # check: {_EVERY_STEP_LONGEST[preset]}; false if yours vary in length",
        ]
    lines += [
        "",
        "# When the log prints no samples or tokens rate, say how many samples a step processes (steps/s",
        "# cannot compare trials that change the batch):",
        "# throughput:",
        f"#   samples_per_step: {' * '.join(sorted(n for n in names if role_of(n) and role_of(n).name in ('batch', 'accum'))) or 'batch_size'}"
        "   # check: times the number of data-parallel ranks",
    ]
    text = "\n".join(lines) + "\n"
    if not preset:
        text = text.replace("progress:\n  {}", "progress: {}")
    parse_space(text, source="starter", label="the starter space")  # written spaces always load
    return text


def init_space(command: Sequence[str], timeout_s: float = 30.0) -> str:
    """The starter space for ``command``: its ``--help`` (run with a timeout, never its training), or
    the config it reads (``config_file``, ``config_command``), read."""
    from nccl_tune.launchers.help import help_text, printed

    if not math.isfinite(timeout_s) or timeout_s <= 0:
        raise NcclTuneError(f"--timeout {timeout_s:g}: must be a number of seconds above 0 (default 30)")
    found = config_file(command)
    if found is not None:
        file, overrides = found
        text = read_text(file, "the command's config", "run spaces init from the folder the command runs in")
        return starter_yaml(command, text, parse_config(text, overrides), str(file))
    printer = config_command(command)
    if printer is not None:
        argv, overrides = printer
        text = printed(argv, timeout_s, hint="does it print the config the command runs?")
        return starter_yaml(command, text, parse_config(text, overrides), " ".join(argv))
    return starter_yaml(command, help_text(command, timeout_s))
