"""``lnet-get URL --follow``: receive a transfer that ``lnet-send --follow`` is still sending.

The sender keeps, in an allocation at the destination depot, a publication (``formats.published``) listing the
blocks that have landed there and that this receiver has not drained yet. ``follow`` reads it over and over,
streams every listed block it does not hold into its offset of ``OUT.lnet-part`` (hashed as it comes, checked
against the listed hash), records it in ``OUT.lnet-part.state``, and then frees it at the depot and says so in
the drain record the sender reads: the depot's room is what the sender waits for, so what has landed is freed
in batches as soon as a durable state lists it (one batch per poll, a poll as soon as something landed). It ends
once the publication is final, every block is on disk and the whole file's hash (computed alongside, over the
part file's complete prefix) matches: the part file is then renamed into place.

A tree's packed stream arrives the same way into the spool ``OUT.lnet-stream.lnet-part``, but the tree is put in
place as it arrives (``fetching.follow_tree``): its shape (entries, and the pieces each block holds) is read once
at the start from the allocation the publication names, each file is written into place once every block holding
a piece of it is on disk, and a block every file of which is in place, durably, is punched out of the spool once
the whole stream's hash has covered it and the state lists it. The receiver's disk holds the tree and what is in
flight, and the spool is removed at the end.

The state lists every block on disk with its place, hash and read capability (a drained block is no longer in
the publication) and whether it is freed, and for a tree the files in place and the blocks punched; it is keyed
by the SHA-256 of the publication's read capability, so a state of another transfer is ignored. Like a manifest
it is written 0600. A second run resumes: the blocks the state lists are re-hashed (from the part file; a punched
block from the files that hold it), those not yet freed are freed, the drain record is rewritten, a file already
in place is not written again, and the rest arrive as before.

What this module must not do: free a block before the part file's bytes and a state listing them are on disk
(a crash then would lose the block for good), punch a block before its files are durably in place and the state
says so, list in the state a block that failed its hash, fetch more than ``parallel`` blocks at once or hold any
whole in memory, wait on the network past ``timeout_s`` (every wait goes through ``DepotClient``), or show a
capability whole.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio

from lnet.client.exits import ExitCode
from lnet.client.fetching.blocks import (
    BUSY_RETRIES,
    DEFAULT_PARALLEL,
    DEFAULT_TIMEOUT_S,
    DepotLoad,
    GetError,
    GetResult,
    IntegrityError,
    OutputError,
)
from lnet.client.fetching.follow_tree import BATCH_FILES, Shape, ShapeError, TreeSpool, shape
from lnet.client.fetching.part_names import part_path
from lnet.client.fetching.partfile import (
    HASH_CHUNK,
    PartFile,
    PartFileError,
    PrefixHasher,
    state_path,
    whole_file_is,
    write_at,
)
from lnet.client.fetching.tree import stream_path
from lnet.client.formats import lines, published, tree
from lnet.client.formats import manifest as file_manifest
from lnet.client.formats.documents import write_private_file
from lnet.client.formats.manifest import block_hasher
from lnet.client.formats.published import Drained, Publication, PublishedBlock, PublishedError
from lnet.client.formats.tree import StreamRead
from lnet.client.wire.depot_client import (
    Busy,
    DepotClient,
    DepotError,
    DepotUnreachable,
    NotFound,
    RangeNotSatisfiable,
)
from lnet.protocol import is_capability, redact, redact_capabilities

__all__ = [
    "DEFAULT_POLL_S",
    "DEFAULT_WAIT_S",
    "NotAPublication",
    "PublicationGone",
    "PublicationUnreachable",
    "SenderSilent",
    "data_url",
    "describe_sender",
    "follow",
    "read_publication",
]

DEFAULT_POLL_S = 0.5
"""The longest wait before reading the publication again when the last reads listed nothing new and nothing
landed since."""
FIRST_PAUSE_S = 0.02
"""The first such wait after the receiver found or freed something: the sender, which may be waiting for that
room, lands its next block soon; each read that finds nothing new doubles the wait, up to the poll interval."""
DEFAULT_WAIT_S = 600.0
"""How long the sender may make no progress (its publication unchanged, nothing arriving) before ``follow``
gives up (``--wait``)."""
TORN_TRIES = 20
TORN_PAUSE_S = 0.05
"""A publication read while the sender rewrites it fails its frame's checksum: read again after this pause, at
most ``TORN_TRIES`` times."""
BLOCK_TRIES = 3
"""Fetches of a block whose bytes do not match its hash before the run stops (exit 4)."""
STATE_FORMAT = "lnet-follow-state/3"

Offload = Callable[..., Awaitable[Any]]
"""How blocking disk work (an fsync, re-hashing a block) runs: ``trio.to_thread.run_sync`` unless told."""


class NotAPublication(GetError):
    """The URL holds something other than a valid publication (or one not sent with ``--follow``)."""

    exit_code = ExitCode.USAGE


class PublicationGone(GetError):
    """The depot holds no such allocation: the URL is wrong, or the publication expired or was freed."""

    exit_code = ExitCode.FAILED


class PublicationUnreachable(GetError):
    """The depot holding the publication or its blocks could not be reached, or stalled past the timeout."""

    exit_code = ExitCode.UNREACHABLE


class SenderSilent(GetError):
    """The sender made no progress for ``--wait``: the same command resumes later."""

    exit_code = ExitCode.UNREACHABLE


# -- pure parts -----------------------------------------------------------------------------------------------


def data_url(url: str) -> tuple[str, str] | None:
    """``(depot base URL, capability)`` when ``url`` is a depot's data URL (``http(s)://HOST:PORT/v1/data/CAP``),
    else None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number in range
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        return None
    if parts.username is not None or parts.password is not None:
        return None
    head, _, capability = parts.path.rpartition("/")
    if head != "/v1/data" or not is_capability(capability) or "\n" in capability:
        return None
    return f"{parts.scheme}://{parts.netloc}", capability


