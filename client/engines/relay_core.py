"""The relay's engine: which path each block takes, where it goes on from after a failure, what each path
carries, how many copies each hop runs at once, and the end game's second copies (``lnet.client.sending.relay``
is its I/O shell).

Theory of operation
-------------------
A pure engine in the manner of ``chunks.py``: the shell tells it what happened, each call with the time it
happened, and asks it what to do; it never sleeps, reads a clock or touches the network, and imports nothing but
the standard library and its sibling engines. Two clocks come in: ``now``, the shell's monotonic clock (what the
meters and the path meters run on), and ``at``, the wall clock the events and the scheduler's measurements carry.
``t`` is seconds since the transfer began (the timeline's and the path runs' time).

**The block ledger.** A ``Block`` is one block of the file and, while it travels, one copy of it: its holders
(the source, then each depot it reached, the allocation there opaque to the engine), its attempts, the path it
counts on, and, in the end game, its second copies (``twins``). ``admit`` puts a block on its way, ``tag`` moves
what it counts on from one path to another (``outstanding``, the path's ``PathMeter``), ``reached`` records a hop
and names the holder two depots back, which may now let the block go (a block is held by two depots at once
while it moves, so that one lost with a depot is re-sent from the nearest holder, ``nearest``), ``arrived``
counts it delivered (on its path while that is in the set, else on the primary) and names its other copies, to
cut off.

**Routing.** A new block takes the path of the set that would deliver it soonest (``assign``: the MDTP rule,
``striping.soonest``, the paths through no failed depot first); until its first hop has room it may move to
another that would now deliver it sooner (``reconsider``). On its way it follows its own path while that is in
the set and clear of failed depots; from the source, the path a new block would take; from a depot, the rest of
the path of the set the depot is on (the primary first); else the widest way on from there
(``widest_from``, the shell's question to the scheduler), or the rest of the primary (``route_for``). ``step``
gives a block's next hop from where it is (``NextHop``), or says it has none (``Stuck``: the shell re-sends it
from its nearest holder).

**Windows.** Each hop's depth is Wu et al.'s ``ceil(3 * BDP / block) - 1`` within ``[min_inflight,
max_inflight]`` (``inflight_for``), the bandwidth the hop's busy-time rate (``EdgeMeter``) and the delay its
shortest cycle, or more where a trial of twice the depth carried more (``depth.DepthClimb``); the window is the
depth and, on a depot's hop, the copies its lane queues beyond it (``lane_extra``). ``tick`` flushes the meters
and returns each edge's sample; ``resize_windows`` the windows' new sizes, which the shell applies.

**The end game.** Once every block is under way and no depot is full, ``end_game`` names the blocks a slower
path would deliver last and the paths to send their second copies on (``striping.endgame``): only paths with
nothing waiting at the source for their first hop, so a copy takes a path's spare room, never a place in its queue.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic, NamedTuple, Protocol, TypeVar

from lnet.client.engines.depth import DepthClimb, Flushed
from lnet.client.engines.striping import PathMeter, Travelling, endgame, soonest

__all__ = [
    "Block",
    "CopyMark",
    "EdgeMeter",
    "HopSample",
    "NextHop",
    "PathChanged",
    "PathRun",
    "PathSample",
    "PathShares",
    "RelayEngine",
    "RelayRules",
    "Stuck",
    "TimelinePoint",
    "inflight_for",
]

Edge = tuple[str, str]
Route = tuple[str, ...]
A = TypeVar("A")
"""An allocation at a depot: whatever the shell holds a block in there; the engine only keeps it."""


class RelayRules(Protocol):
    """What the engine reads of the relay's configuration (``RelayConfig``)."""

    @property
    def block_size(self) -> int: ...
    @property
    def window_block(self) -> int | None: ...
    @property
    def min_inflight(self) -> int: ...
    @property
    def max_inflight(self) -> int: ...
    @property
    def initial_inflight(self) -> int: ...
    @property
    def lane_extra(self) -> int: ...
    @property
    def timeout_s(self) -> float: ...
    @property
    def tick_s(self) -> float: ...
    @property
    def path_window_s(self) -> float: ...
    @property
    def end_game(self) -> bool: ...


def inflight_for(rate_bps: float, delay_s: float, block: int, low: int, high: int) -> int:
    """Wu et al.'s pipelining depth for a hop: ``ceil(3 * BDP / block) - 1`` within ``[low, high]``."""
    if rate_bps <= 0 or delay_s <= 0:
        return low
    depth = math.ceil(3 * rate_bps * delay_s / block) - 1
    return max(low, min(high, depth))


