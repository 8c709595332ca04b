"""One file from several replicas at once: ``lnet-get URL URL ... -o OUT`` (seed 000, MDTP).

The I/O shell around ``ChunkPlanner``. Every replica gets one persistent connection (``RangeConnection``) on which
the planner's range requests are pipelined, so that each replica's pipe stays full between chunks.

1. **Probe**: every replica is asked for byte 0 (``Range: bytes=0-0``), which gives the file's length and
   validators (``ETag``, ``Last-Modified``) and warms its connection. The largest group of replicas that agree on
   all three is the reference; a replica that disagrees is refused with the difference named, and its bytes are
   never written. A replica that does not answer is retried after a back-off, and checked when it does.
2. **Download**: bytes stream from each response straight to their offset in ``OUT.lnet-part``, never further
   than the planner's current end for the request (a tail split or a hedge may have moved it). Every response is
   checked (status, ``Content-Range``, validators) before any of its bytes are written.
3. **Finish**: the SHA-256 of the file, computed over the growing prefix while the download runs, is checked
   against ``--sha256`` if given; then the part file is renamed to ``OUT``. ``OUT.lnet-part.state`` records the
   byte ranges in place, so the same command resumes an interrupted download with what it already has.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trio

from lnet.client.engines.chunks import ChunkPlanner, Drop, Fetch, PlanConfig, ReplicaStats
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
        }


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
    """One replica's I/O side: its connection, the channel of the planner's requests for it, its probe's answer
    (the planner's own view of the replica is ``chunks.ReplicaStats``)."""

    index: int
    url: str
    shown: str
    send: trio.MemorySendChannel[Fetch]
    receive: trio.MemoryReceiveChannel[Fetch]
    connect: Connector | None = None  # None: TCP (tests: an emulated network)
    connection: RangeConnection | None = None  # the probe's, handed to the worker
    validators: Validators | None = None
    probe_error: str = ""
    refused: bool = False
    scope: trio.CancelScope | None = None


class _Close(Exception):  # noqa: N818 - a signal, not an error
    """Close this connection on purpose (a request was stopped short or voided); go on with a new one."""


@dataclass
class _Download:
    planner: ChunkPlanner
    replicas: list[_ReplicaWorker]
    reference: Validators
    part: PartFile
    timeout_s: float
    check_validators: bool
    on_progress: Callable[[int, int], None]
    have: _Have
    on_write: Callable[[], None] = lambda: None
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
            conn, rep.connection = rep.connection, None
            try:
                with trio.CancelScope() as rep.scope:
                    if conn is None:
                        conn = await RangeConnection(rep.url, self.timeout_s, connect=rep.connect).__aenter__()
                    on_wire, answering = trio.open_memory_channel[Fetch](CHANNEL_SIZE)
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._sender, rep, conn, pending, on_wire)
                        await self._receiver(conn, pending, answering)
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
        self, conn: RangeConnection, pending: deque[Fetch], answering: trio.MemoryReceiveChannel[Fetch],
    ) -> None:
        async for fetch in answering:
            if self.planner.limit(fetch.request) is None:
                raise _Close  # voided while queued: its response is not wanted, nor any after it
            head = await conn.head()
            self._check(fetch, head)
            await self._stream_body(fetch.replica, conn, fetch)
            pending.popleft()
            if not conn.reusable or not head.keep_alive:
                raise ConnectionEnded("the replica ends the connection")

    def _check(self, fetch: Fetch, head: Head) -> None:
        """Refuse, or count as a failure, a response that is not the bytes asked for of the reference file."""
        if head.status in RETRY_STATUSES:
            raise ReplicaError(f"HTTP {head.status}")
        if head.status == 200:
            raise ReplicaRefused("it does not honour Range requests (HTTP 200)")
        if head.status == 416:
            raise ReplicaRefused(f"it has fewer bytes than the others' {self.reference.length} (HTTP 416)")
        if head.status != 206:
            raise ReplicaRefused(f"HTTP {head.status}")
        if head.total is None:
            raise ReplicaError("its answer gives no file length (Content-Range)")
        found = Validators(head.total, head.etag, head.last_modified)
        why = found.differs(self.reference, self.check_validators)
        if why is not None:
            raise ReplicaRefused(why)
        if (head.start, head.end) != (fetch.start, fetch.end):
            raise ReplicaError(f"asked for bytes {fetch.start}-{fetch.end - 1}, got {head.start}-{head.end}")

    async def _stream_body(self, replica: int, conn: RangeConnection, fetch: Fetch) -> None:
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
            if pos >= limit and pos < fetch.end:
                raise _Close  # stopped short: the rest of this response is someone else's

    # -- the driver ---------------------------------------------------------------------------------------

    async def drive(self) -> None:
        while True:
            for decision in self.planner.poll(trio.current_time()):
                if isinstance(decision, Fetch):
                    self.replicas[decision.replica].send.send_nowait(decision)
                elif isinstance(decision, Drop):
                    scope = self.replicas[decision.replica].scope
                    if scope is not None:
                        scope.cancel()
            if self.planner.done:
                return
            if self.planner.stuck:
                reasons = "; ".join(
                    f"{rep.shown}: {stat.state}, {stat.reason or 'no reason'}"
                    for rep, stat in zip(self.replicas, self.planner.stats(), strict=True)
                )
                raise MirrorError(f"no replica can finish the download ({reasons})", ExitCode.UNREACHABLE)
            wakeup = self.planner.next_wakeup()
            with trio.move_on_at(wakeup if wakeup is not None else math.inf):
                await self.wake.wait()
            self.wake = trio.Event()