def describe_sender(publication: Publication) -> str:
    """A short line of what the sender is doing, for the receiver's progress line."""
    sender, total = publication.sender, publication.blocks_total
    landed = f"{sender.landed}/{total} blocks landed"
    if publication.final:
        return f"sender: done, all {total} blocks landed"
    if sender.state == "stopped":
        return f"sender stopped (it may resume): {landed}"
    if sender.landed == 0 and not publication.blocks:
        return "waiting for the sender"
    if sender.state == "waiting" and sender.waiting:
        return f"sender: {landed}, waiting for room at {sender.waiting}"
    return f"sender: {landed}"


@dataclass
class _Held:
    """A block verified on this disk: where it is, its hash and read capability, and whether it is freed at the
    depot."""

    index: int
    offset: int
    length: int
    hash: str
    read: str
    expires: float
    freed: bool = False
    logged: bool = False
    """In the state on disk (a block not yet there is fetched again by a resumed run)."""

    @property
    def end(self) -> int:
        return self.offset + self.length


def publication_key(read_cap: str) -> str:
    """What the state is keyed by: the publication's identity without the capability itself."""
    return hashlib.sha256(read_cap.encode()).hexdigest()


def _row(held: _Held) -> list[Any]:
    return [held.index, held.offset, held.length, held.hash, held.read, held.expires]


@dataclass
class _Found:
    """What an earlier run's state says: the blocks on disk, the drain record's last ``seq`` and, for a tree, the
    files in place (entry indices) and the blocks punched out of the spool."""

    held: dict[int, _Held]
    seq: int = 0
    placed: set[int] = field(default_factory=set)
    punched: set[int] = field(default_factory=set)


class _StateLog:
    """``OUT.lnet-part.state``: the blocks on this disk, appended as they become durable, and those freed.

    Lines of ``formats.lines`` (append-only, checksummed): a header naming the publication (by the SHA-256 of its
    read capability, never the capability), then ``{"held": [[index, offset, length, hash, read, expires], ...],
    "seq": N}`` for each drain round's blocks, written and fdatasynced before they are freed, and ``{"freed":
    [[start, end], ...], "seq": N}`` once they are; ``seq`` is at least that of the drain record written next. A
    round appends only its own blocks, so a transfer of any length costs the state a constant per block; a
    resumed run rewrites it once, compact, with the blocks that still match their hash. For a tree, ``{"placed":
    [[start, end], ...], "punched": [[start, end], ...], "seq": N}`` says, once durable, which files (by entry
    index) are in place and which blocks are punched out of the spool (written before the punch)."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path, self.header = path, header
        self._fd = -1

    def read(self, publication: Publication, entries: int = 0) -> _Found:
        """What an earlier run left on disk by its state (``entries``: a tree's); nothing when there is no state,
        or it is another transfer's."""
        try:
            data = self.path.read_bytes()
        except OSError:
            return _Found({})
        documents, _ = lines.decode(data)
        if not documents or documents[0] != self.header:
            return _Found({})
        found = _Found({})
        freed: set[int] = set()
        for document in documents[1:]:
            value = document.get("seq")
            if type(value) is int and value >= 0:
                found.seq = max(found.seq, value)
            for row in document.get("held", ()):
                block = _held_row(row, publication)
                if block is None:
                    return _Found({})
                found.held[block.index] = block
            freed |= _indices(document.get("freed", ()), publication.blocks_total)
            found.placed |= _indices(document.get("placed", ()), entries)
            found.punched |= _indices(document.get("punched", ()), publication.blocks_total)
        for index, block in found.held.items():
            block.freed = index in freed
            block.logged = True
        return found

    def rewrite(self, held: Mapping[int, _Held], seq: int, placed: Iterable[int] = (),
                punched: Iterable[int] = ()) -> None:
        """The state anew, compact (atomically, 0600), then open for appending."""
        blocks = sorted(held.values(), key=lambda h: h.index)
        data = lines.encode(self.header)
        for start in range(0, len(blocks), 4096):
            data += lines.encode({"held": [_row(h) for h in blocks[start : start + 4096]], "seq": seq})
        data += lines.encode({"freed": [list(r) for r in published.ranges(h.index for h in blocks if h.freed)],
                              "seq": seq})
        data += lines.encode({"placed": [list(r) for r in published.ranges(placed)],
                              "punched": [list(r) for r in published.ranges(punched)], "seq": seq})
        write_private_file(self.path, data)
        for block in blocks:
            block.logged = True
        self.close()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)

    def append_held(self, blocks: list[_Held], seq: int) -> None:
        """Blocks now durable in the part file, durable here too (before they may be freed)."""
        if blocks:
            self._append({"held": [_row(h) for h in blocks], "seq": seq})
            os.fdatasync(self._fd)
            for block in blocks:
                block.logged = True

    def append_extracted(self, placed: list[int], punched: list[int], seq: int) -> None:
        """A tree's files now durable in place, and the blocks about to be punched: durable here before the punch
        (a resumed run reads a punched block back from its files)."""
        if placed or punched:
            self._append({"placed": [list(r) for r in published.ranges(placed)],
                          "punched": [list(r) for r in published.ranges(punched)], "seq": seq})
            os.fdatasync(self._fd)

    def append_freed(self, indices: list[int], seq: int) -> None:
        """Blocks freed at the depot (not synced: a line lost only means freeing again, which answers 404)."""
        if indices:
            self._append({"freed": [list(r) for r in published.ranges(indices)], "seq": seq})

    def _append(self, document: dict[str, Any]) -> None:
        data = lines.encode(document)
        if os.write(self._fd, data) != len(data):
            raise OSError(f"{self.path}: short write")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def _indices(pairs: Any, limit: int) -> set[int]:
    """The indices below ``limit`` in a state's ``[[start, end], ...]`` (anything else in it ignored)."""
    found: set[int] = set()
    for pair in pairs if isinstance(pairs, list) else ():
        if isinstance(pair, list) and len(pair) == 2 and all(type(i) is int for i in pair):
            found.update(range(max(0, pair[0]), min(pair[1], limit)))
    return found


