"""The relay: a file moved as blocks through a chain of depots, every hop busy at once like a pipeline.

How a block travels. The client writes it into the first depot of its route; every depot then copies it on
to the next (``POST /v1/copy``, the push done by the depot itself); at the destination the depot computes the
block's hash (``GET /v1/digest``) and the client compares it with the hash it took from the file. A block is
held by two depots at once while it moves: the upstream copy is freed only when the block has reached the
depot after next (or, at the end, the destination has verified it), so that a block lost with a depot is
re-sent from the nearest one that still holds it, never from the source unless the source is that nearest one.

Every hop has a window: how many blocks may cross it at once. It follows the hop's bandwidth-delay product, as
Wu et al. size their pipelines: ``pp = ceil(3 * BDP / block) - 1``, bounded, with the bandwidth the hop's
measured throughput and the delay the shortest time one copy took as the client saw it (the control round
trip to the depot, the depot's round trip to the next one, and the block's own time on the wire). A window at
least that large keeps the hop busy through every round trip, so the client's control messages never cap the
pipeline, however far the depots are.

Measurement. An edge's throughput is the bytes that crossed it over the time it was busy (at least one copy
in flight), flushed to the scheduler at every tick: per-copy rates would undercount an edge crossed by several
copies at once, and wall-clock rates would blame a hop for waiting on a slower one upstream.

The scheduler (``lnet.scheduler.PathScheduler``) is fed those measurements and the failures, and decides; the
relay carries the decisions out: new blocks take the new path, blocks under way finish on the one they
started on, probes of unknown edges run beside the transfer, a dropped depot is avoided. This module owns the
I/O; the decisions are the scheduler's, and the rules below (routing, the block ledger, the windows, the end
game) are ``lnet.client.engines.relay_core``'s ``RelayEngine``, a pure engine this module feeds with events and
``now`` and whose answers it carries out.

Several paths at once. A decision names a set of edge-disjoint paths (``all_paths``, the primary
first) with each one's predicted rate. Each block is given one of them when it is admitted: the one that would
deliver it soonest, by what each already carries and its rate (``striping.soonest``, the MDTP rule: all paths
finish together), the rate being what the path delivered lately once it has delivered a few blocks
(``striping.PathMeter``), else the prediction. Until its first hop has room the block may still move, if by
then another path would deliver it sooner (the first blocks are given by predictions alone, the later by
measurements). A block follows its own path; one whose path left the set, or
runs through a depot that failed, goes on from its nearest holder along the path of the set that holder is on
(the primary first, and from the source by the same rule as a new block), else by the widest way from there,
as after a switch. The blocks admitted at once scale with the number of paths. Bytes are counted per path (a
block delivered after its path left the set counts for the primary), for the progress, the timeline and the
report. One path is the case of a set of one: everything above reduces to the single-path relay.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeGuard

import trio

from lnet.client.engines.relay_core import (
    Block,
    EdgeMeter,
    PathChanged,
    PathRun,
    PathSample,
    PathShares,
    RelayEngine,
    Stuck,
    TimelinePoint,
    inflight_for,
)
from lnet.client.formats.manifest import hash_bytes
from lnet.client.sending.probes import EdgeProbes
from lnet.client.sending.reading import Lease, Offload, ReadBuffers, WholeHash
from lnet.client.sending.relay_config import MiB, RelayConfig
from lnet.client.sending.trace import trace_decision, trace_event
from lnet.client.wire.depot_client import Allocation, DepotClient, DepotUnreachable
from lnet.protocol import DepotError, DepotFull, NotFound, TooLarge, innermost
from lnet.protocol.clock import TrioWallClock
from lnet.scheduler import (
    Decision,
    DepotFailure,
    DropDepot,
    EdgeMemory,
    HopFailure,
    Keep,
    Measurement,
    NoPathError,
    PathScheduler,
    ProbeDone,
    Progress,
    Switch,
    widest_path,
)

__all__ = [
    "Allocated",
    "BlockDelivered",
    "BlockRecord",
    "DepotRefused",
    "DepotStayedFull",
    "EdgeMeter",
    "BlockDamaged",
    "Note",
    "Offload",
    "Traced",
    "PathChanged",
    "PathRun",
    "PathSample",
    "PathShares",
    "Relay",
    "RelayConfig",
    "RelayEvent",
    "RelayResult",
    "SpaceWait",
    "Stream",
    "TransferFailed",
    "block_spans",
    "inflight_for",
]

Edge = tuple[str, str]
Route = tuple[str, ...]


class TransferFailed(Exception):
    """The transfer cannot complete: a block ran out of routes or retries, or the destination is gone."""


class BlockDamaged(TransferFailed):
    """A block reached the destination with the wrong bytes, again and again."""


class DepotRefused(TransferFailed):
    """A depot refused a request with an error that asking again cannot change: the transfer stops at once."""

    def __init__(self, depot: str, error: DepotError) -> None:
        super().__init__(f"{depot} refused: {error.message}")
        self.depot, self.error = depot, error


class DepotStayedFull(TransferFailed):
    """A depot had no room for a block for longer than ``RelayConfig.space_wait_s``: the transfer stops, keeping
    what arrived, rather than wait without end."""

    def __init__(self, depot: str, seconds: float) -> None:
        super().__init__(f"depot {depot} has had no room for a block for {seconds:.0f} s (--space-wait)")
        self.depot, self.seconds = depot, seconds


_RETRIED_4XX = frozenset({404, 409, 429})
"""The client errors that a retry can change: 404, an allocation that expired or was freed (a new one, or the
block from an earlier holder, mends it); 409 and 429, a race or a rate limit. Any other 4xx (400 a duration over
the depot's max_duration, 401 a wrong token, 413 a block over its max_allocation, ...) is the same next time."""


def _refused(exc: BaseException) -> TypeGuard[DepotError]:
    return isinstance(exc, DepotError) and 400 <= exc.status < 500 and exc.status not in _RETRIED_4XX


# -- events out, for progress and reports ---------------------------------------------------------------------


@dataclass(frozen=True)
class BlockDelivered:
    index: int
    nbytes: int
    at: float
    record: BlockRecord | None = None
    """Where the block now is (its destination allocation and hash), for the send journal."""


@dataclass(frozen=True)
class Note:
    text: str
    at: float


@dataclass(frozen=True)
class Traced:
    """What the scheduler was told or decided, for ``lnet-send --trace``: ``kind`` is ``"measure"`` (a sample of
    an edge, a probe's included, as the scheduler got it), ``"failure"``, ``"probe-done"`` or ``"decision"`` (each
    tick that changes something or asks for probes, and every re-evaluation, with the weights it compared); and
    what the relay did with them: ``"block"`` (a block verified at the destination, the path it counted on) and
    ``"end-game"`` (a round of second copies, with every path's backlog and rate)."""

    kind: str
    data: dict[str, Any]
    at: float


@dataclass(frozen=True)
class SpaceWait:
    """A depot answers that it is full (``waiting``), or took a block again after that (not ``waiting``)."""

    depot: str
    waiting: bool
    at: float


@dataclass(frozen=True, repr=False)
class Allocated:
    """The relay took new allocations at a depot (a block's, or a probe's): what a run killed with -9 leaves
    behind there until they expire, unless the next run frees them (the send journal records them)."""

    depot: str
    manage: tuple[str, ...]
    at: float

    def __repr__(self) -> str:  # capabilities are secrets
        return f"Allocated(depot={self.depot!r}, count={len(self.manage)})"


RelayEvent = BlockDelivered | PathChanged | PathShares | Note | Traced | SpaceWait | Allocated


@dataclass(frozen=True)
class Stream:
    """Bytes to carry other than one file cut into equal blocks: ``spans`` (offset, length) tile ``[0, size)`` and
    are the blocks, in that order; ``read(offset, length)`` gives one span's bytes (it runs in a worker thread and
    raises ``TransferFailed`` when the source changed). ``lnet.client.tree`` packs a directory into one."""

    label: str
    spans: tuple[tuple[int, int], ...]
    read: Callable[[int, int], bytes]

    @property
    def size(self) -> int:
        return sum(length for _, length in self.spans)


@dataclass(frozen=True)
class BlockRecord:
    index: int
    offset: int
    length: int
    hash: str
    allocation: Allocation


@dataclass
class RelayResult:
    blocks: list[BlockRecord]
    file_hash: str
    seconds: float
    timeline: list[TimelinePoint]
    edges: dict[Edge, tuple[float, int, int]]
    """Per edge: the smoothed busy-time throughput (bytes/s), the bytes that crossed it, the samples taken."""
    paths: list[PathRun]
    resends: int = 0
    path_bytes: dict[Route, int] = field(default_factory=dict)
    """The bytes delivered on each path over the whole transfer."""
    final_paths: tuple[Route, ...] = ()
    """The set of paths at the end, the primary first."""
    second_copies: int = 0
    """Second copies of blocks the end game started (``RelayConfig.end_game``)."""
    second_copies_won: int = 0
    """Of those, the ones that arrived first: each spared the transfer a wait on a slower path."""


# -- the shell's own parts: allocations, read buffers, the whole-file hash ------------------------------------


class _Pool:
    """Allocations at one depot, asked for in batches: one control round trip buys several blocks' buffers.

    At an intermediate depot, a block's allocation comes back once the block has moved on (``give_back``) and
    carries a later block: the next write or copy into it starts at offset 0 and overwrites it (the protocol's
    overwrite), and every copy out of it names the block's length, so bytes a longer earlier block left past it
    never travel. That saves the free and the allocation per block and per depot, and the depot a fresh buffer.

    Near the end it neither keeps nor asks for more than the blocks still to come can use (``blocks_left``): an
    allocation no block will take is freed as soon as its block moves on, while the transfer's last blocks are
    still travelling, instead of all of them after the last block (40-56 frees, 5% of a 256 MiB chain's time on
    loopback, docs/depot.md)."""

    def __init__(
        self, client: DepotClient, size: int, duration_s: float, batch: int, patience_s: float, keep: int = 0,
        blocks_left: int | None = None, name: str = "depot", on_wait: Callable[[bool], None] | None = None,
        on_allocated: Callable[[Sequence[Allocation]], None] | None = None,
    ) -> None:
        self.client, self.size, self.duration_s, self.batch = client, size, duration_s, batch
        self.full_batch = batch
        self.patience_s = patience_s
        self.name = name
        self.on_wait = on_wait or (lambda waiting: None)
        self.on_allocated = on_allocated or (lambda allocations: None)
        self.keep = keep
        """Allocations given back that are kept at most (0: none, every one is freed)."""
        self.blocks_left = blocks_left
        """Allocations the transfer may still take from this pool (the blocks it has yet to send, less those
        that took one here); None: no bound. An estimate for a re-sent block or another path's, which may then
        find none kept and ask the depot."""
        self._ready: list[Allocation] = []
        self._lock = trio.Lock()
        self._room = trio.Event()

    def room_made(self, blocks: int = 1) -> None:
        """Someone freed room at this depot for about ``blocks`` blocks (a receiver drained them): a wait for room
        asks again at once, for that many in one request."""
        self.batch = max(1, min(self.full_batch, blocks))
        self._room.set()

    def give_back(self, alloc: Allocation, now: float) -> bool:
        """Keep ``alloc``, which a block has left, for a later block: True when kept, False when the caller is to
        free it (the pool is full or holds as many as the blocks left can take, or ``alloc`` has less than half
        its lifetime left: a block must never find its allocation expired on the way)."""
        if self.blocks_left is not None and len(self._ready) >= self.blocks_left:
            return False
        if len(self._ready) >= self.keep or alloc.size != self.size or alloc.expires - now < self.duration_s / 2:
            return False
        self._ready.append(alloc)
        return True

    async def take(self) -> Allocation:
        """An allocation. A full depot (507) is asked again soon and more slowly as it stays full (from
        ``FULL_POLL_FIRST_S`` up to its ``Retry-After``, at most ``FULL_POLL_MAX_S``: room freed by another
        client, or a receiver draining the destination, is taken within a fraction of a second), for
        ``patience_s`` in all; then ``DepotStayedFull``. ``on_wait(True)`` when the wait begins,
        ``on_wait(False)`` when it ends."""
        async with self._lock:
            waiting_since: float | None = None
            pause = FULL_POLL_FIRST_S
            while not self._ready:
                count = self.batch if self.blocks_left is None else max(1, min(self.batch, self.blocks_left))
                try:
                    # extended, not replaced: an allocation may come back (``give_back``) while this one waits
                    fresh = await self.client.allocate(self.size, self.duration_s, count=count)
                    self.on_allocated(fresh)
                    self._ready.extend(fresh)
                except DepotFull as full:
                    if count > 1:  # all or none: a depot with room for fewer is asked for one at a time
                        self.batch = 1
                        continue
                    now = trio.current_time()
                    if waiting_since is None:
                        waiting_since = now
                        self.on_wait(True)
                    if now - waiting_since >= self.patience_s:
                        raise DepotStayedFull(self.name, now - waiting_since) from None
                    limit = min(full.retry_after or FULL_POLL_MAX_S, FULL_POLL_MAX_S)
                    self._room = trio.Event()
                    with trio.move_on_after(min(pause, limit, waiting_since + self.patience_s - now)):
                        await self._room.wait()
                        pause = FULL_POLL_FIRST_S  # room was made: ask at once, and soon again
                        continue
                    pause *= 1.5
                except TooLarge:
                    if self.batch == 1:
                        raise
                    self.batch //= 2  # the batch is more than the depot's whole capacity: ask for fewer at once
                else:
                    self.batch = min(self.full_batch, self.batch * 2)
            if waiting_since is not None:
                self.on_wait(False)
            if self.blocks_left is not None:
                self.blocks_left = max(0, self.blocks_left - 1)
            return self._ready.pop()

    async def drain(self) -> None:
        """Free every allocation kept, ``DRAIN_AT_ONCE`` at a time (every depot's pool at once, ``Relay.run``):
        little is left at the end now that ``blocks_left`` bounds what is kept, but after a re-sent block or on
        a path set that changed a pool may still hold some, and a free is a round trip each. Each free is bounded
        by the client's timeout; one that fails leaves its allocation to expire."""
        ready, self._ready = self._ready, []
        limiter = trio.CapacityLimiter(DRAIN_AT_ONCE)

        async def free(alloc: Allocation) -> None:
            async with limiter:
                try:
                    await self.client.free(alloc.manage)
                except (DepotError, DepotUnreachable):
                    pass  # it expires on its own

        async with trio.open_nursery() as nursery:
            for alloc in ready:
                nursery.start_soon(free, alloc)


DRAIN_AT_ONCE = 8
"""Frees a pool has in flight at once when the transfer ends (``_Pool.drain``)."""
FULL_POLL_FIRST_S = 0.02
FULL_POLL_MAX_S = 1.0
"""How soon, and at most how far apart, a full depot is asked again for an allocation (``_Pool.take``)."""

_HASH_AHEAD_BYTES = 128 * MiB
"""Bytes of blocks read ahead of the whole-file hash's position that it keeps for later (``WholeHash``)."""
_PROBE_GRACE_S = 0.1
"""How long a finished transfer waits for its probes to end on their own before cutting them off."""


class Relay:
    """One transfer of one file to ``dest`` over the depots in ``clients`` (keyed by vertex name)."""

    def __init__(
        self,
        source: Path | Stream,
        here: str,
        dest: str,
        clients: Mapping[str, DepotClient],
        *,
        scheduler: PathScheduler | None = None,
        pinned: Sequence[str] | None = None,
        memory: EdgeMemory | None = None,
        config: RelayConfig | None = None,
        on_event: Callable[[RelayEvent], None] | None = None,
        clock: Callable[[], float] | None = None,
        offload: Offload | None = None,
        available: Callable[[int, int], Awaitable[None]] | None = None,
        delivered: Mapping[int, BlockRecord] | None = None,
    ) -> None:
        """``available``, when the file is still arriving (replicas feeding the first hop): returns once bytes
        ``[start, end)`` of ``source`` are in place. ``delivered``: blocks already at the destination (a resumed
        transfer, ``lnet.client.sending.resume``), by index; they are neither read nor sent, and their records are the
        result's as they are (the whole-file hash still covers every byte)."""
        if (scheduler is None) == (pinned is None):
            raise ValueError("give either a scheduler or a pinned path")
        if pinned is not None and (pinned[0] != here or pinned[-1] != dest or len(set(pinned)) != len(pinned)):
            raise ValueError("a pinned path runs from here to the destination without repeating a vertex")
        self.source, self.here, self.dest = source, here, dest
        self.clients = dict(clients)
        self.scheduler = scheduler
        self.memory = memory if memory is not None else (scheduler.memory if scheduler else EdgeMemory())
        self.config = config or RelayConfig()
        self.on_event = on_event or (lambda event: None)
        self.clock = clock or TrioWallClock()
        # File reads and hashing run in worker threads so that the event loop keeps every hop moving meanwhile.
        self._offload: Offload = offload or trio.to_thread.run_sync
        self._available = available
        self._fd = -1
        self.size = source.size if isinstance(source, Stream) else source.stat().st_size
        # The routing, the block ledger and the window rules; what follows is the I/O that carries them out.
        self.engine = RelayEngine[Allocation](
            here, dest, self.config, pinned=pinned, widest_from=None if scheduler is None else self._widest_from
        )
        self.windows: dict[Edge, trio.CapacityLimiter] = {}
        self._scopes: dict[Block[Allocation], trio.CancelScope] = {}
        """Each copy's carry, while it runs: cut off when another copy of the block arrives first."""
        # Names this transfer's copy lanes at the depots; random so that two transfers never share one.
        self._lane = secrets.token_hex(8)
        self._bytes_to_send = 0  # set by run(): the bytes of the blocks this run sends
        self._blocks_to_send: int | None = None  # set by run(): the blocks this run sends
        self._probe_runs = EdgeProbes(self)  # reads the members of ``ProbingRelay``
        self._pools: dict[str, _Pool] = {}
        self._probing: set[Edge] = set()
        self._records: dict[int, BlockRecord] = {}
        self._already = dict(delivered or {})
        self._resends = 0
        self._started = 0.0
        self._file_hash = ""
        self._whole: WholeHash | None = None
        self._buffers = ReadBuffers(self.config.block_size, self.config.max_inflight)
        self._done = trio.Event()
        self._file_hashed = trio.Event()
        self._probes_idle = trio.Event()
        self._probes_idle.set()
        self._probes_asked: tuple[Edge, ...] = ()
        self._deep_asked: frozenset[Edge] = frozenset()
        self._admission: trio.CapacityLimiter | None = None

    @property
    def path(self) -> Route:
        """The primary path."""
        return self.engine.path

    @property
    def paths(self) -> tuple[Route, ...]:
        """The set of paths, the primary first."""
        return self.engine.paths

    @property
    def dead(self) -> set[str]:
        """The depots that failed."""
        return self.engine.dead

    @property
    def meters(self) -> dict[Edge, EdgeMeter]:
        return self.engine.meters

    @property
    def finished(self) -> bool:
        """Whether every block has arrived: probes stop at their next copy."""
        return self._done.is_set()

    @property
    def probe_s(self) -> float:
        """How long a probe runs: the scheduler's ``probe_s``, else the relay's own (a pinned transfer)."""
        return self.scheduler.config.probe_s if self.scheduler is not None else self.config.probe_s

    # -- the whole transfer ---------------------------------------------------------------------------------

    async def run(self) -> RelayResult:
        self._started = trio.current_time()
        now = self.clock()
        # Blocks admitted at once: 4 x max_inflight a path (``_take_paths`` scales it to the set)
        admission = self._admission = trio.CapacityLimiter(self.config.max_inflight * 4)
        if isinstance(self.source, Stream):
            spans = self.source.spans
        else:
            spans = tuple(block_spans(self.size, self.config.block_size))
        blocks = [Block[Allocation](i, offset, length) for i, (offset, length) in enumerate(spans)]
        for index, record in self._already.items():
            if not 0 <= index < len(spans) or spans[index] != (record.offset, record.length):
                raise ValueError(f"block {index} given as delivered is not a block of {self.source}")
        self._records.update(self._already)
        self._blocks_to_send = sum(1 for block in blocks if block.index not in self._already)
        self._bytes_to_send = sum(block.length for block in blocks if block.index not in self._already)
        if self.scheduler is not None:
            self._tell_progress(now)
            first = self.scheduler.start(now)
            self._trace_decision(first, now)
            self._take_paths(*_path_set(first), "start", first.predicted_bps)
            self._probes_asked = tuple(first.probes)
            self._deep_asked = frozenset(first.deep)
        else:
            self._take_paths((self.path,), (), "pinned")
        self._whole = WholeHash(self.config.hash_algorithm, spans, _HASH_AHEAD_BYTES)
        fd = self._fd = -1 if isinstance(self.source, Stream) else os.open(self.source, os.O_RDONLY)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._steer, nursery)
                nursery.start_soon(self._hash_whole_file, self._whole)
                async with trio.open_nursery() as carriers:
                    for block in blocks:
                        if block.index in self._already:
                            continue
                        await admission.acquire_on_behalf_of(block)
                        carriers.start_soon(self._carry, block, fd, admission)
                    self.engine.all_under_way = True
                self._done.set()
                await self._file_hashed.wait()
                # Probes stop at their next copy, but a copy on a slow edge can take seconds the transfer has
                # no use for: whatever they have not measured by now is cut off (their allocations are still
                # released, below).
                with trio.move_on_after(min(self.config.timeout_s, _PROBE_GRACE_S)):
                    await self._probes_idle.wait()
                nursery.cancel_scope.cancel()
        finally:
            if fd >= 0:
                os.close(fd)
            with trio.CancelScope(shield=True):
                async with trio.open_nursery() as nursery:  # every depot's pool at once
                    for pool in self._pools.values():
                        nursery.start_soon(pool.drain)
                    for holder in self._probe_runs.blocks.items():
                        nursery.start_soon(self._release, holder)
        elapsed = trio.current_time() - self._started
        engine = self.engine
        engine.close_all_runs(self._since_start())
        self._sample_timeline()
        edges = {edge: (meter.rate_bps, meter.total_bytes, meter.samples) for edge, meter in engine.meters.items()}
        return RelayResult(
            blocks=[self._records[i] for i in range(len(blocks))],
            file_hash=self._file_hash,
            seconds=elapsed,
            timeline=engine.timeline,
            edges=edges,
            paths=engine.runs,
            resends=self._resends,
            second_copies=engine.second_copies,
            second_copies_won=engine.second_copies_won,
            path_bytes=dict(engine.path_bytes),
            final_paths=engine.final_paths,
        )

    # -- one block --------------------------------------------------------------------------------------------

    async def _carry(self, block: Block[Allocation], fd: int, admission: trio.CapacityLimiter) -> None:
        try:
            if self._available is not None:
                await self._available(block.offset, block.offset + block.length)
            self.engine.admit(block, trio.current_time())
            route = list(block.path)
            with trio.CancelScope() as scope:  # cut off if a second copy arrives first (the end game)
                self._scopes[block] = scope
                while True:
                    try:
                        await self._walk(block, route, fd)
                        return
                    except _HopFailed as failure:
                        block.attempts += 1
                        self._resends += 1
                        if block.attempts > self.config.retries:
                            raise TransferFailed(
                                f"block {block.index}: gave up after {self.config.retries} retries ({failure})"
                            ) from None
                        self._note(f"block {block.index}: {failure}; re-sending from {self.engine.nearest(block)}")
                        await trio.sleep(self.config.backoff_s * block.attempts)
                        route = self.engine.route_for(block, self.engine.nearest(block), trio.current_time())
            await self._lost_race(block)
        finally:
            self._scopes.pop(block, None)
            self.engine.settled(block)
            admission.release_on_behalf_of(block)

    async def _lost_race(self, block: Block[Allocation]) -> None:
        """Another copy of ``block`` arrived first and cut this one off: what this one holds is freed, never kept (a
        copy cut off on the client's side may still be running at the depot), and it counts on no path."""
        with trio.CancelScope(shield=True):
            for holder in block.holders[1:]:
                await self._release(holder)
        self.engine.lost(block, trio.current_time())

    # -- the end game ------------------------------------------------------------------------------------------

    def _end_game(self, nursery: trio.Nursery) -> None:
        """Second copies of the blocks slower paths would deliver last, once every block is under way
        (``RelayEngine.end_game``), each raced beside its first."""
        copies = self.engine.end_game(trio.current_time())
        for block, path in copies:
            nursery.start_soon(self._race, block, path)
        if copies:
            where = sorted({" -> ".join(path) for _, path in copies})
            self._note(f"end game: second copies of {len(copies)} block(s) over {', '.join(where)}")
            if self.config.trace:
                self.on_event(Traced("end-game", {
                    "t": round(self._since_start(), 3),
                    "copies": [{"block": block.index, "from": list(block.path), "hops_done": len(block.holders) - 1,
                                "over": list(path)} for block, path in copies],
                    "paths": [{"path": list(path), "outstanding": self.engine.outstanding.get(path, 0),
                               "mbps": round(self.engine.rate(path) * 8 / 1e6, 3)} for path in self.engine.paths],
                }, self.clock()))

    async def _race(self, block: Block[Allocation], path: Route) -> None:
        """A second copy of ``block`` from the source along ``path``, beside the first: whichever arrives first
        counts and cuts the other off. It gets no retries: if it fails, the first copy is still under way."""
        twin = self.engine.second_copy(block, path, trio.current_time())
        try:
            with trio.CancelScope() as scope:
                self._scopes[twin] = scope
                try:
                    await self._walk(twin, list(path), self._fd)
                    return
                except (_HopFailed, DepotRefused, TransferFailed) as failure:
                    self._note(f"block {block.index}: its second copy over {' -> '.join(path)} failed ({failure})")
            await self._lost_race(twin)
        finally:
            self._scopes.pop(twin, None)
            self.engine.second_copy_over(twin)

    async def _walk(self, block: Block[Allocation], route: Sequence[str], fd: int) -> None:
        """Move ``block`` from its nearest live holder (``route[0]``) to the destination, hop by hop as the engine
        routes it (``RelayEngine.step``)."""
        if self.dest in self.dead:
            raise TransferFailed(f"the destination {self.dest} does not answer any more")
        self.engine.restart(block, route[0])
        while block.holders[-1][0] != self.dest:
            step = self.engine.step(block, route, trio.current_time())
            if isinstance(step, Stuck):
                raise _HopFailed(step.reason)
            route = step.route
            target = await self._hop(block, step.u, step.v, fd)
            if target is None:
                continue  # the path changed while the block waited for the hop: plan again from here
            behind = self.engine.reached(block, step.v, target)
            if behind is not None:
                await self._pass_on(behind)
                self.engine.passed_on(block)
        await self._verify_at_destination(block)

    async def _hop(self, block: Block[Allocation], u: str, v: str, fd: int) -> Allocation | None:
        """Carry ``block`` from ``u`` to ``v``; None when, by the time the hop had room, the path went elsewhere."""
        edge = (u, v)
        meter = self.engine.meter(edge)
        async with self._windowed(edge, meter):
            if u == self.here and len(block.holders) == 1:
                self.engine.reconsider(block, trio.current_time())
            wanted = self.engine.next_hop(block, u, trio.current_time())
            if wanted is not None and wanted != v:
                return None
            target = await self._allocate(v)
            started = trio.current_time()
            mark = meter.started(started)
            ok = False
            pushed: float | None = None
            try:
                if u == self.here:
                    data: bytes | memoryview
                    lease: Lease | None = None
                    if isinstance(self.source, Stream) or block.length > self._buffers.size:
                        data, digest = await self._offload(
                            _read_span_and_hash, self._reader(), block.offset, block.length, self.config.hash_algorithm,
                        )
                    else:
                        lease = self._buffers.take()
                        data = memoryview(lease.buffer)[: block.length]
                    try:
                        if lease is not None:
                            digest = await self._offload(
                                _read_into_and_hash, fd, data, block.offset, self.config.hash_algorithm
                            )
                        if block.hash and digest != block.hash:
                            raise TransferFailed(f"{self.source} changed while being sent (block {block.index})")
                        block.hash = digest
                        if self._whole is not None:
                            self._whole.offer(block.index, data, lease)
                        started = trio.current_time()  # the write is timed from its first byte, not the read
                        # at offset 0: the allocation may be one an earlier block left (``_Pool``)
                        await self.clients[v].write(target.write, data, offset=0)
                    finally:
                        if lease is not None:
                            lease.done()
                else:
                    holder = block.holders[-1][1]
                    assert holder is not None
                    copied = await self.clients[u].copy(
                        holder.read, target.write_url, length=block.length, dest_offset=0,
                        lane=f"{self._lane}:{v}", lane_width=self.engine.depth(edge),
                        wait_s=self.engine.copy_wait(edge),
                    )
                    pushed = copied.seconds
                ok = True
            except (DepotError, DepotUnreachable) as exc:
                if not _refused(exc):
                    await self._blame(edge, exc)
                with trio.CancelScope(shield=True):
                    await self._release((v, target))
                if _refused(exc):
                    raise DepotRefused(v if u == self.here else u, exc) from None
                if isinstance(exc, NotFound) and u != self.here:
                    block.holders[-1] = (u, None)  # u no longer holds it (expired, freed): re-sent from upstream
                raise _HopFailed(f"{u} -> {v}: {exc}") from None
            except BaseException:
                # cut off (another copy of the block arrived first, or the transfer ends; a cancellation may come
                # wrapped in a group from the copy's own tasks), or the source changed: the target is not needed
                with trio.CancelScope(shield=True):
                    await self._release((v, target))
                raise
            finally:
                meter.finished(block.length, started, trio.current_time(), ok=ok, seconds=pushed, mark=mark)
        return target

    async def _verify_at_destination(self, block: Block[Allocation]) -> None:
        node, alloc = block.holders[-1]
        assert node == self.dest
        assert alloc is not None
        try:
            digest = await self.clients[self.dest].digest(alloc.read, self.config.hash_algorithm, length=block.length)
        except (DepotError, DepotUnreachable) as exc:
            if _refused(exc):
                raise DepotRefused(self.dest, exc) from None
            await self._blame((self.dest, self.dest), exc)
            raise _HopFailed(f"checking block {block.index} at {self.dest}: {exc}") from None
        if digest != block.hash:
            block.holders.pop()
            await self._release((node, alloc))
            if block.attempts >= self.config.retries:
                raise BlockDamaged(f"block {block.index} keeps arriving damaged at {self.dest}")
            raise _HopFailed(f"block {block.index} arrived damaged at {self.dest} (hash mismatch)")
        if block.index in self._records and (scope := self._scopes.get(block)) is not None:
            # its other copy arrived just before this one: this one is cut off like a copy still on its way
            scope.cancel()
            await trio.lowlevel.checkpoint()
        record = self._records[block.index] = BlockRecord(block.index, block.offset, block.length, block.hash, alloc)
        carried_on = block.path
        for other in self.engine.arrived(block, trio.current_time()):
            if (scope := self._scopes.get(other)) is not None:
                scope.cancel()  # the block's other copies are cut off
        self.on_event(BlockDelivered(block.index, block.length, self.clock(), record))
        if self.config.trace:
            self.on_event(Traced("block", {"t": round(self._since_start(), 3), "block": block.index,
                                           "path": list(carried_on), "second": block.twin_of is not None},
                                 self.clock()))
        for holder in block.holders[:-1]:
            await self._pass_on(holder)

    async def _hash_whole_file(self, whole: WholeHash) -> None:
        """The whole-file hash, from the bytes the blocks were read with (``WholeHash``)."""
        self._file_hash = await whole.run(self._already, self._reader(), self._offload, self._available)
        self._file_hashed.set()

    def _reader(self) -> Callable[[int, int], bytes]:
        """``read(offset, length)`` of the source: the stream's own, or exact reads of the file."""
        return self.source.read if isinstance(self.source, Stream) else partial(_read_exactly, self._fd)

    # -- failures -----------------------------------------------------------------------------------------------

    async def _blame(self, edge: Edge, exc: BaseException) -> None:
        """Tell the scheduler what failed: the depot, when it no longer answers, else the hop."""
        u, v = edge
        now = self.clock()
        suspects = [node for node in (v, u) if node != self.here]
        for node in dict.fromkeys(suspects):
            if node in self.dead:
                return
            if not await self.clients[node].healthy():
                self.dead.add(node)
                self._pools.pop(node, None)
                self._note(f"depot {node} does not answer: avoiding it")
                self.tell(DepotFailure(node, now))
                return
        if u != v and not isinstance(exc, NotFound):
            self.tell(HopFailure(edge, now))

    def depot_joined(self, node: str, client: DepotClient) -> None:
        """A depot that joined the overlay during the transfer (the directory says so: ``membership.py``): the
        scheduler may probe it and route through it from its next tick on. A pinned transfer keeps its path."""
        if node == self.here or node == self.dest:
            return
        self.clients[node] = client
        self.dead.discard(node)
        if self.scheduler is not None:
            self.scheduler.add_vertex(node)

    def depot_left(self, node: str) -> None:
        """A depot that left the overlay (its directory entry went): handled as a depot that stopped answering,
        its blocks re-sent from their nearest holder."""
        if node in self.dead or node not in self.clients or node == self.dest:
            return
        self.dead.add(node)
        self._pools.pop(node, None)
        self.tell(DepotFailure(node, self.clock()))

    # -- steering: measurements in, decisions out ------------------------------------------------------------------

    async def _steer(self, nursery: trio.Nursery) -> None:
        while True:
            self._start_probes(nursery)
            await trio.sleep(self.config.tick_s)
            now = self.clock()
            adaptive = self.config.adaptive
            for edge, sample in self.engine.tick(trio.current_time()):
                # Each hop's depth is its own (``_resize_windows``): say how many copies it ran at once, and
                # whether it had work for its depth.
                self.tell(Measurement(edge, sample.bytes, sample.stream_seconds, now,
                                       sample.at_once if adaptive else None,
                                       began=now - (trio.current_time() - sample.began),
                                       starved=adaptive and sample.starved))
            self._sample_timeline()
            self._resize_windows()
            self._end_game(nursery)
            if self.scheduler is None or self.dest in self.engine.full:
                continue
            self._tell_progress(now)
            decision = self.scheduler.tick(now)
            self._trace_decision(decision, now)
            paths, rates = _path_set(decision)
            changes = isinstance(decision, Switch | DropDepot)
            changed = self.engine.decided(
                paths, rates, changes=changes,
                reason=decision.reason if isinstance(decision, Switch) else "failure",
                predicted_bps=decision.predicted_bps if isinstance(decision, Switch | DropDepot) else None,
                dropped=decision.depot if isinstance(decision, DropDepot) else None,
                t=self._since_start(), at=self.clock(),
            )
            if changed is not None:
                self._paths_changed(changed)
            self._probes_asked = () if isinstance(decision, DropDepot) else tuple(decision.probes)
            self._deep_asked = frozenset() if isinstance(decision, DropDepot) else frozenset(decision.deep)

    def _start_probes(self, nursery: trio.Nursery) -> None:
        for edge in self._probes_asked:
            if edge not in self._probing and not set(edge) & self.dead and not self._done.is_set():
                self._probing.add(edge)
                self._probes_idle = trio.Event()
                nursery.start_soon(self._probe, edge, edge in self._deep_asked)
        self._probes_asked = ()

    def _take_paths(
        self, paths: Sequence[Sequence[str]], rates: Sequence[float], reason: str, predicted_bps: float | None = None
    ) -> None:
        """Run ``paths`` (the primary first) from now on (``RelayEngine.take_paths``)."""
        changed = self.engine.take_paths(paths, rates, reason, self._since_start(), self.clock(), predicted_bps)
        self._paths_changed(changed)

    def _paths_changed(self, changed: PathChanged) -> None:
        """More paths admit more blocks at once."""
        if self._admission is not None:
            self._admission.total_tokens = self.engine.admission
        self.on_event(changed)

    def _sample_timeline(self) -> None:
        shares = self.engine.sample_timeline(self._since_start(), self.clock())
        if shares is not None:
            self.on_event(shares)

    def _resize_windows(self) -> None:
        """Each hop's window as the engine sizes it from the hop's meter; with ``--trace``, each change of a
        hop's depth and what set it."""
        before = dict(self.engine.depths) if self.config.trace else {}
        for edge, tokens in self.engine.resize_windows().items():
            window = self.windows.get(edge)
            if window is not None and tokens != window.total_tokens:
                window.total_tokens = tokens
            if self.config.trace and before.get(edge) != self.engine.depths[edge]:
                self.on_event(Traced("window", self.engine.depth_record(edge, self._since_start()), self.clock()))

    def _since_start(self) -> float:
        return trio.current_time() - self._started

    def _widest_from(self, holder: str, avoid: Collection[str]) -> list[str] | None:
        """The widest way the scheduler knows from ``holder`` to the destination through none of ``avoid``."""
        assert self.scheduler is not None
        graph = self.scheduler.graph()
        graph.remove_nodes_from(avoid)
        try:
            return list(widest_path(graph, holder, self.dest))
        except NoPathError:
            return None

    def _tell_progress(self, now: float) -> None:
        """The scheduler's figure of the bytes left (``Progress``): this run's blocks, less those arrived. Not
        traced as an event (one a tick): the decisions' records carry it (``trace_decision``)."""
        assert self.scheduler is not None
        self.scheduler.measure(Progress(max(0, self._bytes_to_send - self.engine.delivered), now))

    def tell(self, event: Measurement | HopFailure | DepotFailure | ProbeDone) -> None:
        """Give the scheduler (else the memory of a pinned transfer) an event, traced; the probes report here too."""
        self._trace_event(event)
        if self.scheduler is not None:
            self.scheduler.measure(event)
        elif isinstance(event, Measurement):
            self.memory.observe(*event.edge, event.bytes, event.seconds, event.at)
        elif isinstance(event, HopFailure):
            self.memory.fail(*event.edge, event.at)

    # -- probes: unknown edges measured beside the transfer ---------------------------------------------------------

    async def _probe(self, edge: Edge, deep: bool = False) -> None:
        """Measure ``edge`` beside the transfer the way the transfer would use it, and tell the scheduler when done;
        ``deep``: with more copies at once while they add rate (``EdgeProbes.deep``).

        Best effort: a probe's failure is news about the edge, never the transfer's failure."""
        made: list[tuple[str, Allocation]] = []
        try:
            if deep and self.config.adaptive:
                await self._probe_runs.deep(edge, made)
            else:
                await self._probe_runs.one_stream(edge, made)
        except Exception as exc:  # noqa: BLE001 - whatever went wrong, the transfer goes on
            cause = innermost(exc)
            if isinstance(cause, DepotError | DepotUnreachable):
                await self._blame(edge, cause)
            else:
                self._note(f"probe of {edge[0]} -> {edge[1]} failed: {cause!r}")
        finally:
            with trio.CancelScope(shield=True):
                for node, alloc in made:
                    await self._release((node, alloc))
            self._probing.discard(edge)
            self.tell(ProbeDone(edge, self.clock()))
            if not self._probing:
                self._probes_idle.set()

    # -- plumbing ---------------------------------------------------------------------------------------------

    def _window(self, edge: Edge) -> trio.CapacityLimiter:
        if edge not in self.windows:
            self.windows[edge] = trio.CapacityLimiter(self.engine.window(edge))
        return self.windows[edge]

    @contextlib.asynccontextmanager
    async def _windowed(self, edge: Edge, meter: EdgeMeter) -> AsyncIterator[None]:
        """Hold a place in ``edge``'s window, the meter told how long the copy waited for it."""
        window = self._window(edge)
        meter.queued(trio.current_time())
        try:
            await window.acquire()
        finally:
            meter.dequeued(trio.current_time())
        try:
            yield
        finally:
            window.release()

    def hold_s(self, node: str) -> float:
        """How long ``node`` holds a block on its way (or a probe's): ``hold_s``, or less where it allows less."""
        return min(self.config.hold_s, self.config.hold_s_at.get(node, self.config.hold_s))

    def _lifetime(self, node: str) -> float:
        """How long a block's allocation at ``node`` is asked for: its duration at the destination, else a hold."""
        return self.config.duration_s if node == self.dest else self.hold_s(node)

    async def _allocate(self, node: str) -> Allocation:
        if node in self.dead:
            raise _HopFailed(f"{node} has failed")
        pool = self._pools.get(node)
        if pool is None:
            batch = min(self.config.max_inflight, 8)
            pool = self._pools[node] = _Pool(
                self.clients[node], self.config.block_size, self._lifetime(node), batch,
                patience_s=self.config.space_wait_s, name=node, on_wait=partial(self._space_wait, node),
                on_allocated=self.allocated,
                # Blocks stay at the destination; elsewhere a block's allocation carries later blocks. A depot
                # holds a block until it is two depots further on, so about as many as the relay admits at once.
                keep=0 if node == self.dest else 4 * self.config.max_inflight,
                blocks_left=self._blocks_to_send,
            )
        try:
            return await pool.take()
        except (DepotError, DepotUnreachable) as exc:
            if _refused(exc):
                raise DepotRefused(node, exc) from None
            await self._blame((node, node), exc)
            raise _HopFailed(f"allocating at {node}: {exc}") from None

    async def _pass_on(self, holder: tuple[str, Allocation | None]) -> None:
        """A block has moved on from ``holder`` safely: its allocation goes back to the depot's pool for a later
        block, else is freed. (After a failure an allocation is freed, never kept: a write or push cut off on
        the client's side may still run at the depot.)"""
        node, alloc = holder
        if alloc is None or node in self.dead:
            return
        pool = self._pools.get(node)
        if pool is None or not pool.give_back(alloc, self.clock()):
            await self._release(holder)

    async def _release(self, holder: tuple[str, Allocation | None]) -> None:
        node, alloc = holder
        if alloc is None or node in self.dead:
            return
        try:
            await self.clients[node].free(alloc.manage)
        except (DepotError, DepotUnreachable):
            pass  # already gone, or it expires on its own

    def _note(self, text: str) -> None:
        self.on_event(Note(text, self.clock()))

    def allocated(self, allocations: Sequence[Allocation]) -> None:
        """Report allocations the relay (a block's pool, or a probe) took at one depot (``Allocated``)."""
        if allocations:
            self.on_event(Allocated(allocations[0].depot, tuple(a.manage for a in allocations), self.clock()))

    def room_made(self, node: str, blocks: int = 1) -> None:
        """Room for about ``blocks`` blocks was freed at ``node`` (with ``--follow``, the receiver drained them at
        the destination): a block waiting for an allocation there asks again at once instead of at its next poll,
        for that many allocations in one request."""
        pool = self._pools.get(node)
        if pool is not None:
            pool.room_made(blocks)

    def _space_wait(self, node: str, waiting: bool) -> None:
        """A depot is full (or has room again): said to ``on_event``; meanwhile the scheduler does not move the
        transfer, since a full depot says nothing of the paths' rates."""
        if waiting:
            self.engine.full.add(node)
        else:
            self.engine.full.discard(node)
        self.on_event(SpaceWait(node, waiting, self.clock()))

    def _trace_event(self, event: Measurement | HopFailure | DepotFailure | ProbeDone) -> None:
        if self.config.trace:
            kind, data = trace_event(event, self._since_start(), probing=self._probing)
            self.on_event(Traced(kind, data, event.at))

    def _trace_decision(self, decision: Decision, now: float) -> None:
        if self.config.trace and self.scheduler is not None:
            data = trace_decision(decision, self.scheduler, now, self._since_start())
            if data is not None:
                self.on_event(Traced("decision", data, now))


