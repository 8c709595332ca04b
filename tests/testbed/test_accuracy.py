"""The emulated links against their configuration, measured with plain TCP and UDP (not lnet) on small
topologies: round-trip time within 5%, a cubic stream within 10% of the link rate, within 15% of window/RTT when
the window binds, loss within statistical tolerance; live changes take effect. Root only."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import trio

from lnet.testbed import Testbed, Topology, TopologyError
from lnet.testbed.measure import one_way_loss, rtt, tcp_shares, tcp_throughput

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("requires_root")]


PING_BYTES = 40  # measure.rtt's datagram on the wire: 12 bytes of payload, UDP and IPv4 headers


def two_hosts(*, delay_ms: float, rate_mbit: float | None = None, loss: float = 0.0, window: str = "16MiB",
              mtu: int = 9000, congestion: str = "cubic") -> Topology:
    rate = f"rate_mbit = {rate_mbit}\n" if rate_mbit else ""
    return Topology.parse(f"""
mtu = {mtu}
[defaults]
window = "{window}"
congestion = "{congestion}"
[hosts.a]
[hosts.b]
[[links]]
a = "a"
b = "b"
delay_ms = {delay_ms}
loss = {loss}
{rate}""")


async def test_rtt_within_5_percent_direct_and_through_a_forwarding_host(bed_name: str, state_root: Path) -> None:
    topo = Topology.parse("""
