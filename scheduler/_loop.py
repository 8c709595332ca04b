"""The adaptive decision loop as a pure state machine: measurements and ``now`` in, decisions out.

It owns no thread, socket or clock. The transfer engine feeds it events (``measure``) and asks it what to do
(``tick``), as often as it likes; the loop itself enforces its re-evaluation interval. See the theory of
operation in ``lnet.scheduler``'s docstring.

This module chooses the primary path and turns each judgement into a decision. Its state is one value
(``_state.LoopState``); which edges to probe is ``_probing.ProbePlan``'s, and the paths beside the primary, their
trial and the bans are ``_pathset.PathSet``'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import networkx as nx

from ._attempts import PathAttempt, SwitchReason, _Attempt, _Flow
from ._candidates import candidates
from ._config import SchedulerConfig
from ._memory import Edge, EdgeMemory
from ._paths import fill_s, set_total
from ._pathset import PathSet
from ._probing import SHARED_DROP, ProbePlan
from ._routes import RouteGuess
from ._state import Ceilings, Exploration, LoopState, Memory, News, Scouts
from ._widest import THROUGHPUT, NoPathError, edges_of, has_unknown, measured_only, path_throughput, widest_path

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
    "ProbeDone",
    "Progress",
    "SchedulerConfig",
    "SwitchReason",
    "Switch",
]

Path = tuple[str, ...]

FAIR_SHARE_GAP = 0.2
"""Streams that meet on a full link get about the same rate each. A probe whose stream got this much less than the
slowed hop's streams was limited by something else (its own window, loss, another link): its figure stands."""
HOPE_HYSTERESIS = 2.0
"""A path that is wider only by ceilings (a probe's floor raised to what it would be if it shared a link with the
transfer) must be predicted this many times the hysteresis faster to be tried: a ceiling adds the hop's whole rate
to the probe's, so when the two share a link that the hop already fills, the ceiling exceeds the hop by just the
probe's small share, plus noise, and no move would gain anything."""


# -- events in -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Measurement:
    """``bytes`` crossed ``edge`` in ``seconds`` of stream time, ending at ``at``.

    ``seconds`` is the sum of the durations of the copies that carried the bytes, each timed by whoever moved
    the data (a depot's own push time, the client's own write time), so ``bytes / seconds`` is the rate of one
    stream, whatever number of copies ran at once: the unit the scheduler compares (see the theory of
    operation, "Comparable measurements").

    ``streams``, from an engine that chooses each hop's depth itself (up to the config's ``streams``), is how many
    copies streamed at once on average while the edge carried these bytes (over each copy's life, the copies
    streaming beside it, at most the hop's depth): the loop then learns the hop's own aggregate, ``streams`` x the
    per-stream rate, spread over the config's ``streams`` (theory of operation, 9). None: the engine ran the
    config's ``streams`` on every hop (and one on a probe), and the per-stream rate stands.
    """

    edge: Edge
    bytes: int
    seconds: float
    at: float
    streams: float | None = None
    began: float | None = None
    """When the first copy of these bytes began (the clock of ``at``); None: ``at - seconds``. Copies side by side
    add their seconds: ``at - seconds`` is then earlier than any of them began, and the warm-up rule would drop
    every sample of a slow hop (its long copies) while keeping the fast ones."""
    starved: bool = False
    """With ``streams``: the hop ran fewer copies than its depth, with none waiting, for most of the time (the
    transfer's tail, or a hop fed by a slower one). Its aggregate is then what it was given, a floor of what it
    carries: learnt only where it raises the estimate (theory of operation, 9)."""

    def __post_init__(self) -> None:
        if self.bytes < 0 or not self.seconds > 0:
            raise ValueError(f"a measurement needs bytes >= 0 and seconds > 0, not {self.bytes}, {self.seconds}")
        if self.streams is not None and not self.streams > 0:
            raise ValueError(f"a measurement's streams must be more than 0, not {self.streams}")


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


@dataclass(frozen=True, slots=True)
class ProbeDone:
    """The engine finished probing ``edge`` (its measurements, if any, came before): the probe's place is free."""

    edge: Edge
    at: float


@dataclass(frozen=True, slots=True)
class Progress:
    """``left`` bytes of the transfer had not reached the destination at ``at`` (the engine's ledger: what this run
    sends, less what has arrived). Told before a ``tick``, it lets the loop leave out a path whose fill would
    end after the transfer (``SchedulerConfig.block_bytes``)."""

    left: int
    at: float

    def __post_init__(self) -> None:
        if self.left < 0:
            raise ValueError(f"the bytes left cannot be negative, not {self.left}")


Event = Measurement | HopFailure | DepotFailure | ProbeDone | Progress


