"""Parameters spelled the way their command line wants them: Hydra keys, flags, switches."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from nccl_tune.errors import NcclTuneError
from nccl_tune.search_spaces.loader import load_space
from nccl_tune.search_spaces.render import fixed_argv, render_values

FLAGS = """
name: flags
parameters:
  - {name: batch_size, arg: --batch-size, kind: pow2, low: 1, high: 64, default: 8}
  - {name: seq_len, arg: --seq-len, arg_style: equals, kind: categorical, choices: [128, 256], default: 128}
  - {name: checkpointing, arg: --gradient-checkpointing, arg_style: switch, kind: bool, default: false}
  - {name: model.dropout, kind: categorical, choices: [0.0, 0.1], default: 0.1}
  - {name: seed, arg: +trainer.seed, kind: int, low: 0, high: 3, default: 1}
  - {name: GLOO_SOCKET_IFNAME, kind: categorical, choices: [unset, lo], default: unset}
context:
  world: {value: 2, arg: --nproc}
  accum: 4
derived:
  eval_batch: {expr: batch_size * 2, arg: --eval-batch-size}
constraints:
  - expr: batch_size * accum * world <= 256
    message: global batch at most 256
trial:
  overrides:
    --max-steps: 100
    --no-eval: null
"""


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "space.yaml"
    p.write_text(textwrap.dedent(text))
    return str(p)


def test_flags_render_as_separate_or_joined_argv_elements(tmp_path):
    space = load_space(write(tmp_path, FLAGS))
    values = {
        "batch_size": 16,
        "seq_len": 256,
        "checkpointing": True,
        "model.dropout": 0.0,
        "seed": 2,
        "GLOO_SOCKET_IFNAME": "unset",
    }
    args, env = render_values(space, values)
    assert args == [
        "--batch-size",
        "16",
        "--seq-len=256",
        "--gradient-checkpointing",
        "model.dropout=0.0",
        "+trainer.seed=2",
        "--eval-batch-size",
        "32",
    ]
    assert env == {"GLOO_SOCKET_IFNAME": None}
    off, _ = render_values(space, {**values, "checkpointing": False})
    assert "--gradient-checkpointing" not in off and "false" not in off


def test_expressions_read_names_not_flags(tmp_path):
    space = load_space(write(tmp_path, FLAGS))
    base = {**space.defaults(), "batch_size": 32}
    assert space.violations(base) == []
    assert space.violations({**base, "batch_size": 64}) == ["global batch at most 256"]
    import dataclasses

    wide = dataclasses.replace(space, context={**space.context, "world": 4})
    assert wide.violations(base) == ["global batch at most 256"]


def test_fixed_arguments_flags_bare_flags_and_pinned_context(tmp_path):
    space = load_space(write(tmp_path, FLAGS))
    assert fixed_argv(space, space.trial_overrides, {"world": 4, "accum": 8}) == [
        "--max-steps",
        "100",
        "--no-eval",
        "--nproc",
        "4",
        "accum=8",
    ]


def test_a_command_that_takes_key_equals_value_only_gets_its_trial_flags_so(tmp_path):
    """nanoGPT's configurator reads ``--max_iters=8`` and takes ``--max_iters 8`` for a config file."""
    text = textwrap.dedent(FLAGS).replace("trial:\n", "trial:\n  arg_style: equals\n")
    space = load_space(write(tmp_path, text))
    assert fixed_argv(space, space.trial_overrides, {"world": 4}) == ["--max-steps=100", "--no-eval", "--nproc=4"]


def test_a_command_that_evaluates_python_literals_gets_its_booleans_so(tmp_path):
    """nanoGPT's configurator evaluates ``--compile=False`` and asserts the type it got: ``false``
    reads as a string and stops it."""
    text = textwrap.dedent(FLAGS).replace("trial:\n", "trial:\n  arg_style: equals\n  booleans: python\n")
    text = text.replace(
        "  - {name: seed,",
        "  - {name: compile, arg: --compile, arg_style: equals, kind: bool, default: true}\n  - {name: seed,",
    )
    space = load_space(write(tmp_path, text))
    args, _ = render_values(space, {**space.defaults(), "compile": False, "model.dropout": 0.0})
    assert "--compile=False" in args and "model.dropout=0.0" in args
    assert fixed_argv(space, {"--always_save_checkpoint": True}, {}) == ["--always_save_checkpoint=True"]
    # a switch stays a switch, and the default spelling stays Hydra's
    assert "--gradient-checkpointing" not in args
    hydra = load_space(write(tmp_path, textwrap.dedent(FLAGS)))
    assert "+trainer.seed=1" in render_values(hydra, hydra.defaults())[0]
    assert fixed_argv(hydra, {"--always_save_checkpoint": True}, {}) == ["--always_save_checkpoint", "true"]


