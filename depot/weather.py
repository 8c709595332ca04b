"""Network weather: what a depot learnt of its links to peers, in figures a scheduler can compare and trust.

Every push this depot makes to a peer (a copy for a client, or a background probe) is one ``PushSample``: the
bytes, the seconds of that one push (so bytes / seconds is a per-stream rate, whatever else ran at the same time),
how many pushes to that peer were running when it started, and, where the kernel tells, the connection's round
trip and retransmissions. ``LinkLog`` keeps the recent samples per peer and source ("copy" or "probe", kept as
separate entries so that a reader can trust one and not the other) and sums them up for ``/v1/status``.
``HourlyBudget`` bounds what the probes may send. ``parse_tcp_info`` reads Linux's ``struct tcp_info``.

Pure: no trio, no sockets, no clock; callers pass ``now``.
"""

from __future__ import annotations

import statistics
import struct
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["HourlyBudget", "LinkLog", "PushSample", "Source", "TcpInfo", "parse_tcp_info"]

Source = Literal["copy", "probe"]
HOUR = 3600.0
_MAX_ERROR = 300  # characters of an error's text kept per entry

# ``struct tcp_info`` of linux/tcp.h, stable since 2.6 (fields are only ever appended): eight u8 fields, then u32s.
# The offsets below are its byte offsets; 104 bytes reach through tcpi_total_retrans.
TCP_INFO_LENGTH = 104
_TCPI_RTT = 68  # smoothed round trip, microseconds
_TCPI_TOTAL_RETRANS = 100  # segments retransmitted over the connection's life


@dataclass(frozen=True)
class TcpInfo:
    rtt_us: int
    total_retrans: int


def parse_tcp_info(raw: bytes) -> TcpInfo | None:
    """The round trip and retransmission count from ``getsockopt(IPPROTO_TCP, TCP_INFO, 104)``; None if short."""
    if len(raw) < TCP_INFO_LENGTH:
        return None
    (rtt_us,) = struct.unpack_from("=I", raw, _TCPI_RTT)
    (total_retrans,) = struct.unpack_from("=I", raw, _TCPI_TOTAL_RETRANS)
    return TcpInfo(rtt_us, total_retrans)


@dataclass(frozen=True)
class PushSample:
    """One push to a peer. ``streams`` counts the pushes to that peer running when it started, itself included;
    ``rtt_us`` and ``retrans`` (segments retransmitted during the push) are None when the kernel was not asked."""

    at: float
    nbytes: int
    seconds: float
    streams: int = 1
    rtt_us: int | None = None
    retrans: int | None = None


@dataclass(eq=False)
class _Link:
    samples: deque[PushSample]
    failures: deque[float]
    error: str | None = None
    error_at: float | None = None


@dataclass
class LinkLog:
    """Recent pushes to each peer, by source: the network weather ``/v1/status`` reports as ``links``.

    Bounded: ``per_link`` samples and failures per entry, ``max_links`` entries (the least recently updated goes
    first: a client may name any host as a copy target, and failed copies are recorded too)."""

    window: float
    per_link: int = 256
    max_links: int = 512
    _links: OrderedDict[tuple[str, str], _Link] = field(default_factory=OrderedDict)

    def record(self, peer: str, source: Source, sample: PushSample) -> None:
        self._entry(peer, source).samples.append(sample)

    def record_failure(self, peer: str, source: Source, error: str, now: float) -> None:
        link = self._entry(peer, source)
        link.failures.append(now)
        link.error, link.error_at = error[:_MAX_ERROR], now

    def _entry(self, peer: str, source: str) -> _Link:
        key = (peer, source)
        link = self._links.get(key)
        if link is None:
            link = self._links[key] = _Link(deque(maxlen=self.per_link), deque(maxlen=self.per_link))
            while len(self._links) > self.max_links:
                self._links.popitem(last=False)
        self._links.move_to_end(key)
        return link

    def summary(self, now: float) -> list[dict[str, Any]]:
        """One entry per (peer, source) with samples or failures in the window, sorted by peer then source."""
        out = []
        horizon = now - self.window
        for key in sorted(self._links, key=lambda k: (k[0], k[1])):
            link = self._links[key]
            while link.samples and link.samples[0].at < horizon:
                link.samples.popleft()
            while link.failures and link.failures[0] < horizon:
                link.failures.popleft()
            if not link.samples and not link.failures:
                del self._links[key]
                continue
            out.append(_summarise(key[0], key[1], link, now))
        return out


def _summarise(peer: str, source: str, link: _Link, now: float) -> dict[str, Any]:
    samples = link.samples
    nbytes = sum(s.nbytes for s in samples)
    seconds = sum(s.seconds for s in samples)
    rtts = [s.rtt_us for s in samples if s.rtt_us is not None]
    retrans = [s.retrans for s in samples if s.retrans is not None]
    at = samples[-1].at if samples else None
    failed = bool(link.failures)
    return {
        "to": peer,
        "source": source,
        "bytes": nbytes,
        "seconds": seconds,
        "mbps": nbytes * 8 / seconds / 1e6 if seconds > 0 else 0.0,
        "count": len(samples),
        "at": at,
        "age_s": max(0.0, now - at) if at is not None else None,
        "streams": statistics.fmean(s.streams for s in samples) if samples else 0.0,
        "block_bytes": statistics.median_low(s.nbytes for s in samples) if samples else 0,
        "rtt_ms": min(rtts) / 1000 if rtts else None,
        "retrans": sum(retrans) if retrans else None,
        "failures": len(link.failures),
        "error": link.error if failed else None,
        "error_at": link.error_at if failed else None,
    }


@dataclass
class HourlyBudget:
    """At most ``limit`` bytes in any ``period`` (an hour): a sliding log of what was spent, strict.

    (A token bucket holding an hour's budget would let a full bucket go at once and then refill: up to twice the
    budget within one hour. The log keeps one entry per spend, a handful per interval.)"""

    limit: int
    period: float = HOUR
    _spent: deque[tuple[float, int]] = field(default_factory=deque)

    def spent(self, now: float) -> int:
        """Bytes spent in the period up to ``now``."""
        while self._spent and self._spent[0][0] < now - self.period:  # the hour is closed at both ends
            self._spent.popleft()
        return sum(n for _, n in self._spent)

    def allows(self, nbytes: int, now: float) -> bool:
        return self.spent(now) + nbytes <= self.limit

    def spend(self, nbytes: int, now: float) -> bool:
        """Spend ``nbytes`` now if that keeps within the limit; False (and nothing spent) if not."""
        if not self.allows(nbytes, now):
            return False
        self._spent.append((now, nbytes))
        return True