def block_spans(size: int, block_size: int) -> list[tuple[int, int]]:
    """A file of ``size`` bytes cut into blocks: each block's (offset, length), in order."""
    return [(offset, min(block_size, size - offset)) for offset in range(0, size, block_size)]


def _read_exactly(fd: int, offset: int, length: int) -> bytes:
    data = os.pread(fd, length, offset)
    if len(data) != length:
        raise TransferFailed(f"short read at {offset}: the file shrank while being sent")
    return data


def _read_into_and_hash(fd: int, view: memoryview, offset: int, algorithm: str) -> str:
    """Fill ``view`` from the file at ``offset``; returns its hash."""
    filled = 0
    while filled < len(view):
        got = os.preadv(fd, [view[filled:]], offset + filled)
        if got == 0:
            raise TransferFailed(f"short read at {offset + filled}: the file shrank while being sent")
        filled += got
    return hash_bytes(algorithm, view)


def _read_span_and_hash(
    read: Callable[[int, int], bytes], offset: int, length: int, algorithm: str
) -> tuple[bytes, str]:
    data = read(offset, length)
    return data, hash_bytes(algorithm, data)


def _path_set(decision: Keep | Switch | DropDepot) -> tuple[tuple[Route, ...], tuple[float, ...]]:
    """A decision's set of paths (the primary first) and their predicted rates, empty when it has none for each."""
    paths = tuple(tuple(path) for path in decision.all_paths)
    rates = tuple(decision.rates)
    return paths, (rates if len(rates) == len(paths) else ())


class _HopFailed(Exception):
    """One hop of one block failed; the block is re-routed from its nearest holder."""
