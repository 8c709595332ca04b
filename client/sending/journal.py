"""The send journal's format: what an interrupted ``lnet-send`` leaves behind so that the same command resumes.

A journal is a sequence of lines, each ``CRC SP JSON LF``: ``CRC`` is the CRC-32 of the JSON text as 8 lower-case
hex digits. The first line is the header (``"format": "lnet-send-journal/1"``): which transfer this is (the source,
the destination depot's URL, the source's size and modification time or its tree's digest, the block size, the
hash algorithm, a digest of how the source is cut into blocks). Every further line is one block that reached the
destination and was verified there: its index, offset, length and hash, and the destination allocation's
capabilities and expiry; or allocations the relay took at a depot (``{"allocated": ...}``: a resume frees those
that no recorded block keeps, which a run killed with -9 left behind); or, once per run, the capabilities of the
transfer's publication (``{"publication": ...}``, the latest wins), so that a resumed run keeps publishing at the
URL the receiver has. The journal holds capabilities: it is a secret, like the manifest.

Why append-only records and not a whole file rewritten (temporary file, fsync, rename) per block: a record costs
one small ``write`` whatever the file's size, where a rewrite costs the whole journal per block (a 1 TiB file in
4 MiB blocks is 262144 records: quadratic); and a torn append damages only the record being written, which its
checksum exposes. ``decode`` keeps the longest prefix of whole, valid lines and says where it ends; the writer cuts
the file there before appending again, so one torn tail never swallows the next record. A record lost that way
(or never flushed before a power cut) only means that block is sent again: nothing in the journal is trusted
without asking the destination (``GET /v1/digest``) and re-hashing the source.

This module is pure: bytes in, values out, and the comparison of a journal's header with the transfer asked for
now. ``lnet.client.sending.resume`` does the file's I/O and the checks against the network and the source.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from lnet.client.formats import lines
from lnet.client.formats.manifest import HASH_ALGORITHMS
from lnet.client.sending.relay import BlockRecord
from lnet.client.wire.depot_client import Allocation
from lnet.units import format_size

__all__ = [
    "FORMAT",
    "Decoded",
    "JournalHeader",
    "decode",
    "encode_allocated",
    "encode_header",
    "encode_publication",
    "encode_record",
    "layout_digest",
    "mismatch",
    "tree_digest",
    "usable_records",
]

FORMAT = "lnet-send-journal/1"
KINDS = ("file", "tree", "source")
_FRAME = re.compile(rb"[0-9a-f]{8} ")
_RECORD_FIELDS = ("index", "offset", "length", "hash", "depot", "read", "write", "manage", "size", "expires",
                  "reliability")


@dataclass(frozen=True)
class JournalHeader:
    """Which transfer a journal belongs to. ``kind`` is ``file``, ``tree`` or ``source`` (``--source`` replicas);
    ``source`` names it (an absolute path, or the replicas' URLs); ``dest`` is the destination depot's URL.
    ``identity`` says what the source held when it was sent: ``size:mtime_ns`` for a file, a digest of the tree's
    entries for a tree (``tree_digest``), empty for replicas (their blocks' hashes are checked instead).
    ``layout`` is ``layout_digest`` of the blocks; ``bdp`` the bandwidth-delay product a tree's plan was made
    for (a resume plans again with it, so the blocks come out the same), 0 otherwise."""

    kind: str
    name: str
    source: str
    dest: str
    size: int
    identity: str
    block_size: int
    hash_algorithm: str
    layout: str
    bdp: int = 0

    def __repr__(self) -> str:  # a --source URL may hold a capability
        return f"JournalHeader(kind={self.kind!r}, name={self.name!r}, size={self.size}, dest={self.dest!r})"


@dataclass(frozen=True)
class Decoded:
    """What a journal's bytes hold: the header (None when even it is not whole), the records by block index (a
    later record of an index replaces an earlier one), and ``valid``: the length of the prefix of whole, valid
    lines, where the next record is to be written; and the publication's capabilities, when a line gave them."""

    header: JournalHeader | None
    records: dict[int, BlockRecord]
    valid: int
    publication: dict[str, Any] | None = None
    """The publication's allocations (``lnet.client.sending.publish.PublicationCaps.to_dict``), the latest line."""
    allocated: tuple[tuple[str, str], ...] = ()
    """Every allocation the relay took, as (depot URL, manage capability): what a resume frees, but for the
    blocks it keeps."""


# -- encoding ---------------------------------------------------------------------------------------------------


_line = lines.encode


def encode_header(header: JournalHeader) -> bytes:
    return _line({"format": FORMAT, **asdict(header)})


def encode_publication(capabilities: Mapping[str, Any]) -> bytes:
    """The line that says where this transfer publishes (a resumed run keeps publishing there)."""
    return _line({"publication": dict(capabilities)})


def encode_allocated(depot: str, manage: Sequence[str]) -> bytes:
    """The line that lists allocations the relay took at ``depot`` (a resume frees those no block kept)."""
    return _line({"allocated": {"depot": depot, "manage": list(manage)}})


def encode_record(record: BlockRecord) -> bytes:
    a = record.allocation
    return _line({
        "index": record.index, "offset": record.offset, "length": record.length, "hash": record.hash,
        "depot": a.depot, "read": a.read, "write": a.write, "manage": a.manage, "size": a.size,
        "expires": a.expires, "reliability": a.reliability,
    })


# -- decoding: the longest valid prefix ---------------------------------------------------------------------------


def decode(data: bytes) -> Decoded:
    """The journal in ``data``; never raises. Stops at the first line that is torn (no newline), fails its
    checksum, or does not have a record's exact shape: that line and everything after it are not used."""
    header: JournalHeader | None = None
    records: dict[int, BlockRecord] = {}
    publication: dict[str, Any] | None = None
    allocated: list[tuple[str, str]] = []
    position = 0
    while True:
        end = data.find(b"\n", position)
        if end < 0:
            break
        document = _checked(data[position:end])
        if document is None:
            break
        if header is None:
            header = _header(document)
            if header is None:
                break
        elif set(document) == {"publication"} and isinstance(document["publication"], dict):
            publication = document["publication"]
        elif set(document) == {"allocated"}:
            taken = _allocated(document["allocated"])
            if taken is None:
                break
            allocated.extend(taken)
        else:
            record = _record(document, header.hash_algorithm)
            if record is None:
                break
            records[record.index] = record
        position = end + 1
    return Decoded(header, records, position if header is not None else 0, publication, tuple(allocated))


def _allocated(value: Any) -> list[tuple[str, str]] | None:
    if not isinstance(value, dict) or set(value) != {"depot", "manage"} or not isinstance(value["depot"], str):
        return None
    manage = value["manage"]
    if not isinstance(manage, list) or not all(isinstance(m, str) and m for m in manage):
        return None
    return [(value["depot"], m) for m in manage]


_checked = lines.checked


def _header(document: dict[str, Any]) -> JournalHeader | None:
    names = {f.name for f in fields(JournalHeader)}
    if document.get("format") != FORMAT or set(document) != names | {"format"}:
        return None
    values = {name: document[name] for name in names}
    texts = ("kind", "name", "source", "dest", "identity", "hash_algorithm", "layout")
    numbers = ("size", "block_size", "bdp")
    if not all(isinstance(values[n], str) for n in texts) or not all(_whole(values[n]) for n in numbers):
        return None
    if values["kind"] not in KINDS or values["hash_algorithm"] not in HASH_ALGORITHMS or values["block_size"] < 1:
        return None
    return JournalHeader(**values)


def _record(document: dict[str, Any], algorithm: str) -> BlockRecord | None:
    if set(document) != set(_RECORD_FIELDS):
        return None
    d = document
    if not all(_whole(d[n]) for n in ("index", "offset", "length", "size")) or d["length"] < 1:
        return None
    if not all(isinstance(d[n], str) and d[n] for n in ("hash", "depot", "read", "write", "manage", "reliability")):
        return None
    if len(d["hash"]) != HASH_ALGORITHMS[algorithm] or d["hash"].strip("0123456789abcdef"):
        return None
    if isinstance(d["expires"], bool) or not isinstance(d["expires"], int | float):
        return None
    allocation = Allocation(d["depot"], d["read"], d["write"], d["manage"], d["size"], float(d["expires"]),
                            d["reliability"])
    return BlockRecord(d["index"], d["offset"], d["length"], d["hash"], allocation)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# -- what the source is and how it is cut -------------------------------------------------------------------------


def layout_digest(spans: Iterable[tuple[int, int]], pieces: Sequence[Sequence[Any]] = ()) -> str:
    """A digest of how the source is cut into blocks (each block's offset and length; for a tree, also which
    pieces of which files each block packs): equal only when every block is the same bytes of the same place."""
    hasher = hashlib.sha256()
    for offset, length in spans:
        hasher.update(b"%d:%d;" % (offset, length))
    if pieces:
        hasher.update(json.dumps(pieces, separators=(",", ":"), sort_keys=True).encode())
    return hasher.hexdigest()


def tree_digest(entries: Iterable[Any]) -> str:
    """A digest of what a tree's stream is made of: each entry's path and type, a file's size and modification
    time, a symlink's target. (A directory's own time changes when something is added in it, which shows anyway.)"""
    hasher = hashlib.sha256()
    for entry in entries:
        parts: list[Any] = [entry.path, entry.type]
        if entry.type == "file":
            parts += [entry.size, entry.mtime_ns]
        elif entry.type == "symlink":
            parts.append(entry.target)
        hasher.update(json.dumps(parts).encode() + b"\n")
    return hasher.hexdigest()


def usable_records(records: Mapping[int, BlockRecord], spans: Sequence[tuple[int, int]], dest: str
                   ) -> dict[int, BlockRecord]:
    """The records that name a block of this layout, as it is cut now, held at ``dest``."""
    return {
        index: record for index, record in records.items()
        if index < len(spans) and spans[index] == (record.offset, record.length) and record.allocation.depot == dest
    }


# -- the journal against the transfer asked for now ------------------------------------------------------------------


def mismatch(old: JournalHeader, new: JournalHeader) -> str | None:
    """Why the interrupted transfer ``old`` cannot be resumed as ``new`` (a sentence for the user), or None."""
    what = "the tree" if new.kind == "tree" else "the file"
    if (old.kind, old.source) != (new.kind, new.source):
        if "source" in (old.kind, new.kind):  # replicas' URLs may hold capabilities: not printed
            return "it was a transfer of another source"
        return f"it was a transfer of {old.source} ({old.kind}), not of {new.source}"
    if old.dest != new.dest:
        return f"it sent to {old.dest}, not {new.dest}"
    if old.size != new.size:
        return f"{what} changed since: it was {old.size} bytes, it is {new.size} now"
    if old.identity != new.identity:
        return f"{what} changed since (its modification time)" if new.kind == "file" else f"{what} changed since"
    if old.block_size != new.block_size:
        return f"it was cut into blocks of {format_size(old.block_size)}, not {format_size(new.block_size)}"
    if old.hash_algorithm != new.hash_algorithm:
        return f"it hashed with {old.hash_algorithm}, not {new.hash_algorithm}"
    if old.layout != new.layout or old.bdp != new.bdp:
        return "its blocks were cut differently"
    return None
