"""One file from several replicas at once: ``lnet-get URL URL ... -o OUT`` (the MDTP paper).

The I/O shell around ``ChunkPlanner``. Every replica gets one persistent connection (``RangeConnection``) on which
the planner's range requests are pipelined, so that each replica's pipe stays full between chunks.

1. **No idle start**: every replica's connection opens at once, and its first request is already a data range
   (the planner's first ranges, at offsets of their own, sent before the file's length is known). The first
   answer to arrive gives the length (``Content-Range``) and the validators (``ETag``, ``Last-Modified``): it
   fixes the reference, the part file gets its size and the planner lays out the rest while the first ranges
   still stream. Every later answer is checked against the reference before any of its bytes are written; a
   replica serving another file is refused with the difference named, and its range goes back to the planner.
   Should more replicas agree on another file than on the reference (the first answer came from a stale
   mirror), or every replica serving the reference be gone, the download starts over with the file the others
   serve (at most twice; never under a ``Watcher``, whose reader may have used the bytes). A resumed download
   starts from the validators in its state file instead, which answers must match in the same way. A replica
   that does not answer is retried after a back-off; when none has answered and each has failed once, the
   download fails at once.
2. **Download**: bytes stream from each response straight to their offset in ``OUT.lnet-part``, never further
   than the planner's current end for the request (a tail split or a hedge may have moved it). Every response is
   checked (status, ``Content-Range``, validators) before any of its bytes are written.
3. **Finish**: the SHA-256 of the file, computed over the growing prefix while the download runs, is checked
   against ``--sha256`` if given; then the part file is renamed to ``OUT``. ``OUT.lnet-part.state`` records the
   byte ranges in place, so the same command resumes an interrupted download with what it already has.

``--trace FILE`` (``trace=``) writes every range request, once it is over, as one JSON object a line: the
replica, the range, when it was sent, its first and last byte (seconds from the download's start) and how it
ended (``RequestRecord``). A first line names the replicas (redacted) and the plan. The report's per-replica
``first_byte_s`` and ``last_byte_s`` show how close to each other the replicas finished.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import trio

from lnet.client.engines.chunks import ChunkPlanner, Drop, Fetch, PlanConfig, ReplicaStats, RequestRecord
from lnet.client.exits import ExitCode, Failure
from lnet.client.fetching.partfile import (
    PartFile,
    PartFileBusy,
    PartFileError,
    PrefixHasher,
    StateFile,
    part_path,
    state_path,
)
from lnet.client.formats.documents import write_private_file
from lnet.client.wire.range_connection import (
    ConnectionEnded,
    Connector,
    Head,
    RangeConnection,
    ReplicaError,
    ReplicaRefused,
    redact_url,
)

if TYPE_CHECKING:
    from lnet.client.wire.predial import Early, Predial

__all__ = [
    "MirrorError",
    "MirrorResult",
    "ReplicaOptions",
    "ReplicaReport",
    "Validators",
    "Watcher",
    "fetch_mirrors",
    "part_path",
    "reference",
    "state_path",
]

STATE_FORMAT = "lnet-mirrors-state/1"
HISTORY_FORMAT = "lnet-replica-history/1"
CHANNEL_SIZE = 64  # Fetch decisions waiting for a replica's sender: the planner keeps far fewer outstanding
RETRY_STATUSES = {408, 425, 429, 500, 502, 503, 504}
MAX_ATTEMPTS = 3  # a download starts over at most twice (the replicas outvoted its reference)


@dataclass(frozen=True)
class ReplicaOptions:
    """How to fetch from replicas, as ``fetch_mirrors`` takes it (for a caller that passes it on)."""

    config: PlanConfig
    timeout_s: float = 30.0
    sha256: str | None = None
    check_validators: bool = True
    history: Path | None = None


class MirrorError(Failure):
    def __init__(self, message: str, exit_code: ExitCode = ExitCode.FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class Validators:
    """What identifies the file a replica serves."""

    length: int
    etag: str | None
    last_modified: str | None

    def differs(self, other: Validators, check_validators: bool) -> str | None:
        """Why ``self`` is not the same file as ``other`` (None: it may be)."""
        if self.length != other.length:
            return f"its file has {self.length} bytes, the others' {other.length}"
        if not check_validators:
            return None
        if self.etag is not None and other.etag is not None and self.etag != other.etag:
            return f"its ETag is {self.etag}, the others' {other.etag}"
        if self.last_modified is not None and other.last_modified is not None and (
                self.last_modified != other.last_modified):
            return f"its Last-Modified is {self.last_modified}, the others' {other.last_modified}"
        return None


def reference(found: Sequence[Validators | None], check_validators: bool = True) -> Validators | None:
    """The validators most replicas agree on (ties: the group of the earliest replica); None if none answered."""
    best: tuple[int, int] | None = None
    chosen = None
    for i, candidate in enumerate(found):
        if candidate is None:
            continue
        agree = sum(1 for other in found if other is not None and candidate.differs(other, check_validators) is None)
        if best is None or agree > best[0]:
            best, chosen = (agree, i), candidate
    return chosen


@dataclass
class ReplicaReport:
    url: str  # redacted: a depot's read URL holds a capability
    bytes: int
    requests: int
    chunks: list[int]
    mbps: float
    share: float
    state: str
    reason: str
    first_byte_s: float | None = None  # seconds from the download's start
    last_byte_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        chunks = sorted(self.chunks)
        return {
            "url": self.url,
            "bytes": self.bytes,
            "requests": self.requests,
            "chunk_min": chunks[0] if chunks else 0,
            "chunk_median": chunks[len(chunks) // 2] if chunks else 0,
            "chunk_max": chunks[-1] if chunks else 0,
            "chunks": self.chunks,
            "mbps": round(self.mbps, 3),
            "share": round(self.share, 4),
            "state": self.state,
            "reason": self.reason,
            "first_byte_s": _rounded(self.first_byte_s),
            "last_byte_s": _rounded(self.last_byte_s),
        }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


class _Trace:
    """``--trace``: every request once it is over, one JSON object a line, times from the download's start."""

    def __init__(self, path: Path, started: float) -> None:
        try:
            self._file = path.open("w", encoding="utf-8")
        except OSError as exc:
            raise MirrorError(f"cannot write the trace {path}: {exc.strerror or exc}", ExitCode.USAGE) from None
        self._started = started

    def write(self, document: dict[str, Any]) -> None:
        self._file.write(json.dumps(document, separators=(",", ":")) + "\n")

    def requests(self, records: list[RequestRecord]) -> None:
        if not records:
            return
        for r in records:
            self.write({
                "event": "request", "request": r.request, "replica": r.replica, "start": r.start, "end": r.end,
                "received": r.received, "issued_s": self._at(r.issued), "first_byte_s": self._at(r.first_byte),
                "last_byte_s": self._at(r.last_byte), "hedge": r.hedge, "outcome": r.outcome,
            })
        self._file.flush()

    def _at(self, when: float | None) -> float | None:
        return None if when is None else round(when - self._started, 4)

    def close(self) -> None:
        self._file.close()


