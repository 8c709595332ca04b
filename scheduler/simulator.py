"""A deterministic network simulator to run the decision loop against, in simulated time.

Ground truth is a capacity per ordered pair of vertices (bytes/s): what one TCP stream gets on that edge alone
(its window over its round trip, say). Optionally the overlay edges run over shared physical links: each edge
names the links its route crosses, each link has a capacity, and the streams on a full link share it as the
testbed's TCP does, in inverse proportion to their round trips (``RTT_BIAS``; each stream also capped by its
edge's own rate), which is how a probe beside the transfer comes to see only what the transfer leaves, and how
two overlay edges over one backbone link slow each other down.

A transfer keeps ``streams`` copies in flight on every hop of its path; a probe is one stream. The path runs at
its slowest hop's aggregate rate; a hop that joins the path starts from nothing and reaches its rate linearly
over its ramp time (TCP opening its window). Every step, each hop reports a measurement with seeded
multiplicative noise, in the engine's convention: ``"stream"`` (lnet's: bytes over the seconds each copy took,
so a per-stream rate) or ``"busy"`` (an older convention: a hop's bytes over the time it was busy, an
aggregate of all its streams, while a probe reported its one stream; kept to show what went wrong). A hop of
capacity 0 reports a failure, a failed vertex on the path a depot failure. Events change the truth at given
times. Same network, scheduler settings and seed: same run, bit for bit. A pinned run (``simulate_pinned``) runs
fixed paths the same way with no scheduler: what ``lnet-send --path`` would get, the yardstick of the benchmarks.

No wall clock, no sleeps, no I/O: it is for tests and ``bench/scheduler.py``.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from ._loop import (
    DepotFailure,
    DropDepot,
    Event,
    HopFailure,
    Keep,
    Measurement,
    Path,
    PathAttempt,
    PathScheduler,
    ProbeDone,
    Progress,
    Switch,
)
from ._memory import Edge, EdgeMemory
from ._widest import edges_of, path_throughput, widest_path

__all__ = [
    "ABILENE_BEST_PATH",
    "ABILENE_DST",
    "ABILENE_SRC",
    "DegradeEdge",
    "DegradeLink",
    "FIRST_DEPTH",
    "FailVertex",
    "MULTIPATH_DST",
    "MULTIPATH_SRC",
    "RTT_BIAS",
    "RTT_HOST_S",
    "THREE_ROUTES",
    "TWO_ROUTES",
    "SimEvent",
    "SimNetwork",
    "SimResult",
    "SimSample",
    "abilene",
    "abilene_shared",
    "mbit",
    "one_bottleneck",
    "random_topology",
    "simulate_pinned",
    "simulate_transfer",
    "three_routes",
    "two_routes",
]


FIRST_DEPTH = 4
"""The copies a hop starts with, as the relay starts one (``RelayConfig.initial_inflight``; fewer under a smaller
``--max-inflight``): with blocks, a path fills at this depth, and settles at its own once its first copies arrived."""


CLIMB_COPIES = 3
"""A hop whose first copies have arrived doubles its depth once it has carried this many times its depth in copies
(``lnet.client.engines.depth``: the copies of the level before are let by, then twice the depth are counted)."""


def mbit(rate_mbit_s: float) -> float:
    """Mbit/s in bytes/s."""
    return rate_mbit_s * 1e6 / 8


@dataclass(frozen=True, slots=True)
class DegradeEdge:
    """From ``at`` on, ``edge`` carries ``capacity_bps`` (0 makes its hop fail)."""

    at: float
    edge: Edge
    capacity_bps: float


@dataclass(frozen=True, slots=True)
class DegradeLink:
    """From ``at`` on, the physical ``link`` carries ``capacity_bps`` in all, shared by the streams crossing it.

    Only what the link's streams share changes: an overlay edge's per-stream capacity (``capacities``, which
    already counts its narrowest link) is changed by ``DegradeEdge`` events beside this one, which whoever builds
    the network knows how to compute (``scenarios`` does)."""

    at: float
    link: str
    capacity_bps: float


@dataclass(frozen=True, slots=True)
class FailVertex:
    """From ``at`` on, ``vertex`` is down: unreachable, every edge through it dead."""

    at: float
    vertex: str


SimEvent = DegradeEdge | DegradeLink | FailVertex


RTT_HOST_S = (0.0013, 0.0033)
"""What a measured round trip carries over the links' delays: the hosts' own time. On the testbed 1.5-3.3 ms from
the 10th to the 90th percentile, median 2.2 ms (the client's and the depots' round trips in the twelve scenarios of
``bench/pathchoice.py --random 12 --quick --seed 450556381``, against their topologies)."""


RTT_BIAS = 1.0
"""How the testbed's full links share between streams of different round trips: in proportion to the inverse of the
round trip (``SimNetwork.rtt_bias``). Measured: over 24 random scenarios' contested links (``bench/rtt_sharing.py``,
seeds 2726327885, 1978322645 and 1304752376), the parts that two or three edges' streams got set beside the
simulator's differed by 0.078 on average with a bias of 1 and 0.117 with plain max-min; 0.9 to 1 fitted best."""


