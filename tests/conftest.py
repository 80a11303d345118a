"""Shared fixtures: real servers (moto, etcd) and one local Spark, each started once per session.

`tests/support/fast_loop.py` marks the tests using local Spark `slow` and keeps `make test-fast`
free of JVMs, linters, subprocesses and traffic off the machine.
"""

pytest_plugins = [
    "pytester",
    "tests.support.moto",
    "tests.support.localstack",
    "tests.support.etcd",
    "tests.support.checkpoints",
    "tests.support.spark_job",
    "tests.support.fast_loop",
    "tests.support.schema_registry",
    "tests.support.aws_box",
    "tests.support.glue_registry",
]
