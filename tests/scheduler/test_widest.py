"""widest_path and path_throughput: hand-made cases and a brute-force comparison on random small graphs."""

from __future__ import annotations

import math

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lnet.scheduler import THROUGHPUT, NoPathError, path_throughput, widest_path


def graph_of(edges: dict[tuple[str, str], float | None], nodes: str = "") -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(nodes)
    for (u, v), w in edges.items():
        if w is None:
            graph.add_edge(u, v)
        else:
            graph.add_edge(u, v, **{THROUGHPUT: w})
    return graph


def test_picks_the_largest_smallest_edge() -> None:
    graph = graph_of({("s", "d"): 2.0, ("s", "a"): 10.0, ("a", "d"): 3.0, ("s", "b"): 4.0, ("b", "d"): 9.0})
    assert widest_path(graph, "s", "d") == ["s", "b", "d"]
    assert path_throughput(graph, ["s", "b", "d"]) == 4.0


def test_unknown_edges_count_as_infinitely_fast() -> None:
    graph = graph_of({("s", "d"): 5.0, ("s", "a"): None, ("a", "d"): 6.0})
    assert widest_path(graph, "s", "d") == ["s", "a", "d"]
    assert path_throughput(graph, ["s", "a"]) == math.inf


def test_all_unknown_gives_the_direct_path() -> None:
    graph = graph_of({(u, v): None for u in "sabd" for v in "sabd" if u != v})
    assert widest_path(graph, "s", "d") == ["s", "d"]


def test_ties_go_to_fewer_hops_then_to_vertex_order() -> None:
    graph = graph_of(
        {
            ("s", "a"): 5.0,
            ("a", "b"): 5.0,
            ("b", "d"): 5.0,
            ("s", "c"): 5.0,
            ("c", "d"): 7.0,
            ("s", "e"): 6.0,
            ("e", "d"): 5.0,
        },
        nodes="sabcde",
    )
    # s-c-d and s-e-d both have bottleneck 5 in two hops; c comes before e in the graph's order.
    assert widest_path(graph, "s", "d") == ["s", "c", "d"]


def test_a_narrower_prefix_with_fewer_hops_does_not_hide_the_shortest_widest_path() -> None:
    # To x: s-a-b-x (width 10, 3 hops) beats s-x (width 5, 1 hop); but x-d has width 3, so both reach d with
    # width 3 and the 2-hop s-x-d must win. A single Dijkstra keyed on (width, hops) returns the 4-hop path.
    graph = graph_of({("s", "a"): 10.0, ("a", "b"): 10.0, ("b", "x"): 10.0, ("s", "x"): 5.0, ("x", "d"): 3.0})
    assert widest_path(graph, "s", "d") == ["s", "x", "d"]


def test_no_path_raises_a_value_error() -> None:
    graph = graph_of({("s", "a"): 1.0, ("d", "s"): 1.0})
    with pytest.raises(NoPathError, match="no path"):
        widest_path(graph, "s", "d")
    with pytest.raises(ValueError, match="not both in the graph"):
        widest_path(graph, "s", "nowhere")


def test_a_vertex_is_its_own_path() -> None:
    assert widest_path(graph_of({("s", "d"): 1.0}), "s", "s") == ["s"]


def test_path_throughput_of_a_non_path_raises() -> None:
    with pytest.raises(NoPathError, match="not an edge"):
        path_throughput(graph_of({("s", "d"): 1.0}), ["d", "s"])


def test_failed_edges_are_still_paths_of_width_zero() -> None:
    graph = graph_of({("s", "d"): 0.0, ("s", "a"): 0.0, ("a", "d"): 4.0})
    assert widest_path(graph, "s", "d") == ["s", "d"]
    assert path_throughput(graph, ["s", "d"]) == 0.0


weights = st.one_of(st.none(), st.sampled_from([0.0, 1.0, 2.0, 3.0]))


@st.composite
def small_graphs(draw: st.DrawFn) -> nx.DiGraph:
    n = draw(st.integers(min_value=2, max_value=6))
    nodes = list(range(n))
    graph = nx.DiGraph()
    graph.add_nodes_from(nodes)
    for u in nodes:
        for v in nodes:
            if u != v and draw(st.booleans()):
                w = draw(weights)
                graph.add_edge(u, v, **({} if w is None else {THROUGHPUT: w}))
    return graph


@settings(max_examples=300, deadline=None)
@given(small_graphs())
def test_agrees_with_brute_force_over_all_simple_paths(graph: nx.DiGraph) -> None:
    src, dst = 0, len(graph) - 1
    paths = list(nx.all_simple_paths(graph, src, dst))
    if not paths:
        with pytest.raises(NoPathError):
            widest_path(graph, src, dst)
        return
    best_width = max(path_throughput(graph, p) for p in paths)
    fewest_hops = min(len(p) for p in paths if path_throughput(graph, p) == best_width)
    found = widest_path(graph, src, dst)
    assert found in paths  # a real, cycle-free path from src to dst
    assert path_throughput(graph, found) == best_width
    assert len(found) == fewest_hops