@dataclass(frozen=True)
class SimNetwork:
    """The truth: vertices (in the order a scheduler should list them), capacities, ramp times, noise, events."""

    vertices: tuple[str, ...]
    capacities: Mapping[Edge, float]
    """bytes/s for every ordered pair of distinct vertices."""
    ramp_s: Mapping[Edge, float] = field(default_factory=dict)
    default_ramp_s: float = 1.0
    noise: float = 0.03
    """Relative standard deviation of a measurement."""
    events: tuple[SimEvent, ...] = ()
    links: Mapping[str, float] = field(default_factory=dict)
    """Physical links (any names) and their capacities in bytes/s, shared by the streams whose routes cross them."""
    routes: Mapping[Edge, tuple[str, ...]] = field(default_factory=dict)
    """The physical links each overlay edge crosses; an edge without a route shares nothing."""
    rtts: Mapping[Edge, float] = field(default_factory=dict)
    """Round-trip times (seconds) of the overlay edges, where the topology has them."""
    rtt_bias: float = RTT_BIAS
    """How a full link favours streams of short round trips: each stream's share is weighted by its round trip to
    the power ``-rtt_bias`` (with the hosts' time added, ``RTT_HOST_S``'s middle). 0: plain max-min, every stream
    alike; 1: TCP's textbook bias, rate inversely proportional to the round trip."""

    def rtts_from(self, src: str) -> dict[str, float]:
        """The round trip from ``src`` to every vertex it is known for: the links' delays alone."""
        return {v: t for (u, v), t in self.rtts.items() if u == src}

    def measured_rtts(
        self, src: str, *, seed: int, peers: bool, host_s: tuple[float, float] = RTT_HOST_S
    ) -> tuple[dict[str, float], dict[Edge, float]]:
        """The round trips a transfer from ``src`` is given, as lnet-send and the depots time them: the client's to
        every vertex, and (with ``peers``) every other pair's, each with the hosts' own time added, drawn uniformly
        from ``host_s`` (``(0, 0)``: the links' delays alone)."""
        low, high = host_s
        rng = random.Random(seed)
        measured = {edge: t + rng.uniform(low, high) for edge, t in sorted(self.rtts.items())}
        own = {v: t for (u, v), t in measured.items() if u == src}
        return own, ({edge: t for edge, t in measured.items() if src not in edge} if peers else {})

    def __post_init__(self) -> None:
        missing = [(u, v) for u in self.vertices for v in self.vertices if u != v and (u, v) not in self.capacities]
        if missing:
            raise ValueError(f"no capacity for {missing[:3]}...")
        unknown = {link for route in self.routes.values() for link in route} - set(self.links)
        if unknown:
            raise ValueError(f"routes cross links with no capacity: {sorted(unknown)[:3]}")
        strangers = {e.link for e in self.events if isinstance(e, DegradeLink)} - set(self.links)
        if strangers:
            raise ValueError(f"events change links the network does not have: {sorted(strangers)[:3]}")

    def share(self, flows: Mapping[Edge, int], now: float) -> dict[Edge, float]:
        """The aggregate rate (bytes/s) each flow gets when ``flows[edge]`` streams run on every edge at once.

        Water-filling: every stream's rate rises together, each in proportion to its weight (``rtt_bias``), until
        it reaches its edge's own rate or a link it crosses is full; those streams stop there and the rest go on
        rising (weighted max-min fairness; with ``rtt_bias`` 0, plain max-min).
        """
        per: dict[Edge, float] = {}
        active = {edge: count for edge, count in flows.items() if count > 0 and self.capacity(edge, now) > 0}
        weight = self._weights
        left = self.link_capacities(now)
        full_at = dict(left)
        while active:
            crossing: dict[str, float] = {}
            for edge, count in active.items():
                for link in self.routes.get(edge, ()):
                    crossing[link] = crossing.get(link, 0) + count * weight.get(edge, 1.0)
            rise = min(
                [(self.capacity(edge, now) - per.get(edge, 0.0)) / weight.get(edge, 1.0) for edge in active]
                + [left[link] / n for link, n in crossing.items()]
            )
            rise = max(rise, 0.0)
            for edge in active:
                per[edge] = per.get(edge, 0.0) + rise * weight.get(edge, 1.0)
            for link, n in crossing.items():
                left[link] -= rise * n
            full = {link for link, n in crossing.items() if left[link] <= 1e-9 * max(1.0, full_at[link])}
            done = [
                edge
                for edge in active
                if per[edge] >= self.capacity(edge, now) * (1 - 1e-12) or full & set(self.routes.get(edge, ()))
            ]
            for edge in done:
                del active[edge]
        return {edge: per.get(edge, 0.0) * count for edge, count in flows.items()}

    @cached_property
    def _weights(self) -> dict[Edge, float]:
        """Each edge's streams' weight on a full link (``rtt_bias``), the largest 1 (an edge without a round trip
        weighs 1 too, as the shortest); empty without a bias."""
        if not self.rtt_bias or not self.rtts:
            return {}
        host = sum(RTT_HOST_S) / 2
        raw = {edge: (rtt + host) ** -self.rtt_bias for edge, rtt in self.rtts.items()}
        top = max(raw.values())
        return {edge: w / top for edge, w in raw.items()}

    def capacity(self, edge: Edge, now: float) -> float:
        """The edge's capacity at ``now``, after the events up to then; 0 through a failed vertex."""
        if self.failed(edge[0], now) or self.failed(edge[1], now):
            return 0.0
        return _latest(self._timelines.get(("edge", edge)), now, self.capacities[edge])

    def link_capacities(self, now: float) -> dict[str, float]:
        """Every physical link's capacity at ``now``, after the ``DegradeLink`` events up to then."""
        return {link: _latest(self._timelines.get(("link", link)), now, rate) for link, rate in self.links.items()}

    def failed(self, vertex: str, now: float) -> bool:
        down = self._timelines.get(("vertex", vertex))
        return down is not None and down[0][0] <= now

    def epoch(self, now: float) -> int:
        """How many events have happened by ``now``: two times of one epoch see the same truth."""
        return bisect.bisect_right(self._event_times, now)

    @cached_property
    def _event_times(self) -> list[float]:
        return sorted(event.at for event in self.events)

    @cached_property
    def _timelines(self) -> dict[tuple[str, object], list[tuple[float, float]]]:
        """Each event's subject (an edge, a link, a failed vertex) and its values over time, in the order of
        ``at`` (events at the same time in the order given), so that a lookup need not scan every event."""
        timelines: dict[tuple[str, object], list[tuple[float, float]]] = {}
        for event in sorted(self.events, key=lambda e: e.at):
            match event:
                case DegradeEdge(at, edge, capacity_bps):
                    timelines.setdefault(("edge", edge), []).append((at, capacity_bps))
                case DegradeLink(at, link, capacity_bps):
                    timelines.setdefault(("link", link), []).append((at, capacity_bps))
                case FailVertex(at, vertex):
                    timelines.setdefault(("vertex", vertex), []).append((at, 0.0))
        return timelines

    def truth(self, src: str, dst: str, now: float = 0.0) -> tuple[Path, float]:
        """The best path at ``now`` by the true capacities, and its throughput."""
        memory = self.accurate_memory(now)
        graph = memory.to_graph(self.vertices)
        path = tuple(widest_path(graph, src, dst))
        return path, path_throughput(graph, path)

    def accurate_memory(self, now: float = 0.0) -> EdgeMemory:
        """A memory holding the true capacity of every edge at ``now``: a perfect warm start."""
        memory = EdgeMemory()
        for (u, v), _ in self.capacities.items():
            capacity = self.capacity((u, v), now)
            if capacity > 0:
                memory.observe(u, v, round(capacity), 1.0, now)
            else:
                memory.fail(u, v, now)
        return memory

    def ramp(self, edge: Edge) -> float:
        return self.ramp_s.get(edge, self.default_ramp_s)


