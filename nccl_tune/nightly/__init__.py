"""Nightly sweeps: the regression rule, step detection over a series, and the node's fingerprint.

``regression`` and ``changepoint`` are pure (numbers in, verdicts out); ``fingerprint`` reads the
node (NVML, package metadata, the trainer's git checkout) without starting any process.
"""
