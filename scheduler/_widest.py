"""Max-min (widest) path over a graph of edge throughputs.

Pure graph code: no I/O, no clock. An edge's weight is its ``throughput`` attribute in bytes/s; an edge without
one (or with ``None``) is unknown and counts as infinitely fast, which is what makes a cold start explore.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any, TypeVar

import networkx as nx

__all__ = [
    "THROUGHPUT",
    "NoPathError",
    "edges_of",
    "has_unknown",
    "measured_only",
    "path_throughput",
    "widest_path",
    "widest_widths",
]

V = TypeVar("V", bound=Hashable)

THROUGHPUT = "throughput"
"""The edge attribute holding a measured throughput in bytes/s."""


class NoPathError(ValueError):
    """There is no path from the source to the destination in the graph."""


def _weight(attrs: dict[str, Any]) -> float:
    value = attrs.get(THROUGHPUT)
    return math.inf if value is None else float(value)


def widest_path(
    graph: nx.DiGraph, src: V, dst: V, *, cost: Callable[[V, V], int] | None = None
) -> list[V]:
    """The cycle-free path from ``src`` to ``dst`` whose smallest edge weight is largest.

    Among the paths with that bottleneck the one with the fewest hops wins (with ``cost``: the smallest total
    cost of its edges, then the fewest hops); among those, the one found first when walking vertices and edges in
    the graph's insertion order, so the answer is deterministic.

    Two passes, both O(E log V) at worst: a heap-based variant of Dijkstra (the seed's routine, with a heap
    instead of its O(V^2) scan) finds the best bottleneck B; then a breadth-first search over the edges of
    weight >= B finds the fewest hops. Doing both in one Dijkstra keyed on (bottleneck, hops) would be wrong:
    a path with a worse bottleneck but fewer hops can become the better prefix once a narrower edge follows.

    Raises ``NoPathError`` if ``dst`` cannot be reached (or either end is not in the graph).
    """
    if src not in graph or dst not in graph:
        raise NoPathError(f"no path from {src!r} to {dst!r}: not both in the graph")
    if src == dst:
        return [src]
    bottleneck = _best_bottleneck(graph, src, dst)
    if cost is None:
        return _fewest_hops(graph, src, dst, bottleneck)
    return _cheapest(graph, src, dst, bottleneck, cost)


def _best_bottleneck(graph: nx.DiGraph, src: Hashable, dst: Hashable) -> float:
    for vertex, width in _settled(graph, src):
        if vertex == dst:
            return width
    raise NoPathError(f"no path from {src!r} to {dst!r}")


def widest_widths(graph: nx.DiGraph, src: V) -> dict[V, float]:
    """The bottleneck of the widest path from ``src`` to every vertex it reaches (``src`` itself: infinite)."""
    return dict(_settled(graph, src))


def _settled(graph: nx.DiGraph, src: V) -> Iterator[tuple[V, float]]:
    """Every vertex ``src`` reaches with the bottleneck of its widest path, widest first (Dijkstra's order)."""
    adj = graph.adj
    best: dict[V, float] = {src: math.inf}
    done: set[V] = set()
    # Max-heap via negated keys; the counter keeps ties in discovery order and never compares vertices.
    heap: list[tuple[float, int, V]] = [(-math.inf, 0, src)]
    pushed = 1
    while heap:
        negative, _, u = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        width = -negative
        yield u, width
        for v, attrs in adj[u].items():
            if v in done:
                continue
            w = _weight(attrs)
            candidate = w if w < width else width
            if candidate > best.get(v, -math.inf):
                best[v] = candidate
                heapq.heappush(heap, (-candidate, pushed, v))
                pushed += 1


def _fewest_hops(graph: nx.DiGraph, src: V, dst: V, bottleneck: float) -> list[V]:
    adj = graph.adj
    previous: dict[V, V] = {src: src}
    queue: deque[V] = deque([src])
    while queue:
        u = queue.popleft()
        for v, attrs in adj[u].items():
            if v in previous or _weight(attrs) < bottleneck:
                continue
            previous[v] = u
            if v == dst:
                path = [v]
                while path[-1] != src:
                    path.append(previous[path[-1]])
                path.reverse()
                return path
            queue.append(v)
    # Unreachable: the first pass proved a path of this width exists.
    raise AssertionError("widest path lost between passes")


def _cheapest(graph: nx.DiGraph, src: V, dst: V, bottleneck: float, cost: Callable[[V, V], int]) -> list[V]:
    """networkx's Dijkstra over the edges of weight >= ``bottleneck``, on (total cost, hops) folded into one
    number: a path has fewer hops than the graph has vertices, so ``cost x vertices + hops`` orders the same."""
    scale = graph.number_of_nodes()

    def weight(u: V, v: V, attrs: dict[str, Any]) -> int | None:
        return None if _weight(attrs) < bottleneck else cost(u, v) * scale + 1

    path: list[V] = nx.dijkstra_path(graph, src, dst, weight=weight)
    return path


def path_throughput(graph: nx.DiGraph, path: Sequence[Hashable]) -> float:
    """The predicted throughput of ``path``: its smallest edge weight, unknown edges counting as infinite.

    A single-vertex path is infinitely fast. Raises ``NoPathError`` if a hop is not an edge of the graph.
    """
    result = math.inf
    for u, v in zip(path, path[1:], strict=False):
        attrs = graph.adj.get(u, {}).get(v)
        if attrs is None:
            raise NoPathError(f"{u!r} -> {v!r} is not an edge of the graph")
        result = min(result, _weight(attrs))
    return result


def measured_only(graph: nx.DiGraph, *, without: Sequence[tuple[str, str]] = ()) -> nx.DiGraph:
    """``graph`` with only its measured edges (those with a weight), less ``without``."""
    known = nx.DiGraph()
    known.add_nodes_from(graph)
    known.add_edges_from((u, v, a) for u, v, a in graph.edges(data=True) if THROUGHPUT in a and (u, v) not in without)
    return known


def has_unknown(graph: nx.DiGraph, path: Sequence[str]) -> bool:
    """Whether a hop of ``path`` has no weight in ``graph`` (unknown: infinitely fast)."""
    return any(THROUGHPUT not in graph.edges[u, v] for u, v in edges_of(path))


def edges_of(path: Sequence[str]) -> list[tuple[str, str]]:
    """The hops of a path, in order."""
    return list(zip(path, path[1:], strict=False))
