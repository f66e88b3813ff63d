"""The study's records: its storage, what each trial stored and told Optuna, the held parameters, the series of nights, and which config is the fastest stable one."""
