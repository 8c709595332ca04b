"""The start of a path in the simulator as the relay runs it: a hop's first copies are the relay's first depth
(``FIRST_DEPTH``, ``RelayConfig.initial_inflight``), not the depth it settles at, and its depth climbs from there as
copies end (``CLIMB_COPIES``). With every hop at its settled depth from the first step, a short transfer over a
shared bottleneck sat for 20 s with nothing delivered in the simulator where the testbed's took 18 s in all."""

from __future__ import annotations

import pytest

from lnet.client.sending.relay_config import RelayConfig
from lnet.scheduler.simulator import CLIMB_COPIES, FIRST_DEPTH, DegradeEdge, SimNetwork, mbit, simulate_pinned

MiB = 1024 * 1024
STREAMS = 16
HOP = ("src", "dst")


def one_hop(*, stream_mbit: float, link_mbit: float | None) -> SimNetwork:
    """One overlay hop whose streams get ``stream_mbit`` each, over a physical link of ``link_mbit`` they share
    (None: no shared link, each stream gets its own rate)."""
    vertices = ("src", "dst")
    capacities = {HOP: mbit(stream_mbit), ("dst", "src"): mbit(stream_mbit)}
    links = {} if link_mbit is None else {"wire": mbit(link_mbit)}
    routes = {} if link_mbit is None else {HOP: ("wire",)}
    return SimNetwork(vertices, capacities, default_ramp_s=0.0, noise=0.0, links=links, routes=routes)


def first_arrival(network: SimNetwork, size: float) -> float:
    result = simulate_pinned(network, [HOP], streams=STREAMS, size_bytes=size, step_s=0.125, block_bytes=MiB,
                             depth="fixed", min_depth=STREAMS)
    return next(sample.t for sample in result.samples if sample.rate_bps > 0)


def test_the_first_depth_is_the_relays() -> None:
    assert FIRST_DEPTH == RelayConfig().initial_inflight


def test_a_path_fills_at_the_first_depth_not_the_one_it_settles_at() -> None:
    # 16 copies would share the 40 Mbit/s link and the first arrive after 16 MiB / 5 MB/s = 3.4 s; the relay's
    # first four get 10 Mbit/s each and arrive after 0.84 s.
    network = one_hop(stream_mbit=10.0, link_mbit=40.0)
    assert first_arrival(network, 64 * MiB) == pytest.approx(FIRST_DEPTH * MiB / mbit(40.0), abs=0.125)


def test_the_depth_climbs_from_the_first_as_copies_end() -> None:
    # Streams held back by their own window (2 Mbit/s each, no shared link): four carry 8 Mbit/s, sixteen 32. The
    # hop starts at four, doubles after CLIMB_COPIES x its depth in copies, and is at sixteen by the end.
    network = one_hop(stream_mbit=2.0, link_mbit=None)
    result = simulate_pinned(network, [HOP], streams=STREAMS, size_bytes=200 * MiB, step_s=0.125, block_bytes=MiB,
                             depth="fixed", min_depth=STREAMS)
    copy_s = MiB / mbit(2.0)
    fill = copy_s  # one block a stream
    rates = [sample.rate_bps for sample in result.samples if sample.t >= fill]
    assert rates[0] == pytest.approx(mbit(8.0))
    assert rates[-2] == pytest.approx(mbit(32.0))  # (the last step ends part-way)
    at_eight = next(sample.t for sample in result.samples if sample.rate_bps > mbit(8.0) * 1.01)
    at_sixteen = next(sample.t for sample in result.samples if sample.rate_bps > mbit(16.0) * 1.01)
    # each level lasts CLIMB_COPIES copies a stream: CLIMB_COPIES x depth copies at depth copies at a time
    assert at_eight == pytest.approx(fill + CLIMB_COPIES * copy_s, abs=0.25)
    assert at_sixteen == pytest.approx(fill + 2 * CLIMB_COPIES * copy_s, abs=0.5)


def test_a_fixed_depth_under_the_first_fills_at_its_own() -> None:
    # lnet-send --max-inflight 2 starts at two copies: the simulator's first depth is never above the hop's depth
    network = one_hop(stream_mbit=10.0, link_mbit=40.0)
    result = simulate_pinned(network, [HOP], streams=2, size_bytes=32 * MiB, step_s=0.125, block_bytes=MiB,
                             depth="fixed", min_depth=2)
    first = next(sample.t for sample in result.samples if sample.rate_bps > 0)
    assert first == pytest.approx(MiB / mbit(10.0), abs=0.125)


def test_a_path_fills_at_the_rates_of_each_step_not_at_those_of_its_first() -> None:
    # The hop's streams get 1 Mbit/s for the first half second (as beside a deep probe of the same hop), then 10:
    # the first four copies would take 4 MiB / 0.5 MB/s = 8.4 s at the first rate, and have a sixteenth of the way
    # behind them when the rate rises; the rest takes 15/16 x 0.84 s. (Reckoned once, at the first step's rate,
    # a chain joined beside three deep probes delivered nothing for 9 s where the testbed's filled in 2.)
    vertices = ("src", "dst")
    capacities = {HOP: mbit(1.0), ("dst", "src"): mbit(1.0)}
    network = SimNetwork(vertices, capacities, default_ramp_s=0.0, noise=0.0,
                         events=(DegradeEdge(0.5, HOP, mbit(10.0)),))
    slow_fill = FIRST_DEPTH * MiB / mbit(FIRST_DEPTH * 1.0)
    fast_fill = FIRST_DEPTH * MiB / mbit(FIRST_DEPTH * 10.0)
    expected = 0.5 + (1 - 0.5 / slow_fill) * fast_fill
    assert first_arrival(network, 64 * MiB) == pytest.approx(expected, abs=0.125)
