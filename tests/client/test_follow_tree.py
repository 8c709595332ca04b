"""``lnet-send DIR --follow`` and ``lnet-get URL --follow``: a tree put in place as its packed stream arrives.

The whole commands (``send.run``, ``get.run``) on the emulated network (tests/client/network.py) under trio's
autojump clock, a tree several times the destination's capacity: it arrives identical, its files appear before
the sender is done, the spool gives back what was extracted, a receiver stopped midway resumes without writing a
file twice, and a hostile shape is refused before anything is written. Then the pieces on their own: the
publication's fields, the sender's plan, ``Extraction`` and ``punch_hole``.
"""

from __future__ import annotations

import os
import sys
from functools import partial
from pathlib import Path

import pytest
import trio

from lnet.client.commands import get, send
from lnet.client.exits import ExitCode
from lnet.client.fetching.follow_tree import Extraction, punch_hole
from lnet.client.fetching.part_names import part_path, state_path
from lnet.client.fetching.tree import stream_path
from lnet.client.formats import lines, published, tree
from lnet.client.formats.tree import Entry, TreePiece
from lnet.client.sending.publish import PublicationCaps, Publisher, plan_sizes
from lnet.client.wire.depot_client import Allocation, DepotClient

from .network import MiB, Network, depots
from .test_follow import depots_file, emulated, url_from

CAPACITY = 4 * MiB
MTIME = 1_600_000_000_123_456_789


