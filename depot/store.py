"""Allocations: the depot's buffers, their capabilities, capacity accounting and expiry.

The store is the depot's state and nothing else: no HTTP, no trio. Every method that depends on time takes
``now`` (Unix seconds), so that expiry is tested exactly. Buffers are memory maps: anonymous ones for ``soft``
allocations (pages are only resident once written, and unmapping returns them to the system at once) and
file-backed ones in the data directory for ``hard`` allocations, whose metadata sits beside them so that they
survive a restart.

Theory of the bounds:
- ``used`` counts every allocation whose buffer is still mapped, including a freed one still being streamed
  (``pins``), so that the depot never holds more than ``capacity``.
- Capabilities are never stored: the index and the metadata files hold their SHA-256 (``capability_key``).
- The expiry schedule holds at most about twice as many entries as there are live allocations (``_schedule``),
  however many extends and frees clients send.
- ``length`` only moves forward when a write completes (``commit_write``), so a cut-off upload never makes
  unwritten bytes readable.
- Freed soft buffers of 1 MiB or more wait in a small pool for half a second before they are unmapped: a relay
  allocates and frees blocks of one size all the time, and a buffer that is reused skips the kernel's page
  faults and zeroing (a quarter of the write path's cost, measured). Pooled bytes count against the capacity
  like live ones, so the depot's memory still never passes it; a reused buffer may hold an earlier
  allocation's bytes past ``length``, which no operation can reach.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import functools
import heapq
import json
import logging
import mmap
import os
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from lnet.protocol import (
    BadRequest,
    DepotFull,
    NotFound,
    TooLarge,
    capability_key,
    new_capability,
    redact,
)

__all__ = ["Allocation", "Capabilities", "Kind", "Reliability", "Store", "prefault"]

log = logging.getLogger("lnet.depot.store")

_META_SUFFIX = ".meta.json"
_DATA_SUFFIX = ".data"
_META_FORMAT = "lnet-depot-allocation/1"
POOL_MIN_SIZE = 1024 * 1024
POOL_IDLE_S = 0.5
_SCHEDULE_SLACK = 64  # stale expiry entries allowed beyond the live allocations before the schedule is rebuilt


class Kind(StrEnum):
    READ = "read"
    WRITE = "write"
    MANAGE = "manage"


class Reliability(StrEnum):
    SOFT = "soft"
    HARD = "hard"


@dataclass(frozen=True)
class Capabilities:
    read: str
    write: str
    manage: str

    def __repr__(self) -> str:  # capabilities are secrets: never print them whole
        return f"Capabilities(read={redact(self.read)}, write={redact(self.write)}, manage={redact(self.manage)})"


@dataclass(eq=False)
class Allocation:
    ident: str
    keys: dict[Kind, str]
    size: int
    expires: float
    reliability: Reliability
    buffer: mmap.mmap
    length: int = 0
    writing: bool = False
    pins: int = 0
    dead: bool = False
    closed: bool = False
    path: Path | None = None
    fresh: bool = False
    """A new anonymous mapping (not from the pool, not a file): its pages are not in memory yet."""
    prefaulting: Any = None
    """The depot's event (``trio.Event``) for a worker thread faulting the pages in (``prefault``), set once done."""

    def view(self, start: int, end: int) -> memoryview:
        """A window on the buffer; hold a pin (``Store.pinned``) while it is alive."""
        return memoryview(self.buffer)[start:end]


