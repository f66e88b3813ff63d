"""Loading and validating search spaces: the built-in one, user files, and every bad input."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from nccl_tune.errors import NcclTuneError
from nccl_tune.search_spaces.loader import builtin_names, load_space
from nccl_tune.search_spaces.render import render_values
from nccl_tune.search_spaces.space import UNSET, ParamKind, Target

MINIMAL = """
name: mini
parameters:
  - name: trainer.micro_train_batch_size_per_gpu
    kind: pow2
    low: 1
    high: 8
    default: 2
  - name: NCCL_PROTO
    kind: categorical
    choices: [unset, Simple, LL128]
    default: unset
context:
  n: 5
constraints:
  - expr: n * 8 % trainer.micro_train_batch_size_per_gpu == 0
    message: n * 8 must be divisible by the micro batch
"""


def write(tmp_path: Path, text: str, name: str = "space.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_builtin_space_loads_with_the_scripts_values_as_baseline():
    assert "skyrl-text2sql" in builtin_names()
    space = load_space("skyrl-text2sql")
    d = space.defaults()
    assert d["trainer.train_batch_size"] == 256
    assert d["trainer.micro_train_batch_size_per_gpu"] == 1
    assert d["trainer.ref.fsdp_config.cpu_offload"] is True
    assert space.violations(d) == []
    for name in (
        "NCCL_ALGO",
        "NCCL_PROTO",
        "NCCL_MIN_NCHANNELS",
        "NCCL_NVLS_ENABLE",
        "NCCL_CUMEM_ENABLE",
        "NCCL_BUFFSIZE",
    ):
        p = space.param(name)
        assert p.target is Target.ENV and UNSET in p.choices
    assert space.param("trainer.micro_train_batch_size_per_gpu").kind is ParamKind.POW2


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"trainer.train_batch_size": 128, "trainer.policy_mini_batch_size": 256}, ">= policy_mini_batch_size"),
        # 256 * 5 // 8 = 160 per GPU; 160 % 64 != 0 is impossible here, use micro 16 with mini 32: 32*5//8=20, 20 % 16 != 0
        (
            {
                "trainer.policy_mini_batch_size": 32,
                "trainer.train_batch_size": 64,
                "trainer.micro_train_batch_size_per_gpu": 16,
            },
            "divisible by micro_train_batch_size_per_gpu",
        ),
    ],
)
def test_builtin_space_enforces_skyrl_batch_rules(changes, fragment):
    space = load_space("skyrl-text2sql")
    values = {**space.defaults(), **changes}
    assert any(fragment in v for v in space.violations(values)), space.violations(values)


def test_every_admissible_builtin_config_passes_validate_batch_sizes_arithmetic():
    """Cross-check the space's rules with SkyRL's arithmetic written out independently."""
    import itertools
    import math

    space = load_space("skyrl-text2sql")
    n, dp = 5, 8
    for tbs, mini, micro in itertools.product(
        space.param("trainer.train_batch_size").choices,
        space.param("trainer.policy_mini_batch_size").choices,
        space.param("trainer.micro_train_batch_size_per_gpu").choices,
    ):
        values = {
            **space.defaults(),
            "trainer.train_batch_size": tbs,
            "trainer.policy_mini_batch_size": mini,
            "trainer.micro_train_batch_size_per_gpu": micro,
        }
        mini_gpu = mini * n // dp
        ok = (
            tbs >= mini
            and tbs % mini == 0
            and mini_gpu > 0
            and mini_gpu % micro == 0
            and mini_gpu // micro > 0
            and (tbs * n // dp) % mini_gpu == 0
            and tbs * n >= math.lcm(dp)
        )
        assert (space.violations(values) == []) == ok, (tbs, mini, micro, space.violations(values))


def test_prompt_length_keeps_max_input_length_consistent():
    space = load_space("skyrl-text2sql")
    values = {**space.defaults(), "trainer.max_prompt_length": 8192}
    args, env = render_values(space, values)
    assert "generator.max_input_length=29000" in args  # multi-turn: the script's larger budget stays
    import dataclasses

    single = dataclasses.replace(space, context={**space.context, "generator.max_turns": 1})
    args, _ = render_values(single, values)
    assert "generator.max_input_length=8192" in args
    assert env["NCCL_ALGO"] is None  # unset: removed from the trial's environment


def test_user_file_works_like_a_builtin(tmp_path):
    space = load_space(str(write(tmp_path, MINIMAL)))
    assert space.name == "mini" and space.source.endswith("space.yaml")
    assert space.param("trainer.micro_train_batch_size_per_gpu").choices == (1, 2, 4, 8)
    args, env = render_values(space, {"trainer.micro_train_batch_size_per_gpu": 4, "NCCL_PROTO": "LL128"})
    assert args == ["trainer.micro_train_batch_size_per_gpu=4"] and env == {"NCCL_PROTO": "LL128"}
    assert space.violations({"trainer.micro_train_batch_size_per_gpu": 8, "NCCL_PROTO": UNSET}) == []


BAD = {
    "syntax": ("name: x\nparameters: [\n  - {name: a\n", r"line \d+ YAML syntax error"),
    "unknown top key": (MINIMAL + "\nstrategy: fast\n", "unknown key 'strategy'"),
    "unknown param key": (
        MINIMAL.replace("default: 2", "default: 2\n    step_size: 2"),
        "unknown key in parameters\\[0\\].*'step_size'",
    ),
    "unknown kind": (MINIMAL.replace("kind: pow2", "kind: float64"), "unknown kind 'float64'"),
    "constraint names unknown param": (MINIMAL.replace("n * 8 %", "m * 8 %"), "names 'm', which is not a parameter"),
    "unsafe expression": (
        MINIMAL.replace("n * 8 % trainer", "__import__('os').getpid() % trainer"),
        "only the functions",
    ),
    "bad host memory": (
        MINIMAL.replace("default: 2", "default: 2\n    host_memory: lots"),
        "parameters\\[0\\].*host_memory must be one of increasing, .* got 'lots'",
    ),
    "pow2 bounds": (MINIMAL.replace("high: 8", "high: 12"), "powers of two"),
    "no choices": (MINIMAL.replace("choices: [unset, Simple, LL128]", "choices: []"), "non-empty 'choices'"),
    "default outside choices": (MINIMAL.replace("default: 2", "default: 3"), "'3' is not a value of trainer.micro"),
    "no parameters": ("name: x\nparameters: []\n", "'parameters' must be a non-empty list"),
    "bad regex": (MINIMAL + "\nprogress:\n  step_end: 'Finished: (step'\n", "bad regular expression"),
    "unknown clock": (MINIMAL + "\nclocks:\n  stall_s: 3\n", "unknown key in clocks: 'stall_s'"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_space_files_give_one_line_errors_naming_the_problem(tmp_path, case):
    text, pattern = BAD[case]
    path = write(tmp_path, text)
    with pytest.raises(NcclTuneError, match=pattern) as info:
        load_space(str(path))
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg


def test_unknown_space_name_lists_the_builtins():
    with pytest.raises(NcclTuneError, match="unknown search space 'nope'.*skyrl-text2sql"):
        load_space("nope")
    with pytest.raises(NcclTuneError, match="does not exist"):
        load_space("/tmp/definitely/not/here.yaml")


PROGRESS_BAD = {
    "unknown preset": (
        "progress:\n  preset: fairseq\n",
        r"progress.preset 'fairseq' is unknown; presets: skyrl, hf-trainer",
    ),
    "two rates together": (  # a duration and a rate are two facts of a step (Megatron prints both)
        "progress:\n  step_end: 'step (?P<tokens_per_s>[0-9.]+) tok/s (?P<samples_per_s>[0-9.]+) samples/s'\n",
        r"progress.step_end: groups 'samples_per_s' and 'tokens_per_s' can match the same line",
    ),
    "empty step rule": ("progress:\n  preset: lightning\n  step_end: []\n", "no trial can be ranked"),
    "unknown group": ("progress:\n  step_end: 'step (?P<sec>[0-9.]+)s'\n", "unknown group 'sec'"),
    "memory without a figure": (
        "progress:\n  memory: 'mem (?P<rank>[0-9]+)'\n",
        "needs a group named gib or mib or gb",
    ),
    "phase without a name": ("progress:\n  phase_start: 'Started'\n", "needs a group named phase"),
}


@pytest.mark.parametrize("case", sorted(PROGRESS_BAD))
def test_bad_progress_rules_are_one_line_before_any_trial(tmp_path, case):
    text, pattern = PROGRESS_BAD[case]
    path = write(tmp_path, MINIMAL + text)
    with pytest.raises(NcclTuneError, match=pattern) as info:
        load_space(str(path))
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_a_preset_with_one_rule_replaced_and_alternatives_that_exclude_each_other(tmp_path):
    text = MINIMAL + (
        "progress:\n  preset: megatron\n  training_done: 'all done'\n"
        "  memory: ['peak (?P<gib>[0-9.]+) GiB', 'peak (?P<mib>[0-9.]+) MiB']\n"
    )
    rules = load_space(str(write(tmp_path, text))).progress
    assert rules.preset == "megatron" and rules.training_done == "all done" and len(rules.memory) == 2
    assert "elapsed time per iteration" in rules.step_end[0]
    bar = (
        MINIMAL
        + "progress:\n  step_end: '(?P<step>[0-9]+)/[0-9]+ .*?(?:(?P<it_per_s>[0-9.]+)it/s|(?P<seconds>[0-9.]+)s/it)'\n"
    )
    custom = load_space(str(write(tmp_path, bar, "bar.yaml"))).progress
    assert custom.preset is None and custom.throughput_units() == {"steps"}
    assert load_space(str(write(tmp_path, MINIMAL, "none.yaml"))).progress.detect


def test_steps_per_second_cannot_rank_trials_that_change_the_work_of_a_step(tmp_path):
    text = MINIMAL.replace("    default: 2\n", "    default: 2\n    semantic: true\n", 1)
    lightning = load_space(str(write(tmp_path, text + "progress:\n  preset: lightning\n")))
    problem = lightning.ranking_problem((), lightning.progress.throughput_units())
    assert problem and "trainer.micro_train_batch_size_per_gpu change how much a step does" in problem
    assert "throughput.samples_per_step" in problem and "\n" not in problem
    assert lightning.ranking_problem({"trainer.micro_train_batch_size_per_gpu"}, {"steps"}) is None  # pinned
    assert lightning.ranking_problem((), {"samples"}) is None
    with_samples = load_space(str(write(tmp_path, text + "throughput:\n  samples_per_step: n * 8\n", "s.yaml")))
    assert with_samples.ranking_problem((), {"steps"}) is None
    hf = load_space(str(write(tmp_path, text + "progress:\n  preset: hf-trainer\n", "hf.yaml")))
    assert hf.progress.throughput_units() == {"steps", "samples"}  # known only once a trial ran
    assert hf.ranking_problem((), hf.progress.throughput_units()) is None
    # a bar timed by the clock, whose steps a metric line gives their rate (torchtune's)
    tune = load_space(str(write(tmp_path, text + "progress:\n  preset: torchtune\n", "tune.yaml")))
    assert tune.progress.throughput_units() == {"steps", "tokens"}
    assert tune.ranking_problem((), tune.progress.throughput_units()) is None
    # Megatron prints TFLOP/s/GPU only where it counts FLOPs; its global batch size gives samples
    megatron = load_space(str(write(tmp_path, text + "progress:\n  preset: megatron\n", "mt.yaml")))
    assert megatron.progress.throughput_units() == {"TFLOP/s/GPU", "samples"}
