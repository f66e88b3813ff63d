"""The twin as today's SkyRL: ``python -m nccl_tune.sim.skyrl.train.entrypoints.main_base key=value ...``
stands for ``python -m skyrl.train.entrypoints.main_base`` (dataclass configs,
``generator.inference_engine.*`` keys, ``trainer.max_training_steps``, worker output in
``{trainer.log_path}/infra-*.log``). See ``nccl_tune/sim/README.md``."""

from nccl_tune.sim.layout import Layout

if __name__ == "__main__":
    from nccl_tune.sim.driver import entry

    entry(Layout.TODAY)
