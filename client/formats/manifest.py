"""The manifest: what ``lnet-send`` writes when a file has reached its destination, and ``lnet-get`` reads.

It lists the file's blocks (offset, length, hash) and, for each, the places it can be read (a depot's base URL, a
read capability, when that allocation expires), with the whole file's hash. It is a JSON document,
``"format": "lnet-manifest/1"``; ``docs/client.md`` describes every field.

A manifest may come from anyone, so ``load`` trusts nothing: every field's type, range and shape is checked, the
blocks must tile ``[0, size)`` exactly, and any problem is a ``ManifestError`` that names it; no input makes it
raise anything else. The read capabilities it holds are secrets: ``save`` writes the file with mode 0600, and no
``repr`` here prints one whole. This module does no network I/O.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from lnet.client.formats.documents import check_object, load_document, write_private_file
from lnet.protocol import DIGESTS, Hasher, hash_bytes, hasher, is_capability, redact
from lnet.units.numbers import finite_number, kind, show

__all__ = [
    "FORMAT",
    "HASH_ALGORITHMS",
    "MAX_BLOCK_SIZE",
    "MAX_FILE_SIZE",
    "BlockEntry",
    "BlockSource",
    "Hasher",
    "Manifest",
    "ManifestError",
    "block_hasher",
    "hash_bytes",
    "load",
    "parse",
    "whole_number",
]

FORMAT = "lnet-manifest/1"
# The hashes a manifest may name, with their hex digest lengths (the depot's digest knows the same ones).
HASH_ALGORITHMS = DIGESTS
# 2**53 bytes (8 PiB) is past any real transfer and the largest integer every JSON reader keeps exact.
MAX_FILE_SIZE = 2**53
MAX_BLOCK_SIZE = 2**32  # 4 GiB, far past what a depot lends in one allocation
MAX_SOURCES = 64
MAX_PATH_VERTICES = 256
MAX_TEXT = 2048  # names, URLs and path vertices
MAX_MANIFEST_BYTES = 1 << 30  # a 1 TiB file in 4 MiB blocks needs about 100 MiB

_CAPABILITY = re.compile(r"[A-Za-z0-9_-]+")
_HEX = re.compile(r"[0-9a-f]*")
_FIELDS = ("format", "name", "size", "block_size", "hash_algorithm", "file_hash", "created", "path", "blocks")
_BLOCK_FIELDS = ("index", "offset", "length", "hash", "sources")
_SOURCE_FIELDS = ("depot", "read", "expires")


class ManifestError(ValueError):
    """The manifest is unreadable or invalid; the message names the file (when there is one) and the problem."""


block_hasher = hasher
"""A fresh hash object for an algorithm of ``HASH_ALGORITHMS``, for blocks and whole files alike (the depot's
digest uses the same, ``lnet.protocol.hasher``; ``hash_bytes`` hashes one buffer)."""


@dataclass(frozen=True, repr=False)
class BlockSource:
    """One place a block can be read: a depot's base URL, the allocation's read capability, its expiry (Unix s)."""

    depot: str
    read: str
    expires: float

    @property
    def read_url(self) -> str:
        return f"{self.depot.rstrip('/')}/v1/data/{self.read}"

    def __repr__(self) -> str:  # the capability is a secret: never print it whole
        return f"BlockSource(depot={self.depot!r}, read={redact(self.read)}, expires={self.expires})"


@dataclass(frozen=True)
class BlockEntry:
    """The bytes ``[offset, offset + length)`` of the file, their hash, and where to read them (first: the
    destination depot; later ones are fallbacks and replicas)."""

    index: int
    offset: int
    length: int
    hash: str
    sources: tuple[BlockSource, ...]

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(frozen=True, repr=False)
class Manifest:
    """A file as lnet delivered it. ``path`` is the chain of vertex names the transfer ended on (source first,
    destination last; empty when not known); ``created`` is a Unix time."""

    name: str
    size: int
    block_size: int
    hash_algorithm: str
    file_hash: str
    created: float
    path: tuple[str, ...]
    blocks: tuple[BlockEntry, ...]

    def __repr__(self) -> str:  # short, and without the blocks' capabilities
        return (
            f"Manifest(name={self.name!r}, size={self.size}, blocks={len(self.blocks)}, "
            f"{self.hash_algorithm}={self.file_hash[:12]}…, path={'->'.join(self.path) or '?'})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "name": self.name,
            "size": self.size,
            "block_size": self.block_size,
            "hash_algorithm": self.hash_algorithm,
            "file_hash": self.file_hash,
            "created": self.created,
            "path": list(self.path),
            "blocks": [
                {
                    "index": block.index,
                    "offset": block.offset,
                    "length": block.length,
                    "hash": block.hash,
                    "sources": [
                        {"depot": source.depot, "read": source.read, "expires": source.expires}
                        for source in block.sources
                    ],
                }
                for block in self.blocks
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n"

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the manifest to ``path`` atomically (a temporary file beside it, then a rename), mode 0600.

        Refuses (``ManifestError``) to write a manifest that ``load`` would refuse."""
        text = self.to_json()
        parse(json.loads(text))  # one set of rules for writing and reading
        write_private_file(Path(path), text.encode())


def load(path: str | os.PathLike[str]) -> Manifest:
    """Read and validate the manifest at ``path``; ``ManifestError`` names the file and the problem."""
    return load_document(Path(path), MAX_MANIFEST_BYTES, ManifestError, "manifest", parse)


