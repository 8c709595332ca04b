"""``lnet-send`` resumes: the send journal's file, and the checks that decide what an interrupted run left usable.

``SendJournal.open`` takes the journal beside the manifest (``MANIFEST.journal``, mode 0600: it holds
capabilities), locks it against a second ``lnet-send`` on the same manifest, and reads what an interrupted run
recorded (``lnet.client.sending.journal``: append-only lines with a checksum each; a torn tail is cut off). ``begin``
compares that run's header with the transfer asked for now and refuses (``ResumeRefused``, naming ``--restart``)
when they differ, or starts a fresh journal. While the relay runs, every block verified at the destination is
appended (``recording``) and the file is fsynced about once a second (``keep_synced``); a record a crash loses
only means that block is sent again. Before the relay starts, ``prepare`` re-hashes the recorded blocks from the
source (a source changed under the same size and time is refused too) and asks the destination for each one's
digest, ``PARALLEL_DIGESTS`` at once: the blocks it still holds, unchanged, are handed to the relay as delivered
and are neither read nor sent again. ``remove`` deletes the journal once the manifest is written.

What this module must not do: trust a record the destination does not confirm, let the relay skip a block whose
source bytes differ from what was sent, or print a capability.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shlex
import time
from collections.abc import Awaitable, Callable, Container, Mapping, Sequence
from pathlib import Path
from typing import Any

import trio

from lnet.client.formats.manifest import block_hasher, hash_bytes
from lnet.client.sending import journal
from lnet.client.sending.journal import JournalHeader
from lnet.client.sending.relay import (
    Allocated,
    BlockDelivered,
    BlockRecord,
    Offload,
    RelayConfig,
    RelayEvent,
    Stream,
    TransferFailed,
    block_spans,
)
from lnet.client.wire.depot_client import DepotClient, DepotUnreachable, NotFound
from lnet.protocol import DepotError

__all__ = [
    "PARALLEL_DIGESTS",
    "SYNC_INTERVAL_S",
    "ResumeRefused",
    "SendJournal",
    "file_header",
    "journal_path",
    "resume_command",
    "source_header",
    "tree_header",
]

PARALLEL_DIGESTS = 16
"""Digests asked of the destination at once when a run resumes: enough to hide the round trip, few enough that
a depot's request limit is not what answers."""
SYNC_INTERVAL_S = 1.0
READ_CHUNK = 4 * 1024 * 1024


class ResumeRefused(Exception):
    """The journal belongs to a transfer that cannot be resumed as asked (the source changed, other arguments)."""


def journal_path(manifest: Path) -> Path:
    return manifest.with_name(manifest.name + ".journal")


def resume_command(argv: Sequence[str]) -> str:
    """The command that resumes: the same one, without ``--restart`` (which would discard what was sent)."""
    return shlex.join(["lnet-send", *(arg for arg in argv if arg != "--restart")])


def file_header(path: Path, dest: str, config: RelayConfig) -> JournalHeader:
    info = path.stat()
    return JournalHeader(
        "file", path.name, str(path.resolve()), dest, info.st_size, f"{info.st_size}:{info.st_mtime_ns}",
        config.block_size, config.hash_algorithm, journal.layout_digest(block_spans(info.st_size, config.block_size)),
    )


def source_header(urls: Sequence[str], name: str, size: int, dest: str, config: RelayConfig) -> JournalHeader:
    return JournalHeader(
        "source", name, " ".join(urls), dest, size, "", config.block_size, config.hash_algorithm,
        journal.layout_digest(block_spans(size, config.block_size)),
    )


def tree_header(root: Path, entries: Sequence[Any], stream: Stream, pieces: Sequence[Sequence[Any]], dest: str,
                config: RelayConfig, bdp: int) -> JournalHeader:
    return JournalHeader(
        "tree", root.resolve().name or "tree", str(root.resolve()), dest, stream.size, journal.tree_digest(entries),
        config.block_size, config.hash_algorithm, journal.layout_digest(stream.spans, pieces), bdp,
    )