def _resumable(document: object, ref: Validators) -> list[tuple[int, int]]:
    """The ranges a previous run left in place (its state ``document``), if it fetched the same file; else none."""
    if not isinstance(document, dict) or document.get("format") != STATE_FORMAT:
        return []
    if [document.get("size"), document.get("etag"), document.get("last_modified")] != [
            ref.length, ref.etag, ref.last_modified]:
        return []
    spans = []
    for item in document.get("have", []):
        if (isinstance(item, list) and len(item) == 2 and all(isinstance(v, int) for v in item)
                and 0 <= item[0] < item[1] <= ref.length):
            spans.append((item[0], item[1]))
    return spans


def _state_document(ref: Validators, have: _Have) -> dict[str, object]:
    return {"format": STATE_FORMAT, "size": ref.length, "etag": ref.etag, "last_modified": ref.last_modified,
            "have": have.spans}


async def _probe(rep: _ReplicaWorker, timeout_s: float) -> None:
    """Ask for byte 0: the file's length and validators, on the connection the downloads will then use."""
    conn = RangeConnection(rep.url, timeout_s, connect=rep.connect)
    try:
        await conn.__aenter__()
        await conn.send(0, 1)
        head = await conn.head()
        await conn.skip_body()
    except ReplicaError as exc:
        rep.probe_error = str(exc)
        await conn.aclose()
        return
    if head.status == 416 and head.total == 0:
        rep.validators = Validators(0, head.etag, head.last_modified)
    elif head.status == 206 and head.total is not None:
        rep.validators = Validators(head.total, head.etag, head.last_modified)
    elif head.status == 200:
        rep.probe_error = "it does not honour Range requests (HTTP 200)"
        rep.refused = True
    elif head.status in RETRY_STATUSES:
        rep.probe_error = f"HTTP {head.status}"
    else:
        rep.probe_error = f"HTTP {head.status}"
        rep.refused = True
    if rep.validators is not None and conn.reusable and head.keep_alive:
        rep.connection = conn
    else:
        await conn.aclose()


async def fetch_mirrors(
    urls: Sequence[str],
    out: Path,
    *,
    config: PlanConfig | None = None,
    timeout_s: float = 30.0,
    sha256: str | None = None,
    check_validators: bool = True,
    history: Path | None = None,
    on_start: Callable[[int, list[str]], None] = lambda size, urls: None,
    on_progress: Callable[[int, int], None] = lambda replica, nbytes: None,
    watcher: Watcher | None = None,
    connect: Connector | None = None,
) -> MirrorResult:
    """Download one file from ``urls`` (replicas of it) into ``out``; see the module's docstring. ``connect`` opens
    the byte stream to a replica (None: TCP; tests pass an emulated network)."""
    if not urls:
        raise MirrorError("no replica URL given", ExitCode.USAGE)
    if len(set(urls)) != len(urls):
        raise MirrorError("a replica URL is given twice", ExitCode.USAGE)
    config = config or PlanConfig()
    started = trio.current_time()
    replicas = []
    for i, url in enumerate(urls):
        send, receive = trio.open_memory_channel[Fetch](CHANNEL_SIZE)
        replicas.append(_ReplicaWorker(i, url, redact_url(url), send, receive, connect))
    async with trio.open_nursery() as nursery:
        for rep in replicas:
            nursery.start_soon(_probe, rep, timeout_s)
    try:
        return await _download(replicas, out, config, timeout_s, sha256, check_validators, history, started,
                               on_start, on_progress, watcher)
    finally:
        with trio.CancelScope(shield=True):
            for rep in replicas:
                if rep.connection is not None:
                    await rep.connection.aclose()


