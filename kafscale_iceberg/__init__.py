"""KafScale segments -> Apache Iceberg, exactly once."""

__version__ = "0.1.0"
