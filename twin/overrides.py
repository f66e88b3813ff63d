"""Hydra-style command-line overrides applied to the twin's configuration tree.

Forms: ``key=value`` (the key must exist), ``+key=value`` (adds a key that must not exist),
``++key=value`` (adds or overrides), ``~key`` / ``~key=value`` (deletes). A key given twice keeps
its last value, as Hydra does. Values follow Hydra's grammar closely enough for SkyRL's scripts:
``null``, ``true``/``false``, integers, floats (``1e-6``, ``inf``), quoted strings, ``[...]``
lists and ``{...}`` dicts, and unquoted strings (which may hold ``${...}`` interpolations).

Refusals raise :class:`~twin.refusal.SimConfigError` with the lines Hydra prints.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from twin.defaults import default_tree
from twin.refusal import HYDRA_FULL_ERROR_HINT, SimConfigError

_KEY = re.compile(r"^[A-Za-z_][\w\-]*(?:\.[\w\-]+)*$")
_INT = re.compile(r"^[+-]?(?:0|[1-9][0-9_]*)$")
_FLOAT = re.compile(
    r"^[+-]?(?:(?:\d[\d_]*)?\.\d[\d_]*(?:[eE][+-]?\d+)?|\d[\d_]*\.(?:[eE][+-]?\d+)?|\d[\d_]*[eE][+-]?\d+)$"
)
_INTERP = re.compile(r"\$\{([^${}]+)\}")


@dataclass(frozen=True)
class Override:
    """One parsed override token."""

    token: str
    op: str
    """``set`` (key=value), ``add`` (+key), ``force`` (++key) or ``delete`` (~key)."""
    key: str
    value: Any = None
    value_text: str = ""


@dataclass(frozen=True)
class AppliedConfig:
    """The configuration tree after overrides and interpolation, and where each key's value came from."""

    tree: Mapping[str, Any]
    overrides: tuple[Override, ...]
    source_token: Mapping[str, str]
    """Dotted key -> the override token that set it last."""

    def get(self, path: str) -> Any:
        """Value at dotted ``path`` (``KeyError`` when absent)."""
        node: Any = self.tree
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                raise KeyError(path)
            node = node[part]
        return node


def _refuse(kind: str, summary: str, lines: list[str]) -> SimConfigError:
    return SimConfigError(kind, summary, [*lines, "", HYDRA_FULL_ERROR_HINT])


def parse_value(text: str) -> Any:
    """A value in Hydra's override grammar, typed (``"1e-6"`` -> 1e-06, ``"[a, b]"`` -> ['a', 'b'])."""
    s = text.strip()
    if s == "":
        return ""
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1].replace("\\" + s[0], s[0])
    if s[0] == "[" and s[-1] == "]":
        return [parse_value(p) for p in _split_items(s[1:-1])]
    if s[0] == "{" and s[-1] == "}":
        out: dict[str, Any] = {}
        for item in _split_items(s[1:-1]):
            k, sep, v = item.partition(":")
            if not sep:
                raise ValueError(f"dict item {item!r} has no ':'")
            out[str(parse_value(k))] = parse_value(v)
        return out
    low = s.lower()
    if low == "null":
        return None
    if low in ("true", "false"):
        return low == "true"
    if _INT.match(s):
        return int(s.replace("_", ""))
    if _FLOAT.match(s):
        return float(s.replace("_", ""))
    if low in ("inf", "+inf", "-inf", "nan"):
        return float(low)
    return s


def _split_items(body: str) -> list[str]:
    """Split ``a, [b, c], 'd,e'`` at top-level commas."""
    items: list[str] = []
    depth = 0
    quote = ""
    cur: list[str] = []
    for ch in body:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    items.append("".join(cur))
    if len(items) == 1 and not items[0].strip():
        return []
    return items