@dataclass
class MirrorResult:
    path: Path
    size: int
    seconds: float
    strategy: str
    tail: str
    sha256: str
    resumed_bytes: int
    replicas: list[ReplicaReport]

    @property
    def mbps(self) -> float:
        fetched = self.size - self.resumed_bytes
        return fetched * 8 / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": True,
            "path": str(self.path),
            "size": self.size,
            "seconds": round(self.seconds, 3),
            "mbps": round(self.mbps, 3),
            "strategy": self.strategy,
            "tail": self.tail,
            "sha256": self.sha256,
            "resumed_bytes": self.resumed_bytes,
            "replicas": [r.to_dict() for r in self.replicas],
        }


def _origin(url: str) -> str:
    """What the history remembers a replica by: scheme, host and port (never the path: it may hold a secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def load_history(path: Path | None, urls: Sequence[str]) -> list[float | None]:
    if path is None:
        return [None] * len(urls)
    try:
        document = json.loads(path.read_text())
        rates = document["rates"] if document.get("format") == HISTORY_FORMAT else {}
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        rates = {}
    out: list[float | None] = []
    for url in urls:
        value = rates.get(_origin(url)) if isinstance(rates, dict) else None
        out.append(float(value) if isinstance(value, int | float) and value > 0 else None)
    return out


def save_history(path: Path | None, urls: Sequence[str], stats: Sequence[ReplicaStats]) -> None:
    """Remember each replica's rate (bytes/s), smoothed with what was known, for the ``history`` strategy."""
    if path is None:
        return
    try:
        document = json.loads(path.read_text())
        rates = dict(document["rates"]) if document.get("format") == HISTORY_FORMAT else {}
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        rates = {}
    for url, stat in zip(urls, stats, strict=True):
        if stat.rate > 0:
            old = rates.get(_origin(url))
            rates[_origin(url)] = stat.rate if not isinstance(old, int | float) else 0.5 * old + 0.5 * stat.rate
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private_file(path, (json.dumps({"format": HISTORY_FORMAT, "rates": rates}, indent=1) + "\n").encode())