def _latest(timeline: list[tuple[float, float]] | None, now: float, initial: float) -> float:
    """The value of the last change at or before ``now`` in ``timeline`` (sorted by time), else ``initial``."""
    if not timeline:
        return initial
    index = bisect.bisect_right(timeline, now, key=lambda change: change[0])
    return initial if index == 0 else timeline[index - 1][1]


@dataclass(frozen=True, slots=True)
class SimSample:
    """During the step starting at ``t`` the transfer ran on ``path`` at ``rate_bps`` (true, noise-free): the sum
    over the set of ``paths`` (the primary, ``path``, first), each at its rate in ``rates``; ``probes`` ran beside
    it, each edge with its streams."""

    t: float
    path: Path
    rate_bps: float
    paths: tuple[Path, ...] = ()
    rates: tuple[float, ...] = ()
    probes: tuple[tuple[Edge, int], ...] = ()


@dataclass(frozen=True)
class SimResult:
    attempts: list[PathAttempt]
    samples: list[SimSample]
    decisions: list[tuple[float, Switch | DropDepot]]
    delivered_bytes: float
    finished_at: float | None
    """When ``size_bytes`` had all arrived; None if it had not by the end."""

    def first_time_at(self, rate_bps: float) -> float | None:
        """The start of the first step that ran at ``rate_bps`` or faster, or None."""
        return next((s.t for s in self.samples if s.rate_bps >= rate_bps), None)

    @property
    def final_path(self) -> Path:
        return self.samples[-1].path

    @property
    def final_paths(self) -> tuple[Path, ...]:
        return self.samples[-1].paths

    def mean_rate(self, since: float, until: float | None = None) -> float:
        """The mean true rate over the steps starting in [since, until)."""
        steps = [s.rate_bps for s in self.samples if s.t >= since and (until is None or s.t < until)]
        return sum(steps) / len(steps) if steps else 0.0


def _ramp_average(elapsed: float, step: float, ramp: float) -> float:
    """The mean of min(1, x / ramp) for x over [elapsed, elapsed + step]."""
    if ramp <= 0 or elapsed >= ramp:
        return 1.0
    end = elapsed + step
    if end <= ramp:
        return (elapsed + end) / (2 * ramp)
    rising = ramp - elapsed
    return (rising * (elapsed + ramp) / (2 * ramp) + (end - ramp)) / step


def simulate_transfer(
    network: SimNetwork,
    scheduler: PathScheduler,
    *,
    start_s: float = 0.0,
    duration_s: float = 600.0,
    size_bytes: float | None = None,
    step_s: float = 0.5,
    seed: int = 0,
    streams: int | None = None,
    measure: Literal["stream", "busy"] = "stream",
    depth: Literal["fixed", "adaptive"] = "fixed",
    min_depth: int = 2,
    block_bytes: float | None = None,
    end_game: bool = True,
) -> SimResult:
    """Run ``scheduler`` against ``network`` from ``start_s`` for ``duration_s`` or until ``size_bytes`` arrived.

    Each step the hops of every path of the current set (``streams`` each, by default the scheduler's), and the
    edges being probed (one stream each), share the network and report one measurement each (or a failure); then
    the scheduler is ticked, and its decision takes effect for the next step. Each path runs at its slowest hop,
    and the transfer at the sum of its paths. Hops kept across a switch stay ramped up; a probe runs for the
    scheduler's ``probe_s``, its first ``warmup_s`` not reported (the engine's warm-up).

    ``depth="adaptive"`` is lnet's default in-flight rule: each hop runs the fewest streams, from ``min_depth`` up
    to ``streams``, that get it within 5% of what ``streams`` would (the engine stops adding copies once they no
    longer add rate), and its measurements say how many (``Measurement.streams``).

    ``block_bytes`` makes the samples the engine's: a hop reports when a copy ends, a probe once when it ends
    (``_ProbeRun``), so a slow hop's first learnt sample comes many steps in, as on the testbed. With
    ``size_bytes`` as well it models the start and the end of the transfer as the relay runs it. The start
    (``_fill_s``): a depot passes a block on once it holds all of it, so a path delivers nothing until its first
    copies have crossed every hop; a path that joins a set whose other paths stay fills the same way. Its hops
    start at the relay's first depth (``FIRST_DEPTH``) and climb from there as copies end (``CLIMB_COPIES``), up
    to the depth they settle at. The end
    (``_Tail``): once every block is under way, each path holds the blocks in its hops' copies and must deliver
    them itself, unless ``end_game`` (the relay's default) lets idle paths take second copies. None: the fluid
    model, a sample from every hop and probe every step, no start or tail.
    """
    n = scheduler.config.streams if streams is None else streams
    return _run(network, scheduler, (), start_s=start_s, duration_s=duration_s, size_bytes=size_bytes, step_s=step_s,
                seed=seed, streams=n, measure=measure, depth=depth, min_depth=min_depth, block_bytes=block_bytes,
                end_game=end_game)


def simulate_pinned(
    network: SimNetwork,
    paths: Sequence[Path],
    *,
    streams: int,
    start_s: float = 0.0,
    duration_s: float = 600.0,
    size_bytes: float | None = None,
    step_s: float = 0.5,
    depth: Literal["fixed", "adaptive"] = "fixed",
    min_depth: int = 2,
    block_bytes: float | None = None,
    end_game: bool = True,
) -> SimResult:
    """A pinned run: ``paths`` (edge-disjoint, the first the primary) from start to end, ``streams`` a hop, with
    no scheduler, no probes and no decisions, as ``simulate_transfer`` runs a set it does not change: what
    ``lnet-send --path`` gets. Its samples are true rates, so no seed."""
    if not paths:
        raise ValueError("a pinned run needs at least one path")
    return _run(network, None, tuple(tuple(path) for path in paths), start_s=start_s, duration_s=duration_s,
                size_bytes=size_bytes, step_s=step_s, seed=0, streams=streams, measure="stream", depth=depth,
                min_depth=min_depth, block_bytes=block_bytes, end_game=end_game)


