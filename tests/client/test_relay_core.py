"""The relay's engine without trio or a network: routing, the block ledger, the windows and the end game, each fed
``now`` by the test (``lnet.client.engines.relay_core``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import pytest

from lnet.client.engines.relay_core import (
    Block,
    CopyMark,
    NextHop,
    PathChanged,
    PathShares,
    RelayEngine,
    Stuck,
    inflight_for,
)

MiB = 1024 * 1024
HERE, DST = "here", "dst"
VIA_A = (HERE, "a", DST)
VIA_B = (HERE, "b", DST)
DIRECT = (HERE, DST)


@dataclass(frozen=True)
class Rules:
    """The engine's part of ``RelayConfig``, with its defaults."""

    block_size: int = MiB
    window_block: int | None = None
    min_inflight: int = 2
    max_inflight: int = 16
    initial_inflight: int = 4
    lane_extra: int = 2
    timeout_s: float = 30.0
    tick_s: float = 0.5
    path_window_s: float = 5.0
    end_game: bool = True


def engine(
    *paths: tuple[str, ...], rates: Sequence[float] = (), rules: Rules | None = None,
    widest: dict[str, list[str]] | None = None,
) -> RelayEngine[str]:
    """An engine running ``paths`` (the first the primary) with those predicted rates; ``widest``: what the
    scheduler's widest way on from a holder is (no scheduler when None), each question recorded in ``asked``."""

    def widest_from(holder: str, avoid: Collection[str]) -> Sequence[str] | None:
        asked.append((holder, frozenset(avoid)))
        assert widest is not None
        return widest.get(holder)

    asked: list[tuple[str, frozenset[str]]] = []
    relay = RelayEngine[str](HERE, DST, rules or Rules(), widest_from=None if widest is None else widest_from)
    relay.take_paths(paths, rates, "start", t=0.0, at=100.0)
    relay.asked = asked  # type: ignore[attr-defined]
    return relay


def block(index: int, length: int = MiB) -> Block[str]:
    return Block[str](index, index * MiB, length)


# -- which path a block takes ---------------------------------------------------------------------------------


def test_one_path_takes_every_block() -> None:
    relay = engine(DIRECT)
    for i in range(3):
        relay.admit(block(i), now=1.0)
    assert {b.path for b in relay.travelling.values()} == {DIRECT}
    assert relay.outstanding[DIRECT] == 3 * MiB
    assert relay.travelling[0].holders == [(HERE, None)]


def test_blocks_are_shared_in_proportion_to_the_predicted_rates() -> None:
    relay = engine(VIA_A, VIA_B, rates=[2 * MiB, 1 * MiB])
    for i in range(9):
        relay.admit(block(i), now=1.0)
    assert relay.outstanding[VIA_A] == 6 * MiB
    assert relay.outstanding[VIA_B] == 3 * MiB


def test_a_path_through_a_failed_depot_takes_no_new_block() -> None:
    relay = engine(VIA_A, VIA_B, rates=[10 * MiB, 1 * MiB])
    relay.dead.add("a")
    assert relay.assign(MiB) == VIA_B
    relay.dead.add("b")
    assert relay.assign(MiB) == VIA_A  # every path crosses a failed depot: the soonest of them all


def test_a_block_waiting_for_its_first_hop_moves_to_a_path_that_would_now_deliver_it_sooner() -> None:
    relay = engine(VIA_A, VIA_B, rates=[1 * MiB, 1 * MiB])
    waiting = block(0)
    relay.admit(waiting, now=0.0)
    assert waiting.path == VIA_A  # a tie goes to the primary
    relay.admit(block(1), now=0.0)
    relay.admit(block(2), now=0.0)  # A holds 2 MiB, B 1 MiB
    relay.predict(relay.paths, [MiB, 10 * MiB], None)  # B turns out far faster
    relay.reconsider(waiting, now=1.0)
    assert waiting.path == VIA_B
    assert relay.outstanding == {VIA_A: MiB, VIA_B: 2 * MiB}


