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


_VALIDATION_FRAME = re.compile(rb'File "[^"\n]+", line \d+, in (?:validate|_?check|verify)\w*')

CONFIG_ASSERTION = Rule("config_assertion_frame", F.CONFIG_ERROR, Kind.ROOT, (), None, "validation", advice=_validation)
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
    ),
    Rule(
        "hydra_not_in_struct",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("is not in struct",),
        rx(r"Key '(?P<key>[^']+)' is not in struct"),
        "unknown_key",
        advice=_unknown_key,
    ),
    Rule(
        "dataclass_unknown_key",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("Invalid fields",),
        rx(r"Invalid fields? \{(?P<key>[^}]*)\} for (?P<config>\w+)"),
        "unknown_key",
        advice=_unknown_key,
    ),
    Rule(
        "dataclass_plus_prefix",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("prefix for adding new config fields is not supported",),
        rx(r"prefix for adding new config fields is not supported: '(?P<key>[^']*)'"),
        "plus_prefix",
        advice=_plus_prefix,
    ),
    Rule(
        "hydra_bad_override",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("Error merging override", "Error parsing override", "mismatched input", "no viable alternative"),
        None,
        "bad_value",
    ),
    Rule(
        "config_validation",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("ValidationError", "ConfigKeyError", "ConfigAttributeError"),
        rx(r"(?:omegaconf\.errors\.|pydantic[\w.]*\.)?(?:ValidationError|ConfigKeyError|ConfigAttributeError)\b"),
        "bad_value",
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
    ),
    Rule(
        "argparse_error",
        F.CONFIG_ERROR,
        Kind.ROOT,
        (": error: ",),
        rx(r"^[\w./-]+: error: (?:unrecognized arguments|argument |the following arguments are required)"),
        "bad_value",
    ),
    Rule(
        "command_not_found",
        F.CONFIG_ERROR,
        Kind.ROOT,
        ("command not found",),
        rx(r"(?P<cmd>[\w./-]+): command not found"),
        "command",
        advice=_command,
    ),
)
"""The command refused its configuration."""
