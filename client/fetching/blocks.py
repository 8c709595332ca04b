"""``lnet-get MANIFEST -o OUT``: fetch a file that lnet delivered, check every byte, and put it in place atomically.

Every block streams from its depot straight into its offset of ``OUT.lnet-part`` (preallocated to the file's size;
no block is ever held whole in memory), hashed as it arrives. A block whose hash matches is recorded in
``OUT.lnet-part.state``. The whole file's hash is computed alongside, over the verified prefix of the part file, so
that little is left to hash at the end; when it matches, the part file is renamed to ``OUT``.
A block with several sources is read from the first that works, in the manifest's order (a depot that failed
before is tried last). A second run over the same ``OUT`` resumes: it re-hashes the blocks the state lists from
the part file and fetches only the rest.

What this module must not do: leave ``OUT`` holding anything but the verified file, list an unverified block in
the state, or wait on the network without the ``--timeout`` bound (every wait goes through ``DepotClient``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio

from lnet.client.exits import ExitCode, Failure
from lnet.client.fetching import partfile
from lnet.client.fetching.partfile import (
    HASH_CHUNK,
    PartFile,
    PartFileError,
    StateFile,
    part_path,
    state_path,
    write_at,
)
from lnet.client.formats.manifest import (
    BlockEntry,
    BlockSource,
    Manifest,
    block_hasher,
)
from lnet.client.formats.overlay import Overlay, depots_path
from lnet.client.wire.depot_client import Busy, DepotClient, DepotError, DepotUnreachable, NotFound

__all__ = [
    "DEFAULT_PARALLEL",
    "DEFAULT_TIMEOUT_S",
    "BlockUnavailable",
    "GetError",
    "GetResult",
    "IntegrityError",
    "DepotLoad",
    "OutputError",
    "PrefixHasher",
    "decode_state",
    "encode_state",
    "get_file",
    "part_path",
    "source_order",
    "state_path",
]

DEFAULT_PARALLEL = 8
DEFAULT_TIMEOUT_S = 30.0
MAX_PARALLEL = 256
STATE_FORMAT = "lnet-get-state/1"
BUSY_RETRIES = 3


class GetError(Failure):
    """Why a download did not complete; ``exit_code`` is what ``lnet-get`` exits with."""

    exit_code = ExitCode.FAILED


class OutputError(GetError):
    """``OUT`` cannot be written where it was asked for (a directory, a missing parent, another lnet-get)."""

    exit_code = ExitCode.USAGE


class IntegrityError(GetError):
    """The whole file's bytes do not match the manifest's hash."""

    exit_code = ExitCode.INTEGRITY


@dataclass(frozen=True)
class SourceFailure:
    depot: str
    kind: str  # "unreachable", "integrity", "missing" or "refused"
    detail: str


class BlockUnavailable(GetError):
    """Every source of a block failed. The exit code follows the failures: integrity when some source sent
    wrong bytes, unreachable when no source could be reached, failed otherwise (e.g. every copy expired)."""

    def __init__(self, block: BlockEntry, failures: Sequence[SourceFailure]) -> None:
        reasons = "; ".join(f"{f.depot}: {f.kind} ({f.detail})" for f in failures)
        super().__init__(f"block {block.index} (bytes {block.offset}-{block.end - 1}): every source failed: {reasons}")
        self.block = block
        self.failures = tuple(failures)
        kinds = {f.kind for f in failures}
        if "integrity" in kinds:
            self.exit_code = ExitCode.INTEGRITY
        elif kinds == {"unreachable"}:
            self.exit_code = ExitCode.UNREACHABLE
        else:
            self.exit_code = ExitCode.FAILED


@dataclass(frozen=True)
class GetResult:
    path: Path
    size: int
    seconds: float
    blocks: int
    resumed_blocks: int
    fetched_bytes: int
    fallbacks: int  # times a source failed and the next one was tried
    # fetched_bytes counts what arrived from depots in this run, including bytes that then failed their hash
    depots: dict[str, DepotLoad] = field(default_factory=dict)

    @property
    def mbps(self) -> float:
        """Megabits per second over the bytes this run fetched."""
        return self.fetched_bytes * 8 / self.seconds / 1e6 if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": True,
            "path": str(self.path),
            "bytes": self.size,
            "fetched_bytes": self.fetched_bytes,
            "seconds": round(self.seconds, 6),
            "mbps": round(self.mbps, 3),
            "blocks": self.blocks,
            "resumed_blocks": self.resumed_blocks,
            "fallbacks": self.fallbacks,
            "sources": [
                {"depot": depot, "bytes": load.bytes, "blocks": load.blocks, "mbps": round(load.rate * 8 / 1e6, 3),
                 "share": round(load.bytes / self.fetched_bytes, 4) if self.fetched_bytes else 0.0}
                for depot, load in self.depots.items()
            ],
        }


# -- pure parts: source order and the resume state ------------------------------------------------------------


def source_order(
    block: BlockEntry, *, now: float, failing: Collection[str], loads: dict[str, DepotLoad] | None = None,
) -> list[BlockSource]:
    """The order to try ``block``'s sources in. Sources whose depot failed before, and then sources past their
    expiry, go last (still tried: clocks disagree, depots extend). Among the rest, when the block sits on several
    depots, the one that would finish it soonest given what it is already sending and its measured rate comes
    first (Vazhkudai's dynamic load balancing, with MDTP's aim: every depot busy in proportion to its rate); a
    depot not yet measured counts as an average one. Ties keep the manifest's order."""
    loads = loads or {}

    def finish(source: BlockSource) -> float:
        return loads.get(source.depot, DepotLoad()).finish_s(block.length, loads.values())

    return sorted(block.sources, key=lambda s: (s.depot in failing, s.expires <= now, finish(s)))