class _Have:
    """The byte ranges in place in the part file, merged."""

    def __init__(self, spans: Sequence[tuple[int, int]] = ()) -> None:
        self.spans: list[list[int]] = []
        for a, b in sorted(spans):
            self.add(a, b)

    def add(self, start: int, end: int) -> None:
        if start >= end:
            return
        spans = self.spans
        if spans and spans[-1][0] <= start <= spans[-1][1]:  # the common case: right after the latest
            spans[-1][1] = max(spans[-1][1], end)
            return
        spans.append([start, end])
        spans.sort()
        merged: list[list[int]] = []
        for a, b in spans:
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.spans = merged

    @property
    def prefix(self) -> int:
        return self.spans[0][1] if self.spans and self.spans[0][0] == 0 else 0

    @property
    def total(self) -> int:
        return sum(b - a for a, b in self.spans)


class Watcher:
    """Lets another task use the file while it arrives (``lnet-send --source``: replicas feed the relay).

    ``started`` is set once the length is known and the part file ``path`` has its full size; ``wait_for(a, b)``
    returns once bytes ``[a, b)`` are in it. The part file is renamed to its final name only after ``release()``,
    so a reader that opened it by name never misses it."""

    def __init__(self) -> None:
        self.size = 0
        self.path = Path()
        self.started = trio.Event()
        self._have: _Have | None = None
        self._changed = trio.Event()
        self._released = trio.Event()

    def release(self) -> None:
        self._released.set()

    async def wait_for(self, start: int, end: int) -> None:
        await self.started.wait()
        while not self._covers(start, end):
            changed = self._changed
            await changed.wait()
            if self._changed is changed:
                self._changed = trio.Event()

    def _covers(self, start: int, end: int) -> bool:
        if start >= end:
            return True
        assert self._have is not None
        return any(a <= start and end <= b for a, b in self._have.spans)

    def _start(self, size: int, path: Path, have: _Have) -> None:
        self.size, self.path, self._have = size, path, have
        self.started.set()

    def _added(self) -> None:
        self._changed.set()


@dataclass
class _ReplicaWorker:
    """One replica's I/O side: its URL and the channel of the planner's requests for it (the planner's own view
    of the replica is ``chunks.ReplicaStats``)."""

    index: int
    url: str
    shown: str
    send: trio.MemorySendChannel[Fetch]
    receive: trio.MemoryReceiveChannel[Fetch]
    connect: Connector | None = None  # None: TCP (tests: an emulated network)
    refused: bool = False
    scope: trio.CancelScope | None = None


class _Close(Exception):  # noqa: N818 - a signal, not an error
    """Close this connection on purpose (a request was stopped short or voided); go on with a new one."""


