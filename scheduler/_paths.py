"""The path-set rule: which further paths run beside the widest one, as pure graph code.

No state, no clock: the decision loop (``_loop.py``) keeps the set, its trials and its bans, and asks these
functions what the model predicts. See point 12 of the theory of operation in ``lnet.scheduler``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence

import networkx as nx

from ._memory import Edge
from ._widest import THROUGHPUT, NoPathError, has_unknown, path_throughput, widest_path

__all__ = [
    "adds_enough",
    "extend_set",
    "extra_path",
    "fill_s",
    "keeps_adding",
    "path_set",
    "set_total",
    "taken_shares",
    "trial_keeps",
]

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


def fill_s(graph: nx.DiGraph, path: Sequence[str], depth: int, block_bytes: int) -> float:
    """How long ``path``'s first copies take to reach its end: on each hop ``depth`` copies of a block share the
    hop's predicted rate, and a depot passes a block on once it holds all of it (``simulator._fill_s``, on the
    truth). A hop whose rate is unknown counts as instant, so the figure is the least the fill takes."""
    total = 0.0
    for u, v in _edges(path):
        rate = graph.edges[u, v].get(THROUGHPUT) if graph.has_edge(u, v) else None
        if rate is not None and rate > 0:
            total += depth * block_bytes / rate
    return total


def shown_rate(graph: nx.DiGraph, path: Sequence[str]) -> float:
    """What a path of the set has shown it carries: its width over measured edges, nothing while a hop of it has
    not reported (a cold start's first path, slower than its scouts' deadline, is no infinitely fast path)."""
    return 0.0 if has_unknown(graph, path) else path_throughput(graph, path)


def shown_total(graph: nx.DiGraph, paths: Iterable[Sequence[str]]) -> float:
    """What the set has shown it carries: ``set_total`` with paths that have not reported counting as nothing."""
    return sum(shown_rate(graph, path) for path in paths)


def adds_enough(rate: float, others: float, margin: float) -> bool:
    """Whether a path predicted at ``rate`` may join a set predicted at ``others``: it must add at least
    ``margin`` of what the set has."""
    return rate > 0 and rate >= margin * others


def keeps_adding(rate: float, others: float, margin: float) -> bool:
    """Whether a path in the set, measured at ``rate`` beside the others' ``others``, stays: half the join margin,
    so that a path admitted near the margin does not leave and come back on every noisy measurement."""
    return rate > 0 and rate >= margin / 2 * others


def taken_shares(
    lost: float, rates: Sequence[float], predicted: Sequence[float], crossing: Sequence[bool] | None = None
) -> list[float]:
    """How much of what the set's other paths ``lost`` each of the newcomers that joined together took from them.

    The newcomers are measured at ``rates`` and were predicted at ``predicted`` when they joined. One that crosses a
    bottleneck of the set gets only its share there, less than predicted, while one on a route of its own runs
    at its prediction: so the loss is shared in proportion to how far each fell short of its own prediction, and
    in proportion to the rates when none did (a newcomer held back by its own window takes from a shared link
    without falling short). A newcomer that never reported (rate 0) took nothing. With one newcomer it took it
    all. ``lost`` may be negative (the others gained: the set was held back when they joined); it is shared the same
    way, and counts in the newcomers' favour.

    ``crossing``: which newcomers the round trips place on the links of the paths that were there
    (``_routes.RouteGuess.crosses``). Where some do and some do not, a loss is theirs alone, shared among them the
    same way: a newcomer on a route of its own took nothing from the others, whatever its prediction said.
    """
    shortfalls = [max(0.0, p - r) if r > 0 else 0.0 for r, p in zip(rates, predicted, strict=True)]
    if crossing is not None and lost > 0 and any(crossing) and not all(crossing):
        suspects = [crosses and r > 0 for r, crosses in zip(rates, crossing, strict=True)]
        if any(suspects):
            shortfalls = [s if suspect else 0.0 for s, suspect in zip(shortfalls, suspects, strict=True)]
            rates = [r if suspect else 0.0 for r, suspect in zip(rates, suspects, strict=True)]
    weights = shortfalls if sum(shortfalls) > 0 else [max(0.0, r) for r in rates]
    whole = sum(weights)
    if whole <= 0:
        return [lost / len(rates)] * len(rates) if rates else []
    return [lost * w / whole for w in weights]


def trial_keeps(
    baseline: float,
    others: float,
    rates: Sequence[float],
    predicted: Sequence[float],
    margin: float,
    crossing: Sequence[bool] | None = None,
) -> list[bool]:
    """Which of the newcomers that joined a set together stay after their trial.

    ``baseline``: the set's measured total just before they joined; ``others``: what the paths that were there
    before measure now; ``rates``: each newcomer's measured rate (0 if it never reported), ``predicted``: its
    predicted rate when it joined. The rule for one newcomer: the total grew by half the margin of the baseline,
    and the others lost at most half of what the newcomer carries (else it took its rate from them). For several:

    1. Each newcomer is judged by that rule on its own part: what the others lost is shared among the newcomers
       (``taken_shares``), and it must add half the margin of the baseline net of its share, which may be at most
       half its rate. One that shared a bottleneck with the set fell short of its prediction and takes the loss.
    2. Those kept must still pass the rule together (growth of half the margin each), counting the others as
       regaining what the leaving ones carry, up to what they lost (the most the leaving ones can have taken);
       while they do not, the one that adds least leaves too. This catches newcomers whose predictions were
       already low (measured beside the set before), which fall short of nothing.

    ``crossing`` (which newcomers the round trips place on the others' links) is ``taken_shares``'.
    """
    lost = baseline - others
    taken = taken_shares(lost, rates, predicted, crossing)
    adds = [rate - took for rate, took in zip(rates, taken, strict=True)]
    keep = [
        rate > 0 and added >= margin / 2 * baseline and took <= rate / 2
        for rate, took, added in zip(rates, taken, adds, strict=True)
    ]
    while any(keep):
        kept = sum(rate for rate, k in zip(rates, keep, strict=True) if k)
        back = min(max(lost, 0.0), sum(rate for rate, k in zip(rates, keep, strict=True) if not k))
        total = others + back + kept
        if total >= baseline * (1 + margin / 2 * sum(keep)) and lost - back <= kept / 2:
            break
        weakest = min((i for i, k in enumerate(keep) if k), key=lambda i: (adds[i], rates[i]))
        keep[weakest] = False
    return keep


def extend_set(
    graph: nx.DiGraph,
    src: str,
    dst: str,
    taken: Sequence[Sequence[str]],
    max_paths: int,
    margin: float,
    excluded: Collection[Edge] = (),
) -> list[Path]:
    """The further paths the model adds to the set ``taken`` (not empty), greedily: while the set has fewer than
    ``max_paths``, the widest path of measured edges edge-disjoint from the set and avoiding ``excluded``, as long
    as it adds at least ``margin`` of the growing set's predicted total."""
    chosen: list[Sequence[str]] = list(taken)
    added: list[Path] = []
    while len(chosen) < max_paths:
        path = extra_path(graph, src, dst, chosen, excluded)
        if path is None or not adds_enough(path_throughput(graph, path), set_total(graph, chosen), margin):
            break
        chosen.append(path)
        added.append(path)
    return added


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
    at least ``margin`` of the set's predicted total (``extend_set``). The loop builds the same set, joining at
    once every further path it predicts."""
    first = extra_path(graph, src, dst, ())
    if first is None or max_paths < 1:
        return []
    return [first, *extend_set(graph, src, dst, [first], max_paths, margin, excluded)]
