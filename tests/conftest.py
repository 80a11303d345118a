"""Shared fixtures: real servers (moto, etcd) and one local Spark, each started once per session.

`tests/support/fast_loop.py` marks the tests using local Spark `slow` and keeps `make test-fast`
free of JVMs, linters, subprocesses and traffic off the machine.
"""

import os

# No test reaches the EC2 instance metadata service. A client built where no credentials are set
# (a test that drives no AWS call) would otherwise ask it, and on a machine without it wait out
# botocore's timeout or, under load, fail: whether it does then depends on which credentials another
# test left in the worker's environment.
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"

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
    "tests.support.seaweedfs",
]
