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

from lnet.client.sending.relay import Relay, RelayConfig, _ReadBuffers, _WholeHash

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
        assert result.file_hash == hashlib.sha256(data).hexdigest()
        assert result.resends == 0
        for name in ("a", "b"):
            seen = await requests(network, name)
            # (at least one of each: a count missing from /metrics would read as 0 and pass the bound)
            assert 1 <= seen.get("allocate", 0) <= 8, seen  # the pipeline's depth in batches of 2, not one per block
            assert 1 <= seen.get("free", 0) <= 12, seen  # the allocations left over at the end, freed then
            status = await clients[name].status()
            assert (status["used"], status["allocations"]) == (0, 0), (name, seen)  # nothing left behind
        assert (await clients["dst"].status())["allocations"] == len(result.blocks)  # the destination keeps them


async def _feed(whole: _WholeHash, data: bytes, spans: list[tuple[int, int]], order: list[int]) -> None:
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

    whole = _WholeHash("sha256", spans, ahead_blocks * block)
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
    whole = _WholeHash("sha256", spans, 0)  # nothing may be kept ahead: in order, nothing needs to be
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
    pool = _ReadBuffers(8, keep=4)
    first, second = pool.take(), pool.take()
    first.buffer[:] = b"AAAAAAAA"
    second.buffer[:] = b"BBBBBBBB"
    whole = _WholeHash("sha256", [(0, 8), (8, 8)], 100)
    whole.offer(1, memoryview(second.buffer), second)  # ahead of the hash: kept, with its buffer
    second.done()  # its write is over
    assert pool.take().buffer is not second.buffer  # still held by the hash: not handed out again
    whole.offer(0, memoryview(first.buffer), first)
    first.done()
    assert await whole.run(set(), lambda offset, length: b"", inline, None) == hashlib.sha256(
        b"AAAAAAAABBBBBBBB").hexdigest()
    assert {id(pool.take().buffer), id(pool.take().buffer)} == {id(first.buffer), id(second.buffer)}
