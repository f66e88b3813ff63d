"""The twin as legacy SkyRL: ``python -m twin.skyrl_train.entrypoints.main_base key=value ...``
stands for ``python -m skyrl_train.entrypoints.main_base`` (Hydra over ``ppo_base_config.yaml``,
no step cap, worker output on the driver's stdout). See ``twin/README.md``."""

from twin.layout import Layout

if __name__ == "__main__":
    from twin.driver import entry

    entry(Layout.LEGACY)
