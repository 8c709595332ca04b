"""lnet-get against in-process depots: verified bytes, fallbacks, integrity failures, resume."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trio

from lnet.client.exits import ExitCode
from lnet.client.fetching.blocks import (
    BlockUnavailable,
    DepotLoad,
    IntegrityError,
    OutputError,
    PrefixHasher,
    decode_state,
    depot_tokens,
    encode_state,
    get_file,
    part_path,
    source_order,
    state_path,
)
from lnet.client.formats.manifest import BlockEntry, BlockSource, Manifest, hash_bytes

from ..depot.conftest import MakeDepot, Routes
from .blocks import Counting, upload_blocks
from .network import Network, depots

KiB = 1024
BLOCK = 64 * KiB
DATA = os.urandom(10 * BLOCK + 1234)  # 11 blocks, the last one short
BLOCKS = 11
MiB = 1024 * KiB


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    """Where downloads go: apart from the depots' data directories."""
    path = tmp_path / "downloads"
    path.mkdir()
    return path


async def test_the_file_arrives_identical_and_nothing_else_is_left(
    open_depot: MakeDepot, routes: Routes, out_dir: Path
) -> None:
    async with open_depot("sunnyvale") as (_, client):
        manifest = await upload_blocks(DATA, client, block_size=BLOCK)
        counting = Counting(routes)
        seen: list[int] = []
        out = out_dir / "out.bin"
        result = await get_file(manifest, out, parallel=4, transport=counting, on_progress=seen.append)
    assert out.read_bytes() == DATA
    assert sorted(os.listdir(out_dir)) == ["out.bin"]  # no part or state file
    assert (result.blocks, result.resumed_blocks, result.fetched_bytes, result.fallbacks) == (BLOCKS, 0, len(DATA), 0)
    assert counting.total_reads == BLOCKS
    assert sum(seen) == len(DATA)


async def test_blake2b_and_an_existing_out_file(open_depot: MakeDepot, routes: Routes, out_dir: Path) -> None:
    out = out_dir / "out.bin"
    out.write_bytes(b"an older version")
    async with open_depot("sunnyvale") as (_, client):
        manifest = await upload_blocks(DATA, client, block_size=BLOCK, algorithm="blake2b")
        await get_file(manifest, out, transport=routes)
    assert out.read_bytes() == DATA


async def test_an_empty_file(open_depot: MakeDepot, routes: Routes, out_dir: Path) -> None:
    async with open_depot("sunnyvale") as (_, client):
        manifest = await upload_blocks(b"", client, block_size=BLOCK)
        result = await get_file(manifest, out_dir / "empty", transport=routes)
    assert (out_dir / "empty").read_bytes() == b""
    assert result.blocks == 0


async def test_a_corrupted_block_is_an_integrity_failure_and_no_out_file(
    open_depot: MakeDepot, routes: Routes, out_dir: Path
) -> None:
    def flip_block_3(index: int, position: int, data: bytes) -> bytes:
        return bytes([data[0] ^ 1]) + data[1:] if index == 3 else data

    out = out_dir / "out.bin"
    async with open_depot("sunnyvale") as (_, client):
        manifest = await upload_blocks(DATA, client, block_size=BLOCK, tamper=flip_block_3)
        with pytest.raises(BlockUnavailable, match="block 3 .*integrity") as failed:
            await get_file(manifest, out, parallel=1, transport=routes)
    assert failed.value.exit_code == ExitCode.INTEGRITY
    assert not out.exists()
    assert part_path(out).exists()  # kept for inspection
    state = json.loads(state_path(out).read_text())
    assert decode_state(state, manifest) == {0, 1, 2}  # the blocks before it, never the bad one


