"""How a value is written as text: the one spelling shared by the command line, the environment,
``--set`` and YAML values matched against a parameter's choices, and the reports; and the known
word nearest to a misspelt one (a YAML key, a ``--set`` key, an environment variable).

It sits below ``space.py`` (which matches a typed value to a choice by its spelling) and
``render.py`` (which writes values into argv elements and env variables).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any


def format_value(value: Any, python_bools: bool = False) -> str:
    """A value as it is written on a command line: booleans in Hydra's spelling (``true``), or with
    ``python_bools`` as Python literals (``True``: a parser that evaluates them)."""
    if isinstance(value, bool):
        return str(value) if python_bools else ("true" if value else "false")
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return repr(value)
    return str(value)


def nearest(word: str, known: Iterable[str], cutoff: float = 0.75) -> str | None:
    """The word of ``known`` closest to a misspelt ``word`` (``memroy`` -> ``memory``), or None when
    none is close enough to be what was meant."""
    got = difflib.get_close_matches(str(word), sorted(set(known)), n=1, cutoff=cutoff)
    return got[0] if got else None


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'memory'?)`` for a misspelt ``word``, or nothing when no known word is close."""
    guess = nearest(word, known)
    return f" (did you mean {guess!r}?)" if guess else ""