def _held_row(row: Any, publication: Publication) -> _Held | None:
    if not (isinstance(row, list) and len(row) == 6):
        return None
    index, offset, length, digest, read, expires = row
    if not (type(index) is int and type(offset) is int and type(length) is int and isinstance(digest, str)
            and isinstance(read, str) and is_capability(read) and isinstance(expires, int | float)
            and not isinstance(expires, bool)):
        return None
    if not (0 <= index < publication.blocks_total and 0 <= offset and 0 < length
            and offset + length <= publication.size):
        return None
    return _Held(index, offset, length, digest, read, float(expires))


# -- reading the publication ----------------------------------------------------------------------------------


async def read_publication(client: DepotClient, read_cap: str, *, timeout_s: float = DEFAULT_TIMEOUT_S
                           ) -> Publication:
    """The publication at ``client``'s depot under ``read_cap``, read whole and checked. A read that caught the
    sender rewriting it (its frame's checksum fails) is read again after a short pause; all of it is bounded by
    ``timeout_s`` (each request by the client's own timeout too).

    Raises ``PublicationGone`` (404: a wrong URL, or expired or freed), ``PublicationUnreachable`` and
    ``NotAPublication`` (anything else there, or a publication that does not parse)."""
    publication: Publication = await _read_framed(client, read_cap, published.FORMAT, published.parse,
                                                  "publication", timeout_s)
    return publication


async def _read_framed(client: DepotClient, read_cap: str, expected: str, parse: Callable[[Any], Any], what: str,
                       timeout_s: float) -> Any:
    """A framed document (``expected``: its format) read whole and ``parse``d, as ``read_publication`` says."""
    shown = f"{client.base_url}/v1/data/{redact(read_cap)}"
    try:
        with trio.fail_after(timeout_s):
            for attempt in range(TORN_TRIES):
                if attempt:
                    await trio.sleep(TORN_PAUSE_S)
                data = await client.read(read_cap)
                document = published.unframe(data, expected)
                if document is not None:
                    return parse(document)
    except trio.TooSlowError:
        raise PublicationUnreachable(f"{shown}: no whole {what} within {timeout_s:g}s") from None
    except NotFound:
        raise PublicationGone(
            f"{shown}: the depot holds nothing there: the URL is wrong, or the {what} expired or was freed"
        ) from None
    except DepotUnreachable as exc:
        raise PublicationUnreachable(redact_capabilities(str(exc))) from None
    except PublishedError as exc:
        raise NotAPublication(f"{shown} is not a valid {what}: {exc}") from None
    except DepotError as exc:
        raise GetError(f"{shown}: the depot refused: {exc.code}: {exc.message}") from None
    raise PublicationUnreachable(
        f"{shown}: the {what} was being rewritten each of {TORN_TRIES} times it was read; try again"
    )


# -- the receiver ---------------------------------------------------------------------------------------------