async def test_a_missing_first_source_falls_back_to_the_second(
    open_depot: MakeDepot, routes: Routes, out_dir: Path
) -> None:
    async with open_depot("denver") as (_, denver), open_depot("sunnyvale") as (_, sunnyvale):
        manifest = await upload_blocks(DATA, [sunnyvale, denver], block_size=BLOCK)
        gone = manifest.blocks[5].sources[0]
        assert gone.depot == "http://sunnyvale.test:6714"
        probe = await sunnyvale.allocate_one(1, 60)  # capabilities name nothing once freed: free block 5's
        await sunnyvale.free(probe.manage)
        manifest = _with_source(manifest, 5, 0, BlockSource(gone.depot, probe.read, gone.expires))
        # only block 5 keeps its second source: elsewhere denver would take a share of the blocks by its rate
        blocks = [b if b.index == 5 else BlockEntry(**{**b.__dict__, "sources": b.sources[:1]})
                  for b in manifest.blocks]
        manifest = Manifest(**{**manifest.__dict__, "blocks": tuple(blocks)})
        counting = Counting(routes)
        result = await get_file(manifest, out_dir / "out.bin", parallel=1, transport=counting)
    assert (out_dir / "out.bin").read_bytes() == DATA
    assert result.fallbacks == 1
    assert counting.reads == {"sunnyvale.test": BLOCKS, "denver.test": 1}


async def test_an_unreachable_depot_is_tried_last_after_it_failed(
    open_depot: MakeDepot, routes: Routes, out_dir: Path
) -> None:
    async with open_depot("denver") as (_, denver), open_depot("sunnyvale") as (_, sunnyvale):
        manifest = await upload_blocks(DATA, [sunnyvale, denver], block_size=BLOCK)
        counting = Counting(routes, fail=lambda request: request.url.host == "sunnyvale.test")
        result = await get_file(manifest, out_dir / "out.bin", parallel=1, transport=counting)
    assert (out_dir / "out.bin").read_bytes() == DATA
    assert counting.reads == {"sunnyvale.test": 1, "denver.test": BLOCKS}
    assert result.fallbacks == 1


async def test_no_reachable_source_is_unreachable(open_depot: MakeDepot, routes: Routes, out_dir: Path) -> None:
    async with open_depot("sunnyvale") as (_, client):
        manifest = await upload_blocks(DATA, client, block_size=BLOCK)
        with pytest.raises(BlockUnavailable, match="unreachable") as failed:
            await get_file(manifest, out_dir / "out.bin", transport=Counting(routes, fail=lambda request: True))
    assert failed.value.exit_code == ExitCode.UNREACHABLE


async def test_an_expired_block_everywhere_is_a_plain_failure(
    open_depot: MakeDepot, routes: Routes, out_dir: Path
) -> None:
    async with open_depot("sunnyvale") as (_, client):
        manifest = await upload_blocks(DATA, client, block_size=BLOCK)
        freed = await client.allocate_one(1, 60)
        await client.free(freed.manage)
        source = manifest.blocks[0].sources[0]
        manifest = _with_source(manifest, 0, 0, BlockSource(source.depot, freed.read, source.expires))
        with pytest.raises(BlockUnavailable, match="missing") as failed:
            await get_file(manifest, out_dir / "out.bin", transport=routes)
    assert failed.value.exit_code == ExitCode.FAILED


async def test_a_second_run_fetches_only_the_blocks_the_first_did_not(
    open_depot: MakeDepot, routes: Routes, out_dir: Path
) -> None:
    out = out_dir / "out.bin"
    async with open_depot("sunnyvale") as (_, client):
        manifest = await upload_blocks(DATA, client, block_size=BLOCK)
        first = Counting(routes, fail=lambda request: first.total_reads > 4)  # the depot goes away after 4 reads
        with pytest.raises(BlockUnavailable) as failed:
            await get_file(manifest, out, parallel=1, transport=first)
        assert failed.value.exit_code == ExitCode.UNREACHABLE
        assert decode_state(json.loads(state_path(out).read_text()), manifest) == {0, 1, 2, 3}

        second = Counting(routes)
        result = await get_file(manifest, out, parallel=3, transport=second)
    assert out.read_bytes() == DATA
    assert result.resumed_blocks == 4
    assert second.total_reads == BLOCKS - 4
    assert result.fetched_bytes == len(DATA) - 4 * BLOCK
    assert not part_path(out).exists()
    assert not state_path(out).exists()