class SendJournal:
    """One ``lnet-send``'s journal file, open and locked from ``open`` to ``close`` (or ``remove``)."""

    def __init__(self, path: Path, fd: int, previous: journal.Decoded, restart: bool) -> None:
        self.path = path
        self._fd = fd
        self.previous = previous.header
        """The interrupted run's header (None: there was none, or ``--restart``)."""
        self.records: dict[int, BlockRecord] = {}
        """The blocks recorded as delivered: the interrupted run's (until ``begin``), then this run's."""
        self.discarded: list[BlockRecord] = []
        """With ``--restart``: the interrupted run's blocks, for ``prepare`` to free at the destination."""
        self.resumed: dict[int, BlockRecord] = {}
        """The blocks ``prepare`` found still at the destination, unchanged, or drained by a receiver."""
        self.publication: dict[str, Any] | None = None
        """The interrupted run's publication (``PublicationCaps.to_dict``), or this run's once ``publish`` said it."""
        self.discarded_publication: dict[str, Any] | None = None
        """With ``--restart``: the interrupted run's publication, freed by ``prepare``."""
        self.leftover: tuple[tuple[str, str], ...] = previous.allocated
        """The interrupted run's allocations (depot URL, manage capability), for ``prepare`` to free but for the
        recorded blocks'."""
        if restart:
            self.discarded = list(previous.records.values())
            self.discarded_publication = previous.publication
            self.previous = None
        else:
            self.records = dict(previous.records)
            self.publication = previous.publication
        self.header: JournalHeader | None = None
        self._valid = previous.valid
        self._dirty = False

    @classmethod
    def open(cls, path: Path, *, restart: bool = False) -> SendJournal:
        """The journal at ``path``, created 0600 if there is none; ``ResumeRefused`` if another lnet-send holds it."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise ResumeRefused(f"cannot open the journal {path}: {exc.strerror}") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ResumeRefused(f"another lnet-send is using {path}") from None
            os.fchmod(fd, 0o600)
            size = os.fstat(fd).st_size
            data = os.pread(fd, size, 0) if size else b""
            return cls(path, fd, journal.decode(data), restart)
        except BaseException:
            os.close(fd)
            raise

    def begin(self, header: JournalHeader) -> None:
        """Resume the interrupted run if it is this same transfer, else refuse; with no journal (or ``--restart``)
        start one. Cuts a torn tail off, so that what is appended next is a whole line."""
        if self.previous is not None:
            why = journal.mismatch(self.previous, header)
            if why is not None:
                raise ResumeRefused(
                    f"cannot resume from {self.path}: {why}. Run the same command with --restart to send it from "
                    "the start (the blocks already sent are then freed), or give another --manifest"
                )
            os.ftruncate(self._fd, self._valid)
        else:
            os.ftruncate(self._fd, 0)
            self._write(journal.encode_header(header))
            os.fsync(self._fd)
        self.header = header

    async def prepare(
        self, dest: DepotClient, source: Path | Stream, available: Callable[[int, int], Awaitable[None]] | None,
        *, offload: Offload | None = None, drained: Container[int] = (),
        depots: Mapping[str, DepotClient] | None = None,
    ) -> dict[int, BlockRecord]:
        """The recorded blocks the relay need not send: checked against the source (``ResumeRefused`` if it
        changed) and found at the destination unchanged, or ``drained`` by the receiver of a ``--follow``
        transfer (on its disk, freed at the destination: not asked for). With ``--restart``, the old blocks and
        publication are freed first. ``available`` as the relay's (bytes still arriving); ``offload`` runs the
        source's reads and hashes (a worker thread unless given, as in the relay). ``depots``, by base URL: where
        the interrupted run's other allocations are freed (blocks on their way, probes' blocks: a run killed with
        -9 left them there, holding room for up to a day at the destination)."""
        header = self.header
        if header is None:
            raise RuntimeError("begin() first")
        if self.leftover:
            kept = {r.allocation.manage for r in self.records.values()} if self.previous is not None else set()
            await self._free_leftover(depots or {dest.base_url: dest}, kept)
        if self.discarded:
            await self._free(dest, self.discarded)
            self.discarded = []
        if self.discarded_publication is not None:
            await self._free_publication(dest, self.discarded_publication)
            self.discarded_publication = None
        spans = source.spans if isinstance(source, Stream) else block_spans(header.size, header.block_size)
        records = journal.usable_records(self.records, spans, dest.base_url)
        await self._check_source(header, records, source, available, offload or trio.to_thread.run_sync)
        gone = {index: record for index, record in records.items() if index in drained}
        self.resumed = {**await self._held(header, dest, {i: r for i, r in records.items() if i not in gone}),
                        **gone}
        self.records = dict(self.resumed)
        return self.resumed

    def recording(self, on_event: Callable[[RelayEvent], None] | None) -> Callable[[RelayEvent], None]:
        """``on_event`` that also appends each delivered block to the journal."""

        def record(event: RelayEvent) -> None:
            if isinstance(event, BlockDelivered) and event.record is not None:
                self.append(event.record)
            elif isinstance(event, Allocated):
                self._write(journal.encode_allocated(event.depot, event.manage))
                self._dirty = True
            if on_event is not None:
                on_event(event)

        return record

    def publish(self, capabilities: dict[str, Any]) -> None:
        """Record where this transfer publishes (``PublicationCaps.to_dict``), durably: a resumed run must find
        the URL the receiver was given."""
        if capabilities != self.publication:
            self._write(journal.encode_publication(capabilities))
            os.fsync(self._fd)
            self.publication = capabilities

    @trio.lowlevel.enable_ki_protection
    def append(self, record: BlockRecord) -> None:
        """One record, in one ``write`` (protected from Ctrl-C: it is written whole or not at all)."""
        self._write(journal.encode_record(record))
        self.records[record.index] = record
        self._dirty = True

    async def keep_synced(self, offload: Offload | None = None) -> None:
        """fsync the journal about once a second while blocks arrive (run it beside the relay; cancel it after).
        ``offload`` runs the fsync (a worker thread unless given: tests on a mock clock run it inline, since the
        clock jumps to the next timer while a thread runs)."""
        while True:
            await trio.sleep(SYNC_INTERVAL_S)
            if self._dirty:
                self._dirty = False
                await (offload or trio.to_thread.run_sync)(os.fsync, self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            except OSError:
                pass  # the records are written; only their durability across a power cut is at stake
            os.close(self._fd)
            self._fd = -1

    def remove(self) -> None:
        """The manifest is written: the journal is no longer needed."""
        self.path.unlink(missing_ok=True)
        self.close()

    # -- plumbing ---------------------------------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        written = os.write(self._fd, data)
        if written != len(data):  # a full disk: the tail is torn, and the next run cuts it off
            raise OSError(errno.ENOSPC, f"{self.path}: short write")

    async def _check_source(self, header: JournalHeader, records: dict[int, BlockRecord], source: Path | Stream,
                            available: Callable[[int, int], Awaitable[None]] | None, offload: Offload) -> None:
        fd = -1 if isinstance(source, Stream) else os.open(source, os.O_RDONLY | os.O_CLOEXEC)
        try:
            for index in sorted(records):
                record = records[index]
                if available is not None:
                    await available(record.offset, record.offset + record.length)
                digest = await offload(_hash_span, source, fd, record, header.hash_algorithm)
                if digest != record.hash:
                    what = "tree" if header.kind == "tree" else "file"
                    raise ResumeRefused(
                        f"cannot resume from {self.path}: the {what} changed since: block {index} (bytes "
                        f"{record.offset}-{record.offset + record.length - 1}) is not what was sent. Run the same "
                        "command with --restart to send it from the start (the blocks already sent are then freed)"
                    )
        finally:
            if fd >= 0:
                os.close(fd)

    async def _held(self, header: JournalHeader, dest: DepotClient, records: dict[int, BlockRecord]
                    ) -> dict[int, BlockRecord]:
        held: dict[int, BlockRecord] = {}
        gone: list[BlockRecord] = []
        limit = trio.CapacityLimiter(PARALLEL_DIGESTS)
        now = time.time()  # the allocations' expiries are Unix times

        async def ask(record: BlockRecord) -> None:
            if record.allocation.expires <= now:
                return
            async with limit:
                try:
                    digest = await dest.digest(record.allocation.read, header.hash_algorithm,
                                               length=record.length)
                except NotFound:
                    return  # expired or freed: sent again
                except DepotError:
                    gone.append(record)  # shorter than the block, or otherwise unusable: sent again
                    return
            if digest == record.hash:
                held[record.index] = record
            else:
                gone.append(record)

        async with trio.open_nursery() as nursery:
            for record in records.values():
                nursery.start_soon(ask, record)
        await self._free(dest, gone)
        return held

    async def _free_leftover(self, depots: Mapping[str, DepotClient], kept: set[str]) -> None:
        """Free the interrupted run's allocations that hold no recorded block (best effort, 16 at once)."""
        limit = trio.CapacityLimiter(PARALLEL_DIGESTS)
        by_url = {url.rstrip("/"): client for url, client in depots.items()}

        async def free(client: DepotClient, manage: str) -> None:
            async with limit:
                try:
                    await client.free(manage)
                except (DepotError, DepotUnreachable):
                    pass  # gone already, or it expires on its own

        async with trio.open_nursery() as nursery:
            for url, manage in self.leftover:
                client = by_url.get(url.rstrip("/"))
                if client is not None and manage not in kept:
                    nursery.start_soon(free, client, manage)
        self.leftover = ()

    async def _free_publication(self, dest: DepotClient, capabilities: dict[str, Any]) -> None:
        """Best effort, as ``_free``: a restarted transfer publishes afresh."""
        for key in ("document", "drained", "tree"):
            alloc = capabilities.get(key)
            if isinstance(alloc, dict) and isinstance(alloc.get("manage"), str) and capabilities.get(
                    "depot") == dest.base_url:
                try:
                    await dest.free(alloc["manage"])
                except (DepotError, DepotUnreachable):
                    pass

    async def _free(self, dest: DepotClient, records: Sequence[BlockRecord]) -> None:
        """Best effort: what is not freed expires on its own."""
        limit = trio.CapacityLimiter(PARALLEL_DIGESTS)

        async def free(record: BlockRecord) -> None:
            if record.allocation.depot != dest.base_url:
                return
            async with limit:
                try:
                    await dest.free(record.allocation.manage)
                except (DepotError, DepotUnreachable):
                    pass

        async with trio.open_nursery() as nursery:
            for record in records:
                nursery.start_soon(free, record)


def _hash_span(source: Path | Stream, fd: int, record: BlockRecord, algorithm: str) -> str:
    if isinstance(source, Stream):
        try:
            return hash_bytes(algorithm, source.read(record.offset, record.length))
        except (OSError, ValueError, TransferFailed):  # a file of the tree shrank or went: it changed
            return ""
    hasher = block_hasher(algorithm)
    end = record.offset + record.length
    for offset in range(record.offset, end, READ_CHUNK):
        data = os.pread(fd, min(READ_CHUNK, end - offset), offset)
        if not data:
            return ""  # shorter than it was
        hasher.update(data)
    return hasher.hexdigest()
