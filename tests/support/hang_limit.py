"""A time limit for code that may hang inside native code (a Rust or numba loop), where no Python
signal handler runs: past the limit the process prints every thread's stack and exits, so the test
fails (under xdist its worker is reported crashed, naming the test) instead of the suite hanging."""

from __future__ import annotations

import faulthandler
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def hang_limit(seconds: float) -> Iterator[None]:
    """End the process, with its stacks on stderr, if the block runs longer than `seconds`."""
    faulthandler.dump_traceback_later(seconds, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
