"""The study loop: ask, admit, run and tell; re-runs, budget, recovery after a kill, the nightly plan and the NCCL sweep's run."""