# -- decisions out ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Keep:
    """Go on with the current path."""

    path: Path
    probes: tuple[Edge, ...] = ()
    """Edges to measure beside the transfer for ``probe_s`` (only with ``probes_per_round``)."""
    deep: tuple[Edge, ...] = ()
    """The probes among ``probes`` to run deep: more copies at once while they add rate, up to ``streams``
    (theory of operation, 13). The others run one copy at a time."""
    paths: tuple[Path, ...] = ()
    """The whole set in use, the primary (``path``) first; empty means ``(path,)`` (always so with ``max_paths``
    1). Read it through ``all_paths``."""
    rates: tuple[float, ...] = ()
    """Each path's predicted throughput (the transfer's own bytes/s), in the order of ``paths``."""

    @property
    def all_paths(self) -> tuple[Path, ...]:
        return self.paths or (self.path,)


@dataclass(frozen=True, slots=True)
class Switch:
    """Move new blocks onto ``path``; blocks in flight on the old path finish there."""

    path: Path
    predicted_bps: float
    reason: SwitchReason
    probes: tuple[Edge, ...] = ()
    deep: tuple[Edge, ...] = ()
    """As ``Keep.deep``."""
    paths: tuple[Path, ...] = ()
    """As ``Keep.paths``. A change of the set that keeps the primary is a ``Switch`` to the same ``path`` with
    reason ``"join"``, ``"drop"`` or ``"failure"``."""
    rates: tuple[float, ...] = ()

    @property
    def all_paths(self) -> tuple[Path, ...]:
        return self.paths or (self.path,)


@dataclass(frozen=True, slots=True)
class DropDepot:
    """``depot`` failed: give up what is held there and go on with ``path`` (which avoids it if anything does)."""

    depot: str
    path: Path
    predicted_bps: float
    paths: tuple[Path, ...] = ()
    """As ``Keep.paths``: every path of the set avoids ``depot``."""
    rates: tuple[float, ...] = ()

    @property
    def all_paths(self) -> tuple[Path, ...]:
        return self.paths or (self.path,)


