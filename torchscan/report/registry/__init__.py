"""The registry (``models.toml``): read, checked and turned into runs, without importing or running a model."""
