"""Which depots a transfer considers when the overlay has more than it can explore (theory of operation, 15).

Every rule of the loop looks at the full mesh over its vertices: a widest path is O(E log V), and exploration
repeats it once per probe it places, so an overlay of 300 depots (90,000 edges) took two minutes of the client's
CPU before its first block (``bench/directory_start.py``). A transfer cannot use that many anyway: it explores a
few paths of one to four hops. ``candidates`` keeps at most ``limit`` depots, the destination always among them:

1. the depots the memory knows a way through, widest first: the narrower of the widest measured way from the
   source to the depot and from the depot to the destination (measured edges only, failed ones excluded), at
   most three quarters of the places, so that a memory never closes the overlay to depots it has not tried;
2. then the depots the round trips place best, as ``apply_priors`` would guess the one-depot path through them:
   the larger of the source's round trip to the depot and the distance left from there to the destination,
   ``|rtt(dst) - rtt(depot)|``, smallest first (a depot half-way scores best; one behind the source or past
   the destination worst); depots without a round trip last;
3. then, if places are left, the remembered depots that did not fit in the first three quarters.

Ties keep the order ``vertices`` gives them. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import networkx as nx

from ._memory import EdgeMemory
from ._widest import THROUGHPUT, widest_widths

__all__ = ["candidates"]

REMEMBERED_SHARE = 0.75
"""At most this share of the places goes to depots the memory knows a way through."""


def candidates(
    vertices: Sequence[str], src: str, dst: str, memory: EdgeMemory, rtt_s: Mapping[str, float], limit: int
) -> tuple[str, ...]:
    """``src`` and at most ``limit`` depots of ``vertices`` (``dst`` always among them), in ``vertices``' order.
    All of them when there are no more than ``limit``."""
    order = tuple(dict.fromkeys(vertices))
    depots = [v for v in order if v != src]
    if len(depots) <= limit:
        return order
    others = [v for v in depots if v != dst]
    places = max(0, limit - 1)
    known = _remembered(others, src, dst, memory)
    first = known[: math.floor(places * REMEMBERED_SHARE)]
    chosen = set(first)
    far = rtt_s.get(dst)
    by_rtt = sorted(
        (v for v in others if v not in chosen),
        key=lambda v: (0, _distance(rtt_s[v], far)) if v in rtt_s else (1, 0.0),
    )  # stable: ties in the order of vertices
    for v in [*by_rtt, *known]:
        if len(chosen) >= places:
            break
        chosen.add(v)
    chosen.update((src, dst))
    return tuple(v for v in order if v in chosen)


def _distance(rtt: float, far: float | None) -> float:
    """How far the one-depot path through a depot ``rtt`` away is from one round trip to the destination: the
    longer of its two legs, as the priors bound them."""
    return max(rtt, abs(far - rtt)) if far is not None else rtt


def _remembered(others: Sequence[str], src: str, dst: str, memory: EdgeMemory) -> list[str]:
    """The depots of ``others`` that a measured way leads through from ``src`` to ``dst``, widest first."""
    among = {src, dst, *others}
    graph = nx.DiGraph()
    graph.add_nodes_from([src, *others, dst])
    for (u, v), entry in memory.snapshot().items():
        if u in among and v in among and u != v and not entry.failed and entry.samples > 0:
            graph.add_edge(u, v, **{THROUGHPUT: entry.weight})
    into = widest_widths(graph, src)
    onward = widest_widths(graph.reverse(copy=False), dst)
    widths = {v: min(into.get(v, 0.0), onward.get(v, 0.0)) for v in others}
    ranked = [v for v in others if widths[v] > 0]
    ranked.sort(key=lambda v: -widths[v])
    return ranked
