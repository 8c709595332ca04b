"""The decision loop's knobs (``SchedulerConfig``), in a module of their own so that the loop's parts (``_pathset``,
``_probing``) read them without importing the loop; ``_loop`` and ``lnet.scheduler`` re-export it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._memory import DEFAULT_AGE_AFTER_S, DEFAULT_AGE_MAX_PER_ROUND, DEFAULT_AGE_PERCENT

__all__ = ["SchedulerConfig"]


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
    early_gain: float = 0.20
    """A path of measured edges predicted this fraction faster than the current one is moved to at the next
    re-evaluation, before ``min_attempt_s`` (theory of operation, 2): a cold start that moved to a one-depot path
    and then measured the chain's middle edge need not run the lesser path for its whole attempt. Never from a
    path tried on ceilings, never onto unknown or ceiling figures, and from a set of paths only onto a path new to
    it and this fraction faster than all the set carries (theory of operation, 2)."""
    age_after_s: float = DEFAULT_AGE_AFTER_S
    age_percent: float = DEFAULT_AGE_PERCENT
    age_max_per_round: int = DEFAULT_AGE_MAX_PER_ROUND
    max_explorations: int | None = None
    """How many attempts may use a path with unknown edges; None: twice the number of vertices."""
    memory_mismatch: float = 0.5
    """A remembered estimate (from before this transfer started, not aged since) that this transfer measures more
    than this fraction below, or the inverse above, discredits every remembered estimate this transfer has not
    confirmed: they count as unknown from then on."""
    probes_per_round: int = 4
    """0: explore as the seed does, by moving the transfer onto paths with unknown edges. More: never move the
    transfer onto an unknown edge; instead keep up to this many probes running at once beside the transfer, each
    a stream of the transfer's own block size on one unknown edge (the ones on the paths that could beat the best
    known), a new one asked at the first tick after one ends (``ProbeDone``, or ``3 * probe_s`` without news).
    Few at once, because probes that share a bottleneck see only what the others leave (4 did best in the
    simulator across shared and unshared topologies, ``bench/scheduler.py``). An engine that ignores ``probes``
    is noticed (no probe ever reported back within ``3 * probe_s``) and the loop falls back to the seed's way."""
    probe_s: float = 4.0
    """How long the engine runs one probe, reporting measurements as for a hop of the path. The engine owns a
    probe's warm-up (it knows which copy ran on a cold connection): every probe sample it reports is learnt."""
    min_streams: int = 1
    """The fewest blocks the engine keeps in flight on a hop when it chooses each hop's depth itself (``streams``
    is then the most): a one-stream probe's ceiling is this many of its stream (theory of operation, 9). 1: no
    ceiling from the depth rule."""
    streams: int = 1
    """Blocks the transfer keeps in flight on one hop. Measurements are per stream (bytes over the seconds each
    copy took), and an edge's weight is ``streams`` times its per-stream rate: what this transfer would get on
    it. A path's predicted throughput is in the transfer's own bytes/s."""
    deep_probes: bool = True
    """Probe deep an edge known from one stream only, when ``streams`` of that stream would make its path the best
    (theory of operation, 13). False: one stream a probe, as before 2026-11-28 (for comparisons)."""
    cold_scouts: bool = True
    """With ``max_paths`` > 1, a start that knows nothing of its first path runs, beside it once it has reported, the
    one-depot paths the round trips rank widest (``PathSet.scout``): the transfer's own blocks measure them (theory of
    operation, 14).
    False: a cold start runs one path and learns the others by probes alone, as before 2026-11-28."""
    scout_after_s: float | None = 3.0
    """A cold start's scouts join once every hop of its first path has reported, or this long after the start,
    whichever comes first (theory of operation, 14): a first path that has not ended a copy past its warm-up by
    then is slow, and no baseline worth waiting for (3 s: a copy ending a second or more past ``warmup_s``, before
    which no sample of a new hop is learnt; at ``warmup_s`` itself no first path would ever have reported).
    None: they wait for the reports, however long, as before 2026-11-28."""
    warm_probes_after_s: float | None = 3.0
    """A warm start (its first path chosen from measured edges) starts its probes once every hop of its set has
    reported, or this long after the start, whichever comes first; a cold start probes from its first second
    (``PathScheduler._waiting_probes``). 0: a warm start's probes start with it, as before 2026-12-07; None: they
    wait for the reports, however long."""
    max_depots: int | None = 32
    """At most this many depots (the destination among them) are the transfer's candidates, chosen by
    ``candidates`` (theory of operation, 15) when the overlay has more. None: every vertex, however many."""
    max_paths: int = 1
    """How many edge-disjoint paths the transfer may use at once (theory of operation, 12). 1: one path, exactly as
    before."""
    path_margin: float = 0.15
    """A further path joins the set only when predicted to add at least this fraction of the set's predicted
    total; it must then make the measured total grow by half of it (else it shared a bottleneck), and it leaves
    when its measured rate falls below half of it of the others' (theory of operation, 12). Chosen in the
    simulator (``bench/scheduler.py --multipath``): 0.05 to 0.25 do alike where routes differ widely or share one
    bottleneck; 0.15 leaves out a route adding 10% (``two_routes``' direct link), which 0.10 takes, but at 15%
    measurement noise 0.10's trial (5% growth) let a path through the shared bottleneck stay and churn the set."""
    block_bytes: int | None = None
    """The transfer's block size. With it, and the bytes the engine says are left (``Progress``), a path new to
    the set is taken (it joins, or the primary moves onto it) only when its first copies would reach the
    destination before the set, without it, delivers what is left (``_paths.fill_s``; a failure's move is always
    made): at the end of a transfer a path's fill is time no block gains. None: no such rule (nor without
    ``Progress``)."""
    first_depth: int = 4
    """Copies a new path starts with on each hop (the relay's ``initial_inflight``): its first copies share each
    hop's rate, and a depot passes a block on once it holds all of it."""
    route_blame: bool = True
    """When newcomers judged together took rate from the paths that were there, the loss is theirs that the round
    trips place on those paths' links, where some are and some are not (``_routes.RouteGuess``; theory of
    operation, 17). False: it is shared by how far each fell short of its prediction alone, as before 2026-12-07."""

    def __post_init__(self) -> None:
        for name in ("reevaluate_s", "min_attempt_s", "age_after_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive")
        if not 0 <= self.warmup_s < self.min_attempt_s:
            raise ValueError("warmup_s must be at least 0 and less than min_attempt_s")
        if not self.early_gain >= self.hysteresis:
            raise ValueError("early_gain must be at least hysteresis")
        if self.hysteresis < 0 or self.age_percent < 0 or self.age_max_per_round < 0:
            raise ValueError("hysteresis, age_percent and age_max_per_round must not be negative")
        if self.probes_per_round < 0 or not self.probe_s > self.warmup_s:
            raise ValueError("probes_per_round must not be negative, and probe_s must exceed warmup_s")
        if self.streams < 1 or not 1 <= self.min_streams <= self.streams:
            raise ValueError("streams must be at least 1, and min_streams from 1 to streams")
        if self.max_explorations is not None and self.max_explorations < 0:
            raise ValueError("max_explorations must not be negative")
        if not 0 < self.memory_mismatch < 1:
            raise ValueError("memory_mismatch must be between 0 and 1")
        if self.warm_probes_after_s is not None and not self.warm_probes_after_s >= 0:
            raise ValueError("warm_probes_after_s must not be negative")
        if self.max_paths < 1:
            raise ValueError("max_paths must be at least 1")
        if self.max_depots is not None and self.max_depots < 1:
            raise ValueError("max_depots must be at least 1 (the destination), or None")
        if not 0 < self.path_margin < 1:
            raise ValueError("path_margin must be between 0 and 1")
        if (self.block_bytes is not None and self.block_bytes < 1) or self.first_depth < 1:
            raise ValueError("block_bytes must be at least 1 (or None), and first_depth at least 1")