@dataclass
class _Download:
    """One attempt at the download: the planner, the replicas' workers, and the reference file once known."""

    planner: ChunkPlanner
    replicas: list[_ReplicaWorker]
    part: PartFile
    timeout_s: float
    check_validators: bool
    on_progress: Callable[[int, int], None]
    have: _Have
    on_reference: Callable[[Validators], None]  # the length is known: room for the file, hashing, progress
    reference: Validators | None = None
    preset: bool = False  # the reference is a resumed state's or an earlier attempt's, not a first answer's
    may_restart: bool = True
    on_write: Callable[[], None] = lambda: None
    trace: _Trace | None = None
    early: Predial | None = None  # connections dialled before the event loop ran: each replica's first takes its own
    agreeing: set[int] = field(default_factory=set)  # replicas that answered with the reference file
    disagreeing: dict[int, Validators] = field(default_factory=dict)  # refused: the file each serves instead
    restart: Validators | None = None  # start over with this file (more replicas serve it than the reference)
    failure: MirrorError | None = None  # the download cannot finish: raised once the workers are stopped
    wake: trio.Event = field(default_factory=trio.Event)

    def kick(self) -> None:
        self.wake.set()

    # -- one replica: its connection, pipelined requests and their responses ----------------------------------

    async def worker(self, rep: _ReplicaWorker) -> None:
        pending: deque[Fetch] = deque()  # sent (or to send again) on the current connection, in order
        while True:
            pending = deque(f for f in pending if self.planner.limit(f.request) is not None)
            if not pending:
                fetch = await rep.receive.receive()
                if self.planner.limit(fetch.request) is None:
                    continue
                pending.append(fetch)
            conn: RangeConnection | None = None
            try:
                with trio.CancelScope() as rep.scope:
                    conn = RangeConnection(rep.url, self.timeout_s, connect=rep.connect)
                    early = await self._early(rep, pending[0])
                    await (conn.open(early.stream, early.sent) if early is not None else conn.open())
                    on_wire, answering = trio.open_memory_channel[Fetch](CHANNEL_SIZE)
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._sender, rep, conn, pending, on_wire)
                        await self._receiver(rep, conn, pending, answering)
                        nursery.cancel_scope.cancel()
            except* (_Close, ConnectionEnded):
                pass  # on purpose, or the server's keep-alive ended: a new connection for what is left
            except* ReplicaRefused as group:
                self.planner.refuse(rep.index, str(group.exceptions[0]))
                rep.refused = True
                self.kick()
            except* ReplicaError as group:
                self.planner.failed(rep.index, trio.current_time(), str(group.exceptions[0]))
                self.kick()
            finally:
                rep.scope = None
                if conn is not None:
                    await conn.aclose()
            if rep.refused:
                return

    async def _early(self, rep: _ReplicaWorker, first: Fetch) -> Early | None:
        """The connection ``predial`` opened to this replica, the first time it is asked: taken if the range it asked
        for already is this connection's first request (else closed: that answer is not wanted)."""
        early = await self.early.take(rep.url, self.timeout_s) if self.early is not None else None
        if early is None:
            return None
        if early.sent is None:  # HTTPS: the first request waits for TLS; the TCP handshake was a round trip
            self.planner.round_trip(rep.index, early.handshake_s)
            return early
        if early.sent != (first.start, first.end):
            await trio.aclose_forcefully(early.stream)
            return None
        # its first byte measures no round trip, and its bytes began to flow long before the loop read them
        self.planner.sent_early(first.request, early.handshake_s, early.sent_at)
        return early

    async def _sender(
        self, rep: _ReplicaWorker, conn: RangeConnection, pending: deque[Fetch], on_wire: trio.MemorySendChannel[Fetch],
    ) -> None:
        """Write each request as soon as it is decided; the receiver reads the answers in the same order."""
        for fetch in list(pending):  # what a connection closed on purpose left unanswered: again, on this one
            await conn.send(fetch.start, fetch.end)
            await on_wire.send(fetch)
        async for fetch in rep.receive:
            if self.planner.limit(fetch.request) is None:
                continue
            pending.append(fetch)
            await conn.send(fetch.start, fetch.end)
            await on_wire.send(fetch)

    async def _receiver(
        self, rep: _ReplicaWorker, conn: RangeConnection, pending: deque[Fetch],
        answering: trio.MemoryReceiveChannel[Fetch],
    ) -> None:
        async for fetch in answering:
            if self.planner.limit(fetch.request) is None and not self._past_end(fetch):
                raise _Close  # voided while queued: its response is not wanted, nor any after it
            head = await conn.head()
            end = self._check(rep, fetch, head)
            if end is None:
                await conn.skip_body()  # a first range past the file's end: a 416, nothing to write
            else:
                await self._stream_body(fetch.replica, conn, fetch, end)
            pending.popleft()
            if not conn.reusable or not head.keep_alive:
                raise ConnectionEnded("the replica ends the connection")

    def _past_end(self, fetch: Fetch) -> bool:
        return self.reference is not None and fetch.start >= self.reference.length

    def _check(self, rep: _ReplicaWorker, fetch: Fetch, head: Head) -> int | None:
        """Refuse, or count as a failure, a response that is not the bytes asked for of the reference file (the
        first answer of all fixes it). Returns where the response's bytes end; None for a first range that lay
        past the file's end (its answer, a 416, has nothing to write)."""
        if head.status in RETRY_STATUSES:
            raise ReplicaError(f"HTTP {head.status}")
        if head.status == 200:
            raise ReplicaRefused("it does not honour Range requests (HTTP 200)")
        if head.status not in (206, 416):
            raise ReplicaRefused(f"HTTP {head.status}")
        if head.total is None:
            raise ReplicaError("its answer gives no file length (Content-Range)")
        ref = self._agree(rep, Validators(head.total, head.etag, head.last_modified))
        end = min(fetch.end, ref.length)
        if head.status == 416:
            if fetch.start < ref.length:
                raise ReplicaRefused(f"it has fewer bytes than the {ref.length} it says (HTTP 416)")
            return None
        if (head.start, head.end) != (fetch.start, end):
            raise ReplicaError(f"asked for bytes {fetch.start}-{end - 1}, got {head.start}-{head.end}")
        return end

    def _agree(self, rep: _ReplicaWorker, found: Validators) -> Validators:
        """The reference file, which ``found`` (what a replica's answer says of its file) fixes if none has yet;
        a replica serving another file is refused, before any of its bytes is written."""
        if self.reference is None:
            self.reference = found
            self.agreeing.add(rep.index)
            self.planner.sized(found.length)
            try:
                self.on_reference(found)
            except OSError as exc:
                self.failure = MirrorError(f"cannot write {self.part.path}: {exc.strerror or exc}")
                self.kick()
                raise _Close from None
            self.kick()
            return found
        why = found.differs(self.reference, self.check_validators)
        if why is None:
            self.agreeing.add(rep.index)
            ref = self.reference
            named = Validators(ref.length, ref.etag or found.etag, ref.last_modified or found.last_modified)
            if named != ref:  # the first answer named no ETag or Last-Modified (a 416 may not): this one does
                self.reference = named
            return self.reference
        self.disagreeing[rep.index] = found
        alike = sum(1 for other in self.disagreeing.values() if other.differs(found, self.check_validators) is None)
        if self.may_restart and alike > len(self.agreeing) + self.preset:
            self.restart = found  # the reference came from a stale replica (or state): start over with this file
            self.kick()
        raise ReplicaRefused(why)

    async def _stream_body(self, replica: int, conn: RangeConnection, fetch: Fetch, end: int) -> None:
        pos = fetch.start
        while (data := await conn.next_chunk()) is not None:
            limit = self.planner.limit(fetch.request)
            if limit is None:
                raise _Close  # stopped where it was (a hedge lost) or voided
            n = min(len(data), limit - pos)
            if n > 0:
                self.part.write_at(memoryview(data)[:n], pos)
                self.have.add(pos, pos + n)
                self.planner.received(fetch.request, n, trio.current_time())
                self.on_progress(replica, n)
                self.on_write()
                pos += n
                self.kick()
            if pos >= limit and pos < end:
                raise _Close  # stopped short: the rest of this response is someone else's

    # -- the driver ---------------------------------------------------------------------------------------

    async def drive(self) -> Validators | None:
        """Run the planner until the download is done (None), must start over with other validators (them), or
        cannot finish (None, with ``failure`` set)."""
        while True:
            if self.failure is not None:
                return None
            if self.restart is not None:
                return self.restart
            decisions = self.planner.poll(trio.current_time())
            self.flush_trace()
            for decision in decisions:
                if isinstance(decision, Fetch):
                    self.replicas[decision.replica].send.send_nowait(decision)
                elif isinstance(decision, Drop):
                    scope = self.replicas[decision.replica].scope
                    if scope is not None:
                        scope.cancel()
            if self.planner.done:
                return None
            stats = self.planner.stats()
            if not self.agreeing and not self.disagreeing and all(
                    stat.failures or stat.state == "refused" for stat in stats):
                self.failure = MirrorError(f"no replica answered with the file ({self._reasons()})",
                                           ExitCode.UNREACHABLE)
                return None
            if self.planner.stuck:
                if self.disagreeing and self.may_restart:  # every replica that serves the reference is gone
                    chosen = reference(list(self.disagreeing.values()), self.check_validators)
                    assert chosen is not None  # the largest group of those that serve another file
                    return chosen
                self.failure = MirrorError(f"no replica can finish the download ({self._reasons()})",
                                           ExitCode.UNREACHABLE)
                return None
            wakeup = self.planner.next_wakeup()
            with trio.move_on_at(wakeup if wakeup is not None else math.inf):
                await self.wake.wait()
            self.wake = trio.Event()

    def flush_trace(self) -> None:
        if self.trace is not None:
            self.trace.requests(self.planner.take_records())

    def _reasons(self) -> str:
        return "; ".join(f"{rep.shown}: {stat.state}, {stat.reason or 'no reason'}"
                         for rep, stat in zip(self.replicas, self.planner.stats(), strict=True))


