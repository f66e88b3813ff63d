"""The search: the default sampler and the memory, throughput and failure models it learns from every trial."""
