"""The relay on an emulated network in process (tests/client/network.py), on trio's MockClock."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from lnet.client.formats.manifest import hash_bytes
from lnet.client.sending.relay import (
    BlockDelivered,
    EdgeMeter,
    PathChanged,
    Relay,
    RelayConfig,
    RelayEvent,
    Stream,
    inflight_for,
)
from lnet.scheduler import EdgeMemory, PathScheduler, SchedulerConfig

from .network import MiB, Network, depots, inline

FAST_LOOP = SchedulerConfig(reevaluate_s=2.0, min_attempt_s=4.0, warmup_s=1.0, probe_s=2.0)


def make_file(tmp_path: Path, size: int) -> tuple[Path, bytes]:
    data = os.urandom(size)
    path = tmp_path / "payload.bin"
    path.write_bytes(data)
    return path, data


async def fetch(clients, result) -> bytes:  # type: ignore[no-untyped-def]
    parts = [await clients["dst"].read(record.allocation.read) for record in result.blocks]
    return b"".join(parts)


def test_inflight_follows_the_bandwidth_delay_product() -> None:
    assert inflight_for(10 * MiB, 0.3, MiB, 2, 16) == 8  # ceil(3 * 3 MiB / 1 MiB) - 1
    assert inflight_for(10 * MiB, 0.01, MiB, 2, 16) == 2  # the floor
    assert inflight_for(100 * MiB, 1.0, MiB, 2, 16) == 16  # the ceiling
    assert inflight_for(0, 1.0, MiB, 2, 16) == 2


def test_edge_meter_reports_stream_seconds_and_keeps_busy_time_for_the_window() -> None:
    meter = EdgeMeter()
    meter.started(0.0)
    meter.started(0.0)
    meter.finished(100, 0.0, 1.0)
    meter.finished(100, 0.0, 2.0)  # two copies side by side: 200 bytes in 2 busy seconds, 3 stream seconds
    meter.started(10.0)  # idle from 2 to 10 counts for nothing
    meter.finished(100, 10.0, 11.0, seconds=0.5)  # the depot pushed for half a second of the 1 s request
    # per stream: 300 bytes over 1 + 2 + 0.5 copy-seconds; 3 seconds with copies in flight: 2 of them for 1 s,
    # then 1 for 2 s, so 4 / 3 at once on average
    assert meter.flush(11.0) == (300, 3.5, 4 / 3, 0.0, False)  # the first of the copies began at 0
    assert meter.rate_bps == 100.0  # the hop's own rate for its window: 300 bytes over 3 busy seconds
    assert meter.flush(12.0) is None
    meter.started(20.0)
    meter.finished(100, 20.0, 25.0, ok=False)
    assert meter.flush(25.0) is None  # a failed copy measures nothing


def test_edge_meter_copies_at_once_hold_steady_when_long_copies_end_in_short_flushes() -> None:
    """16 copies of 8 s each, staggered by 0.5 s, flushed every 0.5 s: every flush says 16 at once. (Stream
    seconds over busy seconds said 2 to 50 from one flush to the next, on a testbed hop running 16.)"""
    meter = EdgeMeter(width=16)
    for k in range(16):
        meter.started(k * 0.5 - 8.0)  # the pipeline was full before 0
    at_once = []
    for k in range(40):
        now = k * 0.5
        meter.finished(MiB, now - 8.0, now)
        meter.started(now)
        sample = meter.flush(now + 0.25)
        assert sample is not None
        at_once.append(sample[2])
    assert at_once == [pytest.approx(16.0)] * 40


def test_edge_meter_multiplies_each_copy_by_the_company_it_had() -> None:
    """A copy begun when the hop ran 4 and ended just after it grew to 12 had 4 beside it most of its life: its
    rate times 12 would read the hop three times too fast (40 Mbit/s on an 18 Mbit/s testbed route)."""
    meter = EdgeMeter(width=16)
    marks = [meter.started(0.0) for _ in range(4)]
    meter.finished(MiB, 0.0, 2.9, mark=marks[1])
    assert meter.flush(2.9) is not None
    more = [meter.started(3.0) for _ in range(9)]
    meter.finished(MiB, 0.0, 3.5, mark=marks[0])
    sample = meter.flush(3.5)
    assert sample is not None
    # its life: 4 streaming for 2.9 s, 3 for 0.1 s, 12 for 0.5 s (the average over the flush alone: 10.5)
    assert sample.at_once == pytest.approx((4 * 2.9 + 3 * 0.1 + 12 * 0.5) / 3.5)
    assert len(more) == 9


def test_edge_meter_does_not_count_copies_waiting_in_the_depots_lane() -> None:
    meter = EdgeMeter(width=2)  # the depot streams 2 at once; the client asked for 4 (its lane holds the rest)
    for _ in range(4):
        meter.started(0.0)
    meter.finished(MiB, 0.0, 1.0, seconds=1.0)
    assert meter.flush(1.0) == (MiB, 1.0, 2.0, 0.0, False)


def test_edge_meter_says_when_the_hop_had_less_work_than_its_depth() -> None:
    meter = EdgeMeter(width=4)
    for _ in range(5):  # 4 in the window, 1 waiting for it: the hop has work for its depth
        meter.queued(0.0)
    for _ in range(4):
        meter.dequeued(0.0)
        meter.started(0.0)
    meter.finished(MiB, 0.0, 1.0)
    meter.dequeued(1.0)
    meter.started(1.0)
    sample = meter.flush(1.0)
    assert sample is not None
    assert not sample.starved
    # The tail: nothing waits any more, and the copies in flight fall to 1 of the 4 (starved from 1.5 to 4).
    for t in (1.5, 2.0, 2.5):
        meter.finished(MiB, 0.0, t)
    meter.finished(MiB, 1.0, 4.0)
    sample = meter.flush(4.0)
    assert sample is not None
    assert sample.starved
    assert sample.at_once == pytest.approx((4 * 0.5 + 3 * 0.5 + 2 * 0.5 + 1 * 1.5) / 3)


async def test_pinned_chain_delivers_identical_bytes_and_cleans_up(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    network = Network(default_rate=20 * MiB)
    path, data = make_file(tmp_path, 10 * MiB + 12345)
    async with depots(network, ["a", "b", "dst"], tmp_path) as clients:
        events: list[RelayEvent] = []
        relay = Relay(path, "here", "dst", clients, pinned=["here", "a", "b", "dst"],
                      config=RelayConfig(block_size=MiB), offload=inline, on_event=events.append)
        result = await relay.run()
        assert await fetch(clients, result) == data
        assert result.file_hash == hash_bytes("blake3", data)
        assert [r.length for r in result.blocks][-1] == 12345
        assert all(r.hash == hash_bytes("blake3", data[r.offset : r.offset + r.length]) for r in result.blocks)
        assert sum(e.nbytes for e in events if isinstance(e, BlockDelivered)) == len(data)
        for name in ("a", "b"):  # intermediate depots hold nothing once the blocks are through
            status = await clients[name].status()
            assert (status["used"], status["allocations"]) == (0, 0)
        assert (await clients["dst"].status())["allocations"] == len(result.blocks)
        assert set(result.edges) == {("here", "a"), ("a", "b"), ("b", "dst")}
        # every hop carried every byte exactly once: nothing re-sent, nothing written twice
        assert network.bytes_sent[("b", "dst")] == len(data)
        assert result.resends == 0


async def test_the_pipeline_keeps_every_hop_busy(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    # Five hops at 10 MiB/s, 30 ms one way each (the client's control messages pay it too): a block at a time
    # would crawl; the windows keep every hop busy through the round trips.
    network = Network(default_rate=10 * MiB, latency_s=0.03)
    path, _ = make_file(tmp_path, 40 * MiB)
    async with depots(network, ["a", "b", "c", "d", "dst"], tmp_path) as clients:
        events: list[RelayEvent] = []
        relay = Relay(path, "here", "dst", clients, pinned=["here", "a", "b", "c", "d", "dst"],
                      config=RelayConfig(block_size=MiB), offload=inline, on_event=events.append)
        await relay.run()
    delivered = [e for e in events if isinstance(e, BlockDelivered)]
    steady = sum(e.nbytes for e in delivered[1:]) / (delivered[-1].at - delivered[0].at)  # once the pipe is full
    assert steady > 0.9 * 10 * MiB, f"{steady / MiB:.1f} MiB/s over a 10 MiB/s chain"


async def test_a_block_lost_downstream_is_resent_from_the_nearest_holder(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    network = Network(default_rate=10 * MiB)
    path, data = make_file(tmp_path, 16 * MiB)
    async with depots(network, ["a", "b", "dst"], tmp_path) as clients:
        events: list[RelayEvent] = []
        some_delivered = trio.Event()

        def watch(event: RelayEvent) -> None:
            events.append(event)
            if sum(1 for e in events if isinstance(e, BlockDelivered)) >= 4:
                some_delivered.set()

        relay = Relay(path, "here", "dst", clients, pinned=["here", "a", "b", "dst"],
                      config=RelayConfig(block_size=MiB), offload=inline, on_event=watch)

        async def kill_b() -> None:
            await some_delivered.wait()
            network.dead.add("b")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(kill_b)
            result = await relay.run()
        assert await fetch(clients, result) == data
    assert result.resends > 0
    # Blocks that b held were sent again from a, which still held them: the source sent every block once (a block
    # sent again from the source would add a whole MiB; the rest is control messages).
    assert len(data) <= network.bytes_sent[("here", "a")] < len(data) + 64 * 1024
    assert network.bytes_sent[("a", "dst")] > 0


async def test_a_depot_dying_mid_transfer_is_routed_around(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    network = Network(default_rate=10 * MiB)
    path, data = make_file(tmp_path, 24 * MiB)
    async with depots(network, ["a", "b", "dst"], tmp_path) as clients:
        memory = EdgeMemory()
        scheduler = PathScheduler(["here", "a", "b", "dst"], "here", "dst", memory, FAST_LOOP)
        network.set_rate("here", "dst", 2 * MiB)  # the direct path is slow: the chain through a is better
        now = 1_800_000_000.0
        for edge, rate in {("here", "a"): 10, ("a", "dst"): 10, ("here", "dst"): 2, ("here", "b"): 8,
                           ("b", "dst"): 8, ("a", "b"): 10, ("b", "a"): 10}.items():
            memory.observe(*edge, int(rate * MiB), 1.0, now)
        events: list[RelayEvent] = []

        five_delivered = trio.Event()

        def watch(event: RelayEvent) -> None:
            events.append(event)
            if sum(1 for e in events if isinstance(e, BlockDelivered)) >= 5:
                five_delivered.set()

        async def kill_a_when_busy() -> None:
            await five_delivered.wait()
            network.dead.add("a")

        relay = Relay(path, "here", "dst", clients, scheduler=scheduler, config=RelayConfig(block_size=MiB),
                      offload=inline,
                      on_event=watch)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(kill_a_when_busy)
            result = await relay.run()
        assert await fetch(clients, result) == data
        paths = [e.path for e in events if isinstance(e, PathChanged)]
        assert paths[0] == ("here", "a", "dst")
        assert "a" not in paths[-1]
        assert "a" in relay.dead
        assert result.resends > 0


async def test_a_degraded_edge_moves_the_transfer(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    network = Network(default_rate=8 * MiB)
    network.set_rate("here", "dst", 1 * MiB)
    path, data = make_file(tmp_path, 160 * MiB)
    async with depots(network, ["a", "b", "dst"], tmp_path) as clients:
        scheduler = PathScheduler(["here", "a", "b", "dst"], "here", "dst", EdgeMemory(), FAST_LOOP)
        events: list[RelayEvent] = []
        relay = Relay(path, "here", "dst", clients, scheduler=scheduler, config=RelayConfig(block_size=MiB),
                      offload=inline,
                      on_event=events.append)
        degraded: list[tuple[float, tuple[str, str]]] = []

        async def degrade() -> None:
            await trio.sleep(12)
            current = relay.path
            assert len(current) == 3, current  # by now the cold start has settled on a one-depot chain
            network.set_rate(current[1], "dst", 0.5 * MiB)
            degraded.append((relay.clock(), (current[1], "dst")))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(degrade)
            result = await relay.run()
        assert await fetch(clients, result) == data
    at, edge = degraded[0]
    moves = [e for e in events if isinstance(e, PathChanged) and e.at > at]
    assert moves, "the transfer never left the degraded edge"
    assert edge not in zip(moves[0].path, moves[0].path[1:], strict=False)
    assert moves[0].at - at <= 2 * FAST_LOOP.reevaluate_s + RelayConfig().tick_s  # within two re-evaluations


async def test_warm_start_uses_the_remembered_path_at_once(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    network = Network(default_rate=8 * MiB)
    network.set_rate("here", "dst", 1 * MiB)
    path, data = make_file(tmp_path, 16 * MiB)
    memory_file = tmp_path / "edges.json"
    async with depots(network, ["a", "b", "dst"], tmp_path) as clients:
        first = PathScheduler(["here", "a", "b", "dst"], "here", "dst", EdgeMemory(), FAST_LOOP)
        cold = Relay(path, "here", "dst", clients, scheduler=first, config=RelayConfig(block_size=MiB), offload=inline)
        await cold.run()
        first.memory.save(memory_file)
        learnt = first.attempts[-1].path
        assert (learnt[0], learnt[-1], len(learnt)) == ("here", "dst", 3)
        events: list[RelayEvent] = []
        second = PathScheduler(["here", "a", "b", "dst"], "here", "dst", EdgeMemory.load(memory_file), FAST_LOOP)
        warm = Relay(path, "here", "dst", clients, scheduler=second, config=RelayConfig(block_size=MiB), offload=inline,
                     on_event=events.append)
        result = await warm.run()
        assert await fetch(clients, result) == data
        first_path = next(e.path for e in events if isinstance(e, PathChanged))
        assert len(first_path) == 3  # a one-depot chain from the start, not the slow direct path


@pytest.mark.parametrize("block_size", [MiB, 3 * MiB])
async def test_empty_and_tiny_files(tmp_path: Path, autojump_clock: trio.abc.Clock, block_size: int) -> None:
    network = Network()
    async with depots(network, ["a", "dst"], tmp_path) as clients:
        for size in (0, 1, block_size):
            path, data = make_file(tmp_path, size)
            relay = Relay(path, "here", "dst", clients, pinned=["here", "a", "dst"],
                          config=RelayConfig(block_size=block_size), offload=inline)
            result = await relay.run()
            assert await fetch(clients, result) == data
            assert len(result.blocks) == (size + block_size - 1) // block_size
            assert result.file_hash == hash_bytes("blake3", data)


async def test_a_full_destination_fails_the_transfer_instead_of_waiting_forever(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    from lnet.client.sending.relay import TransferFailed

    network = Network()
    path, _ = make_file(tmp_path, 8 * MiB)
    async with depots(network, ["dst"], tmp_path, capacity=4 * MiB, max_allocation=MiB) as clients:
        relay = Relay(path, "here", "dst", clients, pinned=["here", "dst"],
                      config=RelayConfig(block_size=MiB, timeout_s=5.0, retries=2), offload=inline)
        with pytest.raises(ExceptionGroup) as failed:
            await relay.run()
        assert failed.group_contains(TransferFailed)


def mixed_stream(data: bytes, sizes: list[int]) -> Stream:
    spans, offset = [], 0
    for size in sizes:
        spans.append((offset, size))
        offset += size
    assert offset == len(data)
    return Stream("packed", tuple(spans), lambda at, length: data[at : at + length])


async def test_a_stream_of_mixed_blocks_keeps_the_hop_busy(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    # A packed tree's blocks: small packed ones among big ones. The shortest copy is a small block's, mostly round
    # trip; sizing the window by it and the full block size leaves it at 2 (7.6 MiB/s here), and the hop idles
    # whenever both copies wait on their answers at once. window_block adds the mean block's time on the wire.
    sizes = [64 * 1024, MiB] * 20
    data = os.urandom(sum(sizes))
    stream = mixed_stream(data, sizes)
    network = Network(default_rate=10 * MiB, latency_s=0.05)
    mean = len(data) // len(sizes)
    config = RelayConfig(block_size=MiB, window_block=mean)
    async with depots(network, ["dst"], tmp_path) as clients:
        events: list[RelayEvent] = []
        relay = Relay(stream, "here", "dst", clients, pinned=["here", "dst"], config=config, offload=inline,
                      on_event=events.append)
        result = await relay.run()
        assert await fetch(clients, result) == data
    assert [(r.offset, r.length) for r in result.blocks] == list(stream.spans)
    assert result.file_hash == hash_bytes("blake3", data)
    delivered = [e for e in events if isinstance(e, BlockDelivered)]
    steady = sum(e.nbytes for e in delivered[1:]) / (delivered[-1].at - delivered[0].at)
    assert steady > 0.95 * 10 * MiB, f"{steady / MiB:.1f} MiB/s over a 10 MiB/s hop"
    assert relay.windows[("here", "dst")].total_tokens > 2


def test_a_block_left_off_the_path_never_routes_back_through_the_client(tmp_path: Path) -> None:
    # The widest way from a to dst by the numbers runs a -> here -> dst, but the client is no depot: a block
    # held at a goes on by the depots only.
    memory = EdgeMemory()
    for (u, v), rate in {("a", "here"): 100, ("here", "dst"): 100, ("a", "dst"): 10, ("a", "b"): 50,
                         ("b", "dst"): 50, ("here", "a"): 1, ("here", "b"): 1}.items():
        memory.observe(u, v, rate, 1.0, 0.0)
    scheduler = PathScheduler(["here", "a", "b", "dst"], "here", "dst", memory, FAST_LOOP)
    path, _ = make_file(tmp_path, 1)
    relay = Relay(path, "here", "dst", {}, scheduler=scheduler)
    relay.engine.path = ("here", "dst")
    assert relay.engine.route_from("a") == ["a", "b", "dst"]
    assert relay.engine.route_from("here") == ["here", "dst"]
