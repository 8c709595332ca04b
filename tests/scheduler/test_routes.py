"""Routes guessed from round trips (theory of operation, 17): a vertex whose round trips to a hop's ends add up to
the hop's own is on its route, and a path whose hops the round trips place on the links of paths in the set is
weighed at its share of them when it would join (``_routes.RouteGuess``, ``SchedulerConfig.route_guess``)."""

from __future__ import annotations

from dataclasses import replace

import networkx as nx

from lnet.scheduler import THROUGHPUT, EdgeMemory, PathScheduler, SchedulerConfig
from lnet.scheduler._routes import ROUTE_SLACK_S, RouteGuess

# src -- on -- dst in a line, 25 + 35 ms of round trip; ``off`` 40 ms from both ends, off the way.
RTT = {"on": 0.025, "off": 0.040, "dst": 0.060}
PEERS = {("on", "dst"): 0.035, ("off", "dst"): 0.040, ("on", "off"): 0.045}
DIRECT = ("src", "dst")
VIA_ON = ("src", "on", "dst")
VIA_OFF = ("src", "off", "dst")
VERTICES = ("src", "on", "off", "dst")


def guess(**kwargs: float) -> RouteGuess:
    return RouteGuess("src", RTT, PEERS, **kwargs)


def test_a_vertex_whose_round_trips_add_up_to_the_hop_s_is_on_its_route_in_order() -> None:
    routes = guess()
    assert routes.via("src", "dst") == {"src": 0.0, "on": 0.025, "dst": 0.060}
    assert routes.via("dst", "src") == {"dst": 0.0, "on": 0.035, "src": 0.060}  # peers either way round
    assert routes.via("src", "off") == {"src": 0.0, "off": 0.040}


def test_the_hosts_own_time_is_within_the_slack_and_a_detour_past_it_is_not() -> None:
    host = ROUTE_SLACK_S / 2  # each measured round trip carries the hosts' time: the sum of two, one more
    padded = RouteGuess("src", {v: t + host for v, t in RTT.items()}, {e: t + host for e, t in PEERS.items()})
    assert "on" in padded.via("src", "dst")
    detour = RouteGuess("src", {**RTT, "on": 0.025 + 2 * ROUTE_SLACK_S}, PEERS)
    assert "on" not in detour.via("src", "dst")


def test_hops_share_links_when_they_pass_two_vertices_in_the_same_order() -> None:
    routes = guess()
    assert routes.shares(("src", "on"), DIRECT)  # direct runs over src -> on
    assert routes.shares(("on", "dst"), DIRECT)
    assert not routes.shares(("src", "off"), DIRECT)  # one vertex in common: its end
    assert not routes.shares(("off", "dst"), DIRECT)
    assert not routes.shares(("src", "on"), ("on", "dst"))  # one after the other
    assert not routes.shares(("dst", "on"), ("on", "dst"))  # opposite ways: each link's other direction
    assert not routes.shares(("on", "src"), DIRECT)


def test_without_a_round_trip_a_hop_passes_only_its_ends() -> None:
    routes = RouteGuess("src", RTT, {})  # the client's own round trips only: no depot-to-depot leg
    assert routes.via("src", "dst") == {"src": 0.0, "dst": 0.060}
    assert routes.via("on", "off") == {"on": 0.0}
    assert not routes.shares(("src", "on"), DIRECT)
    assert routes.shared_edges([DIRECT], [("src", "on"), ("on", "dst")]) == set()


def test_shared_edges_are_those_over_the_links_of_any_of_the_paths() -> None:
    routes = guess()
    edges = [("src", "on"), ("on", "dst"), ("src", "off"), ("off", "dst")]
    assert routes.shared_edges([DIRECT], edges) == {("src", "on"), ("on", "dst")}
    assert routes.shared_edges([VIA_OFF], edges) == {("src", "off"), ("off", "dst")}


# -- in the decision loop -------------------------------------------------------------------------------------