class HopSample(NamedTuple):
    """What an edge carried since the last flush (``EdgeMeter.flush``)."""

    bytes: int
    stream_seconds: float
    """The sum of each copy's own time: ``bytes / stream_seconds`` is the rate of one stream."""
    at_once: float
    """How many copies streamed at once on average while any was in flight."""
    began: float
    """When the first of these copies began."""
    starved: bool
    """For most of that time the hop ran fewer copies than its depth with none waiting: it had less work than
    it could carry (a transfer's tail, or a hop fed by a slower one), so its aggregate is only a floor."""


class CopyMark(NamedTuple):
    """Where the hop stood when a copy began (``EdgeMeter.started``)."""

    at: float
    integral: float
    """Copy-seconds streamed on the hop so far."""


class EdgeMeter:
    """What crossed an edge: bytes over the time it was busy (for the hop's window), bytes over the seconds each
    copy took (the per-stream rate the scheduler compares) and how many copies ran at once (the hop's depth in
    use), and whether the hop had work for all of them; pure, fed ``now`` by the caller."""

    def __init__(self, width: int | None = None) -> None:
        self.in_flight = 0
        self.waiting = 0
        """Copies waiting for the hop's window."""
        self.width = width
        """The most copies that stream at once (the hop's depth): a copy queued in the depot's lane beyond it
        waits, it does not stream. None: every copy in flight streams."""
        self._mark = 0.0
        self._busy = 0.0
        self._bytes = 0
        self._stream_seconds = 0.0
        self._began = math.inf
        # Copies at once: the copy-seconds streamed since the meter began; over the copies that ended since the
        # last flush, the copy-seconds streamed while each was in flight and their lifetimes; over the time since
        # the last flush, the seconds any copy was in flight and those the hop was starved of work.
        self._tick = 0.0
        self._integral = 0.0
        self._flushed_integral = 0.0
        self._shared = 0.0
        self._lived = 0.0
        self._open = 0.0
        self._starved = 0.0
        self.shortest_cycle_s = math.inf
        self._copies = 0
        self._changed_at = -math.inf
        self._began_since_change = 0
        self.flushed: Flushed | None = None
        """What the last flush counted, for the hop's depth (``DepthClimb``); None once read, or if no copy ended."""
        self.total_bytes = 0
        self.samples = 0
        # Decayed sums, not an average of per-flush rates: copies that overlap a flush make single samples
        # noisy (one carries part of another's time), and a ratio of sums weighs each by its seconds.
        self._decayed_bytes = 0.0
        self._decayed_seconds = 0.0

    def _advance(self, now: float) -> None:
        if self.in_flight > 0 and now > self._tick:
            streaming = self.in_flight if self.width is None else min(self.in_flight, self.width)
            self._open += now - self._tick
            self._integral += streaming * (now - self._tick)
            if self.width is not None and self.in_flight < self.width and self.waiting == 0:
                self._starved += now - self._tick
        self._tick = max(self._tick, now)

    def queued(self, now: float) -> None:
        """A copy waits for the hop's window."""
        self._advance(now)
        self.waiting += 1

    def dequeued(self, now: float) -> None:
        """A copy got the hop's window (or stopped waiting for it)."""
        self._advance(now)
        self.waiting -= 1

    def started(self, now: float) -> CopyMark:
        """A copy began; give what this returns to ``finished``."""
        self._advance(now)
        if self.in_flight == 0:
            self._mark = now
        self.in_flight += 1
        return CopyMark(now, self._integral)

    def finished(
        self,
        nbytes: int,
        started: float,
        now: float,
        *,
        ok: bool = True,
        seconds: float | None = None,
        mark: CopyMark | None = None,
    ) -> None:
        """One copy ended; ``seconds`` is how long it moved data as timed by whoever moved it (a depot's push
        time), else ``now - started``; ``mark`` is what ``started`` returned for it."""
        self._advance(now)
        self.in_flight -= 1
        if ok and mark is not None and now > mark.at:
            self._shared += self._integral - mark.integral
            self._lived += now - mark.at
        if ok:
            self._busy += now - self._mark
            self._bytes += nbytes
            self._stream_seconds += seconds if seconds is not None and seconds > 0 else now - started
            self._began = min(self._began, started)
            self.total_bytes += nbytes
            self.shortest_cycle_s = min(self.shortest_cycle_s, now - started)
            self._copies += 1
            if started >= self._changed_at:
                self._began_since_change += 1
        # A failed copy moved nothing that can be measured: the time since the mark is not counted.
        self._mark = now

    def depth_changed(self) -> None:
        """The hop's depth changed: copies that began before now do not count as the new depth's."""
        self._changed_at = self._tick
        self._began_since_change = 0

    @property
    def rate_bps(self) -> float:
        """The recent busy-time throughput (bytes/s), 0 before any sample."""
        return self._decayed_bytes / self._decayed_seconds if self._decayed_seconds > 0 else 0.0

    def flush(self, now: float) -> HopSample | None:
        """The bytes and stream seconds (the sum of each copy's own time) of the copies that ended since the last
        flush, how many copies streamed at once on average over that time, when the first of those copies began, and
        whether the hop was starved of work for more than half of it; None when nothing completed. ``bytes / stream
        seconds`` is the rate of one stream, however many ran at once, and that times the copies at once the hop's
        aggregate. (The stream seconds of copies side by side add up to more than the time they took: only the start
        says whether TCP was still warming up.)

        Copies at once is, over the lifetimes of the copies that ended, the average of those streaming beside
        them (in flight, at most ``width``): each copy's rate is then multiplied by the company it had. Not
        stream seconds over busy seconds, which swung from 2 to 50 between flushes of a hop running 16 (copies
        that began before the flush bring all their seconds into it); nor the average over the flush alone,
        which multiplied a copy begun at depth 4 by the 13 a hop had grown to (40 Mbit/s read on an 18 Mbit/s
        route). Without marks, the average over the time since the last flush."""
        self._advance(now)
        if self._bytes == 0 or self._busy <= 0 or self._stream_seconds <= 0:
            return None
        if self._lived > 0:
            streams = self._shared / self._lived
        else:
            streams = (self._integral - self._flushed_integral) / self._open if self._open > 0 else 1.0
        starved = self._open > 0 and self._starved > self._open / 2
        sample = HopSample(self._bytes, self._stream_seconds, max(1.0, streams), self._began, starved)
        self.flushed = Flushed(self._bytes, self._busy, self._copies, self._began_since_change, starved)
        self._copies = self._began_since_change = 0
        self._decayed_bytes = 0.7 * self._decayed_bytes + self._bytes
        self._decayed_seconds = 0.7 * self._decayed_seconds + self._busy
        self.samples += 1
        self._bytes, self._busy, self._stream_seconds, self._began = 0, 0.0, 0.0, math.inf
        self._open = self._starved = self._shared = self._lived = 0.0
        self._flushed_integral = self._integral
        return sample



