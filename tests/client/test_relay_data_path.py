"""The relay's per-block costs (docs/depot.md, "The three-depot chain through lnet-send"): an intermediate depot's
allocation carries later blocks, the whole-file hash takes the bytes the blocks were read with, block buffers are
used again. Each test checks the bytes that arrive as well as the cost, since every saving here reuses something."""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

from lnet.client.formats.manifest import hash_bytes
from lnet.client.sending.reading import ReadBuffers, WholeHash
from lnet.client.sending.relay import DRAIN_AT_ONCE, BlockDelivered, Relay, RelayConfig, _Pool
from lnet.client.wire.depot_client import Allocation, DepotUnreachable

from .network import MiB, Network, depots, inline


async def requests(network: Network, name: str) -> dict[str, float]:
    """The depot's requests so far by operation, from its own /metrics."""
    counts: dict[str, float] = {}
    async with httpx.AsyncClient(transport=network.transport("observer")) as client:
        text = (await client.get(f"{network.url(name)}/metrics")).text
    for line in text.splitlines():
        if line.startswith("lnet_depot_requests_total{"):
            labels, _, value = line.rpartition(" ")
            operation = labels.split('operation="', 1)[1].split('"', 1)[0]
            counts[operation] = counts.get(operation, 0.0) + float(value)
    return counts


