"""The manifest: round trip, private and atomic saving, and refusal of every kind of bad input."""

from __future__ import annotations

import copy
import json
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lnet.client.formats.manifest import (
    BlockEntry,
    BlockSource,
    Manifest,
    ManifestError,
    block_hasher,
    hash_bytes,
    load,
    parse,
)
from lnet.protocol import new_capability

DATA = bytes(range(256)) * 40  # 10240 bytes: blocks of 4096, 4096, 2048


def make_manifest(algorithm: str = "sha256", data: bytes = DATA, block_size: int = 4096) -> Manifest:
    blocks = tuple(
        BlockEntry(
            index=i,
            offset=offset,
            length=len(data[offset : offset + block_size]),
            hash=hash_bytes(algorithm, data[offset : offset + block_size]),
            sources=(
                BlockSource("http://sunnyvale.example:6714", new_capability(), 1.9e9),
                BlockSource("https://denver.example", new_capability(), 1.9e9),
            ),
        )
        for i, offset in enumerate(range(0, len(data), block_size))
    )
    return Manifest(
        name="data.bin",
        size=len(data),
        block_size=block_size,
        hash_algorithm=algorithm,
        file_hash=hash_bytes(algorithm, data),
        created=1.7e9,
        path=("ornl", "atl", "sunnyvale"),
        blocks=blocks,
    )


@pytest.mark.parametrize("algorithm", ["sha256", "blake2b"])
def test_a_saved_manifest_loads_back_equal(tmp_path: Path, algorithm: str) -> None:
    manifest = make_manifest(algorithm)
    manifest.save(tmp_path / "m.json")
    assert load(tmp_path / "m.json") == manifest
    document = json.loads((tmp_path / "m.json").read_text())
    assert document["format"] == "lnet-manifest/1"
    assert [b["length"] for b in document["blocks"]] == [4096, 4096, 2048]


def test_an_empty_file_has_no_blocks(tmp_path: Path) -> None:
    manifest = make_manifest(data=b"")
    assert manifest.blocks == ()
    manifest.save(tmp_path / "m.json")
    assert load(tmp_path / "m.json").size == 0


