"""The publication: the one URL ``lnet-send`` hands to the far end, kept up to date at the destination depot.

``Publisher`` keeps the document ``lnet.client.formats.published`` describes in an allocation at the destination,
rewriting it as blocks land (at most every ``PUBLISH_INTERVAL_S``), and, with ``--follow``, reads the receiver's
drain record beside it: the blocks the receiver has on its disk and freed, which leave the publication and make
room at the destination for the next ones. It is the I/O shell; what goes into each version
(``PublicationState``) is pure.

The allocations are made once, before any block moves, and are sized for the largest version the transfer can
need (``plan_sizes``): the whole manifest without ``--follow``; with it, the blocks the destination can hold at
once, and for a tree a third allocation, the tree's shape (its entries and pieces, written once: the receiver
reads it at the start). Their capabilities go into the send journal, so that a resumed ``lnet-send`` keeps
publishing at the same URL while the receiver keeps running.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import trio

from lnet.client.formats import published
from lnet.client.formats.published import Drained, Publication, PublishedBlock, SenderState
from lnet.client.sending.relay import BlockRecord, TransferFailed
from lnet.client.wire.depot_client import Allocation, DepotClient, DepotUnreachable
from lnet.protocol import DepotError, NotFound, redact

__all__ = [
    "PUBLISH_INTERVAL_S",
    "Published",
    "PublicationCaps",
    "PublicationPlan",
    "PublicationState",
    "Publisher",
    "ReceiverGone",
    "ReceiverProgress",
    "plan_sizes",
]

PUBLISH_INTERVAL_S = 0.1
"""How often the publication is rewritten while something changed, and the drain record read (``--follow``)."""
_TRIES = 3


class ReceiverGone(TransferFailed):
    """``--follow``: the receiver drained nothing for longer than the wait allows, with blocks still to publish."""


@dataclass(frozen=True)
class Published:
    """The publication is in place: ``url`` is what the far end is given (``lnet-get URL``)."""

    url: str
    follow: bool
    at: float


@dataclass(frozen=True)
class ReceiverProgress:
    """``--follow``: what the receiver's drain record says (blocks and bytes on its disk, its state)."""

    drained: int
    drained_bytes: int
    state: str
    message: str | None
    at: float