async def test_an_intermediate_allocation_carries_later_blocks(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    # 41 blocks, the last one short, through two depots, with at most 8 blocks admitted at once: a relay that freed
    # and allocated per block would free 41 allocations at a and ask it for 21 batches of 2.
    network = Network(default_rate=20 * MiB)
    data = os.urandom(40 * MiB + 4321)
    path = tmp_path / "payload.bin"
    path.write_bytes(data)
    config = RelayConfig(block_size=MiB, min_inflight=1, initial_inflight=2, max_inflight=2)
    async with depots(network, ["a", "b", "dst"], tmp_path) as clients:
        relay = Relay(path, "here", "dst", clients, pinned=["here", "a", "b", "dst"], config=config, offload=inline)
        result = await relay.run()
        # the short last block went through allocations that held a whole earlier block: only its bytes arrived
        parts = [await clients["dst"].read(record.allocation.read) for record in result.blocks]
        assert b"".join(parts) == data
        assert [len(part) for part in parts][-1] == 4321
        assert result.file_hash == hash_bytes("blake3", data)
        assert result.resends == 0
        for name in ("a", "b"):
            seen = await requests(network, name)
            # (at least one of each: a count missing from /metrics would read as 0 and pass the bound)
            assert 1 <= seen.get("allocate", 0) <= 8, seen  # the pipeline's depth in batches of 2, not one per block
            assert 1 <= seen.get("free", 0) <= 12, seen  # the allocations left over at the end, freed then
            status = await clients[name].status()
            assert (status["used"], status["allocations"]) == (0, 0), (name, seen)  # nothing left behind
        assert (await clients["dst"].status())["allocations"] == len(result.blocks)  # the destination keeps them


class _SlowFrees:
    """A depot client whose every free takes a second; the third one fails as a vanished depot would."""

    def __init__(self) -> None:
        self.freed: list[str] = []
        self.at_once = self.most_at_once = 0

    async def free(self, manage: str) -> None:
        self.at_once += 1
        self.most_at_once = max(self.most_at_once, self.at_once)
        try:
            await trio.sleep(1)
            if manage == "m2":
                raise DepotUnreachable("http://a", "gone")
            self.freed.append(manage)
        finally:
            self.at_once -= 1


async def test_the_pools_left_at_the_end_are_freed_several_at_a_time(autojump_clock: trio.abc.Clock) -> None:
    client = _SlowFrees()
    count = 2 * DRAIN_AT_ONCE + 3
    pool = _Pool(client, MiB, 60.0, batch=4, patience_s=1.0, keep=count)  # type: ignore[arg-type]
    for i in range(count):
        assert pool.give_back(Allocation("http://a", f"r{i}", f"w{i}", f"m{i}", MiB, expires=1e9), now=0.0)
    started = trio.current_time()
    await pool.drain()
    assert trio.current_time() - started == pytest.approx(3.0)  # in three waves, not 19 seconds one by one
    assert client.most_at_once == DRAIN_AT_ONCE
    assert sorted(client.freed) == sorted(f"m{i}" for i in range(count) if i != 2)  # one failure stops no other
    await pool.drain()  # nothing is freed twice
    assert len(client.freed) == count - 1


class _Allocations:
    """A depot client that grants whatever is asked."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    async def allocate(self, size: int, duration: float, *, count: int = 1) -> list[Allocation]:
        self.asked.append(count)
        made = sum(self.asked)
        return [Allocation("http://a", f"r{made - i}", f"w{made - i}", f"m{made - i}", size, 1e9) for i in range(count)]


async def test_a_pool_takes_and_keeps_no_more_than_the_blocks_left_can_use() -> None:
    client = _Allocations()
    pool = _Pool(client, MiB, 60.0, batch=8, patience_s=1.0, keep=64, blocks_left=11)  # type: ignore[arg-type]
    taken = [await pool.take() for _ in range(11)]
    assert client.asked == [8, 3]  # the second batch is what the last three blocks need, not eight
    assert pool.blocks_left == 0
    # every block has its allocation: one coming back now would wait for a block that never comes
    assert not pool.give_back(taken[0], now=0.0)
    unbounded = _Pool(client, MiB, 60.0, batch=8, patience_s=1.0, keep=64)  # type: ignore[arg-type]
    assert unbounded.give_back(taken[1], now=0.0)  # no bound given: kept up to ``keep``
    left = _Pool(client, MiB, 60.0, batch=8, patience_s=1.0, keep=64, blocks_left=2)  # type: ignore[arg-type]
    assert left.give_back(taken[2], now=0.0)
    assert left.give_back(taken[3], now=0.0)
    assert not left.give_back(taken[4], now=0.0)  # two kept for the two blocks left; the third is freed
    assert [await left.take(), await left.take()] == [taken[3], taken[2]]
    assert len(client.asked) == 2


async def test_a_long_path_ends_with_its_last_block_not_a_free_per_allocation_left(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    # 100 ms round trips: the allocations left at a and b at the end (about as many as the blocks in flight),
    # freed one by one after the last block, kept lnet-send waiting a round trip each.
    network = Network(default_rate=40 * MiB, latency_s=0.05)
    data = os.urandom(24 * MiB)
    path = tmp_path / "payload.bin"
    path.write_bytes(data)
    config = RelayConfig(block_size=MiB, min_inflight=8, initial_inflight=8, max_inflight=8)
    delivered: list[float] = []

    def seen(event: object) -> None:
        if isinstance(event, BlockDelivered):
            delivered.append(trio.current_time())

    async with depots(network, ["a", "b", "dst"], tmp_path) as clients:
        relay = Relay(path, "here", "dst", clients, pinned=["here", "a", "b", "dst"], config=config, offload=inline,
                      on_event=seen)
        result = await relay.run()
        ended = trio.current_time()
        assert len(delivered) == 24
        assert result.file_hash == hash_bytes("blake3", data)
        assert ended - max(delivered) <= 2 * 0.1  # at most a free's round trip or two, whatever was left
        for name in ("a", "b"):
            status = await clients[name].status()
            assert (status["used"], status["allocations"]) == (0, 0), name  # and still nothing left behind


async def _feed(whole: WholeHash, data: bytes, spans: list[tuple[int, int]], order: list[int]) -> None:
    for index in order:
        offset, length = spans[index]
        whole.offer(index, data[offset : offset + length])
        await trio.testing.wait_all_tasks_blocked()  # the hash catches up between offers


@pytest.mark.parametrize("ahead_blocks", [0, 3, 100])
async def test_the_whole_file_hash_takes_blocks_in_any_order(ahead_blocks: int) -> None:
    block = 1000
    data = os.urandom(20 * block + 17)
    spans = [(offset, min(block, len(data) - offset)) for offset in range(0, len(data), block)]
    skipped = {4, 5, 13}  # delivered by an earlier run: never read for sending
    order = [i for i in range(len(spans)) if i not in skipped]
    random.Random(7).shuffle(order)
    reads: list[int] = []

    def read(offset: int, length: int) -> bytes:
        reads.append(offset)
        return data[offset : offset + length]

    whole = WholeHash("sha256", spans, ahead_blocks * block)
    digest: list[str] = []

    async def run() -> None:
        digest.append(await whole.run(skipped, read, inline, None))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        await _feed(whole, data, spans, order)
    assert digest == [hashlib.sha256(data).hexdigest()]
    assert {spans[i][0] for i in skipped} <= set(reads)  # what was not sent is read here
    assert whole.reread == len(reads)
    if ahead_blocks == 100:
        assert whole.reread == len(skipped)  # everything sent was kept: no second read of it


async def test_blocks_read_in_order_are_read_once() -> None:
    data = os.urandom(10 * 4096)
    spans = [(offset, 4096) for offset in range(0, len(data), 4096)]
    whole = WholeHash("sha256", spans, 0)  # nothing may be kept ahead: in order, nothing needs to be
    digest: list[str] = []

    async def run() -> None:
        digest.append(await whole.run(set(), lambda offset, length: b"", inline, None))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await trio.testing.wait_all_tasks_blocked()
        await _feed(whole, data, spans, list(range(len(spans))))
    assert digest == [hashlib.sha256(data).hexdigest()]
    assert whole.reread == 0


async def test_a_kept_block_holds_its_buffer_until_it_is_hashed() -> None:
    pool = ReadBuffers(8, keep=4)
    first, second = pool.take(), pool.take()
    first.buffer[:] = b"AAAAAAAA"
    second.buffer[:] = b"BBBBBBBB"
    whole = WholeHash("sha256", [(0, 8), (8, 8)], 100)
    whole.offer(1, memoryview(second.buffer), second)  # ahead of the hash: kept, with its buffer
    second.done()  # its write is over
    assert pool.take().buffer is not second.buffer  # still held by the hash: not handed out again
    whole.offer(0, memoryview(first.buffer), first)
    first.done()
    assert await whole.run(set(), lambda offset, length: b"", inline, None) == hashlib.sha256(
        b"AAAAAAAABBBBBBBB").hexdigest()
    assert {id(pool.take().buffer), id(pool.take().buffer)} == {id(first.buffer), id(second.buffer)}
