"""Seeded random scenarios for the simulator, each with its best answer known: the distributions the decision
rules are judged by, beside the named cases.

``scenario(seed, index)`` is a pure function: the same arguments build the same network, bit for bit. The index
picks the kind (``KINDS[index % 6]``) and the size class (``SIZES[(index // 6) % 3]``: 4-8, 16 or 32 depots), so
any run of consecutive indices covers every pair about evenly; the seed and index seed everything else.

The physical model. Hosts sit on a plane (the source at the left edge, the destination at the right, one unit
apart); physical links join near hosts, each with a random rate and a one-way delay of 1 ms plus 40 ms a unit of
length, so a link is always the shortest route between its two ends and the source is about 80 ms round trip
from the destination. An overlay edge follows the shortest route by delay, as IP would. One stream on it is held
to the receiver's TCP window over the round trip, to its loss limit, and to the narrowest link it crosses; the
streams on a full link share it in inverse proportion to their round trips (``SimNetwork.rtt_bias``). The simulator
has no loss model: a link's packet loss appears only as a lower per-stream cap, about MSS / (RTT sqrt(p)) (Mathis et
al., constant 1.22) with ``p`` the losses of the links the route crosses added up. Nothing is retransmitted and
rates do not fluctuate with loss, so a lossy path is steadier here than on a real network.

The kinds, each promised by construction and checked on the built network (a draw that misses is drawn again,
at most ``MAX_DRAWS`` times); rates are what a path gets alone at lnet-send's 16 streams a hop:

- ``direct``: a wide direct link; every other link is at most 0.6 of it, and depots near either end route over
  it (a path through them shares the direct route's link). The direct path is the best one, by 10% or more.
- ``detour``: a chain of one to three depots on short links beats the direct path by 30% or more; the direct
  link is either narrow, or as lossy as the chain's links and so, over its longer round trip, slower a stream.
- ``disjoint``: two or three physically disjoint routes through depots (``Scenario.routes``), of similar rates,
  that together carry at least 1.3x the best single path; a narrow direct link or none.
- ``decoy``: two to four depots a few milliseconds from the source (the nearest by round trip, which lnet
  explores first) behind narrow links: every path through one carries at most half the best path, which goes
  through farther depots and beats direct by 20% or more.
- ``shared``: the destination sits behind one link narrower than any other, which every route crosses; the
  best path fills it (85% or more), and no set of paths can carry more.
- ``change``: two disjoint routes of different rates; 35-65% into the cold run the wider one's link into the
  destination drops (or the other route's links rise) enough that another path becomes the best by 25% or
  more; as far into the warm run it changes back (``change_at_s``), so that each run sees one change.

The oracle (``Oracle``, one for the cold run's time window and one for the warm run's) is the best of pinned
runs (``simulate_pinned``, lnet-send's 16 streams a hop and its in-flight rule) over the candidate paths: direct,
the designed ones, and the widest path by the network's capacities with its one-edge deviations, the best
``TOP_CANDIDATES`` of them by their rate alone. Where the truth changes mid-window, the best candidate is taken
for each part, as if the move were free. Where the kind has disjoint routes, their pinned runs are also added up.

On the testbed. ``Scenario.physical`` keeps the network under the overlay (hosts' windows; links' rates, delays
and losses; the changes of rates), from which ``overlay`` builds the scenario's network again. Scaled
(``Physical.scaled``, by ``emulation_scale``: the fastest link to ``TESTBED_FASTEST_MBIT``), rates and windows
shrink by the factor and losses by its square, so every window-, loss- and link-limited rate shrinks by the
factor and the delays stay; ``topology_of`` and ``topology_file`` write it as a testbed topology. The simulator's
network of the same scaled description (``overlay``) is what a testbed run is compared with.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

import networkx as nx

from ._loop import Path
from ._memory import Edge
from ._widest import THROUGHPUT, NoPathError, edges_of, widest_path
from .simulator import DegradeEdge, DegradeLink, SimEvent, SimNetwork, _shortest_routes, mbit, simulate_pinned

__all__ = [
    "COLD_S",
    "KINDS",
    "MAX_DRAWS",
    "MAX_LOSS",
    "MIN_STREAMS",
    "MIN_WINDOW_BYTES",
    "SIZES",
    "STEP_S",
    "STREAMS",
    "TESTBED_FASTEST_MBIT",
    "TESTBED_MTU",
    "TOP_CANDIDATES",
    "WARM_S",
    "LinkChange",
    "Oracle",
    "Physical",
    "PhysicalLink",
    "Scenario",
    "emulation_scale",
    "overlay",
    "physical_routes",
    "scenario",
    "scenarios",
    "steady_rate",
    "topology_file",
    "topology_of",
]

KINDS: tuple[str, ...] = ("direct", "detour", "disjoint", "decoy", "shared", "change")
SIZES: tuple[tuple[int, int], ...] = ((4, 8), (16, 16), (32, 32))
"""Depots (fewest, most) of each size class."""
STREAMS = 16
"""Blocks in flight a hop: lnet-send's ``--max-inflight`` default, the most its in-flight rule uses."""
MIN_STREAMS = 2
"""The fewest its in-flight rule uses (``min_inflight``)."""
COLD_S = 600.0
"""Simulated seconds of the cold run: room for a 32-depot cold start, which took about 300 s to its best path."""
WARM_S = 300.0
"""Simulated seconds of the warm run, which follows the cold one (from ``COLD_S`` on)."""
STEP_S = 1.0
MAX_DRAWS = 200
TOP_CANDIDATES = 4
SRC, DST = "src", "dst"
TESTBED_MTU = 1500
"""The testbed topologies' MTU: TCP's payload is ``_MSS_BYTES`` of each packet, as the loss model assumes."""
TESTBED_FASTEST_MBIT = 60.0
"""``emulation_scale`` scales a scenario down until its fastest link carries this: with lnet's depots, its client
and the link emulator sharing the 2-core machine, what is emulated at this rate is what TCP gets."""
MIN_WINDOW_BYTES = 14 * 1448
"""The smallest receive window a scaled network keeps: 14 segments (below that Linux's window is coarse)."""
MAX_LOSS = 0.01
"""The most a scaled link loses: beyond a percent TCP's rate is set by timeouts more than by the Mathis limit."""

