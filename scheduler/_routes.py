"""Which overlay hops run over the same physical links, guessed from round trips (theory of operation, 17, in
``lnet.scheduler``'s docstring).

A depot that sits on the route between two others adds nothing to its round trip: ``rtt(u, w) + rtt(w, v)`` is
``rtt(u, v)``, give or take the hosts' own time, where a depot off the route adds the detour. So the round trips
the loop already has (the client's to every depot, and the depots' to their peers) say which vertices a hop
passes, in order. Two hops that pass two of the same vertices in the same order cross the links between them
both: a path that would use one beside a path of the set using the other shares that stretch with it, and what
the two carry together is not what each carries alone. The issue behind it: a warm start ran direct beside
``src -> d1 -> d4 -> dst``, whose last hop is routed over the src-dst link, and direct fell to half its rate.

Pure: no clock, no I/O. A pair without a round trip passes nothing but its ends (no guess, no exclusion).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import networkx as nx

from ._memory import Edge
from ._widest import THROUGHPUT, edges_of

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

    def shared_edges(self, paths: Iterable[Sequence[str]], edges: Iterable[Edge]) -> set[Edge]:
        """Those of ``edges`` that share a stretch of route with a hop of ``paths``."""
        hops = [hop for path in paths for hop in edges_of(path)]
        return {edge for edge in edges if any(self.shares(edge, hop) for hop in hops)}

    def beside(self, graph: nx.DiGraph, paths: Sequence[Sequence[str]]) -> nx.DiGraph:
        """``graph`` as a path joining ``paths`` would share it: each measured edge whose route runs over the links
        of ``k`` of the paths weighed at 1 / (k + 1) of its weight, its share where that stretch is the narrowest of
        them all (streams share a link about evenly). A path off the set's links keeps its whole weight, so between
        two alike the one apart from the set is taken, and one over the set's links joins only if its share adds
        the margin. What it really adds, its trial measures (``PathSet.judge_trial``)."""
        hops: dict[Edge, int] = {hop: i for i, path in enumerate(paths) for hop in edges_of(path)}
        shared = graph.copy()
        for u, v, attrs in graph.edges(data=True):
            weight = attrs.get(THROUGHPUT)
            if weight is None or (u, v) in hops:
                continue
            crossed = {i for hop, i in hops.items() if self.shares((u, v), hop)}
            if crossed:
                shared.edges[u, v][THROUGHPUT] = weight / (1 + len(crossed))
        return shared
