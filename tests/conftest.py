"""Shared fixtures: real servers (moto, etcd) and one local Spark, each started once per session."""

pytest_plugins = [
    "tests.support.moto",
    "tests.support.etcd",
    "tests.support.checkpoints",
    "tests.support.spark_job",
]