def parse_token(token: str) -> Override:
    """One override token; refuses what Hydra cannot parse."""
    op = "set"
    body = token
    if body.startswith("++"):
        op, body = "force", body[2:]
    elif body.startswith("+"):
        op, body = "add", body[1:]
    elif body.startswith("~"):
        op, body = "delete", body[1:]
    key, eq, value_text = body.partition("=")
    key = key.strip()
    if not eq and op != "delete":
        raise _refuse(
            "parse",
            f"cannot parse override {token!r}: expected key=value",
            [
                f"Error parsing override '{token}'",
                "missing EQUAL at '<EOF>'",
                "See https://hydra.cc/docs/1.2/advanced/override_grammar/basic for details",
            ],
        )
    if not _KEY.match(key):
        raise _refuse(
            "parse",
            f"cannot parse override {token!r}: {key!r} is not a key",
            [
                f"Error parsing override '{token}'",
                f"no viable alternative at input '{key}'",
                "See https://hydra.cc/docs/1.2/advanced/override_grammar/basic for details",
            ],
        )
    try:
        value = parse_value(value_text) if eq else None
    except ValueError as exc:
        raise _refuse(
            "parse",
            f"cannot parse override {token!r}: {exc}",
            [f"Error parsing override '{token}'", str(exc)],
        ) from None
    return Override(token=token, op=op, key=key, value=value, value_text=value_text)


def _walk_to_parent(tree: dict[str, Any], key: str, create: bool) -> tuple[dict[str, Any] | None, str, str | None]:
    """Parent mapping of ``key``, its last part, and the first missing prefix (None when all exist)."""
    parts = key.split(".")
    node: Any = tree
    for i, part in enumerate(parts[:-1]):
        nxt = node.get(part) if isinstance(node, dict) else None
        if not isinstance(nxt, dict):
            if create and isinstance(node, dict) and part not in node:
                node[part] = {}
                nxt = node[part]
            else:
                return None, parts[-1], ".".join(parts[: i + 1])
        node = nxt
    return node, parts[-1], None


def apply_overrides(tokens: Sequence[str], env: Mapping[str, str | None] | None = None) -> AppliedConfig:
    """Apply ``tokens`` (in order; the last value of a key wins) to the default tree and resolve
    interpolations against it and ``env`` (for ``${oc.env:NAME}``)."""
    tree = default_tree()
    parsed = [parse_token(t) for t in tokens]
    source: dict[str, str] = {}
    for ov in parsed:
        parent, last, missing = _walk_to_parent(tree, ov.key, create=ov.op in ("add", "force"))
        exists = parent is not None and last in parent
        if ov.op == "set":
            if not exists:
                missing_key = missing or ov.key
                missing_part = missing_key.rsplit(".", 1)[-1]
                raise _refuse(
                    "unknown_key",
                    f"Could not override '{ov.key}': key '{missing_part}' is not in the config "
                    f"(to add it, use +{ov.key}=...)",
                    [
                        f"Could not override '{ov.key}'.",
                        f"To append to your config use +{ov.token}",
                        f"Key '{missing_part}' is not in struct",
                        f"    full_key: {missing_key}",
                        "    object_type=dict",
                    ],
                )
            parent[last] = _coerce(ov, parent[last])
        elif ov.op == "add":
            if exists:
                raise _refuse(
                    "append_existing",
                    f"Could not append '{ov.key}': it already exists (override it with {ov.key}=...)",
                    [f"Could not append to config. An item is already at '{ov.key}'."],
                )
            assert parent is not None
            parent[last] = ov.value
        elif ov.op == "force":
            assert parent is not None
            parent[last] = _coerce(ov, parent[last]) if exists else ov.value
        else:  # delete
            if not exists:
                raise _refuse(
                    "delete_missing",
                    f"Could not delete '{ov.key}': no such key",
                    [f"Could not delete from config. '{ov.key}' does not exist."],
                )
            del parent[last]
        source[ov.key] = ov.token
    env_map: Mapping[str, str | None] = os.environ if env is None else env
    resolved = _resolve_tree(tree, tree, env_map, source)
    return AppliedConfig(tree=resolved, overrides=tuple(parsed), source_token=source)


_TYPE_NAMES = {bool: "Boolean", int: "Integer", float: "Float"}


