"""The synthetic twin of SkyRL text-to-SQL on one 8xH100 node (a test fixture and a demo).

Two ways to use it:

- the program, ``python -m twin.skyrl.train.entrypoints.main_base key=value ...`` (today's
  SkyRL; ``bash examples/run_skyrl_sql_sim.sh``) or ``python -m
  twin.skyrl_train.entrypoints.main_base`` (the legacy layout;
  ``bash examples/run_skyrl_sql_sim_legacy.sh``): real processes in a real gloo group, SkyRL's log
  lines, failures as a real node shows them;
- in process, for benchmarks::

      from twin import parse_overrides, evaluate
      cfg = parse_overrides([*skyrl_sql_overrides(), "trainer.micro_train_batch_size_per_gpu=4"], env)  # Layout.TODAY
      out = evaluate(cfg, seed=1)
      out.step_s, out.peak_mem_gib, out.failure

  and ``twin.launcher.ModelLauncher`` runs a whole study against the model.
"""

from twin.config import DEFAULT_TIME_SCALE, RunEnv, SimConfig, parse_overrides
from twin.evaluate import Outcome, PhaseSpan, SimFailure, StepRecord, evaluate
from twin.layout import Layout
from twin.refusal import SimConfigError
from twin.script import skyrl_sql_overrides

__all__ = [
    "DEFAULT_TIME_SCALE",
    "Layout",
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
