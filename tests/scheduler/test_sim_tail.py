"""The end of a transfer in the simulator (``simulator._Tail``), and what it changed: a joined path that holds blocks
at the end costs there, as it did on the testbed, unless the end game (the relay's second copies) takes them; and
cold starts on 32 depots, judged over generated scenarios."""

from __future__ import annotations

import _thread
import statistics
import threading

import pytest

from lnet.scheduler import EdgeMemory, PathScheduler, SchedulerConfig, Switch
from lnet.scheduler.scenarios import KINDS, MIN_STREAMS, STEP_S, scenario
from lnet.scheduler.scenarios import STREAMS as SEND_STREAMS
from lnet.scheduler.simulator import SimNetwork, _Tail, mbit, simulate_pinned, simulate_transfer

MiB = 1024 * 1024
DIRECT = ("src", "dst")
SLOW = ("src", "d1", "d2", "dst")
STREAMS = 4


def direct_and_slow_chain() -> SimNetwork:
    """Direct best at 40 Mbit/s (its own link, 4 streams of 10), and a three-hop chain of 8 Mbit/s (its links'
    streams at 2) that shares nothing with it: the chain adds 20% while blocks remain to hand out."""
    vertices = ("src", "d1", "d2", "dst")
    capacities = {(u, v): mbit(0.5) for u in vertices for v in vertices if u != v}
    capacities[DIRECT] = mbit(10.0)
    for hop in zip(SLOW, SLOW[1:], strict=False):
        capacities[hop] = mbit(2.0)
    return SimNetwork(vertices, capacities, default_ramp_s=0.5, noise=0.0)


def warm(network: SimNetwork, *, end_game: bool, size: float) -> tuple[float, tuple[tuple[str, ...], ...]]:
    config = SchedulerConfig(streams=STREAMS, min_streams=STREAMS, max_paths=3)
    scheduler = PathScheduler(network.vertices, "src", "dst", network.accurate_memory(), config)
    result = simulate_transfer(network, scheduler, size_bytes=size, duration_s=300.0, step_s=0.25,
                               block_bytes=MiB, end_game=end_game)
    assert result.finished_at is not None
    return result.finished_at, result.samples[0].paths


def test_one_path_ends_as_the_fluid_model_says_its_first_copies_later() -> None:
    # A single path holds the last blocks it delivers anyway: the tail costs nothing (within a step). Its start
    # does: four copies of 1 MiB share 40 Mbit/s, so the first ones arrive after 0.84 s, and the rest after them.
    network = direct_and_slow_chain()
    size = 60 * MiB
    fluid = simulate_pinned(network, [DIRECT], streams=STREAMS, size_bytes=size, step_s=0.25)
    fill = STREAMS * MiB / mbit(40.0)
    for end_game in (True, False):
        tail = simulate_pinned(network, [DIRECT], streams=STREAMS, size_bytes=size, step_s=0.25, block_bytes=MiB,
                               end_game=end_game)
        assert fluid.finished_at is not None
        assert tail.finished_at is not None
        # (the link's 0.5-s ramp, which the fluid model pays at the start, passes while the copies fill)
        assert tail.finished_at == pytest.approx(fill + size / mbit(40.0), abs=0.25)
        assert fluid.finished_at < tail.finished_at
        assert all(sample.rate_bps == 0 for sample in tail.samples if sample.t + 0.25 <= fill)


def test_a_path_delivers_once_its_first_copies_crossed_every_hop() -> None:
    # Two hops of 16 Mbit/s at four copies each: the first block arrives after 2 x 4 MiB / 2 MB/s = 4.2 s, the
    # fluid model's transfer that much later.
    vertices = ("src", "a", "dst")
    capacities = {(u, v): mbit(0.1) for u in vertices for v in vertices if u != v}
    capacities[("src", "a")] = capacities[("a", "dst")] = mbit(4.0)
    network = SimNetwork(vertices, capacities, default_ramp_s=0.0, noise=0.0)
    chain = ("src", "a", "dst")
    fluid = simulate_pinned(network, [chain], streams=STREAMS, size_bytes=40 * MiB, step_s=0.25)
    blocks = simulate_pinned(network, [chain], streams=STREAMS, size_bytes=40 * MiB, step_s=0.25, block_bytes=MiB)
    assert fluid.finished_at is not None
    assert blocks.finished_at is not None
    fill = 2 * STREAMS * MiB / mbit(16.0)
    assert blocks.finished_at == pytest.approx(fluid.finished_at + fill, abs=0.25)
    first = next(sample.t for sample in blocks.samples if sample.rate_bps > 0)
    assert first == pytest.approx(fill, abs=0.25)


def test_a_joined_chain_costs_at_the_end_unless_the_end_game_takes_its_blocks() -> None:
    network = direct_and_slow_chain()
    size = 200 * MiB  # (the chain's first copies take 12.6 s to cross its three hops: it adds after that)
    pinned = simulate_pinned(network, [DIRECT], streams=STREAMS, size_bytes=size, step_s=0.25, block_bytes=MiB)
    assert pinned.finished_at is not None
    without, first = warm(network, end_game=False, size=size)
    assert first == (DIRECT, SLOW)  # the warm start ran the chain beside direct from its first second
    # The chain holds a block per copy on each of its three hops (12 MiB, 12.6 s of its work) when direct has
    # finished: the testbed's case (direct done at 12 s, the four-hop path alone until 17 s). (47.5 s against
    # 43: the chain cost more than its 30 s of delivering added.)
    assert pinned.finished_at / without < 0.95
    with_end_game, _ = warm(network, end_game=True, size=size)
    assert pinned.finished_at / with_end_game >= 1.1  # the chain adds, and costs nothing at the end (37.75 s)