async def follow(
    url: str,
    out: Path,
    *,
    parallel: int = DEFAULT_PARALLEL,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    tokens: Mapping[str, str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    on_progress: Callable[[int], None] | None = None,
    on_state: Callable[[str], None] | None = None,
    poll_s: float = DEFAULT_POLL_S,
    wait_s: float = DEFAULT_WAIT_S,
    offload: Offload | None = None,
) -> GetResult:
    """Receive the transfer published at ``url`` into ``out`` (a file, or a tree rebuilt under ``out``) while
    ``lnet-send --follow`` sends it; resumes from ``out``'s part file and state if there are.

    ``on_progress``: new bytes on disk (the resumed ones first); ``on_state``: the sender's state as a short
    line, each time it changes. ``tokens``: operator tokens by depot base URL. ``offload``: how the fsyncs and
    re-hashes run (tests on trio's mock clock run them inline: a worker thread lets the clock jump meanwhile).
    Gives up (``SenderSilent``) when the sender made no progress for ``wait_s``. Raises a ``GetError`` whose
    ``exit_code`` says what went wrong; the part and state files stay for a resume."""
    if parallel < 1:
        raise ValueError("parallel must be at least 1")
    place = data_url(url)
    if place is None:
        raise NotAPublication(f"{redact_capabilities(url)} is not a depot's data URL (http://HOST:PORT/v1/data/...)")
    receiver = _Receiver(place, Path(out), parallel, timeout_s, tokens or {}, transport,
                         on_progress or (lambda nbytes: None), on_state or (lambda text: None), poll_s, wait_s,
                         offload or trio.to_thread.run_sync)
    try:
        return await receiver.run()
    finally:
        with trio.CancelScope(shield=True):
            for client in receiver.clients.values():
                await client.aclose()


def _hash_and_write(fd: int, view: memoryview, offset: int, algorithm: str) -> str:
    """``view`` written at ``offset`` of the part file; its hash (both release the GIL for large buffers)."""
    write_at(fd, view, offset)
    hasher = block_hasher(algorithm)
    hasher.update(view)
    return hasher.hexdigest()


class _Buffers:
    """At most ``count`` block buffers, reused: a receiver holds no more than ``parallel`` blocks in memory."""

    def __init__(self, count: int) -> None:
        self.free: list[bytearray] = []
        self.count = count

    @contextmanager
    def lease(self, length: int) -> Iterator[memoryview]:
        buffer = next((b for b in self.free if len(b) >= length), None)
        if buffer is not None:
            self.free.remove(buffer)
        else:
            buffer = bytearray(length)
        try:
            with memoryview(buffer) as whole, whole[:length] as view:
                yield view
        finally:
            if len(self.free) < self.count:
                self.free.append(buffer)


class _Receiver:
    """One ``follow``: the poll loop, the fetchers and the drain rounds share it."""

    def __init__(
        self, place: tuple[str, str], out: Path, parallel: int, timeout_s: float, tokens: Mapping[str, str],
        transport: httpx.AsyncBaseTransport | None, on_progress: Callable[[int], None],
        on_state: Callable[[str], None], poll_s: float, wait_s: float, offload: Offload,
    ) -> None:
        self.base, self.read_cap = place
        self.key = publication_key(self.read_cap)
        self.out = out
        self.parallel = parallel
        self.timeout_s = timeout_s
        self.tokens = {url.rstrip("/"): token for url, token in tokens.items()}
        self.transport = transport
        self.on_progress = on_progress
        self.on_state = on_state
        self.poll_s = poll_s
        self.wait_s = wait_s
        self.pause_s = min(FIRST_PAUSE_S, poll_s)
        self.offload = offload
        self.clients: dict[str, DepotClient] = {}
        self.held: dict[int, _Held] = {}
        self.unfreed: dict[int, _Held] = {}  # on disk, not yet freed at the depot
        self.unlogged: list[_Held] = []  # on disk, not yet in the state
        self.freed_ranges: tuple[tuple[int, int], ...] = ()  # what the drain record says, kept as it grows
        self.freed_bytes = 0
        self.wanted: dict[int, PublishedBlock] = {}  # queued or being fetched
        self.gone: dict[int, str] = {}  # read capabilities a fetch found no allocation under
        self.drained_seq = 0
        self.fetched_bytes = 0
        self.refetches = 0
        self.load = DepotLoad()
        self.failure: GetError | None = None
        self.landed = trio.Event()
        self.last_progress = 0.0
        self.shown_state = ""
        self.fd = -1
        self.buffers = _Buffers(parallel)
        self.hasher: PrefixHasher | None = None
        self._prefix_next = 0
        self._prefix_end = 0
        self.shape: Shape | None = None
        self.spool: TreeSpool | None = None
        self._extract_wake = trio.Event()
        self.publication: Publication
        self.state: _StateLog

    def client(self, depot: str) -> DepotClient:
        depot = depot.rstrip("/")
        if depot not in self.clients:
            self.clients[depot] = DepotClient(depot, token=self.tokens.get(depot), timeout=self.timeout_s,
                                              transport=self.transport, max_connections=self.parallel + 2)
        return self.clients[depot]

    async def read(self) -> Publication:
        publication = await read_publication(self.client(self.base), self.read_cap, timeout_s=self.timeout_s)
        if not publication.follow:
            raise NotAPublication("this transfer was not sent with lnet-send --follow: run lnet-get without --follow")
        return publication

    # -- the run ------------------------------------------------------------------------------------------------

    async def run(self) -> GetResult:
        started = trio.current_time()
        self.publication = first = await self.read()
        is_tree = first.kind == "tree"
        target = stream_path(self.out) if is_tree else self.out
        _check_output(self.out, is_tree)
        if is_tree:
            self.shape = await self.read_shape(first)
        self.state = _StateLog(state_path(target), {
            "format": STATE_FORMAT, "publication": self.key, "size": first.size,
            "hash_algorithm": first.hash_algorithm, "blocks_total": first.blocks_total})
        if (not is_tree and first.final and not part_path(target).exists()
                and await self.offload(_is_whole, target, first)):
            # An earlier run verified and placed it, then stopped before its last steps.
            found = self.state.read(first)
            self._account(found.held)
            self.drained_seq = found.seq
            resumed = first.blocks_total
            self.on_progress(first.size)
        else:
            resumed = await self.receive(target)
        done = await self._tell("done")
        self.state.remove()
        if done is not None:
            self.on_state(f"the {first.kind} is in place, but the sender was not told: {done}")
        return GetResult(self.out, first.size, trio.current_time() - started, first.blocks_total, resumed,
                         self.fetched_bytes, self.refetches, {first.depot: self.load} if self.load.blocks else {})

    async def read_shape(self, publication: Publication) -> Shape:
        """A tree's entries and pieces, read once from the allocation the publication names, and checked."""
        place = data_url(publication.tree_url) if publication.tree_url is not None else None
        if place is None:
            raise NotAPublication("the publication's tree_url is not a depot's data URL")
        raw_entries, raw_blocks = await _read_framed(self.client(place[0]), place[1], published.TREE_FORMAT,
                                                     published.parse_tree, "tree's shape", self.timeout_s)
        try:
            return shape(raw_entries, raw_blocks, size=publication.size, block_size=publication.block_size,
                         blocks_total=publication.blocks_total)
        except ShapeError as exc:
            raise NotAPublication(f"the tree's shape is not valid: {exc}") from None

    async def receive(self, target: Path) -> int:
        """Everything into ``target``'s part file, verified, and renamed into place (a tree: each file put in place
        as its blocks arrive, the spool removed at the end); the blocks resumed."""
        try:
            part = PartFile.open(target)
        except PartFileError as exc:
            raise OutputError(str(exc)) from None
        self.fd = part.fd
        publication = self.publication
        try:
            try:
                found = self.state.read(publication, len(self.shape.entries) if self.shape is not None else 0)
                self.drained_seq = found.seq
                read: StreamRead = partial(_pread, part.fd)
                if self.shape is not None:
                    self.spool = TreeSpool(self.out, part.fd, self.shape)
                    read = self.spool.read
                    self._account(await self.offload(self._resume_tree, self.spool, found))
                else:
                    self._account(await self.offload(_recheck, read, found.held, publication.hash_algorithm))
                    part.preallocate(publication.size)
                extraction = self.spool.extraction if self.spool is not None else None
                await self.offload(self.state.rewrite, self.held, self.drained_seq + 1,
                                   extraction.placed if extraction else (), extraction.punched if extraction else ())
                self.on_progress(sum(h.length for h in self.held.values()))
                resumed = len(self.held)
                self.hasher = PrefixHasher(part.fd, publication.size, publication.hash_algorithm, self._prefix,
                                           offload=self.offload, read=read, on_hashed=self._extract_soon)
                await self._transfer()
                if self.hasher.hexdigest() != self.publication.file_hash:  # the final one's
                    raise IntegrityError(
                        f"the whole file's {publication.hash_algorithm} does not match the publication's; the "
                        f"bytes are kept in {part.path} for inspection"
                    )
                if self.spool is None:
                    await self.offload(part.commit)
                else:
                    await self.offload(self._finish_tree, self.spool, part.path)
            except BaseException as exc:
                await self._tell("stopped", str(exc) if isinstance(exc, GetError) else "interrupted")
                raise
            finally:
                with trio.CancelScope(shield=True):  # what is on disk, kept for a resume
                    await self._durable()
                self.state.close()
        except OSError as exc:
            raise GetError(f"{target}: {exc.strerror or exc}") from None
        except tree.RebuildError as exc:
            raise OutputError(str(exc)) from None
        finally:
            if self.spool is not None:
                self.spool.close()
            part.close()
            self.fd = -1
        return resumed

    # -- a tree -------------------------------------------------------------------------------------------------

    def _resume_tree(self, spool: TreeSpool, found: _Found) -> dict[int, _Held]:
        """A tree's spool made ready: sparse at the stream's size (never preallocated: it holds only what is in
        flight), the directories and symlinks in place, and what an earlier run left checked: its files still in
        place, its blocks re-hashed (a punched one from the files that hold it). The blocks that match."""
        os.ftruncate(spool.fd, self.publication.size)
        spool.make_skeleton()
        extraction = spool.extraction
        for file in spool.in_place(found.placed):
            extraction.file_placed(file)
        claimed = {i: h for i, h in found.held.items() if spool.fits(i, h.offset, h.length)}
        extraction.resumed_punched(found.punched & claimed.keys())
        held = _recheck(spool.read, claimed, self.publication.hash_algorithm)
        for index in held:
            extraction.block_held(index)
        for index in extraction.punched - held.keys():
            extraction.punched_lost(index)
        return held

    def _extract_soon(self) -> None:
        self._extract_wake.set()

    def _may_punch(self, index: int) -> bool:
        """Whether block ``index``'s bytes may leave the spool: the whole stream's hash has covered it and the state
        lists it (its files are in place: ``Extraction`` asks only then)."""
        held = self.held.get(index)
        return (held is not None and held.logged and self.hasher is not None and held.end <= self.hasher.hashed
                and self.spool is not None and self.spool.can_punch)

    async def _extractor(self, spool: TreeSpool, scope: trio.CancelScope) -> None:
        """A tree's files written into place as their blocks arrive, and the blocks they leave spent punched out of
        the spool, until every file is in place."""
        extraction = spool.extraction
        try:
            while not extraction.done:
                self._extract_wake = trio.Event()
                ready = sorted(extraction.ready)[:BATCH_FILES]
                if ready:
                    await self.offload(spool.write_files, ready)
                    for file in ready:
                        extraction.file_placed(file)
                spent = extraction.punchable(self._may_punch)
                if ready or spent:
                    await self.offload(self.state.append_extracted, ready, spent, self.drained_seq + 1)
                if spent:
                    for index in spent:  # read back from the files from now on, before the bytes go
                        extraction.block_punched(index)
                    await self.offload(spool.punch, spent)
                    if not spool.can_punch:
                        self.on_state("this file system cannot punch holes: the spool keeps every block to the end")
                if not ready and not spent:
                    await self._extract_wake.wait()
        except tree.RebuildError as exc:
            self._fail(OutputError(str(exc)), scope)
        except OSError as exc:
            self._fail(OutputError(f"{self.out}: {exc.strerror or exc}"), scope)

    def _finish_tree(self, spool: TreeSpool, path: Path) -> None:
        """The directories' modes and times; then the spool removed, once the state says every block is punched
        (a run stopped in between reads them all back from the files)."""
        spool.finish()
        left = [index for index in range(self.publication.blocks_total) if index not in spool.extraction.punched]
        self.state.append_extracted([], left, self.drained_seq + 1)
        os.unlink(path)

    async def _tell(self, state: str, message: str | None = None) -> str | None:
        """The drain record with ``state`` written as far as the timeout allows, even in a cancelled run; why
        not, if it was not (the run's own outcome matters more than this)."""
        with trio.CancelScope(shield=True), trio.move_on_after(self.timeout_s) as bound:
            try:
                await self.write_drained(state, message)
            except GetError as exc:
                return str(exc)
        return f"no answer within {self.timeout_s:g}s" if bound.cancelled_caught else None

    async def _transfer(self) -> None:
        assert self.hasher is not None
        send, receive = trio.open_memory_channel[PublishedBlock](math.inf)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.hasher.run)
            if self.spool is not None:
                nursery.start_soon(self._extractor, self.spool, nursery.cancel_scope)
            for _ in range(self.parallel):
                nursery.start_soon(self._fetcher, receive.clone(), nursery.cancel_scope)
            receive.close()
            try:
                async with send:
                    await self._poll(send)
            except GetError as exc:
                self._fail(exc, nursery.cancel_scope)
            except OSError as exc:
                self._fail(GetError(f"{self.out}: {exc.strerror or exc}"), nursery.cancel_scope)
        if self.failure is not None:
            raise self.failure

    async def _poll(self, send: trio.MemorySendChannel[PublishedBlock]) -> None:
        """Read the publication, queue what is new, drain what landed; until everything is on disk."""
        await self.drain_round()  # a resumed run frees what the last one had on disk but had not freed
        self.last_progress = trio.current_time()
        publication, seq = self.publication, self.publication.seq
        while True:
            self._show(describe_sender(publication))
            found = self._queue(publication, send)
            if publication.final and len(self.held) == publication.blocks_total:
                await self.drain_round()
                return
            if found or self._undrained():
                self.pause_s = min(FIRST_PAUSE_S, self.poll_s)
            else:
                with trio.move_on_after(self.pause_s):
                    await self.landed.wait()
                self.pause_s = min(self.pause_s * 2, self.poll_s)
            if await self.drain_round():
                self.pause_s = min(FIRST_PAUSE_S, self.poll_s)
            publication = await self.read()
            if (publication.size, publication.blocks_total, publication.hash_algorithm, publication.kind) != (
                    self.publication.size, self.publication.blocks_total, self.publication.hash_algorithm,
                    self.publication.kind):
                raise NotAPublication("the publication now describes another file: was the sender restarted on it?")
            self.publication = publication
            now = trio.current_time()
            if publication.seq != seq:
                seq, self.last_progress = publication.seq, now
            if not self.wanted and not publication.final and now - self.last_progress >= self.wait_s:
                raise SenderSilent(
                    f"the sender made no progress for {_duration(self.wait_s)} ({len(self.held)} of "
                    f"{publication.blocks_total} blocks received); run the same command again to resume"
                )

    def _queue(self, publication: Publication, send: trio.MemorySendChannel[PublishedBlock]) -> bool:
        """Queue the listed blocks not on disk nor on their way; whether there were any."""
        found = False
        for block in publication.blocks:
            if block.index in self.held or block.index in self.wanted:
                continue
            if self.spool is not None and not self.spool.fits(block.index, block.offset, block.length):
                raise NotAPublication(f"block {block.index} is not where the tree's shape puts it")
            if self.gone.get(block.index) == block.read:
                raise GetError(
                    f"block {block.index} is gone from {publication.depot} (expired or freed) though the sender "
                    "still lists it; run the same command again to resume once lnet-send has sent it again"
                )
            self.wanted[block.index] = block
            send.send_nowait(block)
            found = True
        if publication.final:
            missing = set(range(publication.blocks_total)) - self.held.keys() - self.wanted.keys()
            if missing:
                raise GetError(
                    f"the sender is done, but {len(missing)} block(s) (first {min(missing)}) are neither listed "
                    "nor on this disk: an earlier run's state was lost after it drained them; send again"
                )
        return found

    def _undrained(self) -> bool:
        return bool(self.unfreed)

    def _account(self, held: dict[int, _Held]) -> None:
        """The blocks an earlier run left on disk (checked), and what of them is still to free and to say."""
        self.held = held
        self.unfreed = {index: h for index, h in held.items() if not h.freed}
        self.freed_ranges = published.ranges(index for index, h in held.items() if h.freed)
        self.freed_bytes = sum(h.length for h in held.values() if h.freed)

    def _show(self, text: str) -> None:
        if text != self.shown_state:
            self.shown_state = text
            self.on_state(text)

    # -- fetching -----------------------------------------------------------------------------------------------

    def _fail(self, failure: GetError, scope: trio.CancelScope) -> None:
        """The first failure ends the run (``_transfer`` raises it once every task has stopped)."""
        self.failure = self.failure or failure
        scope.cancel()

    async def _fetcher(self, blocks: trio.MemoryReceiveChannel[PublishedBlock], scope: trio.CancelScope) -> None:
        async with blocks:
            async for block in blocks:
                try:
                    held = await self._fetch(block)
                except GetError as exc:
                    self._fail(exc, scope)
                    return
                except OSError as exc:  # the part file: a full disk
                    self._fail(GetError(f"{self.out}: {exc.strerror or exc}"), scope)
                    return
                del self.wanted[block.index]
                if held is None:
                    continue
                self.held[block.index] = self.unfreed[block.index] = held
                self.unlogged.append(held)
                if self.spool is not None:
                    self.spool.extraction.block_held(block.index)
                    self._extract_soon()
                self.last_progress = trio.current_time()
                self.landed.set()
                assert self.hasher is not None
                self.hasher.advanced()

    async def _fetch(self, block: PublishedBlock) -> _Held | None:
        """``block`` read, written into its place in the part file and verified; None when its allocation is gone."""
        depot = self.publication.depot
        algorithm = self.publication.hash_algorithm
        busy = 0
        mismatches = 0
        while True:
            landed = 0
            self.load.asked(block.length, trio.current_time())
            verified = False
            try:
                # Read whole into one of ``parallel`` buffers, then hashed and written at its place off the event
                # loop (one hop per block): the loop keeps every fetch and the drain rounds moving meanwhile.
                with self.buffers.lease(block.length) as view:
                    landed = await self.client(depot).read_into(block.read, view)
                    digest = await self.offload(_hash_and_write, self.fd, view, block.offset, algorithm)
                    verified = digest == block.hash
                    if verified and self.hasher is not None:
                        await self.hasher.offer(block.offset, view)
                self.fetched_bytes += landed
                self.on_progress(landed)
            except RangeNotSatisfiable:  # holds fewer bytes than the block: as a hash that does not match
                verified = False
            except NotFound:
                self.on_progress(-landed)
                self.gone[block.index] = block.read
                return None
            except Busy as exc:
                self.on_progress(-landed)
                busy += 1
                if busy > BUSY_RETRIES:
                    raise GetError(f"block {block.index}: {depot} stayed busy: {exc.message}") from None
                await trio.sleep(min(exc.retry_after or 1.0, 5.0))
                continue
            except DepotUnreachable as exc:
                raise PublicationUnreachable(
                    f"block {block.index}: {redact_capabilities(str(exc))}; run the same command again to resume"
                ) from None
            except DepotError as exc:
                raise GetError(f"block {block.index}: {depot} refused: {exc.code}: {exc.message}") from None
            finally:
                self.load.answered(block.length, trio.current_time(), verified)
            if verified:
                return _Held(block.index, block.offset, block.length, block.hash, block.read, block.expires)
            self.on_progress(-landed)
            mismatches += 1
            self.refetches += 1
            if mismatches >= BLOCK_TRIES:
                what = (f"holds {landed} of {block.length} bytes" if landed != block.length
                        else f"does not match its {algorithm}")
                raise IntegrityError(f"block {block.index} (bytes {block.offset}-{block.offset + block.length - 1}) "
                                     f"{what}, {mismatches} times")

    def _prefix(self) -> int:
        """The end of the part file's prefix that is all verified blocks, in order (what the file hash may cover)."""
        while (held := self.held.get(self._prefix_next)) is not None and held.offset == self._prefix_end:
            self._prefix_end = held.end
            self._prefix_next += 1
        return self._prefix_end

    # -- draining -----------------------------------------------------------------------------------------------

    async def drain_round(self) -> bool:
        """Free at the depot what is on disk and not yet freed, once the part file's bytes and a state that lists
        them are durable; then say so in the drain record. One round for everything landed since the last; whether
        there was anything to free."""
        self.landed = trio.Event()
        batch = list(self.unfreed.values())
        if not batch:
            return False
        listed = {b.index: b for b in self.publication.blocks}
        await self._durable()
        self._extract_soon()  # listed in the state: may be punched
        limiter = trio.CapacityLimiter(self.parallel)
        failures: list[GetError] = []

        async def free(held: _Held) -> None:
            block = listed.get(held.index)
            async with limiter:
                try:
                    if block is not None:  # not listed: the sender already dropped it (or it expired)
                        await self.client(self.publication.depot).free(block.manage)
                except NotFound:
                    pass  # already freed
                except DepotUnreachable as exc:
                    failures.append(PublicationUnreachable(redact_capabilities(str(exc))))
                    return
                except DepotError as exc:
                    failures.append(GetError(f"freeing block {held.index}: {exc.code}: {exc.message}"))
                    return
            held.freed = True

        async with trio.open_nursery() as nursery:
            for held in batch:
                nursery.start_soon(free, held)
        freed = [h.index for h in batch if h.freed]
        for index in freed:
            self.freed_bytes += self.unfreed.pop(index).length
        self.freed_ranges = published.merged(self.freed_ranges, freed)
        await self.offload(self.state.append_freed, freed, self.drained_seq + 1)
        if failures:
            raise failures[0]
        await self.write_drained("receiving")
        return True

    async def _durable(self) -> None:
        """The part file's bytes, then the state that lists the blocks fetched since the last time, on disk: only
        then may those blocks be freed."""
        new, self.unlogged = self.unlogged, []  # taken here, in the loop: the fetchers go on adding meanwhile
        if new and self.fd >= 0:
            await self.offload(self._make_durable, new)

    def _make_durable(self, new: list[_Held]) -> None:
        os.fdatasync(self.fd)
        self.state.append_held(new, self.drained_seq + 1)

    async def write_drained(self, state: str, message: str | None = None) -> None:
        """The drain record: every block on disk and freed, its bytes, this receiver's state."""
        ack = self.publication.ack
        place = data_url(ack) if ack is not None else None
        if place is None:
            raise NotAPublication("the publication's ack is not a depot's data URL")
        self.drained_seq += 1
        record = Drained(self.drained_seq, time.time(), self.freed_ranges, self.freed_bytes, state,
                         message[: file_manifest.MAX_TEXT] if message else None)
        try:
            await self.client(place[0]).write(place[1], record.framed(), offset=0)
        except DepotUnreachable as exc:
            raise PublicationUnreachable(redact_capabilities(str(exc))) from None
        except NotFound:
            raise PublicationGone("the drain record is gone from the depot (expired or freed)") from None
        except DepotError as exc:
            raise GetError(f"writing the drain record: {exc.code}: {exc.message}") from None