@dataclass
class DepotLoad:
    """One depot's share of a download: what it is sending now, and its rate so far."""

    outstanding: int = 0  # bytes asked of it and not yet in
    bytes: int = 0
    blocks: int = 0
    busy_s: float = 0.0  # time with at least one block asked of it, up to its latest completed block
    _busy_from: float = 0.0
    _busy_before: float = 0.0

    @property
    def rate(self) -> float:
        return self.bytes / self.busy_s if self.busy_s > 0 else 0.0

    def asked(self, length: int, now: float) -> None:
        if self.outstanding == 0:
            self._busy_from = now
        self.outstanding += length

    def answered(self, length: int, now: float, verified: bool) -> None:
        if verified:
            self.bytes += length
            self.blocks += 1
            self.busy_s = self._busy_before + now - self._busy_from
        self.outstanding -= length
        if self.outstanding == 0:
            self._busy_before += now - self._busy_from

    def finish_s(self, length: int, everyone: Iterable[DepotLoad]) -> float:
        known = [load.rate for load in everyone if load.rate > 0]
        rate = self.rate or (sum(known) / len(known) if known else 0.0)  # not measured yet: an average one
        if rate <= 0:
            return float(self.outstanding)  # nothing measured anywhere yet: the least loaded first
        return (self.outstanding + length) / rate


def encode_state(manifest: Manifest, verified: Iterable[int]) -> dict[str, Any]:
    """The state file's document: which blocks of the part file are verified, as runs ``[first, last + 1)``."""
    runs: list[list[int]] = []
    for index in sorted(set(verified)):
        if runs and runs[-1][1] == index:
            runs[-1][1] = index + 1
        else:
            runs.append([index, index + 1])
    return {"format": STATE_FORMAT, "file_hash": manifest.file_hash, "size": manifest.size, "verified": runs}


