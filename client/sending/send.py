"""``send``: move a file (or a tree's packed stream) to a far depot through a chain of depots.

The I/O shell around ``Relay`` (the pipeline) and ``PathScheduler`` (the choice of chain): checks that the
depots answer and fits the transfer to their limits (``fit_to_limits``, pure: what each depot's ``/v1/status``
says it allows), then runs the transfer, reporting to ``on_event``. With a send journal
(``lnet.client.sending.resume``) it records every block delivered, so that the same command, run again after an
interruption, sends only what the destination lacks. ``send_from_replicas`` sends a file while it arrives from
its replicas. The rest are the pieces the command's outcome is made of (``build_manifest``, ``summary``,
``save_report``, ``failure_exit``, ...); the command (``lnet.client.commands``) writes and prints them.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio

from lnet.client.exits import ExitCode
from lnet.client.fetching import mirrors
from lnet.client.formats import published, report
from lnet.client.formats.manifest import BlockEntry, BlockSource, Manifest
from lnet.client.formats.overlay import Overlay, url_key
from lnet.client.sending.publish import (
    PublicationCaps,
    PublicationPlan,
    Published,
    Publisher,
    ReceiverProgress,
    plan_sizes,
)
from lnet.client.sending.relay import (
    BlockDamaged,
    BlockDelivered,
    BlockRecord,
    DepotRefused,
    Note,
    Offload,
    PathShares,
    Relay,
    RelayConfig,
    RelayEvent,
    RelayResult,
    SpaceWait,
    Stream,
    block_spans,
)
from lnet.client.sending.relay import TransferFailed as RelayFailed
from lnet.client.sending.resume import (
    ResumeRefused,
    SendJournal,
    resume_command,
)
from lnet.client.wire.depot_client import DepotClient, DepotUnreachable
from lnet.client.wire.range_connection import Connector
from lnet.protocol import DepotError, DepotFull, innermost
from lnet.protocol.clock import TrioWallClock
from lnet.scheduler import EdgeMemory, PathScheduler, SchedulerConfig
from lnet.units import format_size

__all__ = [
    "DepotLimits",
    "PublishOptions",
    "SendEvent",
    "SendError",
    "SendOptions",
    "build_manifest",
    "failure_exit",
    "final_path",
    "fit_to_limits",
    "interrupted",
    "over_text",
    "peer_round_trips",
    "save_report",
    "send",
    "send_from_replicas",
    "shares_text",
    "source_name",
    "summary",
]

STATUS_CHECKS = 64
"""Depots asked for their status at once before a transfer: a directory may list hundreds."""

SendEvent = RelayEvent | Published | ReceiverProgress
"""What ``send`` tells its ``on_event``: the relay's events, the publication's URL, the receiver's progress."""


@dataclass(frozen=True)
class PublishOptions:
    """What the publication at the destination describes (``lnet.client.sending.publish``): the transfer's
    ``name`` and ``kind`` (``file`` or ``tree``), whether a receiver follows it (``--follow``), a tree's entries
    and pieces (``{"entries": ..., "blocks": ...}``, for ``--follow``: the shape's allocation beside the
    publication), and ``manifest_of``, the whole manifest document the final version holds without ``--follow``."""

    name: str
    kind: str = "file"
    follow: bool = False
    tree: dict[str, Any] | None = None
    manifest_of: Callable[[RelayResult], dict[str, Any]] | None = None


class SendError(Exception):
    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code