def parse(document: Any) -> Manifest:
    """Validate a decoded manifest document (what ``json.load`` gave) and build the ``Manifest``."""
    top = _object(document, "the manifest", _FIELDS)
    if top["format"] != FORMAT:
        raise ManifestError(f"format is {show(top['format'])}, expected {FORMAT!r}")
    name = _text(top["name"], "name")
    if name in (".", "..") or any(c in name for c in "/\\\0"):
        raise ManifestError(f"name {name!r} is not a plain file name")
    size = whole_number(top["size"], "size", 0, MAX_FILE_SIZE)
    block_size = whole_number(top["block_size"], "block_size", 1, MAX_BLOCK_SIZE)
    algorithm = top["hash_algorithm"]
    if not isinstance(algorithm, str) or algorithm not in HASH_ALGORITHMS:
        raise ManifestError(f"hash_algorithm is {show(algorithm)}, expected one of {', '.join(HASH_ALGORITHMS)}")
    file_hash = _digest(top["file_hash"], "file_hash", algorithm)
    created = _number(top["created"], "created")
    raw_path = top["path"]
    if not isinstance(raw_path, list) or len(raw_path) > MAX_PATH_VERTICES:
        raise ManifestError(f"path must be a list of at most {MAX_PATH_VERTICES} vertex names")
    path = tuple(_text(vertex, f"path[{i}]") for i, vertex in enumerate(raw_path))
    raw_blocks = top["blocks"]
    if not isinstance(raw_blocks, list):
        raise ManifestError(f"blocks must be a list, not {kind(raw_blocks)}")
    blocks = []
    offset = 0
    for i, raw in enumerate(raw_blocks):
        block = _block(raw, i, algorithm, block_size)
        if block.offset != offset:
            problem = "overlaps the previous one" if block.offset < offset else "leaves a gap before it"
            raise ManifestError(f"blocks[{i}] starts at {block.offset}, expected {offset}: it {problem}")
        offset = block.end
        if offset > size:
            raise ManifestError(f"blocks[{i}] ends at {offset}, past the file's size {size}")
        blocks.append(block)
    if offset != size:
        raise ManifestError(f"the blocks cover [0, {offset}) but the file's size is {size}")
    return Manifest(name, size, block_size, algorithm, file_hash, created, path, tuple(blocks))


# -- validation -----------------------------------------------------------------------------------------------


def _block(raw: Any, i: int, algorithm: str, block_size: int) -> BlockEntry:
    where = f"blocks[{i}]"
    fields = _object(raw, where, _BLOCK_FIELDS)
    index = whole_number(fields["index"], f"{where}.index", 0, MAX_FILE_SIZE)
    if index != i:
        raise ManifestError(f"{where}.index is {index}, expected {i} (blocks are listed in order)")
    offset = whole_number(fields["offset"], f"{where}.offset", 0, MAX_FILE_SIZE)
    length = whole_number(fields["length"], f"{where}.length", 1, block_size)
    digest = _digest(fields["hash"], f"{where}.hash", algorithm)
    raw_sources = fields["sources"]
    if not isinstance(raw_sources, list) or not 1 <= len(raw_sources) <= MAX_SOURCES:
        raise ManifestError(f"{where}.sources must be a list of 1 to {MAX_SOURCES} sources")
    sources = tuple(_source(source, f"{where}.sources[{j}]") for j, source in enumerate(raw_sources))
    return BlockEntry(index, offset, length, digest, sources)


def _source(raw: Any, where: str) -> BlockSource:
    fields = _object(raw, where, _SOURCE_FIELDS)
    depot = _depot_url(fields["depot"], f"{where}.depot")
    read = fields["read"]
    # fullmatch as well: is_capability's pattern ends in "$", which also lets a trailing newline through
    if not isinstance(read, str) or not is_capability(read) or not _CAPABILITY.fullmatch(read):
        shown = "a string" if isinstance(read, str) else kind(read)  # never echo what may be a secret
        raise ManifestError(f"{where}.read is {shown} without the shape of a read capability")
    return BlockSource(depot, read, _number(fields["expires"], f"{where}.expires"))


def _depot_url(value: Any, where: str) -> str:
    url = _text(value, where)
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ManifestError(f"{where} contains spaces or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number in range
    except ValueError as exc:
        raise ManifestError(f"{where} is not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ManifestError(f"{where} must be an http or https URL, not {parts.scheme or 'no'} scheme: {url!r}")
    if not parts.hostname:
        raise ManifestError(f"{where} has no host: {url!r}")
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        raise ManifestError(f"{where} must be a depot's base URL, without user, query or fragment")
    return url


def _object(value: Any, where: str, fields: tuple[str, ...]) -> dict[str, Any]:
    return check_object(value, where, fields, ManifestError)


def whole_number(value: Any, where: str, low: int, high: int) -> int:
    """``value`` if it is an int (not a bool) within ``[low, high]``; else a ``ManifestError`` naming ``where``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ManifestError(f"{where} must be a whole number, not {kind(value)}")
    if not low <= value <= high:
        raise ManifestError(f"{where} is {show(value)}, outside [{low}, {high}]")
    return value


def _number(value: Any, where: str) -> float:
    """A Unix time: a finite number, not negative, before the year 10000."""
    return finite_number(value, where, low=0, high=_YEAR_10000 - 1, meaning="a time", error=ManifestError)


_YEAR_10000 = 253402300800  # its first second, Unix time


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise ManifestError(f"{where} must be a non-empty string of at most {MAX_TEXT} characters")
    return value


def _digest(value: Any, where: str, algorithm: str) -> str:
    want = HASH_ALGORITHMS[algorithm]
    if not isinstance(value, str) or len(value) != want or not _HEX.fullmatch(value.lower()):
        raise ManifestError(f"{where} must be {want} hex digits (a {algorithm} digest)")
    return value.lower()




