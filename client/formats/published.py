"""What ``lnet-send`` publishes at the destination depot for the far end, and what ``lnet-get --follow`` answers.

Every ``lnet-send`` keeps one allocation at the destination, the **publication**, whose read URL is the one line a
user hands to the far end (``lnet-get URL``). It holds a JSON document, ``"format": "lnet-published/1"``,
rewritten as blocks land. Its fields: ``name``, ``kind`` (``file`` or ``tree``: then ``size`` and the blocks are
the packed stream's), ``size``, ``block_size``, ``blocks_total``, ``hash_algorithm``, ``follow``, ``depot`` (the
destination's base URL), ``created``, ``updated``, ``seq`` (grows with every version), ``sender`` (its state and
the blocks landed so far), ``ack``, ``blocks``, ``final``, ``file_hash``, ``tree_url`` and ``manifest``:

- without ``--follow``: the transfer's progress, and once it is over (``final``) the whole manifest (an
  ``lnet-manifest/1`` or a tree manifest) under ``manifest``: ``lnet-get URL`` then does what ``lnet-get
  MANIFEST`` does;
- with ``--follow``: under ``blocks`` the blocks verified at the destination that the receiver has not yet drained,
  each with its read and manage capabilities (the receiver frees a block once it is on its disk), and, once the
  last block has landed (``final``), the whole file's hash (``file_hash``). For a tree, ``tree_url`` names from the
  first version on a third allocation, the **tree's shape** (``lnet-published-tree/1``): the entries and the
  pieces of files each stream block holds (``{"entries": [...], "blocks": [[{path, offset, length}, ...], ...]}``,
  as in a tree manifest), written once before any block moves, so that the receiver puts each file in place as
  soon as the blocks holding it are on its disk. ``tree_url`` is null for a file, and without ``--follow``.

With ``--follow`` the sender also keeps a small allocation, the **drain record** (``ack``: its write URL is in the
publication), where the receiver writes ``"format": "lnet-drained/1"``: the block indices it holds on its disk
and has freed at the depot, as ranges. That is how the sender learns what the receiver drained (its progress,
and a resume of either end), with nothing but depot allocations between them.

A depot allocation is rewritten in place and a reader may see it half-written, so each document is framed:
``lnet-published/1 LENGTH SHA256\\n`` (or ``lnet-drained/1 ...``, ``lnet-published-tree/1 ...``) then ``LENGTH``
bytes of JSON whose SHA-256 is ``SHA256``. A torn or stale tail fails the check and is read again (``unframe``
returns None); bytes past the frame (a longer earlier version) are ignored. The documents come from the network,
so ``parse``, ``parse_drained`` and ``parse_tree`` trust nothing: any problem is a ``PublishedError`` naming the
field (the tree's entries and pieces are checked by ``formats.tree.parse_shape`` where they are used).

This module is pure: no network I/O.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lnet.client.formats.documents import check_object
from lnet.client.formats.manifest import (
    HASH_ALGORITHMS,
    MAX_BLOCK_SIZE,
    MAX_FILE_SIZE,
    MAX_TEXT,
    ManifestError,
    whole_number,
)
from lnet.protocol import is_capability, redact
from lnet.units.numbers import kind, show

__all__ = [
    "DRAINED_FORMAT",
    "FORMAT",
    "MAGIC",
    "MAX_DOCUMENT_BYTES",
    "Drained",
    "Publication",
    "PublishedBlock",
    "PublishedError",
    "SenderState",
    "TREE_FORMAT",
    "drained_size",
    "frame",
    "indices",
    "merged",
    "is_publication",
    "parse",
    "parse_drained",
    "parse_tree",
    "publication_size",
    "ranges",
    "tree_document",
    "unframe",
]

FORMAT = "lnet-published/1"
DRAINED_FORMAT = "lnet-drained/1"
TREE_FORMAT = "lnet-published-tree/1"
MAGIC = FORMAT.encode() + b" "
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024
"""The largest framed document read or written (a tree of a million files' entries fits)."""
_HEADER = re.compile(rb"(lnet-published/1|lnet-drained/1|lnet-published-tree/1) ([0-9]{1,10}) ([0-9a-f]{64})\n")
_MAX_HEADER = 100
_CAPABILITY = re.compile(r"[A-Za-z0-9_-]+")

SENDER_STATES = ("sending", "waiting", "done", "stopped")
"""``sending``: blocks are moving; ``waiting``: a depot is full (for ``--follow``, until the receiver drains);
``done``: every block has landed (``final``); ``stopped``: the sender exited before that (it may resume)."""
RECEIVER_STATES = ("receiving", "done", "stopped")

_BLOCK_BYTES = 400
"""A generous bound on one listed block's JSON (a blake2b hash, two capabilities, numbers, keys)."""
_RANGE_BYTES = 24


class PublishedError(ValueError):
    """The bytes are not a valid publication or drain record; the message says why."""


# -- framing -------------------------------------------------------------------------------------------------------


def frame(document: dict[str, Any]) -> bytes:
    """``document`` as the framed bytes written into the allocation (its ``format`` names the frame)."""
    body = json.dumps(document, separators=(",", ":"), allow_nan=False).encode()
    return b"%s %d %s\n" % (document["format"].encode(), len(body), hashlib.sha256(body).hexdigest().encode()) + body


def is_publication(prefix: bytes) -> bool:
    """Whether bytes read from the start of an allocation begin a publication (and not any other file)."""
    return prefix.startswith(MAGIC)


def unframe(data: bytes, expected: str = FORMAT) -> Any | None:
    """The JSON value framed at the start of ``data``; None when the frame is torn or not yet whole (a write was
    under way: read again). ``PublishedError`` when ``data`` is no such frame at all."""
    newline = data.find(b"\n", 0, _MAX_HEADER)
    if newline < 0:
        if len(data) < _MAX_HEADER and (expected.encode() + b" ").startswith(data[: len(expected) + 1]):
            return None  # too short to tell: a first write still under way
        raise PublishedError(f"not an {expected} document")
    match = _HEADER.fullmatch(data[: newline + 1])
    if match is None or match.group(1).decode() != expected:
        raise PublishedError(f"not an {expected} document")
    length = int(match.group(2))
    if length > MAX_DOCUMENT_BYTES:
        raise PublishedError(f"the document claims {length} bytes, more than {MAX_DOCUMENT_BYTES}")
    body = data[newline + 1 : newline + 1 + length]
    if len(body) < length or hashlib.sha256(body).hexdigest().encode() != match.group(3):
        return None
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:  # a whole frame whose checksum matched: written wrong
        raise PublishedError(f"the document is not JSON: {exc}") from None


# -- the publication --------------------------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class PublishedBlock:
    """A block verified at the destination: its place in the file, its hash, and its allocation there (``manage``
    only with ``--follow``: the receiver frees it once the block is on its disk; empty otherwise)."""

    index: int
    offset: int
    length: int
    hash: str
    read: str
    manage: str
    expires: float

    def __repr__(self) -> str:  # capabilities are secrets
        return (f"PublishedBlock(index={self.index}, offset={self.offset}, length={self.length}, "
                f"read={redact(self.read)})")

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "offset": self.offset, "length": self.length, "hash": self.hash,
                "read": self.read, "manage": self.manage, "expires": self.expires}


