"""Built-in and user search spaces (YAML), loaded and validated with OmegaConf."""
