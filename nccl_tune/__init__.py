"""nccl-tune: tune distributed LLM training commands for speed and stability."""

__version__ = "0.1.0"