@dataclass(frozen=True)
class SenderState:
    """What the sender is doing, for the receiver's progress line. ``landed``: blocks verified at the destination
    so far (``landed_bytes`` their bytes); ``waiting``: the depot it waits for room at (with ``--follow``, for the
    receiver to drain), None when not waiting."""

    state: str = "sending"
    landed: int = 0
    landed_bytes: int = 0
    waiting: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "landed": self.landed, "landed_bytes": self.landed_bytes,
                "waiting": self.waiting}


@dataclass(frozen=True, repr=False)
class Publication:
    """One version of the publication. ``kind`` is ``file`` or ``tree`` (then ``size`` and the blocks are the
    packed stream's, and with ``--follow`` ``tree_url`` is the read URL of the tree's shape, its entries and the
    pieces of each stream block, from the first version on: every poll reads no more than the blocks); ``depot``
    is the destination's base URL, where every listed block is; ``seq`` grows with every version; ``ack`` is the
    drain record's write URL (``--follow``), else None; ``manifest`` the whole manifest document once ``final``
    without ``--follow``."""

    name: str
    kind: str
    size: int
    block_size: int
    blocks_total: int
    hash_algorithm: str
    follow: bool
    depot: str
    created: float
    updated: float
    seq: int
    sender: SenderState
    ack: str | None
    blocks: tuple[PublishedBlock, ...]
    final: bool
    file_hash: str | None
    tree_url: str | None = None
    manifest: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return (f"Publication(name={self.name!r}, kind={self.kind}, size={self.size}, seq={self.seq}, "
                f"listed={len(self.blocks)}, final={self.final})")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "name": self.name, "kind": self.kind, "size": self.size, "block_size": self.block_size,
            "blocks_total": self.blocks_total, "hash_algorithm": self.hash_algorithm, "follow": self.follow,
            "depot": self.depot, "created": self.created, "updated": self.updated, "seq": self.seq,
            "sender": self.sender.to_dict(), "ack": self.ack, "blocks": [b.to_dict() for b in self.blocks],
            "final": self.final, "file_hash": self.file_hash, "tree_url": self.tree_url, "manifest": self.manifest,
        }

    def framed(self) -> bytes:
        return frame(self.to_dict())