def _resumable(document: object, part_size: int) -> tuple[Validators | None, list[tuple[int, int]]]:
    """What a previous run left in place, from its state ``document``: the file's validators and the byte ranges
    (``(None, [])`` when there is nothing to resume: no state, another format, a part file of another size)."""
    if not isinstance(document, dict) or document.get("format") != STATE_FORMAT:
        return None, []
    size, etag, modified = document.get("size"), document.get("etag"), document.get("last_modified")
    if not isinstance(size, int) or isinstance(size, bool) or size <= 0 or size != part_size:
        return None, []
    if not all(value is None or isinstance(value, str) for value in (etag, modified)):
        return None, []
    listed = document.get("have")
    spans = []
    for item in listed if isinstance(listed, list) else []:
        if (isinstance(item, list) and len(item) == 2 and all(isinstance(v, int) for v in item)
                and 0 <= item[0] < item[1] <= size):
            spans.append((item[0], item[1]))
    if not spans:
        return None, []
    return Validators(size, etag, modified), spans


def _state_document(ref: Validators, have: _Have) -> dict[str, object]:
    return {"format": STATE_FORMAT, "size": ref.length, "etag": ref.etag, "last_modified": ref.last_modified,
            "have": have.spans}


@dataclass(frozen=True)
class _Job:
    """What ``fetch_mirrors`` was asked for, as each attempt needs it."""

    urls: list[str]
    out: Path
    config: PlanConfig
    timeout_s: float
    sha256: str | None
    check_validators: bool
    history: Path | None
    trace: _Trace | None
    on_start: Callable[[int, list[str]], None]
    on_progress: Callable[[int, int], None]
    watcher: Watcher | None
    connect: Connector | None
    started: float
    early: Predial | None = None