def test_the_manifest_is_private_and_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "m.json"
    target.write_text("old, world-readable")
    target.chmod(0o644)
    make_manifest().save(target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert load(target).name == "data.bin"
    assert [p.name for p in tmp_path.iterdir()] == ["m.json"]  # no temporary file left behind


def test_save_refuses_a_manifest_load_would_refuse(tmp_path: Path) -> None:
    manifest = make_manifest()
    bad = Manifest(**{**manifest.__dict__, "size": manifest.size + 1})
    with pytest.raises(ManifestError, match="cover"):
        bad.save(tmp_path / "m.json")
    assert not (tmp_path / "m.json").exists()


def test_no_repr_shows_a_capability_whole() -> None:
    manifest = make_manifest()
    capability = manifest.blocks[0].sources[0].read
    for text in (repr(manifest), repr(manifest.blocks[0]), repr(manifest.blocks[0].sources), str(manifest)):
        assert capability not in text
        assert capability[:24] not in text
    assert capability[:6] in repr(manifest.blocks[0])


def test_block_hasher_names_its_algorithm() -> None:
    assert block_hasher("sha256").name == "sha256"
    assert block_hasher("blake2b").name == "blake2b"
    assert len(hash_bytes("blake2b", b"x")) == 128
    with pytest.raises(ValueError, match="md5"):
        block_hasher("md5")


# -- refusals ---------------------------------------------------------------------------------------------------


def good() -> dict[str, Any]:
    return make_manifest().to_dict()


def mutate(change: Any) -> dict[str, Any]:
    document = copy.deepcopy(good())
    change(document)
    return document


def setitem(path: tuple[Any, ...], value: Any) -> Any:
    def change(document: Any) -> None:
        for key in path[:-1]:
            document = document[key]
        document[path[-1]] = value

    return change


BAD = {
    "format": (setitem(("format",), "lnet-manifest/2"), "format"),
    "missing field": (lambda d: d.pop("file_hash"), "lacks file_hash"),
    "unknown field": (setitem(("extra",), 1), "unknown fields: extra"),
    "size as string": (setitem(("size",), "10240"), "size must be a whole number"),
    "size as bool": (setitem(("size",), True), "size must be a whole number"),
    "size as float": (setitem(("size",), 10240.0), "size must be a whole number"),
    "huge size": (setitem(("size",), 10**40), "size is a 133-bit number, outside"),
    "negative size": (setitem(("size",), -1), "size is -1"),
    "zero block size": (setitem(("block_size",), 0), "block_size is 0"),
    "unknown algorithm": (setitem(("hash_algorithm",), "md5"), "hash_algorithm is 'md5'"),
    "short file hash": (setitem(("file_hash",), "ab" * 16), "file_hash must be 64 hex digits"),
    "non-hex file hash": (setitem(("file_hash",), "zz" * 32), "file_hash must be 64 hex digits"),
    "hash with newline": (setitem(("file_hash",), "a" * 63 + "\n"), "file_hash must be 64 hex digits"),
    "blake2b length under sha256": (setitem(("file_hash",), "a" * 128), "file_hash must be 64"),
    "infinite created": (setitem(("created",), float("inf")), "Infinity is not a JSON number"),
    "created too late": (setitem(("created",), 1e300), "created is 1e[+]300, not a time"),
    "name with slash": (setitem(("name",), "../../etc/passwd"), "not a plain file name"),
    "empty name": (setitem(("name",), ""), "name must be a non-empty string"),
    "path not a list": (setitem(("path",), "ornl"), "path must be a list"),
    "path of numbers": (setitem(("path",), [1, 2]), r"path\[0\]"),
    "blocks not a list": (setitem(("blocks",), {}), "blocks must be a list"),
    "block not an object": (setitem(("blocks", 1), [1, 2]), r"blocks\[1\] must be an object"),
    "negative offset": (setitem(("blocks", 0, "offset"), -4096), r"blocks\[0\]\.offset is -4096"),
    "overlap": (setitem(("blocks", 1, "offset"), 4000), r"blocks\[1\] starts at 4000, expected 4096: it overlaps"),
    "gap": (setitem(("blocks", 1, "offset"), 4100), "leaves a gap"),
    "wrong index": (setitem(("blocks", 2, "index"), 7), r"blocks\[2\]\.index is 7"),
    "zero length": (setitem(("blocks", 2, "length"), 0), r"blocks\[2\]\.length is 0"),
    "length over block size": (setitem(("blocks", 0, "length"), 8192), r"blocks\[0\]\.length is 8192"),
    "missing last block": (lambda d: d["blocks"].pop(), r"cover \[0, 8192\) but the file's size is 10240"),
    "block past the end": (setitem(("size",), 9000), r"blocks\[2\] ends at 10240, past the file's size 9000"),
    "bad block hash": (setitem(("blocks", 0, "hash"), "0" * 10), r"blocks\[0\]\.hash must be 64 hex digits"),
    "no sources": (setitem(("blocks", 0, "sources"), []), r"blocks\[0\]\.sources must be a list of 1"),
    "file url": (setitem(("blocks", 0, "sources", 0, "depot"), "file:///etc/passwd"), "must be an http or https"),
    "no host": (setitem(("blocks", 0, "sources", 0, "depot"), "http://"), "has no host"),
    "bad port": (setitem(("blocks", 0, "sources", 0, "depot"), "http://d:99999"), "not a URL"),
    "credentials in url": (setitem(("blocks", 0, "sources", 0, "depot"), "http://u:p@d:1"), "without user"),
    "query in url": (setitem(("blocks", 0, "sources", 0, "depot"), "http://d:1/?x=1"), "without user, query"),
    "space in url": (setitem(("blocks", 0, "sources", 0, "depot"), "http://d :1"), "spaces or control"),
    "not a capability": (setitem(("blocks", 0, "sources", 0, "read"), "../../v1/status"), "shape of a read cap"),
    "capability with newline": (setitem(("blocks", 0, "sources", 0, "read"), "A" * 32 + "\n"), "shape of a read"),
    "capability as number": (setitem(("blocks", 0, "sources", 0, "read"), 12), "read is int without"),
    "expiry as string": (setitem(("blocks", 0, "sources", 0, "expires"), "soon"), "expires must be a number"),
}


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_load_refuses(tmp_path: Path, case: str) -> None:
    change, message = BAD[case]
    path = tmp_path / "m.json"
    path.write_text(json.dumps(mutate(change)))
    with pytest.raises(ManifestError, match=message) as refused:
        load(path)
    assert str(refused.value).startswith(f"{path}: ")


def test_the_refusal_never_echoes_a_capability(tmp_path: Path) -> None:
    secret = new_capability()
    path = tmp_path / "m.json"
    path.write_text(json.dumps(mutate(setitem(("blocks", 0, "sources", 0, "read"), secret + "!"))))
    with pytest.raises(ManifestError, match="without the shape of a read capability") as refused:
        load(path)  # refused for the capability itself: the one message that could have shown it
    assert secret[:12] not in str(refused.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "not JSON"),
        (b"{\"format\": ", "not JSON"),
        (b"\xff\xfe\x00garbage", "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON|must be an object"),
        (b"[]", "the manifest must be an object, not list"),
        (b"null", "the manifest must be an object, not null"),
        (b'{"size": NaN}', "not JSON"),
        (b"1" * 5000, "not JSON"),
    ],
)
def test_load_refuses_what_is_not_a_manifest(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "m.json"
    path.write_bytes(content)
    with pytest.raises(ManifestError, match=message):
        load(path)


def test_a_number_too_big_for_a_float_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(good()).replace('"created": 1700000000.0', '"created": 1e999'))
    with pytest.raises(ManifestError, match="created is inf, not a time"):
        load(path)


def test_load_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="cannot read the manifest: No such file"):
        load(tmp_path / "nope.json")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["format", "name", "size", "block_size", "hash_algorithm", "file_hash", "created", "path"])
    | st.sampled_from(["index", "offset", "length", "hash", "sources", "depot", "read", "expires"]),
    JSON_VALUES,
)
def test_any_value_anywhere_is_refused_or_accepted_never_a_crash(key: str, value: Any) -> None:
    document = good()
    for target in (document, document["blocks"][1], document["blocks"][1]["sources"][0]):
        if key in target:
            target[key] = value
    try:
        manifest = parse(document)
    except ManifestError:
        return
    assert manifest.size == sum(b.length for b in manifest.blocks)  # what is accepted is consistent