async def _download(
    replicas: list[_ReplicaWorker], out: Path, config: PlanConfig, timeout_s: float, sha256: str | None,
    check_validators: bool, history: Path | None, started: float,
    on_start: Callable[[int, list[str]], None], on_progress: Callable[[int, int], None], watcher: Watcher | None,
) -> MirrorResult:
    ref = reference([rep.validators for rep in replicas], check_validators)
    if ref is None:
        reasons = "; ".join(f"{rep.shown}: {rep.probe_error}" for rep in replicas)
        raise MirrorError(f"no replica answered with the file ({reasons})", ExitCode.UNREACHABLE)
    urls = [rep.url for rep in replicas]
    try:
        part = PartFile.open(out)
    except PartFileBusy as exc:
        raise MirrorError(str(exc), ExitCode.USAGE) from None
    except PartFileError as exc:
        raise MirrorError(str(exc)) from None
    have = _Have()
    state = StateFile(part.state_path, lambda: _state_document(ref, have))
    try:
        resumed = _Have(_resumable(state.read(), ref) if part.size() == ref.length else [])
        part.preallocate(ref.length)
        planner = ChunkPlanner(ref.length, len(replicas), config, history=load_history(history, urls),
                               have=[(a, b) for a, b in resumed.spans])
        now = trio.current_time()
        for rep in replicas:
            why = rep.validators.differs(ref, check_validators) if rep.validators is not None else None
            if why is not None or rep.refused:
                planner.refuse(rep.index, why or rep.probe_error)
                rep.refused = True
                if rep.connection is not None:
                    await rep.connection.aclose()
                    rep.connection = None
            elif rep.validators is None:
                planner.failed(rep.index, now, rep.probe_error)
        on_start(ref.length, [rep.shown for rep in replicas])
        have.spans = [[a, b] for a, b in resumed.spans]
        hasher = PrefixHasher(part.fd, ref.length, "sha256", lambda: have.prefix)
        run = _Download(planner, replicas, ref, part, timeout_s, check_validators, on_progress, have)
        if watcher is not None:
            watcher._start(ref.length, part.path, have)

        def written() -> None:
            hasher.advanced()
            state.changed(trio.current_time())
            if watcher is not None:
                watcher._added()

        run.on_write = written
        resumed_bytes = resumed.total
        try:
            async with trio.open_nursery() as hashing:
                hashing.start_soon(hasher.run)  # alongside the download; ends once it has hashed the whole file
                async with trio.open_nursery() as nursery:
                    for rep in replicas:
                        if not rep.refused:
                            nursery.start_soon(run.worker, rep)
                    await run.drive()
                    nursery.cancel_scope.cancel()
        finally:
            state.save(trio.current_time())
        digest = hasher.hexdigest()
        if sha256 is not None and digest != sha256.lower():
            raise MirrorError(
                f"the file's SHA-256 is {digest}, not the {sha256.lower()} asked for: the replicas serve other "
                f"bytes under the same name and validators; {part.path} is kept for inspection", ExitCode.INTEGRITY)
        if watcher is not None:
            await watcher._released.wait()
        await trio.to_thread.run_sync(part.commit)  # still locked: no other run opens it in between
    finally:
        part.close()
    state.remove()
    seconds = trio.current_time() - started
    stats = planner.stats()
    save_history(history, urls, stats)
    fetched = sum(stat.bytes for stat in stats) or 1
    reports = [
        ReplicaReport(rep.shown, stat.bytes, stat.requests, list(stat.chunks), stat.rate * 8 / 1e6,
                      stat.bytes / fetched, stat.state, stat.reason)
        for rep, stat in zip(replicas, stats, strict=True)
    ]
    return MirrorResult(out, ref.length, seconds, config.strategy, config.tail, digest, resumed_bytes, reports)