def _run(
    network: SimNetwork,
    scheduler: PathScheduler | None,
    pinned: tuple[Path, ...],
    *,
    start_s: float,
    duration_s: float,
    size_bytes: float | None,
    step_s: float,
    seed: int,
    streams: int,
    measure: Literal["stream", "busy"],
    depth: Literal["fixed", "adaptive"],
    min_depth: int,
    block_bytes: float | None = None,
    end_game: bool = True,
) -> SimResult:
    """``simulate_transfer`` driven by ``scheduler``, or ``simulate_pinned`` on ``pinned`` when it is None."""
    n = streams
    rng = random.Random(seed)
    t = start_s
    probing: dict[Edge, float] = {}
    deep: set[Edge] = set()
    """Probes run deep: each at the fewest streams, up to ``n``, that get it within 5% of what ``n`` would."""
    if scheduler is None:
        paths = pinned
    else:
        first = scheduler.start(t)
        paths = first.all_paths
        probing = dict.fromkeys(first.probes, t)
        deep = set(first.deep)
    since = {edge: t for path in paths for edge in edges_of(path)}
    probe_s = math.inf if scheduler is None else scheduler.config.probe_s
    samples: list[SimSample] = []
    decisions: list[tuple[float, Switch | DropDepot]] = []
    delivered = 0.0
    finished_at: float | None = None
    end = start_s + duration_s

    warmup_s = 0.0 if scheduler is None else scheduler.config.warmup_s
    tail = _Tail(end_game) if block_bytes is not None and size_bytes is not None else None
    first_depth = min(FIRST_DEPTH, n)
    climb: dict[Edge, tuple[int, float]] = {}
    """With the tail: each hop's depth as the relay climbs it, from ``first_depth`` up to ``n``, and since when."""
    hop_bps: dict[Edge, float] = {}
    filling: dict[Path, float] = dict.fromkeys(paths, 1.0) if tail is not None else {}
    """With the tail: the paths whose first copies are still on their way, and the part of the way left (1 when
    the path starts). Each step covers ``step_s`` over the fill time the hops' rates of that step give
    (``_fill_s``): a path that joins beside a deep probe of its own hops fills slowly while the probe runs and
    at its own rate once the probe ends (a fill reckoned once, at the first step's shared rates, held a chain
    joined beside deep probes of its three hops empty for 9.3 s; covered step by step, 5.0 s)."""
    shared: dict[tuple[frozenset[tuple[Edge, int]], int], dict[Edge, float]] = {}

    def share(flows: dict[Edge, int]) -> dict[Edge, float]:
        """``network.share(flows, t)``, remembered: the flows and the truth change far less often than steps."""
        key = (frozenset(flows.items()), network.epoch(t))
        if key not in shared:
            shared[key] = network.share(flows, t)
        return shared[key]

    runs: dict[Edge, _ProbeRun] = {}
    """With ``block_bytes``: what each probe has carried, as the engine's copies."""
    pending: dict[Edge, _Pending] = {}
    """With ``block_bytes``: what each hop of the set has carried since its last sample."""

    def run_hop(
        edge: Edge, started: float, shared: float, count: int, events: list[Event], *, report: bool
    ) -> float | None:
        """The hop's true aggregate rate during this step (None if it is dead); its sample or failure goes to
        ``events`` when ``report``: every step in the fluid model, or with ``block_bytes`` once a block's worth
        has arrived, as the engine reports each copy when it ends: the hop's first ``count`` copies began together
        and end together, later ones one block apart (a copy's time, ``count`` blocks at the hop's rate, dates
        its ``began``)."""
        if network.capacity(edge, t) <= 0:
            if report:
                events.append(HopFailure(edge, t + step_s))
            return None
        rate = shared * _ramp_average(t - started, step_s, network.ramp(edge))
        measured = rate * max(0.01, 1.0 + rng.gauss(0.0, network.noise))
        if report:
            seconds = step_s * (count if measure == "stream" else 1)
            streams = float(count) if depth == "adaptive" else None
            if block_bytes is None:
                events.append(Measurement(edge, round(measured * step_s), seconds, t + step_s, streams, began=t))
                return rate
            held = pending.get(edge)
            if held is None or held.started != started:
                held = pending[edge] = _Pending(started)
            held.nbytes += measured * step_s
            held.seconds += seconds
            # the hop's first copies began together and end together; later ones end one block apart
            if held.nbytes >= block_bytes * (count if held.first else 1):
                held.first = False
                copy_s = count * block_bytes / rate if rate > 0 else step_s
                began = max(started, t + step_s - copy_s)
                events.append(Measurement(edge, round(held.nbytes), held.seconds, t + step_s, streams, began=began))
                held.nbytes = held.seconds = 0.0
        return rate

    def adapt(flows: dict[Edge, int], hops: list[Edge]) -> dict[Edge, int]:
        """``depths``: each hop at the fewest streams that get it within 5% of what its ``n`` would."""
        for edge in hops:
            others = flows[edge] - n  # a probe on the same edge
            aim = 0.95 * share(flows)[edge] * n / flows[edge]
            for d in range(min(min_depth, n), n):
                trial = {**flows, edge: others + d}
                if share(trial)[edge] * d / trial[edge] >= aim:
                    flows, depths[edge] = trial, d
                    break
        return flows

    def adapt_probes(flows: dict[Edge, int], probe_depths: dict[Edge, int]) -> dict[Edge, int]:
        """``probe_depths``: each deep probe at the fewest streams that get it within 5% of what ``n`` would."""
        for edge in [edge for edge, d in probe_depths.items() if d > 1]:
            others = flows[edge] - n
            aim = 0.95 * share(flows)[edge] * n / flows[edge]
            for d in range(1, n):
                trial = {**flows, edge: others + d}
                if share(trial)[edge] * d / trial[edge] >= aim:
                    flows, probe_depths[edge] = trial, d
                    break
        return flows

    while t < end - 1e-9:
        events: list[Event] = []
        down = [v for v in dict.fromkeys(v for path in paths for v in path) if network.failed(v, t)]
        events.extend(DepotFailure(v, t + step_s) for v in down)
        for edge, started in list(probing.items()):
            if block_bytes is None:
                if t - started < probe_s:
                    continue
            else:
                run = runs.get(edge)
                if run is None or not run.over(t - started, probe_s):
                    continue
                # as the engine's probe ends: its copies after the first, else the first, else a bound
                events.append(run.measurement(edge, t, started, adaptive=depth == "adaptive"))
                del runs[edge]
            del probing[edge]
            deep.discard(edge)
            events.append(ProbeDone(edge, t))
        # A path whose first copies are still on their way runs the relay's first depth on every hop (it climbs
        # from there once copies have ended, ``lnet.client.engines.depth``), not the depth it settles at.
        depths = {edge: n for path in paths for edge in edges_of(path)}
        if tail is not None and block_bytes is not None:
            climbed: dict[Edge, tuple[int, float]] = {}  # the hops of the set now: one that left starts again
            for path in paths:
                unfilled = path in filling
                for edge in edges_of(path):
                    level, at = climb.get(edge, (first_depth, t))
                    if unfilled:
                        level, at = first_depth, t
                    elif level < n and t - at >= CLIMB_COPIES * level * block_bytes / max(hop_bps.get(edge, 0), 1):
                        level, at = min(n, 2 * level), t
                    climbed[edge] = (level, at)
                    depths[edge] = min(depths[edge], level)
            climb = climbed
        flows: dict[Edge, int] = {}
        for path in paths:
            for edge in edges_of(path):
                flows[edge] = flows.get(edge, 0) + depths[edge]
        probe_depths = {edge: n if edge in deep else 1 for edge in probing}
        for edge, d in probe_depths.items():
            flows[edge] = flows.get(edge, 0) + d
        if depth == "adaptive":
            flows = adapt(flows, [edge for edge, d in depths.items() if d == n])
        flows = adapt_probes(flows, probe_depths)
        shares = share(flows)
        # A dead hop through a dead depot is reported as the depot's failure, not the hop's.
        path_rates = []
        for path in paths:
            report = not set(down) & set(path)
            hop_rates = {edge: shares[edge] * depths[edge] / flows[edge] for edge in edges_of(path)}
            hop_bps.update(hop_rates)
            rates = [
                run_hop(edge, since[edge], hop_rates[edge], depths[edge], events, report=report) or 0.0
                for edge in edges_of(path)
            ]
            delivering = min(rates, default=0.0)
            if path in filling and block_bytes is not None:
                covered = step_s / _fill_s(hop_rates, depths, block_bytes)  # 0 while a hop carries nothing
                left = filling[path]
                if covered >= left:  # filled within the step: it delivers for the part of the step after
                    del filling[path]
                    delivering *= 1.0 - left / covered
                else:
                    filling[path] = left - covered
                    delivering = 0.0
            path_rates.append(delivering)
        # Probes run beside the transfer, one stream each on a connection of its own that starts cold.
        probed = tuple((edge, probe_depths[edge]) for edge in probing)
        for edge, started in list(probing.items()):
            d = probe_depths[edge]
            if block_bytes is None:
                warm = t - started >= warmup_s
                rate = run_hop(edge, started, shares[edge] * d / flows[edge], d, events, report=warm)
            else:  # the engine's copies: reported when the probe ends
                warm = edge in runs and runs[edge].copies >= 1
                rate = run_hop(edge, started, shares[edge] * d / flows[edge], d, [], report=False)
                if rate is not None:
                    measured = rate * max(0.01, 1.0 + rng.gauss(0.0, network.noise))
                    runs.setdefault(edge, _ProbeRun(block_bytes)).carry(rate, measured, step_s, d)
            if rate is None:
                if not warm:
                    events.append(HopFailure(edge, t + step_s))
                events.append(ProbeDone(edge, t + step_s))
                del probing[edge]
                runs.pop(edge, None)
                deep.discard(edge)
        if tail is not None and size_bytes is not None and block_bytes is not None:
            held = {path: block_bytes * sum(depths[edge] for edge in edges_of(path)) for path in paths}
            path_rates = tail.step(paths, path_rates, held, size_bytes - delivered, step_s)
        rate = sum(path_rates)
        samples.append(SimSample(t, paths[0], rate, paths, tuple(path_rates), probed))
        delivered += rate * step_s
        t += step_s
        if size_bytes is not None and (delivered >= size_bytes * (1 - 1e-9) or tail is not None and tail.done):
            finished_at = t
            break
        if scheduler is None:
            continue
        for event in events:
            scheduler.measure(event)
        if size_bytes is not None:
            scheduler.measure(Progress(max(0, round(size_bytes - delivered)), t))
        decision = scheduler.tick(t)
        if not isinstance(decision, Keep):
            decisions.append((t, decision))
        if not isinstance(decision, DropDepot):
            deep.update(edge for edge in decision.deep if edge not in probing)
            probing.update((edge, t) for edge in decision.probes if edge not in probing)
        if decision.all_paths != paths:
            since = {edge: since.get(edge, t) for path in decision.all_paths for edge in edges_of(path)}
            joined = set(decision.all_paths) - set(paths)
            if tail is not None and set(paths) <= set(decision.all_paths):
                # paths that join: the others go on while they fill (where a path replaces another, the one
                # that left still delivers what its hops hold meanwhile, which the model does not count either)
                filling.update(dict.fromkeys(joined, 1.0))
            paths = decision.all_paths
    return SimResult([] if scheduler is None else scheduler.attempts, samples, decisions, delivered, finished_at)


