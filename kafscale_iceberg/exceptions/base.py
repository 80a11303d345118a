"""The root of the hierarchy and the one transient marker."""

from __future__ import annotations

from typing import ClassVar


class KafscaleIcebergError(Exception):
    """Base of every error this package raises on purpose."""

    transient: ClassVar[bool] = False
    """True for `TransientError` and its subclasses only: subclass `TransientError` to say it."""


class TransientError(KafscaleIcebergError):
    """Retrying the same work later may succeed; the state machine retries this name."""

    transient: ClassVar[bool] = True