async def fetch_mirrors(
    urls: Sequence[str],
    out: Path,
    *,
    config: PlanConfig | None = None,
    timeout_s: float = 30.0,
    sha256: str | None = None,
    check_validators: bool = True,
    history: Path | None = None,
    trace: Path | None = None,
    on_start: Callable[[int, list[str]], None] = lambda size, urls: None,
    on_progress: Callable[[int, int], None] = lambda replica, nbytes: None,
    watcher: Watcher | None = None,
    connect: Connector | None = None,
    early: Predial | None = None,
) -> MirrorResult:
    """Download one file from ``urls`` (replicas of it) into ``out``; see the module's docstring. ``connect`` opens
    the byte stream to a replica (None: TCP; tests pass an emulated network); ``trace``: where to write every
    request once it is over (the module's docstring); ``early``: connections dialled, and first ranges asked
    for, before the event loop ran (``wire.predial``): each replica's first connection takes its own."""
    if not urls:
        raise MirrorError("no replica URL given", ExitCode.USAGE)
    if len(set(urls)) != len(urls):
        raise MirrorError("a replica URL is given twice", ExitCode.USAGE)
    fresh = not part_path(out).exists()
    try:
        part = PartFile.open(out)
    except PartFileBusy as exc:
        raise MirrorError(str(exc), ExitCode.USAGE) from None
    except PartFileError as exc:
        raise MirrorError(str(exc)) from None
    finished, tracer = False, None
    try:
        started = trio.current_time()
        tracer = None if trace is None else _Trace(trace, started)
        job = _Job(list(urls), out, config or PlanConfig(), timeout_s, sha256, check_validators, history, tracer,
                   on_start, on_progress, watcher, connect, started, early)
        if tracer is not None:
            tracer.write({"event": "download", "replicas": [redact_url(url) for url in job.urls],
                          "strategy": job.config.strategy, "tail": job.config.tail, "depth": job.config.depth})
        known, resumed = _resumable(StateFile(part.state_path, lambda: None).read(), part.size())
        preset, attempts = known is not None, 1
        while True:
            outcome = await _attempt(job, part, known, resumed, preset, may_restart=attempts < MAX_ATTEMPTS)
            if isinstance(outcome, MirrorResult):
                finished = True
                part.state_path.unlink(missing_ok=True)
                return outcome
            known, resumed, preset, attempts = outcome, [], True, attempts + 1  # outvoted: start over with theirs
    finally:
        if not finished and fresh and part.size() == 0:
            part.path.unlink(missing_ok=True)  # no replica answered: leave no empty part file behind
        part.close()
        if tracer is not None:
            tracer.close()


