"""Values written as text: one spelling for argv, env, ``--set`` matching and reports."""

from __future__ import annotations

from nccl_tune.search_spaces.spelling import format_value


def test_format_value_spells_booleans_and_whole_floats():
    assert [format_value(v) for v in (True, False, 2.0, 0.1, "x", 3)] == ["true", "false", "2.0", "0.1", "x", "3"]
