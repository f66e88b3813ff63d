"""Safe evaluation of the small expressions a search space uses (constraints, derived values).

Expressions are Python syntax restricted to arithmetic, comparisons, ``and``/``or``/``not``,
``x if c else y``, literals, dotted names (``trainer.train_batch_size``) and a few pure
functions (``min``, ``max``, ``abs``, ``int``, ``lcm``, ``gcd``). Nothing is ``eval``-ed: the
tree is walked node by node, and anything else is refused when the space is loaded.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nccl_tune.errors import NcclTuneError

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPOPS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_FUNCS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "int": int,
    "lcm": math.lcm,
    "gcd": math.gcd,
}


MAX_INT_BITS = 256
"""An integer result wider than this is refused: no batch size or byte count needs it, and
``2 ** 2 ** 40`` would otherwise run out of memory (or time) before any error."""
MAX_SEQ_LEN = 10_000
"""A string or list repeated with ``*`` must stay shorter than this."""


class ExprError(NcclTuneError):
    """An expression that cannot be parsed, names something unknown, or fails to evaluate."""


def _dotted(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


@dataclass(frozen=True)
class Expr:
    """A parsed, checked expression. ``names`` are the dotted names it reads."""

    text: str
    tree: ast.Expression
    names: frozenset[str]

    def __call__(self, values: Mapping[str, Any]) -> Any:
        return _Eval(values, self.text).visit(self.tree.body)


def parse_expr(text: str, where: str) -> Expr:
    """Parse ``text``; ``where`` names its place in the space file for error messages."""
    if not isinstance(text, str) or not text.strip():
        raise ExprError(f"{where}: expected an expression string, got {text!r}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"{where}: cannot parse expression {text!r}: {exc.msg}") from None
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Name)):
            d = _dotted(node)
            if d is None:
                raise ExprError(f"{where}: attribute access on a non-name in {text!r} is not allowed")
            if "__" in d:
                raise ExprError(f"{where}: names with '__' are not allowed in {text!r}")
            continue
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS or node.keywords:
                raise ExprError(f"{where}: only the functions {', '.join(sorted(_FUNCS))} may be called in {text!r}")
            continue
        allowed = (
            ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
            ast.BinOp, ast.Compare, ast.IfExp, ast.Constant, ast.Load, ast.Tuple, ast.List,
            *_BINOPS, *_CMPOPS,
        )  # fmt: skip
        if not isinstance(node, allowed):
            raise ExprError(f"{where}: {type(node).__name__} is not allowed in expression {text!r}")
    # collect the outermost dotted names (skip function names and inner parts of a chain)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            continue
        if isinstance(node, ast.Attribute) or (isinstance(node, ast.Name) and node.id not in _FUNCS):
            d = _dotted(node)
            if d:
                names.add(d)
    # drop prefixes of longer names (walk visits inner Attribute/Name nodes too)
    full = {n for n in names if not any(m != n and m.startswith(n + ".") for m in names)}
    return Expr(text.strip(), tree, frozenset(full))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text)} digits)"


class _Eval(ast.NodeVisitor):
    def __init__(self, values: Mapping[str, Any], text: str) -> None:
        self.values = values
        self.text = text

    def _name(self, node: ast.AST) -> Any:
        d = _dotted(node)
        if d not in self.values:
            raise ExprError(f"expression {self.text!r} reads {d!r}, which has no value")
        return self.values[d]

    def visit_Name(self, node: ast.Name) -> Any:
        return self._name(node)

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        return self._name(node)

    def visit_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def visit_Tuple(self, node: ast.Tuple) -> Any:
        return tuple(self.visit(e) for e in node.elts)

    visit_List = visit_Tuple

    def visit_BoolOp(self, node: ast.BoolOp) -> Any:
        if isinstance(node.op, ast.And):
            result: Any = True
            for v in node.values:
                result = self.visit(v)
                if not result:
                    return result
            return result
        result = False
        for v in node.values:
            result = self.visit(v)
            if result:
                return result
        return result

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Any:
        v = self.visit(node.operand)
        if isinstance(node.op, ast.Not):
            return not v
        if isinstance(node.op, ast.USub):
            return -v
        return +v

    def visit_BinOp(self, node: ast.BinOp) -> Any:
        a, b = self.visit(node.left), self.visit(node.right)
        self._check_size(node.op, a, b)
        try:
            out = _BINOPS[type(node.op)](a, b)
        except (ZeroDivisionError, TypeError, OverflowError) as exc:
            raise ExprError(f"expression {self.text!r} failed: {exc} (with {a!r} and {b!r})") from None
        if isinstance(out, int) and out.bit_length() > MAX_INT_BITS:
            raise ExprError(
                f"expression {self.text!r}: the result reaches 2**{MAX_INT_BITS} (with {_short(a)} and {_short(b)})"
            )
        return out

    def _check_size(self, op: ast.operator, a: Any, b: Any) -> None:
        """Refuse, before computing it, a power or a repetition whose result would be too big."""
        if isinstance(op, ast.Pow) and _is_int(a) and _is_int(b) and abs(a) > 1 and b > 0:
            if b > MAX_INT_BITS or (abs(a).bit_length() - 1) * b > MAX_INT_BITS:
                raise ExprError(
                    f"expression {self.text!r}: {_short(a)} ** {_short(b)} exceeds 2**{MAX_INT_BITS}; use smaller exponents"
                )
        if isinstance(op, ast.Mult):
            for seq, n in ((a, b), (b, a)):
                if isinstance(seq, (str, tuple, list)) and _is_int(n) and len(seq) * n > MAX_SEQ_LEN:
                    raise ExprError(f"expression {self.text!r}: repeating a sequence {_short(n)} times is too long")

    def visit_Compare(self, node: ast.Compare) -> Any:
        left = self.visit(node.left)
        for op, comp in zip(node.ops, node.comparators):
            right = self.visit(comp)
            try:
                ok = _CMPOPS[type(op)](left, right)
            except TypeError as exc:
                raise ExprError(f"expression {self.text!r} failed: {exc}") from None
            if not ok:
                return False
            left = right
        return True

    def visit_IfExp(self, node: ast.IfExp) -> Any:
        return self.visit(node.body) if self.visit(node.test) else self.visit(node.orelse)

    def visit_Call(self, node: ast.Call) -> Any:
        fn = _FUNCS[node.func.id]  # type: ignore[attr-defined]
        args = [self.visit(a) for a in node.args]
        try:
            return fn(*args)
        except (TypeError, ValueError) as exc:
            raise ExprError(f"expression {self.text!r} failed: {exc}") from None

    def generic_visit(self, node: ast.AST) -> Any:  # pragma: no cover - parse_expr refuses these
        raise ExprError(f"expression {self.text!r}: {type(node).__name__} is not allowed")