def test_a_tie_keeps_a_waiting_block_where_it_is_and_a_second_copy_never_moves() -> None:
    relay = engine(VIA_A, VIA_B, rates=[MiB, MiB])
    first, second = block(0), block(1)
    relay.admit(first, now=0.0)
    relay.admit(second, now=0.0)
    assert (first.path, second.path) == (VIA_A, VIA_B)
    relay.reconsider(second, now=1.0)
    assert second.path == VIA_B  # A would deliver it no sooner
    relay.predict(relay.paths, [100 * MiB, MiB], None)
    twin = relay.second_copy(first, VIA_B, now=1.0)
    relay.reconsider(twin, now=1.0)
    assert twin.path == VIA_B
    relay.reconsider(second, now=1.0)
    assert second.path == VIA_A


# -- the way on from where a block is ------------------------------------------------------------------------


def test_a_block_follows_the_rest_of_its_own_path_without_the_failed_depots() -> None:
    long_way = (HERE, "a", "b", DST)
    relay = engine(long_way)
    b = block(0)
    relay.admit(b, now=0.0)
    assert relay.route_for(b, "a", now=1.0) == ["a", "b", DST]
    relay.dead.add("b")
    assert relay.route_for(b, "a", now=1.0) == ["a", DST]  # its path is no longer usable: the rest of the set's


def test_from_the_source_a_block_whose_path_left_the_set_takes_the_path_a_new_block_would() -> None:
    relay = engine(VIA_A, VIA_B, rates=[MiB, MiB])
    b = block(0)
    relay.admit(b, now=0.0)
    assert b.path == VIA_A
    relay.take_paths([VIA_B], [MiB], "better", t=1.0, at=101.0)
    assert relay.route_for(b, HERE, now=1.0) == list(VIA_B)
    assert b.path == VIA_B
    assert relay.outstanding == {VIA_A: 0, VIA_B: MiB}


def test_a_block_held_by_a_depot_of_another_path_goes_on_along_that_path() -> None:
    relay = engine(VIA_A, (HERE, "c", "b", DST), rates=[MiB, MiB])
    b = block(0)
    relay.admit(b, now=0.0)
    b.holders.append(("b", "alloc-b"))  # it reached b by a path of an earlier set
    relay.take_paths([VIA_A, (HERE, "c", "b", DST)], [MiB, MiB], "join", t=1.0, at=101.0)
    b.path = (HERE, "b", "x", DST)  # (not in the set any more)
    relay.outstanding[b.path] = MiB
    assert relay.route_for(b, "b", now=1.0) == ["b", DST]
    assert b.path == (HERE, "c", "b", DST)


def test_a_block_off_every_path_goes_the_widest_way_the_scheduler_knows_never_back_through_the_client() -> None:
    relay = engine(DIRECT, widest={"a": ["a", "b", DST]})
    relay.dead.add("c")
    assert relay.route_from("a") == ["a", "b", DST]
    assert relay.asked == [("a", frozenset({"c", HERE}))]  # type: ignore[attr-defined]
    assert relay.route_from(HERE) == [HERE, DST]  # on the primary: its rest, no question asked
    assert relay.route_from("z") == ["z", DST]  # no way known: straight on
    pinned = engine(DIRECT)  # no scheduler: no widest way to ask for
    assert pinned.route_from("a") == ["a", DST]


def test_the_nearest_holder_is_the_last_live_one_that_still_has_the_block() -> None:
    relay = engine((HERE, "a", "b", DST))
    b = block(0)
    relay.admit(b, now=0.0)
    b.holders += [("a", "alloc-a"), ("b", "alloc-b")]
    assert relay.nearest(b) == "b"
    relay.dead.add("b")
    assert relay.nearest(b) == "a"
    b.holders[-1] = ("a", None)  # a lost it (expired): from the source
    assert relay.nearest(b) == HERE
    assert b.holders == [(HERE, None)]


def test_the_next_hop_is_none_off_every_path() -> None:
    relay = engine((HERE, "a", "b", DST))
    b = block(0)
    relay.admit(b, now=0.0)
    assert relay.next_hop(b, "a", now=0.0) == "b"
    assert relay.next_hop(b, "z", now=0.0) is None