# -- the depots' limits ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DepotLimits:
    """What a depot lends at most, from its ``/v1/status``; None where it does not say (then nothing is checked)."""

    max_allocation: int | None = None
    max_duration: float | None = None
    digests: frozenset[str] | None = None
    """The hashes its digest computes; a status without ``digests`` is from a depot that knew sha256 and blake2b."""
    capacity: int | None = None
    free: int | None = None
    """Bytes it can lend now: its capacity less what live allocations hold (pooled buffers give way)."""

    @classmethod
    def from_status(cls, status: Mapping[str, Any]) -> DepotLimits:
        def number(key: str) -> float | None:
            value = status.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                return None
            return float(value)

        allocation = number("max_allocation")
        digests = status.get("digests", ["sha256", "blake2b"])
        known = frozenset(name for name in digests if isinstance(name, str)) if isinstance(digests, list) else None
        capacity = number("capacity")
        used = status.get("used")
        free = None
        if capacity is not None and isinstance(used, int) and not isinstance(used, bool) and used >= 0:
            free = max(0, int(capacity) - used)
        return cls(int(allocation) if allocation is not None else None, number("max_duration"), known,
                   int(capacity) if capacity is not None else None, free)


def _seconds(value: float) -> str:
    """``3600.0`` -> ``"1h"``: a duration as ``--duration`` takes it."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if value >= size and value % size == 0:
            return f"{value / size:g}{unit}"
    return f"{value:g}s"


def _too_large(block_size: int, depot: str, limit: int) -> SendError:
    return SendError(ExitCode.USAGE, f"--block-size {format_size(block_size)} is over depot {depot}'s "
                     f"max_allocation of {format_size(limit)} ({limit} bytes): give --block-size {limit} or less")


def fit_to_limits(
    config: RelayConfig,
    limits: Mapping[str, DepotLimits],
    dest: str,
    pinned: Sequence[str] | None,
    *,
    longest_duration: bool,
) -> tuple[RelayConfig, dict[str, str]]:
    """The transfer fitted to what its depots allow, before any block moves; and, for an adaptive transfer, the
    depots left out of the candidates (name -> why). Raises ``SendError`` (usage) when it cannot fit.

    ``longest_duration``: ``config.duration_s`` is the most wanted (``--duration`` not given) and is shortened to
    the destination's max_duration; otherwise it is asked for as it is, and over that limit it fails. Blocks
    pass intermediate depots held for ``config.hold_s``, cut to each one's max_duration. Every depot a block may
    cross must take ``config.block_size`` in one allocation: on a pinned path that is every depot on it; an
    adaptive transfer leaves out the depots that cannot (the destination must)."""
    target = limits.get(dest, DepotLimits())
    if target.digests is not None and config.hash_algorithm not in target.digests:
        known = ", ".join(sorted(target.digests)) or "none"
        raise SendError(
            ExitCode.USAGE, f"depot {dest} cannot check blocks with {config.hash_algorithm} (its digests: {known}; a "
            f"depot older than lnet's blake3 support has only sha256 and blake2b): give --hash sha256, or upgrade it",
        )
    duration = config.duration_s
    if target.max_duration is not None and duration > target.max_duration:
        if not longest_duration:
            raise SendError(
                ExitCode.USAGE, f"--duration {_seconds(duration)} is over depot {dest}'s max_duration of "
                f"{_seconds(target.max_duration)}: give --duration {_seconds(target.max_duration)} or less, "
                f"or leave --duration out to take the longest {dest} allows",
            )
        duration = target.max_duration
    block = config.block_size
    excluded: dict[str, str] = {}
    on_path = pinned[1:] if pinned is not None else [dest]
    for name in on_path:
        largest = limits.get(name, DepotLimits()).max_allocation
        if largest is not None and largest < block:
            raise _too_large(block, name, largest)
    if pinned is None:
        for name, limit in limits.items():
            if name != dest and limit.max_allocation is not None and limit.max_allocation < block:
                excluded[name] = (f"left out: its max_allocation of {format_size(limit.max_allocation)} is under "
                                  f"--block-size {format_size(block)}")
            elif name != dest and limit.free is not None and limit.free < block:
                excluded[name] = (f"left out: it has {format_size(limit.free)} free, less than one block "
                                  f"(--block-size {format_size(block)})")
    holds = {  # the destination's too: probes' blocks are held there
        name: limit.max_duration
        for name, limit in limits.items()
        if limit.max_duration is not None and limit.max_duration < config.hold_s
    }
    return replace(config, duration_s=duration, hold_s_at={**config.hold_s_at, **holds}), excluded


def peer_round_trips(statuses: Mapping[str, Mapping[str, Any]], url_to_vertex: Mapping[str, str]) -> dict[
    tuple[str, str], float
]:
    """The round trips the depots measured to their peers, from their ``/v1/status``: ``round_trips`` (timed in
    the background, lnet.depot.round_trips) and ``links`` (TCP's own figure on their pushes), the smaller where
    both name a pair, in seconds by (depot, peer) vertex. Peers not in the overlay and malformed entries are
    left out; they only rank the edges a transfer has not measured (``PathScheduler``'s ``peer_rtt_s``)."""
    vertices = {url_key(url): vertex for url, vertex in url_to_vertex.items()}
    pairs: dict[tuple[str, str], float] = {}
    for name, status in statuses.items():
        for key in ("round_trips", "links"):
            entries = status.get(key)
            for entry in entries if isinstance(entries, list) else ():
                if not isinstance(entry, dict) or not isinstance(entry.get("to"), str):
                    continue
                rtt_ms = entry.get("rtt_ms")
                peer = vertices.get(url_key(entry["to"]))
                if peer is None or peer == name or isinstance(rtt_ms, bool) or not isinstance(rtt_ms, int | float):
                    continue
                if 0 < rtt_ms < math.inf:
                    pairs[(name, peer)] = min(pairs.get((name, peer), math.inf), rtt_ms / 1000)
    return pairs


def check_room(
    dest: str, limits: DepotLimits, plan: PublicationPlan, *, remaining: int, block_size: int, subject: str,
) -> None:
    """Before any block moves: can the destination take what the transfer needs? Without ``--follow`` every
    block still to send stays there, beside the publication; with it, the publication and one block at a time
    (the receiver drains the rest). ``SendError`` (exit 3) with the numbers and the remedies when it cannot; a
    status that does not state its room is not checked. Pure."""
    free, capacity = limits.free, limits.capacity
    largest = limits.max_allocation
    if largest is not None and plan.document_size > largest:
        raise SendError(ExitCode.USAGE, f"the publication of {len(plan.spans)} blocks needs one allocation of "
                        f"{format_size(plan.document_size)}, over depot {dest}'s max_allocation of "
                        f"{format_size(largest)}: give a larger --block-size")
    if largest is not None and plan.tree_size > largest:
        raise SendError(ExitCode.USAGE, f"the tree's entries and pieces need one allocation of "
                        f"{format_size(plan.tree_size)}, over depot {dest}'s max_allocation of "
                        f"{format_size(largest)}: send the tree without --follow, or to a depot that lends more")
    if free is None:
        return
    if plan.follow:
        need = plan.needed + min(block_size, max(remaining, 1))
        if free < need:
            raise SendError(ExitCode.UNREACHABLE, f"the destination {dest} has {format_size(free)} free (of "
                            f"{format_size(capacity or 0)}), less than one block and the publication need "
                            f"({format_size(need)}): free room there, or send to another depot")
        return
    need = remaining + plan.needed
    if free < need:
        raise SendError(
            ExitCode.UNREACHABLE,
            f"{subject} is {format_size(plan.size)}"
            + (f" ({format_size(remaining)} still to send)" if remaining != plan.size else "")
            + f", but the destination {dest} has {format_size(free)} free (of {format_size(capacity or 0)}): it "
            f"cannot hold the file whole. Send it with --follow and run the receiver at the far end (lnet-send "
            f"prints its command), which drains {dest} as the blocks land; or send to a depot with "
            f"{format_size(need)} free",
        )


async def send(
    file: Path | Stream,
    overlay: Overlay,
    dest: str,
    *,
    pinned: Sequence[str] | None,
    memory: EdgeMemory,
    warm: bool,
    relay_config: RelayConfig,
    scheduler_config: SchedulerConfig | None = None,
    timeout_s: float = 30.0,
    on_event: Callable[[SendEvent], None] | None = None,
    available: Callable[[int, int], Awaitable[None]] | None = None,
    longest_duration: bool = False,
    journal: SendJournal | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    offload: Offload | None = None,
    publish: PublishOptions | None = None,
    membership: Callable[[Relay], Awaitable[None]] | None = None,
) -> tuple[RelayResult, PathScheduler | None, list[str]]:
    """Run one transfer; returns the relay's result, the scheduler (None when pinned) and the depots skipped.
    With ``publish``, the transfer keeps its publication at the destination (``lnet.client.sending.publish``:
    ``Published`` says its URL first; with ``follow``, ``ReceiverProgress`` what the receiver drained), checks
    before any block moves that the destination has room for it (``check_room``), and returns once the last
    version is written (with ``follow``, once every block is listed for the receiver).
    ``transport`` carries the depot requests (None: the network); ``offload`` runs the source's reads and hashes
    (None: worker threads; tests on a mock clock run them inline).

    The depots' limits are read from their status first and the transfer fitted to them (``fit_to_limits``; its
    ``longest_duration``): a transfer that cannot fit fails with ``SendError`` before any block moves. With a
    ``journal`` (begun), the blocks an interrupted run left at the destination are checked and not sent again
    (reported as delivered at the start), and every block delivered now is recorded in it."""
    clock = TrioWallClock()
    clients = {
        name: DepotClient(entry.url, token=entry.token, timeout=timeout_s, transport=transport)
        for name, entry in overlay.depots.items()
    }
    try:
        alive: dict[str, bool] = {}
        statuses: dict[str, dict[str, Any]] = {}
        rtt_s: dict[str, float] = {}

        checking = trio.CapacityLimiter(STATUS_CHECKS)

        async def check(name: str) -> None:
            async with checking:
                try:
                    statuses[name] = await clients[name].status()
                    alive[name] = True
                except Exception:  # noqa: BLE001 - any failure here means: do not use this depot
                    alive[name] = False
                    return
                # The round trip on the now open connection: it orders the scheduler's exploration.
                began = trio.current_time()
                if await clients[name].healthy():
                    rtt_s[name] = trio.current_time() - began

        async with trio.open_nursery() as nursery:
            for name in clients:
                nursery.start_soon(check, name)
        if not alive[dest]:
            url = overlay.depots[dest].url
            raise SendError(ExitCode.UNREACHABLE, f"the destination {dest} ({url}) does not answer")
        skipped = sorted(name for name, ok in alive.items() if not ok)
        if pinned is not None:
            down = [name for name in pinned[1:] if not alive[name]]
            if down:
                raise SendError(ExitCode.UNREACHABLE, f"depot(s) on the pinned path do not answer: {', '.join(down)}")
        relay_config, excluded = fit_to_limits(
            relay_config, {name: DepotLimits.from_status(status) for name, status in statuses.items()}, dest,
            pinned, longest_duration=longest_duration,
        )
        for name, why in sorted(excluded.items()):
            if on_event is not None:
                on_event(Note(f"depot {name} {why}", clock()))
        if warm:
            now = clock()
            url_to_vertex = overlay.url_to_vertex()
            depth = (relay_config.min_inflight, relay_config.max_inflight) if relay_config.adaptive else None
            for name, status in statuses.items():
                links = status.get("links")
                if isinstance(links, list):
                    memory.seed_from_links(name, links, url_to_vertex, now, depth=depth)
        scheduler = None
        if pinned is None:
            vertices = [overlay.here, *(name for name in clients if alive[name] and name not in excluded)]
            # Weights are per stream, times the blocks the relay keeps in flight on a hop; with the depth rule,
            # the fewest it keeps is what a one-stream probe's ceiling extrapolates to.
            # The block size and the relay's first depth: a path whose fill would end after the transfer is not
            # taken (``SchedulerConfig.block_bytes``; the relay tells the scheduler the bytes left).
            config = replace(scheduler_config or SchedulerConfig(), streams=relay_config.max_inflight,
                             min_streams=relay_config.min_inflight, block_bytes=relay_config.block_size,
                             first_depth=relay_config.initial_inflight)
            scheduler = PathScheduler(vertices, overlay.here, dest, memory, config, rtt_s=rtt_s,
                                      peer_rtt_s=peer_round_trips(statuses, overlay.url_to_vertex()))
            left_out = len(vertices) - len(scheduler.vertices)
            if left_out and on_event is not None:
                on_event(Note(f"{len(scheduler.vertices) - 1} of the {len(vertices) - 1} depots that answered are "
                              f"this transfer's candidates (the ways the memory knows, then the best placed by "
                              f"round trip); {left_out} left out", clock()))
        delivered: dict[int, BlockRecord] = {}
        previous: PublicationCaps | None = None
        drained: frozenset[int] = frozenset()
        if journal is not None and journal.publication is not None and publish is not None:
            previous, drained = await _previous_publication(clients[dest], journal.publication, publish.follow)
        if journal is not None:
            delivered = await journal.prepare(clients[dest], file, available, offload=offload, drained=drained,
                                              depots={client.base_url: client for client in clients.values()})
        publisher = None
        if publish is not None:
            spans = file.spans if isinstance(file, Stream) else block_spans(os.stat(file).st_size,
                                                                            relay_config.block_size)
            room = DepotLimits.from_status(statuses[dest])
            plan = plan_sizes(
                name=publish.name, kind=publish.kind, spans=spans, block_size=relay_config.block_size,
                hash_algorithm=relay_config.hash_algorithm, follow=publish.follow, tree=publish.tree,
                depot_url=overlay.depots[dest].url, capacity=room.capacity,
            )
            remaining = plan.size - sum(record.length for record in delivered.values())
            check_room(dest, room, plan if previous is None else replace(
                plan, document_size=0, drained_size=0, tree_size=0), remaining=remaining,
                block_size=relay_config.block_size, subject=publish.name)
            publisher = Publisher(clients[dest], plan, duration_s=relay_config.duration_s, on_receiver=on_event,
                                  clock=time.time)
            try:
                caps = await publisher.open(previous)
            except DepotFull:
                raise SendError(ExitCode.UNREACHABLE, f"the destination {dest} has no room for the publication "
                                f"({format_size(plan.needed)}): free room there, or send to another depot") from None
            except DepotUnreachable as exc:
                raise SendError(ExitCode.UNREACHABLE, f"the destination {dest} does not answer: {exc}") from None
            except DepotError as exc:
                raise DepotRefused(dest, exc) from None
            if journal is not None:
                journal.publish(caps.to_dict())
            if on_event is not None:
                on_event(Published(caps.url, publish.follow, clock()))
        for index, record in sorted(delivered.items()):
            if publisher is not None:
                publisher.landed(record)
            if on_event is not None:
                on_event(BlockDelivered(index, record.length, clock(), record))
        relay_events: Callable[[RelayEvent], None] | None = on_event
        if journal is not None:
            relay_events = journal.recording(relay_events)
        if publisher is not None:
            relay_events = _publishing(publisher, dest, relay_events)
        relay = Relay(
            file,
            overlay.here,
            dest,
            {name: client for name, client in clients.items()
             if alive[name] and name not in excluded and (scheduler is None or name in scheduler.vertices)},
            scheduler=scheduler,
            pinned=pinned,
            memory=memory,
            config=relay_config,
            on_event=relay_events,
            clock=clock,
            available=available,
            delivered=delivered,
            offload=offload,
        )
        if publisher is not None:
            publisher.on_room = partial(relay.room_made, dest)
        try:
            async with trio.open_nursery() as nursery:
                if journal is not None:
                    nursery.start_soon(journal.keep_synced, offload)
                if publisher is not None:
                    nursery.start_soon(publisher.keep_published)
                if membership is not None:  # depots joining and leaving the directory meanwhile
                    nursery.start_soon(membership, relay)
                result = await relay.run()
                nursery.cancel_scope.cancel()
            if publisher is not None and publish is not None:
                manifest = None if publish.follow or publish.manifest_of is None else publish.manifest_of(result)
                await publisher.finish(result.file_hash, manifest)
                if publish.follow:
                    await publisher.until_listed(
                        relay_config.space_wait_s,
                        lambda unlisted: on_event(SpaceWait(dest, True, clock())) if on_event else None)
        except BaseException:
            if publisher is not None:
                await publisher.stopped(timeout_s)
            raise
        return result, scheduler, skipped
    finally:
        with trio.CancelScope(shield=True):
            for client in clients.values():
                await client.aclose()


async def _previous_publication(
    dest: DepotClient, raw: dict[str, Any], follow: bool
) -> tuple[PublicationCaps | None, frozenset[int]]:
    """A resumed transfer's publication (from its journal) and, with ``--follow``, the blocks its receiver has
    drained: those are on the receiver's disk and freed at the destination, and are not sent again."""
    try:
        caps = PublicationCaps.from_dict(raw)
    except (KeyError, TypeError, ValueError):
        return None, frozenset()
    if not follow or caps.drained is None:
        return caps, frozenset()
    try:
        document = published.unframe(await dest.read(caps.drained.read), published.DRAINED_FORMAT)
        record = published.parse_drained(document) if document is not None else published.Drained()
    except published.PublishedError:
        return caps, frozenset()
    except (DepotError, DepotUnreachable):
        return None, frozenset()  # gone (or unreadable): the transfer publishes afresh
    return caps, frozenset(published.indices(record.ranges))


def _publishing(
    publisher: Publisher, dest: str, on_event: Callable[[RelayEvent], None] | None
) -> Callable[[RelayEvent], None]:
    """``on_event`` that also tells the publisher what landed and when the destination is full."""

    def told(event: RelayEvent) -> None:
        if isinstance(event, BlockDelivered) and event.record is not None:
            publisher.landed(event.record)
        elif isinstance(event, SpaceWait) and event.depot == dest:
            publisher.waiting(dest if event.waiting else None)
        if on_event is not None:
            on_event(event)

    return told


@dataclass(frozen=True)
class SendOptions:
    """Everything ``send`` takes besides what it sends (see ``send``), as one typed value a command builds once."""

    overlay: Overlay
    dest: str
    pinned: Sequence[str] | None
    memory: EdgeMemory
    warm: bool
    relay_config: RelayConfig
    scheduler_config: SchedulerConfig | None = None
    timeout_s: float = 30.0
    on_event: Callable[[SendEvent], None] | None = None
    longest_duration: bool = False
    journal: SendJournal | None = None
    transport: httpx.AsyncBaseTransport | None = None
    offload: Offload | None = None
    publish: PublishOptions | None = None
    membership: Callable[[Relay], Awaitable[None]] | None = None

    async def send(
        self, file: Path | Stream, available: Callable[[int, int], Awaitable[None]] | None = None,
    ) -> tuple[RelayResult, PathScheduler | None, list[str]]:
        return await send(
            file, self.overlay, self.dest, pinned=self.pinned, memory=self.memory, warm=self.warm,
            relay_config=self.relay_config, scheduler_config=self.scheduler_config, timeout_s=self.timeout_s,
            on_event=self.on_event, available=available, longest_duration=self.longest_duration,
            journal=self.journal, transport=self.transport, offload=self.offload, publish=self.publish,
            membership=self.membership,
        )


async def send_from_replicas(
    urls: Sequence[str], spool: Path, *, replicas: mirrors.ReplicaOptions, on_size: Callable[[int], None],
    options: SendOptions, connect: Connector | None = None,
) -> tuple[RelayResult, PathScheduler | None, list[str], mirrors.MirrorResult]:
    """``send`` of a file that is still arriving from its replicas into ``spool``: each block leaves as soon as
    its bytes are in (the relay waits on the download's ``Watcher``). ``connect`` opens the byte stream to a
    replica (None: TCP; tests pass an in-memory replica network)."""
    watcher = mirrors.Watcher()
    downloaded: list[mirrors.MirrorResult] = []

    async def download() -> None:
        downloaded.append(await mirrors.fetch_mirrors(
            urls, spool, config=replicas.config, timeout_s=replicas.timeout_s, sha256=replicas.sha256,
            check_validators=replicas.check_validators, history=replicas.history, watcher=watcher,
            connect=connect))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(download)
        await watcher.started.wait()
        on_size(watcher.size)
        try:
            result, scheduler, skipped = await options.send(watcher.path, available=watcher.wait_for)
        finally:
            watcher.release()
    return result, scheduler, skipped, downloaded[0]


def interrupted(journal: SendJournal, dest: str, argv: list[str], what: str = "interrupted") -> str:
    """What an interrupted run says: what is kept, and the exact command that resumes."""
    if not journal.records:
        return f"{what} before any block reached {dest}; to send it, run the same command again: {resume_command(argv)}"
    return (f"{what}: {len(journal.records)} blocks delivered to {dest} are recorded in {journal.path}; to resume, "
            f"run the same command again: {resume_command(argv)}")


def failure_exit(exc: BaseException, subject: Path | None) -> tuple[ExitCode, str] | None:
    """The exit code and message for a failed transfer (a nursery's failure comes wrapped); None: not ours.
    ``subject`` is what was being sent, named in the message of a local I/O error."""
    inner = innermost(exc)
    if isinstance(inner, SendError):
        return inner.code, str(inner)
    if isinstance(inner, ResumeRefused):
        return ExitCode.USAGE, str(inner)
    if isinstance(inner, mirrors.MirrorError):
        return inner.exit_code, f"the replicas: {inner}"
    if isinstance(inner, BlockDamaged):
        return ExitCode.INTEGRITY, str(inner)
    if isinstance(inner, DepotRefused):  # asking again would not help: a limit or a token, else something odd
        usage = inner.error.status in (400, 401, 403, 413)
        return (ExitCode.USAGE if usage else ExitCode.FAILED), str(inner)
    if isinstance(inner, RelayFailed):
        return ExitCode.UNREACHABLE, str(inner)
    if isinstance(inner, OSError):
        return ExitCode.FAILED, f"{subject}: {inner}"
    return None


def source_name(urls: Sequence[str]) -> str:
    """The file's name for the manifest: the last segment of the first URL's path."""
    name = urlsplit(urls[0]).path.rstrip("/").rsplit("/", 1)[-1]
    name = "".join(c if c.isalnum() or c in "._-" else "_" for c in name).lstrip(".")
    return name[:200] or "download"


def build_manifest(
    file: Path, dest_url: str, result: RelayResult, config: RelayConfig, path: Sequence[str]
) -> Manifest:
    blocks = tuple(
        BlockEntry(
            index=record.index,
            offset=record.offset,
            length=record.length,
            hash=record.hash,
            sources=(BlockSource(dest_url, record.allocation.read, record.allocation.expires),),
        )
        for record in result.blocks
    )
    return Manifest(
        name=file.name,
        size=sum(block.length for block in blocks),
        block_size=config.block_size,
        hash_algorithm=config.hash_algorithm,
        file_hash=result.file_hash,
        created=time.time(),
        path=tuple(path),
        blocks=blocks,
    )


def final_path(result: RelayResult) -> list[str]:
    """The path the transfer ended on (the primary, with several): the manifest's ``path``."""
    if result.final_paths:
        return list(result.final_paths[0])
    return list(result.paths[-1].path) if result.paths else []


def ran_several(result: RelayResult) -> bool:
    """Whether the transfer ran more than one path at once at some time (then per-path figures say something the
    totals do not)."""
    runs = sorted(result.paths, key=lambda run: run.start)
    return any(
        later.start < (earlier.end if earlier.end is not None else math.inf)
        for i, earlier in enumerate(runs) for later in runs[i + 1 :]
    )


def shares_text(shares: PathShares | Sequence[tuple[Sequence[str], int]], total: int) -> str:
    """Each path's share of the bytes delivered, for people: ``via atl 61% · direct 39%``."""
    pairs: list[tuple[Sequence[str], int]] = (
        [(s.path, s.bytes) for s in shares.paths] if isinstance(shares, PathShares) else list(shares)
    )
    return " · ".join(f"{report.short_path(path)} {nbytes / total if total else 0.0:.0%}" for path, nbytes in pairs)


def summary(result: RelayResult, scheduler: PathScheduler | None, size: int) -> dict[str, Any]:
    attempts: list[dict[str, Any]]
    if scheduler is not None:
        started = scheduler.attempts[0].start if scheduler.attempts else 0.0
        attempts = [
            {
                "path": list(a.path),
                "start": a.start - started,
                "end": (a.end if a.end is not None else started + result.seconds) - started,
                "mbps": a.throughput_bps * 8 / 1e6,
                "reason": a.reason,
            }
            for a in scheduler.attempts
        ]
    else:
        attempts = []
    relay_paths = []
    for run in result.paths:
        end = run.end if run.end is not None else result.seconds
        mbps = run.nbytes * 8 / 1e6 / (end - run.start) if end > run.start else 0.0
        relay_paths.append(
            {"path": list(run.path), "start": run.start, "end": end, "bytes": run.nbytes, "mbps": mbps,
             "reason": run.reason}
        )
    several = ran_several(result)
    timeline = []
    for point in result.timeline:
        entry: dict[str, Any] = {"t": point.t, "bytes": point.bytes, "mbps": point.rate_bps * 8 / 1e6,
                                 "path": list(point.path)}
        if several:  # each path's bytes so far and its rate since the point before
            entry["paths"] = [{"path": list(s.path), "bytes": s.bytes, "mbps": s.rate_bps * 8 / 1e6}
                              for s in point.paths]
        timeline.append(entry)
    delivered = sum(result.path_bytes.values())
    return {
        "bytes": size,
        "seconds": result.seconds,
        "mbps": size * 8 / 1e6 / result.seconds if result.seconds > 0 else 0.0,
        "blocks": len(result.blocks),
        "resends": result.resends,
        "second_copies": result.second_copies,
        "second_copies_won": result.second_copies_won,
        "paths": [list(path) for path in result.final_paths],
        "path_shares": [
            {"path": list(path), "bytes": nbytes, "share": nbytes / delivered if delivered else 0.0,
             "mbps": nbytes * 8 / 1e6 / result.seconds if result.seconds > 0 else 0.0}
            for path, nbytes in result.path_bytes.items()
        ],
        "path_attempts": relay_paths,
        "scheduler_attempts": attempts,
        "edges": [
            {"from": u, "to": v, "mbps": rate * 8 / 1e6, "bytes": nbytes, "samples": samples}
            for (u, v), (rate, nbytes, samples) in sorted(result.edges.items())
        ],
        "timeline": timeline,
    }


def over_text(result: RelayResult) -> str:
    """What the closing line says the file went over: the path, or every path used with its share."""
    if not ran_several(result):
        return " -> ".join(final_path(result))
    delivered = sum(result.path_bytes.values())
    used = [(path, nbytes) for path, nbytes in result.path_bytes.items() if nbytes]
    return f"{len(used)} paths ({shares_text(used, delivered)})"


def save_report(path: Path, name: str, size: int, summary: dict[str, Any]) -> None:
    """The report ``lnet report`` reads (docs/client.md): path attempts, the timeline, per-edge throughputs."""
    document = {
        "format": report.FORMAT,
        "file": name,
        "size": size,
        "seconds": summary["seconds"],
        "path_attempts": [
            {key: entry[key] for key in ("path", "start", "end", "bytes", "mbps", "reason")}
            for entry in summary["path_attempts"]
        ],
        "timeline": summary["timeline"],
        "edges": [{key: edge[key] for key in ("from", "to", "mbps", "samples")} for edge in summary["edges"]],
    }
    report.parse(document).save(path)  # one set of rules for what lnet report can read


