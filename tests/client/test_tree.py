"""Directory trees: the round trip through a real depot, resume, and the rebuild's refusals of hostile manifests.

The round trip runs the commands against a real depot process; the other command-level tests run the whole
commands (parsing, output, exit code) in the test's loop on the emulated network (``tests/client/network.py``),
through their ``ClientIO`` seam, on trio's autojump clock."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import trio

from lnet.client.commands import get, send
from lnet.client.commands.clientio import ClientIO
from lnet.client.engines.smallfiles import Piece, PlannedBlock
from lnet.client.exits import ExitCode
from lnet.client.fetching.blocks import get_file
from lnet.client.fetching.tree import stream_path
from lnet.client.formats import tree
from lnet.client.formats.manifest import BlockEntry, BlockSource, Manifest, ManifestError, hash_bytes
from lnet.client.sending.tree import FileArrivals

from .loopback import depots_file, loopback_depots
from .network import Network, depots, inline

CAPABILITY = "r" * 43
NAMES = ["sp ace.txt", "ünïcödé ✓.bin", "-dash", "quote'\"", "new\nline", ".hidden", "back\\slash", "*star?"]


def awkward_tree(root: Path) -> None:
    """Awkward names, empty files, empty directories, symlinks (relative, dangling, absolute), modes, mtimes."""
    (root / "deep" / "er" / "est").mkdir(parents=True)
    (root / "empty dir").mkdir()
    (root / "ro dir").mkdir()
    for i, name in enumerate(NAMES):
        (root / "deep" / name).write_bytes(os.urandom(1000 * i + 7))
    (root / "deep" / "er" / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 5))
    (root / "zero").write_bytes(b"")
    (root / "deep" / "er" / "zero too").write_bytes(b"")
    (root / "ro dir" / "inside").write_bytes(b"x" * 100)
    os.symlink("../zero", root / "deep" / "link to zero")
    os.symlink("nowhere/at/all", root / "dangling")
    os.symlink("/etc/passwd", root / "deep" / "absolute")
    os.chmod(root / "deep" / NAMES[0], 0o751)
    os.chmod(root / "deep" / NAMES[1], 0o600)
    os.chmod(root / "ro dir" / "inside", 0o444)
    for n, path in enumerate(sorted(root.rglob("*"), key=lambda p: -len(p.parts))):  # children before parents
        os.utime(path, ns=(1_600_000_000_123_456_789 + n, 1_600_000_000_123_456_789 + n), follow_symlinks=False)
    os.chmod(root / "ro dir", 0o555)
    os.utime(root / "ro dir", ns=(1_500_000_000_000_000_001,) * 2)


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Everything the rebuild must restore, by relative path (never following a symlink)."""
    found: dict[str, tuple[Any, ...]] = {}
    for path in root.rglob("*"):
        info = path.lstat()
        relative = path.relative_to(root).as_posix()
        if stat.S_ISLNK(info.st_mode):
            found[relative] = ("symlink", os.readlink(path), info.st_mtime_ns)
        elif stat.S_ISDIR(info.st_mode):
            found[relative] = ("dir", stat.S_IMODE(info.st_mode), info.st_mtime_ns)
        else:
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found[relative] = ("file", stat.S_IMODE(info.st_mode), info.st_mtime_ns, info.st_size, digest)
    return found


def test_walk_records_symlinks_without_following_them(tmp_path: Path) -> None:
    awkward_tree(tmp_path)
    entries = {e.path: e for e in tree.walk(tmp_path)}
    assert entries["deep/absolute"] == tree.Entry("deep/absolute", "symlink", 0, entries["deep/absolute"].mtime_ns,
                                                  target="/etc/passwd")
    assert entries["empty dir"].type == "dir"
    assert entries["zero"].size == 0
    paths = list(entries)
    assert paths.index("deep") < paths.index("deep/er") < paths.index("deep/er/big.bin")