# -- events out, for progress and reports ---------------------------------------------------------------------


@dataclass(frozen=True)
class PathChanged:
    """The set of paths changed: ``path`` is its primary from now on and ``paths`` the whole set (primary first;
    empty means ``(path,)``); ``reason`` the scheduler's (``join`` or ``drop`` when only the other paths changed)."""

    path: tuple[str, ...]
    reason: str
    at: float
    paths: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class PathSample:
    """One path at a moment: the bytes delivered on it since the transfer began, and its rate since the sample
    before (bytes/s)."""

    path: tuple[str, ...]
    bytes: int
    rate_bps: float


@dataclass(frozen=True)
class PathShares:
    """At every tick while several paths run: each path's bytes so far (``paths``, the set's), of ``delivered`` in
    all."""

    paths: tuple[PathSample, ...]
    delivered: int
    at: float


@dataclass(frozen=True)
class TimelinePoint:
    t: float
    bytes: int
    rate_bps: float
    path: tuple[str, ...]
    paths: tuple[PathSample, ...] = ()
    """Each path in the set at ``t`` (or that delivered since the point before)."""


@dataclass(frozen=True)
class PathRun:
    """A period the relay started blocks on one path: seconds from the transfer's start, bytes delivered meanwhile,
    and why the path was taken (the scheduler's reason, or ``pinned``)."""

    path: tuple[str, ...]
    start: float
    end: float | None
    nbytes: int
    reason: str




# -- the engine ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NextHop:
    """Carry the block from ``u`` to ``v``; ``route`` is its way on from ``u``."""

    u: str
    v: str
    route: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Stuck:
    """The block has no way on from where it is (``reason``): it is re-sent from its nearest holder."""

    reason: str


