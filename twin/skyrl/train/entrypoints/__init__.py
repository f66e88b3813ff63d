"""Mirror of ``skyrl.train.entrypoints``."""
