"""``lnet-send`` resumes: the journal's format (pure), and the journal with the relay on the emulated network.

The journal's lines are checked byte by byte (a torn or damaged record and everything after it are dropped,
never anything before); ``SendJournal`` with the relay on ``tests/client/network.py`` (MockClock) interrupts a
transfer after some blocks and resumes it, counting the writes that reach the destination. ``lnet-send`` itself,
killed with -9 at several points, is in ``test_send_resume_kill.py``.
"""

from __future__ import annotations

import collections
import hashlib
import os
import stat
from pathlib import Path

import httpx
import pytest
import trio

from lnet.client.fetching.blocks import get_file
from lnet.client.formats.manifest import hash_bytes, parse
from lnet.client.sending import journal, resume
from lnet.client.sending.journal import JournalHeader
from lnet.client.sending.relay import BlockDelivered, BlockRecord, Relay, RelayConfig, RelayEvent
from lnet.client.sending.resume import ResumeRefused, SendJournal
from lnet.client.sending.send import build_manifest, interrupted
from lnet.client.wire.depot_client import Allocation, DepotClient, NotFound

from .network import MiB, Network, depots, inline

BLOCK = MiB
CONFIG = RelayConfig(block_size=BLOCK)

# -- the format: pure --------------------------------------------------------------------------------------------


def header(**changes: object) -> JournalHeader:
    values: dict[str, object] = {
        "kind": "file", "name": "f.bin", "source": "/data/f.bin", "dest": "http://dst.test:6714", "size": 3 * BLOCK,
        "identity": "3145728:1700000000000000000", "block_size": BLOCK, "hash_algorithm": "sha256",
        "layout": journal.layout_digest([(0, BLOCK), (BLOCK, BLOCK), (2 * BLOCK, BLOCK)]),
    }
    values.update(changes)
    return JournalHeader(**values)  # type: ignore[arg-type]


def record(index: int, expires: float = 2e9) -> BlockRecord:
    allocation = Allocation("http://dst.test:6714", f"r{index:031d}", f"w{index:031d}", f"m{index:031d}", BLOCK,
                            expires)
    return BlockRecord(index, index * BLOCK, BLOCK, hashlib.sha256(b"%d" % index).hexdigest(), allocation)


def journal_bytes(n: int) -> bytes:
    return journal.encode_header(header()) + b"".join(journal.encode_record(record(i)) for i in range(n))


def test_records_round_trip() -> None:
    data = journal_bytes(3)
    decoded = journal.decode(data)
    assert decoded.header == header()
    assert decoded.records == {i: record(i) for i in range(3)}
    assert decoded.valid == len(data)


def test_a_torn_last_record_is_dropped_and_nothing_before_it() -> None:
    whole = journal_bytes(2)
    last = journal.encode_record(record(2))
    for cut in range(len(last)):  # a crash may stop the write after any byte
        decoded = journal.decode(whole + last[:cut])
        assert decoded.records == {0: record(0), 1: record(1)}, cut
        assert decoded.valid == len(whole)


def test_a_damaged_record_ends_the_journal_there() -> None:
    data = bytearray(journal_bytes(4))
    second = journal.encode_record(record(1))
    start = data.index(second)
    data[start + len(second) // 2] ^= 0x01  # one flipped bit: the checksum no longer matches
    decoded = journal.decode(bytes(data))
    assert decoded.records == {0: record(0)}  # 1 is damaged; 2 and 3 come after it and are not trusted
    assert decoded.valid == start


def test_a_journal_without_a_whole_header_holds_nothing() -> None:
    line = journal.encode_header(header())
    for cut in (0, 5, len(line) - 1):
        assert journal.decode(line[:cut]) == journal.Decoded(None, {}, 0)
    assert journal.decode(b"garbage\n" + journal_bytes(2)).header is None


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"size": 4 * BLOCK}, "changed since: it was 3145728 bytes, it is 4194304 now"),
        ({"identity": "3145728:1800000000000000000"}, "changed since (its modification time)"),
        ({"dest": "http://other.test:6714"}, "it sent to http://dst.test:6714"),
        ({"block_size": 2 * BLOCK}, "blocks of 1.0 MiB, not 2.0 MiB"),
        ({"source": "/data/g.bin"}, "not of /data/g.bin"),
        ({"layout": "0" * 64}, "cut differently"),
    ],
)
def test_a_journal_of_another_transfer_is_named(changes: dict[str, object], needle: str) -> None:
    assert journal.mismatch(header(), header()) is None
    why = journal.mismatch(header(), header(**changes))
    assert why is not None
    assert needle in why