_FIELDS = ("format", "name", "kind", "size", "block_size", "blocks_total", "hash_algorithm", "follow", "depot",
           "created", "updated", "seq", "sender", "ack", "blocks", "final", "file_hash", "tree_url", "manifest")
_BLOCK_FIELDS = ("index", "offset", "length", "hash", "read", "manage", "expires")
_SENDER_FIELDS = ("state", "landed", "landed_bytes", "waiting")


def parse(document: Any) -> Publication:
    """Validate a decoded publication. The embedded ``manifest`` is checked where it is used
    (``formats.manifest.parse``, ``formats.tree.parse``), here only for its type."""
    top = check_object(document, "the publication", _FIELDS, PublishedError)
    if top["format"] != FORMAT:
        raise PublishedError(f"format is {show(top['format'])}, expected {FORMAT!r}")
    name = _text(top["name"], "name")
    if name in (".", "..") or any(c in name for c in "/\\\0"):
        raise PublishedError(f"name {show(name)} is not a plain name")
    what = top["kind"]
    if what not in ("file", "tree"):
        raise PublishedError(f"kind is {show(what)}, expected file or tree")
    size = _whole(top["size"], "size", 0, MAX_FILE_SIZE)
    block_size = _whole(top["block_size"], "block_size", 1, MAX_BLOCK_SIZE)
    total = _whole(top["blocks_total"], "blocks_total", 0, MAX_FILE_SIZE)
    algorithm = top["hash_algorithm"]
    if not isinstance(algorithm, str) or algorithm not in HASH_ALGORITHMS:
        raise PublishedError(f"hash_algorithm is {show(algorithm)}, expected one of {', '.join(HASH_ALGORITHMS)}")
    follow = _flag(top["follow"], "follow")
    final = _flag(top["final"], "final")
    depot = _url(top["depot"], "depot")
    sender = _sender(top["sender"])
    ack = top["ack"]
    if ack is not None:
        ack = _url(ack, "ack")
    if follow and ack is None:
        raise PublishedError("a --follow publication must name its drain record (ack)")
    raw_blocks = top["blocks"]
    if not isinstance(raw_blocks, list) or len(raw_blocks) > max(total, 0):
        raise PublishedError(f"blocks must be a list of at most blocks_total ({total}) blocks")
    blocks = tuple(_block(raw, f"blocks[{i}]", algorithm, block_size, size, total, follow)
                   for i, raw in enumerate(raw_blocks))
    if len({b.index for b in blocks}) != len(blocks):
        raise PublishedError("a block is listed twice")
    file_hash = top["file_hash"]
    if final:
        file_hash = _digest(file_hash, "file_hash", algorithm)
    elif file_hash is not None:
        raise PublishedError("file_hash is given before the publication is final")
    tree_url = top["tree_url"]
    if tree_url is not None:
        tree_url = _url(tree_url, "tree_url")
    if (what == "tree" and follow) != (tree_url is not None):
        raise PublishedError("tree_url is given for a tree sent with --follow, and only then")
    manifest = top["manifest"]
    if manifest is not None and not isinstance(manifest, dict):
        raise PublishedError(f"manifest must be an object or null, not {kind(manifest)}")
    if manifest is not None and (follow or not final):
        raise PublishedError("manifest is given only once final, without --follow")
    if final and not follow and manifest is None:
        raise PublishedError("a final publication without --follow must hold the manifest")
    return Publication(
        name, what, size, block_size, total, algorithm, follow, depot, _time(top["created"], "created"),
        _time(top["updated"], "updated"), _whole(top["seq"], "seq", 0, MAX_FILE_SIZE), sender, ack, blocks, final,
        file_hash, tree_url, manifest,
    )


