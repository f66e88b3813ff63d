"""Mirror of ``skyrl_train.entrypoints``."""
