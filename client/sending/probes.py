"""Probes of unknown edges beside a transfer, run the way the transfer would use each edge: the relay's I/O for
``Keep.probes`` (one stream) and ``Keep.deep`` (more copies at once while they add rate).

Each run measures and tells the relay's scheduler what it measured; whether a probe is asked for, and what a
failure means, is the relay's (``Relay._probe``). The blocks probes leave at depots are kept for the next probe
out of there (``blocks``) and freed by the relay at the end.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import trio

from lnet.client.engines.depth import DEPTH_GAIN
from lnet.client.sending.relay_config import RelayConfig
from lnet.client.wire.depot_client import Allocation, DepotClient
from lnet.scheduler import Edge, Measurement

__all__ = ["EdgeProbes", "ProbingRelay", "level_rate"]


class ProbingRelay(Protocol):
    """What the probes use of a relay (``lnet.client.sending.relay.Relay`` has it): its ends, its depot clients and
    settings, how long a probe runs and whether the transfer is over, how long a depot holds a block, and where
    allocations and measurements are reported."""

    @property
    def here(self) -> str: ...

    @property
    def dest(self) -> str: ...

    @property
    def clients(self) -> Mapping[str, DepotClient]: ...

    @property
    def config(self) -> RelayConfig: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def probe_s(self) -> float: ...

    @property
    def finished(self) -> bool: ...

    def hold_s(self, node: str) -> float: ...

    def allocated(self, allocations: Sequence[Allocation]) -> None: ...

    def tell(self, event: Measurement) -> None: ...


def level_rate(size: int, copies: Sequence[tuple[float, float]]) -> float:
    """What a deep probe's level carried: its copies' bytes over the time from the first one's start to the last
    one's end (each copy ``(began, ended)``, ``size`` bytes).

    Each copy's own rate times the depth is the level's only if its copies ran side by side. A stream's second
    copy starts when its first ends, and first copies on cold connections end apart: on the testbed an 8-deep
    level's second copies took 0.45 s each, mostly one after another, and their rates summed to 150 Mbit/s over
    a 62 Mbit/s link. Over their span the edge carried at least these bytes (first copies of other streams may
    have run beside them), so the figure is a floor, as a probe's is; with copies side by side it is their sum."""
    if not copies:
        return 0.0
    span = max(ended for _, ended in copies) - min(began for began, _ in copies)
    return size * len(copies) / span if span > 0 else 0.0


