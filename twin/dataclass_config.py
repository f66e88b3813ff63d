"""Today's SkyRL command line: ``SkyRLTrainConfig.from_cli_overrides`` for the twin.

What SkyRL does (``skyrl/train/config/config.py``): a ``+key=`` token is refused; the ``key=value``
tokens become one nested mapping (OmegaConf's dot-list: the last value of a key wins, values are
YAML scalars or lists, never converted to the field's type); a few removed keys are refused with
their own message (``generator.inference_engine.async_engine=false``, ``enable_http_endpoint``,
``override_existing_update_group``, ``remote_urls``, any ``rope_*`` key) and
``trainer.use_sample_packing`` is renamed to ``trainer.remove_microbatch_padding``; then the mapping
is checked class by class, in field order (``build_nested_dataclass``), and the first class with
keys it does not know raises ``ValueError: Invalid fields {...} for <Class>. Valid fields are
{...}.``. Fields not given keep their dataclass defaults; ``__post_init__`` fills
``generator.max_input_length`` (from ``trainer.max_prompt_length``), the reference model path (the
policy's), ``generator.eval_sampling_params`` (temperature 0 and the sampling
``max_generate_length``; when an override names it, the class defaults for every key it does not
give, so ``max_generate_length`` falls back to 1024) and ``trainer.algorithm.temperature``.

Refusals raise :class:`SimConfigError` with the traceback SkyRL's entry point prints.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from typing import Any

from twin.overrides import AppliedConfig, Override, _resolve_tree, parse_token
from twin.refusal import SimConfigError
from twin.schema_today import REQUIRED, ROOT, SCHEMA, Home, Sub

ENTRY_FRAME = ('  File "{file}", line 382, in main',)
_REMOVED = {
    "generator.inference_engine.enable_http_endpoint": (
        "`enable_http_endpoint` is no longer supported; SkyRL always uses the HTTP/vLLM inference path. "
        "Remove the override."
    ),
    "generator.inference_engine.override_existing_update_group": (
        "`override_existing_update_group` is no longer supported; update-group handling is managed "
        "automatically by the vLLM-native inference path. Remove the override."
    ),
    "generator.inference_engine.remote_urls": (
        "`remote_urls` is no longer supported, external inference servers can be used with "
        "`external_proxy_url` and `external_server_urls` instead"
    ),
}
_ROPE = ("rope_scaling", "rope_theta", "rope_parameters")


def python_traceback(entry_file: str, frames: Sequence[str], last: str) -> list[str]:
    """The lines Python prints for an exception raised under SkyRL's ``main()``."""
    head = [line.format(file=entry_file) for line in ENTRY_FRAME]
    return ["Traceback (most recent call last):", *head, *frames, last]


def _refuse(kind: str, summary: str, exc_line: str, frames: Sequence[str] = ()) -> SimConfigError:
    from twin.layout import Layout, names

    entry = names(Layout.TODAY).entrypoint_module.replace(".", "/") + ".py"
    return SimConfigError(kind, summary, python_traceback(entry, frames, exc_line))


def _nested(tokens: Sequence[Override]) -> tuple[dict[str, Any], dict[str, str]]:
    tree: dict[str, Any] = {}
    source: dict[str, str] = {}
    for ov in tokens:
        node = tree
        *parents, last = ov.key.split(".")
        for part in parents:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[last] = ov.value
        source[ov.key] = ov.token
    return tree, source


def _get(tree: Mapping[str, Any], path: str) -> Any:
    node: Any = tree
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


_MISSING = object()


def _pop(tree: dict[str, Any], path: str) -> None:
    *parents, last = path.split(".")
    node: Any = tree
    for part in parents:
        node = node.get(part)
        if not isinstance(node, dict):
            return
    node.pop(last, None)


def _removed_keys(tree: dict[str, Any]) -> None:
    """The keys SkyRL refuses (or drops) before building the config."""
    for section in ("trainer", "generator", "generator.inference_engine",
                    "generator.inference_engine.engine_init_kwargs",
                    "generator.inference_engine.engine_init_kwargs.hf_overrides"):  # fmt: skip
        node = _get(tree, section)
        if isinstance(node, Mapping) and any(k in node for k in _ROPE) and not section.endswith("hf_overrides"):
            raise _refuse(
                "removed_key",
                f"{section}.rope_*: rope settings are no longer config keys; use "
                "generator.inference_engine.engine_init_kwargs.hf_overrides.rope_parameters",
                "ValueError: `rope_scaling`, `rope_theta`, and `rope_parameters` are no longer supported as native "
                "config overrides",
            )
    path = "generator.inference_engine.async_engine"
    value = _get(tree, path)
    if value is not _MISSING:
        if value is True or str(value).lower() == "true":
            _pop(tree, path)
        else:
            what = (
                "`async_engine=False` is no longer supported"
                if str(value).lower() == "false"
                else "`async_engine` is no longer supported as a config field"
            )
            raise _refuse(
                "removed_key", f"{path}={value}: {what}; remove it", f"ValueError: {what}. Remove the override."
            )
    for path, message in _REMOVED.items():
        if _get(tree, path) is not _MISSING:
            raise _refuse("removed_key", f"{path}: {message}", f"ValueError: {message}")
    trainer = tree.get("trainer")
    if isinstance(trainer, dict) and "use_sample_packing" in trainer:
        if "remove_microbatch_padding" in trainer:
            raise _refuse(
                "removed_key",
                "trainer.use_sample_packing and trainer.remove_microbatch_padding are both given; keep one",
                "ValueError: Specify only one of trainer.use_sample_packing (deprecated) and "
                "trainer.remove_microbatch_padding, not both.",
            )
        trainer["remove_microbatch_padding"] = trainer.pop("use_sample_packing")