def test_a_block_steps_along_its_path_and_is_held_by_two_depots_at_once() -> None:
    long_way = (HERE, "a", "b", DST)
    relay = engine(long_way, widest={})
    b = block(0)
    relay.admit(b, now=0.0)
    route: tuple[str, ...] = long_way
    passed = []
    for alloc in ("alloc-a", "alloc-b", "alloc-d"):
        step = relay.step(b, route, now=1.0)
        assert isinstance(step, NextHop)
        route = step.route
        behind = relay.reached(b, step.v, alloc)
        if behind is not None:
            passed.append(behind)
            relay.passed_on(b)
    # each holder may let go once the block is two depots further on (the source holds no allocation); the last
    # depot before the destination, once the destination has verified it (the shell's part)
    assert passed == [(HERE, None), ("a", "alloc-a")]
    assert b.holders == [(HERE, None), ("a", None), ("b", "alloc-b"), (DST, "alloc-d")]


def test_a_block_through_a_failed_depot_is_stuck_and_restarts_from_its_nearest_holder() -> None:
    pinned = (HERE, "a", "b", DST)
    relay = RelayEngine[str](HERE, DST, Rules(), pinned=pinned)
    b = block(0)
    relay.admit(b, now=0.0)
    b.holders += [("a", "alloc-a"), ("b", "alloc-b")]
    relay.dead.add("b")
    assert relay.step(b, pinned, now=1.0) == Stuck("no way on from b")  # the rest of its path leaves b out
    relay.restart(b, relay.nearest(b))
    assert b.holders == [(HERE, None), ("a", "alloc-a")]
    off_path = relay.step(b, ["a", "c"], now=1.0)  # on the pinned path: its rest, without the failed depot
    assert off_path == NextHop("a", DST, ("a", DST))
    b.holders.append(("z", "alloc-z"))  # off the pinned path: along the route it was given, which ends there
    assert relay.step(b, ["a", "z"], now=1.0) == Stuck("no way on from z")


# -- the ledger ---------------------------------------------------------------------------------------------


def test_a_block_delivered_after_its_path_left_the_set_counts_for_the_primary() -> None:
    relay = engine(VIA_A, VIA_B, rates=[MiB, MiB])
    on_a, on_b = block(0), block(1)
    relay.admit(on_a, now=0.0)
    relay.admit(on_b, now=0.0)
    relay.take_paths([VIA_A], [MiB], "drop", t=1.0, at=101.0)
    assert relay.arrived(on_b, now=2.0) == []
    assert relay.arrived(on_a, now=2.0) == []
    assert relay.path_bytes == {VIA_A: 2 * MiB}
    assert relay.delivered == 2 * MiB
    assert relay.outstanding == {VIA_A: 0, VIA_B: 0}
    assert (on_a.path, on_b.path) == ((), ())


def test_the_first_copy_to_arrive_names_the_others_to_cut_off() -> None:
    relay = engine(VIA_A, VIA_B, rates=[MiB, MiB])
    first = block(0)
    relay.admit(first, now=0.0)
    twin = relay.second_copy(first, VIA_B, now=1.0)
    assert first.twins == [twin]
    assert twin.holders == [(HERE, None)]
    assert relay.arrived(twin, now=2.0) == [first]
    assert relay.second_copies_won == 1
    relay.lost(first, now=2.0)
    relay.second_copy_over(twin)
    relay.settled(first)
    assert first.twins == []
    assert relay.travelling == {}
    assert relay.outstanding == {VIA_A: 0, VIA_B: 0}
    assert relay.path_bytes == {VIA_B: MiB}


def test_a_copy_cut_off_keeps_only_the_source_and_counts_on_no_path() -> None:
    relay = engine(VIA_A)
    b = block(0)
    relay.admit(b, now=0.0)
    b.holders.append(("a", "alloc-a"))
    relay.lost(b, now=1.0)
    assert b.holders == [(HERE, None)]
    assert b.path == ()
    assert relay.outstanding[VIA_A] == 0


# -- the set of paths, the runs and the timeline ------------------------------------------------------------