class EdgeProbes:
    """The probe runs of one relay."""

    def __init__(self, relay: ProbingRelay) -> None:
        self.relay = relay
        self.blocks: dict[str, Allocation] = {}
        """A block a probe left at each depot: the source of the next probe out of it."""
        self.locks: dict[str, trio.Lock] = {}
        self.payload = b""

    async def one_stream(self, edge: Edge, made: list[tuple[str, Allocation]]) -> None:
        """One stream of copies of one block of the transfer's size, back to back on one connection, for the
        scheduler's ``probe_s`` and at least two copies. The first ran on a cold connection (slow start) and is
        not reported unless it is the only one; the rest are, timed as the transfer's are (the depot's own push
        time), so the figure is comparable with the path's."""
        u, v = edge
        size = self.relay.config.probe_bytes or self.relay.config.block_size
        probe_s = self.relay.probe_s
        source = None if u == self.relay.here else await self._source(u, size)
        target = await self.relay.clients[v].allocate_one(size, self.relay.hold_s(v))
        self.relay.allocated([target])
        made.append((v, target))
        samples: list[float] = []
        started = trio.current_time()
        # A copy still going at twice the probe's time is cut off: an edge that slow is slow, whatever it is.
        with trio.move_on_after(2 * probe_s):
            while not self.relay.finished and (len(samples) < 2 or trio.current_time() < started + probe_s):
                samples.append(await self._copy(edge, source, target, size))
        if self.relay.finished:
            return
        one = 1.0 if self.relay.config.adaptive else None  # as the flushes say streams
        if not samples:
            # Not one copy in twice the probe's time: tell the scheduler the most this edge can be doing.
            self.relay.tell(Measurement(edge, size, trio.current_time() - started, self.relay.clock(), one))
            return
        learnt = samples[1:] or samples
        self.relay.tell(Measurement(edge, size * len(learnt), sum(learnt), self.relay.clock(), one))
        if v not in self.blocks and v != self.relay.dest:
            # Keep the block where it landed: the source of the next probe out of v, with no write from here.
            self.blocks[v] = target
            made.remove((v, target))

    async def deep(self, edge: Edge, made: list[tuple[str, Allocation]]) -> None:
        """Copies of one block at 1, 2, 4, ... at once (up to ``max_inflight``), each level two copies a stream,
        deeper while a level carries ``DEPTH_GAIN`` times the one before: an edge held back by its streams' own
        window or loss grows with them, a full link does not. The best level's second copies are reported with
        its depth as ``streams`` (the first copy of each stream may have run on a cold connection), so the
        scheduler learns what the edge carries at the depth that fills it (theory of operation, 13). Bounded by
        twice the probe's time, like a one-stream probe; a level cut off by it is not reported."""
        u, v = edge
        size = self.relay.config.probe_bytes or self.relay.config.block_size
        probe_s = self.relay.probe_s
        source = None if u == self.relay.here else await self._source(u, size)
        targets: list[Allocation] = []
        best: tuple[float, int, list[tuple[float, float]]] | None = None  # (aggregate, depth, the second copies)

        async def stream(target: Allocation, copies: list[tuple[float, float]]) -> None:
            await self._copy(edge, source, target, size)  # on a connection that may be cold
            seconds = await self._copy(edge, source, target, size)
            ended = trio.current_time()
            copies.append((ended - seconds, ended))

        with trio.move_on_after(2 * probe_s):
            depth = 1
            while not self.relay.finished:
                while len(targets) < depth:
                    target = await self.relay.clients[v].allocate_one(size, self.relay.hold_s(v))
                    self.relay.allocated([target])
                    made.append((v, target))
                    targets.append(target)
                copies: list[tuple[float, float]] = []
                async with trio.open_nursery() as nursery:
                    for target in targets[:depth]:
                        nursery.start_soon(stream, target, copies)
                aggregate = level_rate(size, copies)
                if best is not None and aggregate < best[0] * DEPTH_GAIN:
                    best = max(best, (aggregate, depth, copies))
                    break
                best = (aggregate, depth, copies)
                if depth >= self.relay.config.max_inflight:
                    break
                depth = min(2 * depth, self.relay.config.max_inflight)
        if self.relay.finished:
            return
        if best is None or best[0] <= 0:
            # Not one level in twice the probe's time: tell the scheduler the most this edge can be doing.
            self.relay.tell(Measurement(edge, size, 2 * probe_s, self.relay.clock(), 1.0))
            return
        aggregate, depth, copies = best
        # As the transfer's hops report: stream-seconds at ``depth``, so the edge weighs what the level carried.
        nbytes = size * len(copies)
        self.relay.tell(Measurement(edge, nbytes, depth * nbytes / aggregate, self.relay.clock(), float(depth)))

    async def _copy(self, edge: Edge, source: Allocation | None, target: Allocation, size: int) -> float:
        """One probe copy over ``edge`` into ``target``: a write from here when ``source`` is None, else the depot's
        copy of ``source``; its seconds, the depot's own push time where it reports one."""
        u, v = edge
        begun = trio.current_time()
        if source is None:
            await self.relay.clients[v].write(target.write, self._payload(size), offset=0)
            return trio.current_time() - begun
        copied = await self.relay.clients[u].copy(source.read, target.write_url, dest_offset=0)
        return copied.seconds if copied.seconds > 0 else trio.current_time() - begun

    async def _source(self, node: str, size: int) -> Allocation:
        """A block of ``size`` held at ``node`` to copy from: one a probe left there, else written now."""
        # Probes out of one depot may start together: one writes the block, the others wait and use it.
        async with self.locks.setdefault(node, trio.Lock()):
            held = self.blocks.get(node)
            if held is None:
                held = await self.relay.clients[node].allocate_one(size, self.relay.hold_s(node))
                self.relay.allocated([held])
                self.blocks[node] = held
                await self.relay.clients[node].write(held.write, self._payload(size))
        return held

    def _payload(self, size: int) -> bytes:
        if len(self.payload) != size:
            self.payload = os.urandom(size)
        return self.payload
