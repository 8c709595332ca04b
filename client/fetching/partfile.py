"""The part file every download writes before its output is complete: one ``PartFile`` for ``lnet-get MANIFEST``
(``fetching.blocks``), ``lnet-get URL ...`` (``fetching.mirrors``) and a tree's stream (``fetching.tree``).

Bytes go to ``OUT.lnet-part`` at their offsets (positional writes, never a shared file position); what is in
place is recorded in ``OUT.lnet-part.state``; the part file is preallocated to the file's size when the size is
known (a full disk shows at the start, not after hours), and renamed to ``OUT`` only when the whole file is
verified, after an fsync. While a download has it open it holds an exclusive ``flock`` on it, so that a second
``lnet-get`` on the same ``OUT`` fails at once instead of writing into the same file; the lock is held until
after the rename.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from lnet.client.fetching.part_names import part_path, state_path
from lnet.client.formats.documents import write_private_file
from lnet.client.formats.manifest import block_hasher

__all__ = [
    "HASH_CHUNK",
    "STATE_SAVE_INTERVAL_S",
    "PartFile",
    "PartFileBusy",
    "PartFileError",
    "PrefixHasher",
    "StateFile",
    "part_path",
    "preallocate",
    "state_path",
    "write_at",
    "write_behind",
]

HASH_CHUNK = 4 * 1024 * 1024
"""Bytes hashed at a time (in a worker thread) over the part file: a cancellation is heard in between."""
STATE_SAVE_INTERVAL_S = 0.5
"""The resume state is rewritten at most this often while bytes land (and always at the end, however the run
ends): a crash loses at most this much bookkeeping, never correctness, since what it lists is checked again."""


def write_at(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    """All of ``data`` at ``offset`` (``pwrite`` may write less than asked)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def preallocate(fd: int, size: int) -> None:
    """Give the part file its full size now, so a full disk shows at the start and not after hours."""
    os.ftruncate(fd, size)
    if size > 0 and hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise


class PartFileError(Exception):
    """The part file cannot be opened for writing (its message names it and says why)."""


class PartFileBusy(PartFileError):
    """Another download holds the part file: a second ``lnet-get`` on the same ``OUT``."""