def test_trial_booleans_that_are_no_spelling_are_one_line(tmp_path):
    path = write(tmp_path, textwrap.dedent(FLAGS).replace("trial:\n", "trial:\n  booleans: True\n"))
    with pytest.raises(NcclTuneError, match=r"trial.booleans must be lower \(--compile true\) or python") as info:
        load_space(path)
    assert "\n" not in str(info.value)


def test_a_trial_arg_style_that_is_no_style_is_one_line_naming_the_choices(tmp_path):
    path = write(tmp_path, textwrap.dedent(FLAGS).replace("trial:\n", "trial:\n  arg_style: switch\n"))
    with pytest.raises(NcclTuneError, match=r"trial.arg_style must be separate \(--max-steps 8\) or equals"):
        load_space(path)


BAD = {
    "flag as a name": (
        "  - {name: --lr, kind: categorical, choices: [0.1, 0.2]}",
        "name '--lr' is not an identifier.*name: lr and arg: --lr",
    ),
    "colliding arg": (
        "  - {name: bs, arg: --batch-size, kind: int, low: 1, high: 2}",
        "parameter bs sets --batch-size, which parameter batch_size already sets",
    ),
    "arg equal to another name": (
        "  - {name: other, arg: model.dropout, kind: int, low: 1, high: 2}",
        "sets model.dropout, which parameter model.dropout",
    ),
    "switch on an int": (
        "  - {name: flag, arg: --flag, arg_style: switch, kind: int, low: 1, high: 2}",
        "switch needs kind: bool",
    ),
    "unknown style": (
        "  - {name: flag, arg: --flag, arg_style: glued, kind: int, low: 1, high: 2}",
        "arg_style must be one of separate, equals, switch",
    ),
    "style on a Hydra key": (
        "  - {name: flag, arg: a.b, arg_style: equals, kind: int, low: 1, high: 2}",
        "arg_style applies to a flag only",
    ),
    "arg on env": (
        "  - {name: NCCL_ALGO, arg: --algo, kind: categorical, choices: [Ring]}",
        "env parameter takes no arg",
    ),
    "arg with a space": ("  - {name: x, arg: '--a b', kind: int, low: 1, high: 2}", "neither a flag"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_parameter_spelling_is_one_line_naming_the_fix(tmp_path, case):
    extra, pattern = BAD[case]
    text = textwrap.dedent(FLAGS).replace("context:", extra + "\ncontext:", 1)
    path = write(tmp_path, text)
    with pytest.raises(NcclTuneError, match=pattern) as info:
        load_space(path)
    assert "\n" not in str(info.value) and path in str(info.value)


def test_force_worst_case_renders_after_the_values_with_the_trials_own_values(tmp_path):
    """Each spelling of ``stability.force_worst_case``: a Hydra mapping whose entries read the trial's
    values, a flag with a value, a bare flag and an environment variable."""
    from nccl_tune.search_spaces.loader import parse_space
    from nccl_tune.search_spaces.render import forced_values

    text = (
        "name: f\n"
        "parameters:\n"
        "  - {name: trainer.micro, kind: pow2, low: 1, high: 8, default: 2, memory: increasing}\n"
        "context:\n"
        "  gen.max_len: 3000\n"
        "stability:\n"
        "  force_worst_case:\n"
        "    gen.extra: {min_tokens: gen.max_len, ignore_eos: true}\n"
        "    --pad-to: gen.max_len * trainer.micro\n"
        "    --pad-max:\n"
        "    PAD_MODE: \"'longest'\"\n"
    )
    space = parse_space(text, "file", "f.yaml")
    args, env = forced_values(space, {"trainer.micro": 4})
    assert args == ["gen.extra={min_tokens:3000,ignore_eos:true}", "--pad-to", "12000", "--pad-max"]
    assert env == {"PAD_MODE": "longest"}
    assert forced_values(space, {"trainer.micro": 1})[0][2] == "3000"


def test_the_skyrl_spaces_force_min_tokens_at_the_generation_cap():
    from nccl_tune.search_spaces.loader import load_space
    from nccl_tune.search_spaces.render import forced_values

    today, legacy = load_space("skyrl-text2sql"), load_space("skyrl-text2sql-legacy")
    assert forced_values(today, today.defaults()) == (
        ["generator.sampling_params.additional_kwargs={min_tokens:3000}"],
        {},
    )
    assert forced_values(legacy, legacy.defaults())[0] == [
        "++generator.sampling_params.additional_kwargs={min_tokens:3000}"
    ]
