"""The path-set rule (issue 12): which further paths run beside the widest one, as pure graph code.

No state, no clock: the decision loop (``_loop.py``) keeps the set, its trials and its bans, and asks these
functions what the model predicts. See point 12 of the theory of operation in ``lnet.scheduler``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import networkx as nx

from ._memory import Edge
from ._widest import THROUGHPUT, NoPathError, path_throughput, widest_path

__all__ = ["adds_enough", "extra_path", "keeps_adding", "path_set", "set_total"]

Path = tuple[str, ...]


def _edges(path: Sequence[str]) -> list[Edge]:
    return list(zip(path, path[1:], strict=False))


def extra_path(
    graph: nx.DiGraph, src: str, dst: str, taken: Iterable[Sequence[str]], excluded: Collection[Edge] = ()
) -> Path | None:
    """The widest path of *measured* edges that shares no edge with the ``taken`` paths and uses none of
    ``excluded``; None if there is none.

    Edge-disjoint, not vertex-disjoint: two paths may meet at a depot (it copies each block once either way),
    but no overlay edge carries two of them, so every hop's measurement belongs to one path. Unknown edges are
    left out: a path joins the set on what was measured, never as an exploration.
    """
    residual = nx.DiGraph()
    residual.add_nodes_from(graph)
    gone = {edge for path in taken for edge in _edges(path)} | set(excluded)
    residual.add_edges_from(
        (u, v, a) for u, v, a in graph.edges(data=True) if THROUGHPUT in a and (u, v) not in gone
    )
    try:
        return tuple(widest_path(residual, src, dst))
    except NoPathError:
        return None


def set_total(graph: nx.DiGraph, paths: Iterable[Sequence[str]]) -> float:
    """The set's predicted throughput: the sum of its paths' widths (the model: edge-disjoint paths do not slow
    each other; where they share a physical link it is optimistic, and the loop learns so from a trial)."""
    return sum(path_throughput(graph, path) for path in paths)


def adds_enough(rate: float, others: float, margin: float) -> bool:
    """Whether a path predicted at ``rate`` may join a set predicted at ``others``: it must add at least
    ``margin`` of what the set has."""
    return rate > 0 and rate >= margin * others


def keeps_adding(rate: float, others: float, margin: float) -> bool:
    """Whether a path in the set, measured at ``rate`` beside the others' ``others``, stays: half the join margin,
    so that a path admitted near the margin does not leave and come back on every noisy measurement."""
    return rate > 0 and rate >= margin / 2 * others


def path_set(
    graph: nx.DiGraph,
    src: str,
    dst: str,
    max_paths: int,
    margin: float,
    *,
    excluded: Collection[Edge] = (),
) -> list[Path]:
    """The set the model proposes from scratch, greedily: the widest path of measured edges, then, while fewer
    than ``max_paths``, the widest path edge-disjoint from those chosen (avoiding ``excluded``), as long as it adds
    at least ``margin`` of the set's predicted total. The loop builds the same set one join at a time."""
    chosen: list[Path] = []
    while len(chosen) < max_paths:
        path = extra_path(graph, src, dst, chosen, excluded if chosen else ())
        if path is None:
            break
        if chosen and not adds_enough(path_throughput(graph, path), set_total(graph, chosen), margin):
            break
        chosen.append(path)
    return chosen
