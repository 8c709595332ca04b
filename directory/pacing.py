"""How often the directory is asked: retry backoff, and the bound on how often an entry is rewritten.

Pure: no clock, no randomness of its own (``now`` and a jitter fraction come from the caller).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Backoff", "RewritePacer"]


@dataclass
class Backoff:
    """Exponential backoff with jitter: ``first_s``, doubling to at most ``most_s``; ``reset`` after a success.

    ``next_delay(jitter)`` takes a fraction in [0, 1) from the caller and spreads the delay over
    [delay / 2, delay): 300 depots that lost the directory together do not all come back in one instant."""

    first_s: float = 1.0
    most_s: float = 30.0
    failures: int = 0

    def next_delay(self, jitter: float) -> float:
        delay = min(self.most_s, self.first_s * 2.0 ** min(self.failures, 30))
        self.failures += 1
        return delay * (0.5 + 0.5 * min(max(jitter, 0.0), 1.0))

    def reset(self) -> None:
        self.failures = 0


@dataclass
class RewritePacer:
    """Decides when an entry is written again: never sooner than ``min_interval_s`` after the last write,
    and at once after that when what it says changed; at least every ``refresh_s`` even when nothing did (so a
    reader can tell a live entry's age), but never for a change of the time alone sooner than that."""

    min_interval_s: float = 10.0
    refresh_s: float = 300.0
    last_write: float | None = None
    writes: int = 0

    def due(self, now: float, changed: bool) -> bool:
        if self.last_write is None:
            return True
        since = now - self.last_write
        if since >= self.refresh_s:
            return True
        return changed and since >= self.min_interval_s

    def wait_s(self, now: float, changed: bool) -> float:
        """Seconds until ``due`` would say yes, if nothing else changes."""
        if self.last_write is None:
            return 0.0
        since = now - self.last_write
        target = self.min_interval_s if changed else self.refresh_s
        return max(0.0, target - since)

    def wrote(self, now: float) -> None:
        self.last_write = now
        self.writes += 1

    def forget(self) -> None:
        """The entry is gone (its lease expired): the next write is due at once."""
        self.last_write = None