Decision = Keep | Switch | DropDepot
_D = TypeVar("_D", bound=Keep | Switch | DropDepot)



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
        *,
        rtt_s: Mapping[str, float] | None = None,
        peer_rtt_s: Mapping[Edge, float] | None = None,
    ) -> None:
        """``rtt_s``: the round-trip time from ``src`` to each vertex it knows it for (seconds), measured by the
        engine with a small request; it orders exploration (``_probing.apply_priors``), and is never a measurement
        of rate. ``peer_rtt_s``: round trips between other pairs of vertices, as depots measured them to their
        peers; where one is known it replaces the bound the client's own round trips give."""
        self.rtt_s = {v: t for v, t in (rtt_s or {}).items() if t > 0 and math.isfinite(t)}
        self.peer_rtt_s = {e: t for e, t in (peer_rtt_s or {}).items() if t > 0 and math.isfinite(t)}
        if src not in vertices or dst not in vertices or src == dst:
            raise ValueError("src and dst must be two different vertices among vertices")
        self.src = src
        self.dst = dst
        self.memory = memory
        self.config = config if config is not None else SchedulerConfig()
        limit = self.config.max_depots
        self.vertices: tuple[str, ...] = (
            tuple(dict.fromkeys(vertices)) if limit is None
            else candidates(vertices, src, dst, memory, self.rtt_s, limit)
        )
        """The transfer's candidates: ``vertices``, or at most ``max_depots`` of them (theory of operation, 15)."""
        configured = self.config.max_explorations
        self.max_explorations = 2 * len(self.vertices) if configured is None else configured
        self.explorations = 0
        self._among = frozenset(self.vertices)
        self._confirmed: set[Edge] = set()
        self._state = LoopState.first(probes=self.config.probes_per_round > 0)
        """How it explores, whether it trusts the memory, a path tried on ceilings, scouts due, news (``_state``)."""
        self._attempt: _Attempt | None = None
        self._history: list[PathAttempt] = []
        self._edge_since: dict[Edge, float] = {}
        self._probe_plan = ProbePlan(self)
        """Which edges to probe next, and the probes running (``_probing``)."""
        self._last_evaluation = -math.inf
        self._pending_drops: list[str] = []
        # The path set beside the primary (``_attempt``): theory of operation 12.
        self._set = PathSet(self)
        """The paths beside the primary, their trial and the bans (``_pathset``)."""
        self._changed_at = -math.inf
        """When the set last changed: nothing but a failure is judged for ``min_attempt_s`` after."""
        self._now = -math.inf
        """The time of the latest ``tick`` (bans settle by it)."""
        self._probes_wait = False
        """A warm start's probes wait for its set to report (``_waiting_probes``)."""
        self._left: int | None = None
        """The bytes not yet delivered, as the engine last said (``Progress``); None: not told."""
        self._routes = RouteGuess(src, self.rtt_s, self.peer_rtt_s) if self.config.route_blame else None
        """Which hops run over the same links, by the round trips (theory of operation, 17)."""

    def add_vertex(self, vertex: str) -> None:
        """A depot that joined the overlay during the transfer: a candidate from the next ``tick`` on (probed
        as any edge the memory does not know), with room for two more explorations."""
        if vertex in self._among:
            return
        self.vertices = (*self.vertices, vertex)
        self._among = frozenset(self.vertices)
        if self.config.max_explorations is None:
            self.max_explorations += 2

    # -- what the engine reads ----------------------------------------------------------------------------

    @property
    def current_path(self) -> Path | None:
        return None if self._attempt is None else self._attempt.path

    @property
    def current_paths(self) -> tuple[Path, ...]:
        """The whole set in use, the primary (``current_path``) first; empty before ``start``."""
        if self._attempt is None:
            return ()
        return (self._attempt.path, *(extra.path for extra in self._set.extras))

    @property
    def attempts(self) -> list[PathAttempt]:
        """Every path attempt so far in the order they began, the current ones (with ``end`` None) last among
        equals. With several paths at once they overlap in time."""
        current = [] if self._attempt is None else [self._attempt, *self._set.extras]
        frozen = [*self._history, *(a.freeze(None, self.config.streams) for a in current)]
        return sorted(frozen, key=lambda a: a.start)

    @property
    def probing(self) -> bool:
        """Whether the loop explores with probes (else by moving the transfer, as the seed does)."""
        return self._state.probing

    @property
    def last_evaluation(self) -> float:
        """When the loop last re-evaluated the path (``now`` of that tick or of ``start``)."""
        return self._last_evaluation

    # -- what the loop's parts read (``_pathset.PathSetLoop``, ``_probing.ProbingLoop``) -------------------------

    @property
    def edge_since(self) -> dict[Edge, float]:
        """When each edge of the set joined it (a hop's samples from its first ``warmup_s`` are not learnt); the
        path set adds its newcomers' edges and takes out those of the paths that leave."""
        return self._edge_since

    @property
    def history(self) -> list[PathAttempt]:
        """The attempts that ended, in the order they ended; the path set adds the extras that leave."""
        return self._history

    @property
    def now(self) -> float:
        """The time of the latest ``tick`` (or of ``start``)."""
        return self._now

    @property
    def memory_discredited(self) -> bool:
        """Whether this transfer found the remembered estimates wrong and stopped trusting them."""
        return self._state.memory is Memory.DISCREDITED

    def graph(self, *, with_aging: bool = True) -> nx.DiGraph:
        """What this transfer believes, in its own bytes/s: the memory's per-stream mesh times ``streams``, less
        remembered estimates it has discredited."""
        graph = self.memory.to_graph(self.vertices, with_aging=with_aging)
        streams = self.config.streams
        for u, v, attrs in graph.edges(data=True):
            if self.memory_discredited and (u, v) not in self._confirmed:
                attrs.pop(THROUGHPUT, None)
            elif THROUGHPUT in attrs:
                attrs[THROUGHPUT] *= streams
        return graph

    # -- events in ----------------------------------------------------------------------------------------

    def start(self, now: float) -> Switch:
        """The first path: the widest by what is remembered, unknown edges counting as infinitely fast; with
        ``max_paths`` > 1, every further path the remembered weights predict to add joins it at once, on trial."""
        if self._attempt is not None:
            raise RuntimeError("the scheduler has already started")
        self._last_evaluation = self._now = now
        choice = self._choose()
        assert choice is not None  # with no current path, something is always chosen
        path, predicted, reason = choice
        self._switch(now, path, predicted, "start", exploring=reason == "explore")
        # a warm start (the memory chose its path) probes once the path has reported (``_waiting_probes``)
        self._probes_wait = self.config.warm_probes_after_s != 0 and not has_unknown(self.measured_graph(), path)
        if self.config.max_paths > 1:
            # a warm start runs every path the memory predicts to add from its first second; a cold one scouts
            # once its first path has been measured
            if not self._set.join(now) and self.config.cold_scouts and has_unknown(self.measured_graph(), path):
                self._state = self._state.scouts_due()
        return self._with_set(Switch(path, predicted, "start", self._probes(now)))

    def measure(self, event: Event) -> None:
        """Take in one event from the transfer. Cheap; decisions wait for ``tick``."""
        match event:
            case Measurement(
                edge=edge, bytes=nbytes, seconds=seconds, at=at, streams=streams, began=began, starved=starved
            ):
                self._measured(edge, nbytes, seconds, at, streams, began, starved=starved)
            case HopFailure(edge=edge, at=at):
                self._failed(edge, at)
            case Progress(left=left):
                self._left = left
            case ProbeDone(edge=edge):
                if self._probe_plan.ended(edge):
                    self._state = self._state.heard().with_news(News.PROBE_ENDED)
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
        self._now = now
        self._set.settle_bans()
        if self._pending_drops:
            depot = self._pending_drops.pop(0)
            if any(depot in path for path in self.current_paths):
                self._reevaluate(now, failure=True)
            path = self._attempt.path
            return self._with_set(DropDepot(depot, path, path_throughput(self.graph(), path)))
        if News.HOP_FAILED in self._state.news:
            return self._with_set(self._reevaluate(now, failure=True))
        if self._state.scouts is Scouts.DUE and self._scouts_ready(now):
            self._state = self._state.scouts_done()
            if self._set.scout(now):
                return self._with_set(replace(self._set_switch(now, "join"), probes=self._probes(now)))
        # The loop looks every reevaluate_s, and also as soon as the path has run min_attempt_s: a move that waited
        # for the attempt to be judgeable is not held back to the next look as well.
        judgeable = self._changed_at + self.config.min_attempt_s
        if now - self._last_evaluation < self.config.reevaluate_s and not self._last_evaluation < judgeable <= now:
            if News.PROBE_ENDED in self._state.news:
                # A probe just finished: a path it shows clearly wider is taken now, not at the next evaluation.
                self._state = self._state.without(News.PROBE_ENDED)
                if (early := self._early_move(now)) is not None:
                    return self._with_set(early)
            return self._with_set(Keep(self._attempt.path, self._probes(now)))
        self._last_evaluation = now
        self._state = self._state.without(News.PROBE_ENDED)
        self.memory.age_stale_weights(
            now,
            after_s=self.config.age_after_s,
            percent=self.config.age_percent,
            max_edges=self.config.age_max_per_round,
            among=self._among,
        )
        if now - self._changed_at < self.config.min_attempt_s:
            early = self._early_move(now)
            return self._with_set(early if early is not None else Keep(self._attempt.path, self._probes(now)))
        decision = self._reevaluate(now, failure=False)
        probes = self._probes(now)
        return self._with_set(replace(decision, probes=probes) if probes else decision)

    # -- internals ----------------------------------------------------------------------------------------

    def _scouts_ready(self, now: float) -> bool:
        """Whether a cold start's scouts may join: its first path has been measured on every hop, or
        ``scout_after_s`` has passed since the start."""
        assert self._attempt is not None
        after = self.config.scout_after_s
        if after is not None and now - self._attempt.start >= after:
            return True
        return not has_unknown(self.measured_graph(), self._attempt.path)

    def _measured(
        self,
        edge: Edge,
        nbytes: int,
        seconds: float,
        at: float,
        streams: float | None,
        began: float | None,
        *,
        starved: bool = False,
    ) -> None:
        began = at - seconds if began is None else began
        probes = self._probe_plan
        probe = edge in probes.since
        deep = edge in probes.deep
        if probe and not deep and streams is not None and streams < self.config.min_streams:
            probes.shallow.add(edge)
        else:
            probes.shallow.discard(edge)  # the transfer's own hops, and deep probes, measured more than one stream
        if deep and probes.slowed_beside(edge):
            probes.crowded.append(edge)
        hoped = None
        depth_rule = False
        if streams is not None and streams < self.config.streams:
            depth_rule = True
            # The hop ran fewer copies than it might, because they filled it (the engine's depth rule): it
            # gives its aggregate, not ``config.streams`` x each copy's rate (theory of operation, 9). A probe's
            # one stream is a floor; ``min_streams`` of them, the fewest any hop runs, if the link holds them, its
            # ceiling (per stream here, so divided by ``config.streams``, which the weights multiply back).
            if probe and not deep and self.config.min_streams > streams:
                hoped = nbytes / seconds * self.config.min_streams / self.config.streams
            seconds *= self.config.streams / streams
        owner = self._owner(edge)
        if owner is not None:
            flow = owner.flows.setdefault(edge, _Flow())
            flow.bytes += nbytes
            flow.seconds += seconds
        if probe:
            self._state = self._state.heard()
        # A path's hop warms up while the transfer runs on it; a probe's warm-up is the engine's (probe_s).
        since = self._edge_since.get(edge)
        if since is not None and not probe and began < since + self.config.warmup_s:
            return
        u, v = edge
        known = self.memory.entry(u, v)
        if known is not None and (known.failed or known.samples == 0):
            known = None  # no rate to compare with
        if depth_rule and starved and not probe and known is not None and nbytes / seconds <= known.throughput_bps:
            return  # fewer copies than its depth, for want of work: what it carried is a floor of what it carries
        if edge not in self._confirmed:
            if known is not None:
                rate = nbytes / seconds
                low = known.throughput_bps * (1 - self.config.memory_mismatch)
                if not low <= rate <= known.throughput_bps / (1 - self.config.memory_mismatch):
                    self._state = self._state.discredit()
                    self.memory.forget(u, v)
            self._confirmed.add(edge)
        ceiling = hoped
        if probe and not depth_rule and self._attempt is not None:
            nbytes, seconds, ceiling = self._freed_share(edge, nbytes, seconds)
        self.memory.observe(u, v, nbytes, seconds, at, ceiling_bps=ceiling)

    def _freed_share(self, edge: Edge, nbytes: int, seconds: float) -> tuple[int, float, float | None]:
        """A probe's sample as the rate it stands for: what the edge would give if the transfer moved there;
        and, when that is uncertain, the most it could give (a per-stream ceiling, else None).

        A probe that shares a bottleneck with the transfer sees only what the transfer leaves (on a backbone
        such as Abilene's, every overlay edge crosses links the transfer uses). The sign of it is the
        transfer's own hop slowing down while the probe runs: a hop of the current path measured more than
        ``SHARED_DROP`` below what it did when the probe started. Then moving the transfer there would free
        the hop's share, and the probe's per-stream figure becomes ``(probe + hop) / streams``, provided the
        probe's stream got about what each of the hop's did (``FAIR_SHARE_GAP``): streams that meet on a full
        link get about equal shares, and one that got much less was held back by something of its own.

        Window-limited hops under their fair share do not slow down, so they do not show the sharing: the
        probe then got their leftover, which on a full link is at least the fair share and so at least each of
        the hop's streams (within ``FAIR_SHARE_GAP``), and its figure is only a floor. Where the probed edge and
        such a hop of the set share an end (both into the destination, both out of a depot: that host's access
        link is the likeliest shared bottleneck), the sample carries the ceiling ``(probe + hop) / streams``,
        what the edge gives if it is shared and the transfer moves there. A probe slower than the hop's streams
        was held back by something of its own, and its figure stands with no ceiling. The loop may try a path
        on ceilings, as an exploration (``_hopeful_path``); the transfer's own samples then replace them.
        """
        baseline = self._probe_plan.baseline.get(edge, {})
        streams = self.config.streams
        probe = nbytes / seconds
        freed = probe
        ceiling = probe
        for hop in self._set.edges() - {edge}:
            entry = self.memory.entry(*hop)
            if entry is None or entry.failed or entry.samples == 0:
                continue
            if probe < entry.throughput_bps * (1 - FAIR_SHARE_GAP):
                continue  # the probe's stream was held back by something of its own, not by a shared link
            both = (probe + entry.throughput_bps * streams) / streams
            if hop[0] == edge[0] or hop[1] == edge[1]:
                ceiling = max(ceiling, both)
            before = baseline.get(hop)  # none: the hop joined the path after the probe started
            if streams > 1 and before is not None and entry.throughput_bps < before * (1 - SHARED_DROP):
                freed = max(freed, both)
        hoped = ceiling if ceiling > freed * (1 + self.config.hysteresis) else None
        return round(freed * seconds), seconds, hoped

    def _failed(self, edge: Edge, at: float) -> None:
        self.memory.fail(*edge, at)
        self._confirmed.add(edge)
        if edge in self._probe_plan.since:
            self._state = self._state.heard()
        if edge in self._edge_since:
            self._state = self._state.with_news(News.HOP_FAILED)

    def _choose(self) -> tuple[Path, float, SwitchReason] | None:
        """The path the loop wants now, its prediction and why; None to keep the current one."""
        # With probes, the transfer moves on measured weights only; aging's second chances are probed first.
        graph = self.graph(with_aging=not self.probing)
        current = self._attempt.path if self._attempt is not None else None
        current_predicted = -math.inf if current is None else path_throughput(self.carried(graph), current)
        reason: SwitchReason = "better"
        if self.probing:
            best = self.best_known(graph)  # probes explore; the transfer stays on measured ground
            if current is not None and has_unknown(graph, best):
                # Nothing measured runs end to end (a warm start's figures forgotten as they disagreed with its
                # first samples, say), and ``best_known`` falls back to the direct path, unmeasured: not a
                # reason to leave the path the transfer runs on.
                best = current
            measured_better = best != current and path_throughput(graph, best) > current_predicted * (
                1 + self.config.hysteresis
            )
            hope = self._state.hope
            if current is not None and hope is not None and current == hope.path and not measured_better:
                # The path tried on ceilings is measured ground now. It gained what the ceilings promised over
                # the path it left, or the ceilings were not shared links and are not tried again.
                left = path_throughput(graph, hope.left) if hope.left else 0.0
                held = path_throughput(graph, current) > left * (1 + self.config.hysteresis)
                self._state = self._state.hope_over(spent=not held)
            # A first decision may start on ceilings too (a warm start from a memory of floors).
            hopeful = None if measured_better and current is not None else self._hopeful_path(graph, best, current)
            if (
                hopeful is not None
                and hopeful[1] > current_predicted * (1 + HOPE_HYSTERESIS * self.config.hysteresis)
                and not self._probe_plan.may_beat(hopeful[1])
            ):
                return hopeful[0], hopeful[1], "explore"
        else:
            best = tuple(widest_path(graph, self.src, self.dst))
            if has_unknown(graph, best):
                reason = "explore"
                if self.explorations >= self.max_explorations:
                    best, reason = self.best_known(graph), "settle"
        if best == current:
            return None
        predicted = path_throughput(graph, best)
        # Infinite (unexplored) beats anything finite; two infinities or a margin too thin keep the path.
        if not predicted > current_predicted * (1 + self.config.hysteresis):
            return None
        return best, predicted, reason

    def _early_move(self, now: float) -> Switch | None:
        """Before ``min_attempt_s``: a move to the widest measured path when it is predicted ``early_gain`` faster
        than the current one (both on measured figures alone, so no exploration and no ceiling is hurried). A
        path tried on ceilings runs its whole attempt: its own samples are what the trial waits for. A set of
        paths (newcomers on trial, maybe) is left early only for a path new to it predicted ``early_gain``
        faster than everything the set carries: a cold start whose scout through a decoy depot sat silent on
        trial held its slow first path 5 s more while probes had measured a chain four times as wide. With
        probes only; the seed's way explores by moving."""
        if not self.probing or self._state.hope is not None:
            return None
        assert self._attempt is not None
        graph = self.measured_graph()
        best = self.best_known(graph)
        current = self._attempt.path
        if best == current or has_unknown(graph, current) or has_unknown(graph, best):
            return None  # (nothing measured end to end makes the direct path "best", unmeasured)
        predicted = path_throughput(graph, best)
        if self._set.extras or self._set.trial is not None:
            # A set (with newcomers on trial, maybe): only onto a path new to it and measured clearly wider than
            # all the set carries, so that no trial's outcome could make the set the better one.
            if best in self.current_paths or not self._set.would_gain(best):
                return None
            now_bps = set_total(self.carried(graph), self.current_paths)
        else:
            now_bps = path_throughput(graph, current)
        # Against the better of what the current path (or set) was chosen for and what it measures now: a path
        # whose own first samples read low (TCP, or the engine's depth, still ramping up) is not left early for
        # the one it just replaced; only a path measured clearly wider than both is worth hurrying onto.
        # (A path chosen unmeasured, the cold start's first, is judged by what it measures alone.)
        chosen_for = self._attempt.predicted if math.isfinite(self._attempt.predicted) else 0.0
        bar = max(now_bps, chosen_for)
        if not predicted > bar * (1 + self.config.early_gain) or not self.pays_fill(best):
            return None
        switch = self._move(now, best, predicted, "better")
        probes = self._probes(now)
        return replace(switch, probes=probes) if probes else switch

    def _hopeful_path(self, graph: nx.DiGraph, best: Path, current: Path | None) -> tuple[Path, float] | None:
        """The widest path when every edge measured only as a floor counts at its ceiling, and its predicted
        rate, if it beats ``best`` by the hysteresis; None when there is none or no exploration is left.

        A ceiling is a probe's figure that may be the transfer's leftover on a shared link (``_freed_share``).
        Only moving the transfer there tells, so it counts as an exploration; the transfer's own samples then
        replace the floor, and a path that did not hold is left at the next evaluation by the measured rules."""
        if self.explorations >= self.max_explorations:
            return None
        hoped = self.with_ceilings(graph)
        if hoped is None:
            return None
        path = self.best_known(hoped)
        predicted = path_throughput(hoped, path)
        margin = 1 + HOPE_HYSTERESIS * self.config.hysteresis
        if path == current or path != best and not predicted > path_throughput(graph, best) * margin:
            return None
        return path, predicted

    def with_ceilings(self, graph: nx.DiGraph) -> nx.DiGraph | None:
        """``graph`` with every floor (an estimate with a ceiling) raised to its ceiling; None if there is none,
        or once a path tried on ceilings has not held."""
        if self._state.ceilings is Ceilings.SPENT:
            return None
        raised = None
        streams = self.config.streams
        for u, v, attrs in graph.edges(data=True):
            entry = self.memory.entry(u, v)
            if THROUGHPUT not in attrs or entry is None or entry.ceiling_bps is None or entry.failed:
                continue
            if self.memory_discredited and (u, v) not in self._confirmed:
                continue
            if raised is None:
                raised = graph.copy()
            raised.edges[u, v][THROUGHPUT] = max(attrs[THROUGHPUT], entry.ceiling_bps * streams)
        return raised

    def best_known(self, graph: nx.DiGraph) -> Path:
        """The widest path of ``graph``'s measured edges; the direct path when none runs end to end."""
        try:
            return tuple(widest_path(measured_only(graph), self.src, self.dst))
        except NoPathError:
            # Nothing measured end to end: the direct path is the one that needs no depot.
            return (self.src, self.dst)

    def _reevaluate(self, now: float, *, failure: bool) -> Keep | Switch:
        """One judgement, in order: a trial join that did not add is undone; the primary is chosen by the
        single-path rules; extras that stopped adding leave; new paths may join, together. The first that changes
        the set is the answer (the next waits ``min_attempt_s``). On a failure only the first two, and broken
        extras leave."""
        assert self._attempt is not None
        self._state = self._state.without(News.HOP_FAILED)
        self._last_evaluation = now
        lost = self._set.drop_broken(now) if failure else False
        if not failure and self._set.judge_trial(now):
            return self._set_switch(now, "drop")
        choice = self._choose()
        if choice is not None and not failure and not self._set.would_gain(choice[0]):
            choice = None
        if choice is not None and not failure and not self.pays_fill(choice[0]):
            choice = None
        if choice is not None:
            path, predicted, reason = choice
            switch = self._move(now, path, predicted, "failure" if failure else reason)
            if failure:
                self._set.drop_broken(now)  # a broken primary moved aside for an extra is dropped too
            return switch
        if failure:
            return self._set_switch(now, "failure") if lost else Keep(self._attempt.path)
        if self._set.drop_idle(now):
            return self._set_switch(now, "drop")
        if self._set.join(now):
            return self._set_switch(now, "join")
        return Keep(self._attempt.path)

    def _move(self, now: float, path: Path, predicted: float, reason: SwitchReason) -> Switch:
        """Move the primary to ``path``, measured wider (``reason`` "better"), onto ceilings ("explore"), or away from
        a failure. A set moved onto a measured path new to it keeps the paths the set built from it would have
        (``PathSet.running_beside``): they run on, the others leave (no ban) and ``path`` joins on a trial of its
        own, to be promoted by the single-path rules once it shows what it carries. Ending them all and joining
        them again cost each its fill and the trial's time: on a simulated shared bottleneck a warm start moved
        from direct and a one-depot path (12.5 Mbit/s together) onto a chain predicted 16 with them beside it, ran
        the chain alone at 7.4 for 10 s, and paid the others' fill again when they joined."""
        if reason == "better" and self._set.extras and path not in self.current_paths:
            kept = self._set.running_beside(path)
            if kept:
                assert self._attempt is not None
                leaving = self._attempt.path not in kept
                if leaving:  # the old primary leaves as an extra would
                    self._set.extras.insert(0, self._attempt)
                self._set.leave_all_but(now, kept)
                if leaving:
                    self._attempt = self._set.take_settled()
                    self._set.recall_bans(now)
                self._set.join_beside(now, path, predicted)
                return self._set_switch(now, "join")
        return self._switch(now, path, predicted, reason, exploring=reason == "explore")

    def _switch(self, now: float, path: Path, predicted: float, reason: SwitchReason, *, exploring: bool) -> Switch:
        """Move the primary to ``path``. An extra of the set becomes the primary and the old primary runs on
        beside it (the two ran together already); a path new to the set ends every attempt, extras included,
        and the set is built again by joins, each with its own trial (``_move`` keeps what it can first)."""
        if exploring:
            self.explorations += 1
        old = self._attempt
        hoping = self._state.hoping
        if old is not None and old.path == hoping and path != hoping:
            # The path tried on ceilings did not hold: they were not shared links (a failure says nothing).
            self._state = self._state.hope_over(spent=reason != "failure")
        if exploring and self.probing:
            # with probes, the transfer explores only on ceilings
            self._state = self._state.hope_on(path, old.path if old is not None else None)
        promoted = next((extra for extra in self._set.extras if extra.path == path), None)
        if promoted is not None:
            self._set.extras.remove(promoted)
            if old is not None:
                self._set.extras.insert(0, old)
            self._attempt = promoted
        else:
            for ended in [old, *self._set.extras]:
                if ended is not None:
                    self._history.append(ended.freeze(now, self.config.streams))
            self._set.extras = []
            self._set.trial = None
            self._attempt = _Attempt(path, now, reason, predicted)
        self._set.recall_bans(now)
        # A hop the new set keeps is already warm.
        self._edge_since = {edge: self._edge_since.get(edge, now) for p in self.current_paths for edge in edges_of(p)}
        if promoted is None:
            # A promotion runs the same paths, each attempt going on: nothing new waits to be judged. Timed from
            # it, the next move waited min_attempt_s: a testbed cold start that promoted its scout over a slow
            # first path held 10 s more on the two while probes had measured a chain twice as wide.
            self._changed_at = now
        return Switch(path, predicted, reason)

    # -- the path set (theory of operation, 12) -----------------------------------------------------------

    def _with_set(self, decision: _D) -> _D:
        """The decision with the whole set and its predicted rates, when more than one path may run, and with its
        deep probes."""
        if not isinstance(decision, DropDepot) and decision.probes:
            decision = replace(decision, deep=tuple(edge for edge in decision.probes if edge in self._probe_plan.deep))
        if self.config.max_paths == 1 or self._attempt is None:
            return decision
        paths = self.current_paths
        graph = self.measured_graph()
        rates = [path_throughput(graph, path) for path in paths]
        if not isinstance(decision, Keep) and decision.path == paths[0]:
            rates[0] = decision.predicted_bps
        return replace(decision, paths=paths, rates=tuple(rates))

    def _set_switch(self, now: float, reason: SwitchReason) -> Switch:
        assert self._attempt is not None
        self._changed_at = now
        primary = self._attempt.path
        return Switch(primary, path_throughput(self.measured_graph(), primary), reason)

    @property
    def left_bytes(self) -> int | None:
        """The bytes not yet delivered, as the engine last said (``Progress``); None: never said."""
        return self._left

    def pays_fill(self, path: Path) -> bool:
        """Whether ``path``, new to the set, is worth taking with what is left: its first copies (``fill_s``, at
        ``first_depth`` copies a hop) reach the destination before the set, at what it carries now, delivers the
        bytes left without it. With the set at rate R, L bytes left and a newcomer of rate w whose first block
        comes after F, the set ends at (L + wF) / (R + w) with it and L / R without: sooner exactly when F < L / R.
        True when the block size or the bytes left are not known, for a path of the set, or before the set has
        shown a rate."""
        block, left = self.config.block_bytes, self._left
        if block is None or left is None or path in self.current_paths:
            return True
        graph = self.measured_graph()
        now_bps = set_total(self.carried(graph), self.current_paths)
        if not (now_bps > 0 and math.isfinite(now_bps)):
            return True
        return fill_s(graph, path, min(self.config.first_depth, self.config.streams), block) < left / now_bps

    def crosses(self, path: Path, paths: Sequence[Path]) -> bool:
        """Whether the round trips place a hop of ``path`` on the links of ``paths`` (``_routes.RouteGuess``); False
        without them, or with ``route_blame`` off."""
        return self._routes is not None and self._routes.crosses(path, paths)

    def measured_graph(self) -> nx.DiGraph:
        """The graph paths are compared on: without aging's raises when the loop probes (probes try them)."""
        return self.graph(with_aging=not self.probing)

    def carried(self, graph: nx.DiGraph, *, judging: bool = False) -> nx.DiGraph:
        """``graph`` with each hop of the set that has no weight at what the set's own copies carried on it, those
        begun in its warm-up included; ``graph`` itself when there is none (or without probes, unless
        ``judging`` the set's paths: the seed's way explores by moving, and an unmeasured path is one to explore).

        A hop's copies begun in its warm-up are not learnt (slow start, or a first burst into empty queues), so a
        hop whose copies take longer than the warm-up, a slow one, reports nothing learnt for the time of two
        copies: it ran 25 s unweighted on the testbed. Its path then counted as infinitely fast, and no measured
        path, however wide, could replace it. What it carried is what the transfer knows of it; it judges the set
        the transfer runs on, and is not remembered."""
        if not (self.probing or judging) or self._attempt is None:
            return graph
        carried = None
        for attempt in (self._attempt, *self._set.extras):
            for edge in edges_of(attempt.path):
                flow = attempt.flows.get(edge)
                rate = None if flow is None else flow.rate(self.config.streams)
                if rate is None or THROUGHPUT in graph.edges[edge]:
                    continue
                if carried is None:
                    carried = graph.copy()
                carried.edges[edge][THROUGHPUT] = rate
        return graph if carried is None else carried

    def _owner(self, edge: Edge) -> _Attempt | None:
        """The attempt of the set whose path has ``edge`` (at most one: the set is edge-disjoint)."""
        if edge not in self._edge_since or self._attempt is None:
            return None
        return next((a for a in (self._attempt, *self._set.extras) if edge in edges_of(a.path)), None)

    def _probes(self, now: float) -> tuple[Edge, ...]:
        """Edges worth probing now (``ProbePlan.choose``); none when the loop explores by moving. A probe that has
        not reported in ``3 x probe_s`` when none ever did means the engine does not probe: the loop then
        explores by moving the transfer, as the seed does."""
        if not self.probing or self._attempt is None:
            return ()
        if self._probe_plan.overdue(now) and self._state.exploration is Exploration.PROBES_UNHEARD:
            self._state = self._state.unheard()
            self._probe_plan.since.clear()
            return ()
        if self._waiting_probes(now):
            return ()
        return self._probe_plan.choose(now, self._set.banned_edges)

    def _waiting_probes(self, now: float) -> bool:
        """Whether a warm start's probes still wait: until every hop of its set has reported, or
        ``warm_probes_after_s`` after the start, whichever comes first (as a cold start's scouts wait for its first
        path). A warm start runs on measured ground, and its first copies are on their way: a probe started beside
        them takes its share of whatever link they cross while nothing has yet arrived (in the testbed-shaped
        simulator a 16-block transfer over a shared bottleneck filled its first copies in 4.5 s beside four probes,
        2.5 s pinned). A cold start probes from its first second: nothing is known, and exploring is what it does
        first."""
        if not self._probes_wait:
            return False
        assert self._attempt is not None
        after = self.config.warm_probes_after_s
        waited = after is not None and now - self._attempt.start >= after
        if waited or all(edge in self._confirmed for edge in self._set.edges()):
            self._probes_wait = False
        return self._probes_wait

    def unverified(self, edge: Edge) -> bool:
        """Whether ``edge``'s weight is no measurement of this transfer's to go by: unknown, aged, or remembered
        from a memory this transfer has discredited and not confirmed since."""
        entry = self.memory.entry(*edge)
        return entry is None or entry.aged or (self.memory_discredited and edge not in self._confirmed)
