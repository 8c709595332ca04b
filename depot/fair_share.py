"""Fair shares of a depot: request places per client address, and the pace every body must keep.

Theory of operation. A depot serves at most ``max_concurrent_requests`` requests at once; a request holds its
place (and, for a read or write, the allocation's buffer) until its body has moved. Two rules keep a few clients
from holding every place:

- **Places per client.** At most ``max_requests_per_client`` of them go to one client address (``client_key``: an
  IPv4 address, or an IPv6 /64, the block one host or one site is usually given, so that a host cannot take a
  fresh share with each of its 2^64 addresses). A request beyond its client's share is refused at once (``429``)
  while other clients are served; beyond all places, ``503``.
- **The pace of a body.** A body (a write's or a control body coming in, a read's going out, a copy's push) may
  take ``grace_s`` to get going (TCP's slow start, a busy client); from then on the bytes it moved since it
  began must keep up with ``min_bytes_per_second``: after ``t`` seconds at least ``(t - grace_s) x
  min_bytes_per_second`` of them. Put the other way, the next byte is due by ``deadline(started, moved)`` =
  ``started + grace_s + moved / min_bytes_per_second``, and a body of ``length`` bytes is done by
  ``deadline(started, length)``, its total deadline, which grows with its size. A body that falls behind is cut
  (a read's connection closed, a write answered ``408``, a copy ``502``). This is Apache's mod_reqtimeout
  ``MinRate`` rule: bytes moved early count later, so a path that stalls for a while after a good start is not
  cut for it, and the total deadline still bounds it.

Each wait for bytes stays bounded on its own by ``read_timeout`` as well: the pace is an addition.

A pure engine: no trio, no clock, no sockets. The depot's shell (``app.py``, ``direct.py``) passes the times.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from dataclasses import dataclass

__all__ = ["BodyPace", "BodyTimer", "ClientShares", "client_key"]


def client_key(host: str | None) -> str:
    """The share a client address counts against: an IPv4 address as it is (an IPv4-mapped IPv6 address as its
    IPv4 address), an IPv6 address as its /64; anything else (no address, a Unix socket) as it is given."""
    if not host:
        return "-"
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])  # a scope (fe80::1%eth0) names no other host
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class ClientShares:
    """Requests in progress per client key, at most ``per_client`` each."""

    def __init__(self, per_client: int) -> None:
        if per_client < 1:
            raise ValueError("per_client must be at least 1")
        self.per_client = per_client
        self._held: Counter[str] = Counter()

    def enter(self, key: str) -> bool:
        """Take a place for ``key``'s request; False (and nothing taken) when its share is used up."""
        if self._held[key] >= self.per_client:
            return False
        self._held[key] += 1
        return True

    def leave(self, key: str) -> None:
        """Give back a place ``enter`` gave."""
        self._held[key] -= 1
        if self._held[key] <= 0:
            del self._held[key]

    def held(self, key: str) -> int:
        return self._held.get(key, 0)

    @property
    def clients(self) -> int:
        """Client keys with a request in progress."""
        return len(self._held)


@dataclass(frozen=True)
class BodyPace:
    """The pace a body must keep: ``min_bytes_per_second`` on average once ``grace_s`` has passed."""

    min_bytes_per_second: float
    grace_s: float

    def __post_init__(self) -> None:
        if self.min_bytes_per_second <= 0 or self.grace_s < 0:
            raise ValueError("a pace needs a positive rate and a grace of 0 or more")

    def deadline(self, started: float, moved: int) -> float:
        """When the body's next byte is due, ``moved`` bytes after it began at ``started``; for ``moved`` = its
        length, when it must be done."""
        return started + self.grace_s + moved / self.min_bytes_per_second

    def timer(self, started: float) -> BodyTimer:
        return BodyTimer(self, started)


@dataclass
class BodyTimer:
    """One body's clock: when it began. ``deadline(moved)`` is the pace's, for this body."""

    pace: BodyPace
    started: float

    def deadline(self, moved: int) -> float:
        return self.pace.deadline(self.started, moved)

    def rate(self, moved: int, now: float) -> float:
        """The body's average rate so far (bytes per second), for messages."""
        return moved / max(now - self.started, 1e-9)
