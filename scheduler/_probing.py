"""Which edges to probe beside the transfer, and what the probes running are: the loop's probe selection
(theory of operation, 10 and 13, in ``lnet.scheduler``'s docstring).

A part of the decision loop, pure like it: ``ProbePlan`` keeps the probes' own state (when each started, what the
set's hops ran at then, which run deep) and reads the rest (the memory, the set, what is verified) from the loop it
belongs to, through ``ProbingLoop`` (the ``PathScheduler`` has it; this module does not import the loop). It never
decides a move; the loop asks it for edges (``choose``) and whether a running probe may still beat a path
(``may_beat``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import networkx as nx

from ._config import SchedulerConfig
from ._memory import Edge, EdgeMemory
from ._paths import Path, adds_enough, set_total
from ._widest import (
    THROUGHPUT,
    NoPathError,
    edges_of,
    has_unknown,
    measured_only,
    path_throughput,
    widest_path,
    widest_widths,
)

__all__ = ["SHARED_DROP", "ProbePlan", "ProbingLoop", "apply_priors", "shares_an_end"]

SHARED_DROP = 0.1
"""How much slower a hop of the path must run while a probe runs for the two to count as sharing a link."""


class ProbingLoop(Protocol):
    """What the probe plan uses of the decision loop (``_loop.PathScheduler`` has it): its settings, ends, memory
    and round trips, the set in use, the graphs it believes, its best measured path, which edges it has not
    verified, and the graph with floors raised to their ceilings."""

    @property
    def config(self) -> SchedulerConfig: ...

    @property
    def src(self) -> str: ...

    @property
    def dst(self) -> str: ...

    @property
    def memory(self) -> EdgeMemory: ...

    @property
    def rtt_s(self) -> Mapping[str, float]: ...

    @property
    def peer_rtt_s(self) -> Mapping[Edge, float]: ...

    @property
    def current_paths(self) -> tuple[Path, ...]: ...

    def graph(self, *, with_aging: bool = True) -> nx.DiGraph: ...

    def best_known(self, graph: nx.DiGraph) -> Path: ...

    def unverified(self, edge: Edge) -> bool: ...

    def with_ceilings(self, graph: nx.DiGraph) -> nx.DiGraph | None: ...


class ProbePlan:
    """The probes of one ``PathScheduler``: which to ask for next, and the ones running."""

    def __init__(self, loop: ProbingLoop) -> None:
        self.loop = loop
        self.since: dict[Edge, float] = {}
        """The probes running, and when each was asked for."""
        self.baseline: dict[Edge, dict[Edge, float]] = {}
        """What the set's hops ran at when each probe started: a hop that slows down while it runs shares a link
        with it."""
        self.shallow: set[Edge] = set()
        """Edges whose latest figure is a one-stream probe's: what more streams would get is not known."""
        self.deep: set[Edge] = set()
        """Edges being probed deep (``Keep.deep``)."""
        self.deepened: set[Edge] = set()
        """Edges probed deep in this transfer: one deep probe each."""
        self.crowded: list[Edge] = []
        """Deep probes that slowed a hop of the set sharing an end with them: no deep probe shares an end with
        one again in this transfer (that end's access link is full, and a deep probe there takes from the set)."""

    def ended(self, edge: Edge) -> bool:
        """The engine finished probing ``edge``; whether it was a probe the loop asked for and still counted."""
        self.baseline.pop(edge, None)
        self.deep.discard(edge)
        return self.since.pop(edge, None) is not None

    def overdue(self, now: float) -> bool:
        """Whether a probe has run ``3 x probe_s`` without a word: a probe reports after its own warm-up and at
        least two copies, in at most that time."""
        return any(now - t >= 3 * self.loop.config.probe_s for t in self.since.values())

    def choose(self, now: float, banned_edges: Callable[[], set[Edge]]) -> tuple[Edge, ...]:
        """Edges worth measuring now: unknown or aged ones on the optimistic paths that could beat the best known.
        ``banned_edges``: the edges of paths banned from the set (``PathSet.banned_edges``), asked for only when the
        set has room for a path.

        Repeatedly take the widest path, unknown edges counting as infinitely fast and aged ones at their raised
        weight; if it could beat the best measured path by the hysteresis margin, its unknown and aged edges are
        chosen and then count as 0 so that the next round looks past them. Edges already being probed count as 0
        from the start, and so do unknown edges the transfer itself is measuring.
        """
        for edge in [e for e, t in self.since.items() if now - t >= 3 * self.loop.config.probe_s]:
            del self.since[edge]  # the engine never said it was done: its place is free again
            self.baseline.pop(edge, None)
            self.deep.discard(edge)
        free = self.loop.config.probes_per_round - len(self.since)
        if free <= 0:
            return ()
        measured = self.loop.graph(with_aging=False)
        known = self.loop.best_known(measured)
        bar = 0.0 if has_unknown(measured, known) else path_throughput(measured, known)
        graph = self.loop.graph()
        on_set = self._set_edges()
        for edge in on_set:
            graph.edges[edge].setdefault(THROUGHPUT, 0.0)  # the transfer measures them: no guess, no probe
        apply_priors(graph, self.loop.memory, self.loop.src, self.loop.rtt_s, self.loop.peer_rtt_s)
        graph = self.loop.with_ceilings(graph) or graph  # a floor may hide a wide path: probe the rest of it
        optimistic = graph.copy()  # edges being probed at their hopes: a chain through one may be worth the rest
        for edge in self.since:
            if self.loop.unverified(edge):
                graph.edges[edge][THROUGHPUT] = 0.0
        chosen: list[Edge] = []
        # A running probe ends before any probe started now could: an edge waiting only for running probes keeps
        # its ends from narrower candidates, which would hold them for probe_s more.
        running = list(self.since)
        reserved: list[Edge] = []
        while len(chosen) < free:
            path = self._next_to_probe(graph)
            wanted = [edge for edge in edges_of(path) if edge not in self.since and self.loop.unverified(edge)]
            wanted = [edge for edge in wanted if edge not in chosen]
            if not wanted and self._lower_ceilings(graph, path, measured):
                continue  # a path wide only on ceilings is for _choose to try; look past it for edges to probe
            if not wanted or not path_throughput(graph, path) > bar * (1 + self.loop.config.hysteresis):
                break
            for edge in wanted:
                busy = [*self.since, *chosen, *reserved]
                if len(chosen) < free and not shares_an_end(edge, busy):
                    chosen.append(edge)
                elif shares_an_end(edge, running) and not shares_an_end(edge, [*chosen, *reserved]):
                    reserved.append(edge)
                graph.edges[edge][THROUGHPUT] = 0.0  # chosen, or waiting for a probe at the same end to finish
        if len(chosen) < free and self.loop.config.max_paths == 1:
            chosen += self._middle_probes(optimistic, bar, free - len(chosen), [*chosen, *reserved])
        if len(chosen) < free and len(self.loop.current_paths) < self.loop.config.max_paths:
            chosen += self._extra_probes(graph, measured, free - len(chosen), chosen, banned_edges())
        if self.loop.config.deep_probes and len(chosen) < free and not chosen and not reserved:
            chosen += self._deep_probes(measured, bar, free, [*self.since])
        self.since.update((edge, now) for edge in chosen)
        for edge in chosen:
            # What the set's hops ran at before the probe started: a hop that slows down while it runs shares
            # a link with it.
            self.baseline[edge] = {
                hop: entry.throughput_bps
                for hop in on_set
                if hop != edge
                and (entry := self.loop.memory.entry(*hop)) is not None and not entry.failed and entry.samples > 0
            }
        return tuple(chosen)

    def may_beat(self, width: float) -> bool:
        """Whether a probe running now may still show a measured path wider than ``width`` by the hysteresis:
        the widest way to its edge's tail that avoids its head, and on from its head that avoids its tail, over
        the measured weights with the probed edges at their hopes (infinitely fast), both clear that.

        A path tried on ceilings costs a whole attempt (``min_attempt_s``) to judge, a probe ends within a
        few seconds: measurements come before hopes. On the emulated ``lossy`` topology a cold start tried the
        direct link's neighbour on its ceiling for 10 s while the chain's last probes, due 4 s later, ran.
        Only ways the running probes can complete count: an unknown edge that no probe is measuring needs a
        probe of its own, and the question is asked again when one runs. Counting those infinitely fast too,
        every probe near an unmeasured edge held the trial back for good: on the emulated Abilene a 96 MiB cold
        start never tried the chain on its ceiling (19 Mbit/s against the 14-16 it ran at), because Washington
        -> Kansas City, being probed, had an unmeasured way on, Kansas City -> Sunnyvale, and such probes ran
        one after another."""
        running = [edge for edge in self.since if self.loop.unverified(edge)]
        if not running:
            return False
        hopes = measured_only(self.loop.graph(), without=running)
        hopes.add_edges_from(running)  # no weight: infinitely fast
        backward = hopes.reverse(copy=False)
        threshold = width * (1 + self.loop.config.hysteresis)
        return any(
            self._ways_around(hopes, backward, edge) > threshold
            for edge in running
            if edge[1] != self.loop.src and edge[0] != self.loop.dst
        )

    def _ways_around(self, graph: nx.DiGraph, backward: nx.DiGraph, edge: Edge) -> float:
        """The narrower of the widest way from the source to ``edge``'s tail that avoids its head and the widest
        way on from its head to the destination that avoids its tail (``backward``: ``graph`` reversed)."""
        u, v = edge
        way_in = widest_widths(nx.restricted_view(graph, [v], []), self.loop.src).get(u, 0.0)
        way_on = widest_widths(nx.restricted_view(backward, [u], []), self.loop.dst).get(v, 0.0)
        return min(way_in, way_on)

    def _may_deepen(self, edge: Edge) -> bool:
        """Whether ``edge`` is worth a deep probe: known from one stream only, not probed deep yet, and sharing no
        end with a deep probe that slowed the set (``_crowded``)."""
        if edge not in self.shallow or edge in self.deepened or self.loop.unverified(edge):
            return False
        return not shares_an_end(edge, self.crowded)

    def slowed_beside(self, edge: Edge) -> bool:
        """Whether a hop of the set that shares an end with ``edge`` runs ``SHARED_DROP`` slower than when the probe
        of ``edge`` started."""
        baseline = self.baseline.get(edge, {})
        for hop, before in baseline.items():
            entry = self.loop.memory.entry(*hop)
            if shares_an_end(hop, [edge]) and entry is not None and entry.throughput_bps < before * (1 - SHARED_DROP):
                return True
        return False

    def _deep_probes(self, measured: nx.DiGraph, bar: float, free: int, busy: list[Edge]) -> list[Edge]:
        """Once no unknown or aged edge is worth a probe: edges known from one stream only whose path, were they to
        carry ``streams`` of that stream, could beat the best measured path by the hysteresis (theory of
        operation, 13), widest first, none sharing an end with another probe."""
        graph = measured_only(measured)
        self._scaling_hopes(graph)
        for edge in self.since:
            if graph.has_edge(*edge):
                graph.edges[edge][THROUGHPUT] = 0.0
        chosen: list[Edge] = []
        while len(chosen) < free:
            try:
                path = widest_path(graph, self.loop.src, self.loop.dst)
            except NoPathError:
                break
            if not path_throughput(graph, path) > bar * (1 + self.loop.config.hysteresis):
                break
            wanted = [edge for edge in edges_of(path) if self._may_deepen(edge)]
            if not wanted:
                break
            for edge in wanted:
                if len(chosen) < free and not shares_an_end(edge, [*busy, *chosen]):
                    chosen.append(edge)
                    self.deep.add(edge)
                    self.deepened.add(edge)
                graph.edges[edge][THROUGHPUT] = 0.0
        return chosen

    def _scaling_hopes(self, graph: nx.DiGraph) -> None:
        """Raise every edge known only from a one-stream probe, and not yet probed deep, to ``streams`` of that
        stream: what it carries if nothing but its streams' own limits (window, loss) held it (theory of
        operation, 13). For choosing probes only."""
        for edge in self.shallow - self.deepened:
            entry = self.loop.memory.entry(*edge)
            if entry is None or entry.failed or not graph.has_edge(*edge) or THROUGHPUT not in graph.edges[edge]:
                continue
            # the probe's one stream (per-stream figures x streams)
            one = entry.throughput_bps * self.loop.config.streams
            graph.edges[edge][THROUGHPUT] = max(graph.edges[edge][THROUGHPUT], one * self.loop.config.streams)

    def _next_to_probe(self, graph: nx.DiGraph) -> Path:
        """The widest path; of paths as wide, the one whose narrowest guessed edge (unknown or aged, at its prior)
        is widest, then the one with the fewest such edges, then the fewest hops.

        On a backbone every way into the destination ends on one of a few edges, so many ways tie at that edge's
        width. A guess far above the tie is likelier to hold than one just above it, and a path one probe from
        known is done sooner than one needing three (theory of operation, "Exploration")."""
        path = widest_path(graph, self.loop.src, self.loop.dst)
        width = path_throughput(graph, path)
        guesses = nx.DiGraph()
        guesses.add_nodes_from(graph)
        for u, v, attrs in graph.edges(data=True):
            if attrs.get(THROUGHPUT, math.inf) >= width:
                unverified = self.loop.unverified((u, v))
                guess = attrs.get(THROUGHPUT) if unverified else None  # None: known, no limit at this stage
                guesses.add_edge(u, v, guessed=unverified, **{THROUGHPUT: guess})

        def guessed(u: str, v: str) -> int:
            return 1 if guesses.edges[u, v]["guessed"] else 0

        return tuple(widest_path(guesses, self.loop.src, self.loop.dst, cost=guessed))

    def _middle_probes(self, optimistic: nx.DiGraph, bar: float, free: int, chosen: Sequence[Edge]) -> list[Edge]:
        """Up to ``free`` more unknown or aged edges to probe beside ``chosen`` and the probes running, sharing no
        end with them, through which a way from the source to the destination could beat ``bar`` by the
        hysteresis: the widest way to the edge's tail that avoids its head, the edge, the widest way on from its
        head that avoids its tail (``optimistic``: edges being probed at their hopes), widest first.

        The path-by-path search looks past a path by counting its edges as 0, which hides every other path
        through them: with a probe running on a chain's last edge, the chain's middle edge waited for it to end
        (on the emulated ``lossy`` topology a cold start measured the chain's middle edge 20 s in, three probes
        after its first). One path only: a set of paths is probed path by path."""
        threshold = bar * (1 + self.loop.config.hysteresis)
        busy = [*self.since, *chosen]
        into = widest_widths(optimistic, self.loop.src)
        backward = optimistic.reverse(copy=False)
        onward = widest_widths(backward, self.loop.dst)
        ranked: list[tuple[float, Edge]] = []
        for u, v, attrs in optimistic.edges(data=True):
            edge = (u, v)
            if v == self.loop.src or u == self.loop.dst or edge in busy or shares_an_end(edge, busy):
                continue
            # A first bound, cheap: the ways in and out may cross (then no simple path is that wide).
            width = min(into.get(u, 0.0), attrs.get(THROUGHPUT, math.inf), onward.get(v, 0.0))
            if width > threshold and self.loop.unverified(edge):
                ranked.append((width, edge))
        ranked.sort(key=lambda item: -item[0])  # stable: ties in the graph's order
        more: list[Edge] = []
        for width, group in itertools.groupby(ranked, key=lambda item: item[0]):
            tied = [edge for _, edge in group]
            if len(tied) > 1:  # as wide: the fewest probes from a measured way first
                tied.sort(key=lambda edge: self._probes_needed(optimistic, edge, width))
            for u, v in tied:
                if len(more) == free:
                    return more
                if shares_an_end((u, v), [*busy, *more]):
                    continue
                if min(width, self._ways_around(optimistic, backward, (u, v))) > threshold:
                    more.append((u, v))
        return more

    def _probes_needed(self, graph: nx.DiGraph, edge: Edge, width: float) -> float:
        """How many unknown or aged edges, ``edge`` included, the way through ``edge`` with the fewest of them has
        among those at least ``width`` wide (edges being probed count as known: their probes are running)."""

        def cost(u: str, v: str, attrs: dict[str, Any]) -> float | None:
            if attrs.get(THROUGHPUT, math.inf) < width:
                return None
            return 1.0 if (u, v) not in self.since and self.loop.unverified((u, v)) else 0.0

        u, v = edge
        try:
            into = nx.shortest_path_length(graph, self.loop.src, u, weight=cost)
            onward = nx.shortest_path_length(graph, v, self.loop.dst, weight=cost)
        except nx.NetworkXNoPath:
            return math.inf
        return float(into) + 1.0 + float(onward)

    def _lower_ceilings(self, graph: nx.DiGraph, path: Sequence[str], measured: nx.DiGraph) -> bool:
        """Put the edges of ``path`` raised to their ceilings back at their floors; whether there was one."""
        lowered = False
        for edge in edges_of(path):
            floor = measured.edges[edge].get(THROUGHPUT)
            if floor is not None and graph.edges[edge].get(THROUGHPUT, math.inf) > floor:
                graph.edges[edge][THROUGHPUT] = floor
                lowered = True
        return lowered

    def _extra_probes(
        self, graph: nx.DiGraph, measured: nx.DiGraph, free: int, chosen: list[Edge], banned: set[Edge]
    ) -> list[Edge]:
        """Unknown or aged edges of the optimistic paths, edge-disjoint from the set and avoiding ``banned`` edges,
        that could join it (predicted to add the margin of the set's measured total)."""
        residual = graph.copy()
        residual.remove_edges_from([*self._set_edges(), *banned])
        total = set_total(measured, self.loop.current_paths)
        more: list[Edge] = []
        while len(more) < free:
            try:
                path = widest_path(residual, self.loop.src, self.loop.dst)
            except NoPathError:
                break
            wanted = [
                edge
                for edge in edges_of(path)
                if edge not in self.since and edge not in chosen and edge not in more and self.loop.unverified(edge)
            ]
            if not wanted or not adds_enough(path_throughput(residual, path), total, self.loop.config.path_margin):
                break
            for edge in wanted[: free - len(more)]:
                more.append(edge)
                residual.edges[edge][THROUGHPUT] = 0.0
        return more

    def _set_edges(self) -> set[Edge]:
        """The edges of the paths in use (the transfer measures them)."""
        return {edge for path in self.loop.current_paths for edge in edges_of(path)}


