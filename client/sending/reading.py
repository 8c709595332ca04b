"""The source's bytes as the relay reads them: block buffers used again and again (``ReadBuffers``, each lent
as a ``Lease``), and the whole-file hash fed the bytes each block was read with (``WholeHash``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Container, Sequence
from typing import Any

import trio

from lnet.client.formats.manifest import block_hasher

__all__ = ["Lease", "Offload", "ReadBuffers", "WholeHash"]

Offload = Callable[..., Awaitable[Any]]
"""Runs a function off the event loop (``trio.to_thread.run_sync``, or inline in tests)."""


class Lease:
    """A block's read buffer while someone uses it: the write that sends it, the whole-file hash that keeps it.
    Back to its pool when the last user is done; a view of it must not be used after that."""

    def __init__(self, pool: ReadBuffers, buffer: bytearray) -> None:
        self._pool, self.buffer, self._users = pool, buffer, 1

    def hold(self) -> None:
        self._users += 1

    def done(self) -> None:
        self._users -= 1
        if self._users == 0:
            self._pool.put(self.buffer)


class ReadBuffers:
    """Block buffers that the file's blocks are read into, used again and again: a fresh ``bytes`` of a block's
    size per block cost lnet-send the kernel's page faults and zeroing of every page (``os.pread`` was a sixth
    of its samples in the chain; docs/depot.md). At most ``keep`` idle buffers are kept."""

    def __init__(self, size: int, keep: int) -> None:
        self.size, self.keep = size, keep
        self._idle: list[bytearray] = []

    def take(self) -> Lease:
        return Lease(self, self._idle.pop() if self._idle else bytearray(self.size))

    def put(self, buffer: bytearray) -> None:
        if len(self._idle) < self.keep:
            self._idle.append(buffer)


class WholeHash:
    """The whole-file hash, fed the bytes each block was read with for sending: one read of every byte and two
    hash updates (the block's, this one), instead of a second pass over the file.

    It hashes in file order; blocks are read nearly in order but not exactly (several at once, in worker
    threads), so a block read ahead of the hash's position is kept here until the hash gets to it, up to
    ``ahead_bytes`` (the block the hash waits for is always kept). A block beyond that, or one this run does
    not send (``skipped``: delivered by an earlier run), the hash reads again itself when it gets to it. A block
    read again after a failure is not offered twice: its bytes were checked against the first read's hash."""

    def __init__(self, algorithm: str, spans: Sequence[tuple[int, int]], ahead_bytes: int) -> None:
        self._hasher = block_hasher(algorithm)
        self._spans = spans
        self._ahead = ahead_bytes
        self._kept: dict[int, tuple[bytes | memoryview, Lease | None]] = {}
        self._kept_bytes = 0
        self._offered: set[int] = set()
        self._next = 0
        self._wake = trio.Event()
        self.reread = 0
        """Blocks the hash read itself (not kept, or not sent)."""

    def offer(self, index: int, data: bytes | memoryview, lease: Lease | None = None) -> None:
        """Block ``index`` was read for sending: these are its bytes (in ``lease``'s buffer, which is held while
        they are kept)."""
        if index < self._next or index in self._offered:
            return
        self._offered.add(index)
        if index == self._next or self._kept_bytes + len(data) <= self._ahead:
            if lease is not None:
                lease.hold()
            self._kept[index] = (data, lease)
            self._kept_bytes += len(data)
        if index == self._next:
            self._wake.set()

    async def run(
        self, skipped: Container[int], read: Callable[[int, int], bytes], offload: Offload,
        available: Callable[[int, int], Awaitable[None]] | None,
    ) -> str:
        """The hex digest, once every block was offered or read here (``read`` runs through ``offload``)."""
        for index, (offset, length) in enumerate(self._spans):
            self._next = index
            while index not in self._offered and index not in skipped:
                self._wake = trio.Event()
                await self._wake.wait()
            kept = self._kept.pop(index, None)
            if kept is None:
                self.reread += 1
                if available is not None:
                    await available(offset, offset + length)
                await offload(self._hasher.update, await offload(read, offset, length))
            else:
                data, lease = kept
                self._kept_bytes -= len(data)
                try:
                    await offload(self._hasher.update, data)
                finally:
                    if lease is not None:
                        lease.done()
            self._offered.discard(index)
        return str(self._hasher.hexdigest())