def test_a_change_of_the_set_ends_and_begins_runs_and_scales_the_admission() -> None:
    relay = engine(VIA_A)
    assert relay.admission == 4 * Rules().max_inflight
    b = block(0)
    relay.admit(b, now=0.0)
    relay.arrived(b, now=1.0)
    changed = relay.take_paths([VIA_A, VIA_B], [MiB, MiB], "join", t=2.0, at=102.0)
    assert changed == PathChanged(VIA_A, "join", 102.0, (VIA_A, VIA_B))
    assert relay.admission == 2 * 4 * Rules().max_inflight
    relay.take_paths([VIA_B], [MiB], "better", t=3.0, at=103.0)
    relay.close_all_runs(4.0)
    runs = [(r.path, r.start, r.end, r.nbytes, r.reason) for r in relay.runs]
    assert runs == [(VIA_A, 0.0, 3.0, MiB, "start"), (VIA_B, 2.0, 4.0, 0, "join")]


def test_a_decision_that_drops_a_depot_marks_it_failed_and_one_for_the_same_set_updates_the_predictions() -> None:
    relay = engine(VIA_A, VIA_B, rates=[MiB, MiB])
    same = relay.decided((VIA_A, VIA_B), [MiB, 3 * MiB], changes=False, reason="failure", predicted_bps=None,
                         dropped=None, t=1.0, at=101.0)
    assert same is None
    assert relay.rate(VIA_B) == 3 * MiB
    dropped = relay.decided((VIA_A,), [MiB], changes=True, reason="failure", predicted_bps=MiB, dropped="b",
                            t=2.0, at=102.0)
    assert dropped is not None
    assert dropped.paths == (VIA_A,)
    assert "b" in relay.dead
    assert relay.final_paths == (VIA_A,)
    # a depot that died before a tick acted on it: its paths are over
    relay.dead.add("a")
    relay.take_paths([VIA_A, DIRECT], [], "join", t=3.0, at=103.0)
    assert relay.final_paths == (DIRECT,)


def test_a_switch_without_rates_predicts_the_primary_alone() -> None:
    relay = engine(VIA_A, rates=[MiB])
    relay.decided((VIA_B,), [], changes=True, reason="better", predicted_bps=5 * MiB, dropped=None, t=1.0, at=101.0)
    assert relay.paths == (VIA_B,)
    assert relay.rate(VIA_B) == 5 * MiB


def test_the_timeline_has_each_paths_bytes_and_the_shares_are_told_with_several_paths() -> None:
    relay = engine(VIA_A, VIA_B, rates=[MiB, MiB])
    a, b = block(0), block(1)
    relay.admit(a, now=0.0)
    relay.admit(b, now=0.0)
    relay.arrived(a, now=1.0)
    shares = relay.sample_timeline(2.0, 102.0)
    assert isinstance(shares, PathShares)
    assert [(s.path, s.bytes, s.rate_bps) for s in shares.paths] == [(VIA_A, MiB, MiB / 2), (VIA_B, 0, 0.0)]
    point = relay.timeline[-1]
    assert (point.t, point.bytes, point.rate_bps, point.path) == (2.0, MiB, MiB / 2, VIA_A)
    one = engine(DIRECT)
    assert one.sample_timeline(1.0, 101.0) is None


# -- windows ----------------------------------------------------------------------------------------------


def test_a_window_is_the_initial_depth_and_on_a_depots_hop_the_lane_beyond_it() -> None:
    relay = engine(VIA_A)
    assert relay.window((HERE, "a")) == Rules().initial_inflight
    assert relay.window(("a", DST)) == Rules().initial_inflight + Rules().lane_extra
    assert relay.copy_wait(("a", DST)) == 0.0  # nothing measured: no more than the timeout
    assert relay.resize_windows() == {}  # no hop measured yet


def run_copies(relay: RelayEngine[str], edge: tuple[str, str], copies: int, seconds: float) -> None:
    """``copies`` blocks over ``edge`` one after another, each taking ``seconds``, then a tick."""
    meter = relay.meter(edge)
    now = 0.0
    for _ in range(copies):
        mark = meter.started(now)
        meter.finished(MiB, now, now + seconds, mark=mark)
        now += seconds
    relay.tick(now)