def test_a_tree_round_trip_restores_everything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "src"
    source.mkdir()
    awkward_tree(source)
    with loopback_depots(["d"], tmp_path) as depots:
        config = depots_file(tmp_path, depots)
        manifest = tmp_path / "tree.manifest.json"
        code = send.main([str(source), "--to", "d", "--depots", str(config), "--memory", str(tmp_path / "m.json"),
                          "--block-size", "1MiB", "--manifest", str(manifest), "--json", "--bdp", "64KiB",
                          "--priority", "*.bin"])
        assert code == ExitCode.OK
        summary = json.loads(capsys.readouterr().out)
        assert summary["files"] == len(NAMES) + 4
        assert manifest.stat().st_mode & 0o777 == 0o600
        arrivals = [a for a in summary["arrivals"] if a["path"] != "zero" and "zero" not in a["path"]]
        urgent = [i for i, a in enumerate(arrivals) if a["priority"]]
        assert {arrivals[i]["path"] for i in urgent} == {"deep/ünïcödé ✓.bin", "deep/er/big.bin"}
        # queued first (arrival times on loopback are noise): the priority small file opens the first block
        assert json.loads(manifest.read_text())["blocks"][0][0]["path"] == "deep/ünïcödé ✓.bin"
        out = tmp_path / "out"
        assert get.main([str(manifest), "-o", str(out), "--no-progress", "--json"]) == ExitCode.OK
        assert json.loads(capsys.readouterr().out)["ok"] is True
    assert snapshot(out) == snapshot(source)
    assert not stream_path(out).exists()
    assert not any(".lnet-part" in p.name for p in out.rglob("*"))


def emulated_depots_file(tmp_path: Path, network: Network, names: list[str]) -> Path:
    path = tmp_path / "depots.toml"
    path.write_text('here = "here"\n' + "".join(f'[depots.{n}]\nurl = "{network.url(n)}"\n' for n in names))
    return path


