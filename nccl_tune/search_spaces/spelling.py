"""How a value is written as text: the one spelling shared by the command line, the environment,
``--set`` and YAML values matched against a parameter's choices, and the reports.

It sits below ``space.py`` (which matches a typed value to a choice by its spelling) and
``render.py`` (which writes values into argv elements and env variables).
"""

from __future__ import annotations

from typing import Any


def format_value(value: Any) -> str:
    """A value as it is written on a command line (Hydra spelling for booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return repr(value)
    return str(value)