def _block(raw: Any, where: str, algorithm: str, block_size: int, size: int, total: int, follow: bool
           ) -> PublishedBlock:
    fields = check_object(raw, where, _BLOCK_FIELDS, PublishedError)
    index = _whole(fields["index"], f"{where}.index", 0, max(0, total - 1))
    offset = _whole(fields["offset"], f"{where}.offset", 0, MAX_FILE_SIZE)
    length = _whole(fields["length"], f"{where}.length", 1, block_size)
    if offset + length > size:
        raise PublishedError(f"{where} ends at {offset + length}, past the size {size}")
    read = _capability(fields["read"], f"{where}.read")
    manage = fields["manage"]
    if follow:
        manage = _capability(manage, f"{where}.manage")
    elif manage != "":
        raise PublishedError(f"{where}.manage is given only with --follow")
    return PublishedBlock(index, offset, length, _digest(fields["hash"], f"{where}.hash", algorithm), read, manage,
                          _time(fields["expires"], f"{where}.expires"))


def _sender(raw: Any) -> SenderState:
    fields = check_object(raw, "sender", _SENDER_FIELDS, PublishedError)
    state = _choice(fields["state"], "sender.state", SENDER_STATES)
    waiting = _optional_text(fields["waiting"], "sender.waiting")
    return SenderState(state, _whole(fields["landed"], "sender.landed", 0, MAX_FILE_SIZE),
                       _whole(fields["landed_bytes"], "sender.landed_bytes", 0, MAX_FILE_SIZE), waiting)


def publication_size(listed_blocks: int, extra_bytes: int) -> int:
    """Bytes to allocate for a publication that lists at most ``listed_blocks`` blocks and carries
    ``extra_bytes`` more (a final manifest), with room for the frame and the other fields."""
    return 16 * 1024 + listed_blocks * _BLOCK_BYTES + extra_bytes


def listed_at_most(allocation: int, extra_bytes: int) -> int:
    """How many blocks a publication of ``allocation`` bytes may list (``publication_size``'s inverse)."""
    return max(0, (allocation - 16 * 1024 - extra_bytes) // _BLOCK_BYTES)


# -- the tree's shape ---------------------------------------------------------------------------------------------


def tree_document(shape: dict[str, Any]) -> dict[str, Any]:
    """The document of the tree's shape allocation: ``shape``'s ``entries`` and ``blocks`` under its format."""
    return {"format": TREE_FORMAT, "entries": shape["entries"], "blocks": shape["blocks"]}


def parse_tree(document: Any) -> tuple[Any, Any]:
    """A decoded tree's shape as ``(entries, blocks)``, checked here only for the document's own fields: the
    entries and pieces are checked by ``formats.tree.parse_shape``, where the stream's layout is known."""
    top = check_object(document, "the tree's shape", ("format", "entries", "blocks"), PublishedError)
    if top["format"] != TREE_FORMAT:
        raise PublishedError(f"format is {show(top['format'])}, expected {TREE_FORMAT!r}")
    return top["entries"], top["blocks"]


# -- the drain record ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Drained:
    """What the receiver wrote in the drain record: the blocks on its disk and freed at the depot (``ranges`` of
    indices, ``[start, end)``, sorted and apart), their bytes (``drained_bytes``; ``bytes`` in the document), its
    state and, when it stopped on an error, why."""

    seq: int = 0
    updated: float = 0.0
    ranges: tuple[tuple[int, int], ...] = ()
    drained_bytes: int = 0
    state: str = "receiving"
    message: str | None = None
    count: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "count", sum(end - start for start, end in self.ranges))

    def __contains__(self, index: object) -> bool:
        if not isinstance(index, int):
            return False
        return any(start <= index < end for start, end in self.ranges)

    def to_dict(self) -> dict[str, Any]:
        return {"format": DRAINED_FORMAT, "seq": self.seq, "updated": self.updated,
                "ranges": [list(r) for r in self.ranges], "bytes": self.drained_bytes, "state": self.state,
                "message": self.message}

    def framed(self) -> bytes:
        return frame(self.to_dict())


_DRAINED_FIELDS = ("format", "seq", "updated", "ranges", "bytes", "state", "message")