HAND = SchedulerConfig(
    reevaluate_s=5.0, min_attempt_s=10.0, warmup_s=2.0, probes_per_round=0, max_paths=2, path_margin=0.2
)


def remembered(rates: dict[tuple[str, ...], int] | None = None) -> EdgeMemory:
    """Direct widest (100), the path through ``on`` next (90), the one through ``off`` last (80); every other edge
    known at 1."""
    memory = EdgeMemory()
    rates = rates if rates is not None else {DIRECT: 100, VIA_ON: 90, VIA_OFF: 80}
    for path, rate in rates.items():
        for u, v in zip(path, path[1:], strict=False):
            memory.observe(u, v, rate * 1000, 1000.0, now=0.0)
    for u in VERTICES:
        for v in VERTICES:
            if u != v and memory.entry(u, v) is None:
                memory.observe(u, v, 1000, 1000.0, now=0.0)
    return memory


def warm(config: SchedulerConfig, memory: EdgeMemory | None = None) -> tuple[tuple[str, ...], ...]:
    memory = memory if memory is not None else remembered()
    scheduler = PathScheduler(VERTICES, "src", "dst", memory, config, rtt_s=RTT, peer_rtt_s=PEERS)
    return scheduler.start(0.0).all_paths


def test_a_warm_start_runs_beside_direct_the_path_off_its_route_not_the_wider_one_on_it() -> None:
    assert warm(HAND) == (DIRECT, VIA_OFF)
    assert warm(replace(HAND, route_guess=False)) == (DIRECT, VIA_ON)  # as before: kept apart by overlay edges


def test_without_the_depots_round_trips_nothing_is_guessed() -> None:
    scheduler = PathScheduler(VERTICES, "src", "dst", remembered(), HAND, rtt_s=RTT)
    assert scheduler.start(0.0).all_paths == (DIRECT, VIA_ON)


def without_off() -> EdgeMemory:
    """Nothing apart from direct's links: a second path goes through ``on``, or there is none."""
    return remembered({DIRECT: 100, VIA_ON: 90})


def test_a_path_over_the_set_s_links_joins_when_its_share_adds_the_margin() -> None:
    assert warm(HAND, without_off()) == (DIRECT, VIA_ON)  # half of 90 still adds 20% of 100; its trial judges
    strict = replace(HAND, path_margin=0.5)  # 45 does not add half of 100; 90 would
    assert warm(strict, without_off()) == (DIRECT,)
    assert warm(replace(strict, route_guess=False), without_off()) == (DIRECT, VIA_ON)


def test_an_edge_over_the_links_of_k_paths_is_weighed_at_its_share_of_them() -> None:
    graph = nx.DiGraph()
    for edge, rate in {DIRECT: 100.0, ("src", "on"): 90.0, ("on", "dst"): 60.0, ("src", "off"): 80.0}.items():
        graph.add_edge(*edge, **{THROUGHPUT: rate})
    graph.add_edge("off", "dst")  # unknown: nothing to share
    shared = guess().beside(graph, [DIRECT])
    assert shared.edges["src", "on"][THROUGHPUT] == 45.0
    assert shared.edges["on", "dst"][THROUGHPUT] == 30.0
    assert shared.edges["src", "off"][THROUGHPUT] == 80.0  # off direct's way: whole
    assert shared.edges[DIRECT][THROUGHPUT] == 100.0  # the set's own hop
    assert THROUGHPUT not in shared.edges["off", "dst"]
    assert graph.edges["src", "on"][THROUGHPUT] == 90.0  # the graph given is not changed
    # over the links of two of the paths: a third of its weight
    routes = RouteGuess("src", {**RTT, "x": 0.010}, {**PEERS, ("x", "on"): 0.015, ("x", "dst"): 0.050})
    assert routes.beside(graph, [DIRECT, ("src", "x", "on")]).edges["src", "on"][THROUGHPUT] == 30.0
