"""What the twin runs on and what it trains: the node's GPU count and the models' transformer shapes.

``config.py`` checks a config against them (``SIM_RANKS``, ``trainer.policy.model.path``) and keeps the
model's :class:`Architecture` in its ``SimConfig``; ``cost_model.py`` turns that shape into time and
memory. Shapes come from each model's Hugging Face ``config.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

GPUS_PER_NODE = 8
"""An HGX H100 SXM5 board: 8 GPUs on NVSwitch (the rest of the node is in ``cost_model.py``)."""

# --------------------------------------------------------------------------------------------
# Models (Hugging Face configs of the Qwen2.5 family; SkyRL's text-to-SQL example trains
# Qwen/Qwen2.5-Coder-7B-Instruct)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Architecture:
    """A decoder-only transformer's shape (the numbers in its Hugging Face ``config.json``)."""

    name: str
    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied_embeddings: bool

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def layer_params(self) -> int:
        kv = self.kv_heads * self.head_dim
        attn = self.hidden * self.hidden * 2 + 2 * self.hidden * kv + self.hidden + 2 * kv  # q,o + k,v + qkv biases
        mlp = 3 * self.hidden * self.intermediate
        return attn + mlp + 2 * self.hidden

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        heads = 1 if self.tied_embeddings else 2
        return self.layers * self.layer_params + heads * self.embedding_params + self.hidden

    @property
    def tensors(self) -> int:
        """Parameter tensors (weights sync sends one message each)."""
        return 12 * self.layers + (2 if self.tied_embeddings else 3)


def _qwen(
    size: str, hidden: int, layers: int, inter: int, heads: int, kv: int, vocab: int, tied: bool
) -> list[Architecture]:
    return [
        Architecture(f"Qwen/Qwen2.5-{size}-Instruct", hidden, layers, inter, heads, kv, vocab, tied),
        Architecture(f"Qwen/Qwen2.5-Coder-{size}-Instruct", hidden, layers, inter, heads, kv, vocab, tied),
        Architecture(f"Qwen/Qwen2.5-{size}", hidden, layers, inter, heads, kv, vocab, tied),
    ]


ARCHITECTURES: Mapping[str, Architecture] = {
    a.name: a
    for a in (
        *_qwen("0.5B", 896, 24, 4864, 14, 2, 151936, True),
        *_qwen("1.5B", 1536, 28, 8960, 12, 2, 151936, True),
        *_qwen("3B", 2048, 36, 11008, 16, 2, 151936, True),
        *_qwen("7B", 3584, 28, 18944, 28, 4, 152064, False),
        *_qwen("14B", 5120, 48, 13824, 40, 8, 152064, False),
        *_qwen("32B", 5120, 64, 27648, 40, 8, 152064, False),
    )
}
"""Hugging Face ``config.json`` of each model: hidden_size, num_hidden_layers, intermediate_size,
num_attention_heads, num_key_value_heads, vocab_size, tie_word_embeddings (Qwen2.5-Coder shares
the shapes of Qwen2.5 at each size)."""