@dataclass
class _ProbeRun:
    """A probe's copies so far, with ``block_bytes``: as the engine's (``EdgeProbes.one_stream``), it runs for the
    probe's time and at least two copies, cut off at twice the probe's time; it reports the copies after its first
    (which ran on a cold connection), or its first if that is all, or a block over its time if not one ended."""

    block: float
    depth: int = 1
    """The copies at once of its latest step (more than one on a deep probe): the depth it reports, as the
    engine reports the depth of its best level."""
    carried: float = 0.0
    """True bytes, which decide when copies end."""
    after_bytes: float = 0.0
    after_seconds: float = 0.0
    """What the copies after the first measured (noisy bytes, stream-seconds)."""
    first_s: float = 0.0
    """The first copy's stream-seconds (until it ended)."""

    @property
    def copies(self) -> int:
        return int(self.carried // self.block)

    def carry(self, rate: float, measured: float, step_s: float, depth: int) -> None:
        self.depth = depth
        if self.copies >= 1:
            self.after_bytes += measured * step_s
            self.after_seconds += step_s * depth
        else:
            self.first_s += step_s * depth
        self.carried += rate * step_s

    def over(self, elapsed: float, probe_s: float) -> bool:
        return elapsed >= 2 * probe_s or elapsed >= probe_s and self.copies >= 2

    def measurement(self, edge: Edge, at: float, started: float, *, adaptive: bool) -> Measurement:
        streams = float(self.depth) if adaptive else None
        if self.copies >= 2 and self.after_seconds > 0:
            return Measurement(edge, round(self.after_bytes), self.after_seconds, at, streams, began=started)
        if self.copies == 1:
            return Measurement(edge, round(self.block), max(self.first_s, 1e-3), at, streams, began=started)
        return Measurement(edge, round(self.block), max(at - started, 1e-3) * self.depth, at, streams, began=started)


@dataclass
class _Pending:
    """A hop's bytes and stream-seconds since its last block-sized sample, for the hop started at ``started``."""

    started: float
    nbytes: float = 0.0
    seconds: float = 0.0
    first: bool = True


def _fill_s(hop_rates: Mapping[Edge, float], depths: Mapping[Edge, int], block_bytes: float) -> float:
    """How long a path's first copies take to reach the destination: on each hop, ``depth`` copies of a block
    share the hop's rate, and a depot passes a block on once it holds all of it (measured on the testbed: a
    1 MiB block's first arrival over two hops of 55 Mbit/s at four copies a hop came at 1.4 s, 1.2 s by this)."""
    return sum(depths[edge] * block_bytes / rate if rate > 0 else math.inf for edge, rate in hop_rates.items())


class _Tail:
    """The end of a transfer as the relay runs it, over the fluid model's rates.

    While blocks remain to hand out, each path delivers at its rate (blocks go where they arrive soonest). Once the
    bytes left are no more than the paths hold (each hop's copies in flight, a block each: what a path has taken
    past the client and only it can deliver), every path has its own backlog, shared among them in proportion to
    what they hold, and the transfer ends when the last drains. A slow path of many hops holds as many blocks as
    a fast one and drains them last: on the testbed a warm start ran direct beside a four-hop path, direct was
    done after 12 s and the four-hop path delivered 10 MiB alone until 17 s. With ``end_game`` (the relay's
    default, ``striping.endgame``), an idle path's rate takes from the others' backlogs (the latest-draining
    first), as second copies do. A path that leaves the set in the tail hands its backlog to the primary."""

    def __init__(self, end_game: bool) -> None:
        self.end_game = end_game
        self.backlog: dict[Path, float] | None = None
        self.done = False

    def step(
        self, paths: Sequence[Path], rates: Sequence[float], held: Mapping[Path, float], left: float, step_s: float
    ) -> list[float]:
        """The rate each path delivers during the step (bytes/s), given ``left`` bytes not yet delivered."""
        if self.backlog is None:
            if left > sum(held.values()):
                return list(rates)
            total = sum(held.values())
            self.backlog = {path: left * held[path] / total for path in paths}
        backlog = self.backlog
        for path in [p for p in backlog if p not in paths]:  # left the set: its blocks go on by the primary
            backlog[paths[0]] = backlog.get(paths[0], 0.0) + backlog.pop(path)
        own = [min(backlog.get(path, 0.0), rate * step_s) for path, rate in zip(paths, rates, strict=True)]
        for path, nbytes in zip(paths, own, strict=True):
            backlog[path] = backlog.get(path, 0.0) - nbytes
        if self.end_game:
            spare = sum(rate * step_s - nbytes for rate, nbytes in zip(rates, own, strict=True))
            speed = dict(zip(paths, rates, strict=True))
            while spare > 1e-9 and (waiting := [p for p, b in backlog.items() if b > 1e-9]):
                # the path that would deliver its blocks last, among those that hold some (one that holds none
                # at a rate of 0 would be "last" for ever, and nothing taken from it)
                last = max(waiting, key=lambda p: backlog[p] / speed[p] if speed.get(p, 0) > 0 else math.inf)
                taken = min(spare, backlog[last])
                backlog[last] -= taken
                spare -= taken
                helper = max(range(len(paths)), key=lambda i: rates[i] * step_s - own[i])
                own[helper] += taken
        self.done = all(b <= 1e-9 for b in backlog.values())
        return [nbytes / step_s for nbytes in own]


# -- topologies ------------------------------------------------------------------------------------------

ABILENE_SRC = "ornl"
ABILENE_DST = "sunnyvale"
ABILENE_BEST_PATH: Path = ("ornl", "atlanta", "indianapolis", "kansas-city", "denver", "sunnyvale")

# The seed's numbers, Mbit/s. Table 2 gives the best path's edges; the rest are chosen so that every path of
# Table 1 has the throughput it reports there (the edge that is its bottleneck carries that value, the others
# more), and so that nothing else beats the best path: every edge into Sunnyvale except Denver's, and every edge
# out of ORNL except Atlanta's, is under 5.99.
_ABILENE_MBIT: dict[Edge, float] = {
    # Table 2
    ("ornl", "atlanta"): 17.44,
    ("atlanta", "indianapolis"): 11.76,
    ("indianapolis", "kansas-city"): 11.52,
    ("kansas-city", "denver"): 11.01,
    ("denver", "sunnyvale"): 5.99,
    # Table 1, the direct path and the two-hop paths
    ("ornl", "sunnyvale"): 2.63,
    ("ornl", "indianapolis"): 3.58,
    ("indianapolis", "sunnyvale"): 4.10,
    ("ornl", "denver"): 3.75,
    ("atlanta", "sunnyvale"): 2.55,
    ("ornl", "kansas-city"): 3.23,
    ("kansas-city", "sunnyvale"): 3.90,
    ("ornl", "washington"): 1.66,
    ("washington", "sunnyvale"): 2.90,
    ("ornl", "new-york"): 1.74,
    ("new-york", "sunnyvale"): 3.10,
    # Table 1, the longer paths
    ("atlanta", "denver"): 4.30,
    ("indianapolis", "denver"): 4.94,
    ("atlanta", "kansas-city"): 4.40,
    ("atlanta", "washington"): 5.00,
    ("washington", "denver"): 2.72,
    ("atlanta", "new-york"): 4.80,
    ("new-york", "denver"): 2.44,
}
# Listed in the order the seed tried two-hop paths, which is how ties between unknown paths are broken.
_ABILENE_VERTICES = (
    "ornl",
    "indianapolis",
    "denver",
    "atlanta",
    "kansas-city",
    "washington",
    "new-york",
    "sunnyvale",
)
_ABILENE_OTHER_MBIT = 3.0
"""Every edge neither table constrains (backwards, or between the side depots): slow enough to matter nowhere."""


def abilene(*, events: Iterable[SimEvent] = (), noise: float = 0.03, ramp_s: float = 2.0) -> SimNetwork:
    """The seed's testbed: ORNL to Sunnyvale over Abilene with six depots (Tables 1 and 2)."""
    capacities = {
        (u, v): mbit(_ABILENE_MBIT.get((u, v), _ABILENE_OTHER_MBIT))
        for u in _ABILENE_VERTICES
        for v in _ABILENE_VERTICES
        if u != v
    }
    return SimNetwork(_ABILENE_VERTICES, capacities, default_ramp_s=ramp_s, noise=noise, events=tuple(events))


def random_topology(
    n_vertices: int,
    seed: int,
    *,
    window_bytes: float = 256 * 1024,
    link_bps: float = mbit(100.0),
    noise: float = 0.03,
) -> SimNetwork:
    """A full mesh of long-distance hosts: ``v0`` (the source) and ``v{n-1}`` (the destination) at opposite ends
    of a unit square, the depots scattered at random between.

    A hop's capacity is the TCP window over its round-trip time (5 ms plus 100 ms per unit of distance), capped
    by the link rate, times a random log-normal factor for load; its ramp is ten round trips. So short hops are
    fast, which is what makes relaying pay, and the load factor makes the best chain hard to guess.
    """
    if n_vertices < 2:
        raise ValueError("a topology needs at least a source and a destination")
    rng = random.Random(seed)
    names = tuple(f"v{i}" for i in range(n_vertices))
    where = {names[0]: (0.0, 0.5), names[-1]: (1.0, 0.5)}
    for name in names[1:-1]:
        where[name] = (rng.random(), rng.random())
    capacities: dict[Edge, float] = {}
    ramps: dict[Edge, float] = {}
    for u in names:
        for v in names:
            if u == v:
                continue
            rtt = 0.005 + 0.1 * math.dist(where[u], where[v])
            capacities[(u, v)] = min(link_bps, window_bytes / rtt) * rng.lognormvariate(0.0, 0.4)
            ramps[(u, v)] = 10 * rtt
    return SimNetwork(names, capacities, ramps, noise=noise)


# The emulated Abilene testbed (deploy/topologies/abilene.toml), as physical links: one-way delay (ms) and rate
# (Mbit/s) of each link, each host's TCP window (KiB; a host's window caps what it receives). Overlay edges
# follow the shortest route by delay, so every chain to Sunnyvale shares the Denver-Sunnyvale link with the
# direct route, as on the real backbone.
_ABILENE_LINKS: dict[tuple[str, str], tuple[float, float]] = {
    ("ornl", "atl"): (3.0, 36.0),
    ("atl", "ind"): (5.0, 24.0),
    ("ind", "kc"): (5.0, 24.0),
    ("kc", "den"): (5.0, 24.0),
    ("den", "svl"): (14.0, 20.0),
    ("ornl", "wdc"): (6.0, 40.0),
    ("wdc", "nyc"): (3.0, 40.0),
    ("nyc", "ind"): (10.0, 3.6),
}
_ABILENE_WINDOW_KIB = {"ind": 17, "kc": 21, "den": 21, "nyc": 12, "wdc": 12}
_ABILENE_HOSTS = ("ornl", "atl", "ind", "kc", "den", "svl", "nyc", "wdc")


def abilene_shared(*, noise: float = 0.03, ramp_rtts: float = 10.0) -> SimNetwork:
    """The emulated Abilene testbed: window-limited streams over shared backbone links (see ``SimNetwork``).

    Direct ORNL -> Sunnyvale is one 40 KiB window over 64 ms (5.1 Mbit/s a stream); the four-depot chain's
    narrowest hop is Denver -> Sunnyvale (11.7 a stream), and with two streams a hop the chain fills the 20 Mbit/s
    Denver-Sunnyvale link that the direct route also crosses.
    """
    return _physical_network(
        _ABILENE_HOSTS, _ABILENE_LINKS, _ABILENE_WINDOW_KIB, default_window_kib=40, noise=noise, ramp_rtts=ramp_rtts
    )


def _physical_network(
    hosts: tuple[str, ...],
    link_table: Mapping[tuple[str, str], tuple[float, float]],
    windows_kib: Mapping[str, float],
    *,
    default_window_kib: float,
    noise: float,
    ramp_rtts: float,
    events: Iterable[SimEvent] = (),
) -> SimNetwork:
    """An overlay of ``hosts`` over physical links ``{(a, b): (one-way delay ms, Mbit/s)}`` (routers: link ends
    that are not hosts). Each overlay edge follows the shortest route by delay; one stream on it gets the
    receiver's window over the round trip, capped by the narrowest link it crosses, and shares every link it
    crosses with the other streams there."""
    nodes = dict.fromkeys([*hosts, *(end for link in link_table for end in link)])
    adjacency: dict[str, dict[str, float]] = {node: {} for node in nodes}
    for (a, b), (delay_ms, _) in link_table.items():
        adjacency[a][b] = adjacency[b][a] = delay_ms / 1000
    links = {}
    for (a, b), (_, rate) in link_table.items():
        links[f"{a}>{b}"] = links[f"{b}>{a}"] = mbit(rate)
    capacities: dict[Edge, float] = {}
    routes: dict[Edge, tuple[str, ...]] = {}
    ramps: dict[Edge, float] = {}
    rtts: dict[Edge, float] = {}
    for u in hosts:
        delay, hops = _shortest_routes(adjacency, u)
        for v in hosts:
            if u == v:
                continue
            rtt = 2 * delay[v]
            window = windows_kib.get(v, default_window_kib) * 1024
            route = hops[v]
            capacities[(u, v)] = min([window / rtt] + [links[link] for link in route])
            routes[(u, v)] = route
            ramps[(u, v)] = ramp_rtts * rtt
            rtts[(u, v)] = rtt
    return SimNetwork(
        hosts, capacities, ramps, noise=noise, events=tuple(events), links=links, routes=routes, rtts=rtts
    )


# -- multipath topologies: (one-way delay ms, Mbit/s) per physical link, 4 MiB windows everywhere, so
# that a stream is held back by links only.

MULTIPATH_SRC = "src"
MULTIPATH_DST = "dst"
_BIG_WINDOW_KIB = 4096.0


def two_routes(*, noise: float = 0.03, ramp_rtts: float = 10.0, events: Iterable[SimEvent] = ()) -> SimNetwork:
    """Two physically disjoint routes of similar rate, through depot ``a`` (20 Mbit/s) and depot ``b`` (18), and a
    narrow direct link (4). Overlay edges between the depots cross the routes' links."""
    table = {
        ("src", "a"): (5.0, 20.0),
        ("a", "dst"): (5.0, 20.0),
        ("src", "b"): (6.0, 18.0),
        ("b", "dst"): (6.0, 18.0),
        ("src", "dst"): (8.0, 4.0),
    }
    hosts = ("src", "a", "b", "dst")
    return _physical_network(
        hosts, table, {}, default_window_kib=_BIG_WINDOW_KIB, noise=noise, ramp_rtts=ramp_rtts, events=events
    )


def window_detour(*, detour_mbit: float = 400.0, noise: float = 0.03, ramp_rtts: float = 10.0) -> SimNetwork:
    """Every host's receive window 64 KiB, every link 400 Mbit/s: each stream is held to its window over its round
    trip, so the direct route (76 ms) gives 6.9 Mbit/s a stream, 110 at 16, and the detour through depot ``d``
    (40 ms a hop) 13.1 a stream, 210 at 16. One stream on the detour's hops, what a probe runs, is far below the
    direct route's 16: only more streams show the detour is the best path (theory of operation, 13).
    ``detour_mbit``: the detour's links' rate (below 13.1, one stream fills them and the detour is no better)."""
    table = {("src", "dst"): (38.0, 400.0), ("src", "d"): (20.0, detour_mbit), ("d", "dst"): (20.0, detour_mbit)}
    return _physical_network(("src", "d", "dst"), table, {}, default_window_kib=64.0, noise=noise,
                             ramp_rtts=ramp_rtts)


TWO_ROUTES: tuple[Path, ...] = (("src", "a", "dst"), ("src", "b", "dst"), ("src", "dst"))
"""``two_routes()``'s physically disjoint routes, widest first."""


def three_routes(*, noise: float = 0.03, ramp_rtts: float = 10.0, events: Iterable[SimEvent] = ()) -> SimNetwork:
    """Three physically disjoint routes of different rates, through ``a`` (30 Mbit/s), ``b`` (20) and ``c`` (10).
    There is no direct link: the direct overlay edge rides route ``a``'s links, so that direct and the path
    through ``a`` are edge-disjoint in the overlay but share every physical link."""
    table = {
        ("src", "a"): (5.0, 30.0),
        ("a", "dst"): (5.0, 30.0),
        ("src", "b"): (6.0, 20.0),
        ("b", "dst"): (6.0, 20.0),
        ("src", "c"): (7.0, 10.0),
        ("c", "dst"): (7.0, 10.0),
    }
    hosts = ("src", "a", "b", "c", "dst")
    return _physical_network(
        hosts, table, {}, default_window_kib=_BIG_WINDOW_KIB, noise=noise, ramp_rtts=ramp_rtts, events=events
    )


THREE_ROUTES: tuple[Path, ...] = (("src", "a", "dst"), ("src", "b", "dst"), ("src", "c", "dst"))
"""``three_routes()``'s physically disjoint routes, widest first."""


def one_bottleneck(*, noise: float = 0.03, ramp_rtts: float = 10.0) -> SimNetwork:
    """A dumbbell: ``src`` and depot ``a`` behind router ``left``, depot ``b`` and ``dst`` behind ``right``, depot
    ``c`` on a spur of ``left``; every route from ``src`` to ``dst`` crosses the 20 Mbit/s ``left``-``right``
    link, however many edge-disjoint overlay paths there are (direct, through ``a``, through ``b``, ...)."""
    table = {
        ("src", "left"): (1.0, 100.0),
        ("a", "left"): (2.0, 100.0),
        ("c", "left"): (3.0, 100.0),
        ("left", "right"): (10.0, 20.0),
        ("right", "b"): (2.0, 100.0),
        ("right", "dst"): (1.0, 100.0),
    }
    hosts = ("src", "a", "b", "c", "dst")
    return _physical_network(hosts, table, {}, default_window_kib=_BIG_WINDOW_KIB, noise=noise, ramp_rtts=ramp_rtts)


def _shortest_routes(
    adjacency: Mapping[str, Mapping[str, float]], src: str
) -> tuple[dict[str, float], dict[str, tuple[str, ...]]]:
    """Dijkstra by delay from ``src``: the one-way delay to every host and the directed links on the way."""
    delay = {src: 0.0}
    route: dict[str, tuple[str, ...]] = {src: ()}
    todo = set(adjacency)
    while todo:
        here = min((h for h in todo if h in delay), key=delay.__getitem__)
        todo.discard(here)
        for there, d in adjacency[here].items():
            if there in todo and delay[here] + d < delay.get(there, math.inf):
                delay[there] = delay[here] + d
                route[there] = (*route[here], f"{here}>{there}")
    return delay, route