async def test_a_resume_rechecks_the_blocks_it_skips(open_depot: MakeDepot, routes: Routes, out_dir: Path) -> None:
    out = out_dir / "out.bin"
    async with open_depot("sunnyvale") as (_, client):
        manifest = await upload_blocks(DATA, client, block_size=BLOCK)
        first = Counting(routes, fail=lambda request: first.total_reads > 3)
        with pytest.raises(BlockUnavailable):
            await get_file(manifest, out, parallel=1, transport=first)
        with part_path(out).open("r+b") as part:  # block 1 rots on disk between the runs
            part.seek(BLOCK + 10)
            part.write(b"rot")
        second = Counting(routes)
        result = await get_file(manifest, out, transport=second)
    assert out.read_bytes() == DATA
    assert result.resumed_blocks == 2  # blocks 0 and 2
    assert second.total_reads == BLOCKS - 2


async def test_a_cancelled_run_keeps_its_progress(open_depot: MakeDepot, routes: Routes, out_dir: Path) -> None:
    """Cancellation is what Ctrl-C becomes inside trio: the state written on the way out lists what was verified."""
    out = out_dir / "out.bin"
    async with open_depot("sunnyvale") as (_, client):
        manifest = await upload_blocks(DATA, client, block_size=BLOCK)
        landed = 0
        with trio.CancelScope() as scope:

            def count(nbytes: int) -> None:
                nonlocal landed
                landed += nbytes
                if landed >= 5 * BLOCK + 100:
                    scope.cancel()

            await get_file(manifest, out, parallel=1, transport=routes, on_progress=count)
        assert scope.cancelled_caught
        kept = decode_state(json.loads(state_path(out).read_text()), manifest)
        assert kept in ({0, 1, 2, 3, 4}, {0, 1, 2, 3, 4, 5})  # block 5 may complete before the next checkpoint
        counting = Counting(routes)
        result = await get_file(manifest, out, transport=counting)
    assert out.read_bytes() == DATA
    assert (result.resumed_blocks, counting.total_reads) == (len(kept), BLOCKS - len(kept))


async def test_a_state_for_another_file_is_ignored(open_depot: MakeDepot, routes: Routes, out_dir: Path) -> None:
    out = out_dir / "out.bin"
    async with open_depot("sunnyvale") as (_, client):
        manifest = await upload_blocks(DATA, client, block_size=BLOCK)
        other = await upload_blocks(DATA[::-1], client, block_size=BLOCK)
        part_path(out).write_bytes(DATA[::-1])
        state_path(out).write_text(json.dumps(encode_state(other, range(BLOCKS))))
        counting = Counting(routes)
        result = await get_file(manifest, out, transport=counting)
    assert out.read_bytes() == DATA
    assert (result.resumed_blocks, counting.total_reads) == (0, BLOCKS)


async def test_blocks_that_contradict_the_file_hash_are_an_integrity_failure(
    open_depot: MakeDepot, routes: Routes, out_dir: Path
) -> None:
    out = out_dir / "out.bin"
    async with open_depot("sunnyvale") as (_, client):
        manifest = await upload_blocks(DATA, client, block_size=BLOCK)
        lying = Manifest(**{**manifest.__dict__, "file_hash": "0" * 64})
        with pytest.raises(IntegrityError, match="whole file") as failed:
            await get_file(lying, out, transport=routes)
    assert failed.value.exit_code == ExitCode.INTEGRITY
    assert not out.exists()
    assert part_path(out).read_bytes() == DATA
    assert decode_state(json.loads(state_path(out).read_text()), lying) == set()  # no block is known good