_BASE_MS = 1.0
_MS_PER_UNIT = 40.0
_HEIGHT = 0.6
"""The plane is 1 unit wide (source to destination) and this high."""
_MSS_BYTES = 1448
_MATHIS = 1.22
_WINDOWS_KIB = (64, 128, 256, 512, 1024, 4096)
_BIG_WINDOW_KIB = 4096.0
_RAMP_RTTS = 10.0
_NOISE = 0.03


@dataclass(frozen=True)
class Oracle:
    """What the best pinned runs get over one run's time window, in bytes/s."""

    start_s: float
    duration_s: float
    best_bps: float
    """The best pinned single path's mean rate over the window (for each part of it where the truth changes)."""
    best_paths: tuple[Path, ...]
    """The path that gives ``best_bps``, one for each part of the window."""
    steady_bps: float
    """The best path's rate alone at the window's start, ramped up: the bar of a cold start's time to 90%."""
    direct_bps: float
    """The pinned direct path's mean rate."""
    routes_bps: float | None
    """The disjoint routes' pinned mean rates added up; None where the kind has none."""


@dataclass(frozen=True)
class PhysicalLink:
    """A physical link between two hosts: ``rate_mbit`` each way (what TCP's payload gets), ``delay_s`` one way,
    and ``loss``, the fraction of packets it drops each way."""

    a: str
    b: str
    rate_mbit: float
    delay_s: float
    loss: float


@dataclass(frozen=True)
class LinkChange:
    """From ``at`` (simulated seconds) on, the link between ``a`` and ``b`` carries ``rate_mbit`` each way."""

    at: float
    a: str
    b: str
    rate_mbit: float


@dataclass(frozen=True)
class Physical:
    """A scenario's physical network in its final host names: the hosts (in the overlay's vertex order) with
    their receive windows, the links, and the changes of link rates over time. ``factor`` and the two clamp
    records say how it was scaled (``scaled``); the scenario's own has factor 1 and clamps nothing."""

    hosts: tuple[str, ...]
    windows_kib: Mapping[str, float]
    links: tuple[PhysicalLink, ...]
    changes: tuple[LinkChange, ...] = ()
    factor: float = 1.0
    raised_windows: tuple[str, ...] = ()
    """Hosts whose window, scaled, was under ``MIN_WINDOW_BYTES`` and was raised to it."""
    capped_losses: tuple[tuple[str, str], ...] = ()
    """Links whose loss, scaled, was over ``MAX_LOSS`` and was capped to it."""

    def static(self) -> Physical:
        """The network as it starts, without its changes."""
        return replace(self, changes=())

    def scaled(self, factor: float) -> Physical:
        """Rates and windows times ``factor``, losses over its square, delays kept: every edge's per-stream rate
        (the window over the round trip, the Mathis loss limit, the narrowest link) is then ``factor`` times what
        it was, and where those rates share links they share them in the same proportions. Two limits keep the
        emulation honest, and break the proportion where they bind (recorded): a window is at least
        ``MIN_WINDOW_BYTES`` (below about 14 segments TCP's window gets coarse), a loss at most ``MAX_LOSS``
        (beyond it TCP is held by timeouts, not the Mathis limit). Windows are whole bytes."""
        if not 0 < factor <= 1:
            raise ValueError(f"a scale factor is in (0, 1], not {factor}")
        windows: dict[str, float] = {}
        raised = []
        for host, window in self.windows_kib.items():
            window_bytes = round(window * 1024 * factor)
            if window_bytes < MIN_WINDOW_BYTES:
                window_bytes = MIN_WINDOW_BYTES
                raised.append(host)
            windows[host] = window_bytes / 1024
        links = []
        capped = []
        for link in self.links:
            loss = link.loss / factor**2
            if loss > MAX_LOSS:
                loss = MAX_LOSS
                capped.append((link.a, link.b))
            links.append(replace(link, rate_mbit=link.rate_mbit * factor, loss=loss))
        changes = tuple(replace(change, rate_mbit=change.rate_mbit * factor) for change in self.changes)
        return Physical(self.hosts, windows, tuple(links), changes, self.factor * factor,
                        (*self.raised_windows, *raised), (*self.capped_losses, *capped))