def _check_output(out: Path, is_tree: bool) -> None:
    if is_tree:
        if os.path.lexists(out) and not out.is_dir():
            raise OutputError(f"{out} exists and is not a directory")
        return
    if out.is_dir():
        raise OutputError(f"{out} is a directory")
    if not out.parent.is_dir():
        raise OutputError(f"{out.parent} is not a directory")


def _is_whole(path: Path, publication: Publication) -> bool:
    """Whether ``path`` already holds the whole file the publication describes (hash checked)."""
    return whole_file_is(path, publication.size, publication.hash_algorithm, publication.file_hash or "")


def _pread(fd: int, offset: int, length: int) -> bytes:
    return os.pread(fd, length, offset)


def _recheck(read: StreamRead, claimed: Mapping[int, _Held], algorithm: str) -> dict[int, _Held]:
    """The blocks a state claims whose bytes, as ``read`` gives them, still match their hash."""
    verified: dict[int, _Held] = {}
    for index, held in sorted(claimed.items()):
        hasher = block_hasher(algorithm)
        try:
            for offset in range(held.offset, held.end, HASH_CHUNK):  # a block may be large: never read whole
                data = read(offset, min(HASH_CHUNK, held.end - offset))
                hasher.update(data)
        except OSError:
            continue  # a punched block whose file cannot be read back
        if hasher.hexdigest() == held.hash:
            verified[index] = held
    return verified


def _duration(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"
