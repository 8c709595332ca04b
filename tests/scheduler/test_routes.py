"""Routes guessed from round trips (theory of operation, 17): a vertex whose round trips to a hop's ends add up to
the hop's own is on its route, and when newcomers judged together took rate from the set, the loss is theirs that
the round trips place on the set's links (``_routes.RouteGuess``, ``SchedulerConfig.route_blame``)."""

from __future__ import annotations

from dataclasses import replace

from lnet.scheduler import EdgeMemory, Measurement, PathScheduler, SchedulerConfig, Switch
from lnet.scheduler._paths import taken_shares, trial_keeps
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
    assert not routes.crosses(VIA_ON, [DIRECT])


def test_a_path_crosses_paths_when_a_hop_of_it_shares_a_stretch_with_one_of_theirs() -> None:
    routes = guess()
    assert routes.crosses(VIA_ON, [DIRECT])
    assert not routes.crosses(VIA_OFF, [DIRECT])
    assert routes.crosses(DIRECT, [VIA_OFF, VIA_ON])
    assert not routes.crosses(VIA_ON, [])


# -- sharing a trial's loss -----------------------------------------------------------------------------------


def test_a_loss_is_shared_among_the_newcomers_on_the_set_s_links_where_some_are_and_some_are_not() -> None:
    # b ran at its prediction on the set's links; c fell short of its own on a route of its own
    rates, predicted = [50.0, 50.0], [50.0, 80.0]
    assert taken_shares(40.0, rates, predicted) == [0.0, 40.0]  # by shortfall alone: c
    assert taken_shares(40.0, rates, predicted, [True, False]) == [40.0, 0.0]
    assert taken_shares(40.0, [50.0, 30.0, 20.0], [50.0, 40.0, 80.0], [True, True, False]) == [0.0, 40.0, 0.0]


def test_the_round_trips_change_nothing_where_all_or_none_cross_or_the_others_gained() -> None:
    rates, predicted = [50.0, 50.0], [50.0, 80.0]
    for crossing in ([True, True], [False, False], None):
        assert taken_shares(40.0, rates, predicted, crossing) == [0.0, 40.0]
    assert taken_shares(-20.0, rates, predicted, [True, False]) == [0.0, -20.0]
    # a crossing newcomer that never reported took nothing: the loss is shared as if nothing were known
    assert taken_shares(40.0, [0.0, 50.0], predicted, [True, False]) == [0.0, 40.0]


def test_trial_keeps_drops_the_newcomer_that_crossed_not_the_one_that_fell_short_on_its_own() -> None:
    rates, predicted = [50.0, 50.0], [50.0, 80.0]
    assert trial_keeps(100.0, 60.0, rates, predicted, 0.2) == [True, False]
    assert trial_keeps(100.0, 60.0, rates, predicted, 0.2, [True, False]) == [False, True]


# -- in the decision loop -------------------------------------------------------------------------------------

# s -- a -- d, with b behind a (its hops to s and to d pass a) and c on a route of its own.
LOOP_RTT = {"a": 0.020, "b": 0.030, "c": 0.025, "d": 0.050}
LOOP_PEERS = {("a", "d"): 0.030, ("a", "b"): 0.010, ("b", "d"): 0.040, ("c", "d"): 0.025, ("a", "c"): 0.040,
              ("b", "c"): 0.045}
A, B, C = ("s", "a", "d"), ("s", "b", "d"), ("s", "c", "d")
THREE = SchedulerConfig(
    reevaluate_s=5.0, min_attempt_s=10.0, warmup_s=2.0, probes_per_round=0, max_paths=3, path_margin=0.2
)


def judged(config: SchedulerConfig) -> tuple[tuple[str, ...], ...]:
    memory = EdgeMemory()
    rates = {A: 100, B: 50, C: 80}
    vertices = ["s", "a", "b", "c", "d"]
    for u in vertices:
        for v in vertices:
            if u != v:
                rate = next((r for path, r in rates.items() if (u, v) in zip(path, path[1:], strict=False)), 1)
                memory.observe(u, v, rate * 1000, 1000.0, now=0.0)
    scheduler = PathScheduler(vertices, "s", "d", memory, config, rtt_s=LOOP_RTT, peer_rtt_s=LOOP_PEERS)
    assert scheduler.start(0.0).all_paths == (A, C, B)  # a warm start: all three at once, on one trial
    t = 0.0
    while t < 10.0:  # a lost 40 to b, which runs at its prediction; c runs 30 short of its own
        for path, rate in {A: 60, B: 50, C: 50}.items():
            for edge in zip(path, path[1:], strict=False):
                scheduler.measure(Measurement(edge, rate, 1.0, t + 1.0))
        t += 1.0
    decision = scheduler.tick(10.0)
    assert isinstance(decision, Switch)
    assert decision.reason == "drop"
    return decision.all_paths


def test_a_trial_drops_the_newcomer_the_round_trips_place_on_the_primary_s_links() -> None:
    assert judged(THREE) == (A, C)
    assert judged(replace(THREE, route_blame=False)) == (A, B)  # before: c, the one short of its prediction