def apply_priors(
    graph: nx.DiGraph, memory: EdgeMemory, src: str, rtt: Mapping[str, float],
    pairs: Mapping[Edge, float] | None = None,
) -> None:
    """Give unknown edges an optimistic guess from round-trip times, so that exploration goes first where
    a fast chain most likely is, not breadth-first through every two-hop path.

    A stream's rate falls with its round trip (window over RTT; loss-limited TCP too), and the client's
    round trips bound every other: ``rtt(u, v) >= |rtt(src, v) - rtt(src, u)|``; where the depots measured
    the round trip between ``u`` and ``v`` (``pairs``, either way round), that is used instead. The guess for
    an unknown edge is ``K / that bound``, with ``K`` the largest rate x bound among measured edges: as fast
    as the best-placed measured edge would be at that distance. Depots in the direction of the destination
    thus look promising, ones behind the source do not. Without round trips (or before any edge is measured)
    unknown edges stay infinitely fast.
    """
    floor = min(rtt.values(), default=0.0) / 4
    pairs = pairs or {}

    def bound(u: str, v: str) -> float | None:
        measured = pairs.get((u, v), pairs.get((v, u)))
        if measured is not None:
            return max(measured, floor, 1e-4)
        if u not in rtt and u != src or v not in rtt and v != src:
            return None
        return max(abs(rtt.get(v, 0.0) - rtt.get(u, 0.0)), floor, 1e-4)

    scale, measured = 0.0, False
    for u, v, attrs in graph.edges(data=True):
        if THROUGHPUT in attrs and (entry := memory.entry(u, v)) and entry.samples:
            measured = True
            if (b := bound(u, v)) is not None:
                scale = max(scale, attrs[THROUGHPUT] * b)
    if scale <= 0:
        if measured:
            return  # measured edges without round trips: a guess would not be comparable with them
        scale = 1.0  # nothing measured yet: the guesses only rank the unknown edges among themselves
    for u, v, attrs in graph.edges(data=True):
        if THROUGHPUT not in attrs and (b := bound(u, v)) is not None:
            attrs[THROUGHPUT] = scale / b


def shares_an_end(edge: Edge, others: Sequence[Edge]) -> bool:
    """Whether ``edge`` leaves the host another of ``others`` leaves, or enters the host another enters: two probes
    there would share that host's access link, the likeliest shared bottleneck, and each see what the other left."""
    return any(edge[0] == other[0] or edge[1] == other[1] for other in others)
