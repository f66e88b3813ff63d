"""The twin as today's SkyRL: ``python -m twin.skyrl.train.entrypoints.main_base key=value ...``
stands for ``python -m skyrl.train.entrypoints.main_base`` (dataclass configs,
``generator.inference_engine.*`` keys, ``trainer.max_training_steps``, worker output in
``{trainer.log_path}/infra-*.log``). See ``twin/README.md``."""

from twin.layout import Layout

if __name__ == "__main__":
    from twin.driver import entry

    entry(Layout.TODAY)