async def test_out_must_be_writable_where_asked(open_depot: MakeDepot, routes: Routes, out_dir: Path) -> None:
    async with open_depot("sunnyvale") as (_, client):
        manifest = await upload_blocks(DATA[:100], client, block_size=BLOCK)
        with pytest.raises(OutputError, match="is a directory"):
            await get_file(manifest, out_dir, transport=routes)
        with pytest.raises(OutputError, match="is not a directory"):
            await get_file(manifest, out_dir / "no" / "such" / "dir", transport=routes)


async def test_two_runs_on_one_out_file_do_not_mix(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    network = Network()
    out = tmp_path / "out.bin"
    async with depots(network, ["sunnyvale"], tmp_path) as clients:
        manifest = await upload_blocks(DATA, clients["sunnyvale"], block_size=BLOCK)
        network.set_rate("sunnyvale", "here", 16 * KiB)  # the first run takes a while (emulated: no wall time) ...
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: get_file(manifest, out, transport=network.transport("here")))
            await trio.sleep(1.0)
            with pytest.raises(OutputError, match="another lnet-get is writing"):  # ... the second may not write
                await get_file(manifest, out, transport=network.transport("here"))
            assert not out.exists()
    assert out.read_bytes() == DATA


async def test_blocks_on_several_depots_are_spread_by_their_rates(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    network = Network(latency_s=0.005)
    network.set_rate("fast", "here", 8 * MiB)
    network.set_rate("slow", "here", 1 * MiB)  # block reads from "slow" take 8 times longer
    data = os.urandom(40 * BLOCK)
    async with depots(network, ["fast", "slow"], tmp_path) as clients:
        manifest = await upload_blocks(data, [clients["slow"], clients["fast"]], block_size=BLOCK)  # slow first
        result = await get_file(manifest, tmp_path / "out.bin", parallel=4, transport=network.transport("here"))
    assert (tmp_path / "out.bin").read_bytes() == data
    by_depot = {source["depot"]: source for source in result.to_dict()["sources"]}
    fast, slow = by_depot[network.url("fast")], by_depot[network.url("slow")]
    assert fast["blocks"] > 2 * slow["blocks"] > 0  # both used, by rate
    assert sum(source["bytes"] for source in by_depot.values()) == len(data)


def test_the_source_that_would_finish_soonest_goes_first() -> None:
    a, b = (BlockSource(f"http://{name}:1", "A" * 32, 100) for name in "ab")
    entry = BlockEntry(0, 0, 1000, "0" * 64, (a, b))
    loads = {a.depot: DepotLoad(outstanding=4000, bytes=10_000, busy_s=1.0),
             b.depot: DepotLoad(outstanding=1000, bytes=10_000, busy_s=4.0)}
    assert source_order(entry, now=10, failing=set(), loads=loads) == [a, b]  # 0.5 s against 0.8 s
    loads[a.depot].outstanding = 9000
    assert source_order(entry, now=10, failing=set(), loads=loads) == [b, a]  # 1.0 s against 0.8 s
    loads[b.depot] = DepotLoad()  # not measured yet: counts as an average one (here: as a)
    assert source_order(entry, now=10, failing=set(), loads=loads) == [b, a]
    assert source_order(entry, now=10, failing=set(), loads={}) == [a, b]  # nothing known: the manifest's order


def test_sources_that_failed_or_expired_go_last() -> None:
    a, b, c = (BlockSource(f"http://{name}:1", "A" * 32, t) for name, t in [("a", 100), ("b", 50), ("c", 200)])
    entry = BlockEntry(0, 0, 1, "0" * 64, (a, b, c))
    assert source_order(entry, now=10, failing=set()) == [a, b, c]
    assert source_order(entry, now=75, failing=set()) == [a, c, b]
    assert source_order(entry, now=75, failing={"http://a:1"}) == [c, b, a]


def test_the_state_round_trips_as_runs_and_refuses_nonsense() -> None:
    manifest = Manifest("f", 0, 1, "sha256", "0" * 64, 0.0, (), ())
    wide = Manifest("f", 0, 1, "sha256", "0" * 64, 0.0, (), tuple(range(10)))  # type: ignore[arg-type]
    document = encode_state(wide, [0, 1, 2, 5, 7, 8])
    assert document["verified"] == [[0, 3], [5, 6], [7, 9]]
    assert decode_state(document, wide) == {0, 1, 2, 5, 7, 8}
    assert decode_state(document, manifest) == set()  # out of range for a file with no blocks
    for bad in ({**document, "verified": [[3, 2]]}, {**document, "verified": [[0, True]]}, [], None):
        assert decode_state(bad, wide) == set()


def _with_source(manifest: Manifest, index: int, position: int, source: BlockSource) -> Manifest:
    blocks = list(manifest.blocks)
    sources = list(blocks[index].sources)
    sources[position] = source
    blocks[index] = BlockEntry(**{**blocks[index].__dict__, "sources": tuple(sources)})
    return Manifest(**{**manifest.__dict__, "blocks": tuple(blocks)})


async def test_the_file_hash_follows_the_verified_prefix(tmp_path: Path) -> None:
    source = (BlockSource("http://d:1", "A" * 32, 0),)
    blocks = tuple(
        BlockEntry(i, offset, len(DATA[offset : offset + BLOCK]), "0" * 64, source)
        for i, offset in enumerate(range(0, len(DATA), BLOCK))
    )
    manifest = Manifest("f", len(DATA), BLOCK, "sha256", hash_bytes("sha256", DATA), 0.0, (), blocks)
    (tmp_path / "part").write_bytes(DATA)
    fd = os.open(tmp_path / "part", os.O_RDONLY)
    try:
        verified: set[int] = set()
        hasher = PrefixHasher(fd, manifest, verified)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hasher.run)
            for index in [2, 1, 5]:  # out of order, and without block 0 there is no prefix
                verified.add(index)
                hasher.block_verified()
            await trio.sleep(0.05)
            assert hasher.hashed == 0
            verified.add(0)
            hasher.block_verified()
            with trio.fail_after(5):  # it hashes in worker threads: wait for it to get there, then stop
                while hasher.hashed < 3 * BLOCK:  # noqa: ASYNC110 -- advanced by worker threads
                    await trio.sleep(0.001)
            await trio.sleep(0.05)
            assert hasher.hashed == 3 * BLOCK  # blocks 0-2; block 5 waits for 3 and 4
            with pytest.raises(RuntimeError, match="only 196608 of"):
                hasher.hexdigest()
            for index in [3, 4, 6, 7, 8, 9, 10]:
                verified.add(index)
                hasher.block_verified()
        assert hasher.hexdigest() == manifest.file_hash
    finally:
        os.close(fd)