@dataclass(frozen=True, repr=False)
class PublicationCaps:
    """The publication's allocation and, with ``--follow``, the drain record's and, for a tree, its shape's, at the
    destination ``depot``."""

    depot: str
    document: Allocation
    drained: Allocation | None
    tree: Allocation | None = None

    def __repr__(self) -> str:  # capabilities are secrets
        return f"PublicationCaps(depot={self.depot!r}, read={redact(self.document.read)})"

    @property
    def url(self) -> str:
        """The read URL handed to the far end."""
        return self.document.read_url

    def to_dict(self) -> dict[str, Any]:
        def one(a: Allocation) -> dict[str, Any]:
            return {"read": a.read, "write": a.write, "manage": a.manage, "size": a.size, "expires": a.expires,
                    "reliability": a.reliability}

        return {"depot": self.depot, "document": one(self.document),
                "drained": None if self.drained is None else one(self.drained),
                "tree": None if self.tree is None else one(self.tree)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> PublicationCaps:
        """From ``to_dict`` (the journal's line; ``KeyError``/``TypeError``/``ValueError`` for a damaged one). A
        line without ``tree`` is a publication without a tree's shape."""
        def one(value: Mapping[str, Any] | None) -> Allocation | None:
            if value is None:
                return None
            return Allocation(str(raw["depot"]), str(value["read"]), str(value["write"]), str(value["manage"]),
                              int(value["size"]), float(value["expires"]), str(value["reliability"]))

        document = one(raw["document"])
        if document is None:
            raise ValueError("the publication's allocation is missing")
        return cls(str(raw["depot"]), document, one(raw["drained"]), one(raw.get("tree")))


@dataclass(frozen=True)
class PublicationPlan:
    """What a publication describes and how large its allocations are (``plan_sizes``)."""

    name: str
    kind: str
    spans: tuple[tuple[int, int], ...]
    block_size: int
    hash_algorithm: str
    follow: bool
    tree: dict[str, Any] | None
    """With ``--follow``, a tree's shape (``{"entries": ..., "blocks": ...}``), else None."""
    document_size: int
    drained_size: int
    listed_max: int
    """With ``--follow``, the most blocks one version lists (the allocation's room); the rest wait their turn."""
    tree_size: int = 0
    """With ``--follow``, the bytes of a tree's shape allocation (its framed document, written once)."""

    @property
    def size(self) -> int:
        return sum(length for _, length in self.spans)

    @property
    def needed(self) -> int:
        """The destination's bytes the publication's allocations take."""
        return self.document_size + self.drained_size + self.tree_size

    def tree_framed(self) -> bytes:
        """The tree's shape as written into its allocation."""
        assert self.tree is not None
        return published.frame(published.tree_document(self.tree))


_MANIFEST_BLOCK_BYTES = 300
"""A bound on one block's JSON in a manifest, besides its depot URL (a hash, a capability, numbers, keys)."""


def plan_sizes(
    *, name: str, kind: str, spans: Sequence[tuple[int, int]], block_size: int, hash_algorithm: str, follow: bool,
    tree: dict[str, Any] | None, depot_url: str, capacity: int | None,
) -> PublicationPlan:
    """The allocations' sizes. Without ``--follow`` the final version holds the whole manifest: every block, each
    naming the depot, and a tree's entries; with it, at most the blocks the destination's ``capacity`` can hold
    at once (by the smallest block but the last), and a tree's entries and pieces go into an allocation of their
    own, sized to the framed document."""
    import json

    if not follow:
        extra = len(json.dumps(tree, separators=(",", ":"))) if tree is not None else 0
        per_block = _MANIFEST_BLOCK_BYTES + len(depot_url)
        size = 16 * 1024 + len(spans) * per_block + extra
        return PublicationPlan(name, kind, tuple(spans), block_size, hash_algorithm, False, None, size, 0, 0)
    lengths = [length for _, length in spans[:-1]] or [block_size]
    at_once = len(spans) if capacity is None else math.ceil(capacity / max(1, min(lengths))) + 1
    listed = max(1, min(len(spans), at_once))
    plan = PublicationPlan(name, kind, tuple(spans), block_size, hash_algorithm, True, tree,
                           published.publication_size(listed, 0), published.drained_size(len(spans)), listed)
    return plan if tree is None else replace(plan, tree_size=len(plan.tree_framed()))


@dataclass
class PublicationState:
    """What the next version of the publication says (pure: records in, documents out)."""

    plan: PublicationPlan
    depot: str
    ack: str | None
    created: float
    tree_url: str | None = None
    landed_blocks: int = 0
    landed_bytes: int = 0
    pending: dict[int, BlockRecord] = field(default_factory=dict)
    """``--follow``: the landed blocks the receiver has not drained (a few depots' worth, never the whole file)."""
    drained: Drained = field(default_factory=Drained)
    seq: int = 0
    waiting: str | None = None
    stopped: bool = False
    file_hash: str | None = None
    manifest: dict[str, Any] | None = None

    @property
    def final(self) -> bool:
        return self.file_hash is not None

    def land(self, record: BlockRecord) -> None:
        """A block verified at the destination (or found there on a resume)."""
        self.landed_blocks += 1
        self.landed_bytes += record.length
        if self.plan.follow and record.index not in self.drained:
            self.pending[record.index] = record

    def drain(self, drained: Drained) -> None:
        """The receiver's latest drain record: what it lists leaves the publication."""
        self.drained = drained
        for index in [index for index in self.pending if index in drained]:
            del self.pending[index]

    def listed(self) -> list[BlockRecord]:
        """``--follow``: what the next version lists: the pending blocks by index, as many as it has room for."""
        return [self.pending[index] for index in sorted(self.pending)[: self.plan.listed_max]]

    def unlisted(self) -> int:
        """``--follow``: landed blocks that wait for room in the publication."""
        return max(0, len(self.pending) - self.plan.listed_max)

    def document(self, now: float) -> Publication:
        plan = self.plan
        listed = tuple(
            PublishedBlock(r.index, r.offset, r.length, r.hash, r.allocation.read, r.allocation.manage,
                           r.allocation.expires)
            for r in self.listed()
        )
        state = "stopped" if self.stopped else "done" if self.final else "waiting" if self.waiting else "sending"
        sender = SenderState(state, self.landed_blocks, self.landed_bytes, self.waiting)
        return Publication(
            plan.name, plan.kind, plan.size, plan.block_size, len(plan.spans), plan.hash_algorithm, plan.follow,
            self.depot, self.created, now, self.seq, sender, self.ack, listed, self.final, self.file_hash,
            self.tree_url if plan.follow else None, None if plan.follow else self.manifest,
        )


class Publisher:
    """The publication of one transfer at its destination, through ``client`` (the destination's)."""

    def __init__(
        self, client: DepotClient, plan: PublicationPlan, *, duration_s: float,
        on_receiver: Callable[[ReceiverProgress], None] | None = None, clock: Callable[[], float] = time.time,
    ) -> None:
        self.client, self.plan, self.duration_s = client, plan, duration_s
        self.on_receiver = on_receiver or (lambda progress: None)
        self.on_room: Callable[[int], None] = lambda blocks: None
        """Called when the receiver drained more blocks: room at the destination (the relay asks again at once)."""
        self.clock = clock
        self.caps: PublicationCaps | None = None
        self.state = PublicationState(plan, client.base_url, None, clock())
        self._changed = trio.Event()
        self._drain_seen = -1
        self._last_key: tuple[Any, ...] | None = None

    # -- the allocations -----------------------------------------------------------------------------------------

    async def open(self, previous: PublicationCaps | None) -> PublicationCaps:
        """The publication's allocations: ``previous`` (a resumed transfer's) when the depot still has them and
        they fit this transfer, else new ones; then its first version."""
        if previous is not None and await self._still_there(previous):
            self.caps = previous
        else:
            document = await self.client.allocate_one(self.plan.document_size, self.duration_s)
            drained = shape = None
            if self.plan.follow:
                drained = await self.client.allocate_one(self.plan.drained_size, self.duration_s)
                await self.client.write(drained.write, Drained(updated=self.clock()).framed(), offset=0)
            if self.plan.follow and self.plan.tree is not None:
                shape = await self.client.allocate_one(self.plan.tree_size, self.duration_s)
                await self.client.write(shape.write, self.plan.tree_framed(), offset=0)
            self.caps = PublicationCaps(self.client.base_url, document, drained, shape)
        self.state.ack = None if self.caps.drained is None else self.caps.drained.write_url
        self.state.tree_url = None if self.caps.tree is None else self.caps.tree.read_url
        await self.sync(force=True)
        return self.caps

    async def _still_there(self, caps: PublicationCaps) -> bool:
        """Whether a resumed transfer's allocations are still at the depot and fit this plan (the tree's shape is
        the same: the journal's check of the source found the stream unchanged, so it is not written again)."""
        if caps.depot.rstrip("/") != self.client.base_url.rstrip("/") or (caps.drained is not None) != self.plan.follow:
            return False
        if (caps.tree is not None) != (self.plan.follow and self.plan.tree is not None):
            return False
        if caps.document.size < self.plan.document_size or (
                caps.drained is not None and caps.drained.size < self.plan.drained_size) or (
                caps.tree is not None and caps.tree.size != self.plan.tree_size):
            return False
        try:
            for alloc in (caps.document, caps.drained, caps.tree):
                if alloc is not None:
                    await self.client.probe(alloc.manage)
        except NotFound:
            return False
        return True

    # -- what changes ---------------------------------------------------------------------------------------------

    def landed(self, record: BlockRecord) -> None:
        """A block was verified at the destination (or found there on a resume)."""
        self.state.land(record)
        self._changed.set()

    def waiting(self, depot: str | None) -> None:
        """The relay waits for room at ``depot`` (None: no longer)."""
        if depot != self.state.waiting:
            self.state.waiting = depot
            self._changed.set()

    @property
    def drained(self) -> Drained:
        return self.state.drained

    # -- keeping it up to date -------------------------------------------------------------------------------------

    async def keep_published(self) -> None:
        """Rewrite the publication whenever something changed, and read the drain record, every
        ``PUBLISH_INTERVAL_S`` (run beside the relay; cancel it after). A failed rewrite is tried again at the
        next round: the relay meets a failing destination on its own."""
        while True:
            with trio.move_on_after(PUBLISH_INTERVAL_S):
                await self._changed.wait()
                await trio.sleep(PUBLISH_INTERVAL_S / 5)  # a few blocks landing together make one version
            try:
                await self.sync()
            except (DepotError, DepotUnreachable):
                pass

    async def sync(self, *, force: bool = False) -> None:
        """Read the drain record (``--follow``) and write a new version if anything changed."""
        self._changed = trio.Event()
        if self.caps is not None and self.caps.drained is not None:
            await self._read_drained(self.caps.drained)
        if force or self._dirty():
            await self._write()

    def _dirty(self) -> bool:
        state = self.state
        key = (state.landed_blocks, tuple(r.index for r in state.listed()), state.stopped, state.waiting,
               state.final)
        if key != self._last_key:
            self._last_key = key
            return True
        return False

    async def _write(self) -> None:
        assert self.caps is not None
        self.state.seq += 1
        data = self.state.document(self.clock()).framed()
        if len(data) > self.caps.document.size:
            raise TransferFailed(f"the publication outgrew its allocation ({len(data)} > {self.caps.document.size} "
                                 "bytes)")
        await self.client.write(self.caps.document.write, data, offset=0)

    async def _read_drained(self, alloc: Allocation) -> None:
        data = await self.client.read(alloc.read)
        try:
            document = published.unframe(data, published.DRAINED_FORMAT)
            if document is None:
                return  # the receiver is writing it: read at the next round
            drained = published.parse_drained(document)
        except published.PublishedError:
            return  # not the receiver's doing (its write is checked): the last good one stands
        if drained.seq <= self._drain_seen and drained.seq != 0:
            return
        self._drain_seen = drained.seq
        more = drained.count - self.state.drained.count
        self.state.drain(drained)
        if more > 0:
            self.on_room(more)
        self.on_receiver(ReceiverProgress(drained.count, drained.drained_bytes, drained.state, drained.message,
                                          self.clock()))

    # -- the end ------------------------------------------------------------------------------------------------

    async def finish(self, file_hash: str, manifest: dict[str, Any] | None) -> None:
        """The last version: the whole file's hash, and without ``--follow`` the whole manifest."""
        self.state.file_hash, self.state.manifest, self.state.waiting = file_hash, manifest, None
        await self._tried(lambda: self.sync(force=True))

    async def until_listed(self, wait_s: float, on_wait: Callable[[int], None]) -> None:
        """``--follow``: return once every landed block is listed (or drained), reading the drain record as the
        receiver frees room; ``on_wait(unlisted)`` while it waits. ``ReceiverGone`` when the receiver drains
        nothing for ``wait_s``."""
        last = (self.state.drained.count, trio.current_time())
        while (unlisted := self.state.unlisted()) > 0:
            on_wait(unlisted)
            await trio.sleep(PUBLISH_INTERVAL_S)
            await self._tried(self.sync)
            now = trio.current_time()
            if self.state.drained.count != last[0]:
                last = (self.state.drained.count, now)
            elif now - last[1] >= wait_s:
                raise ReceiverGone(
                    f"the receiver drained nothing for {wait_s:.0f} s (--space-wait) with {unlisted} blocks still "
                    f"to publish at {self.client.base_url}")

    async def stopped(self, timeout_s: float) -> None:
        """Say in the publication that this sender stopped (best effort, bounded): the receiver waits for a resume."""
        if self.caps is None:
            return
        self.state.stopped = True
        with trio.move_on_after(timeout_s), trio.CancelScope(shield=True):
            try:
                await self._write()
            except (DepotError, DepotUnreachable, TransferFailed):
                pass

    async def _tried(self, step: Callable[[], Any]) -> None:
        for attempt in range(_TRIES):
            try:
                await step()
                return
            except (DepotError, DepotUnreachable):
                if attempt == _TRIES - 1:
                    raise
                await trio.sleep(0.5 * (attempt + 1))