def decode_state(document: Any, manifest: Manifest) -> set[int]:
    """The block indices a state document claims are verified, if it belongs to ``manifest``; else nothing.

    A state that does not parse, or that was written for another file, is ignored rather than refused: the worst
    it costs is fetching again."""
    if not isinstance(document, dict) or document.get("format") != STATE_FORMAT:
        return set()
    if document.get("file_hash") != manifest.file_hash or document.get("size") != manifest.size:
        return set()
    runs = document.get("verified")
    if not isinstance(runs, list):
        return set()
    count = len(manifest.blocks)
    verified: set[int] = set()
    for run in runs:
        if not (isinstance(run, list) and len(run) == 2 and all(type(i) is int for i in run)):
            return set()
        first, stop = run
        if not 0 <= first < stop <= count:
            return set()
        verified.update(range(first, stop))
    return verified


class ResumeState:
    """The verified blocks, kept in the part file's ``StateFile`` (format ``lnet-get-state/1``)."""

    def __init__(self, path: Path, manifest: Manifest, verified: set[int]) -> None:
        self.path = path
        self.manifest = manifest
        self.verified = set(verified)
        self._file = StateFile(path, lambda: encode_state(self.manifest, self.verified))

    @staticmethod
    def read(path: Path, manifest: Manifest) -> set[int]:
        return decode_state(StateFile(path, dict).read(), manifest)

    def add(self, index: int, now: float) -> None:
        self.verified.add(index)
        self._file.changed(now)

    def forget(self) -> None:
        self.verified.clear()
        self._file.changed(None)  # for the final save

    def save(self, now: float) -> None:
        self._file.save(now)

    def remove(self) -> None:
        self._file.remove()


# -- the download ---------------------------------------------------------------------------------------------


class PrefixHasher(partfile.PrefixHasher):
    """The whole file's hash over the part file's verified prefix: up to the first block not yet verified."""

    def __init__(self, fd: int, manifest: Manifest, verified: set[int]) -> None:
        super().__init__(fd, manifest.size, manifest.hash_algorithm, self._verified_prefix)
        self.manifest = manifest
        self.verified = verified  # shared with the resume state, which adds to it
        self._next_block = 0

    def block_verified(self) -> None:
        self.advanced()

    def _verified_prefix(self) -> int:
        blocks = self.manifest.blocks
        while self._next_block < len(blocks) and self._next_block in self.verified:
            self._next_block += 1
        return blocks[self._next_block - 1].end if self._next_block else 0


@dataclass
class _Run:
    """What the block fetchers share."""

    manifest: Manifest
    fd: int
    state: ResumeState
    file_hasher: PrefixHasher
    on_progress: Callable[[int], None]
    make_client: Callable[[str], DepotClient]
    clients: dict[str, DepotClient] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)
    fetched_bytes: int = 0
    fallbacks: int = 0
    failure: BlockUnavailable | None = None
    loads: dict[str, DepotLoad] = field(default_factory=dict)

    def client(self, depot: str) -> DepotClient:
        """The one client of ``depot``, made when first needed (a manifest may name many depots)."""
        if depot not in self.clients:
            self.clients[depot] = self.make_client(depot)
        return self.clients[depot]


