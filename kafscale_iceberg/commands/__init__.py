"""Top-level `kafscale-iceberg` commands, one module each (registered in `kafscale_iceberg.cli`)."""
