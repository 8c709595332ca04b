"""The adaptive decision loop as a pure state machine: measurements and ``now`` in, decisions out.

It owns no thread, socket or clock. The transfer engine feeds it events (``measure``) and asks it what to do
(``tick``), as often as it likes; the loop itself enforces its re-evaluation interval. See the theory of
operation in ``lnet.scheduler``'s docstring.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import networkx as nx

from ._memory import (
    DEFAULT_AGE_AFTER_S,
    DEFAULT_AGE_MAX_PER_ROUND,
    DEFAULT_AGE_PERCENT,
    Edge,
    EdgeMemory,
)
from ._widest import THROUGHPUT, NoPathError, path_throughput, widest_path

__all__ = [
    "Decision",
    "DepotFailure",
    "DropDepot",
    "Event",
    "HopFailure",
    "Keep",
    "Measurement",
    "Path",
    "PathAttempt",
    "PathScheduler",
    "SchedulerConfig",
    "SwitchReason",
    "Switch",
]

Path = tuple[str, ...]
SwitchReason = Literal["start", "explore", "better", "settle", "failure"]


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """The loop's knobs; times in seconds, throughputs in bytes/s."""

    reevaluate_s: float = 5.0
    """How often the loop looks for a better path (the seed's sleep(t))."""
    min_attempt_s: float = 10.0
    """No path attempt is judged before it has run this long (unless a hop fails)."""
    warmup_s: float = 2.0
    """Samples of an edge that started within this long of the edge joining the path are not learnt from:
    TCP is still opening its window. They still count towards the attempt's achieved throughput."""
    hysteresis: float = 0.10
    """A path must be predicted this fraction faster than the current one to replace it."""
    age_after_s: float = DEFAULT_AGE_AFTER_S
    age_percent: float = DEFAULT_AGE_PERCENT
    age_max_per_round: int = DEFAULT_AGE_MAX_PER_ROUND
    max_explorations: int | None = None
    """How many attempts may use a path with unknown edges; None: twice the number of vertices."""
    memory_mismatch: float = 0.5
    """A remembered estimate (from before this transfer started, not aged since) that this transfer measures more
    than this fraction below, or the inverse above, discredits every remembered estimate this transfer has not
    confirmed: they count as unknown from then on."""
    probes_per_round: int = 8
    """0: explore as the seed does, by moving the transfer onto paths with unknown edges. More: never move the
    transfer onto an unknown edge; instead, at each re-evaluation, ask the engine to probe up to this many
    unknown edges (the ones on the paths that could beat the best known) with small copies beside the transfer.
    An engine that ignores ``probes`` is noticed (no probe ever reported back within ``probe_s``) and the loop
    falls back to the seed's way."""
    probe_s: float = 4.0
    """How long the engine runs one probe, reporting measurements as for a hop of the path."""

    def __post_init__(self) -> None:
        for name in ("reevaluate_s", "min_attempt_s", "age_after_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if not 0 <= self.warmup_s < self.min_attempt_s:
            raise ValueError("warmup_s must be at least 0 and less than min_attempt_s")
        if self.hysteresis < 0 or self.age_percent < 0 or self.age_max_per_round < 0:
            raise ValueError("hysteresis, age_percent and age_max_per_round must not be negative")
        if self.probes_per_round < 0 or not self.probe_s > self.warmup_s:
            raise ValueError("probes_per_round must not be negative, and probe_s must exceed warmup_s")
        if self.max_explorations is not None and self.max_explorations < 0:
            raise ValueError("max_explorations must not be negative")
        if not 0 < self.memory_mismatch < 1:
            raise ValueError("memory_mismatch must be between 0 and 1")


# -- events in -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Measurement:
    """``bytes`` crossed ``edge`` in ``seconds``, ending at ``at``."""

    edge: Edge
    bytes: int
    seconds: float
    at: float

    def __post_init__(self) -> None:
        if self.bytes < 0 or not self.seconds > 0:
            raise ValueError(f"a measurement needs bytes >= 0 and seconds > 0, not {self.bytes}, {self.seconds}")


@dataclass(frozen=True, slots=True)
class HopFailure:
    """A copy along ``edge`` failed (the target refused, timed out, or answered an error)."""

    edge: Edge
    at: float


@dataclass(frozen=True, slots=True)
class DepotFailure:
    """``depot`` itself is unreachable: every edge into and out of it fails."""

    depot: str
    at: float


Event = Measurement | HopFailure | DepotFailure


# -- decisions out ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Keep:
    """Go on with the current path."""

    path: Path
    probes: tuple[Edge, ...] = ()
    """Edges to measure beside the transfer for ``probe_s`` (only with ``probes_per_round``)."""


@dataclass(frozen=True, slots=True)
class Switch:
    """Move new blocks onto ``path``; blocks in flight on the old path finish there."""

    path: Path
    predicted_bps: float
    reason: SwitchReason
    probes: tuple[Edge, ...] = ()


@dataclass(frozen=True, slots=True)
class DropDepot:
    """``depot`` failed: give up what is held there and go on with ``path`` (which avoids it if anything does)."""

    depot: str
    path: Path
    predicted_bps: float


Decision = Keep | Switch | DropDepot


@dataclass(frozen=True, slots=True)
class PathAttempt:
    """A period during which the transfer used one path: a row of the seed's Table 1."""

    path: Path
    start: float
    end: float | None
    """None while the attempt is still going on."""
    throughput_bps: float
    """Achieved: the slowest hop's bytes over its seconds during the attempt; 0.0 if a hop never reported."""
    reason: SwitchReason


@dataclass(slots=True)
class _Flow:
    bytes: int = 0
    seconds: float = 0.0


@dataclass(slots=True)
class _Attempt:
    path: Path
    start: float
    reason: SwitchReason
    flows: dict[Edge, _Flow] = field(default_factory=dict)

    def throughput(self) -> float:
        rates = []
        for edge in zip(self.path, self.path[1:], strict=False):
            flow = self.flows.get(edge)
            if flow is None or flow.seconds <= 0:
                return 0.0
            rates.append(flow.bytes / flow.seconds)
        return min(rates, default=0.0)

    def freeze(self, end: float | None) -> PathAttempt:
        return PathAttempt(self.path, self.start, end, self.throughput(), self.reason)


def edges_of(path: Sequence[str]) -> list[Edge]:
    """The hops of a path, in order."""
    return list(zip(path, path[1:], strict=False))


class PathScheduler:
    """Chooses and re-chooses the chain of depots for one transfer from ``src`` to ``dst``.

    ``vertices`` are the client's own vertex and every depot it may use, ``src`` and ``dst`` among them; their
    order breaks ties between equally good paths. ``memory`` is read and updated in place (save it afterwards
    for the next transfer's warm start); several schedulers may share one.
    """

    def __init__(
        self,
        vertices: Sequence[str],
        src: str,
        dst: str,
        memory: EdgeMemory,
        config: SchedulerConfig | None = None,
    ) -> None:
        self.vertices: tuple[str, ...] = tuple(dict.fromkeys(vertices))
        if src not in self.vertices or dst not in self.vertices or src == dst:
            raise ValueError("src and dst must be two different vertices among vertices")
        self.src = src
        self.dst = dst
        self.memory = memory
        self.config = config if config is not None else SchedulerConfig()
        configured = self.config.max_explorations
        self.max_explorations = 2 * len(self.vertices) if configured is None else configured
        self.explorations = 0
        self._among = frozenset(self.vertices)
        self._confirmed: set[Edge] = set()
        self._memory_discredited = False
        self._attempt: _Attempt | None = None
        self._history: list[PathAttempt] = []
        self._edge_since: dict[Edge, float] = {}
        self._probe_since: dict[Edge, float] = {}
        self._probing = self.config.probes_per_round > 0
        self._probe_answered = False
        self._last_evaluation = -math.inf
        self._broken = False
        self._pending_drops: list[str] = []

    # -- what the engine reads ----------------------------------------------------------------------------

    @property
    def current_path(self) -> Path | None:
        return None if self._attempt is None else self._attempt.path

    @property
    def attempts(self) -> list[PathAttempt]:
        """Every path attempt so far, the current one last (with ``end`` None)."""
        current = [] if self._attempt is None else [self._attempt.freeze(None)]
        return [*self._history, *current]

    @property
    def probing(self) -> bool:
        """Whether the loop explores with probes (else by moving the transfer, as the seed does)."""
        return self._probing

    @property
    def memory_discredited(self) -> bool:
        """Whether this transfer found the remembered estimates wrong and stopped trusting them."""
        return self._memory_discredited

    def graph(self, *, with_aging: bool = True) -> nx.DiGraph:
        """What this transfer believes: the memory's mesh, less remembered estimates it has discredited."""
        graph = self.memory.to_graph(self.vertices, with_aging=with_aging)
        if self._memory_discredited:
            for u, v, attrs in graph.edges(data=True):
                if (u, v) not in self._confirmed:
                    attrs.pop(THROUGHPUT, None)
        return graph

    # -- events in ----------------------------------------------------------------------------------------

    def start(self, now: float) -> Switch:
        """The first path: the widest by what is remembered, unknown edges counting as infinitely fast."""
        if self._attempt is not None:
            raise RuntimeError("the scheduler has already started")
        self._last_evaluation = now
        choice = self._choose()
        assert choice is not None  # with no current path, something is always chosen
        path, predicted, reason = choice
        self._switch(now, path, predicted, "start", exploring=reason == "explore")
        return Switch(path, predicted, "start", self._probes(now))

    def measure(self, event: Event) -> None:
        """Take in one event from the transfer. Cheap; decisions wait for ``tick``."""
        match event:
            case Measurement(edge=edge, bytes=nbytes, seconds=seconds, at=at):
                self._measured(edge, nbytes, seconds, at)
            case HopFailure(edge=edge, at=at):
                self._failed(edge, at)
            case DepotFailure(depot=depot, at=at):
                for other in self.vertices:
                    if other != depot:
                        self._failed((other, depot), at)
                        self._failed((depot, other), at)
                if depot not in self._pending_drops:
                    self._pending_drops.append(depot)

    def tick(self, now: float) -> Decision:
        """Decide: keep the path, switch to another, or drop a failed depot (and go on with a path)."""
        if self._attempt is None:
            raise RuntimeError("call start() first")
        if self._pending_drops:
            depot = self._pending_drops.pop(0)
            if depot in self._attempt.path:
                self._reevaluate(now, failure=True)
            path = self._attempt.path
            return DropDepot(depot, path, path_throughput(self.graph(), path))
        if self._broken:
            return self._reevaluate(now, failure=True)
        if now - self._last_evaluation < self.config.reevaluate_s:
            return Keep(self._attempt.path)
        self._last_evaluation = now
        self.memory.age_stale_weights(
            now,
            after_s=self.config.age_after_s,
            percent=self.config.age_percent,
            max_edges=self.config.age_max_per_round,
            among=self._among,
        )
        if now - self._attempt.start < self.config.min_attempt_s:
            return Keep(self._attempt.path, self._probes(now))
        decision = self._reevaluate(now, failure=False)
        probes = self._probes(now)
        return replace(decision, probes=probes) if probes else decision

    # -- internals ----------------------------------------------------------------------------------------

    def _measured(self, edge: Edge, nbytes: int, seconds: float, at: float) -> None:
        if self._attempt is not None and edge in self._edge_since:
            flow = self._attempt.flows.setdefault(edge, _Flow())
            flow.bytes += nbytes
            flow.seconds += seconds
        if edge in self._probe_since:
            self._probe_answered = True
        since = self._edge_since.get(edge, self._probe_since.get(edge))
        if since is not None and at - seconds < since + self.config.warmup_s:
            return
        u, v = edge
        if edge not in self._confirmed:
            remembered = self.memory.entry(u, v)
            if remembered is not None and not remembered.failed and remembered.samples > 0:
                rate = nbytes / seconds
                low = remembered.throughput_bps * (1 - self.config.memory_mismatch)
                if not low <= rate <= remembered.throughput_bps / (1 - self.config.memory_mismatch):
                    self._memory_discredited = True
                    self.memory.forget(u, v)
            self._confirmed.add(edge)
        self.memory.observe(u, v, nbytes, seconds, at)

    def _failed(self, edge: Edge, at: float) -> None:
        self.memory.fail(*edge, at)
        self._confirmed.add(edge)
        if edge in self._probe_since:
            self._probe_answered = True
        if edge in self._edge_since:
            self._broken = True

    def _choose(self) -> tuple[Path, float, SwitchReason] | None:
        """The path the loop wants now, its prediction and why; None to keep the current one."""
        # With probes, the transfer moves on measured weights only; aging's second chances are probed first.
        graph = self.graph(with_aging=not self._probing)
        current = self._attempt.path if self._attempt is not None else None
        current_predicted = -math.inf if current is None else path_throughput(graph, current)
        reason: SwitchReason = "better"
        if self._probing:
            best = self._best_known(graph)  # probes explore; the transfer stays on measured ground
        else:
            best = tuple(widest_path(graph, self.src, self.dst))
            if _has_unknown(graph, best):
                reason = "explore"
                if self.explorations >= self.max_explorations:
                    best, reason = self._best_known(graph), "settle"
        if best == current:
            return None
        predicted = path_throughput(graph, best)
        # Infinite (unexplored) beats anything finite; two infinities or a margin too thin keep the path.
        if not predicted > current_predicted * (1 + self.config.hysteresis):
            return None
        return best, predicted, reason

    def _best_known(self, graph: nx.DiGraph) -> Path:
        known = nx.DiGraph()
        known.add_nodes_from(graph)
        known.add_edges_from((u, v, a) for u, v, a in graph.edges(data=True) if THROUGHPUT in a)
        try:
            return tuple(widest_path(known, self.src, self.dst))
        except NoPathError:
            # Nothing measured end to end: the direct path is the one that needs no depot.
            return (self.src, self.dst)

    def _reevaluate(self, now: float, *, failure: bool) -> Keep | Switch:
        assert self._attempt is not None
        self._broken = False
        self._last_evaluation = now
        choice = self._choose()
        if choice is None:
            return Keep(self._attempt.path)
        path, predicted, reason = choice
        return self._switch(now, path, predicted, "failure" if failure else reason, exploring=reason == "explore")

    def _switch(self, now: float, path: Path, predicted: float, reason: SwitchReason, *, exploring: bool) -> Switch:
        if exploring:
            self.explorations += 1
        old = self._attempt
        if old is not None:
            self._history.append(old.freeze(now))
        # A hop the new path keeps is already warm.
        self._edge_since = {edge: self._edge_since.get(edge, now) for edge in edges_of(path)}
        self._attempt = _Attempt(path, now, reason)
        return Switch(path, predicted, reason)

    def _probes(self, now: float) -> tuple[Edge, ...]:
        """Edges worth measuring now: unknown or aged ones on the optimistic paths that could beat the best known.

        Repeatedly take the widest path, unknown edges counting as infinitely fast and aged ones at their raised
        weight; if it could beat the best measured path by the hysteresis margin, its unknown and aged edges are
        chosen and then count as 0 so that the next round looks past them. Edges already being probed count as 0
        from the start, and so do unknown edges the transfer itself is measuring.
        """
        if not self._probing or self._attempt is None:
            return ()
        expired = [e for e, t in self._probe_since.items() if now - t >= self.config.probe_s]
        if expired and not self._probe_answered:
            # The engine does not probe: explore by moving the transfer, as the seed does.
            self._probing = False
            self._probe_since.clear()
            return ()
        for edge in expired:
            del self._probe_since[edge]
        measured = self.graph(with_aging=False)
        known = self._best_known(measured)
        bar = 0.0 if _has_unknown(measured, known) else path_throughput(measured, known)
        graph = self.graph()
        for edge in self._probe_since:
            if self._unverified(edge):
                graph.edges[edge][THROUGHPUT] = 0.0
        for edge in edges_of(self._attempt.path):
            graph.edges[edge].setdefault(THROUGHPUT, 0.0)
        chosen: list[Edge] = []
        while len(chosen) < self.config.probes_per_round:
            path = widest_path(graph, self.src, self.dst)
            wanted = [edge for edge in edges_of(path) if edge not in self._probe_since and self._unverified(edge)]
            wanted = [edge for edge in wanted if edge not in chosen]
            if not wanted or not path_throughput(graph, path) > bar * (1 + self.config.hysteresis):
                break
            for edge in wanted[: self.config.probes_per_round - len(chosen)]:
                chosen.append(edge)
                graph.edges[edge][THROUGHPUT] = 0.0
        self._probe_since.update((edge, now) for edge in chosen)
        return tuple(chosen)

    def _unverified(self, edge: Edge) -> bool:
        entry = self.memory.entry(*edge)
        return entry is None or entry.aged or (self._memory_discredited and edge not in self._confirmed)


def _has_unknown(graph: nx.DiGraph, path: Sequence[str]) -> bool:
    return any(THROUGHPUT not in graph.edges[u, v] for u, v in edges_of(path))
