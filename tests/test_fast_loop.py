"""`make test-fast`: the `slow` marks are exact - a JVM fixture marks its tests, and a test that starts a
process without the mark fails in the fast loop, as does one that reaches off the machine. The suite
below runs inline (pytester); one of its tests starts a process, so this module is `slow` itself (the
fast loop would refuse it)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

CONFTEST = """
import pytest

pytest_plugins = ["tests.support.fast_loop"]


@pytest.fixture
def spark():
    return "a JVM would start here"
"""

TESTS = """
import socket
import subprocess
import sys

import pytest


def test_pure():
    assert True


def test_uses_the_jvm(spark):
    assert spark


def test_starts_a_process_unmarked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.mark.slow
def test_starts_a_process_marked():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_resolves_a_name_off_the_machine():
    with pytest.raises(OSError):
        socket.getaddrinfo("kafscale-test.invalid", 443)
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\naddopts = --strict-markers -p no:cacheprovider\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=TESTS)
    return pytester


def test_the_fast_loop_leaves_out_jvm_tests_and_fails_an_unmarked_process(suite: pytest.Pytester) -> None:
    result = suite.runpytest_inprocess("-m", "not slow", "-rf")
    result.assert_outcomes(passed=1, failed=2, deselected=2)
    result.stdout.fnmatch_lines(
        [
            "*_ test_starts_a_process_unmarked _*",
            "this test starts a process (*-c pass) but is not marked slow*",
            "*_ test_resolves_a_name_off_the_machine _*",
            "this test connects to kafscale-test.invalid, off this machine*",
        ]
    )


def test_the_whole_suite_runs_every_test_without_the_check(suite: pytest.Pytester) -> None:
    # (without the fast loop's check the name would really be looked up: left out)
    result = suite.runpytest_inprocess("-k", "not off_the_machine")
    result.assert_outcomes(passed=4, deselected=1)