@dataclass
class Store:
    capacity: int
    max_allocation: int
    max_duration: float
    max_count: int = 1024
    data_dir: Path | None = None
    used: int = 0
    pooled: int = 0
    _closing: bool = False
    _last_now: float = 0.0  # the latest ``now`` the store was told: when a buffer entered the pool
    _pool: dict[int, list[tuple[float, mmap.mmap]]] = field(default_factory=dict)
    _by_key: dict[str, Allocation] = field(default_factory=dict)
    _live: dict[str, Allocation] = field(default_factory=dict)
    _expiry: list[tuple[float, str]] = field(default_factory=list)
    _lock_fd: int | None = None

    # -- lifecycle ------------------------------------------------------------------------------------------

    def open(self, now: float) -> int:
        """Lock the data directory and bring back the hard allocations left there; returns how many."""
        if self.data_dir is None:
            return 0
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        _private(self.data_dir)
        fd = os.open(self.data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RuntimeError(f"data directory {self.data_dir} is in use by another depot") from None
        self._lock_fd = fd
        restored = 0
        for meta_path in sorted(self.data_dir.glob("*" + _META_SUFFIX)):
            if self._restore(meta_path, now):
                restored += 1
        for tmp in self.data_dir.glob("*.tmp"):
            tmp.unlink(missing_ok=True)
        self._remove_orphans()
        if self.used > self.capacity:
            log.warning("restored allocations use %d bytes, over the capacity of %d", self.used, self.capacity)
        return restored

    def _remove_orphans(self) -> None:
        """Delete data files that no record names (a depot stopped between creating a hard allocation's file and
        writing its record, or a record dropped by hand): nothing could ever reach them, and they hold disk."""
        assert self.data_dir is not None
        for data_path in sorted(self.data_dir.glob("*" + _DATA_SUFFIX)):
            ident = data_path.name.removesuffix(_DATA_SUFFIX)
            if ident in self._live:
                continue
            try:
                size = data_path.stat().st_size
                data_path.unlink()
            except OSError as exc:
                log.warning("cannot remove orphan data file %s: %s", data_path.name[:8], exc.strerror)
                continue
            log.warning("removed orphan data file %s… (%d bytes): no allocation record names it", ident[:8], size)

    def close(self) -> None:
        """Flush and unmap everything; hard allocations stay on disk, consistent, for the next start."""
        self._closing = True
        for alloc in list(self._live.values()):
            if alloc.reliability is Reliability.HARD and not alloc.dead:
                with contextlib.suppress(ValueError, OSError):
                    alloc.buffer.flush()
                self._write_meta(alloc)
            self._unmap(alloc)
        self._empty_pool()
        self._live.clear()
        self._by_key.clear()
        self._expiry.clear()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- operations -----------------------------------------------------------------------------------------

    def allocate(
        self, size: int, duration: float, reliability: Reliability, count: int, now: float
    ) -> list[tuple[Allocation, Capabilities]]:
        """``count`` allocations of ``size`` bytes for ``duration`` seconds: all of them, or none."""
        if size > self.max_allocation:
            raise TooLarge(f"size {size} is over this depot's max_allocation of {self.max_allocation} bytes")
        if size < 1:
            raise BadRequest("size must be at least 1 byte")
        if not 1 <= duration <= self.max_duration:
            raise BadRequest(f"duration must be from 1 to {self.max_duration:g} seconds (max_duration)")
        if not 1 <= count <= self.max_count:
            raise BadRequest(f"count must be from 1 to {self.max_count}")
        total = size * count
        if total > self.capacity:
            raise TooLarge(f"{count} x {size} bytes is more than this depot's whole capacity of {self.capacity}")
        if self.used + total > self.capacity:
            raise DepotFull(f"{self.capacity - self.used} bytes free, {total} asked for")
        self._last_now = now
        self._make_room(size, count, reliability)
        made: list[tuple[Allocation, Capabilities]] = []
        try:
            for _ in range(count):
                made.append(self._create(size, now + duration, reliability))
        except BaseException:
            for alloc, _caps in made:
                self._discard(alloc)
            raise
        for alloc, _caps in made:
            self._index(alloc)
        return made

    def lookup(self, kind: Kind, token: str, now: float) -> Allocation:
        """The allocation ``token`` names for ``kind`` operations; unknown, freed, expired and wrong-kind tokens
        are all the same ``NotFound``."""
        self._last_now = now
        key = capability_key(token)
        alloc = self._by_key.get(key)
        if alloc is None or alloc.dead or alloc.expires <= now or alloc.keys[kind] != key:
            raise NotFound("no such allocation")
        return alloc

    def commit_write(self, alloc: Allocation, end: int) -> None:
        """A write that ended at ``end`` has fully landed: make it readable (and durable, for hard ones)."""
        if alloc.dead:
            raise NotFound("no such allocation")
        if end > alloc.length:
            alloc.length = end
        if alloc.reliability is Reliability.HARD:
            self._write_meta(alloc)

    def extend(self, alloc: Allocation, seconds: float, now: float) -> float:
        """Push the expiry ``seconds`` further, but never more than ``max_duration`` from now."""
        alloc.expires = max(alloc.expires, min(alloc.expires + seconds, now + self.max_duration))
        self._schedule(alloc)
        if alloc.reliability is Reliability.HARD:
            self._write_meta(alloc)
        return alloc.expires

    def free(self, alloc: Allocation) -> None:
        if alloc.dead:
            return
        alloc.dead = True
        for key in alloc.keys.values():
            self._by_key.pop(key, None)
        self._live.pop(alloc.ident, None)
        if alloc.path is not None:
            for suffix in (_META_SUFFIX, _DATA_SUFFIX):
                alloc.path.with_suffix(suffix).unlink(missing_ok=True)
        if alloc.pins == 0:
            self._unmap(alloc)

    def reap(self, now: float) -> int:
        """Free every allocation that has expired by ``now``; returns how many."""
        self._last_now = now
        reaped = 0
        while self._expiry and self._expiry[0][0] <= now:
            expires, ident = heapq.heappop(self._expiry)
            alloc = self._live.get(ident)
            if alloc is not None and alloc.expires == expires:
                self.free(alloc)
                reaped += 1
        return reaped

    def next_expiry(self) -> float | None:
        return self._expiry[0][0] if self._expiry else None

    @contextlib.contextmanager
    def pinned(self, alloc: Allocation) -> Iterator[Allocation]:
        """Keep ``alloc``'s buffer mapped while bytes stream in or out, even if it is freed meanwhile."""
        alloc.pins += 1
        try:
            yield alloc
        finally:
            alloc.pins -= 1
            if alloc.dead and alloc.pins == 0:
                self._unmap(alloc)

    @property
    def allocations(self) -> int:
        return len(self._live)

    def count_by_reliability(self) -> dict[Reliability, int]:
        counts = dict.fromkeys(Reliability, 0)
        for alloc in self._live.values():
            counts[alloc.reliability] += 1
        return counts

    # -- internals ------------------------------------------------------------------------------------------

    def _create(self, size: int, expires: float, reliability: Reliability) -> tuple[Allocation, Capabilities]:
        caps = Capabilities(new_capability(), new_capability(), new_capability())
        keys = {Kind.READ: capability_key(caps.read), Kind.WRITE: capability_key(caps.write)}
        keys[Kind.MANAGE] = capability_key(caps.manage)
        ident = secrets.token_hex(16)
        path: Path | None = None
        fresh = False
        if reliability is Reliability.HARD:
            if self.data_dir is None:
                raise BadRequest("this depot keeps no hard allocations (no data directory)")
            path = self.data_dir / ident
            try:
                buffer = _map_file(path.with_suffix(_DATA_SUFFIX), size, create=True)
            except OSError as exc:
                path.with_suffix(_DATA_SUFFIX).unlink(missing_ok=True)
                raise DepotFull(f"cannot create a hard allocation: {exc.strerror}") from None
        elif self._pool.get(size):
            _, buffer = self._pool[size].pop()
            self.pooled -= size
        else:
            try:
                buffer = _anonymous(size)
            except (OSError, OverflowError) as exc:
                raise DepotFull(f"cannot map {size} bytes: {exc}") from None
            fresh = True
        alloc = Allocation(ident, keys, size, expires, reliability, buffer, path=path, fresh=fresh)
        self.used += size
        if path is not None:
            self._write_meta(alloc)
        return alloc, caps

    def _index(self, alloc: Allocation) -> None:
        self._live[alloc.ident] = alloc
        for key in alloc.keys.values():
            self._by_key[key] = alloc
        self._schedule(alloc)

    def _schedule(self, alloc: Allocation) -> None:
        """Put ``alloc``'s expiry in the schedule. An extend or a free leaves the old entry behind (``reap`` skips
        it); when such stale entries outnumber the live allocations the schedule is rebuilt from those, so that it
        holds at most about twice the live allocations however many extends and frees clients send."""
        heapq.heappush(self._expiry, (alloc.expires, alloc.ident))
        if len(self._expiry) > 2 * len(self._live) + _SCHEDULE_SLACK:
            self._expiry = [(live.expires, live.ident) for live in self._live.values()]
            heapq.heapify(self._expiry)

    def _discard(self, alloc: Allocation) -> None:
        alloc.dead = True
        if alloc.path is not None:
            for suffix in (_META_SUFFIX, _DATA_SUFFIX):
                alloc.path.with_suffix(suffix).unlink(missing_ok=True)
        self._unmap(alloc)

    def _empty_pool(self) -> None:
        for entries in self._pool.values():
            for _, buffer in entries:
                _unmap_buffer(buffer)
        self._pool.clear()
        self.pooled = 0

    def trim_pool(self, now: float) -> None:
        """Unmap pooled buffers that waited ``POOL_IDLE_S`` unused, giving their memory back to the system."""
        for size, entries in list(self._pool.items()):
            while entries and entries[0][0] <= now - POOL_IDLE_S:
                _unmap_buffer(entries.pop(0)[1])
                self.pooled -= size
            if not entries:
                del self._pool[size]

    def next_pool_trim(self) -> float | None:
        oldest = [entries[0][0] for entries in self._pool.values() if entries]
        return min(oldest) + POOL_IDLE_S if oldest else None

    def _make_room(self, size: int, count: int, reliability: Reliability) -> None:
        """Unmap pooled buffers, oldest first, until ``count`` new ones of ``size`` fit beside what stays pooled.

        The buffers the new allocations will reuse stay (they move from pooled to used)."""
        reuse = min(count, len(self._pool.get(size, ()))) if reliability is Reliability.SOFT else 0
        excess = self.used + size * count + self.pooled - reuse * size - self.capacity
        for pooled_size in list(self._pool):
            entries = self._pool[pooled_size]
            keep = reuse if pooled_size == size else 0
            while excess > 0 and len(entries) > keep:
                _unmap_buffer(entries.pop(0)[1])
                self.pooled -= pooled_size
                excess -= pooled_size
            if not entries:
                del self._pool[pooled_size]

    def _unmap(self, alloc: Allocation) -> None:
        if alloc.closed:
            return
        alloc.closed = True
        self.used -= alloc.size
        if (
            alloc.reliability is Reliability.SOFT
            and alloc.size >= POOL_MIN_SIZE
            and not self._closing
            and self.used + self.pooled + alloc.size <= self.capacity
        ):
            self._pool.setdefault(alloc.size, []).append((self._last_now, alloc.buffer))
            self.pooled += alloc.size
            return
        _unmap_buffer(alloc.buffer)

    def _write_meta(self, alloc: Allocation) -> None:
        assert alloc.path is not None
        meta = {
            "format": _META_FORMAT,
            "keys": {str(kind): key for kind, key in alloc.keys.items()},
            "size": alloc.size,
            "length": alloc.length,
            "expires": alloc.expires,
        }
        target = alloc.path.with_suffix(_META_SUFFIX)
        tmp = alloc.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(meta, out)
        os.replace(tmp, target)

    def _restore(self, meta_path: Path, now: float) -> bool:
        ident = meta_path.name.removesuffix(_META_SUFFIX)
        path = meta_path.with_name(ident)
        data_path = path.with_suffix(_DATA_SUFFIX)
        try:
            meta: Any = json.loads(meta_path.read_text())
            if not isinstance(meta, dict) or meta.get("format") != _META_FORMAT:
                raise ValueError("not an lnet allocation record")
            keys = {Kind(kind): str(key) for kind, key in meta["keys"].items()}
            size, length, expires = int(meta["size"]), int(meta["length"]), float(meta["expires"])
            if set(keys) != set(Kind) or not 0 <= length <= size or size < 1:
                raise ValueError("inconsistent allocation record")
            if data_path.stat().st_size != size:
                raise ValueError(f"data file is {data_path.stat().st_size} bytes, record says {size}")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("dropping unreadable hard allocation %s: %s", ident[:8], exc)
            meta_path.unlink(missing_ok=True)
            data_path.unlink(missing_ok=True)
            return False
        if expires <= now:
            meta_path.unlink(missing_ok=True)
            data_path.unlink(missing_ok=True)
            return False
        buffer = _map_file(data_path, size, create=False)
        alloc = Allocation(ident, keys, size, expires, Reliability.HARD, buffer, length=length, path=path)
        self.used += size
        self._index(alloc)
        return True


def _private(directory: Path) -> None:
    """Make the data directory 0700, as its files are 0600 (``mkdir`` leaves an existing directory's mode as it
    is): the records name every allocation. Refused (``RuntimeError``) when that cannot be done."""
    mode = stat.S_IMODE(directory.stat().st_mode)
    if mode & 0o077 == 0:
        return
    try:
        directory.chmod(0o700)
    except OSError as exc:
        raise RuntimeError(
            f"data directory {directory} has mode {mode:04o} and cannot be made 0700 ({exc.strerror}): "
            "others could list the depot's allocations"
        ) from None
    log.warning("data directory %s had mode %04o; made it 0700", directory, mode)


def _anonymous(size: int) -> mmap.mmap:
    """A zeroed buffer of ``size`` bytes for a soft allocation: a private anonymous mapping. ``mmap(-1, size)`` alone
    is a shared one, i.e. shmem, whose pages cost more to fault in (docs/depot.md, the three-depot chain)."""
    private = getattr(mmap, "MAP_PRIVATE", None)
    return mmap.mmap(-1, size) if private is None else mmap.mmap(-1, size, flags=private)


_MADV_POPULATE_WRITE = 23  # Linux 5.14 and later; the mmap module of Python 3.11 does not name it


@functools.cache
def _madvise() -> Any:
    """libc's ``madvise`` through ctypes (which lets other threads run during the call), or None without one."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        madvise = libc.madvise
    except (OSError, AttributeError):
        return None
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


def prefault(buffer: mmap.mmap) -> bool:
    """Fault every page of ``buffer`` in now, writable (``madvise(MADV_POPULATE_WRITE)``), so that the writes that
    fill it later only copy. Called in a worker thread: the call goes through ctypes, which lets the event loop
    run meanwhile (``mmap.madvise`` holds the GIL for the whole call: 22 ms a 64 MiB buffer on this project's
    machine). The caller keeps the buffer mapped (``Store.pinned``). False where the system cannot (not Linux,
    a kernel before 5.14): the pages are then faulted in by the writes, as without it."""
    madvise = _madvise()
    if madvise is None:
        return False
    anchor = ctypes.c_char.from_buffer(buffer)  # holds an export: the buffer cannot be closed meanwhile
    try:
        return bool(madvise(ctypes.addressof(anchor), len(buffer), _MADV_POPULATE_WRITE) == 0)
    finally:
        del anchor


def _map_file(path: Path, size: int, *, create: bool) -> mmap.mmap:
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if create:
            try:  # claim the disk now: a full disk fails here, not in the middle of a write
                os.posix_fallocate(fd, 0, size)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                os.ftruncate(fd, size)  # a file system without fallocate: sparse, as best we can
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def _unmap_buffer(buffer: mmap.mmap) -> None:
    """Unmap ``buffer`` now, or, while a view of it is still alive somewhere (an HTTP stack may keep the last
    piece it sent; nothing writes through it once its pin is gone), when the GC collects that view."""
    try:
        buffer.close()
    except BufferError:
        log.debug("a buffer of %d bytes is unmapped later: a view of it is still alive", len(buffer))
