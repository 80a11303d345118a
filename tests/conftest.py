"""Shared fixtures: real servers (moto, etcd) started once per session; see tests/support/."""

pytest_plugins = ["tests.support.moto", "tests.support.etcd"]