@dataclass(frozen=True)
class Scenario:
    kind: str
    seed: int
    index: int
    depots: int
    network: SimNetwork
    src: str
    dst: str
    routes: tuple[Path, ...]
    """Physically disjoint routes (``disjoint``, ``change``), widest first; empty for the other kinds."""
    candidates: tuple[Path, ...]
    """The paths the oracle pinned, best first (by the rate alone at the start)."""
    change_at_s: tuple[float, ...]
    """When the truth changes, in simulated seconds; empty when it never does."""
    oracles: tuple[Oracle, Oracle]
    """The cold run's window, [0, cold_s), and the warm run's, [cold_s, cold_s + warm_s)."""
    draws: int
    """Networks drawn until one had the kind's property."""
    physical: Physical
    """The network under the overlay: ``overlay(physical)`` builds ``network`` again."""
    roles: dict[str, str] = field(default_factory=dict)
    """Each designed depot's role (``chain``, ``route1``, ``decoy``, ``gate``, ...); background depots have none."""

    @property
    def size_class(self) -> str:
        return "<=8" if self.depots <= 8 else str(self.depots)

    @property
    def cold(self) -> Oracle:
        return self.oracles[0]

    @property
    def warm(self) -> Oracle:
        return self.oracles[1]


def scenarios(
    seed: int, count: int, *, cold_s: float = COLD_S, warm_s: float = WARM_S, step_s: float = STEP_S
) -> Iterator[Scenario]:
    """``scenario(seed, index)`` for index 0 to ``count - 1``."""
    for index in range(count):
        yield scenario(seed, index, cold_s=cold_s, warm_s=warm_s, step_s=step_s)