def test_a_hops_window_follows_its_bandwidth_delay_product() -> None:
    relay = engine(VIA_A)
    run_copies(relay, ("a", DST), 10, 0.1)  # 10 MiB/s, a 100 ms cycle
    depth = inflight_for(10 * MiB, 0.1, MiB, 2, 16)
    assert relay.resize_windows() == {("a", DST): depth + Rules().lane_extra}
    assert relay.depth(("a", DST)) == depth
    assert relay.meters[("a", DST)].width == depth
    # the copies ahead in the lane and its own push, at the hop's rate
    assert relay.copy_wait(("a", DST)) == pytest.approx((depth + 2) * MiB / (10 * MiB))


def run_at_depth(
    relay: RelayEngine[str], edge: tuple[str, str], copy_s: Callable[[int], float], seconds: float, start: float = 0.0
) -> None:
    """Copies of 1 MiB over ``edge`` for ``seconds``, as many at once as the hop's depth, each taking
    ``copy_s(depth)``; a tick and a resize every half second, as the relay's steering loop does."""
    meter = relay.meter(edge)
    ends: list[tuple[float, CopyMark, float]] = []
    now, tick = start, start + 0.5
    while now < start + seconds:
        while len(ends) < relay.depth(edge):
            mark = meter.started(now)
            ends.append((now + copy_s(relay.depth(edge)), mark, now))
            ends.sort(key=lambda end: end[0])
        end, mark, began = ends.pop(0)
        while tick <= end:
            relay.tick(tick)
            relay.resize_windows()
            tick += 0.5
        now = end
        meter.finished(MiB, began, now, mark=mark)


def test_a_hop_whose_copies_do_not_slow_with_more_of_them_climbs_past_wus_rule() -> None:
    # On the testbed a direct hop's copies took 0.5 to 1.0 s however many ran (its link was not full), and one
    # took 0.3 s. Against that one, Wu's rule held the hop at two copies, at half what six carried.
    relay = engine(VIA_A, rules=Rules(initial_inflight=2))
    edge = (HERE, "a")
    times = iter([0.3] + [0.6, 0.9, 0.7, 1.0, 0.75, 0.85, 0.65, 0.95] * 100)
    run_at_depth(relay, edge, lambda depth: next(times), seconds=30.0)
    rule = inflight_for(relay.meters[edge].rate_bps, 0.3, MiB, 2, 16)
    assert relay.depth(edge) >= 8
    assert relay.depth(edge) > rule or rule >= 8


def test_on_a_full_link_a_deeper_level_is_tried_and_given_up() -> None:
    # 10 MiB/s: a copy takes 0.1 s alone and 0.1 s x the copies at once beside it; twice the copies carry no more
    relay = engine(VIA_A, rules=Rules(initial_inflight=2))
    edge = (HERE, "a")
    run_at_depth(relay, edge, lambda depth: 0.1 * depth, seconds=60.0)
    climb, meter = relay.climbs[edge], relay.meters[edge]
    assert climb.tried >= 3  # they go on, one every ten seconds at most
    assert climb.floor == 2  # and every one failed
    rule = inflight_for(meter.rate_bps, meter.shortest_cycle_s, MiB, 2, 16)
    assert relay.depth(edge) == (rule if climb.trial is None else max(rule, climb.trial))


def test_a_hops_depth_record_says_what_set_it() -> None:
    # lnet-send --trace's "window" events: the depth, and the rule's inputs and the climb's state behind it
    relay = engine(VIA_A, rules=Rules(initial_inflight=2))
    edge = (HERE, "a")
    run_at_depth(relay, edge, lambda depth: 0.1 * depth, seconds=30.0)
    record = relay.depth_record(edge, 12.3456)
    climb, meter = relay.climbs[edge], relay.meters[edge]
    assert record == {"t": 12.346, "edge": [HERE, "a"], "depth": relay.depth(edge), "window": relay.window(edge),
                      "rate_mbps": round(meter.rate_bps * 8 / 1e6, 3),
                      "cycle_ms": round(meter.shortest_cycle_s * 1000, 1), "floor": climb.floor,
                      "trial": climb.trial}
    assert record["rate_mbps"] == pytest.approx(10 * MiB * 8 / 1e6, rel=0.1)  # the full link's 10 MiB/s
    assert record["cycle_ms"] == pytest.approx(200.0)  # two copies at once, 0.1 s each alone
    assert relay.depth_record(("a", DST), 0.0)["cycle_ms"] is None  # a hop no copy ended on