def test_resume_command_drops_restart() -> None:
    argv = ["my file.bin", "--to", "c", "--restart", "--path", "a,b"]
    assert resume.resume_command(argv) == "lnet-send 'my file.bin' --to c --path a,b"


# -- the journal with the relay, on the emulated network -----------------------------------------------------------


class CountingWrites(httpx.AsyncBaseTransport):
    """Counts the requests that pass by method and the path's first segment after /v1/ (PUT data: a write), and
    the most of each kind under way at once."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self.running: collections.Counter[tuple[str, str]] = collections.Counter()
        self.most: collections.Counter[tuple[str, str]] = collections.Counter()

    @property
    def writes(self) -> int:
        return self.requests[("PUT", "data")]

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        key = (request.method, request.url.path.split("/")[2])
        self.requests[key] += 1
        self.running[key] += 1
        self.most[key] = max(self.most[key], self.running[key])
        try:
            return await self.inner.handle_async_request(request)
        finally:
            self.running[key] -= 1


def make_file(tmp_path: Path, size: int) -> Path:
    path = tmp_path / "payload.bin"
    path.write_bytes(os.urandom(size))
    return path


async def interrupted_run(path: Path, network: Network, client: DepotClient, tmp_path: Path, after: int) -> Path:
    """A relay with a journal, cancelled once ``after`` blocks have reached the destination (as Ctrl-C would)."""
    where = tmp_path / "payload.manifest.json.journal"
    sent = SendJournal.open(where)
    sent.begin(resume.file_header(path, client.base_url, CONFIG))
    with trio.CancelScope() as scope:
        def stop(event: RelayEvent) -> None:
            if isinstance(event, BlockDelivered) and len(sent.records) >= after:
                scope.cancel()

        relay = Relay(path, "here", "dst", {"dst": client}, pinned=["here", "dst"], config=CONFIG,
                      on_event=sent.recording(stop), offload=inline)
        await relay.run()
    sent.close()
    return where


async def resumed_run(path: Path, where: Path, client: DepotClient, **options: object) -> tuple[Relay, SendJournal]:
    again = SendJournal.open(where, **options)  # type: ignore[arg-type]
    again.begin(resume.file_header(path, client.base_url, CONFIG))
    delivered = await again.prepare(client, path, None, offload=inline)
    relay = Relay(path, "here", "dst", {"dst": client}, pinned=["here", "dst"], config=CONFIG,
                  on_event=again.recording(None), offload=inline, delivered=delivered)
    return relay, again


async def test_a_resumed_transfer_sends_only_what_the_destination_lacks(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    path = make_file(tmp_path, 10 * BLOCK + 321)  # 11 blocks
    async with depots(network, ["dst"], tmp_path) as clients:
        where = await interrupted_run(path, network, clients["dst"], tmp_path, after=4)
        recorded = journal.decode(where.read_bytes()).records
        assert 4 <= len(recorded) < 11
        counting = CountingWrites(network.transport("here"))
        async with DepotClient(network.url("dst"), transport=counting) as watched:
            relay, again = await resumed_run(path, where, watched)
            assert again.resumed == recorded  # every recorded block, checked at the destination
            assert counting.requests[("GET", "digest")] == len(recorded)
            result = await relay.run()
            assert counting.writes == 11 - len(recorded)  # not one block the destination held is sent again
            again.remove()
        assert not where.exists()
        # The manifest a single run would have written: every block, the whole-file hash over every byte.
        manifest = parse(build_manifest(path, network.url("dst"), result, CONFIG, ["here", "dst"]).to_dict())
        data = path.read_bytes()
        assert manifest.file_hash == hash_bytes("blake3", data)
        assert [b.hash for b in manifest.blocks] == [
            hash_bytes("blake3", data[o:o + BLOCK]) for o in range(0, len(data), BLOCK)]
        assert all(result.blocks[i] == recorded[i] for i in recorded)  # resumed records are used as they are
        out = tmp_path / "fetched.bin"
        await get_file(manifest, out, transport=network.transport("here"))
        assert out.read_bytes() == data


async def test_what_the_destination_lost_or_damaged_is_sent_again(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    path = make_file(tmp_path, 8 * BLOCK)
    async with depots(network, ["dst"], tmp_path) as clients:
        dst = clients["dst"]
        where = await interrupted_run(path, network, dst, tmp_path, after=5)
        recorded = journal.decode(where.read_bytes()).records
        lost, damaged = sorted(recorded)[:2]
        await dst.free(recorded[lost].allocation.manage)  # expired or freed since
        await dst.write(recorded[damaged].allocation.write, b"\0" * 100, offset=0)  # not the block any more
        counting = CountingWrites(network.transport("here"))
        async with DepotClient(network.url("dst"), transport=counting) as watched:
            relay, again = await resumed_run(path, where, watched)
            assert set(again.resumed) == set(recorded) - {lost, damaged}
            result = await relay.run()
            assert counting.writes == 8 - len(recorded) + 2
            assert counting.requests[("DELETE", "manage")] >= 1  # the damaged allocation was freed
        with pytest.raises(NotFound):
            await dst.digest(recorded[damaged].allocation.read)
        assert b"".join([await dst.read(r.allocation.read) for r in result.blocks]) == path.read_bytes()


async def test_the_destination_is_asked_for_digests_at_once_within_a_bound(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    small = RelayConfig(block_size=16 * 1024)
    path = make_file(tmp_path, 40 * 16 * 1024)
    where = tmp_path / "payload.manifest.json.journal"
    async with depots(network, ["dst"], tmp_path) as clients:
        first = SendJournal.open(where)
        first.begin(resume.file_header(path, clients["dst"].base_url, small))
        relay = Relay(path, "here", "dst", clients, pinned=["here", "dst"], config=small,
                      on_event=first.recording(None), offload=inline)
        await relay.run()  # every block recorded; as if killed before the manifest
        first.close()
        counting = CountingWrites(network.transport("here"))
        async with DepotClient(network.url("dst"), transport=counting) as watched:
            again = SendJournal.open(where)
            again.begin(resume.file_header(path, watched.base_url, small))
            started = trio.current_time()
            assert len(await again.prepare(watched, path, None, offload=inline)) == 40
            again.close()
        assert counting.requests[("GET", "digest")] == 40
        assert counting.most[("GET", "digest")] == resume.PARALLEL_DIGESTS
        # 40 round trips of 2 x 10 ms each, 16 at a time: three rounds, not forty
        assert trio.current_time() - started < 40 * 2 * network.latency_s / 4


async def test_a_torn_record_is_ignored_and_cut_off(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    network = Network()
    path = make_file(tmp_path, 6 * BLOCK)
    async with depots(network, ["dst"], tmp_path) as clients:
        where = await interrupted_run(path, network, clients["dst"], tmp_path, after=3)
        recorded = journal.decode(where.read_bytes()).records
        missing = next(i for i in range(6) if i not in recorded)
        fake = BlockRecord(missing, missing * BLOCK, BLOCK, "0" * 64, next(iter(recorded.values())).allocation)
        with where.open("ab") as f:  # a crash in the middle of the next record
            f.write(journal.encode_record(fake)[:40])
        relay, again = await resumed_run(path, where, clients["dst"])
        assert set(again.resumed) == set(recorded)
        result = await relay.run()
        again.close()
        data = where.read_bytes()
        decoded = journal.decode(data)
        assert decoded.valid == len(data)  # the torn tail was cut off before the new records were appended
        assert decoded.records == {r.index: r for r in result.blocks}
        got = b"".join([await clients["dst"].read(r.allocation.read) for r in result.blocks])
        assert got == path.read_bytes()


async def test_a_file_changed_since_is_refused(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    network = Network()
    path = make_file(tmp_path, 6 * BLOCK)
    async with depots(network, ["dst"], tmp_path) as clients:
        dst = clients["dst"]
        where = await interrupted_run(path, network, dst, tmp_path, after=2)
        recorded = journal.decode(where.read_bytes()).records
        before = path.stat()
        # The same size and time, other bytes in a block already sent: only its hash tells.
        first = min(recorded)
        with path.open("r+b") as f:
            f.seek(first * BLOCK + 7)
            f.write(b"changed")
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        again = SendJournal.open(where)
        again.begin(resume.file_header(path, dst.base_url, CONFIG))
        with pytest.raises(ResumeRefused, match=f"changed since: block {first} .* --restart"):
            await again.prepare(dst, path, None, offload=inline)
        again.close()
        # Longer now: the size tells, before anything is asked of the destination.
        with path.open("ab") as f:
            f.write(b"more")
        again = SendJournal.open(where)
        with pytest.raises(ResumeRefused, match="changed since: it was 6291456 bytes, it is 6291460 now.*--restart"):
            again.begin(resume.file_header(path, dst.base_url, CONFIG))
        again.close()


async def test_restart_frees_what_was_sent_and_starts_again(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    path = make_file(tmp_path, 6 * BLOCK)
    async with depots(network, ["dst"], tmp_path) as clients:
        dst = clients["dst"]
        where = await interrupted_run(path, network, dst, tmp_path, after=3)
        recorded = journal.decode(where.read_bytes()).records
        path.write_bytes(os.urandom(7 * BLOCK))  # changed: a resume would be refused
        counting = CountingWrites(network.transport("here"))
        async with DepotClient(network.url("dst"), transport=counting) as watched:
            relay, again = await resumed_run(path, where, watched, restart=True)
            assert again.resumed == {}
            result = await relay.run()
            again.close()
            assert counting.writes == 7
        for old in recorded.values():  # the interrupted run's blocks were freed, not left to expire
            with pytest.raises(NotFound):
                await dst.digest(old.allocation.read)
        decoded = journal.decode(where.read_bytes())
        assert decoded.header is not None
        assert decoded.header.size == 7 * BLOCK
        assert set(decoded.records) == set(range(7))
        assert b"".join([await dst.read(r.allocation.read) for r in result.blocks]) == path.read_bytes()


def test_the_journal_is_private(tmp_path: Path) -> None:
    where = tmp_path / "x.manifest.json.journal"
    SendJournal.open(where).close()
    assert stat.S_IMODE(where.stat().st_mode) == 0o600
    where.chmod(0o644)  # loosened by someone since: tightened again before a capability goes in
    SendJournal.open(where).close()
    assert stat.S_IMODE(where.stat().st_mode) == 0o600


def test_a_second_lnet_send_on_the_same_journal_is_refused(tmp_path: Path) -> None:
    where = tmp_path / "x.manifest.json.journal"
    first = SendJournal.open(where)
    try:
        with pytest.raises(ResumeRefused, match="another lnet-send"):
            SendJournal.open(where)
    finally:
        first.close()


async def test_the_relay_refuses_delivered_blocks_of_another_layout(tmp_path: Path) -> None:
    path = make_file(tmp_path, 2 * BLOCK)
    async with DepotClient("http://127.0.0.1:9") as nowhere:
        relay = Relay(path, "here", "dst", {"dst": nowhere}, pinned=["here", "dst"], config=CONFIG,
                      delivered={1: BlockRecord(1, 5, BLOCK, "0" * 64, record(1).allocation)})
        with pytest.raises(ValueError, match="block 1 given as delivered"):
            await relay.run()


def test_an_interruption_names_the_command_that_resumes(tmp_path: Path) -> None:
    argv = ["data.bin", "--to", "svl", "--restart"]
    where = tmp_path / "data.bin.manifest.json.journal"
    sent = SendJournal.open(where)
    try:
        assert interrupted(sent, "svl", argv) == (
            "interrupted before any block reached svl; to send it, run the same command again: "
            "lnet-send data.bin --to svl")
        sent.begin(header())
        sent.append(record(0))
        sent.append(record(1))
        assert interrupted(sent, "svl", argv) == (
            f"interrupted: 2 blocks delivered to svl are recorded in {where}; to resume, run the same command "
            "again: lnet-send data.bin --to svl")
    finally:
        sent.close()
    assert journal.decode(where.read_bytes()).records == {0: record(0), 1: record(1)}