def scenario(
    seed: int, index: int, *, cold_s: float = COLD_S, warm_s: float = WARM_S, step_s: float = STEP_S,
    depots: int | None = None,
) -> Scenario:
    """The ``index``-th scenario of ``seed``: kind and size class by the index, everything else drawn.
    ``depots``: that many depots instead of the size class's (for overlays larger than the classes)."""
    kind = KINDS[index % len(KINDS)]
    low, high = SIZES[(index // len(KINDS)) % len(SIZES)]
    rng = random.Random(f"lnet-scenario:{seed}:{index}")
    drawn = rng.randint(low, high)
    depots = drawn if depots is None else depots
    for draw in range(1, MAX_DRAWS + 1):
        built = _BUILDERS[kind](_Draft(rng), depots, (cold_s, warm_s), step_s)
        if _holds(kind, built):
            return _finish(kind, seed, index, depots, built, draw, (cold_s, warm_s), step_s)
    raise RuntimeError(f"no {kind} scenario with {depots} depots in {MAX_DRAWS} draws (seed {seed}, index {index})")


def steady_rate(network: SimNetwork, path: Sequence[str], now: float = 0.0, streams: int = STREAMS) -> float:
    """What ``path`` carries alone at ``streams`` a hop once ramped up, its hops sharing the links they cross."""
    hops = edges_of(path)
    shares = network.share(dict.fromkeys(hops, streams), now)
    return min(shares[hop] for hop in hops)


def physical_routes(network: SimNetwork, path: Sequence[str]) -> set[str]:
    """The physical links the path's hops cross."""
    return {link for hop in edges_of(path) for link in network.routes.get(hop, ())}


# -- drafting ---------------------------------------------------------------------------------------------


class _Draft:
    """A physical network being drawn: hosts on the plane, links between them, in role names."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.where: dict[str, tuple[float, float]] = {}
        self.windows_kib: dict[str, float] = {}
        self.links: dict[tuple[str, str], float] = {}
        """Mbit/s, one entry per physical link (it carries that much each way)."""
        self.loss: dict[tuple[str, str], float] = {}
        self.closed: set[str] = set()
        """Hosts the background depots may not link to."""
        self.roles: dict[str, str] = {}

    def log_uniform(self, low: float, high: float) -> float:
        return math.exp(self.rng.uniform(math.log(low), math.log(high)))

    def host(self, name: str, x: float, y: float, window_kib: float | None = None, role: str | None = None) -> None:
        self.where[name] = (min(max(x, 0.0), 1.0), min(max(y, 0.0), _HEIGHT))
        self.windows_kib[name] = window_kib if window_kib is not None else self.rng.choice(_WINDOWS_KIB)
        if role is not None:
            self.roles[name] = role

    def link(self, a: str, b: str, rate_mbit: float, loss: float = 0.0) -> None:
        self.links[(a, b)] = rate_mbit
        self.loss[(a, b)] = loss

    def ends(self) -> tuple[float, float]:
        """Place the source and the destination at the plane's two edges, at random heights near the middle."""
        mid = _HEIGHT / 2
        self.host(SRC, 0.0, mid + self.rng.uniform(-0.1, 0.1))
        self.host(DST, 1.0, mid + self.rng.uniform(-0.1, 0.1), _BIG_WINDOW_KIB)
        return self.where[SRC][1], self.where[DST][1]

    def background(self, count: int, low_mbit: float, high_mbit: float) -> None:
        """``count`` depots at random between the ends, each linked to the nearest open host placed before it and,
        half the time, to the second nearest; a third of those links lose packets."""
        for i in range(count):
            name = f"bg{i}"
            self.host(name, self.rng.uniform(0.1, 0.9), self.rng.uniform(0.0, _HEIGHT))
            here = self.where[name]
            near = sorted(
                (h for h in self.where if h != name and h not in self.closed),
                key=lambda h: math.dist(here, self.where[h]),
            )
            for other in near[: 1 + (self.rng.random() < 0.5)]:
                loss = self.log_uniform(1e-4, 1e-3) if self.rng.random() < 1 / 3 else 0.0
                self.link(name, other, self.log_uniform(low_mbit, high_mbit), loss)

    def delay_s(self, a: str, b: str) -> float:
        return (_BASE_MS + _MS_PER_UNIT * math.dist(self.where[a], self.where[b])) / 1000


@dataclass
class _Built:
    """A draft turned into an overlay, still in role names."""

    draft: _Draft
    network: SimNetwork
    designed: list[Path]
    routes: list[Path]
    change_at_s: tuple[float, ...] = ()
    changes: tuple[tuple[float, dict[tuple[str, str], float]], ...] = ()
    """What ``_overlay`` was given: at each time, the new rates (Mbit/s) of some links."""


def _overlay(draft: _Draft, changes: Sequence[tuple[float, dict[tuple[str, str], float]]] = ()) -> SimNetwork:
    """The overlay of every host over the draft's links; ``changes``: at each time, new rates (Mbit/s) of some
    links (see ``_overlay_of``)."""
    links = [PhysicalLink(a, b, rate, draft.delay_s(a, b), draft.loss[(a, b)]) for (a, b), rate in draft.links.items()]
    return _overlay_of(tuple(draft.where), draft.windows_kib, links, changes)


def _overlay_of(
    hosts: tuple[str, ...], windows_kib: Mapping[str, float], links: Sequence[PhysicalLink],
    changes: Sequence[tuple[float, Mapping[tuple[str, str], float]]] = (),
) -> SimNetwork:
    """The overlay of ``hosts`` (in this vertex order) over ``links``; ``changes``: at each time, new rates
    (Mbit/s) of some links, each turned into ``DegradeLink`` events for both directions and ``DegradeEdge`` events
    for the overlay edges whose per-stream rate that changes."""
    adjacency: dict[str, dict[str, float]] = {h: {} for h in hosts}
    for link in links:
        adjacency[link.a][link.b] = adjacency[link.b][link.a] = link.delay_s
    rates: dict[str, float] = {}
    losses: dict[str, float] = {}
    for link in links:
        a, b = link.a, link.b
        rates[f"{a}>{b}"] = rates[f"{b}>{a}"] = mbit(link.rate_mbit)
        losses[f"{a}>{b}"] = losses[f"{b}>{a}"] = link.loss
    own: dict[Edge, float] = {}
    """Each edge's per-stream limit of its own: window and loss, not links."""
    routes: dict[Edge, tuple[str, ...]] = {}
    rtts: dict[Edge, float] = {}
    for u in hosts:
        delay, hops = _shortest_routes(adjacency, u)
        for v in hosts:
            if u == v:
                continue
            if v not in delay:
                raise ValueError(f"{v} is not connected to {u}")
            rtt = 2 * delay[v]
            limit = windows_kib[v] * 1024 / rtt
            loss = sum(losses[link] for link in hops[v])
            if loss > 0:
                limit = min(limit, _MATHIS * _MSS_BYTES / (rtt * math.sqrt(loss)))
            own[(u, v)], routes[(u, v)], rtts[(u, v)] = limit, hops[v], rtt

    def per_stream(edge: Edge, links: dict[str, float]) -> float:
        return min([own[edge], *(links[link] for link in routes[edge])])

    capacities = {edge: per_stream(edge, rates) for edge in own}
    events: list[SimEvent] = []
    now_rates = dict(rates)
    for at, new in changes:
        changed = {}
        for (a, b), rate in new.items():
            changed[f"{a}>{b}"] = changed[f"{b}>{a}"] = mbit(rate)
        now_rates.update(changed)
        events.extend(DegradeLink(at, link, rate) for link, rate in changed.items())
        events.extend(
            DegradeEdge(at, edge, per_stream(edge, now_rates)) for edge in own if set(routes[edge]) & set(changed)
        )
    ramps = {edge: _RAMP_RTTS * rtt for edge, rtt in rtts.items()}
    return SimNetwork(hosts, capacities, ramps, noise=_NOISE, events=tuple(events), links=rates, routes=routes,
                      rtts=rtts)


# -- the kinds ----------------------------------------------------------------------------------------------


def _direct(draft: _Draft, depots: int, windows: tuple[float, float], step_s: float) -> _Built:
    draft.ends()
    rate = draft.log_uniform(80, 400)
    draft.link(SRC, DST, rate)
    draft.background(depots, 10, 0.6 * rate)
    return _Built(draft, _overlay(draft), [], [])


def _chain(draft: _Draft, count: int, rate: float, loss: float, role: str, windows: Sequence[float]) -> Path:
    """``count`` depots strung along the line from the source to the destination, linked one to the next at
    ``rate`` (up to 40% more a link)."""
    (y0, y1), names = (draft.where[SRC][1], draft.where[DST][1]), [f"{role}{i}" for i in range(count)]
    for i, name in enumerate(names, 1):
        x = i / (count + 1)
        draft.host(name, x + draft.rng.uniform(-0.05, 0.05), y0 + (y1 - y0) * x + draft.rng.uniform(-0.1, 0.1),
                   draft.rng.choice(windows), role)
    path = (SRC, *names, DST)
    for a, b in zip(path, path[1:], strict=False):
        draft.link(a, b, rate * draft.rng.uniform(1.0, 1.4), loss)
    return path


def _detour(draft: _Draft, depots: int, windows: tuple[float, float], step_s: float) -> _Built:
    draft.ends()
    count = draft.rng.randint(1, min(3, depots))
    rate = draft.log_uniform(60, 300)
    lossy = draft.rng.random() < 0.4
    loss = draft.log_uniform(5e-4, 4e-3) if lossy else 0.0
    path = _chain(draft, count, rate, loss, "chain", (256, 512, 1024, _BIG_WINDOW_KIB))
    draft.link(SRC, DST, rate * (draft.rng.uniform(1.0, 2.0) if lossy else draft.rng.uniform(0.15, 0.6)), loss)
    draft.background(depots - count, 10, 0.5 * rate)
    return _Built(draft, _overlay(draft), [path], [])


def _corridors(draft: _Draft, rates: Sequence[float], depots: int) -> list[Path]:
    """One physically separate route through one or two depots for each rate, above and below the line."""
    mid = (draft.where[SRC][1] + draft.where[DST][1]) / 2
    offsets = {2: (0.22, -0.22), 3: (0.26, 0.0, -0.26)}[len(rates)]
    spare = depots - len(rates)
    paths = []
    for k, (rate, offset) in enumerate(zip(rates, offsets, strict=True), 1):
        hops = 2 if spare > 0 and draft.rng.random() < 0.5 else 1
        spare -= hops - 1
        names = [f"route{k}_{j}" for j in range(hops)]
        for j, name in enumerate(names, 1):
            x = j / (hops + 1) + draft.rng.uniform(-0.05, 0.05)
            draft.host(name, x, mid + offset + draft.rng.uniform(-0.03, 0.03), _BIG_WINDOW_KIB, f"route{k}")
        path = (SRC, *names, DST)
        for a, b in zip(path, path[1:], strict=False):
            draft.link(a, b, rate * draft.rng.uniform(1.0, 1.3))
        paths.append(path)
    return paths


def _disjoint(draft: _Draft, depots: int, windows: tuple[float, float], step_s: float) -> _Built:
    draft.ends()
    base = draft.log_uniform(40, 200)
    rates = [base, *(base * draft.rng.uniform(0.6, 1.0) for _ in range(draft.rng.choice((1, 2)) if depots > 2 else 1))]
    routes = _corridors(draft, rates, depots)
    if draft.rng.random() < 0.5:
        draft.link(SRC, DST, base * draft.rng.uniform(0.05, 0.3))
    used = sum(len(route) - 2 for route in routes)
    draft.background(depots - used, 5, 0.5 * min(rates))
    return _Built(draft, _overlay(draft), list(routes), list(routes))


def _decoy(draft: _Draft, depots: int, windows: tuple[float, float], step_s: float) -> _Built:
    draft.ends()
    decoys = draft.rng.randint(2, min(4, depots - 1))
    count = draft.rng.randint(1, min(2, depots - decoys))
    rate = draft.log_uniform(50, 250)
    path = _chain(draft, count, rate, 0.0, "chain", (512, 1024, _BIG_WINDOW_KIB))
    draft.link(SRC, DST, rate * draft.rng.uniform(0.1, 0.5))
    x0, y0 = draft.where[SRC]
    for i in range(decoys):
        name, angle, reach = f"decoy{i}", draft.rng.uniform(-1.2, 1.2), draft.rng.uniform(0.01, 0.05)
        draft.host(name, x0 + reach * math.cos(angle), y0 + reach * math.sin(angle), _BIG_WINDOW_KIB, "decoy")
        draft.link(SRC, name, rate * draft.rng.uniform(0.05, 0.25))
        draft.closed.add(name)
    draft.background(depots - decoys - count, 10, 0.6 * rate)
    return _Built(draft, _overlay(draft), [path], [])


def _shared(draft: _Draft, depots: int, windows: tuple[float, float], step_s: float) -> _Built:
    draft.ends()
    bottleneck = draft.log_uniform(20, 120)
    draft.windows_kib[DST] = draft.rng.choice((16, 32, 64, 128))
    xd, yd = draft.where[DST]
    draft.host("gate", xd - draft.rng.uniform(0.03, 0.08), yd + draft.rng.uniform(-0.03, 0.03), role="gate")
    draft.link("gate", DST, bottleneck)
    draft.closed.add(DST)
    far = draft.rng.randint(0, min(2, depots - 1))
    for i in range(far):
        name = f"far{i}"
        side = draft.rng.choice((-1, 1))
        draft.host(name, xd - draft.rng.uniform(0.0, 0.04), yd + side * draft.rng.uniform(0.02, 0.05), role="far")
        draft.link(DST, name, bottleneck * draft.rng.uniform(2, 5))
        draft.closed.add(name)
    count = draft.rng.randint(0, min(2, depots - 1 - far))
    names = [f"chain{i}" for i in range(count)]
    for i, name in enumerate(names, 1):
        x = 0.9 * i / (count + 1)
        draft.host(name, x + draft.rng.uniform(-0.05, 0.05), yd + draft.rng.uniform(-0.1, 0.1), role="chain")
    hops = (SRC, *names, "gate")
    for a, b in zip(hops, hops[1:], strict=False):
        draft.link(a, b, bottleneck * draft.rng.uniform(2, 5))
    if count:
        draft.link(SRC, "gate", bottleneck * draft.rng.uniform(2, 5))
    draft.background(depots - 1 - far - count, 2 * bottleneck, 5 * bottleneck)
    return _Built(draft, _overlay(draft), [(SRC, *names, "gate", DST)], [])


def _change(draft: _Draft, depots: int, windows: tuple[float, float], step_s: float) -> _Built:
    draft.ends()
    base = draft.log_uniform(40, 200)
    routes = _corridors(draft, [base, base * draft.rng.uniform(0.4, 0.75)], depots)
    draft.link(SRC, DST, base * draft.rng.uniform(0.05, 0.2))
    draft.background(depots - sum(len(route) - 2 for route in routes), 5, 0.3 * base)
    cold_s, warm_s = windows
    fraction = draft.rng.uniform(0.35, 0.65)
    at, back = (round(seconds * fraction / step_s) * step_s for seconds in (cold_s, warm_s))
    if draft.rng.random() < 0.5:  # the wider route's link into the destination drops
        last = (routes[0][-2], DST)
        new = {last: base * draft.rng.uniform(0.15, 0.35)}
    else:  # the narrower route's links rise
        new = {hop: base * draft.rng.uniform(1.6, 2.5) for hop in zip(routes[1], routes[1][1:], strict=False)}
    old = {link: draft.links[link] for link in new}
    changes = ((at, new), (cold_s + back, old))
    return _Built(draft, _overlay(draft, changes), list(routes), list(routes), (at, cold_s + back), changes)


_BUILDERS = {
    "direct": _direct,
    "detour": _detour,
    "disjoint": _disjoint,
    "decoy": _decoy,
    "shared": _shared,
    "change": _change,
}


# -- checks -------------------------------------------------------------------------------------------------


def _alone_graph(network: SimNetwork, now: float) -> nx.DiGraph:
    """Every edge weighted by what it carries alone at ``STREAMS``."""
    graph = nx.DiGraph()
    graph.add_nodes_from(network.vertices)
    for edge in network.capacities:
        rate = network.share({edge: STREAMS}, now)[edge]
        if rate > 0:
            graph.add_edge(*edge, **{THROUGHPUT: rate})
    return graph


def _candidates(network: SimNetwork, designed: Sequence[Path], now: float) -> list[Path]:
    """Direct, the designed paths, the widest path by the edges' rates alone and each path that avoids one of its
    edges; best first by ``steady_rate``, the best ``TOP_CANDIDATES`` and direct."""
    graph = _alone_graph(network, now)
    found: list[Path] = [(SRC, DST), *designed]
    try:
        best = tuple(widest_path(graph, SRC, DST))
    except NoPathError:
        return found
    found.append(best)
    for edge in edges_of(best):
        weight = graph.edges[edge][THROUGHPUT]
        graph.remove_edge(*edge)
        try:
            found.append(tuple(widest_path(graph, SRC, DST)))
        except NoPathError:
            pass
        graph.add_edge(*edge, **{THROUGHPUT: weight})
    unique = list(dict.fromkeys(found))
    ranked = sorted(unique, key=lambda path: -steady_rate(network, path, now))
    top = ranked[:TOP_CANDIDATES]
    return top if (SRC, DST) in top else [*top, (SRC, DST)]


def _best(network: SimNetwork, paths: Sequence[Path], now: float) -> tuple[Path, float]:
    rates = [(steady_rate(network, path, now), path) for path in paths]
    rate, path = max(rates, key=lambda pair: pair[0])
    return path, rate


def _holds(kind: str, built: _Built) -> bool:
    """Whether the drawn network has its kind's property (see the module's docstring)."""
    network, draft = built.network, built.draft
    if network.truth(SRC, DST)[1] <= 0:
        return False
    candidates = _candidates(network, built.designed, 0.0)
    best, width = _best(network, candidates, 0.0)
    direct = steady_rate(network, (SRC, DST))
    others = [steady_rate(network, path) for path in candidates if path != (SRC, DST)]
    match kind:
        case "direct":
            return best == (SRC, DST) and all(direct >= 1.1 * rate for rate in others)
        case "detour":
            return len(best) > 2 and width >= 1.3 * direct
        case "disjoint":
            return _disjoint_routes(network, built.routes) and sum(
                steady_rate(network, route) for route in built.routes
            ) >= 1.3 * width
        case "decoy":
            decoys = {h for h, role in draft.roles.items() if role == "decoy"}
            rtts = network.rtts_from(SRC)
            nearest = sorted(rtts, key=rtts.__getitem__)[: len(decoys)]
            graph = _alone_graph(network, 0.0)
            through = [min(_widest_width(graph, SRC, d), _widest_width(graph, d, DST)) for d in decoys]
            return (set(nearest) == decoys and not decoys & set(best) and width >= 1.2 * direct
                    and max(through) <= 0.5 * width)
        case "shared":
            bottleneck = draft.links[("gate", DST)]
            into = {link for (u, v), route in network.routes.items() if v == DST for link in route[-1:]}
            return into <= {f"gate>{DST}", *(f"{far}>{DST}" for far in draft.roles if draft.roles[far] == "far")} and (
                width >= 0.85 * mbit(bottleneck)
            )
        case "change":
            at = built.change_at_s[0]
            after = _candidates(network, built.designed, at)
            moved, moved_width = _best(network, after, at)
            return (_disjoint_routes(network, built.routes) and moved != best
                    and moved_width >= 1.25 * steady_rate(network, best, at))
    raise ValueError(f"unknown kind {kind!r}")


def _widest_width(graph: nx.DiGraph, src: str, dst: str) -> float:
    try:
        path = widest_path(graph, src, dst)
    except NoPathError:
        return 0.0
    return float(min(graph.edges[hop][THROUGHPUT] for hop in edges_of(path)))


def _disjoint_routes(network: SimNetwork, routes: Sequence[Path]) -> bool:
    links = [physical_routes(network, route) for route in routes]
    return all(not links[i] & links[j] for i in range(len(links)) for j in range(i + 1, len(links)))


# -- the finished scenario ---------------------------------------------------------------------------------


def _finish(
    kind: str, seed: int, index: int, depots: int, built: _Built, draws: int, windows: tuple[float, float],
    step_s: float,
) -> Scenario:
    """Rename the depots ``d01``... in a random order (so that neither names nor the vertex order, which breaks
    the scheduler's ties, tell a role) and pin the oracle's runs."""
    draft = built.draft
    inner = [h for h in draft.where if h not in (SRC, DST)]
    draft.rng.shuffle(inner)
    names = {old: f"d{i:02d}" for i, old in enumerate(inner, 1)}
    names[SRC], names[DST] = SRC, DST

    def rename(path: Path) -> Path:
        return tuple(names[v] for v in path)

    network = _renamed(built.network, names, [SRC, *(names[h] for h in inner), DST])
    routes = tuple(rename(route) for route in built.routes)
    designed = [rename(path) for path in built.designed]
    candidates = list(dict.fromkeys(_candidates(network, designed, 0.0)))
    for at in built.change_at_s:
        candidates += [path for path in _candidates(network, designed, at) if path not in candidates]
    cold_s, warm_s = windows
    oracles = (
        _oracle(network, candidates, routes, 0.0, cold_s, step_s),
        _oracle(network, candidates, routes, cold_s, warm_s, step_s),
    )
    roles = {names[h]: role for h, role in draft.roles.items()}
    physical = Physical(
        network.vertices,
        {names[h]: draft.windows_kib[h] for h in draft.where},
        tuple(PhysicalLink(names[a], names[b], rate, draft.delay_s(a, b), draft.loss[(a, b)])
              for (a, b), rate in draft.links.items()),
        tuple(LinkChange(at, names[a], names[b], rate) for at, new in built.changes for (a, b), rate in new.items()),
    )
    return Scenario(kind, seed, index, depots, network, SRC, DST, routes, tuple(candidates), built.change_at_s,
                    oracles, draws, physical, roles)


def _renamed(network: SimNetwork, names: dict[str, str], order: Sequence[str]) -> SimNetwork:
    def edge(e: Edge) -> Edge:
        return names[e[0]], names[e[1]]

    def link(name: str) -> str:
        a, b = name.split(">")
        return f"{names[a]}>{names[b]}"

    events: list[SimEvent] = []
    for event in network.events:
        if isinstance(event, DegradeEdge):
            events.append(DegradeEdge(event.at, edge(event.edge), event.capacity_bps))
        elif isinstance(event, DegradeLink):
            events.append(DegradeLink(event.at, link(event.link), event.capacity_bps))
        else:
            raise ValueError(f"no renaming for {event!r}")
    return SimNetwork(
        tuple(order),
        {edge(e): c for e, c in network.capacities.items()},
        {edge(e): r for e, r in network.ramp_s.items()},
        noise=network.noise,
        events=tuple(events),
        links={link(name): c for name, c in network.links.items()},
        routes={edge(e): tuple(link(name) for name in route) for e, route in network.routes.items()},
        rtts={edge(e): t for e, t in network.rtts.items()},
    )


def _oracle(
    network: SimNetwork, candidates: Sequence[Path], routes: Sequence[Path], start_s: float, duration_s: float,
    step_s: float,
) -> Oracle:
    end = start_s + duration_s
    cuts = [start_s, *sorted(e.at for e in network.events if start_s < e.at < end), end]
    cuts = list(dict.fromkeys(cuts))

    def pinned(paths: Sequence[Path]) -> list[float]:
        """Mean rate of each part of the window."""
        result = simulate_pinned(network, paths, streams=STREAMS, start_s=start_s, duration_s=duration_s,
                                 step_s=step_s, depth="adaptive", min_depth=MIN_STREAMS)
        return [result.mean_rate(a, b) for a, b in zip(cuts, cuts[1:], strict=False)]

    parts = {path: pinned([path]) for path in candidates}
    best_bps, best_paths = 0.0, []
    for i, (a, b) in enumerate(zip(cuts, cuts[1:], strict=False)):
        path = max(candidates, key=lambda p: parts[p][i])
        best_paths.append(path)
        best_bps += parts[path][i] * (b - a) / duration_s
    direct = parts[(SRC, DST)] if (SRC, DST) in parts else pinned([(SRC, DST)])
    direct_bps = sum(rate * (b - a) for rate, a, b in zip(direct, cuts, cuts[1:], strict=False)) / duration_s
    routes_bps = None
    if routes:
        routes_bps = sum(
            rate * (b - a) / duration_s
            for route in routes
            for rate, a, b in zip(parts.get(route) or pinned([route]), cuts, cuts[1:], strict=False)
        )
    steady = max(steady_rate(network, path, start_s) for path in candidates)
    return Oracle(start_s, duration_s, best_bps, tuple(best_paths), steady, direct_bps, routes_bps)


# -- the physical network, and the testbed ------------------------------------------------------------------


def overlay(physical: Physical) -> SimNetwork:
    """The simulator's network over ``physical``, as the scenario's own was built: ``overlay(case.physical)`` is
    ``case.network`` again, and ``overlay(case.physical.scaled(f))`` the same network scaled."""
    changes: list[tuple[float, dict[tuple[str, str], float]]] = []
    for change in physical.changes:
        if not changes or changes[-1][0] != change.at:
            changes.append((change.at, {}))
        changes[-1][1][(change.a, change.b)] = change.rate_mbit
    return _overlay_of(physical.hosts, physical.windows_kib, physical.links, changes)


def emulation_scale(physical: Physical, fastest_mbit: float = TESTBED_FASTEST_MBIT) -> float:
    """The factor that brings the fastest link (at any time) down to ``fastest_mbit``; 1 if none is faster."""
    rates = [link.rate_mbit for link in physical.links] + [change.rate_mbit for change in physical.changes]
    return min(1.0, fastest_mbit / max(rates))


def topology_of(physical: Physical, name: str) -> dict[str, object]:
    """``physical`` as a testbed topology, in the layout of a topology file (``Topology.from_dict`` loads it):
    every host with its window in bytes, every link with its one-way delay in ms, its loss and its rate. The
    rate is what the wire carries, so that TCP's payload gets the link's ``rate_mbit`` (each packet of
    ``TESTBED_MTU`` bytes carries ``_MSS_BYTES`` of it). Changes of rate are not in it: a testbed runs a network
    as it starts (``Physical.static``); ``Testbed.set_link`` can change a link while it runs."""
    links: list[dict[str, object]] = []
    for link in physical.links:
        row: dict[str, object] = {"a": link.a, "b": link.b, "delay_ms": link.delay_s * 1000,
                                  "rate_mbit": link.rate_mbit * TESTBED_MTU / _MSS_BYTES}
        if link.loss > 0:
            row["loss"] = link.loss
        links.append(row)
    hosts = {host: {"window": round(physical.windows_kib[host] * 1024)} for host in physical.hosts}
    return {"name": name, "mtu": TESTBED_MTU, "hosts": hosts, "links": links}


def topology_file(physical: Physical, name: str, comment: str = "") -> str:
    """``topology_of`` as the text of a topology file, ``comment`` at its head; floats as ``repr`` writes
    them, so the file loads to the same numbers."""

    def value(item: object) -> str:
        return f'"{item}"' if isinstance(item, str) else repr(item)

    doc = topology_of(physical, name)
    lines = [f"# {line}".rstrip() for line in comment.splitlines()]
    lines += [f"name = {value(doc['name'])}", f"mtu = {value(doc['mtu'])}"]
    hosts = doc["hosts"]
    assert isinstance(hosts, dict)
    for host, spec in hosts.items():
        lines += ["", f"[hosts.{host}]", *(f"{key} = {value(item)}" for key, item in spec.items())]
    links = doc["links"]
    assert isinstance(links, list)
    for link in links:
        lines += ["", "[[links]]", *(f"{key} = {value(item)}" for key, item in link.items())]
    return "\n".join(lines) + "\n"