[hosts.a]
[hosts.b]
[hosts.c]
[[links]]
a = "a"
b = "b"
delay_ms = 30
[[links]]
a = "b"
b = "c"
delay_ms = 20
""")
    async with Testbed(topo, name=bed_name, state_root=state_root) as tb:
        direct = await rtt(tb, "a", "b", count=40)
        routed = await rtt(tb, "a", "c", count=40, port=5204)
    assert direct.received == 40
    assert routed.received == 40
    assert direct.median_ms == pytest.approx(60.0, rel=0.05)
    assert routed.median_ms == pytest.approx(100.0, rel=0.05)


async def test_a_short_line_keeps_its_round_trip(bed_name: str, state_root: Path) -> None:
    """2 x 5 ms, where what the emulator adds per packet is not hidden by a long delay: its wake-ups once came
    up to a millisecond late (epoll's whole milliseconds) and a 10 ms round trip measured 10.8 ms. Direct, and
    through a forwarding host (2.5 ms + 2.5 ms each way: the per-route compensation is taken once, not per link).
    The bounds catch a delay applied twice or not at all, a millisecond late each way, and anything early."""
    topo = Topology.parse("""
[hosts.a]
[hosts.b]
[hosts.c]
[[links]]
a = "a"
b = "b"
delay_ms = 5
rate_mbit = 1000
[[links]]
a = "a"
b = "c"
delay_ms = 2.5
rate_mbit = 1000
[[links]]
a = "c"
b = "b"
delay_ms = 50
[[links]]
a = "c"
b = "d"
delay_ms = 2.5
rate_mbit = 1000
[hosts.d]
""")
    async with Testbed(topo, name=bed_name, state_root=state_root) as tb:
        direct = await rtt(tb, "a", "b", count=100, interval_s=0.01)
        routed = await rtt(tb, "a", "d", count=100, interval_s=0.01, port=5205)
        own = await rtt(tb, "a", "a", count=100, interval_s=0.01, port=5299)
        timing = (await tb.status())["timing"]
    for result in (direct, routed):
        assert result.received == 100
        # less the probes' own round trip, measured beside it (see test_live_changes_to_rate_delay_and_loss)
        assert result.median_ms - own.median_ms == pytest.approx(10.0, abs=0.5), (result, own, timing)
        # nothing arrives early: a packet is held at least its delay, less the compensation and the delivery
        # slack (tens of microseconds each way), and the probes' own time is on top of that
        assert result.min_ms >= 9.8, (result, timing)


async def test_jitter_spreads_round_trips_within_its_bounds(bed_name: str, state_root: Path) -> None:
    topo = Topology.parse('[hosts.a]\n[hosts.b]\n[[links]]\na = "a"\nb = "b"\ndelay_ms = 20\njitter_ms = 5\n')
    async with Testbed(topo, name=bed_name, state_root=state_root, seed=5) as tb:
        result = await rtt(tb, "a", "b", count=40)
    # each direction is 20 +- 5 ms, uniform: round trips between 30 and 50 ms, centred on 40
    assert result.median_ms == pytest.approx(40.0, rel=0.05)
    assert result.min_ms >= 30.0 - 0.5
    # The jitter's bound holds for the bulk; a userspace emulator on a busy 2-core VM delays the odd datagram by a
    # few ms more (one in 40 at 52.9 ms was seen in a full suite run), so the largest gets more room.
    assert result.p95_ms <= 50.0 + 1.5
    assert result.max_ms <= 50.0 + 5.0
    assert result.max_ms - result.min_ms > 6.0


async def test_cubic_stream_reaches_link_rate_when_window_does_not_bind(bed_name: str, state_root: Path) -> None:
    # 16 MiB window >> 40 Mbit/s x 20 ms = 100 kB: the link rate is the only limit
    async with Testbed(two_hosts(delay_ms=10, rate_mbit=40), name=bed_name, state_root=state_root) as tb:
        mbit = await tcp_throughput(tb, "a", "b", seconds=6, skip_s=2)
    assert mbit == pytest.approx(40.0, rel=0.10)


@pytest.mark.parametrize(
    ("mtu", "window", "window_bytes", "delay_ms"),
    [(9000, "256KiB", 256 * 1024, 20.0), (1500, "64KiB", 64 * 1024, 25.0)],
)
async def test_stream_runs_at_window_over_rtt_when_window_binds(
    bed_name: str, state_root: Path, mtu: int, window: str, window_bytes: int, delay_ms: float
) -> None:
    # a 1 Gbit/s link, far above window/RTT: only the window binds. (A link with no rate at all delivers a
    # window's worth of packets in one burst, and Linux then advertises less window while they queue.)
    topo = two_hosts(delay_ms=delay_ms, window=window, mtu=mtu, rate_mbit=1000)
    async with Testbed(topo, name=bed_name, state_root=state_root) as tb:
        mbit = await tcp_throughput(tb, "a", "b", seconds=6, skip_s=2)
    cap = window_bytes * 8 / (2 * delay_ms / 1000) / 1e6
    assert mbit == pytest.approx(cap, rel=0.15)


async def test_measured_loss_matches_configured(bed_name: str, state_root: Path) -> None:
    p, n = 0.05, 3000
    async with Testbed(two_hosts(delay_ms=5, loss=p), name=bed_name, state_root=state_root, seed=3) as tb:
        result = await one_way_loss(tb, "a", "b", count=n, interval_s=0.001)
        status = await tb.status()
    tolerance = 4 * math.sqrt(p * (1 - p) / n)  # four binomial standard deviations
    assert abs(result.loss - p) < tolerance, result
    if status["backend"] == "userspace":  # the emulator's own count agrees (the end markers are extra packets)
        drops = status["links"][0]["a->b"]["random_drops"]
        assert abs(drops - (n - result.received)) <= 20


async def test_live_changes_to_rate_delay_and_loss(bed_name: str, state_root: Path) -> None:
    async with Testbed(two_hosts(delay_ms=30, rate_mbit=40), name=bed_name, state_root=state_root) as tb:
        await tb.set_link("a", "b", delay_ms=5.0, rate_mbit=10.0)
        assert tb.topology.link("a", "b").rate_mbit == 10.0
        quick = await rtt(tb, "a", "b", count=30)
        own = await rtt(tb, "a", "a", count=30, port=5299)
        mbit = await tcp_throughput(tb, "b", "a", seconds=5, skip_s=1.5)
        await tb.set_link("b", "a", loss=0.5)
        lossy = await one_way_loss(tb, "a", "b", count=400, interval_s=0.002)
        with pytest.raises(TopologyError, match="loss is a fraction"):
            await tb.set_link("a", "b", loss=2.0)
        with pytest.raises(TopologyError, match="unknown host"):
            await tb.set_link("a", "nowhere", loss=0.1)
        status = await tb.status()
    # the emulated part of the round trip: the probes' own share (a Python echo and a Python pinger, a real
    # network has it too) is measured beside it and taken out, and each 40-byte datagram takes 32 us on the wire
    # at 10 Mbit/s each way. The probes' share is 0.07-0.2 ms idle (docs/testbed.md, "Timing") and grows
    # with the machine's load: a suite on a fresh clone once measured 10.51 ms here with it left in.
    wire_ms = 2 * PING_BYTES * 8 / 10e6 * 1000
    assert quick.median_ms - own.median_ms == pytest.approx(10.0 + wire_ms, rel=0.05), (quick, own)
    assert mbit == pytest.approx(10.0, rel=0.10)
    assert 0.4 < lossy.loss < 0.6
    assert status["links"][0]["loss"] == 0.5  # the rejected change left the link as it was


async def test_rate_change_mid_transfer_slows_the_stream(bed_name: str, state_root: Path) -> None:
    """Benchmarks degrade a link during a transfer: the stream must follow within its run."""
    async with Testbed(two_hosts(delay_ms=10, rate_mbit=40), name=bed_name, state_root=state_root) as tb:
        async with trio.open_nursery() as nursery:
            result: list[float] = []

            async def measure() -> None:
                result.append(await tcp_throughput(tb, "a", "b", seconds=8, skip_s=4))

            nursery.start_soon(measure)
            await trio.sleep(3.0)
            await tb.set_link("a", "b", rate_mbit=10.0)
    # the measured window (4 s to 8 s) is entirely after the change at about 3.3 s
    assert result[0] == pytest.approx(10.0, rel=0.12)


async def test_emulator_carries_400_mbit_aggregate(bed_name: str, state_root: Path) -> None:
    """The benchmarks' load: two 200 Mbit/s links busy at once, each stream at its link rate."""
    topo = Topology.parse("""
[defaults]
window = "16MiB"
[hosts.a1]
[hosts.b1]
[hosts.a2]
[hosts.b2]
[[links]]
a = "a1"
b = "b1"
delay_ms = 5
rate_mbit = 200
[[links]]
a = "a2"
b = "b2"
delay_ms = 5
rate_mbit = 200
[[links]]
a = "a1"
b = "a2"
delay_ms = 5
""")
    results: dict[str, float] = {}
    async with Testbed(topo, name=bed_name, state_root=state_root) as tb:

        async def stream(i: int) -> None:
            results[f"a{i}"] = await tcp_throughput(tb, f"a{i}", f"b{i}", seconds=6, skip_s=2, port=5210 + i)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stream, 1)
            nursery.start_soon(stream, 2)
    assert results["a1"] == pytest.approx(200.0, rel=0.10)
    assert results["a2"] == pytest.approx(200.0, rel=0.10)


