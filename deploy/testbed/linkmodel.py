"""What one direction of an emulated link does to a packet: a pure model, given `now` and a random source.

A packet arriving at `now` waits behind the bytes already queued (rate serialisation), is tail-dropped when that
wait would exceed the queue bound, may be lost on the wire, and arrives `delay` (plus jitter) after its last bit
left. Deliveries within one direction never overtake each other: jitter only stretches gaps, as a real
serial link does (netem, by contrast, reorders under jitter unless told otherwise).

No I/O and no clock here; `emulator.py` feeds it packets and acts on what it returns.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .topology import Link

__all__ = ["DirectionStats", "LinkDirection"]


@dataclass
class DirectionStats:
    packets: int = 0  # offered to this direction
    bytes: int = 0  # delivered
    delivered: int = 0
    tail_drops: int = 0
    random_drops: int = 0


class LinkDirection:
    """One direction of a link. `admit(now, size)` returns the delivery time, or None for a dropped packet."""

    def __init__(self, link: Link, rng: random.Random) -> None:
        self.rng = rng
        self.stats = DirectionStats()
        self.free_at = 0.0  # when the transmitter finishes the last queued packet
        self.last_delivery = 0.0
        self.configure(link)

    def configure(self, link: Link) -> None:
        """Change the parameters; packets already admitted keep the times they were given."""
        self.link = link
        self.delay_s = link.delay_ms / 1000.0
        self.jitter_s = link.jitter_ms / 1000.0
        self.loss = link.loss
        self.queue_s = link.effective_queue_ms / 1000.0
        self.seconds_per_byte = 8.0 / (link.rate_mbit * 1e6) if link.rate_mbit else 0.0

    def admit(self, now: float, size: int) -> float | None:
        stats = self.stats
        stats.packets += 1
        start = self.free_at if self.free_at > now else now
        if start - now > self.queue_s:
            stats.tail_drops += 1
            return None
        done = start + size * self.seconds_per_byte
        self.free_at = done
        if self.loss and self.rng.random() < self.loss:
            stats.random_drops += 1
            return None
        at = done + self.delay_s
        if self.jitter_s:
            at += self.rng.uniform(-self.jitter_s, self.jitter_s)
        if at < self.last_delivery:
            at = self.last_delivery
        self.last_delivery = at
        stats.delivered += 1
        stats.bytes += size
        return at