def test_a_window_for_blocks_of_many_sizes_adds_a_mean_blocks_time_on_the_wire() -> None:
    relay = engine(VIA_A, rules=Rules(window_block=4 * MiB))
    run_copies(relay, (HERE, "a"), 10, 0.1)
    depth = inflight_for(10 * MiB, 0.1 + 4 * MiB / (10 * MiB), 4 * MiB, 2, 16)
    assert relay.resize_windows() == {(HERE, "a"): depth}  # the client's own hop has no lane


def test_a_copy_waits_at_most_four_timeouts() -> None:
    relay = engine(VIA_A, rules=Rules(timeout_s=1.0))
    run_copies(relay, ("a", DST), 3, 10.0)  # 0.1 MiB/s
    assert relay.copy_wait(("a", DST)) == 4.0


def test_a_tick_returns_what_each_hop_carried_and_nothing_for_an_idle_one() -> None:
    relay = engine(VIA_A)
    meter = relay.meter((HERE, "a"))
    relay.meter(("a", DST))
    mark = meter.started(0.0)
    meter.finished(MiB, 0.0, 0.5, mark=mark)
    samples = relay.tick(1.0)
    assert [(edge, sample.bytes) for edge, sample in samples] == [((HERE, "a"), MiB)]
    assert relay.tick(2.0) == []


# -- the end game -------------------------------------------------------------------------------------------


def end_game_engine(**rules: object) -> tuple[RelayEngine[str], list[Block[str]]]:
    """B carries four blocks at 1 MiB/s, A has delivered all of its own at 10 MiB/s."""
    relay = engine(VIA_A, VIA_B, rates=[10 * MiB, MiB], rules=Rules(**rules))  # type: ignore[arg-type]
    slow = []
    for i in range(4):
        b = block(i)
        relay.admit(b, now=0.0)
        relay.tag(b, VIA_B, now=0.0)
        slow.append(b)
    return relay, slow


def test_the_end_game_waits_until_every_block_is_under_way_and_while_a_depot_is_full() -> None:
    relay, _ = end_game_engine()
    assert relay.end_game(now=0.0) == []
    relay.all_under_way = True
    relay.full.add("a")
    assert relay.end_game(now=0.0) == []
    relay.full.clear()
    assert relay.end_game(now=0.0) != []
    off, _ = end_game_engine(end_game=False)
    off.all_under_way = True
    assert off.end_game(now=0.0) == []


def test_a_path_with_copies_waiting_at_the_source_for_its_first_hop_takes_no_second_copy() -> None:
    # A small file is under way from its first second: the admission holds more blocks than it has. A copy
    # queued behind the blocks A still has to send would only take A's bytes from them.
    relay, _ = end_game_engine()
    relay.all_under_way = True
    first_hop = relay.meter((HERE, "a"))
    first_hop.queued(0.0)
    assert not relay.idle_at_source(VIA_A)
    assert relay.end_game(now=0.0) == []
    first_hop.dequeued(0.5)
    assert relay.idle_at_source(VIA_A)
    assert [path for _, path in relay.end_game(now=0.0)] == [VIA_A] * 4
    relay.meter(("a", DST)).queued(1.0)  # blocks waiting further on do not hold the copies back
    assert relay.idle_at_source(VIA_A)


