"""The models' shapes: what their Hugging Face configs add up to."""

from __future__ import annotations

import pytest

from twin.shapes import ARCHITECTURES


def test_parameter_count_matches_the_published_size():
    assert ARCHITECTURES["Qwen/Qwen2.5-Coder-7B-Instruct"].params == pytest.approx(7.62e9, rel=0.01)
    assert ARCHITECTURES["Qwen/Qwen2.5-1.5B-Instruct"].params == pytest.approx(1.54e9, rel=0.01)
    assert ARCHITECTURES["Qwen/Qwen2.5-32B-Instruct"].params == pytest.approx(32.8e9, rel=0.02)
