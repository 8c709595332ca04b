"""A transfer follows the directory: a depot that joins mid-transfer becomes a candidate and is used; one that
leaves is routed around, its blocks re-sent, the bytes intact.

The relay's side runs on the emulated network under the mock clock (tests/client/network.py), as the relay's
other failure tests do; the watch that drives it (``follow_directory``) runs against a real etcd and real depots
in test_directory_client.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import trio

from lnet.client.sending.relay import BlockDelivered, PathChanged, Relay, RelayConfig, RelayEvent
from lnet.scheduler import EdgeMemory, PathScheduler, SchedulerConfig

from ..client.network import MiB, Network, depots, inline

FAST_LOOP = SchedulerConfig(reevaluate_s=2.0, min_attempt_s=4.0, warmup_s=1.0, probe_s=2.0)


def _file(tmp_path: Path, size: int) -> tuple[Path, bytes]:
    data = os.urandom(size)
    path = tmp_path / "payload.bin"
    path.write_bytes(data)
    return path, data


async def test_a_depot_that_joins_mid_transfer_is_used(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    network = Network(default_rate=1 * MiB)
    for u, v in (("here", "b"), ("b", "dst")):
        network.set_rate(u, v, 12 * MiB)
    path, data = _file(tmp_path, 40 * MiB)
    async with depots(network, ["a", "b", "dst"], tmp_path) as clients:
        scheduler = PathScheduler(["here", "a", "dst"], "here", "dst", EdgeMemory(), FAST_LOOP)
        events: list[RelayEvent] = []
        started = {name: clients[name] for name in ("a", "dst")}
        relay = Relay(path, "here", "dst", started, scheduler=scheduler, config=RelayConfig(block_size=MiB),
                      offload=inline, on_event=events.append)
        joined_at: list[float] = []

        async def b_registers() -> None:
            await trio.sleep(5)
            joined_at.append(relay.clock())
            relay.depot_joined("b", clients["b"])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(b_registers)
            result = await relay.run()
        parts = [await clients["dst"].read(record.allocation.read) for record in result.blocks]
    assert b"".join(parts) == data
    assert "b" in scheduler.vertices
    later = [event.paths for event in events if isinstance(event, PathChanged) and event.at > joined_at[0]]
    assert any("b" in p for paths in later for p in paths), "the depot that joined was never used"
    assert network.bytes_sent.get(("b", "dst"), 0) >= 8 * MiB


async def test_a_depot_that_leaves_mid_transfer_is_routed_around(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    network = Network(default_rate=10 * MiB)
    network.set_rate("here", "dst", 2 * MiB)
    path, data = _file(tmp_path, 24 * MiB)
    async with depots(network, ["a", "b", "dst"], tmp_path) as clients:
        memory = EdgeMemory()
        now = 1_800_000_000.0
        for edge, rate in {("here", "a"): 10, ("a", "dst"): 10, ("here", "dst"): 2, ("here", "b"): 8,
                           ("b", "dst"): 8, ("a", "b"): 10, ("b", "a"): 10}.items():
            memory.observe(*edge, int(rate * MiB), 1.0, now)
        scheduler = PathScheduler(["here", "a", "b", "dst"], "here", "dst", memory, FAST_LOOP)
        events: list[RelayEvent] = []
        five = trio.Event()

        def watch(event: RelayEvent) -> None:
            events.append(event)
            if sum(isinstance(e, BlockDelivered) for e in events) >= 5:
                five.set()

        relay = Relay(path, "here", "dst", clients, scheduler=scheduler, config=RelayConfig(block_size=MiB),
                      offload=inline, on_event=watch)

        async def a_leaves() -> None:
            await five.wait()
            relay.depot_left("a")  # its entry goes first (revoked at its stop) ...
            await trio.sleep(0.5)
            network.dead.add("a")  # ... then it stops answering

        async with trio.open_nursery() as nursery:
            nursery.start_soon(a_leaves)
            result = await relay.run()
        parts = [await clients["dst"].read(record.allocation.read) for record in result.blocks]
    assert b"".join(parts) == data
    paths = [e.path for e in events if isinstance(e, PathChanged)]
    assert paths[0] == ("here", "a", "dst")
    assert "a" not in paths[-1]
    assert "a" in relay.dead
