"""Deep probes (scheduler theory of operation, 13), relay side: a probe the scheduler asks to run deep copies at
1, 2, 4, ... at once while that adds rate, and reports the depth it stopped at, on the emulated network
(tests/client/network.py, MockClock)."""

from __future__ import annotations

import os
from pathlib import Path

import networkx as nx
import pytest
import trio

from lnet.client.sending.probes import level_rate
from lnet.client.sending.relay import Relay, RelayConfig
from lnet.scheduler import THROUGHPUT, EdgeMemory, Keep, Measurement, SchedulerConfig, Switch

from .network import MiB, Network, depots, inline

DIRECT = ("here", "dst")
PROBED = ("a", "dst")


class OneProbe:
    """A stand-in for ``PathScheduler``: the direct path throughout, and one probe of ``PROBED`` at the start,
    deep or not; it keeps what the relay tells it."""

    def __init__(self, *, deep: bool) -> None:
        self.deep = deep
        self.memory = EdgeMemory()
        self.config = SchedulerConfig(probe_s=8.0)
        self.events: list[object] = []

    def start(self, now: float) -> Switch:
        return Switch(DIRECT, 4 * MiB, "start", probes=(PROBED,), deep=(PROBED,) if self.deep else ())

    def measure(self, event: object) -> None:
        self.events.append(event)

    def tick(self, now: float) -> Keep:
        return Keep(DIRECT)

    def graph(self) -> nx.DiGraph:
        graph = nx.DiGraph()
        graph.add_edge(*DIRECT, **{THROUGHPUT: 4 * MiB})
        return graph

    def probed(self) -> list[Measurement]:
        return [e for e in self.events if isinstance(e, Measurement) and e.edge == PROBED]


async def probe_of(tmp_path: Path, network: Network, *, deep: bool) -> Measurement:
    payload = tmp_path / "payload.bin"
    payload.write_bytes(os.urandom(64 * MiB))  # 16 s on the direct link: room for every level
    network.set_rate(*DIRECT, 4 * MiB)
    async with depots(network, ["a", "dst"], tmp_path) as clients:
        scheduler = OneProbe(deep=deep)
        relay = Relay(payload, "here", "dst", clients, scheduler=scheduler,  # type: ignore[arg-type]
                      config=RelayConfig(block_size=MiB), offload=inline)
        await relay.run()
        for name in ("a", "dst"):  # the probe's blocks are freed with the rest
            assert (await clients[name].status())["allocations"] == (0 if name == "a" else 64)
    [measurement] = scheduler.probed()
    return measurement


def aggregate(m: Measurement) -> float:
    """What the probe's copies carried together: each one's rate times how many ran at once."""
    assert m.streams is not None
    return m.bytes / m.seconds * m.streams


async def test_a_deep_probe_finds_an_edge_its_streams_hold_back_carries_sixteen_of_them(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    network = Network(default_rate=64 * MiB)
    network.set_stream_rate(*PROBED, 1 * MiB)  # a window-limited edge on a wide link
    measured = await probe_of(tmp_path, network, deep=True)
    assert measured.streams == 16
    assert aggregate(measured) == pytest.approx(16 * MiB, rel=0.1)


async def test_a_deep_probe_stops_where_more_copies_add_nothing(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    network = Network(default_rate=64 * MiB)
    network.set_rate(*PROBED, 2 * MiB)  # a narrow link: one stream fills it
    measured = await probe_of(tmp_path, network, deep=True)
    assert measured.streams is not None
    assert measured.streams <= 2
    assert aggregate(measured) == pytest.approx(2 * MiB, rel=0.1)


async def test_a_probe_not_asked_deep_runs_one_copy_at_a_time(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    network = Network(default_rate=64 * MiB)
    network.set_stream_rate(*PROBED, 1 * MiB)
    measured = await probe_of(tmp_path, network, deep=False)
    assert measured.streams == 1
    assert aggregate(measured) == pytest.approx(1 * MiB, rel=0.1)


def test_a_level_whose_copies_ran_one_after_another_carried_their_bytes_over_their_span() -> None:
    # Two 1 MiB copies of 0.5 s each. Side by side they carried 4 MiB/s; one after the other, 2 MiB/s, where each
    # copy's rate times the depth still says 4 (a testbed level's read 150 Mbit/s over a 62 Mbit/s link).
    assert level_rate(MiB, [(0.0, 0.5), (0.0, 0.5)]) == pytest.approx(4 * MiB)
    assert level_rate(MiB, [(0.0, 0.5), (0.5, 1.0)]) == pytest.approx(2 * MiB)
    assert level_rate(MiB, [(0.0, 0.5), (0.25, 0.75)]) == pytest.approx(2 * MiB / 0.75)
    assert level_rate(MiB, []) == 0.0