async def test_a_depot_that_wants_its_token_for_reads_gets_it_from_the_depots_file(
    open_depot: MakeDepot, routes: Routes, out_dir: Path, tmp_path: Path
) -> None:
    """``require_token_for = ["allocate", "read"]``: lnet-get reads there only with the depot's token, which it
    takes from the depots file (by the depot's URL) and sends to that depot alone."""
    token = "t" * 32
    gated = {"operator_token": token, "require_token_for": ("allocate", "read")}
    async with open_depot("sunnyvale", token=token, **gated) as (_, client):
        manifest = await upload_blocks(DATA, client, block_size=BLOCK)
        with pytest.raises(BlockUnavailable, match="read at this depot needs the operator token"):
            await get_file(manifest, out_dir / "anonymous.bin", parallel=4, transport=routes)
        assert not (out_dir / "anonymous.bin").exists()
        depots = tmp_path / "depots.toml"
        depots.write_text(
            'here = "client"\n[depots.sunnyvale]\nurl = "http://sunnyvale.test:6714"\n'
            f'token = "{token}"\n[depots.other]\nurl = "http://other.test:6714"\n'
        )
        tokens = depot_tokens(depots)
        assert tokens == {"http://sunnyvale.test:6714": token}
        await get_file(manifest, out_dir / "out.bin", parallel=4, transport=routes, tokens=tokens)
    assert (out_dir / "out.bin").read_bytes() == DATA