def _coerce(ov: Override, current: Any) -> Any:
    """Convert ``ov.value`` to the type of the key's current value for typed scalars, as a
    structured config would; strings, lists, dicts and nulls take any value."""
    value = ov.value
    if isinstance(current, str) and _INTERP.search(current):
        return value  # interpolated default: checked once resolved
    want = type(current) if isinstance(current, (bool, int, float)) else None
    if want is None or value is None:
        return value
    converted = _convert(value, want)
    if converted is _FAIL:
        raise SimConfigError(
            "type",
            f"{ov.key}={ov.value_text}: {value!r} is not a valid {_TYPE_NAMES[want].lower()} "
            f"(the key's default is {current!r})",
            [
                f"Error merging override {ov.token}",
                f"Value '{ov.value_text}' of type '{type(value).__name__}' could not be converted to {_TYPE_NAMES[want]}",
                f"    full_key: {ov.key}",
                "    object_type=dict",
                "",
                HYDRA_FULL_ERROR_HINT,
            ],
        )
    return converted


_FAIL = object()
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def _convert(value: Any, want: type) -> Any:
    if want is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        return _FAIL
    if want is int:
        if isinstance(value, bool):
            return _FAIL
        if isinstance(value, int):
            return value
        if isinstance(value, str) and _INT.match(value.strip()):
            return int(value.strip().replace("_", ""))
        return _FAIL
    if want is float:
        if isinstance(value, bool):
            return _FAIL
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                return _FAIL
        return _FAIL
    return value


def convert_checked(path: str, value: Any, want: type, source: Mapping[str, str]) -> Any:
    """``value`` of key ``path`` as ``want`` (bool/int/float/str), or a Hydra-style type refusal."""
    if want is str:
        return value if isinstance(value, str) else str(value)
    converted = _convert(value, want)
    if converted is _FAIL or (want is float and isinstance(converted, float) and math.isnan(converted)):
        token = source.get(path, f"{path}={value}")
        raise SimConfigError(
            "type",
            f"{path}: {value!r} is not a valid {_TYPE_NAMES[want].lower()}",
            [
                f"Error merging override {token}",
                f"Value '{value}' of type '{type(value).__name__}' could not be converted to {_TYPE_NAMES[want]}",
                f"    full_key: {path}",
                "    object_type=dict",
                "",
                HYDRA_FULL_ERROR_HINT,
            ],
        )
    return converted


def _resolve_tree(node: Any, root: dict[str, Any], env: Mapping[str, str | None], source: Mapping[str, str]) -> Any:
    if isinstance(node, dict):
        return {k: _resolve_tree(v, root, env, source) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve_tree(v, root, env, source) for v in node]
    if isinstance(node, str) and "${" in node:
        return _resolve_str(node, root, env, (), source)
    return node


def _lookup(root: dict[str, Any], path: str) -> Any:
    node: Any = root
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(path)
        node = node[part]
    return node


def _resolve_str(text: str, root: dict[str, Any], env: Mapping[str, str | None], seen: tuple[str, ...], source) -> Any:
    def one(expr: str) -> Any:
        expr = expr.strip()
        if expr.startswith("oc.env:"):
            name, _, default = expr[len("oc.env:") :].partition(",")
            value = env.get(name.strip())
            if value is None:
                if default:
                    return parse_value(default)
                raise SimConfigError(
                    "interpolation",
                    f"interpolation ${{{expr}}}: environment variable {name.strip()!r} is not set",
                    [
                        f"Error resolving interpolation '${{{expr}}}'",
                        f"Environment variable '{name.strip()}' not found",
                        "",
                        HYDRA_FULL_ERROR_HINT,
                    ],
                )
            return value
        if expr in seen:
            raise SimConfigError(
                "interpolation",
                f"interpolation ${{{expr}}} refers to itself",
                [f"Recursive interpolation detected: ${{{expr}}}", "", HYDRA_FULL_ERROR_HINT],
            )
        try:
            target = _lookup(root, expr)
        except KeyError:
            raise SimConfigError(
                "interpolation",
                f"interpolation ${{{expr}}} names a key that does not exist",
                [
                    f"Interpolation key '{expr}' not found",
                    f"    full_key: {expr}",
                    "    object_type=dict",
                    "",
                    HYDRA_FULL_ERROR_HINT,
                ],
            ) from None
        if isinstance(target, str) and "${" in target:
            return _resolve_str(target, root, env, (*seen, expr), source)
        return target

    whole = _INTERP.fullmatch(text.strip())
    if whole:
        return one(whole.group(1))
    return _INTERP.sub(lambda m: str(one(m.group(1))), text)