@pytest.mark.parametrize("congestion", ["cubic", "bbr"])
async def test_host_tcp_settings_are_applied(bed_name: str, state_root: Path, congestion: str) -> None:
    topo = two_hosts(delay_ms=1, window="1MiB", congestion=congestion)
    async with Testbed(topo, name=bed_name, state_root=state_root) as tb:
        cc = await tb.run("a", ["sysctl", "-n", "net.ipv4.tcp_congestion_control"])
        rmem = await tb.run("b", ["sysctl", "-n", "net.ipv4.tcp_rmem"])
        addr = await tb.run("a", ["ip", "-4", "-o", "addr", "show", "dev", "lnet0"])
    assert cc.stdout.decode().strip() == congestion
    assert int(rmem.stdout.split()[2]) > 1024 * 1024  # the receive buffer is sized for a 1 MiB window
    assert "10.77.0.1/24" in addr.stdout.decode()


async def test_streams_of_different_round_trips_share_a_full_link_between_them(bed_name: str, state_root: Path) -> None:
    # a and c send to d over one 20 Mbit/s link b-d; a's round trip is 12 ms, c's 72 ms. Together they fill it,
    # and each gets a part (how the parts fall is bench/rtt_sharing.py's measurement, not a fixed figure).
    topo = Topology.parse("""
mtu = 1500
[defaults]
window = "4MiB"
[hosts.a]
[hosts.b]
[hosts.c]
[hosts.d]
[[links]]
a = "a"
b = "b"
delay_ms = 1
[[links]]
a = "c"
b = "b"
delay_ms = 31
[[links]]
a = "b"
b = "d"
delay_ms = 5
rate_mbit = 20
""")
    async with Testbed(topo, name=bed_name, state_root=state_root) as tb:
        rates = await tcp_shares(tb, [("a", "d"), ("c", "d")], streams=2, seconds=8.0, skip_s=3.0)
    assert all(rate > 0.5 for rate in rates)
    assert 0.7 * 20 <= sum(rates) <= 20