def make_tree(root: Path, files: int, size: int) -> int:
    """A tree under ``root``: nested and read-only directories, files of many sizes (one over several blocks),
    an empty file, an empty directory, symlinks, modes and times; its stream's size."""
    dirs = {"a": 0o755, "a/deep": 0o700, "ro": 0o555, "empty": 0o750}
    for path in dirs:
        (root / path).mkdir(parents=True)
    contents = {"a/big.bin": os.urandom(3 * MiB + 123), "empty.txt": b"", "x.sh": os.urandom(5000)}
    contents.update({f"a/deep/k{i:02}.dat": os.urandom(size // 2 + i * 7919 % size) for i in range(files)})
    contents.update({f"ro/r{i}": os.urandom(400_000 + i) for i in range(4)})
    for i, (path, data) in enumerate(sorted(contents.items())):
        (root / path).write_bytes(data)
        os.chmod(root / path, 0o444 if path.startswith("ro/") else 0o755 if path.endswith(".sh") else 0o640)
        os.utime(root / path, ns=(MTIME + i, MTIME + i))
    os.symlink("a/big.bin", root / "link")
    os.symlink("../nowhere", root / "a" / "dangling")
    for path in ("link", "a/dangling"):
        os.utime(root / path, ns=(MTIME - 5, MTIME - 5), follow_symlinks=False)
    for i, (path, mode) in enumerate(sorted(dirs.items(), reverse=True)):
        os.chmod(root / path, mode)
        os.utime(root / path, ns=(MTIME - 100 - i, MTIME - 100 - i))
    return sum(len(data) for data in contents.values())


def assert_identical(source: Path, out: Path) -> None:
    assert tree.walk(out) == tree.walk(source)  # names, types, modes, times, sizes, symlinks' targets
    for entry in tree.walk(source):
        if entry.type == "file":
            assert (out / entry.path).read_bytes() == (source / entry.path).read_bytes(), entry.path


def complete_files(source: Path, out: Path) -> set[str]:
    """The files under ``out`` whose bytes are already the source's."""
    found = set()
    for entry in tree.walk(source):
        path = out / entry.path
        if entry.type == "file" and path.is_file() and path.stat().st_size == entry.size:
            if path.read_bytes() == (source / entry.path).read_bytes():
                found.add(entry.path)
    return found


def send_argv(tmp_path: Path, config: Path, root: Path) -> list[str]:
    return [str(root), "--to", "dst", "--depots", str(config), "--block-size", "1MiB", "--follow", "--json",
            "--no-progress", "--manifest", str(tmp_path / "tree.manifest.json"), "--memory",
            str(tmp_path / "edges.json")]


@pytest.fixture(autouse=True)
def writable_after(tmp_path: Path) -> object:
    """The trees hold read-only directories: give pytest back the right to remove them."""
    yield None
    for directory, _, _ in os.walk(tmp_path):
        os.chmod(directory, 0o755)


@pytest.mark.skipif(sys.platform != "linux", reason="punching holes in the spool is Linux's fallocate")
async def test_a_tree_several_times_the_destination_arrives_file_by_file_and_the_spool_stays_small(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network(default_rate=8 * MiB)
    root = tmp_path / "photos"
    stream_size = make_tree(root, 40, 600_000)
    assert stream_size > 5 * CAPACITY
    config = depots_file(tmp_path, network, ["dst"])
    out = tmp_path / "received"
    spool = part_path(stream_path(out))
    codes: dict[str, int] = {}
    early: set[str] = set()  # files complete under OUT while the sender was still sending
    most_spooled = 0
    async with depots(network, ["dst"], tmp_path, capacity=CAPACITY, max_allocation=2 * MiB):
        async with trio.open_nursery() as nursery:

            async def sender() -> None:
                codes["send"] = await send.run(send_argv(tmp_path, config, root), io=emulated(network))

            async def receiver(url: str) -> None:
                codes["get"] = await get.run([url, "-o", str(out), "--follow", "--no-progress"],
                                             io=emulated(network))

            async def watch() -> None:
                nonlocal most_spooled
                while "get" not in codes:
                    if spool.exists():
                        most_spooled = max(most_spooled, os.stat(spool).st_blocks * 512)
                    if "send" not in codes and out.is_dir():
                        early.update(complete_files(root, out))
                    await trio.sleep(0.05)

            nursery.start_soon(sender)
            url = await url_from(capsys, [])
            nursery.start_soon(receiver, url)
            nursery.start_soon(watch)
    assert codes == {"send": ExitCode.OK, "get": ExitCode.OK}
    assert_identical(root, out)
    assert "a/big.bin" in early  # files in place long before the sender is done
    assert len(early) > 10
    assert 0 < most_spooled < stream_size // 4, (most_spooled, stream_size)
    assert not spool.exists()
    assert not state_path(stream_path(out)).exists()
    assert not stream_path(out).exists()


async def test_a_receiver_stopped_midway_resumes_without_writing_a_file_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network(default_rate=8 * MiB)
    root = tmp_path / "photos"
    make_tree(root, 24, 500_000)
    config = depots_file(tmp_path, network, ["dst"])
    out = tmp_path / "received"
    argv = ["-o", str(out), "--follow", "--no-progress"]
    codes: dict[str, int] = {}
    async with depots(network, ["dst"], tmp_path, capacity=CAPACITY, max_allocation=2 * MiB):
        async with trio.open_nursery() as nursery:

            async def sender() -> None:
                codes["send"] = await send.run(send_argv(tmp_path, config, root), io=emulated(network))

            nursery.start_soon(sender)
            url = await url_from(capsys, [])
            with trio.move_on_after(60) as first_run:
                async with trio.open_nursery() as receiving:
                    receiving.start_soon(partial(get.run, [url, *argv], io=emulated(network)))
                    while len(complete_files(root, out) if out.is_dir() else ()) < 8:  # noqa: ASYNC110 - disk
                        await trio.sleep(0.05)
                    receiving.cancel_scope.cancel()
            assert not first_run.cancelled_caught
            placed = complete_files(root, out)
            inodes = {path: (out / path).stat().st_ino for path in placed}
            documents, _ = lines.decode(state_path(stream_path(out)).read_bytes())
            punched = published.indices([tuple(r) for d in documents[1:] for r in d.get("punched", ())])
            assert punched  # the resumed run must read those back from the files
            codes["get"] = await get.run([url, *argv], io=emulated(network))
    assert codes == {"send": ExitCode.OK, "get": ExitCode.OK}
    assert_identical(root, out)
    assert {path: (out / path).stat().st_ino for path in placed} == inodes  # not written again


@pytest.mark.parametrize(("entries", "blocks", "why"), [
    ([{"path": "../evil", "type": "file", "mode": 0o644, "mtime_ns": 0, "size": 10}],
     [[{"path": "../evil", "offset": 0, "length": 10}]], "climbs with '..'"),
    ([{"path": "up", "type": "symlink", "target": "../outside", "mtime_ns": 0},
      {"path": "up/evil", "type": "file", "mode": 0o644, "mtime_ns": 0, "size": 10}],
     [[{"path": "up/evil", "offset": 0, "length": 10}]], "is a symlink"),
    ([{"path": "f", "type": "file", "mode": 0o644, "mtime_ns": 0, "size": 10}],
     [[{"path": "f", "offset": 0, "length": 9}]], "do not hold all of"),
])
async def test_a_hostile_shape_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock,
    entries: list[dict[str, object]], blocks: list[list[dict[str, object]]], why: str,
) -> None:
    network = Network()
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "jail" / "received"
    out.parent.mkdir()
    async with depots(network, ["dst"], tmp_path, capacity=CAPACITY, max_allocation=2 * MiB) as clients:
        url = await publish_shape(clients["dst"], {"entries": entries, "blocks": blocks}, 10)
        code = await get.run([url, "-o", str(out), "--follow", "--no-progress"], io=emulated(network))
    assert code == ExitCode.USAGE
    assert why in capsys.readouterr().err
    assert list(outside.iterdir()) == []
    assert list(out.parent.iterdir()) == []


async def test_a_symlink_in_the_way_under_out_is_not_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "received"
    out.mkdir()
    os.symlink(outside, out / "d")  # what a hostile sender cannot do, but a stale OUT may hold
    shape = {"entries": [{"path": "d", "type": "dir", "mode": 0o755, "mtime_ns": 0},
                         {"path": "d/f", "type": "file", "mode": 0o644, "mtime_ns": 0, "size": 10}],
             "blocks": [[{"path": "d/f", "offset": 0, "length": 10}]]}
    async with depots(network, ["dst"], tmp_path, capacity=CAPACITY, max_allocation=2 * MiB) as clients:
        url = await publish_shape(clients["dst"], shape, 10)
        code = await get.run([url, "-o", str(out), "--follow", "--no-progress"], io=emulated(network))
    assert code == ExitCode.USAGE
    assert "not a directory is in the way" in capsys.readouterr().err
    assert list(outside.iterdir()) == []


async def publish_shape(client: DepotClient, shape: dict[str, object], size: int) -> str:
    """A tree's publication with ``shape``, as ``lnet-send --follow`` opens it (no block sent); its URL."""
    plan = plan_sizes(name="t", kind="tree", spans=[(0, size)], block_size=MiB, hash_algorithm="sha256",
                      follow=True, tree=shape, depot_url=client.base_url, capacity=CAPACITY)
    return (await Publisher(client, plan, duration_s=3600).open(None)).url


# -- the pieces ----------------------------------------------------------------------------------------------------


def test_the_shape_has_its_own_allocation_and_the_publication_names_it() -> None:
    shape = {"entries": [{"path": f"f{i}", "type": "file", "mode": 0o644, "mtime_ns": 0, "size": MiB}
                         for i in range(64)],
             "blocks": [[{"path": f"f{i}", "offset": 0, "length": MiB}] for i in range(64)]}
    spans = [(i * MiB, MiB) for i in range(64)]
    with_tree = plan_sizes(name="t", kind="tree", spans=spans, block_size=MiB, hash_algorithm="sha256", follow=True,
                           tree=shape, depot_url="http://dst.test:6714", capacity=4 * MiB)
    without = plan_sizes(name="t", kind="file", spans=spans, block_size=MiB, hash_algorithm="sha256", follow=True,
                         tree=None, depot_url="http://dst.test:6714", capacity=4 * MiB)
    assert with_tree.document_size == without.document_size  # the shape is not in the publication
    assert with_tree.tree_size == len(published.frame(published.tree_document(shape)))
    assert with_tree.needed == without.needed + with_tree.tree_size
    assert published.unframe(with_tree.tree_framed(), published.TREE_FORMAT)["entries"] == shape["entries"]


def test_the_publication_carries_tree_url_for_a_followed_tree_only() -> None:
    base = {"format": published.FORMAT, "name": "t", "kind": "tree", "size": 10, "block_size": MiB,
            "blocks_total": 1, "hash_algorithm": "sha256", "follow": True, "depot": "http://dst.test:6714",
            "created": 1.0, "updated": 1.0, "seq": 1,
            "sender": {"state": "sending", "landed": 0, "landed_bytes": 0, "waiting": None},
            "ack": "http://dst.test:6714/v1/data/" + "a" * 43, "blocks": [], "final": False, "file_hash": None,
            "tree_url": "http://dst.test:6714/v1/data/" + "b" * 43, "manifest": None}
    assert published.parse(base).tree_url == base["tree_url"]
    assert published.parse(published.unframe(published.parse(base).framed())) == published.parse(base)
    with pytest.raises(published.PublishedError, match="tree_url is given for a tree sent with --follow"):
        published.parse({**base, "tree_url": None})
    with pytest.raises(published.PublishedError, match="tree_url is given for a tree sent with --follow"):
        published.parse({**base, "kind": "file"})
    with pytest.raises(published.PublishedError, match="tree_url must be an http"):
        published.parse({**base, "tree_url": "file:///etc/passwd"})


def test_the_shapes_allocation_goes_into_the_journal_and_back() -> None:
    def allocation(tag: str) -> Allocation:
        return Allocation("http://dst.test:6714", tag * 43, tag.upper() * 43, "m" + tag * 42, 1000, 2e9)

    caps = PublicationCaps("http://dst.test:6714", allocation("d"), allocation("r"), allocation("t"))
    assert PublicationCaps.from_dict(caps.to_dict()) == caps
    older = {key: value for key, value in caps.to_dict().items() if key != "tree"}  # a journal from before
    assert PublicationCaps.from_dict(older).tree is None


def test_a_file_is_ready_once_its_blocks_are_held_and_a_block_spent_once_its_files_are_placed() -> None:
    entries = [Entry("d", "dir", 0o755, 0), Entry("d/a", "file", 0o644, 0, 150), Entry("b", "file", 0o644, 0, 50),
               Entry("e", "file", 0o644, 0, 0)]
    blocks = [[TreePiece("d/a", 0, 100)], [TreePiece("d/a", 100, 50), TreePiece("b", 0, 50)]]
    extraction = Extraction(entries, blocks)
    assert extraction.ready == {3}  # the empty file, at once
    extraction.file_placed(3)
    extraction.block_held(1)
    assert extraction.ready == {2}
    extraction.file_placed(2)
    assert extraction.punchable(lambda block: True) == []  # block 1 still holds a piece of d/a
    extraction.block_held(0)
    assert extraction.ready == {1}
    extraction.file_placed(1)
    assert extraction.punchable(lambda block: block != 1) == [0]  # the caller's rule: hashed, in the state
    assert extraction.punchable(lambda block: True) == [0, 1]
    extraction.block_punched(0)
    extraction.block_punched(1)
    assert extraction.done
    assert extraction.punchable(lambda block: True) == []
    extraction.punched_lost(1)  # read back wrong on a resume: both its files written again once it is back
    assert (extraction.placed, extraction.ready, extraction.done) == ({3}, {1, 2}, False)


@pytest.mark.skipif(sys.platform != "linux", reason="Linux's fallocate")
def test_a_punched_hole_gives_back_its_space_and_reads_as_zeros(tmp_path: Path) -> None:
    path = tmp_path / "spool"
    data = os.urandom(8 * MiB)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
        before = os.fstat(fd).st_blocks * 512
        assert punch_hole(fd, MiB, 4 * MiB)
        after = os.fstat(fd)
        assert after.st_size == len(data)
        assert after.st_blocks * 512 <= before - 4 * MiB
        assert os.pread(fd, 4 * MiB, MiB) == bytes(4 * MiB)
        assert os.pread(fd, MiB, 0) + os.pread(fd, 3 * MiB, 5 * MiB) == data[:MiB] + data[5 * MiB:]
    finally:
        os.close(fd)