@dataclass(eq=False)
class Block(Generic[A]):
    """One block of the file and, while it travels, one copy of it."""

    index: int
    offset: int
    length: int
    hash: str = ""
    holders: list[tuple[str, A | None]] = field(default_factory=list)
    """Where the copy is, the source first (it holds no allocation), then each depot it reached; a depot's
    allocation is None once the copy has gone two depots further on, or the depot lost it."""
    attempts: int = 0
    path: Route = ()
    """The path the block was given (and counts on while it travels); empty before it is admitted."""
    twin_of: Block[A] | None = None
    """This is the end game's second copy of that block."""
    twins: list[Block[A]] = field(default_factory=list)
    """The second copies of this block under way."""


class RelayEngine(Generic[A]):
    """The routing, the block ledger and the window rules of one transfer from ``here`` to ``dest``.

    ``pinned``: one path, never changed (no scheduler). ``widest_from(holder, avoid)``: the widest way the
    scheduler knows from ``holder`` to ``dest`` through none of ``avoid``, None when there is none (without a
    scheduler, none is given)."""

    def __init__(
        self,
        here: str,
        dest: str,
        rules: RelayRules,
        *,
        pinned: Sequence[str] | None = None,
        widest_from: Callable[[str, Collection[str]], Sequence[str] | None] | None = None,
    ) -> None:
        self.here, self.dest, self.rules = here, dest, rules
        self.widest_from = widest_from
        self.pinned = pinned is not None
        self.path: Route = tuple(pinned) if pinned is not None else ()
        """The primary path."""
        self.paths: tuple[Route, ...] = (self.path,) if pinned is not None else ()
        """The set of paths, the primary first."""
        self.dead: set[str] = set()
        """Depots that failed: avoided from now on."""
        self.full: set[str] = set()
        """Depots that answer they have no room: the end game waits, and the scheduler is not asked to move."""
        self.meters: dict[Edge, EdgeMeter] = {}
        self.depths: dict[Edge, int] = {}
        self.climbs: dict[Edge, DepthClimb] = {}
        """Each hop's floor on its depth above Wu's rule (``DepthClimb``)."""
        self.predicted: dict[Route, float] = {}
        self.outstanding: dict[Route, int] = {}
        """Bytes each path carries (its blocks admitted and not yet arrived)."""
        self.path_meters: dict[Route, PathMeter] = {}
        self.path_bytes: dict[Route, int] = {}
        """Bytes delivered on each path since the transfer began."""
        self.runs: list[PathRun] = []
        self.timeline: list[TimelinePoint] = []
        self.delivered = 0
        self.travelling: dict[int, Block[A]] = {}
        """Blocks being carried (their first copies), by index, until they arrive."""
        self.all_under_way = False
        """Every block has been handed to a carrier: the end game may start."""
        self.second_copies = 0
        self.second_copies_won = 0
        self._sampled_bytes: dict[Route, int] = {}
        self._open_runs: dict[Route, int] = {}

    # -- the set of paths ---------------------------------------------------------------------------------

    @property
    def admission(self) -> int:
        """Blocks admitted at once: 4 x ``max_inflight`` a path."""
        return self.rules.max_inflight * 4 * max(1, len(self.paths))

    @property
    def final_paths(self) -> tuple[Route, ...]:
        """The set at the end: a depot that died in the last moments may not have been acted on by a tick yet, its
        paths are over."""
        return tuple(p for p in self.paths if not set(p) & self.dead) or self.paths

    def take_paths(
        self, paths: Sequence[Sequence[str]], rates: Sequence[float], reason: str, t: float, at: float,
        predicted_bps: float | None = None,
    ) -> PathChanged:
        """Run ``paths`` (the primary first) from now on: a run (``PathRun``) ends for each path that left the
        set and begins for each that joined, measured afresh (``admission`` grows with the set)."""
        new = tuple(tuple(path) for path in paths)
        self.close_runs([path for path in self.paths if path not in new], t)
        for path in new:
            if path not in self._open_runs:
                self._open_runs[path] = len(self.runs)
                self.runs.append(PathRun(path, t, None, self.path_bytes.get(path, 0), reason))
                self.path_meters[path] = PathMeter(self.rules.path_window_s)
        self.paths, self.path = new, new[0]
        self.predict(new, rates, predicted_bps)
        return PathChanged(self.path, reason, at, new)

    def decided(
        self, paths: tuple[Route, ...], rates: Sequence[float], *, changes: bool, reason: str,
        predicted_bps: float | None, dropped: str | None, t: float, at: float,
    ) -> PathChanged | None:
        """The scheduler decided: ``paths`` and their ``rates`` (empty when it gave none for each), ``changes``
        for a switch or a dropped depot (``dropped``), whose ``predicted_bps`` is the primary's. The set changes
        when a change names another; the predictions follow a decision that names the same set."""
        if dropped is not None:
            self.dead.add(dropped)
        if changes and paths != self.paths:
            return self.take_paths(paths, rates, reason, t, at, predicted_bps)
        if paths == self.paths:
            self.predict(paths, rates, predicted_bps)
        return None

    def predict(self, paths: tuple[Route, ...], rates: Sequence[float], predicted_bps: float | None) -> None:
        if rates:
            self.predicted = dict(zip(paths, rates, strict=True))
        elif predicted_bps is not None:
            self.predicted[paths[0]] = predicted_bps

    def close_runs(self, paths: Sequence[Route], t: float) -> None:
        for path in paths:
            index = self._open_runs.pop(path, None)
            if index is not None:
                run = self.runs[index]
                self.runs[index] = replace(run, end=t, nbytes=self.path_bytes.get(path, 0) - run.nbytes)

    def close_all_runs(self, t: float) -> None:
        self.close_runs(list(self._open_runs), t)

    def sample_timeline(self, t: float, at: float) -> PathShares | None:
        """A point of the timeline at ``t``; with several paths, each one's share to tell."""
        previous = self.timeline[-1] if self.timeline else TimelinePoint(0.0, 0, 0.0, self.path)
        dt = t - previous.t
        rate = (self.delivered - previous.bytes) / dt if dt > 0 else previous.rate_bps
        moved = [path for path, nbytes in self.path_bytes.items() if nbytes != self._sampled_bytes.get(path, 0)]
        samples = []
        for path in dict.fromkeys([*self.paths, *moved]):
            nbytes = self.path_bytes.get(path, 0)
            since = nbytes - self._sampled_bytes.get(path, 0)
            samples.append(PathSample(path, nbytes, since / dt if dt > 0 else 0.0))
            self._sampled_bytes[path] = nbytes
        self.timeline.append(TimelinePoint(t, self.delivered, rate, self.path, tuple(samples)))
        if len(self.paths) > 1:
            shares = tuple(sample for sample in samples if sample.path in self.paths)
            return PathShares(shares, self.delivered, at)
        return None

    # -- paths: which one a block takes, and the way on from where it is ------------------------------------

    def usable(self, path: Route) -> bool:
        return not self.dead.intersection(path[1:])

    def on_a_path(self, node: str) -> bool:
        return any(node in path for path in self.paths)

    def rest(self, path: Route, holder: str) -> list[str]:
        """The rest of ``path`` from ``holder``, without the depots that failed."""
        return [node for node in path[path.index(holder) :] if node not in self.dead]

    def rate(self, path: Route) -> float:
        """What ``path`` delivers (bytes/s): as measured lately once it has delivered a few blocks, else as
        predicted; 0 when neither is known (``soonest`` then counts it as an average path)."""
        meter = self.path_meters.get(path)
        measured = meter.rate_bps if meter is not None else None
        return measured if measured is not None else self.predicted.get(path, 0.0)

    def assign(self, length: int) -> Route:
        """The path of the set that would deliver a block of ``length`` soonest (those through no failed depot
        first)."""
        candidates = [path for path in self.paths if self.usable(path)] or list(self.paths)
        if len(candidates) == 1:
            return candidates[0]
        return self.soonest(candidates, length)

    def soonest(self, candidates: Sequence[Route], length: int, block: Block[A] | None = None) -> Route:
        """The MDTP rule over ``candidates`` for one more block of ``length`` bytes (``block``, when given, is
        already counted on its own path and is left out of it)."""
        outstanding = [self.outstanding.get(path, 0) - (length if block is not None and path == block.path else 0)
                       for path in candidates]
        return candidates[soonest(outstanding, [self.rate(path) for path in candidates], length)]

    def reconsider(self, block: Block[A], now: float) -> None:
        """A block not yet sent is not bound to its path: when its first hop has room, it moves to another path
        if that would now deliver it sooner (the rates measured since it was admitted may say so: the first
        blocks are given by the predictions alone)."""
        candidates = [path for path in self.paths if self.usable(path)]
        if len(candidates) < 2 or block.path not in candidates or block.twin_of is not None:
            return  # (a second copy goes where the end game sent it)
        candidates.remove(block.path)
        candidates.insert(0, block.path)  # a tie keeps it where it is
        best = self.soonest(candidates, block.length, block)
        if best != block.path:
            self.tag(block, best, now)

    def tag(self, block: Block[A], path: Route | None, now: float, *, delivered: bool = False) -> None:
        """Count ``block`` on ``path`` from now on (None: on none, it arrived or left)."""
        if (path or ()) == block.path:
            return
        if block.path:
            self.outstanding[block.path] = self.outstanding.get(block.path, 0) - block.length
            meter = self.path_meters.get(block.path)
            if meter is not None:
                if delivered:
                    meter.delivered(block.length, now)
                else:
                    meter.left(now)
        block.path = path or ()
        if path:
            self.outstanding[path] = self.outstanding.get(path, 0) + block.length
            self.path_meters.setdefault(path, PathMeter(self.rules.path_window_s)).admitted(now)

    def route_for(self, block: Block[A], holder: str, now: float) -> list[str]:
        """The way on for ``block`` from ``holder``: the rest of its own path while that is in the set and clear
        of failed depots; else, from the source, the path a new block would take; else the rest of the path of
        the set ``holder`` is on (the primary first), the block now counting on it; else the widest way on."""
        if block.path in self.paths and holder in block.path and self.usable(block.path):
            return self.rest(block.path, holder)
        if holder == self.here and self.paths:
            self.tag(block, self.assign(block.length), now)
            return self.rest(block.path, holder)
        ways = [path for path in self.paths if holder in path]
        if ways:
            stuck = block.path if block.path in ways else ways[0]  # every way from here crosses a failed depot
            way = next((path for path in ways if self.usable(path)), stuck)
            self.tag(block, way, now)
            return self.rest(way, holder)
        return self.route_from(holder)

    def route_from(self, holder: str) -> list[str]:
        """The primary path's rest from ``holder``, else the widest way the scheduler knows from there (never
        back through the client: it is no depot), else straight to the destination."""
        if holder in self.path:  # the rest of the current path, without the depots that failed
            return [node for node in self.path[self.path.index(holder) :] if node not in self.dead]
        if self.widest_from is not None:
            avoid = {depot for depot in self.dead if depot != self.dest}
            if holder != self.here:
                avoid.add(self.here)
            way = self.widest_from(holder, avoid)
            if way is not None:
                return list(way)
        return [holder, self.dest]

    def next_hop(self, block: Block[A], u: str, now: float) -> str | None:
        """Where ``block``'s way goes from ``u`` (None when ``u`` is on no path of the set)."""
        if not self.on_a_path(u):
            return None
        route = self.route_for(block, u, now)
        return route[1] if len(route) > 1 else None

    def restart(self, block: Block[A], start: str) -> None:
        """``block`` goes on from ``start``: the holders past it are dead or unusable."""
        while block.holders and block.holders[-1][0] != start:
            block.holders.pop()

    def step(self, block: Block[A], route: Sequence[str], now: float) -> NextHop | Stuck:
        """The next hop of ``block`` from where it is, ``route`` its way so far. A block follows its own path while
        that is in the set; else the path of the set it is on (so a switch moves every block that has not yet left
        a depot of the new path); a block held by a depot off every path of the set goes on by the widest way the
        scheduler knows from there (pinned: along ``route``)."""
        u = block.holders[-1][0]
        if not self.pinned or self.on_a_path(u):
            # On its path: the rest of it. Left behind by a switch: the widest way on from where it is now, not the
            # old path's next hop (which may be the degraded edge the switch left).
            route = self.route_for(block, u, now)
        if u not in route or route.index(u) + 1 >= len(route):
            return Stuck(f"no way on from {u}")
        v = route[route.index(u) + 1]
        if v in self.dead or u in self.dead:
            return Stuck(f"{u} -> {v} goes through a failed depot")
        return NextHop(u, v, tuple(route))

    def reached(self, block: Block[A], v: str, alloc: A) -> tuple[str, A | None] | None:
        """``block`` reached ``v``, held there in ``alloc``. A block is held by two depots at once while it moves:
        returns the holder two back, which may now let it go (``passed_on`` once it has), if there is one."""
        block.holders.append((v, alloc))
        return block.holders[-3] if len(block.holders) >= 3 else None

    def passed_on(self, block: Block[A]) -> None:
        """The holder ``reached`` named has let ``block`` go."""
        block.holders[-3] = (block.holders[-3][0], None)

    def nearest(self, block: Block[A]) -> str:
        """The holder nearest the destination that still has the block (the source, at worst)."""
        while len(block.holders) > 1 and (block.holders[-1][0] in self.dead or block.holders[-1][1] is None):
            block.holders.pop()
        return block.holders[-1][0]

    # -- the block ledger -------------------------------------------------------------------------------------

    def admit(self, block: Block[A], now: float) -> None:
        """``block`` sets out from the source, on the path that would deliver it soonest."""
        block.holders = [(self.here, None)]
        self.tag(block, self.assign(block.length), now)
        self.travelling[block.index] = block

    def settled(self, block: Block[A]) -> None:
        """``block``'s carry is over (it arrived, was cut off, or failed for good)."""
        self.travelling.pop(block.index, None)

    def second_copy(self, block: Block[A], path: Route, now: float) -> Block[A]:
        """The end game's second copy of ``block``, setting out from the source along ``path``."""
        twin = Block[A](block.index, block.offset, block.length, hash=block.hash, twin_of=block,
                        holders=[(self.here, None)])
        block.twins.append(twin)
        self.tag(twin, path, now)
        return twin

    def second_copy_over(self, twin: Block[A]) -> None:
        """``twin``'s carry is over, whichever way."""
        if twin.twin_of is not None:
            twin.twin_of.twins.remove(twin)

    def lost(self, block: Block[A], now: float) -> None:
        """Another copy of ``block`` arrived first: this one holds nothing past the source (the shell freed it)
        and counts on no path."""
        block.holders = block.holders[:1]
        self.tag(block, None, now)

    def arrived(self, block: Block[A], now: float) -> list[Block[A]]:
        """``block``'s copy arrived, verified, first: it counts on its path while that is in the set, else on the
        primary. Returns the block's other copies, to cut off. The block is no longer under way from here on,
        though a copy cut off ends later: the end game does not copy a block already delivered (on the testbed,
        a second copy won, its race ended, and the first copy, still being cut off, was given a third)."""
        first = block.twin_of or block
        others = [copy for copy in (first, *first.twins) if copy is not block]
        self.travelling.pop(block.index, None)
        if block.twin_of is not None:
            self.second_copies_won += 1
        self.delivered += block.length
        counted = block.path if block.path in self.paths else self.path
        self.path_bytes[counted] = self.path_bytes.get(counted, 0) + block.length
        self.tag(block, None, now, delivered=True)
        return others

    def end_game(self, now: float) -> list[tuple[Block[A], Route]]:
        """Once every block is under way (and no depot is full: a second copy would only take the room a first
        one waits for), second copies of the blocks slower paths would deliver last, each with the path that
        would deliver it sooner (``striping.endgame``).

        A path takes copies only while no copy waits at the source for its first hop (``idle_at_source``). Every
        block of a small file is under way from the start (the admission holds 4 x ``max_inflight`` blocks a
        path), and most still wait there: a copy queued behind them would only move work the MDTP rule already
        shares, and take the links' bytes from the first copies (measured on the testbed: a 96-block transfer
        over three disjoint routes sent 35 second copies from its second second on, and every path slowed).

        A block whose path left the set (a scout dropped, a path replaced) after it left the source goes on from
        the depot that holds it by whatever way the scheduler knows from there, at a rate nobody measures: it
        counts as never arriving, so it is the first to get a second copy, and the end game runs for it with one
        path in the set too (measured on the testbed: blocks left at a dropped scout's depot timed out there,
        30 s a try, and a 96-block cold start took 141 s where 31 were enough).

        A path that has held blocks without delivering any for longer than its rate says its backlog takes
        (``PathMeter.silent_s``) drains no sooner than it has been silent: its rate was predicted, or measured
        before it fell silent."""
        if not (self.rules.end_game and self.all_under_way and self.paths) or self.full:
            return []
        paths = list(self.paths)
        candidates = [
            block for block in self.travelling.values()
            if not block.twins and (block.path in paths or block.path and len(block.holders) > 1)
        ]  # (one still at the source whose path left takes a path of the set when it sets out)
        left = list(dict.fromkeys(block.path for block in candidates if block.path not in paths))
        if len(paths) + len(left) < 2:
            return []
        every = paths + left
        travelling = [
            Travelling(block.index, every.index(block.path), len(block.holders) - 1, block.length)
            for block in candidates
        ]
        if not travelling:
            return []
        # (a path predicted infinitely fast counts at the mean: on the testbed, a new path's 17 blocks still at
        # the source were copied onto a four-hop path over the same links while it counted as never arriving)
        copies = endgame(
            [self.outstanding.get(path, 0) for path in every],
            [self.rate(path) for path in paths] + [0.0] * len(left),  # (0: never arrives, takes no copy)
            travelling, min_gain_s=self.rules.tick_s,
            usable=[self.usable(path) and self.idle_at_source(path) for path in paths] + [False] * len(left),
            silent_s=[self.silent_s(path, now) for path in paths] + [0.0] * len(left),
        )
        self.second_copies += len(copies)
        return [(self.travelling[index], every[path]) for index, path in copies]

    def silent_s(self, path: Route, now: float) -> float:
        """How long ``path`` has held blocks without delivering one (``PathMeter.silent_s``)."""
        meter = self.path_meters.get(path)
        return meter.silent_s(now) if meter is not None else 0.0

    def idle_at_source(self, path: Route) -> bool:
        """No copy waits at the source for ``path``'s first hop: a block given to it now would set out at once
        (or as soon as one of the hop's copies ends)."""
        meter = self.meters.get((path[0], path[1])) if len(path) > 1 else None
        return meter is None or meter.waiting == 0

    # -- windows: how many blocks cross each hop at once ----------------------------------------------------

    def meter(self, edge: Edge) -> EdgeMeter:
        return self.meters.setdefault(edge, EdgeMeter(self.depth(edge)))

    def depth(self, edge: Edge) -> int:
        """How many blocks cross ``edge`` at once (the depot's lane width for a copy)."""
        return self.depths.get(edge, self.rules.initial_inflight)

    def extra(self, edge: Edge) -> int:
        """Copies queued at the depot beyond the hop's depth; the client's own writes have no lane."""
        return 0 if edge[0] == self.here else self.rules.lane_extra

    def window(self, edge: Edge) -> int:
        """The places in ``edge``'s window: its depth and the copies its lane queues beyond it."""
        return self.depth(edge) + self.extra(edge)

    def copy_wait(self, edge: Edge) -> float:
        """How much longer than ``timeout_s`` a copy's answer may take on ``edge``: the copies ahead of it in its
        lane and its own push, at the hop's measured rate (nothing before a measurement), at most 4 x
        ``timeout_s``. A hop running 16 blocks of 1 MiB over a 20 Mbit/s link pushes each for about 7 s and a
        queued copy waits as long again; one shared with other paths' hops takes longer still."""
        rate = self.meters[edge].rate_bps if edge in self.meters else 0.0
        if rate <= 0:
            return 0.0
        work = self.window(edge) * self.rules.block_size / rate
        return min(4 * self.rules.timeout_s, work)

    def tick(self, now: float) -> list[tuple[Edge, HopSample]]:
        """What each hop carried since the last tick (the hops that completed a copy), the path meters flushed."""
        samples = []
        for edge, meter in self.meters.items():
            sample = meter.flush(now)
            if sample is not None:
                samples.append((edge, sample))
        for path_meter in self.path_meters.values():
            path_meter.flush(now)
        return samples

    def depth_record(self, edge: Edge, t: float) -> dict[str, object]:
        """A hop's depth and what set it, as plain data (``lnet-send --trace``'s ``window`` events): its meter's
        busy-time rate and shortest copy (Wu's rule), and its climb's floor and level on trial."""
        meter, climb = self.meter(edge), self.climbs.get(edge)
        cycle = meter.shortest_cycle_s
        return {"t": round(t, 3), "edge": list(edge), "depth": self.depth(edge), "window": self.window(edge),
                "rate_mbps": round(meter.rate_bps * 8 / 1e6, 3),
                "cycle_ms": round(cycle * 1000, 1) if math.isfinite(cycle) else None,
                "floor": None if climb is None else climb.floor, "trial": None if climb is None else climb.trial}

    def resize_windows(self) -> dict[Edge, int]:
        """Each measured hop's depth from its meter (``inflight_for``), raised by its trials (``DepthClimb``); its
        window's size, by edge."""
        rules = self.rules
        sizes = {}
        for edge, meter in self.meters.items():
            if meter.samples == 0:
                continue
            delay, block = meter.shortest_cycle_s, rules.block_size
            if rules.window_block is not None and meter.rate_bps > 0:
                # blocks of many sizes: the shortest cycle is a short block's, mostly round trip; a mean block
                # takes that and its own time on the wire
                delay, block = delay + rules.window_block / meter.rate_bps, rules.window_block
            rule = inflight_for(meter.rate_bps, delay, block, rules.min_inflight, rules.max_inflight)
            climb = self.climbs.get(edge)
            if climb is None:
                climb = self.climbs[edge] = DepthClimb(rules.min_inflight, rules.max_inflight)
            depth = climb.depth(rule, meter.flushed)
            meter.flushed = None
            if depth != self.depth(edge):
                meter.depth_changed()
            self.depths[edge] = depth
            meter.width = depth
            sizes[edge] = self.window(edge)
        return sizes
