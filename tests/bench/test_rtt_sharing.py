"""bench/rtt_sharing.py's pure parts: which link and edges it sets side by side, and the simulator's parts.
(The measurement itself needs root: tests/testbed/test_accuracy.py runs tcp_shares once.)"""

from __future__ import annotations

import pytest

from lnet.scheduler.simulator import SimNetwork

from .benches import load_bench

rs = load_bench("rtt_sharing")


def network(rtts: dict[tuple[str, str], float], link_rate: float = 10.0) -> SimNetwork:
    vertices = ("a", "b", "c", "d")
    capacities = {(u, v): 8.0 for u in vertices for v in vertices if u != v}
    routes = {edge: ("x",) for edge in rtts}
    return SimNetwork(vertices, capacities, links={"x": link_rate, "y": 100.0}, routes={**routes, ("a", "b"): ("y",)},
                      rtts={**rtts, ("a", "b"): 0.001})


def test_it_takes_the_shortest_and_longest_edges_on_a_link_and_one_between() -> None:
    found = rs.contest(network({("a", "d"): 0.010, ("b", "d"): 0.080, ("c", "d"): 0.030}), streams=2)
    assert found == ("x", [("a", "d"), ("b", "d"), ("c", "d")])
    two = rs.contest(network({("a", "d"): 0.010, ("b", "d"): 0.080}), streams=2)
    assert two == ("x", [("a", "d"), ("b", "d")])


def test_it_passes_over_links_whose_edges_have_like_round_trips_or_would_not_fill_them() -> None:
    assert rs.contest(network({("a", "d"): 0.040, ("b", "d"): 0.050}), streams=2) is None
    assert rs.contest(network({("a", "d"): 0.010, ("b", "d"): 0.080}, link_rate=100.0), streams=2) is None


def test_the_simulated_parts_follow_the_bias() -> None:
    net = network({("a", "d"): 0.010, ("b", "d"): 0.080})
    even = rs.simulated_parts(net, [("a", "d"), ("b", "d")], 2, 0.0)
    biased = rs.simulated_parts(net, [("a", "d"), ("b", "d")], 2, 1.0)
    assert even == pytest.approx([0.5, 0.5])
    assert sum(biased) == pytest.approx(1.0)
    assert biased[0] > 0.75
