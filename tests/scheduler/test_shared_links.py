"""The measurement model on a network whose overlay edges share physical links.

Every weight the scheduler compares is the rate this transfer would get on an edge at its own number of streams
per hop: a per-stream rate (bytes over the seconds each copy took) times ``streams``. These tests run the loop
against ``abilene_shared()``, the emulated Abilene testbed as physical links, where the direct route and every
chain share the backbone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from lnet.scheduler import EdgeMemory, Event, Measurement, PathScheduler, ProbeDone, SchedulerConfig, Switch
from lnet.scheduler.simulator import (
    RTT_BIAS,
    RTT_HOST_S,
    TWO_ROUTES,
    DegradeLink,
    SimNetwork,
    SimResult,
    abilene_shared,
    mbit,
    simulate_pinned,
    simulate_transfer,
    two_routes,
)

CHAIN = ("ornl", "atl", "ind", "kc", "den", "svl")
WARM_PROBES = SchedulerConfig(streams=2, warm_probes_after_s=0.0, probes_per_round=1)
"""Two streams a hop, one probe at a time, from the first second of a warm start too."""


def test_streams_share_a_link_max_min_fairly_within_their_own_caps() -> None:
    network = SimNetwork(
        ("a", "b", "c"),
        {("a", "b"): 5.0, ("b", "a"): 5.0, ("a", "c"): 100.0, ("c", "a"): 100.0, ("b", "c"): 100.0, ("c", "b"): 1.0},
        links={"x": 20.0},
        routes={("a", "b"): ("x",), ("a", "c"): ("x",)},
    )
    shares = network.share({("a", "b"): 2, ("a", "c"): 1, ("b", "c"): 3}, 0.0)
    # a-b's two streams stop at their own 5 each; a-c takes what is left of x; b-c shares nothing.
    assert shares == {
        ("a", "b"): pytest.approx(10.0), ("a", "c"): pytest.approx(10.0), ("b", "c"): pytest.approx(300.0)
    }
    assert network.share({("a", "c"): 4}, 0.0) == {("a", "c"): pytest.approx(20.0)}


def test_a_full_link_favours_streams_of_short_round_trips_in_inverse_proportion() -> None:
    # bench/rtt_sharing.py measured the testbed's TCP: a stream's part of a full link goes as 1 / its round trip.
    host = sum(RTT_HOST_S) / 2
    network = SimNetwork(
        ("a", "b", "c"),
        {("a", "c"): 100.0, ("c", "a"): 100.0, ("b", "c"): 100.0, ("c", "b"): 100.0, ("a", "b"): 1.0,
         ("b", "a"): 1.0},
        links={"x": 30.0},
        routes={("a", "c"): ("x",), ("b", "c"): ("x",)},
        rtts={("a", "c"): 0.010, ("b", "c"): 0.040},
    )
    assert network.rtt_bias == RTT_BIAS == 1.0
    shares = network.share({("a", "c"): 2, ("b", "c"): 2}, 0.0)
    assert shares[("a", "c")] + shares[("b", "c")] == pytest.approx(30.0)
    assert shares[("a", "c")] / shares[("b", "c")] == pytest.approx((0.040 + host) / (0.010 + host))
    # A short stream held below its part by its own cap leaves the rest to the long one.
    capped = replace(network, capacities={**network.capacities, ("a", "c"): 4.0})
    assert capped.share({("a", "c"): 2, ("b", "c"): 2}, 0.0) == {
        ("a", "c"): pytest.approx(8.0), ("b", "c"): pytest.approx(22.0)
    }
    # Plain max-min: every stream alike; and a network without round trips has nothing to weigh.
    even = replace(network, rtt_bias=0.0).share({("a", "c"): 2, ("b", "c"): 2}, 0.0)
    assert even == {("a", "c"): pytest.approx(15.0), ("b", "c"): pytest.approx(15.0)}
    assert replace(network, rtts={}).share({("a", "c"): 2, ("b", "c"): 2}, 0.0) == even


def test_a_link_event_changes_what_its_streams_share_from_its_time_on() -> None:
    network = SimNetwork(
        ("a", "b"), {("a", "b"): 100.0, ("b", "a"): 100.0}, links={"x": 40.0}, routes={("a", "b"): ("x",)},
        events=(DegradeLink(10.0, "x", 8.0), DegradeLink(20.0, "x", 40.0)),
    )
    assert network.share({("a", "b"): 4}, 9.9)[("a", "b")] == pytest.approx(40.0)
    assert network.share({("a", "b"): 4}, 10.0)[("a", "b")] == pytest.approx(8.0)
    assert network.share({("a", "b"): 4}, 20.0)[("a", "b")] == pytest.approx(40.0)
    with pytest.raises(ValueError, match="links the network does not have"):
        replace(network, events=(DegradeLink(1.0, "y", 1.0),))


def test_a_pinned_run_keeps_its_paths_and_gets_what_they_carry_together() -> None:
    network = two_routes()
    result = simulate_pinned(network, TWO_ROUTES[:2], streams=2, duration_s=60.0)
    assert {s.paths for s in result.samples} == {TWO_ROUTES[:2]}
    assert result.decisions == []
    assert result.attempts == []
    # Physically disjoint: the two routes' 20 and 18 Mbit/s add up once the hops have ramped up.
    assert result.mean_rate(30.0) == pytest.approx(mbit(38.0))


def test_the_emulated_abilene_has_the_testbeds_numbers() -> None:
    network = abilene_shared(noise=0.0)
    assert network.capacities[("ornl", "svl")] * 8 / 1e6 == pytest.approx(5.12)  # 40 KiB over 64 ms
    assert network.capacities[("den", "svl")] * 8 / 1e6 == pytest.approx(11.70, abs=0.01)  # 40 KiB over 28 ms
    assert set(network.routes[("ornl", "svl")]) >= {"den>svl", "ind>kc"}  # direct crosses the chain's links
    # Two streams a hop: the direct route is window-limited at 10.2, the chain fills Denver-Sunnyvale at 20.
    assert network.share({("ornl", "svl"): 2}, 0.0)[("ornl", "svl")] * 8 / 1e6 == pytest.approx(10.24)
    assert network.share({("den", "svl"): 2}, 0.0)[("den", "svl")] * 8 / 1e6 == pytest.approx(20.0)


def test_weights_are_per_stream_rates_times_the_streams_per_hop() -> None:
    memory = EdgeMemory()
    scheduler = PathScheduler(["s", "a", "d"], "s", "d", memory, SchedulerConfig(streams=4, probes_per_round=0))
    scheduler.start(0.0)
    # Two copies at once for 1 s each moved 200 bytes: 100 per stream-second, whatever ran beside them.
    scheduler.measure(Measurement(("s", "d"), 200, 2.0, 5.0))
    assert memory.estimate("s", "d") == 100.0
    assert scheduler.graph().edges["s", "d"]["throughput"] == 400.0


def test_a_hop_run_at_its_own_depth_weighs_its_aggregate() -> None:
    # The default in-flight rule: up to 16 a hop, but this one filled its link with 2 (each at 100 bytes/s).
    memory = EdgeMemory()
    scheduler = PathScheduler(["s", "a", "d"], "s", "d", memory, SchedulerConfig(streams=16, probes_per_round=0))
    scheduler.start(0.0)
    scheduler.measure(Measurement(("s", "d"), 200, 2.0, 5.0, streams=2.0))  # copies of 1 s from 3 s on
    assert scheduler.graph().edges["s", "d"]["throughput"] == pytest.approx(200.0)  # not 16 x 100
    scheduler.measure(Measurement(("s", "a"), 1600, 16.0, 6.0, streams=16.0))  # at the most: 16 x per stream
    assert scheduler.graph().edges["s", "a"]["throughput"] == pytest.approx(1600.0)
    with pytest.raises(ValueError, match="streams"):
        Measurement(("s", "d"), 200, 2.0, 5.0, streams=0.0)


def test_a_hop_starved_of_work_only_raises_its_estimate() -> None:
    # The transfer's tail: the hop runs 1 copy of its 8 for want of blocks. Its aggregate then is what it was
    # given, not what it carries: learnt where it raises the estimate, never where it lowers it.
    memory = EdgeMemory()
    scheduler = PathScheduler(["s", "a", "d"], "s", "d", memory, SchedulerConfig(streams=16, probes_per_round=0))
    scheduler.start(0.0)
    scheduler.measure(Measurement(("s", "d"), 800, 8.0, 5.0, streams=8.0, began=4.0))  # 8 at once, 100 B/s each
    assert scheduler.graph().edges["s", "d"]["throughput"] == pytest.approx(800.0)
    scheduler.measure(Measurement(("s", "d"), 100, 1.0, 6.0, streams=1.0, starved=True))
    assert scheduler.graph().edges["s", "d"]["throughput"] == pytest.approx(800.0)  # not pulled towards 100
    scheduler.measure(Measurement(("s", "d"), 1000, 1.0, 7.0, streams=1.0, starved=True))
    assert scheduler.graph().edges["s", "d"]["throughput"] > 800.0  # 1000 bytes/s from one copy: more than known
    scheduler.measure(Measurement(("s", "a"), 100, 1.0, 8.0, streams=1.0, starved=True))
    assert scheduler.graph().edges["s", "a"]["throughput"] == pytest.approx(100.0)  # nothing known: a floor is news


def narrow_chain_wide_direct() -> SimNetwork:
    """Direct: 1.25 Mbit/s a stream (its window) on a 30 Mbit/s link, so 16 streams get 20. The chain s -> a -> d:
    6 Mbit/s a stream on 10 Mbit/s links, full with 2 streams. At up to 16 a hop, direct is twice the chain."""
    vertices = ("s", "a", "d")
    capacities = {(u, v): mbit(1.0) for u in vertices for v in vertices if u != v}
    capacities.update({("s", "d"): mbit(1.25), ("s", "a"): mbit(6.0), ("a", "d"): mbit(6.0)})
    return SimNetwork(
        vertices, capacities, links={"sd": mbit(30), "sa": mbit(10), "ad": mbit(10)},
        routes={("s", "d"): ("sd",), ("s", "a"): ("sa",), ("a", "d"): ("ad",)},
    )


def _untold(measure: Callable[[Event], None]) -> Callable[[Event], None]:
    return lambda e: measure(replace(e, streams=None) if isinstance(e, Measurement) else e)


def cold_then_warm(*, depths_told: bool) -> tuple[SimResult, SimResult]:
    memory = EdgeMemory()
    runs = []
    for seed in (0, 1):
        config = SchedulerConfig(streams=16, min_streams=2, probes_per_round=1, probe_s=3.0)  # as lnet-send
        scheduler = PathScheduler(["s", "a", "d"], "s", "d", memory, config)
        if not depths_told:  # the engine before this model: per-stream figures, however many copies ran
            scheduler.measure = _untold(scheduler.measure)  # type: ignore[method-assign]
        runs.append(simulate_transfer(narrow_chain_wide_direct(), scheduler, duration_s=120.0, seed=seed,
                                      depth="adaptive"))
    return runs[0], runs[1]


def test_at_the_default_depth_rule_a_chain_full_at_two_streams_is_left_for_the_wider_direct_route() -> None:
    cold, warm = cold_then_warm(depths_told=True)
    # The chain's probes: 6 a stream, 12 at the two copies every hop runs (its ceiling), under direct's 20. With
    # 16 of them as the ceiling (96) the cold start went there for 10 s and came back.
    assert [a.path for a in cold.attempts] == [("s", "d")]
    assert [a.path for a in warm.attempts] == [("s", "d")]
    assert warm.mean_rate(0.0) > mbit(19)


def test_per_stream_figures_times_the_most_streams_kept_the_transfer_on_the_narrow_chain() -> None:
    # 2 streams filling 10 Mbit/s read as 5 each, times 16: the chain weighed 80, and the warm start began there.
    cold, warm = cold_then_warm(depths_told=False)
    assert cold.final_path == ("s", "a", "d")
    assert [a.path for a in warm.attempts] == [("s", "a", "d")]
    assert warm.mean_rate(0.0) < mbit(10.5)


def test_at_the_default_depth_rule_a_probe_is_a_floor_and_a_cold_start_does_not_wander() -> None:
    # One probe stream times 16 made every probed path look far wider than the measured direct route: a cold
    # start on the simulated Abilene moved 6 to 8 times in 120 s (via New York and Washington too) and averaged
    # 16.8 of 20 Mbit/s. A probe's stream is a floor, 16 of them its ceiling, tried once.
    network = abilene_shared()
    config = SchedulerConfig(streams=16, min_streams=2, probes_per_round=1, probe_s=3.0)
    scheduler = PathScheduler(list(network.vertices), "ornl", "svl", EdgeMemory(), config,
                              rtt_s=network.rtts_from("ornl"))
    result = simulate_transfer(network, scheduler, duration_s=120.0, depth="adaptive")
    assert len(result.attempts) <= 2
    assert result.mean_rate(0.0) >= 0.95 * mbit(20)


def test_a_probe_at_the_default_depth_rule_weighs_its_stream_with_the_fewest_copies_as_its_ceiling() -> None:
    memory = EdgeMemory()
    config = SchedulerConfig(streams=16, min_streams=2, probes_per_round=1)
    scheduler = PathScheduler(["s", "a", "d"], "s", "d", memory, config)
    first = scheduler.start(0.0)
    assert first.probes
    edge = first.probes[0]
    scheduler.measure(Measurement(edge, 300, 3.0, 4.0, streams=1.0))  # one stream at 100 bytes/s
    assert scheduler.graph().edges[edge]["throughput"] == pytest.approx(100.0)
    entry = memory.entry(*edge)
    assert entry is not None
    assert entry.ceiling_bps is not None
    assert entry.ceiling_bps * 16 == pytest.approx(200.0)  # 2 copies, if the link holds them; not 16
    # An engine that runs one copy a hop at the least (min_streams 1) gets no ceiling from the depth rule.
    plain = EdgeMemory()
    one = PathScheduler(["s", "a", "d"], "s", "d", plain, SchedulerConfig(streams=16, probes_per_round=1))
    one.start(0.0)
    one.measure(Measurement(edge, 300, 3.0, 4.0, streams=1.0))
    assert plain.entry(*edge) is not None
    assert plain.entry(*edge).ceiling_bps is None  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="min_streams"):
        SchedulerConfig(streams=2, min_streams=3)


def test_at_the_default_depth_rule_a_slow_link_is_not_a_lure() -> None:
    # The emulated Abilene, lnet-send's default rule: Washington -> Denver carries 3.5 Mbit/s, and its probe's one
    # stream read 4. Sixteen of them (64) made a warm start try Atlanta, Washington, Denver over the 15 Mbit/s it
    # ran at; its blocks then sat 16 deep on the slow link past the copy timeout. At two copies (8) it is no lure.
    memory = EdgeMemory()
    for (u, v), mbps in {("s", "a"): 40.0, ("a", "d"): 15.0, ("a", "w"): 30.0}.items():
        memory.observe(u, v, mbit(mbps) / 16, 1.0, 0.0)  # as aggregates spread over the 16 streams
    config = SchedulerConfig(streams=16, min_streams=2, warm_probes_after_s=0.0, probes_per_round=1)
    scheduler = PathScheduler(["s", "a", "w", "d"], "s", "d", memory, config)
    assert scheduler.start(0.0).path == ("s", "a", "d")
    scheduler._probe_plan.since[("w", "d")] = 0.0  # the probe the engine ran
    scheduler.measure(Measurement(("w", "d"), round(mbit(4.0) * 3), 3.0, 4.0, streams=1.0))
    slow = {("s", "d"): 2.0, ("w", "d"): 4.0}  # what one stream of each gets; more get no more (narrow links)
    deep: set[tuple[str, str]] = set()
    for t in range(5, 30, 5):
        decision = scheduler.tick(float(t))
        assert decision.path == ("s", "a", "d")
        deep |= set(decision.deep)
        for edge in decision.probes:  # the engine answers each probe: a deep one stops at one copy, no gain
            scheduler.measure(Measurement(edge, round(mbit(slow[edge]) * 3), 3.0, t + 3.0, streams=1.0))
            scheduler.measure(ProbeDone(edge, t + 3.0))
    assert len(scheduler.attempts) == 1
    assert deep == {("s", "d"), ("w", "d")}  # 16 of their one stream would have beaten the path: asked deep, once
    # And a window-limited edge whose two copies clearly beat the path is tried, once, as a ceiling.
    memory.forget("w", "d")
    scheduler._probe_plan.since[("w", "d")] = 30.0
    scheduler.measure(Measurement(("w", "d"), round(mbit(12.0) * 3), 3.0, 33.0, streams=1.0))
    decision = scheduler.tick(35.0)
    assert decision.path == ("s", "a", "w", "d")
    assert scheduler.attempts[-1].reason == "explore"


def cold_start(
    *, streams: int, measure: str, scheduler_streams: int, probes: int, rtts: bool, rtt_bias: float = RTT_BIAS
) -> list[tuple[str, ...]]:
    network = replace(abilene_shared(), rtt_bias=rtt_bias)
    config = SchedulerConfig(streams=scheduler_streams, probes_per_round=probes, probe_s=3.0)
    rtt = network.rtts_from("ornl") if rtts else None
    scheduler = PathScheduler(list(network.vertices), "ornl", "svl", EdgeMemory(), config, rtt_s=rtt)
    result = simulate_transfer(network, scheduler, duration_s=90.0, streams=streams, measure=measure)  # type: ignore[arg-type]
    return [a.path for a in result.attempts]


def test_a_cold_start_on_shared_abilene_leaves_the_direct_route_for_the_four_depot_chain() -> None:
    paths = cold_start(streams=2, measure="stream", scheduler_streams=2, probes=1, rtts=True)
    assert paths[0] == ("ornl", "svl")
    assert paths[-1] == CHAIN


def test_the_old_measurements_kept_the_transfer_on_the_direct_route() -> None:
    # The old convention: a hop reported its aggregate over the time it was busy (two streams), a probe its one
    # stream, eight probes at once beside the transfer. Every chain looked slower than direct. (On the simulator
    # of the time, which shared a full link max-min: a probe's short stream beside direct's long ones now gets
    # more than its even part, which hides the convention's fault.)
    paths = cold_start(streams=2, measure="busy", scheduler_streams=1, probes=8, rtts=False, rtt_bias=0.0)
    assert paths == [("ornl", "svl")]


def test_with_many_streams_a_hop_the_direct_route_fills_the_shared_link_and_nothing_is_lost() -> None:
    # At 16 streams a hop the direct route fills Denver-Sunnyvale too: no chain can beat it. Shared max-min, no
    # chain is taken. Shared as TCP does, a probe's stream on the short last hop gets more than each of direct's
    # long ones, so a chain may look better and be taken: it carries as much, and the transfer loses nothing.
    assert cold_start(streams=16, measure="stream", scheduler_streams=16, probes=1, rtts=True, rtt_bias=0.0) == [
        ("ornl", "svl")
    ]
    network = abilene_shared()
    config = SchedulerConfig(streams=16, probes_per_round=1, probe_s=3.0)
    scheduler = PathScheduler(list(network.vertices), "ornl", "svl", EdgeMemory(), config,
                              rtt_s=network.rtts_from("ornl"))
    result = simulate_transfer(network, scheduler, duration_s=90.0, streams=16)
    direct = simulate_pinned(network, [("ornl", "svl")], duration_s=90.0, streams=16)
    assert result.mean_rate(0.0) >= 0.98 * direct.mean_rate(0.0)


def probing_beside(direct_per_stream_mbit: float) -> tuple[PathScheduler, EdgeMemory]:
    memory = EdgeMemory()
    memory.observe("s", "b", mbit(100), 1.0, 0.0)
    memory.observe("s", "d", mbit(direct_per_stream_mbit), 1.0, 0.0)
    config = SchedulerConfig(
        streams=2, warm_probes_after_s=0.0, probes_per_round=1, reevaluate_s=100.0, min_attempt_s=200.0
    )
    scheduler = PathScheduler(["s", "b", "d"], "s", "d", memory, config)
    assert scheduler.start(0.0).probes == (("b", "d"),)
    return scheduler, memory


def test_a_probe_that_slows_the_transfer_down_stands_for_the_share_it_would_free() -> None:
    scheduler, memory = probing_beside(10.0)
    # While it runs, the path's streams fall from 10 to 6 each and the probe's one stream gets 6: they share
    # a link of 18, and the transfer moved over would have all of it.
    for t in (2.5, 3.0, 3.5, 4.0, 4.5, 5.0):
        scheduler.measure(Measurement(("s", "d"), round(mbit(6) * 0.5), 0.5, t))
    scheduler.measure(Measurement(("b", "d"), round(mbit(6)), 1.0, 5.0))
    scheduler.measure(ProbeDone(("b", "d"), 5.0))
    estimate = memory.estimate("b", "d")
    assert estimate is not None
    assert mbit(9.0) < estimate < mbit(10.5)  # (6 + 2 x ~6.9) / 2 a stream, not 6


def test_a_probe_that_slows_nothing_is_taken_as_it_is() -> None:
    scheduler, memory = probing_beside(10.0)
    for t in (2.5, 3.0, 3.5, 4.0, 4.5, 5.0):
        scheduler.measure(Measurement(("s", "d"), round(mbit(10) * 0.5), 0.5, t))
    scheduler.measure(Measurement(("b", "d"), round(mbit(6)), 1.0, 5.0))
    assert memory.estimate("b", "d") == pytest.approx(mbit(6), rel=1e-6)


@pytest.mark.parametrize(("rtt", "first"), [({"z": 0.035, "a": 0.020, "d": 0.040}, ("s", "a")), (None, ("s", "z"))])
def test_round_trips_send_exploration_towards_the_destination_first(
    rtt: dict[str, float] | None, first: tuple[str, str]
) -> None:
    # Depot a lies half way to d (20 of the 40 ms), z far out (35 ms, so its hop from the source is long): with
    # the client's round trips the path through a is the promising one; without them the vertex order decides.
    memory = EdgeMemory()
    memory.observe("s", "d", 1000, 1.0, 0.0)
    config = SchedulerConfig(streams=2, warm_probes_after_s=0.0, probes_per_round=1)
    scheduler = PathScheduler(["s", "z", "a", "d"], "s", "d", memory, config, rtt_s=rtt)
    assert scheduler.start(0.0).probes == (first,)


def probing_into_the_destination(truth_per_stream_mbit: float) -> tuple[PathScheduler, EdgeMemory, list[object]]:
    """s -> d runs at 2 window-limited streams of 6; s -> b is wide and measured; b -> d is probed beside
    the transfer, gets 6.3 (the leftover of a shared link of 18.3, or its own rate) and slows nothing."""
    memory = EdgeMemory()
    memory.observe("s", "d", mbit(6), 1.0, 0.0)
    memory.observe("s", "b", mbit(40), 1.0, 0.0)
    config = SchedulerConfig(streams=2, warm_probes_after_s=0.0, probes_per_round=1)
    scheduler = PathScheduler(["s", "b", "d"], "s", "d", memory, config)
    decisions: list[object] = [scheduler.start(0.0)]
    assert decisions[0].probes == (("b", "d"),)  # type: ignore[attr-defined]
    for t in (2.5, 3.0, 3.5, 4.0, 4.5, 5.0):
        scheduler.measure(Measurement(("s", "d"), round(mbit(6) * 0.5), 0.5, t))
    scheduler.measure(Measurement(("b", "d"), round(mbit(6.3) * 3), 3.0, 5.0))
    scheduler.measure(ProbeDone(("b", "d"), 5.0))
    t = 5.0
    while t < 40.0:
        t += 0.5
        decision = scheduler.tick(t)
        decisions.append(decision)
        rate = truth_per_stream_mbit if scheduler.current_path == ("s", "b", "d") else 6.0
        for edge in zip(scheduler.current_path, scheduler.current_path[1:], strict=False):  # type: ignore[arg-type]
            per = rate if edge == ("b", "d") or edge == ("s", "d") else 40.0
            scheduler.measure(Measurement(edge, round(mbit(per) * 0.5), 0.5, t))
    return scheduler, memory, decisions


def test_a_probe_beside_a_window_limited_hop_into_the_same_host_is_a_floor_tried_once() -> None:
    # Before ceilings the probe's 6.3 a stream (12.6) was taken as the edge's rate, under direct's 12 plus the
    # hysteresis: the path through b was never tried, as on the emulated Abilene where Denver -> Sunnyvale was probed
    # beside the transfer's streams into Sunnyvale.
    scheduler, memory, _ = probing_into_the_destination(9.15)
    attempts = scheduler.attempts
    assert [a.path for a in attempts] == [("s", "d"), ("s", "b", "d")]
    assert attempts[1].reason == "explore"
    entry = memory.entry("b", "d")
    assert entry is not None
    assert entry.ceiling_bps is None  # the transfer's own samples replaced the floor
    assert memory.estimate("b", "d") == pytest.approx(mbit(9.15), rel=0.02)


def test_a_path_tried_on_a_ceiling_that_does_not_hold_is_left_and_ceilings_end() -> None:
    # b -> d was the probe's own rate after all (nothing shared): the path is left for direct, and from then on
    # this transfer takes floors as they are.
    scheduler, memory, _ = probing_into_the_destination(3.0)
    assert [a.path for a in scheduler.attempts] == [("s", "d"), ("s", "b", "d"), ("s", "d")]
    memory.observe("b", "d", mbit(6.3), 1.0, 41.0, ceiling_bps=mbit(9.15))
    graph = scheduler.graph()
    assert scheduler.with_ceilings(graph) is None


def test_a_warm_start_from_a_floor_with_a_ceiling_starts_on_it() -> None:
    # What a cold start leaves when it never moved onto b: b -> d's probe figure and its ceiling.
    memory = EdgeMemory()
    memory.observe("s", "d", mbit(6), 1.0, 0.0)
    memory.observe("s", "b", mbit(40), 1.0, 0.0)
    memory.observe("b", "d", mbit(6.3), 1.0, 0.0, ceiling_bps=mbit(9.15))
    scheduler = PathScheduler(["s", "b", "d"], "s", "d", memory, WARM_PROBES)
    first = scheduler.start(0.0)
    assert first.path == ("s", "b", "d")
    assert scheduler.explorations == 1
    # Without the ceiling it starts on the measured best, direct.
    plain = EdgeMemory()
    plain.observe("s", "d", mbit(6.5), 1.0, 0.0)
    plain.observe("s", "b", mbit(40), 1.0, 0.0)
    plain.observe("b", "d", mbit(6.3), 1.0, 0.0)
    assert PathScheduler(["s", "b", "d"], "s", "d", plain, SchedulerConfig(streams=2)).start(0.0).path == ("s", "d")


def _b_to_d_probed_as_a_floor(known: dict[tuple[str, str], float], vertices: list[str]) -> PathScheduler:
    """A scheduler on s -> d (6 Mbit/s a stream) whose first probe, b -> d, read 6.3 beside it at 5 s: a floor
    with a ceiling that makes s -> b -> d worth a try (``known``: the other remembered edges, Mbit/s a stream)."""
    memory = EdgeMemory()
    for edge, rate in {("s", "d"): 6, **known}.items():
        memory.observe(*edge, mbit(rate), 1.0, 0.0)
    config = SchedulerConfig(streams=2, warm_probes_after_s=0.0, probes_per_round=1)
    scheduler = PathScheduler(vertices, "s", "d", memory, config)
    assert scheduler.start(0.0).probes == (("b", "d"),)
    for t in (2.5, 3.0, 3.5, 4.0, 4.5, 5.0):
        scheduler.measure(Measurement(("s", "d"), round(mbit(6) * 0.5), 0.5, t))
    scheduler.measure(Measurement(("b", "d"), round(mbit(6.3) * 3), 3.0, 5.0))
    scheduler.measure(ProbeDone(("b", "d"), 5.0))
    entry = memory.entry("b", "d")
    assert entry is not None
    assert entry.ceiling_bps is not None
    return scheduler


def test_no_path_is_tried_on_a_ceiling_while_a_probe_may_show_a_wider_measured_one() -> None:
    # As in probing_into_the_destination, b -> d is a floor with a ceiling that makes s -> b -> d worth a try;
    # but a -> d, probed next, may still show s -> a -> d (s -> a at 40) wider than that ceiling. The probe ends
    # in seconds, the trial would take min_attempt_s: the loop waits for the probe (on the emulated lossy
    # topology cold starts spent 10 s on such a trial while the chain's last probes ran).
    scheduler = _b_to_d_probed_as_a_floor({("s", "b"): 40, ("s", "a"): 40}, ["s", "b", "a", "d"])
    assert scheduler.tick(5.0).probes == (("a", "d"),)
    t = 5.0
    while t < 12.0:
        t += 0.5
        scheduler.measure(Measurement(("s", "d"), round(mbit(6) * 0.5), 0.5, t))
        decision = scheduler.tick(t)
        assert scheduler.current_path == ("s", "d"), decision  # not s -> b -> d at 10 s, as before
    scheduler.measure(Measurement(("a", "d"), round(mbit(30) * 4), 4.0, 12.5))
    scheduler.measure(ProbeDone(("a", "d"), 12.5))
    decision = scheduler.tick(12.5)
    assert isinstance(decision, Switch)
    assert decision.path == ("s", "a", "d")
    assert scheduler.explorations == 0


def test_a_probe_counts_against_a_ceiling_only_through_ways_the_running_probes_can_complete() -> None:
    # b -> d is a floor whose ceiling makes s -> b -> d worth a try, as above. The probe running beside it, a -> c,
    # could show a wider measured path only with c -> d, which no probe is measuring: it would take another probe
    # after this one. So the trial on the ceiling is not held back (on the emulated Abilene such probes, one after
    # another, held the chain's trial back for a whole 96 MiB cold start).
    known = {("s", "b"): 40, ("s", "a"): 40, ("s", "c"): 3, ("a", "d"): 3, ("a", "b"): 3, ("b", "a"): 3,
             ("b", "c"): 3, ("c", "b"): 3, ("c", "a"): 3}
    scheduler = _b_to_d_probed_as_a_floor(known, ["s", "b", "a", "c", "d"])
    assert scheduler.tick(5.0).probes == (("a", "c"),)
    t, switch = 5.0, None
    while t < 12.0 and switch is None:
        t += 0.5
        scheduler.measure(Measurement(("s", "d"), round(mbit(6) * 0.5), 0.5, t))
        decision = scheduler.tick(t)
        switch = decision if isinstance(decision, Switch) else None
    assert switch is not None  # while the probe of a -> c still runs (the engine has not answered it)
    assert switch.path == ("s", "b", "d")
    assert switch.reason == "explore"
    assert t == 10.0  # the first re-evaluation after min_attempt_s