def check_fields(cls: str, given: Mapping[str, Any], prefix: str = "") -> None:
    """``build_nested_dataclass``'s key check: the first class (depth first, in field order) with
    keys it does not have raises SkyRL's ``Invalid fields`` error."""
    fields = SCHEMA[cls]
    valid = {name for name, _ in fields}
    invalid = set(given) - valid
    if invalid:
        paths = ", ".join(prefix + k for k in sorted(invalid))
        raise _refuse(
            "unknown_key",
            f"{cls} has no field {paths} (SkyRL's config refused the key; check its spelling or the layout)",
            f"ValueError: Invalid fields {invalid} for {cls}. Valid fields are {valid}.",
            frames=('  File "skyrl/train/config/config.py", line 1573, in validate_dict_keys_against_dataclass',),
        )
    for name, default in fields:
        if name in given and isinstance(default, Sub) and isinstance(given[name], dict):
            check_fields(default.cls, given[name], f"{prefix}{name}.")


def _default_value(value: Any, home: str) -> Any:
    if isinstance(value, Home):
        return os.path.join(home, value.path)
    if isinstance(value, list):
        return [_default_value(v, home) for v in value]
    return copy.deepcopy(value)


def build_tree(
    cls: str, given: Mapping[str, Any] | None, home: str, defaults: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The full configuration of ``cls``: its defaults with ``given`` on top."""
    given = given or {}
    out: dict[str, Any] = {}
    for name, default in SCHEMA[cls]:
        value = given.get(name, _MISSING)
        if isinstance(default, Sub):
            if default.optional and value is _MISSING:
                out[name] = None
            elif isinstance(value, dict) or value is _MISSING:
                out[name] = build_tree(default.cls, value if isinstance(value, dict) else None, home, default.defaults)
            else:
                out[name] = value
        elif value is not _MISSING:
            out[name] = value
        elif defaults and name in defaults:
            out[name] = copy.deepcopy(defaults[name])
        else:
            out[name] = None if default is REQUIRED else _default_value(default, home)
    return out


def _post_init(tree: dict[str, Any], given: Mapping[str, Any]) -> None:
    trainer, generator = tree["trainer"], tree["generator"]
    if generator["max_input_length"] is None:
        generator["max_input_length"] = trainer["max_prompt_length"]
    if trainer["ref"]["model"]["path"] is None:
        trainer["ref"]["model"]["path"] = trainer["policy"]["model"]["path"]
    if generator["eval_sampling_params"] is None:
        generator["eval_sampling_params"] = build_tree("SamplingParams", None, "")
        generator["eval_sampling_params"].update(
            temperature=0.0, max_generate_length=generator["sampling_params"]["max_generate_length"]
        )
    if trainer["algorithm"]["temperature"] is None:
        trainer["algorithm"]["temperature"] = generator["sampling_params"]["temperature"]
    loader = tree["data"]["dataloader"]
    if loader["num_workers"] is None:
        loader["num_workers"] = 8


def apply_dataclass_overrides(tokens: Sequence[str], env: Mapping[str, str | None] | None = None) -> AppliedConfig:
    """Today's SkyRL: the configuration ``tokens`` build, or SkyRL's refusal (see the module docstring)."""
    env_map: Mapping[str, str | None] = os.environ if env is None else env
    for token in tokens:
        if token.startswith("+"):
            raise _refuse(
                "append",
                f"{token}: today's SkyRL refuses the '+' prefix (it adds no config keys); drop the '+' or subclass the config",
                f"ValueError: The '+' prefix for adding new config fields is not supported: '{token}'. "
                "To add custom config fields, subclass the relevant config dataclass.",
            )
    parsed = [_dot_token(t) for t in tokens]
    given, source = _nested(parsed)
    given = _resolve_tree(given, given, env_map, source)
    _removed_keys(given)
    check_fields(ROOT, given)
    tree = build_tree(ROOT, given, env_map.get("HOME") or os.path.expanduser("~"))
    _post_init(tree, given)
    return AppliedConfig(tree=tree, overrides=tuple(parsed), source_token=source)


def _dot_token(token: str) -> Override:
    """OmegaConf's dot-list: ``key=value``; a token without ``=`` names a key with no value."""
    if "=" not in token or token.startswith("~"):
        key, _, text = token.partition("=")
        return Override(token=token, op="set", key=key.strip(), value=text or None, value_text=text)
    return parse_token(token)
