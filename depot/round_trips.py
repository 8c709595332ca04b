"""Round trips to the peer depots: every ``rtt_interval`` the depot times a small request to each of its
``weather_peers`` (and, registered in a directory, to the other depots registered there:
``lnet.depot.directory_link``), and ``/v1/status`` reports the figures (``round_trips``). A client ranks the
depot-to-depot edges it has not measured by them (a stream's rate falls with its round trip: docs/scheduler.md,
"Cold scouts").

One measurement: two ``HEAD /healthz`` requests back to back on one connection; the second is timed (the first
may open the connection, and with TLS its handshake), so the figure is one round trip and the peer's answer to
a request that does no work. Each request is bounded by ``copy_timeout``. It costs a few hundred bytes a peer
a round, so it needs no byte budget: the weather probes' budget (``weather_bytes_per_hour``) bounds only their
pushes, and round trips are timed even when those are off. A peer that does not answer is counted in its entry
(``failures``, ``error``) and logged at debug level; nothing a peer does can stop the depot.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import httpx
import trio

from lnet.protocol import describe_error

__all__ = ["MAX_PEERS", "PEERS_AT_ONCE", "PER_PEER", "RoundTripLog", "RoundTrips", "in_rounds"]

log = logging.getLogger("lnet.depot.round_trips")

PEERS_AT_ONCE = 16
"""Peers timed at once in a round: a depot with many peers opens at most this many connections for it."""


PER_PEER = 64
"""Round trips (and failures) kept a peer: the newest, within the window."""
MAX_PEERS = 1024
"""Peers kept at most; the one heard from least recently goes first."""


@dataclass
class _Peer:
    times: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=PER_PEER))
    """(when, seconds) of the newest round trips."""
    failures: deque[float] = field(default_factory=lambda: deque(maxlen=PER_PEER))
    error: str | None = None


class RoundTripLog:
    """The round trips timed to each peer over the last ``window`` seconds, the newest ``PER_PEER`` a peer, for at
    most ``MAX_PEERS`` peers (pure: the caller passes ``now``)."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._peers: OrderedDict[str, _Peer] = OrderedDict()

    def record(self, peer: str, seconds: float, now: float) -> None:
        self._entry(peer).times.append((now, seconds))

    def failed(self, peer: str, error: str, now: float) -> None:
        entry = self._entry(peer)
        entry.failures.append(now)
        entry.error = error[:300]

    def _entry(self, peer: str) -> _Peer:
        entry = self._peers.get(peer)
        if entry is None:
            entry = self._peers[peer] = _Peer()
            while len(self._peers) > MAX_PEERS:
                self._peers.popitem(last=False)
        self._peers.move_to_end(peer)
        return entry

    def summary(self, now: float) -> list[dict[str, Any]]:
        """One entry per peer heard from or failed in the window, by URL: the smallest round trip in it (queues
        only ever add to one), how many were timed, the newest one's age, and the failures."""
        horizon = now - self.window
        out = []
        for url in sorted(self._peers):
            entry = self._peers[url]
            while entry.times and entry.times[0][0] < horizon:
                entry.times.popleft()
            while entry.failures and entry.failures[0] < horizon:
                entry.failures.popleft()
            if not entry.times and not entry.failures:
                del self._peers[url]
                continue
            newest = entry.times[-1][0] if entry.times else None
            out.append({
                "to": url,
                "rtt_ms": min(seconds for _, seconds in entry.times) * 1000 if entry.times else None,
                "count": len(entry.times),
                "age_s": None if newest is None else max(0.0, now - newest),
                "failures": len(entry.failures),
                "error": entry.error if entry.failures else None,
            })
        return out


async def in_rounds(
    round_: Callable[[httpx.AsyncClient], Awaitable[None]], interval: float, *, connections: int, wait_s: float,
    transport: httpx.AsyncBaseTransport | None,
) -> NoReturn:
    """Run ``round_`` every ``interval`` seconds (from one round's start to the next's) until cancelled, with an
    HTTP client of its own: at most ``connections`` connections, every network wait bounded by ``wait_s``; a
    depot's background work towards its peers (these round trips, the weather probes)."""
    async with httpx.AsyncClient(
        transport=transport,
        timeout=httpx.Timeout(wait_s),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        follow_redirects=False,
        trust_env=False,
    ) as http:
        while True:
            started = trio.current_time()
            await round_(http)
            await trio.sleep_until(started + interval)


class RoundTrips:
    """The background task that times the round trip to each peer every ``interval`` seconds."""

    def __init__(
        self, peers: Callable[[], Sequence[str]], log_: RoundTripLog, clock: Callable[[], float], *, interval: float,
        timeout: float, transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``peers``: the peers' base URLs, asked anew each round (the weather peers, and with a directory the
        depots registered there); ``clock``: the depot's, which dates the entries (``/v1/status`` reads them by
        it)."""
        self.peers = peers
        self.log = log_
        self.clock = clock
        self.interval = interval
        self.timeout = timeout
        self.transport = transport

    async def run(self) -> None:
        """Round after round until cancelled (with the depot)."""
        await in_rounds(self.round, self.interval, connections=PEERS_AT_ONCE, wait_s=self.timeout,
                        transport=self.transport)

    async def round(self, http: httpx.AsyncClient) -> None:
        """Time every peer, at most ``PEERS_AT_ONCE`` at once."""
        limiter = trio.CapacityLimiter(PEERS_AT_ONCE)

        async def one(url: str) -> None:
            async with limiter:
                await self.time(http, url)

        async with trio.open_nursery() as nursery:
            for url in self.peers():
                nursery.start_soon(one, url)

    async def time(self, http: httpx.AsyncClient, url: str) -> None:
        target = url.rstrip("/") + "/healthz"
        try:
            with trio.fail_after(2 * self.timeout):  # both requests; httpx bounds each network wait too
                (await http.head(target)).raise_for_status()  # opens the connection (and TLS)
                began = trio.current_time()
                (await http.head(target)).raise_for_status()
                seconds = trio.current_time() - began
        except (httpx.HTTPError, trio.TooSlowError, OSError) as exc:
            error = "timed out" if isinstance(exc, trio.TooSlowError) else describe_error(exc)
            log.debug("round trip to %s: %s", url, error)
            self.log.failed(url, error, self.clock())
            return
        self.log.record(url, seconds, self.clock())