async def _attempt(
    job: _Job, part: PartFile, known: Validators | None, resumed: list[tuple[int, int]], preset: bool,
    may_restart: bool,
) -> MirrorResult | Validators:
    """One go at the download into ``part``: its result, or the validators to start over with. ``known``: the
    file's validators when a state file or an earlier attempt gave them (else the first answer does)."""
    replicas = []
    for i, url in enumerate(job.urls):
        send, receive = trio.open_memory_channel[Fetch](CHANNEL_SIZE)
        replicas.append(_ReplicaWorker(i, url, redact_url(url), send, receive, job.connect))
    planner = ChunkPlanner(known.length if known is not None else None, len(replicas), job.config,
                           history=load_history(job.history, job.urls), have=resumed, record=job.trace is not None)
    trace = job.trace
    have = _Have(resumed)
    resumed_bytes = have.total
    hashers: list[PrefixHasher] = []
    sized = trio.Event()

    def begin(ref: Validators) -> None:
        """The file's length is known: room for it in the part file, then hashing and progress can start."""
        part.preallocate(ref.length)
        job.on_start(ref.length, [rep.shown for rep in replicas])
        hashers.append(PrefixHasher(part.fd, ref.length, "sha256", lambda: have.prefix))
        if job.watcher is not None:
            job.watcher._start(ref.length, part.path, have)
        sized.set()

    async def hash_alongside() -> None:  # the whole file's hash over the growing prefix, once it is sized
        await sized.wait()
        await hashers[0].run()

    def document() -> dict[str, object]:
        assert run.reference is not None  # nothing is written, so nothing saved, before the reference is known
        return _state_document(run.reference, have)

    state = StateFile(part.state_path, document)

    def written() -> None:
        if hashers:
            hashers[0].advanced()
        state.changed(trio.current_time())
        if job.watcher is not None:
            job.watcher._added()

    # with a watcher, a relay may already be sending what arrived: never start over under it
    run = _Download(planner, replicas, part, job.timeout_s, job.check_validators, job.on_progress, have, begin,
                    reference=known, preset=preset, may_restart=may_restart and job.watcher is None,
                    on_write=written, trace=trace, early=job.early)
    if trace is not None:  # an attempt (the replicas may outvote the first answer's file: a second one)
        trace.write({"event": "attempt", "size": known.length if known is not None else None,
                     "resumed_bytes": have.total})
    if known is not None:
        begin(known)
    outcome: Validators | None = None
    try:
        async with trio.open_nursery() as hashing:
            hashing.start_soon(hash_alongside)  # ends once it has hashed the whole file
            async with trio.open_nursery() as nursery:
                for rep in replicas:
                    nursery.start_soon(run.worker, rep)
                outcome = await run.drive()
                nursery.cancel_scope.cancel()
            if outcome is not None or run.failure is not None:
                hashing.cancel_scope.cancel()
    finally:
        if run.reference is not None:
            state.save(trio.current_time())
        run.flush_trace()
    if run.failure is not None:
        raise run.failure
    if outcome is not None:
        return outcome
    ref = run.reference
    assert ref is not None  # done: the planner knew the size, so the reference was fixed
    digest = hashers[0].hexdigest()
    if job.sha256 is not None and digest != job.sha256.lower():
        raise MirrorError(
            f"the file's SHA-256 is {digest}, not the {job.sha256.lower()} asked for: the replicas serve other "
            f"bytes under the same name and validators; {part.path} is kept for inspection", ExitCode.INTEGRITY)
    if job.watcher is not None:
        await job.watcher._released.wait()
    await trio.to_thread.run_sync(part.commit)  # still locked: no other run opens it in between
    seconds = trio.current_time() - job.started
    stats = planner.stats()
    save_history(job.history, job.urls, stats)
    fetched = sum(stat.bytes for stat in stats) or 1
    def since_start(when: float | None) -> float | None:
        return None if when is None else when - job.started

    reports = [
        ReplicaReport(rep.shown, stat.bytes, stat.requests, list(stat.chunks), stat.rate * 8 / 1e6,
                      stat.bytes / fetched, stat.state, stat.reason, since_start(stat.first_byte),
                      since_start(stat.last_byte))
        for rep, stat in zip(replicas, stats, strict=True)
    ]
    return MirrorResult(job.out, ref.length, seconds, job.config.strategy, job.config.tail, digest, resumed_bytes,
                        reports)
