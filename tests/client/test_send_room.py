"""lnet-send and the depots' room: a file the destination cannot hold stops before any block moves; a depot that
stays full is waited for a bounded time, shown, then the transfer stops with how to resume; every send publishes
its manifest at the destination and prints the receiver's command.

All on the emulated network (tests/client/network.py) under trio's autojump clock.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trio

from lnet.client.commands import send
from lnet.client.exits import ExitCode
from lnet.client.formats import manifest as manifest_format
from lnet.client.formats import published
from lnet.client.sending.publish import PublicationState, plan_sizes
from lnet.client.sending.relay import BlockRecord
from lnet.client.sending.send import DepotLimits, SendError, check_room
from lnet.client.wire.depot_client import Allocation, DepotClient

from .network import MiB, Network, depots
from .test_send_cli import emulated
from .test_send_cli import emulated_depots_file as depots_file


def payload(tmp_path: Path, size: int, name: str = "big.bin") -> tuple[Path, bytes]:
    data = os.urandom(size)
    path = tmp_path / name
    path.write_bytes(data)
    return path, data


async def used(network: Network, name: str) -> int:
    async with DepotClient(network.url(name), transport=network.transport("here")) as client:
        return int((await client.status())["used"])


# -- the pure parts --------------------------------------------------------------------------------------------------


def test_check_room_gives_the_numbers_and_the_remedies() -> None:
    plan = plan_sizes(name="big.bin", kind="file", spans=[(i * MiB, MiB) for i in range(64)], block_size=MiB,
                      hash_algorithm="blake3", follow=False, tree=None, depot_url="http://dst.test:6714",
                      capacity=None)
    limits = DepotLimits(max_allocation=16 * MiB, capacity=32 * MiB, free=30 * MiB)
    with pytest.raises(SendError) as refused:
        check_room("dst", limits, plan, remaining=64 * MiB, block_size=MiB, subject="big.bin")
    text = str(refused.value)
    assert refused.value.code == ExitCode.UNREACHABLE
    assert "big.bin is 64.0 MiB" in text
    assert "30.0 MiB free (of 32.0 MiB)" in text
    assert "--follow" in text
    assert "or send to a depot with" in text
    # what a resumed run still has to send is what counts
    check_room("dst", limits, plan, remaining=20 * MiB, block_size=MiB, subject="big.bin")
    # with --follow: one block beside the publication is enough
    follow = plan_sizes(name="big.bin", kind="file", spans=[(i * MiB, MiB) for i in range(64)], block_size=MiB,
                        hash_algorithm="blake3", follow=True, tree=None, depot_url="http://dst.test:6714",
                        capacity=32 * MiB)
    check_room("dst", limits, follow, remaining=64 * MiB, block_size=MiB, subject="big.bin")
    with pytest.raises(SendError):
        check_room("dst", DepotLimits(capacity=32 * MiB, free=MiB // 2), follow, remaining=64 * MiB,
                   block_size=MiB, subject="big.bin")
    # a status that does not say its room is not checked
    check_room("dst", DepotLimits(), plan, remaining=64 * MiB, block_size=MiB, subject="big.bin")


def test_a_follow_publication_lists_what_the_receiver_has_not_drained_and_no_more_than_its_room() -> None:
    spans = [(i * MiB, MiB) for i in range(40)]
    plan = plan_sizes(name="f", kind="file", spans=spans, block_size=MiB, hash_algorithm="sha256", follow=True,
                      tree=None, depot_url="http://dst.test:6714", capacity=4 * MiB)
    assert plan.listed_max == 5  # what 4 MiB holds at once, and one more
    state = PublicationState(plan, "http://dst.test:6714", "http://dst.test:6714/v1/data/" + "w" * 32, 1.0)
    for i in range(8):
        cap = f"{i:032d}"
        state.land(BlockRecord(i, i * MiB, MiB, "ab" * 32, Allocation("http://dst.test:6714", cap, cap, cap,
                                                                       MiB, 9e9, "soft")))
    state.drain(published.Drained(ranges=((0, 2),)))
    document = state.document(2.0)
    assert [b.index for b in document.blocks] == [2, 3, 4, 5, 6]
    assert state.unlisted() == 1
    again = published.parse(json.loads(published.frame(document.to_dict()).split(b"\n", 1)[1]))
    assert [b.index for b in again.blocks] == [2, 3, 4, 5, 6]
    assert not again.final
    assert again.sender.landed == 8


def test_a_torn_frame_is_read_again_and_another_file_is_no_publication() -> None:
    state = published.Drained(seq=3, ranges=((0, 4), (6, 7)), drained_bytes=5)
    data = state.framed()
    assert published.parse_drained(published.unframe(data, published.DRAINED_FORMAT)) == state
    assert published.unframe(data[:-3], published.DRAINED_FORMAT) is None  # half written: read again
    longer = published.Drained(seq=2, ranges=tuple((i * 3, i * 3 + 1) for i in range(50))).framed()
    overwritten = data + longer[len(data):]  # a shorter version over a longer one: the frame says where it ends
    assert published.parse_drained(published.unframe(overwritten, published.DRAINED_FORMAT)) == state
    with pytest.raises(published.PublishedError):
        published.unframe(b"\x89PNG\r\n\x1a\n" + bytes(200))
    assert not published.is_publication(b"GIF89a")
    assert published.ranges([5, 1, 2, 3, 9]) == ((1, 4), (5, 6), (9, 10))


# -- the command ----------------------------------------------------------------------------------------------------


async def test_a_file_larger_than_the_destination_stops_before_any_block(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    path, _ = payload(tmp_path, 24 * MiB)
    async with depots(network, ["a"], tmp_path, capacity=64 * MiB), \
            depots(network, ["dst"], tmp_path, capacity=16 * MiB, max_allocation=4 * MiB):
        code = await send.run([str(path), "--to", "dst", "--depots", str(depots_file(tmp_path, network, ["a", "dst"])),
                               "--block-size", "1MiB", "--no-progress", "--manifest", str(tmp_path / "m.json"),
                               "--memory", str(tmp_path / "edges.json")], io=emulated(network))
        assert code == ExitCode.UNREACHABLE
        err = capsys.readouterr().err
        assert "big.bin is 24.0 MiB" in err, err
        assert "16.0 MiB free (of 16.0 MiB)" in err, err
        assert "--follow" in err
        assert await used(network, "dst") == 0
        assert await used(network, "a") == 0
    assert not (tmp_path / "m.json.journal").exists()


async def test_every_send_publishes_its_manifest_and_prints_the_receivers_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    path, data = payload(tmp_path, 5 * MiB + 3)
    async with depots(network, ["a", "dst"], tmp_path) as clients:
        code = await send.run([str(path), "--to", "dst", "--depots", str(depots_file(tmp_path, network, ["a", "dst"])),
                               "--block-size", "1MiB", "--json", "--manifest", str(tmp_path / "m.json"),
                               "--memory", str(tmp_path / "edges.json")], io=emulated(network))
        assert code == ExitCode.OK
        captured = capsys.readouterr()
        summary = json.loads(captured.out)
        url = summary["receive_url"]
        assert url.startswith(network.url("dst") + "/v1/data/")
        assert f"at the far end: lnet-get {url} -o big.bin" in captured.err
        assert captured.err.count(url) == 1  # shown once
        document = published.unframe(await clients["dst"].read(url.rsplit("/", 1)[1]))
        publication = published.parse(document)
        assert publication.final
        assert not publication.follow
        assert publication.manifest is not None
        fetched = manifest_format.parse(publication.manifest)
        assert fetched.file_hash == summary["file_hash"]
        assert fetched.size == len(data)
        assert fetched.to_dict() == json.loads((tmp_path / "m.json").read_text())


async def test_a_destination_that_fills_meanwhile_is_waited_for_then_the_send_stops_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    # dst holds 24 MiB; once 6 blocks of the 20 have landed, another client takes most of the rest.
    network = Network(default_rate=4 * MiB)
    path, data = payload(tmp_path, 20 * MiB)
    manifest = tmp_path / "m.json"
    argv = [str(path), "--to", "dst", "--depots", str(depots_file(tmp_path, network, ["dst"])), "--block-size", "1MiB",
            "--no-progress", "--manifest", str(manifest), "--memory", str(tmp_path / "edges.json"),
            "--space-wait", "30s", "--json"]
    async with depots(network, ["dst"], tmp_path, capacity=24 * MiB, max_allocation=8 * MiB) as clients:
        other = clients["dst"]
        taken = []

        async def squat() -> None:
            while (await other.status())["used"] < 6 * MiB:  # noqa: ASYNC110 - a depot's state, not an event
                await trio.sleep(0.05)
            while True:
                try:
                    taken.append(await other.allocate_one(MiB, 3600))
                except Exception:  # noqa: BLE001 - full: the depot is the squatter's now
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(squat)
            started = trio.current_time()
            code = await send.run(argv, io=emulated(network))
        waited = trio.current_time() - started
        assert code == ExitCode.UNREACHABLE
        captured = capsys.readouterr()
        assert "dst has had no room for a block for 30 s" in captured.err
        assert "to resume, run the same command again" in captured.err
        assert 30 <= waited < 120, captured.err
        assert (await other.status())["used"] <= 24 * MiB
        assert manifest.with_name("m.json.journal").exists()
        for alloc in taken:  # the other client leaves: the same command finishes the transfer
            await other.free(alloc.manage)
        assert await send.run(argv, io=emulated(network)) == ExitCode.OK
        summary = json.loads(capsys.readouterr().out)
        assert summary["resumed_blocks"] >= 1
        document = published.parse(published.unframe(await other.read(summary["receive_url"].rsplit("/", 1)[1])))
        assert document.final
        got = manifest_format.parse(document.manifest)
        assert b"".join([await other.read(b.sources[0].read) for b in got.blocks]) == data