class PartFile:
    """``OUT.lnet-part``, open and locked for one download. ``open`` it, write, ``commit`` (fsync and rename to
    ``OUT``), and ``close`` (also after a failure: the part file and its state stay for a resume)."""

    def __init__(self, out: Path, fd: int) -> None:
        self.out = out
        self.path = part_path(out)
        self.state_path = state_path(out)
        self.fd = fd

    @classmethod
    def open(cls, out: Path) -> PartFile:
        """Open (or create) ``out``'s part file and lock it; raises ``PartFileBusy`` when another download holds
        it, ``PartFileError`` when it cannot be written."""
        out = Path(out)
        path = part_path(out)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise PartFileError(f"cannot write {path}: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise PartFileBusy(f"another lnet-get is writing {path}") from None
        return cls(out, fd)

    def size(self) -> int:
        """Its size on disk now (a previous run's, before ``preallocate``)."""
        return os.fstat(self.fd).st_size

    def preallocate(self, size: int) -> None:
        preallocate(self.fd, size)

    def write_at(self, data: bytes | bytearray | memoryview, offset: int) -> None:
        write_at(self.fd, data, offset)

    def commit(self) -> None:
        """fsync, then rename into place as ``OUT``, still locked (so no other run can open it in between)."""
        os.fsync(self.fd)
        os.replace(self.path, self.out)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class PrefixHasher:
    """The whole file's hash, computed while the download runs: it hashes the part file's bytes from 0 up to
    ``prefix()`` (what is in place and final from the start: verified blocks, or ranges written), and goes on each
    time it is told the prefix ``advanced()``, so that at the end little is left to hash; a block still in memory
    may be ``offer``ed instead, which spares reading it back when it is next in order.

    Bytes in the prefix never change again in a run, so what it has hashed stays true. Run it with ``run()``
    alongside the download; it returns once all ``size`` bytes are hashed (cancel it to stop earlier). ``offload``
    runs the reads and hashing (worker threads unless given: tests on a mock clock run them inline); ``read``
    reads the bytes of a range (the part file's, unless given); ``on_hashed`` is told each time more is hashed."""

    def __init__(
        self, fd: int, size: int, algorithm: str, prefix: Callable[[], int], *,
        offload: Callable[..., Awaitable[Any]] | None = None, read: Callable[[int, int], bytes] | None = None,
        on_hashed: Callable[[], None] | None = None,
    ) -> None:
        self.fd = fd
        self.size = size
        self.hashed = 0  # bytes of the file hashed so far
        self._prefix = prefix
        self._offload = offload or trio.to_thread.run_sync
        self._read = read or (lambda offset, length: os.pread(self.fd, length, offset))
        self._on_hashed = on_hashed or (lambda: None)
        self._hasher = block_hasher(algorithm)
        self._wake = trio.Event()
        self._lock = trio.Lock()

    def advanced(self) -> None:
        self._wake.set()

    async def offer(self, offset: int, view: memoryview) -> None:
        """A verified block's bytes, still in memory: hashed from there if they are next in the file."""
        if offset != self.hashed or self._lock.locked():
            return
        async with self._lock:
            if offset == self.hashed:
                await self._offload(self._hasher.update, view)
                self.hashed += len(view)
                self._on_hashed()

    async def run(self) -> None:
        while True:
            end = min(self._prefix(), self.size)
            while self.hashed < end:  # chunk by chunk, so that a cancellation (Ctrl-C) is heard in between
                async with self._lock:
                    length = min(HASH_CHUNK, end - self.hashed)
                    if length > 0:
                        await self._offload(self._hash_chunk, self.hashed, length)
                        self.hashed += length
                        self._on_hashed()
            if self.hashed >= self.size:
                return
            await self._wake.wait()
            self._wake = trio.Event()

    def hexdigest(self) -> str:
        if self.hashed != self.size:
            raise RuntimeError(f"only {self.hashed} of {self.size} bytes are hashed")
        return str(self._hasher.hexdigest())

    def _hash_chunk(self, offset: int, length: int) -> None:
        data = self._read(offset, length)
        if len(data) != length:
            raise OSError(errno.EIO, f"the part file ended at {offset + len(data)}, before {offset + length}")
        self._hasher.update(data)
        write_behind(self.fd, offset, length)


def whole_file_is(path: Path, size: int, algorithm: str, expected: str) -> bool:
    """Whether ``path`` holds ``size`` bytes whose hash is ``expected`` (an earlier run's finished file: checked
    again all the same, since anything may have touched it since). Unreadable: no."""
    try:
        if not path.is_file() or path.stat().st_size != size:
            return False
        hasher = block_hasher(algorithm)
        with path.open("rb") as f:
            while chunk := f.read(HASH_CHUNK):
                hasher.update(chunk)
    except OSError:
        return False
    return hasher.hexdigest() == expected


def write_behind(fd: int, offset: int, length: int) -> None:
    """Start writing ``[offset, offset + length)`` of the part file to disk now, without waiting for it: those
    bytes are final (hashed), and ``commit``'s fsync then finds little left to write, where it would otherwise
    write the whole file at the end (the kernel keeps gigabytes dirty before it writes them back of its own
    accord). ``POSIX_FADV_DONTNEED`` starts the writeback of the range's dirty pages and lets the kernel drop
    those already written; a system without it only has a longer fsync."""
    if hasattr(os, "posix_fadvise"):
        try:
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass


class StateFile:
    """``OUT.lnet-part.state``: what of the part file is in place, so that the same command resumes.

    ``document()`` says it (each download its own format); it is rewritten atomically (0600) when ``changed`` at
    most every ``STATE_SAVE_INTERVAL_S``, and always by ``save`` at the end, however the run ends. ``read`` gives
    what a previous run left (None when there is nothing readable: a state is ignored rather than refused, the
    worst that costs is fetching again)."""

    def __init__(self, path: Path, document: Callable[[], object]) -> None:
        self.path = path
        self._document = document
        self._dirty = True
        self._saved_at = float("-inf")

    def read(self) -> Any:
        try:
            return json.loads(self.path.read_bytes())
        except (OSError, ValueError, RecursionError):
            return None

    def changed(self, now: float | None) -> None:
        """What ``document()`` says has changed; saved now if the last save is old enough (None: not now)."""
        self._dirty = True
        if now is not None and now - self._saved_at >= STATE_SAVE_INTERVAL_S:
            self.save(now)

    def save(self, now: float) -> None:
        if self._dirty:
            write_private_file(self.path, (json.dumps(self._document()) + "\n").encode())
            self._dirty = False
            self._saved_at = now

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        self._dirty = False
