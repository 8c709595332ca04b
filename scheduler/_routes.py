"""Which overlay hops run over the same physical links, guessed from round trips (theory of operation, 17, in
``lnet.scheduler``'s docstring).

A depot that sits on the route between two others adds nothing to its round trip: ``rtt(u, w) + rtt(w, v)`` is
``rtt(u, v)``, give or take the hosts' own time, where a depot off the route adds the detour. So the round trips
the loop already has (the client's to every depot, and the depots' to their peers) say which vertices a hop
passes, in order. Two hops that pass two of the same vertices in the same order cross the links between them both.

What it is used for: when newcomers that joined the set together are judged and the paths that were there lost
rate, the loss is theirs that cross those paths' links (``_paths.taken_shares``). Whether a shared link is full
the round trips cannot say (a link one path's streams do not fill is shared at no cost): only the trial's
measurement decides that a newcomer took rate, and never this guess alone (docs/decisions/0021).

Pure: no clock, no I/O. A pair without a round trip passes nothing but its ends (no guess).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ._memory import Edge
from ._widest import edges_of

__all__ = ["ROUTE_SLACK", "ROUTE_SLACK_S", "RouteGuess"]

ROUTE_SLACK_S = 0.004
"""A vertex is on a hop's route when going through it adds at most this (seconds) to the hop's round trip, plus
``ROUTE_SLACK`` of it. Every measured round trip carries the hosts' own time, 1.5-3.3 ms on the testbed (its
median 2.2 ms over the links' delays): the sum of two carries one more than the hop's own."""
ROUTE_SLACK = 0.02
"""The part of a hop's round trip its measurement may vary by (queues on the way)."""


class RouteGuess:
    """The vertices each hop passes, from round trips: ``rtt_s`` from ``src`` to each vertex (the client's),
    ``peer_rtt_s`` between other pairs (either way round, as depots timed them)."""

    def __init__(
        self,
        src: str,
        rtt_s: Mapping[str, float],
        peer_rtt_s: Mapping[Edge, float],
        *,
        slack_s: float = ROUTE_SLACK_S,
        slack: float = ROUTE_SLACK,
    ) -> None:
        self.src = src
        self.rtt_s = rtt_s
        self.peer_rtt_s = peer_rtt_s
        self.slack_s = slack_s
        self.slack = slack
        self._vertices = sorted({src, *rtt_s, *(v for edge in peer_rtt_s for v in edge)})
        self._via: dict[Edge, dict[str, float]] = {}

    def rtt(self, u: str, v: str) -> float | None:
        """The measured round trip between ``u`` and ``v`` (either way round), or None."""
        if u == v:
            return 0.0
        if u == self.src:
            return self.rtt_s.get(v)
        if v == self.src:
            return self.rtt_s.get(u)
        return self.peer_rtt_s.get((u, v), self.peer_rtt_s.get((v, u)))

    def via(self, u: str, v: str) -> dict[str, float]:
        """The vertices the hop ``u -> v`` passes, its ends included, each with its round trip from ``u`` (their
        order along the route)."""
        edge = (u, v)
        if edge not in self._via:
            on: dict[str, float] = {u: 0.0}
            whole = self.rtt(u, v)
            if whole is not None:
                on[v] = whole
                limit = whole * (1 + self.slack) + self.slack_s
                for w in self._vertices:
                    if w in on:
                        continue
                    to_w, from_w = self.rtt(u, w), self.rtt(w, v)
                    if to_w is not None and from_w is not None and to_w + from_w <= limit:
                        on[w] = to_w
            self._via[edge] = on
        return self._via[edge]

    def shares(self, one: Edge, other: Edge) -> bool:
        """Whether two hops pass two vertices in the same order: they cross the links between them both. Hops in
        opposite directions share no link's direction."""
        if one == other:
            return True
        a, b = self.via(*one), self.via(*other)
        common = [w for w in a if w in b]
        for i, x in enumerate(common):
            for y in common[i + 1:]:
                if (a[x] < a[y]) == (b[x] < b[y]):
                    return True
        return False

    def crosses(self, path: Sequence[str], paths: Iterable[Sequence[str]]) -> bool:
        """Whether a hop of ``path`` shares a stretch of route with a hop of ``paths``."""
        hops = [hop for other in paths for hop in edges_of(other)]
        return any(self.shares(edge, hop) for edge in edges_of(path) for hop in hops)
