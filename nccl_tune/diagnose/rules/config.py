"""The command refused its configuration: Hydra and dataclass configs, argparse, validation
assertions (SkyRL's batch-size checks), a command that is not there."""

from __future__ import annotations

import re
from collections.abc import Callable

from nccl_tune.diagnose.rules.rule import Kind, Rule, rx
from nccl_tune.diagnose.wording import AdviceContext
from nccl_tune.failure import FailureClass as F


def _unknown_key(ctx: AdviceContext) -> str:
    d = ctx.details
    if d.get("config"):  # a dataclass config (today's SkyRL) names its class
        return (
            f"The command's {d['config']} has no field {d.get('key', '')}: check the key against the trainer's config "
            "classes (the search space or --set); SkyRL's two layouts spell some keys differently, and the '+' prefix "
            "adds nothing there"
        )
    key = d.get("key", "")
    return (
        f"The command refused the key '{key}': check its spelling against the training config (the search space "
        "or --set), or add a new key with +key=value"
    )


def _plus_prefix(ctx: AdviceContext) -> str:
    return (
        f"The command refuses the '+' prefix ({ctx.details.get('key', '')}): give the key without '+', it must already "
        "exist"
    )


def _validation(ctx: AdviceContext) -> str:
    what = ctx.details.get("detail", "a validation assertion")
    return f"The command refused the config ({what}): fix the values or pin them with --set"


def _command(ctx: AdviceContext) -> str:
    return f"The command was not found ({ctx.details.get('cmd', '')}): check the command line and PATH"


def _mid_run(ctx: AdviceContext) -> str:
    exc = ctx.details.get("exception") or "A configuration error"
    return (
        f"{exc} raised after training steps had finished: the configuration was accepted at start-up, so this is a "
        "code path that reads a key or checks a value only now (a bug, or an input such as an uneven last batch), "
        "not a refused configuration; the traceback names the path"
    )


MID_RUN = Rule("config_error_mid_run", F.CRASH, Kind.CRASH, (), None, "config_mid_run", advice=_mid_run)
"""A configuration-looking exception raised after training steps: a crash (``Rule.once_training``)."""

_VALIDATION_FRAME = re.compile(rb'File "[^"\n]+", line \d+, in (?:validate|_?check|verify)\w*')

CONFIG_ASSERTION = Rule(
    "config_assertion_frame",
    F.CONFIG_ERROR,
    Kind.ROOT,
    (),
    None,
    "validation",
    advice=_validation,
    once_training=MID_RUN,
)
"""A bare ``AssertionError`` raised inside a config validation function."""


def validation_assertion(m: re.Match[str] | None, msg: str, before: Callable[[], bytes]) -> Rule | None:
    """An ``AssertionError`` raised in a config validation function (a traceback frame ``in
    validate_...``, as SkyRL's batch-size checks are) is the command refusing its config."""
    if m is None or m.group("exception") != "AssertionError":
        return None
    return CONFIG_ASSERTION if _VALIDATION_FRAME.search(before()) else None


REFUSED: tuple[Rule, ...] = (
    Rule(
        "hydra_unknown_key",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("Could not override",),
        rx(r"Could not override '(?P<key>[^']+)'"),
        "unknown_key",
        advice=_unknown_key,
        once_training=MID_RUN,
    ),
    Rule(
        "hydra_not_in_struct",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("is not in struct",),
        rx(r"Key '(?P<key>[^']+)' is not in struct"),
        "unknown_key",
        advice=_unknown_key,
        once_training=MID_RUN,
    ),
    Rule(
        "dataclass_unknown_key",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("Invalid fields",),
        rx(r"Invalid fields? \{(?P<key>[^}]*)\} for (?P<config>\w+)"),
        "unknown_key",
        advice=_unknown_key,
        once_training=MID_RUN,
    ),
    Rule(
        "dataclass_plus_prefix",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("prefix for adding new config fields is not supported",),
        rx(r"prefix for adding new config fields is not supported: '(?P<key>[^']*)'"),
        "plus_prefix",
        advice=_plus_prefix,
        once_training=MID_RUN,
    ),
    Rule(
        "hydra_bad_override",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("Error merging override", "Error parsing override", "mismatched input", "no viable alternative"),
        None,
        "bad_value",
        once_training=MID_RUN,
    ),
    Rule(
        "config_validation",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("ValidationError", "ConfigKeyError", "ConfigAttributeError"),
        rx(r"(?:omegaconf\.errors\.|pydantic[\w.]*\.)?(?:ValidationError|ConfigKeyError|ConfigAttributeError)\b"),
        "bad_value",
        once_training=MID_RUN,
    ),
    Rule(
        "config_assertion",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("AssertionError",),
        rx(
            r"AssertionError: (?P<detail>.*(?:should be|must be|divisible|batch_size|max_prompt_length"
            r"|max_input_length|max_generate_length|num_gpus|placement).*)"
        ),
        "validation",
        advice=_validation,
        once_training=MID_RUN,
    ),
    Rule(
        "argparse_error",
        F.CONFIG_ERROR,
        Kind.ROOT,
        (": error: ",),
        rx(r"^[\w./-]+: error: (?:unrecognized arguments|argument |the following arguments are required)"),
        "bad_value",
        once_training=MID_RUN,
    ),
    Rule(
        "command_not_found",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("command not found",),
        rx(r"(?P<cmd>[\w./-]+): command not found"),
        "command",
        advice=_command,
        once_training=MID_RUN,
    ),
)
"""The command refused its configuration."""

STARTUP: tuple[Rule, ...] = (
    # a program refusing its parallel layout or batch arithmetic with a plain exception: Megatron's "world size
    # (6) is not divisible by tensor parallel size (4) times ...", torchtitan's "Invalid parallel dims: dp_replicate(1)
    # * dp_shard(3) * ... != world_size(8)", verl's "real_train_batch_size (1000) must be divisible by minimal possible
    # batch size (16)"; before any step (after one, ``MID_RUN``)
    Rule(
        "startup_refusal",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("ValueError", "AssertionError", "ConfigError"),
        rx(
            r"(?:ValueError|AssertionError|\w*ConfigError)\b:?\s*(?P<detail>.*(?:world[ _]size|WORLD_SIZE|parallel[ _](?:size"
            r"|degree|dims)|_parallel_size|parallel_degree|\bdegree\b|divisible|micro_batch|batch[ _]size|num_gpus"
            r"|nproc_per_node|n_gpus).*)"
        ),
        "validation",
        advice=_validation,
        once_training=MID_RUN,
    ),
)
"""Refusals of the run's parallel layout or batch arithmetic raised as plain exceptions (tried after
the engines' own, whose ``ValueError`` names the engine argument)."""
