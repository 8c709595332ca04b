"""``lnet-get URL``: a publication's transfer, fetched once final, or received as it is sent (``--follow``).

The tests play ``lnet-send`` themselves (``Sender``): it keeps the publication and the drain record at the
destination depot, writes each block into an allocation of its own when the depot has room, lists it, reads the
drain record and stops listing what the receiver drained. The receiver is the whole command (``get.run``) or
``follow``, on the emulated network (tests/client/network.py) under trio's autojump clock.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from lnet.client.commands import get
from lnet.client.commands.clientio import ClientIO
from lnet.client.exits import ExitCode
from lnet.client.fetching import follow as following
from lnet.client.fetching.part_names import part_path, state_path
from lnet.client.fetching.partfile import PartFile
from lnet.client.formats import lines, published
from lnet.client.formats import manifest as file_manifest
from lnet.client.formats.published import Drained, Publication, PublishedBlock, SenderState
from lnet.client.wire.depot_client import Allocation, DepotClient, DepotFull

from .http_replicas import Replica
from .http_replicas import emulated as emulated_replicas
from .network import MiB, Network, depots, inline

DST = "dst"
ROOM = 4 * MiB + 128 * 1024
"""A depot that holds four 1 MiB blocks beside the publication and the drain record."""


def io_for(network: Network) -> ClientIO:
    return ClientIO(transport=network.transport("here"), offload=inline)


@dataclass
class Sender:
    """``lnet-send`` as the receiver sees it, at depot ``DST``: the publication, the drain record, the blocks."""

    network: Network
    data: bytes
    name: str = "payload.bin"
    block_size: int = MiB
    follow: bool = True
    kind: str = "file"
    tree: dict[str, Any] | None = None
    capacity: int = ROOM
    seq: int = 0
    state: str = "sending"
    waiting: str | None = None
    landed: int = 0
    listed: dict[int, tuple[PublishedBlock, Allocation]] = field(default_factory=dict)
    drained: Drained | None = None
    waited: int = 0  # times it found the depot full
    most_used: int = 0
    final: bool = False
    client: DepotClient = field(init=False)
    publication_allocation: Allocation = field(init=False)
    ack: Allocation = field(init=False)
    shape: Allocation | None = field(init=False, default=None)

    @property
    def depot(self) -> str:
        return self.network.url(DST)

    @property
    def total(self) -> int:
        return -(-len(self.data) // self.block_size)

    @property
    def url(self) -> str:
        return f"{self.depot}/v1/data/{self.publication_allocation.read}"

    def block(self, index: int) -> bytes:
        return self.data[index * self.block_size:(index + 1) * self.block_size]

    async def start(self) -> None:
        self.client = DepotClient(self.depot, transport=self.network.transport("src"))
        self.publication_allocation = await self.client.allocate_one(
            published.publication_size(self.total, 64 * 1024), 3600)
        self.ack = await self.client.allocate_one(published.drained_size(self.total), 3600)
        if self.tree is not None and self.follow:
            framed = published.frame(published.tree_document(self.tree))
            self.shape = await self.client.allocate_one(len(framed), 3600)
            await self.client.write(self.shape.write, framed, offset=0)
        await self.publish()

    def publication(self) -> Publication:
        blocks = tuple(block for block, _ in sorted(self.listed.values(), key=lambda pair: pair[0].index))
        manifest = None
        if self.final and not self.follow:
            manifest = {
                "format": file_manifest.FORMAT, "name": self.name, "size": len(self.data),
                "block_size": self.block_size, "hash_algorithm": "sha256", "file_hash": self.file_hash,
                "created": time.time(), "path": ["src", DST],
                "blocks": [{"index": b.index, "offset": b.offset, "length": b.length, "hash": b.hash,
                            "sources": [{"depot": self.depot, "read": b.read, "expires": b.expires}]}
                           for b in blocks],
            }
        return Publication(
            self.name, self.kind, len(self.data), self.block_size, self.total, "sha256", self.follow, self.depot,
            time.time(), time.time(), self.seq, SenderState(self.state, self.landed, self.landed * self.block_size,
                                                            self.waiting),
            f"{self.depot}/v1/data/{self.ack.write}" if self.follow else None, blocks, self.final,
            self.file_hash if self.final else None, self.shape.read_url if self.shape is not None else None,
            manifest,
        )

    @property
    def file_hash(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    async def publish(self) -> None:
        self.seq += 1
        await self.client.write(self.publication_allocation.write, self.publication().framed(), offset=0)

    async def read_drained(self) -> Drained | None:
        document = published.unframe(await self.client.read(self.ack.read), published.DRAINED_FORMAT)
        return None if document is None else published.parse_drained(document)

    async def refresh(self) -> None:
        """Read the drain record; stop listing what the receiver drained."""
        self.drained = await self.read_drained()
        if self.drained is None:
            return
        gone = [index for index in self.listed if index in self.drained]
        for index in gone:
            del self.listed[index]
        if gone:
            await self.publish()

    async def land(self, index: int) -> None:
        """Block ``index`` written at the destination once there is room for it, and listed."""
        chunk = self.block(index)
        while True:
            self.most_used = max(self.most_used, (await self.client.status())["used"])
            try:
                allocation = await self.client.allocate_one(len(chunk), 3600)
                break
            except DepotFull:
                self.waited += 1
                if self.state != "waiting":
                    self.state, self.waiting = "waiting", DST
                    await self.publish()
                await trio.sleep(0.05)
                await self.refresh()
        await self.client.write(allocation.write, chunk)
        self.most_used = max(self.most_used, (await self.client.status())["used"])
        self.state, self.waiting = "sending", None
        self.landed += 1
        block = PublishedBlock(index, index * self.block_size, len(chunk), hashlib.sha256(chunk).hexdigest(),
                               allocation.read, allocation.manage if self.follow else "", allocation.expires)
        self.listed[index] = (block, allocation)
        await self.publish()

    async def send(self, blocks: range | None = None, *, finish: bool = True) -> None:
        for index in blocks if blocks is not None else range(self.total):
            await self.land(index)
            await self.refresh()
        if finish:
            self.final, self.state = True, "done"
            await self.publish()

    async def until_done(self) -> Drained:
        """The drain record once the receiver says it is done (the sender follows it meanwhile)."""
        with trio.fail_after(120):
            while self.drained is None or self.drained.state != "done":
                await trio.sleep(0.1)
                await self.refresh()
        return self.drained


@asynccontextmanager
async def destination(tmp_path: Path, network: Network, capacity: int = ROOM) -> AsyncIterator[DepotClient]:
    async with depots(network, [DST], tmp_path, capacity=capacity, max_allocation=min(capacity, 16 * MiB)) as clients:
        yield clients[DST]


async def start_sender(network: Network, data: bytes, **options: Any) -> Sender:
    sender = Sender(network, data, **options)
    await sender.start()
    return sender


async def test_a_file_eight_times_the_depot_arrives_as_the_receiver_makes_room(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    network.set_rate(DST, "here", 5 * MiB, both=False)  # the receiver drains slower than the sender fills
    data = os.urandom(32 * MiB + 12345)
    out = tmp_path / "got.bin"
    async with destination(tmp_path, network) as dst:
        sender = await start_sender(network, data)
        codes: list[int] = []
        async with trio.open_nursery() as nursery:
            async def receive() -> None:
                codes.append(await get.run([sender.url, "-o", str(out), "--follow", "--json", "--no-progress"],
                                           io=io_for(network)))

            nursery.start_soon(receive)
            await sender.send()
            drained = await sender.until_done()
        status = await dst.status()
    assert codes == [ExitCode.OK]
    assert out.read_bytes() == data
    assert sender.waited > 0  # the sender had to wait for the receiver to make room
    assert sender.most_used <= ROOM
    assert drained.ranges == ((0, 33),)
    assert drained.drained_bytes == len(data)
    assert status["used"] <= 2 * 64 * 1024 + published.publication_size(33, 64 * 1024)  # every block freed
    assert not part_path(out).exists()
    assert not state_path(out).exists()
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["follow"] is True
    assert (report["bytes"], report["blocks"], report["resumed_blocks"]) == (len(data), 33, 0)
    assert sender.publication_allocation.read not in captured.out + captured.err


async def test_a_receiver_started_before_the_first_block_waits_and_says_so(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    data = os.urandom(6 * MiB)
    out = tmp_path / "got.bin"
    states: list[str] = []
    landed: list[int] = []
    async with destination(tmp_path, network):
        sender = await start_sender(network, data)
        async with trio.open_nursery() as nursery:
            results: list[Any] = []

            async def receive() -> None:
                results.append(await following.follow(
                    sender.url, out, transport=network.transport("here"), on_state=states.append, offload=inline,
                    on_progress=landed.append))

            nursery.start_soon(receive)
            await trio.sleep(20)  # the receiver polls an empty publication meanwhile
            assert states == ["waiting for the sender"]
            assert sum(landed) == 0
            await sender.send()
            await sender.until_done()
    assert out.read_bytes() == data
    assert sum(landed) == len(data)
    assert results[0].fetched_bytes == len(data)
    assert any(state.startswith("sender: ") for state in states[1:])


async def test_a_torn_publication_is_read_again(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    network = Network()
    data = os.urandom(3 * MiB)
    out = tmp_path / "got.bin"
    async with destination(tmp_path, network, capacity=64 * MiB) as dst:
        sender = await start_sender(network, data)
        await sender.send()
        whole = sender.publication().framed()
        sender.name = "a-longer-name-than-before.bin"  # a second version, being written
        torn = sender.publication().framed()
        await sender.client.write(sender.publication_allocation.write, torn[: len(torn) // 2], offset=0)
        assert published.unframe(await dst.read(sender.publication_allocation.read)) is None

        async def finish_writing() -> None:
            await trio.sleep(0.3)  # within the reader's retries
            await sender.client.write(sender.publication_allocation.write, whole, offset=0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(finish_writing)
            result = await following.follow(sender.url, out, transport=network.transport("here"), offload=inline)
        assert out.read_bytes() == data
        assert result.blocks == 3
        # torn for good: the reader gives up (exit 3), having tried a bounded number of times
        await sender.client.write(sender.publication_allocation.write, torn[: len(torn) // 2], offset=0)
        with pytest.raises(following.PublicationUnreachable) as caught:
            await following.read_publication(dst, sender.publication_allocation.read, timeout_s=30)
        assert caught.value.exit_code == ExitCode.UNREACHABLE
        assert sender.publication_allocation.read not in str(caught.value)


@pytest.mark.parametrize("flags", [[], ["--follow"]])
async def test_a_wrong_or_expired_url_says_so_without_the_capability(
    tmp_path: Path, flags: list[str], capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    capability = "Zq3" * 15
    async with destination(tmp_path, network):
        url = f"{network.url(DST)}/v1/data/{capability}"
        code = await get.run([url, "-o", str(tmp_path / "out"), "--json", *flags], io=io_for(network))
    assert code == ExitCode.FAILED
    captured = capsys.readouterr()
    assert "the URL is wrong, or what it named expired or was freed" in captured.err
    assert json.loads(captured.out)["exit"] == ExitCode.FAILED
    assert capability not in captured.out + captured.err


async def test_a_plain_file_on_a_depot_is_no_publication(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    data = os.urandom(300 * 1024)
    async with destination(tmp_path, network) as dst:
        allocation = await dst.allocate_one(len(data), 3600)
        await dst.write(allocation.write, data)
        url = allocation.read_url
        code = await get.run([url, "-o", str(tmp_path / "a"), "--follow"], io=io_for(network))
        assert code == ExitCode.USAGE
        err = capsys.readouterr().err
        assert "--follow takes the URL lnet-send --follow printed" in err
        assert "is not a publication" in err
        assert allocation.read not in err
        # without --follow it is a replica like any URL: the replicas' path fetches it (here from an emulated
        # replica standing in for the depot's HTTP server)
        replica = Replica(data)
        async with emulated_replicas(replica) as (_, connect):
            async def to_replica(host: str, port: int) -> trio.abc.Stream:
                return await connect(host, replica.port)

            io = ClientIO(transport=network.transport("here"), connect=to_replica)
            code = await get.run([url, "-o", str(tmp_path / "b"), "--no-progress", "--json"], io=io)
    assert code == ExitCode.OK
    assert (tmp_path / "b").read_bytes() == data
    assert "replicas" in json.loads(capsys.readouterr().out)
    assert replica.requests >= 1


async def test_a_final_publication_without_follow_is_fetched_as_its_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    data = os.urandom(5 * MiB + 99)
    async with destination(tmp_path, network, capacity=64 * MiB):
        sender = await start_sender(network, data, follow=False)
        await sender.send(range(3), finish=False)
        code = await get.run([sender.url, "-o", str(tmp_path / "early")], io=io_for(network))
        assert code == ExitCode.USAGE
        err = capsys.readouterr().err
        assert "the transfer is still under way (3 of 6 blocks landed)" in err
        assert "wait for lnet-send to finish" in err
        code = await get.run([sender.url, "-o", str(tmp_path / "early"), "--follow"], io=io_for(network))
        assert code == ExitCode.USAGE
        assert "not sent with lnet-send --follow" in capsys.readouterr().err
        await sender.send(range(3, 6))
        out = tmp_path / "got.bin"
        code = await get.run([sender.url, "-o", str(out), "--json"], io=io_for(network))
    assert code == ExitCode.OK
    assert out.read_bytes() == data
    report = json.loads(capsys.readouterr().out)
    assert report["blocks"] == 6
    assert "follow" not in report


async def test_a_follow_publication_without_follow_says_to_give_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    async with destination(tmp_path, network):
        sender = await start_sender(network, os.urandom(MiB))
        code = await get.run([sender.url, "-o", str(tmp_path / "x")], io=io_for(network))
    assert code == ExitCode.USAGE
    assert "run the same command with --follow" in capsys.readouterr().err


async def test_a_cancelled_receiver_resumes_without_fetching_blocks_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    data = os.urandom(16 * MiB)
    out = tmp_path / "got.bin"
    argv = ["-o", str(out), "--follow", "--json", "--no-progress", "--parallel", "2"]
    async with destination(tmp_path, network):
        sender = await start_sender(network, data)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sender.send)
            with trio.move_on_after(0.8):  # a few blocks in
                await get.run([sender.url, *argv], io=io_for(network))
            state, _ = lines.decode(state_path(out).read_bytes())  # the header, then what each round appended
            on_disk = {row[0] for document in state[1:] for row in document.get("held", ())}
            assert 0 < len(on_disk) < 16
            assert state[0]["publication"] != sender.publication_allocation.read
            assert sender.publication_allocation.read not in state_path(out).read_text()
            assert state_path(out).stat().st_mode & 0o777 == 0o600
            stopped = await sender.read_drained()
            assert stopped is not None
            assert stopped.state == "stopped"
            assert published.indices(stopped.ranges) <= on_disk
            capsys.readouterr()
            first_run = network.bytes_sent[(DST, "here")]
            assert await get.run([sender.url, *argv], io=io_for(network)) == ExitCode.OK
            drained = await sender.until_done()
    assert out.read_bytes() == data
    report = json.loads(capsys.readouterr().out)
    assert report["resumed_blocks"] == len(on_disk)
    assert report["fetched_bytes"] == len(data) - len(on_disk) * MiB
    assert network.bytes_sent[(DST, "here")] - first_run < len(data) - len(on_disk) * MiB + MiB
    assert first_run < (len(on_disk) + 2) * MiB + MiB  # what the first run had, and at most its two in flight
    assert drained.ranges == ((0, 16),)
    assert not state_path(out).exists()


async def test_a_second_receiver_on_the_same_output_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    out = tmp_path / "got.bin"
    async with destination(tmp_path, network):
        sender = await start_sender(network, os.urandom(MiB))
        part = PartFile.open(out)
        try:
            code = await get.run([sender.url, "-o", str(out), "--follow"], io=io_for(network))
        finally:
            part.close()
    assert code == ExitCode.USAGE
    assert "another lnet-get is writing" in capsys.readouterr().err


async def test_a_tree_is_rebuilt_once_its_stream_is_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    big, small = os.urandom(MiB + 512 * 1024), os.urandom(300 * 1024)
    entries = [
        {"path": "d", "type": "dir", "mode": 0o755, "mtime_ns": 1_700_000_000_000_000_000},
        {"path": "d/big", "type": "file", "mode": 0o640, "mtime_ns": 1_700_000_000_000_000_000, "size": len(big)},
        {"path": "small", "type": "file", "mode": 0o600, "mtime_ns": 1_700_000_000_000_000_000, "size": len(small)},
        {"path": "link", "type": "symlink", "target": "d/big", "mtime_ns": 1_700_000_000_000_000_000},
    ]
    pieces = [
        [{"path": "d/big", "offset": 0, "length": MiB}],
        [{"path": "d/big", "offset": MiB, "length": 512 * 1024}, {"path": "small", "offset": 0, "length": len(small)}],
    ]
    out = tmp_path / "tree"
    async with destination(tmp_path, network):
        sender = await start_sender(network, big + small, name="tree", kind="tree",
                                    tree={"entries": entries, "blocks": pieces})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sender.send)
            code = await get.run([sender.url, "-o", str(out), "--follow", "--json"], io=io_for(network))
    assert code == ExitCode.OK
    assert (out / "d" / "big").read_bytes() == big
    assert (out / "small").read_bytes() == small
    assert os.readlink(out / "link") == "d/big"
    assert (out / "d" / "big").stat().st_mode & 0o777 == 0o640
    assert not (tmp_path / "tree.lnet-stream").exists()
    assert not (tmp_path / "tree.lnet-stream.lnet-part.state").exists()
    report = json.loads(capsys.readouterr().out)
    assert (report["files"], report["entries"], report["follow"]) == (2, 4, True)


async def test_a_silent_sender_is_given_up_on_after_wait(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    data = os.urandom(4 * MiB)
    out = tmp_path / "got.bin"
    async with destination(tmp_path, network):
        sender = await start_sender(network, data)
        await sender.send(range(2), finish=False)  # then nothing more
        started = trio.current_time()
        code = await get.run([sender.url, "-o", str(out), "--follow", "--wait", "90s"], io=io_for(network))
        waited = trio.current_time() - started
        stopped = await sender.read_drained()
    assert code == ExitCode.UNREACHABLE
    err = capsys.readouterr().err
    assert "the sender made no progress for 90 s" in err
    assert "run the same command again to resume" in err
    assert 90 <= waited < 100
    assert part_path(out).exists()
    assert stopped is not None
    assert stopped.state == "stopped"
    assert stopped.ranges == ((0, 2),)
    assert stopped.message is not None
    assert "no progress" in stopped.message


def test_what_looks_like_a_depot_data_url() -> None:
    capability = "Zq3" * 15
    assert following.data_url(f"http://dst.test:6714/v1/data/{capability}") == ("http://dst.test:6714", capability)
    assert get.is_depot_data_url(f"https://h:1/v1/data/{capability}")
    for url in (f"http://h:1/v1/manage/{capability}", "http://h:1/v1/data/short", f"ftp://h/v1/data/{capability}",
                f"http://h:1/v1/data/{capability}?x=1", "http://h:1/file.bin"):
        assert following.data_url(url) is None
        assert not get.is_depot_data_url(url)


def test_the_senders_state_line() -> None:
    def line(state: str, landed: int, waiting: str | None = None, final: bool = False) -> str:
        listed = (PublishedBlock(0, 0, 1, "0" * 64, "A" * 43, "B" * 43, 0.0),) if landed else ()
        return following.describe_sender(Publication(
            "f", "file", 4, 1, 4, "sha256", True, "http://d:1", 0.0, 0.0, 1, SenderState(state, landed, landed,
                                                                                       waiting),
            "http://d:1/v1/data/" + "C" * 43, listed, final, "0" * 64 if final else None))

    assert line("sending", 0) == "waiting for the sender"
    assert line("sending", 2) == "sender: 2/4 blocks landed"
    assert line("waiting", 3, "dst") == "sender: 3/4 blocks landed, waiting for room at dst"
    assert line("stopped", 3) == "sender stopped (it may resume): 3/4 blocks landed"
    assert line("done", 4, final=True) == "sender: done, all 4 blocks landed"


def test_the_state_appends_each_round_and_a_torn_tail_costs_only_that_round(tmp_path: Path) -> None:
    blocks = tuple(PublishedBlock(i, i * MiB, MiB, "ab" * 32, f"{i:032d}", "", 9e9) for i in range(6))
    publication = Publication("f", "file", 6 * MiB, MiB, 6, "blake3", True, "http://d.test:6714", 1.0, 1.0, 1,
                              SenderState(), "http://d.test:6714/v1/data/" + "w" * 32, blocks, False, None)
    header = {"format": following.STATE_FORMAT, "publication": "k", "size": 6 * MiB, "hash_algorithm": "blake3",
              "blocks_total": 6}
    log = following._StateLog(tmp_path / "s", header)
    held = {b.index: following._Held(b.index, b.offset, b.length, b.hash, b.read, b.expires) for b in blocks}
    log.rewrite({}, 1)
    log.append_held([held[0], held[1]], 2)
    log.append_freed([0, 1], 2)
    size = (tmp_path / "s").stat().st_size
    log.append_held([held[2]], 3)
    assert (tmp_path / "s").stat().st_size - size < 300  # one round's block, not the whole state again
    log.close()
    found = following._StateLog(tmp_path / "s", header).read(publication)
    got, seq = found.held, found.seq
    assert (sorted(got), seq) == ([0, 1, 2], 3)
    assert [got[i].freed for i in (0, 1, 2)] == [True, True, False]
    with (tmp_path / "s").open("ab") as f:
        f.write(b"0badc0de {\"held\": [[3")  # a round torn by a crash: that block is fetched again
    assert sorted(following._StateLog(tmp_path / "s", header).read(publication).held) == [0, 1, 2]
    other = {**header, "publication": "another"}
    assert following._StateLog(tmp_path / "s", other).read(publication) == following._Found({})