async def test_a_rerun_rebuilds_from_the_fetched_stream_without_the_network(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    awkward_tree(source)
    manifest = tmp_path / "tree.manifest.json"
    out = tmp_path / "out"
    network = Network()
    config = emulated_depots_file(tmp_path, network, ["d"])
    io = ClientIO(transport=network.transport("here"), offload=inline)
    async with depots(network, ["d"], tmp_path):
        assert await send.run([str(source), "--to", "d", "--depots", str(config), "--memory", str(tmp_path / "m.json"),
                               "--manifest", str(manifest)], io=io) == ExitCode.OK
        said = capsys.readouterr().err
        assert f"sent {len(NAMES) + 4} files (" in said  # the plain summary of a tree, on stderr
        assert "pipelining depth" in said
        assert f"manifest: {manifest} (fetch with: lnet-get {manifest} -o src)" in said
        loaded = tree.load(manifest)
        # an lnet-get that fetched the stream and was stopped before the rebuild
        await get_file(loaded.stream, stream_path(out), transport=network.transport("here"))
        (out / "deep").mkdir(parents=True)
        (out / "deep" / NAMES[2]).write_bytes(b"half-written by the earlier run")
    # the depots are gone: only the verified stream on disk can finish the job
    assert await get.run([str(manifest), "-o", str(out), "--no-progress", "--json"], io=io) == ExitCode.OK
    assert json.loads(capsys.readouterr().out)["fetched_bytes"] == 0
    assert snapshot(out) == snapshot(source)


# -- hostile manifests -----------------------------------------------------------------------------------------


def local_tree(entries: list[dict[str, Any]], contents: dict[str, bytes]) -> tuple[dict[str, Any], bytes]:
    """A valid tree manifest document (one block per non-empty file) and its stream's bytes, without depots."""
    stream = b""
    blocks, pieces = [], []
    for entry in entries:
        data = contents.get(entry["path"], b"")
        if entry["type"] == "file" and data:
            source = BlockSource("http://127.0.0.1:9", CAPABILITY, 2e9)
            blocks.append(BlockEntry(len(blocks), len(stream), len(data), hash_bytes("sha256", data), (source,)))
            pieces.append([{"path": entry["path"], "offset": 0, "length": len(data)}])
            stream += data
    manifest = Manifest("t", len(stream), 1 << 20, "sha256", hash_bytes("sha256", stream), 1.7e9, (), tuple(blocks))
    document = {"format": tree.FORMAT, "name": "t", "created": 1.7e9, "entries": entries, "blocks": pieces,
                "stream": manifest.to_dict()}
    return document, stream


def file_entry(path: str, size: int) -> dict[str, Any]:
    return {"path": path, "type": "file", "mode": 0o644, "mtime_ns": 10**18, "size": size}


def dir_entry(path: str) -> dict[str, Any]:
    return {"path": path, "type": "dir", "mode": 0o755, "mtime_ns": 10**18}


def link_entry(path: str, target: str) -> dict[str, Any]:
    return {"path": path, "type": "symlink", "target": target, "mtime_ns": 10**18}


@pytest.mark.parametrize(
    ("entries", "needle"),
    [
        ([file_entry("/etc/evil", 4)], "absolute"),
        ([file_entry("../evil", 4)], "'..'"),
        ([dir_entry("a"), file_entry("a/../../evil", 4)], "'..'"),
        ([file_entry("./evil", 4)], "'.' component"),
        ([dir_entry("a"), file_entry("a//evil", 4)], "empty"),
        ([file_entry("evil\0.txt", 4)], "NUL"),
        ([file_entry("evil", 4), file_entry("evil", 4)], "listed twice"),
        ([dir_entry("a"), dir_entry("a")], "listed twice"),
        ([link_entry("l", "/tmp"), file_entry("l/evil", 4)], "is a symlink"),
        ([link_entry("l", ".."), dir_entry("l/d"), file_entry("l/d/evil", 4)], "is a symlink"),
        ([file_entry("f", 4), file_entry("f/evil", 4)], "not a directory"),
        ([file_entry("a/evil", 4)], "not a directory listed before"),
        ([{"path": "x", "type": "fifo", "mode": 0, "mtime_ns": 0}], "expected dir, file or symlink"),
        ([{**file_entry("x", 4), "mode": 0o177777}], "outside"),
        ([{**file_entry("x", 4), "owner": "root"}], "unknown fields"),
    ],
)
def test_a_hostile_manifest_is_refused_before_anything_is_written(
    tmp_path: Path, entries: list[dict[str, Any]], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    contents = {e["path"]: b"evil" for e in entries if e["type"] == "file"}
    document, _ = local_tree(entries, contents)
    with pytest.raises(ManifestError, match=needle.replace("?", r"\?").replace(".", r"\.")):
        tree.parse(document)
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(document))
    out = tmp_path / "inside" / "out"
    out.parent.mkdir()
    assert get.main([str(path), "-o", str(out), "--no-progress"]) == ExitCode.USAGE
    assert "invalid manifest" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["hostile.json", "inside"]


def test_packing_must_cover_each_file_exactly() -> None:
    document, _ = local_tree([file_entry("a", 4), file_entry("b", 3)], {"a": b"aaaa", "b": b"bbb"})
    tree.parse(document)
    short = json.loads(json.dumps(document))
    short["blocks"][0][0]["length"] = 3
    with pytest.raises(ManifestError, match="pieces hold 3 bytes"):
        tree.parse(short)
    swapped = json.loads(json.dumps(document))
    swapped["blocks"][0][0]["offset"] = 1
    with pytest.raises(ManifestError, match="do not follow"):
        tree.parse(swapped)
    missing = json.loads(json.dumps(document))
    missing["entries"][1]["size"] = 4
    with pytest.raises(ManifestError, match="do not hold all"):
        tree.parse(missing)


def test_the_rebuild_never_follows_a_symlink_already_in_the_target(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(outside, out / "sub")
    document, data = local_tree([dir_entry("sub"), file_entry("sub/x", 4)], {"sub/x": b"evil"})
    stream = tmp_path / "stream"
    stream.write_bytes(data)
    with pytest.raises(tree.RebuildError, match="not a directory"):
        tree.rebuild(tree.parse(document), stream, out)
    assert list(outside.iterdir()) == []


def test_the_rebuild_refuses_a_directory_in_a_files_place(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "x" / "child").mkdir(parents=True)
    document, data = local_tree([file_entry("x", 4)], {"x": b"data"})
    stream = tmp_path / "stream"
    stream.write_bytes(data)
    with pytest.raises(tree.RebuildError, match="directory is in the way"):
        tree.rebuild(tree.parse(document), stream, out)
    assert not any(".lnet-part" in p.name for p in out.rglob("*"))


def test_a_tree_manifest_saves_privately_and_loads_the_same(tmp_path: Path) -> None:
    document, _ = local_tree([dir_entry("d"), file_entry("d/f", 2), link_entry("l", "d/f")], {"d/f": b"hi"})
    manifest = tree.parse(document)
    path = tmp_path / "m.json"
    manifest.save(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert tree.load(path) == manifest
    assert tree.is_tree_document(path)
    assert CAPABILITY not in repr(manifest)


# -- the send side's own parts ----------------------------------------------------------------------------------


def test_file_arrivals_follow_the_blocks_delivered() -> None:
    entries = [tree.Entry("d", "dir", 0o755, 0), tree.Entry("d/a", "file", 0o644, 0, 5),
               tree.Entry("d/b", "file", 0o644, 0, 3), tree.Entry("e", "file", 0o644, 0, 0)]
    blocks = [PlannedBlock((Piece(1, 0, 2),)), PlannedBlock((Piece(1, 2, 3), Piece(2, 0, 1))),
              PlannedBlock((Piece(2, 1, 2),))]
    arrivals = FileArrivals(entries, blocks)
    arrivals.start(0.0)
    assert arrivals.arrived == [(3, 0.0)]  # the empty file
    arrivals.delivered(2, 1.0)  # out of order: b is still missing its first byte
    arrivals.delivered(1, 2.0)
    assert arrivals.arrived == [(3, 0.0), (2, 2.0)]
    arrivals.delivered(0, 3.0)
    assert arrivals.arrived == [(3, 0.0), (2, 2.0), (1, 3.0)]
    assert arrivals.total_files == 3


async def test_a_fixed_pipeline_depth_is_used_as_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for i in range(30):
        (source / f"f{i}").write_bytes(os.urandom(200 * i))
    network = Network()
    config = emulated_depots_file(tmp_path, network, ["d"])
    io = ClientIO(transport=network.transport("here"), offload=inline)
    async with depots(network, ["d"], tmp_path):
        argv = [str(source), "--to", "d", "--depots", str(config), "--memory", str(tmp_path / "m.json"), "--json",
                "--manifest", str(tmp_path / "m.json.manifest"), "--bdp", "8KiB"]
        assert await send.run([*argv, "--pipeline-depth", "2"], io=io) == ExitCode.OK
        fixed = json.loads(capsys.readouterr().out)["plan"]
        assert await send.run(argv, io=io) == ExitCode.OK
        tuned = json.loads(capsys.readouterr().out)["plan"]
    assert (fixed["pp"], fixed["depth"], fixed["fixed"], fixed["bdp"]) == (2, 2, True, 8192)
    assert not tuned["fixed"]
    assert tuned["pp"] > fixed["pp"]
    assert tuned["blocks"] < fixed["blocks"]  # larger batches: more small files per block


def test_send_refuses_a_tree_with_a_fifo_and_a_bad_depth(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "depots.toml"
    config.write_text('here = "me"\n[depots.c]\nurl = "http://127.0.0.1:9"\n')
    source = tmp_path / "src"
    source.mkdir()
    (source / "ok").write_bytes(b"x")
    assert send.main([str(source), "--to", "c", "--depots", str(config), "--pipeline-depth", "0"]) == ExitCode.USAGE
    assert "at least 1" in capsys.readouterr().err
    os.mkfifo(source / "pipe")
    assert send.main([str(source), "--to", "c", "--depots", str(config)]) == ExitCode.USAGE
    assert "not a regular file, directory or symlink" in capsys.readouterr().err
