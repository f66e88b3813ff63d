"""The synthetic twin of SkyRL text-to-SQL on one 8xH100 node (a test fixture and a demo).

Two ways to use it:

- the program, ``python -m nccl_tune.sim.main_base key=value ...`` (or
  ``bash examples/run_skyrl_sql_sim.sh``): real processes in a real gloo group, SkyRL's log lines,
  failures as a real node shows them;
- in process, for benchmarks::

      from nccl_tune.sim import parse_overrides, evaluate
      cfg = parse_overrides(["trainer.micro_train_batch_size_per_gpu=4", *skyrl_sql_overrides()], env)
      out = evaluate(cfg, seed=1)
      out.step_s, out.peak_mem_gib, out.failure

  and ``nccl_tune.sim.launcher.ModelLauncher`` runs a whole study against the model.
"""

from nccl_tune.sim.config import DEFAULT_TIME_SCALE, RunEnv, SimConfig, parse_overrides
from nccl_tune.sim.evaluate import Outcome, PhaseSpan, SimFailure, StepRecord, evaluate
from nccl_tune.sim.refusal import SimConfigError
from nccl_tune.sim.script import skyrl_sql_overrides

__all__ = [
    "DEFAULT_TIME_SCALE",
    "Outcome",
    "PhaseSpan",
    "RunEnv",
    "SimConfig",
    "SimConfigError",
    "SimFailure",
    "StepRecord",
    "evaluate",
    "parse_overrides",
    "skyrl_sql_overrides",
]
