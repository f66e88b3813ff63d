"""The twin as legacy SkyRL: ``python -m nccl_tune.sim.skyrl_train.entrypoints.main_base key=value ...``
stands for ``python -m skyrl_train.entrypoints.main_base`` (Hydra over ``ppo_base_config.yaml``,
no step cap, worker output on the driver's stdout). See ``nccl_tune/sim/README.md``."""

from nccl_tune.sim.layout import Layout

if __name__ == "__main__":
    from nccl_tune.sim.driver import entry

    entry(Layout.LEGACY)