async def get_file(
    manifest: Manifest,
    out: Path,
    *,
    parallel: int = DEFAULT_PARALLEL,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    transport: httpx.AsyncBaseTransport | None = None,
    on_progress: Callable[[int], None] | None = None,
    tokens: Mapping[str, str] | None = None,
) -> GetResult:
    """Fetch ``manifest``'s file into ``out``, verified, resuming from ``out``'s part file if there is one.

    ``tokens``: operator tokens by depot base URL, for depots that require theirs for reads (``require_token_for``);
    sent only to the depot they belong to.

    ``on_progress`` is called with each count of new bytes in place (the resumed ones first, in one call).
    ``transport`` reaches the depots (tests pass in-process ones); every network wait is bounded by
    ``timeout_s``. Raises a ``GetError`` whose ``exit_code`` says what went wrong; the part and state files stay
    behind for a resume in every case but an unusable ``out``."""
    if parallel < 1:
        raise ValueError("parallel must be at least 1")
    started = trio.current_time()
    out = Path(out)
    if out.is_dir():
        raise OutputError(f"{out} is a directory")
    if not out.parent.is_dir():
        raise OutputError(f"{out.parent} is not a directory")
    try:
        part = PartFile.open(out)
    except PartFileError as exc:
        raise OutputError(str(exc)) from None
    fd = part.fd
    try:
        state = ResumeState(state_path(out), manifest, set())
        try:
            state.verified = await _recheck(fd, manifest, ResumeState.read(state.path, manifest))
            part.preallocate(manifest.size)
            resumed = len(state.verified)
            progress = on_progress or (lambda nbytes: None)
            progress(sum(manifest.blocks[i].length for i in state.verified))
            todo = [block for block in manifest.blocks if block.index not in state.verified]
            run = _Run(
                manifest, fd, state, PrefixHasher(fd, manifest, state.verified), progress,
                _client_maker(timeout_s, transport, parallel, tokens or {}),
            )
            try:
                await _fetch_all(run, todo, parallel)
            finally:
                with trio.CancelScope(shield=True):
                    for client in run.clients.values():
                        await client.aclose()
            if run.failure is not None:
                raise run.failure
            if run.file_hasher.hexdigest() != manifest.file_hash:
                # Every block matched its own hash, so the manifest contradicts itself: none is known good.
                state.forget()
                raise IntegrityError(
                    f"the whole file's {manifest.hash_algorithm} does not match the manifest's; "
                    f"the bytes are kept in {part.path} for inspection"
                )
            await trio.to_thread.run_sync(part.commit)
            state.remove()
        finally:
            state.save(trio.current_time())
    except OSError as exc:
        raise GetError(f"{out}: {exc.strerror or exc}") from None
    finally:
        part.close()
    return GetResult(
        out, manifest.size, trio.current_time() - started, len(manifest.blocks), resumed, run.fetched_bytes,
        run.fallbacks, run.loads,
    )


def _client_maker(
    timeout_s: float, transport: httpx.AsyncBaseTransport | None, parallel: int, tokens: Mapping[str, str]
) -> Callable[[str], DepotClient]:
    by_base = {url.rstrip("/"): token for url, token in tokens.items()}

    def make(depot: str) -> DepotClient:
        token = by_base.get(depot.rstrip("/"))
        return DepotClient(depot, token=token, timeout=timeout_s, transport=transport, max_connections=parallel)

    return make


def depot_tokens(path: Path | None) -> dict[str, str]:
    """Operator tokens by depot base URL from a depots file: ``path``, else ``$LNET_DEPOTS`` or the default one
    if it exists (no file there: no tokens). Raises ``OverlayError`` for a file that was asked for and is bad."""
    if path is None and not depots_path().is_file():
        return {}
    overlay = Overlay.load(path)
    return {entry.url: entry.token for entry in overlay.depots.values() if entry.token}


async def _fetch_all(run: _Run, todo: list[BlockEntry], parallel: int) -> None:
    send, receive = trio.open_memory_channel[BlockEntry](0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run.file_hasher.run)
        for _ in range(min(parallel, len(todo))):
            nursery.start_soon(_fetcher, run, receive.clone(), nursery.cancel_scope)
        receive.close()
        async with send:
            for block in todo:
                await send.send(block)


async def _fetcher(run: _Run, blocks: trio.MemoryReceiveChannel[BlockEntry], scope: trio.CancelScope) -> None:
    async with blocks:
        async for block in blocks:
            try:
                await _fetch_block(run, block)
            except BlockUnavailable as exc:
                # The first block that cannot be had ends the run; what is verified stays for a resume.
                if run.failure is None:
                    run.failure = exc
                scope.cancel()
                return
            run.state.add(block.index, trio.current_time())
            run.file_hasher.block_verified()


