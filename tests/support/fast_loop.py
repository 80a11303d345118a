"""`make test-fast` (`pytest -m "not slow"`): the tests that need no JVM, linter or subprocess.

`slow` marks a test that starts a JVM (local Spark), a linter, or any other process (the CLI, `make`,
a fresh interpreter). The real servers the session fixtures start (etcd) do not count. Tests using a
JVM fixture are marked here, at collection; the others carry the mark themselves, and in the fast
loop a test whose body starts a process unmarked fails, naming the process, so the marks stay exact.
"""

from __future__ import annotations

import subprocess
from collections.abc import Generator
from typing import Any

import pytest

# Fixtures that start a JVM (local Spark): a test using one, directly or through another fixture,
# is `slow`.
JVM_FIXTURES = frozenset({"spark"})
FAST_LOOP_MARKEXPR = "not slow"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests using a JVM fixture `slow`, before `-m` selects (tryfirst)."""
    for item in items:
        if JVM_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    """In the fast loop, fail a test not marked slow whose body starts a process."""
    if item.config.getoption("markexpr") != FAST_LOOP_MARKEXPR or item.get_closest_marker("slow"):
        return (yield)
    started: list[str] = []
    original = subprocess.Popen.__init__

    def recording(self: subprocess.Popen[Any], args: Any, *rest: Any, **options: Any) -> None:
        argv = args if isinstance(args, list | tuple) else [args]
        started.append(" ".join(str(part) for part in argv)[:200])
        original(self, args, *rest, **options)

    subprocess.Popen.__init__ = recording  # type: ignore[method-assign]
    try:
        result = yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]
    if started:
        pytest.fail(
            f"this test starts a process ({started[0]}) but is not marked slow: `make test-fast` runs no "
            "JVM, linter or subprocess; mark it @pytest.mark.slow",
            pytrace=False,
        )
    return result