def parse_drained(document: Any) -> Drained:
    top = check_object(document, "the drain record", _DRAINED_FIELDS, PublishedError)
    if top["format"] != DRAINED_FORMAT:
        raise PublishedError(f"format is {show(top['format'])}, expected {DRAINED_FORMAT!r}")
    raw = top["ranges"]
    if not isinstance(raw, list):
        raise PublishedError(f"ranges must be a list, not {kind(raw)}")
    spans: list[tuple[int, int]] = []
    for i, pair in enumerate(raw):
        if not isinstance(pair, list) or len(pair) != 2:
            raise PublishedError(f"ranges[{i}] must be a list [start, end]")
        start = _whole(pair[0], f"ranges[{i}][0]", 0, MAX_FILE_SIZE)
        end = _whole(pair[1], f"ranges[{i}][1]", start + 1, MAX_FILE_SIZE)
        if spans and start <= spans[-1][1]:
            raise PublishedError(f"ranges[{i}] does not follow the range before it")
        spans.append((start, end))
    state = _choice(top["state"], "state", RECEIVER_STATES)
    message = _optional_text(top["message"], "message")
    return Drained(_whole(top["seq"], "seq", 0, MAX_FILE_SIZE), _time(top["updated"], "updated"), tuple(spans),
                   _whole(top["bytes"], "bytes", 0, MAX_FILE_SIZE), state, message)


def drained_size(blocks_total: int) -> int:
    """Bytes to allocate for a drain record of a transfer of ``blocks_total`` blocks: one range per block at worst
    would be large, so the bound is for blocks drained out of order within a window (``4096`` ranges) plus the
    rest of the document; a receiver that drains in any order stays far below it."""
    return 4 * 1024 + min(max(blocks_total, 1), 4096) * _RANGE_BYTES


def ranges(done: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """Sorted, merged ``[start, end)`` ranges of the indices in ``done``."""
    spans: list[list[int]] = []
    for index in sorted(set(done)):
        if spans and index == spans[-1][1]:
            spans[-1][1] += 1
        else:
            spans.append([index, index + 1])
    return tuple((start, end) for start, end in spans)


def merged(spans: Sequence[tuple[int, int]], more: Iterable[int]) -> tuple[tuple[int, int], ...]:
    """``spans`` with the indices ``more`` added, merged: the cost is the ranges and the new indices, not every
    index the ranges hold."""
    pieces = sorted([*spans, *ranges(more)])
    out: list[list[int]] = []
    for start, end in pieces:
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return tuple((start, end) for start, end in out)


def indices(spans: Sequence[tuple[int, int]]) -> set[int]:
    return {i for start, end in spans for i in range(start, end)}


# -- field checks -------------------------------------------------------------------------------------------------


def _whole(value: Any, where: str, low: int, high: int) -> int:
    """``manifest.whole_number``'s check, its failure a ``PublishedError``."""
    try:
        return whole_number(value, where, low, high)
    except ManifestError as exc:
        raise PublishedError(str(exc)) from None


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise PublishedError(f"{where} must be true or false, not {kind(value)}")
    return value


def _time(value: Any, where: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not (
            math.isfinite(value) and 0 <= value < 253402300800):
        raise PublishedError(f"{where} must be a time (Unix seconds), not {show(value)}")
    return float(value)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise PublishedError(f"{where} must be a non-empty string of at most {MAX_TEXT} characters")
    return value


def _optional_text(value: Any, where: str) -> str | None:
    return None if value is None else _text(value, where)


def _choice(value: Any, where: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise PublishedError(f"{where} is {show(value)}, expected one of {', '.join(choices)}")
    return str(value)


def _url(value: Any, where: str) -> str:
    url = _text(value, where)
    if not url.startswith(("http://", "https://")) or any(c.isspace() or not c.isprintable() for c in url):
        raise PublishedError(f"{where} must be an http(s) URL")
    return url


def _capability(value: Any, where: str) -> str:
    if not isinstance(value, str) or not is_capability(value) or not _CAPABILITY.fullmatch(value):
        shown = "a string" if isinstance(value, str) else kind(value)  # never echo what may be a secret
        raise PublishedError(f"{where} is {shown} without the shape of a capability")
    return value


def _digest(value: Any, where: str, algorithm: str) -> str:
    want = HASH_ALGORITHMS[algorithm]
    if not isinstance(value, str) or len(value) != want or not re.fullmatch(r"[0-9a-f]*", value):
        raise PublishedError(f"{where} must be {want} lower-case hex digits (a {algorithm} digest)")
    return value