@pytest.mark.slow
def test_the_end_game_takes_from_a_path_that_holds_blocks_not_from_a_stalled_empty_one() -> None:
    # Three paths in the tail: p stalled (rate 0) holding nothing, q holding 100 bytes at 10 B/s, r idle at
    # 10 B/s. The end game gives r's spare step to q's backlog. It used to pick the "last" path by backlog over
    # rate, and p's 0 / 0 counted as infinitely late: it took nothing from p, for ever (the testbed benchmark's
    # simulator side hung on a random scenario with the depots' round trips).
    p, q, r = ("s", "a", "d"), ("s", "b", "d"), ("s", "d")
    tail = _Tail(end_game=True)
    tail.backlog = {p: 0.0, q: 100.0, r: 0.0}
    stop = threading.Timer(5.0, _thread.interrupt_main)  # a failure, not a hang
    stop.start()
    try:
        rates = tail.step([p, q, r], [0.0, 10.0, 10.0], {p: 1.0, q: 1.0, r: 1.0}, left=100.0, step_s=1.0)
    except KeyboardInterrupt:
        pytest.fail("the end game's step never ended")
    finally:
        stop.cancel()
    assert rates == [0.0, 10.0, 10.0]
    assert tail.backlog == {p: 0.0, q: 80.0, r: 0.0}
    assert not tail.done


def cold_starts_on_32_depots(*, peer_rtts: bool) -> list[float]:
    """One scenario of each kind with 32 depots (indices 12-17 of a seed neither tuned on nor reported), cold, as
    bench/scheduler.py runs them: each one's time to 90% of the best path's steady rate (inf: not in 120 s)."""
    seed = 20261128
    times = []
    for index in range(2 * len(KINDS), 3 * len(KINDS)):
        case = scenario(seed, index, cold_s=120.0)
        assert case.depots == 32
        config = SchedulerConfig(streams=SEND_STREAMS, min_streams=MIN_STREAMS, max_paths=3)  # lnet-send's
        network = case.network
        pairs = {edge: t for edge, t in network.rtts.items() if case.src not in edge} if peer_rtts else None
        scheduler = PathScheduler(network.vertices, case.src, case.dst, EdgeMemory(), config,
                                  rtt_s=network.rtts_from(case.src), peer_rtt_s=pairs)
        result = simulate_transfer(network, scheduler, duration_s=120.0, seed=index, step_s=STEP_S,
                                   depth="adaptive", min_depth=MIN_STREAMS)
        reached = result.first_time_at(0.9 * case.cold.steady_bps)
        times.append(reached if reached is not None else float("inf"))
    return times


def test_cold_starts_on_32_depots_reach_90_percent_within_60_s_at_the_median() -> None:
    times = cold_starts_on_32_depots(peer_rtts=False)
    assert statistics.median(times) <= 60.0, times


def test_with_the_depots_round_trips_every_32_depot_cold_start_gets_there_within_60_s() -> None:
    # Without them two of the six took 79 s and more than 120 (the client's round trips bound a middle edge's
    # from below only, and the guesses sent exploration down long ones); with them the slowest took 42 s.
    times = cold_starts_on_32_depots(peer_rtts=True)
    assert max(times) <= 60.0, times
    assert statistics.median(times) <= 30.0, times


def test_a_path_that_joins_the_set_fills_while_the_others_go_on() -> None:
    # Two disjoint routes of 20 Mbit/s; a cold start finds the first, then the second joins. The joined path
    # delivers once its first copies crossed its two hops (2 x 4 MiB / 2.5 MB/s = 3.4 s), the first path throughout.
    vertices = ("src", "a", "b", "dst")
    capacities = {(u, v): mbit(0.5) for u in vertices for v in vertices if u != v}
    for hop in [("src", "a"), ("a", "dst"), ("src", "b"), ("b", "dst")]:
        capacities[hop] = mbit(5.0)
    network = SimNetwork(vertices, capacities, default_ramp_s=0.5, noise=0.0)
    config = SchedulerConfig(streams=STREAMS, min_streams=STREAMS, max_paths=3)
    scheduler = PathScheduler(network.vertices, "src", "dst", EdgeMemory(), config)
    result = simulate_transfer(network, scheduler, size_bytes=200 * MiB, duration_s=300.0, step_s=0.25,
                               block_bytes=MiB)
    joins = [(t, d) for t, d in result.decisions if isinstance(d, Switch) and d.reason == "join"]
    assert joins
    joined_at, join = joins[0]
    new = join.all_paths[-1]
    after = [s for s in result.samples if s.t >= joined_at and new in s.paths]
    first = next(s.t for s in after if s.rates[s.paths.index(new)] > 0)
    assert first == pytest.approx(joined_at + 2 * STREAMS * MiB / mbit(20.0), abs=0.25)
    assert all(s.rates[0] > 0 for s in after)  # the first path went on meanwhile