def test_a_block_left_at_a_depot_of_a_path_that_left_the_set_gets_a_second_copy_over_the_set() -> None:
    # A scout through b was dropped while a block sat at b: it goes on from b by a way nobody measures. At the
    # end it is copied over the one path left, as soon as that path has nothing waiting at the source; a block
    # of the dropped path still at the source is not (it takes a path of the set when it sets out).
    relay = engine(VIA_A, VIA_B, rates=[10 * MiB, MiB])
    at_b, at_source = block(0), block(1)
    for b in (at_b, at_source):
        relay.admit(b, now=0.0)
        relay.tag(b, VIA_B, now=0.0)
    at_b.holders.append(("b", "alloc-b"))
    relay.take_paths([VIA_A], [10 * MiB], "better", t=1.0, at=1.0)
    relay.all_under_way = True
    assert [(b.index, path) for b, path in relay.end_game(now=0.0)] == [(0, VIA_A)]
    relay.second_copy(at_b, VIA_A, now=1.0)
    assert relay.end_game(now=0.0) == []  # one second copy a block
    lone = engine(VIA_A, rates=[10 * MiB])  # one path and nothing off it: no end game
    lone.admit(block(2), now=0.0)
    lone.all_under_way = True
    assert lone.end_game(now=0.0) == []


def test_a_path_predicted_infinitely_fast_counts_at_the_mean_in_the_end_game() -> None:
    # Nothing measured yet: the scheduler predicts a path with an unmeasured hop infinitely fast. Its block is
    # not taken for one that never arrives (which the end game would copy at once): at A's rate, the mean of the
    # known ones, it arrives as soon on B as a copy would on A.
    relay = engine(VIA_A, VIA_B, rates=[MiB, math.inf])
    b = block(0)
    relay.admit(b, now=0.0)
    relay.tag(b, VIA_B, now=0.0)
    relay.all_under_way = True
    assert relay.end_game(now=0.0) == []


def test_a_scout_silent_since_it_joined_has_its_blocks_copied_over_the_idle_path() -> None:
    # The testbed's case (a cold start, 72 blocks of 1 MiB): direct has delivered everything it was given; a scout
    # that joined at 3 s, predicted as fast (a hop not measured yet), still holds three blocks on a first hop that
    # takes 14 s a copy. Half a second after it got them it is no slower than its prediction; 8.5 s on, direct
    # takes all three instead of idling until the scout's first copy ends.
    relay = engine(DIRECT, VIA_B, rates=[6e6, math.inf])
    scouted = []
    for i in range(3):
        b = block(17 + i)
        relay.admit(b, now=3.0)
        relay.tag(b, VIA_B, now=3.0)
        scouted.append(b)
    done = block(0)
    relay.admit(done, now=0.0)
    relay.tag(done, DIRECT, now=0.0)
    relay.arrived(done, now=1.0)
    relay.all_under_way = True
    assert relay.end_game(now=3.5) == []
    assert relay.silent_s(VIA_B, 11.5) == pytest.approx(8.5)
    assert sorted((b.index, path) for b, path in relay.end_game(now=11.5)) == [(17, DIRECT), (18, DIRECT),
                                                                                (19, DIRECT)]


def test_a_block_whose_second_copy_won_gets_no_third_while_its_first_is_being_cut_off() -> None:
    relay, slow = end_game_engine()
    relay.all_under_way = True
    copies = relay.end_game(now=0.0)
    block_, path = copies[0]
    twin = relay.second_copy(block_, path, now=0.0)
    assert relay.arrived(twin, now=1.0) == [block_]  # the first copy, to cut off
    relay.second_copy_over(twin)  # the second copy's race is over; the first has not ended yet
    assert block_.index not in relay.travelling
    assert block_.index not in [b.index for b, _ in relay.end_game(now=1.0)]
    relay.lost(block_, now=1.5)
    relay.settled(block_)
    assert relay.delivered == MiB


def test_the_end_game_sends_second_copies_of_the_slow_paths_last_blocks_over_the_idle_one() -> None:
    relay, slow = end_game_engine()
    relay.all_under_way = True
    slow[0].holders.append(("b", "alloc-b"))  # the first block is further on: the last to be given a copy
    copies = relay.end_game(now=0.0)
    assert copies
    assert all(path == VIA_A for _, path in copies)
    # the least advanced first, the latest in the file first among those; the one further on last
    assert [b.index for b, _ in copies] == [3, 2, 1, 0]
    assert relay.second_copies == len(copies)
    for b, path in copies:
        relay.second_copy(b, path, now=1.0)
    assert relay.end_game(now=0.0) == []  # a block with a second copy gets no other
