"""Unix time for trio programs: the depot's expiry and the scheduler's ``now`` both need wall-clock seconds
(they outlive the process), and tests need them to follow trio's ``MockClock``."""

from __future__ import annotations

import time

import trio

__all__ = ["TrioWallClock"]


class TrioWallClock:
    """Unix time that advances with ``trio.current_time()``, so that a ``MockClock`` drives expiry in tests."""

    def __init__(self) -> None:
        self._offset: float | None = None

    def __call__(self) -> float:
        now = trio.current_time()
        if self._offset is None:
            self._offset = time.time() - now
        return self._offset + now