async def _fetch_block(run: _Run, block: BlockEntry) -> None:
    failures: list[SourceFailure] = []
    # Wall-clock time, as the manifest's expiries are Unix times; it only orders the sources.
    for source in source_order(block, now=time.time(), failing=run.failing, loads=run.loads):
        if failures:
            run.fallbacks += 1
        failure = await _fetch_from(run, block, source)
        if failure is None:
            run.failing.discard(source.depot)
            return
        failures.append(failure)
        if failure.kind == "unreachable":
            run.failing.add(source.depot)
    raise BlockUnavailable(block, failures)


async def _fetch_from(run: _Run, block: BlockEntry, source: BlockSource) -> SourceFailure | None:
    """Stream ``block`` from ``source`` into the part file, hashing as it comes; ``None`` when it is verified."""
    load = run.loads.setdefault(source.depot, DepotLoad())
    for attempt in range(BUSY_RETRIES + 1):
        landed = _Landed()
        load.asked(block.length, trio.current_time())
        verified = False
        try:
            digest = await _stream_block(run, block, source, landed)
        except DepotUnreachable as exc:
            failure = SourceFailure(source.depot, "unreachable", str(exc))
        except NotFound:
            failure = SourceFailure(source.depot, "missing", "no such allocation (expired or freed?)")
        except Busy as exc:
            failure = SourceFailure(source.depot, "refused", f"busy: {exc.message}")
            if attempt < BUSY_RETRIES:
                run.on_progress(-landed.nbytes)
                await trio.sleep(min(exc.retry_after or 1.0, 5.0))
                continue
        except DepotError as exc:
            failure = SourceFailure(source.depot, "refused", f"{exc.code}: {exc.message}")
        else:
            if landed.nbytes != block.length:
                failure = SourceFailure(source.depot, "missing", f"holds {landed.nbytes} of {block.length} bytes")
            elif digest != block.hash:
                failure = SourceFailure(source.depot, "integrity", f"{run.manifest.hash_algorithm} does not match")
            else:
                verified = True
                return None
        finally:
            load.answered(block.length, trio.current_time(), verified)
        run.on_progress(-landed.nbytes)  # these bytes will come again from another source, or not at all
        return failure
    raise AssertionError("the loop returns on its last attempt")


@dataclass
class _Landed:
    nbytes: int = 0


async def _stream_block(run: _Run, block: BlockEntry, source: BlockSource, landed: _Landed) -> str:
    """Write what ``source`` holds of ``block`` at the block's offset; returns the hash of what was written."""
    hasher = block_hasher(run.manifest.hash_algorithm)
    async with run.client(source.depot).stream(source.read, 0, block.length) as chunks:
        async for chunk in chunks:
            if landed.nbytes + len(chunk) > block.length:
                raise DepotError(f"{source.depot} sent more bytes than asked for")
            hasher.update(chunk)
            write_at(run.fd, chunk, block.offset + landed.nbytes)
            landed.nbytes += len(chunk)
            run.fetched_bytes += len(chunk)
            run.on_progress(len(chunk))
    return hasher.hexdigest()


async def _recheck(fd: int, manifest: Manifest, claimed: set[int]) -> set[int]:
    """The blocks the state claims whose bytes in the part file still match their hash."""
    size = os.fstat(fd).st_size
    verified = set()
    for index in sorted(claimed):
        block = manifest.blocks[index]
        if block.end > size:
            continue
        hasher = block_hasher(manifest.hash_algorithm)
        for offset in range(block.offset, block.end, HASH_CHUNK):  # a block may be large: never read whole
            data = await trio.to_thread.run_sync(os.pread, fd, min(HASH_CHUNK, block.end - offset), offset)
            hasher.update(data)
        if hasher.hexdigest() == block.hash:
            verified.add(index)
    return verified


