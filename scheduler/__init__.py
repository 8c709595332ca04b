"""lnet scheduler: which chain of depots a transfer uses, and when to move to another.

Pure code: no trio, no httpx, no clock. Time comes in as ``now`` (Unix seconds, so that a saved memory means
the same to the next process), measurements come in as events, decisions go out as frozen dataclasses. The
transfer engine owns the sockets and carries the decisions out.

Theory of operation
===================

The seed (Labissoniere & Roche, seeds/003) models the network as a directed graph: the source, the destination
and every depot are vertices, every ordered pair is an edge weighted by the throughput measured on it. A path's
predicted throughput is its smallest edge (the pipeline runs at its slowest hop), so the best path is the one
whose smallest edge is largest: the max-min, or widest, path. Its routine is Dijkstra with ``min`` in place of
``+`` and ``max`` in place of ``min``. Its main loop is::

    while the transfer is not complete:
        new_path = widest_path(src, dst)         # unknown edges count as infinitely fast
        if new_path != cur_path: stop cur_path; start new_path
        sleep(t)                                 # let the transfer ramp up
        update_weights()                         # from what the hops measured
        age_weights()                            # raise stale weights by a percentage, a bounded number per round

Unknown edges being infinite is the cold start: every untried edge looks best, so the loop tries them, learns
and settles. A warm start begins from weights remembered from earlier transfers. Aging gives a once
mis-measured edge another chance.

Where lnet departs from the seed, and why
-----------------------------------------
1. Heap, not an O(V^2) scan (``widest_path``): a full mesh of 1000 depots answers in a fraction of a second.
   Ties in bottleneck go to the path with fewer hops (fewer depots to hold the data, fewer copies), then to the
   vertex order given, so runs are reproducible. That takes a second pass (breadth-first over edges at least
   as wide as the best bottleneck); one Dijkstra keyed on (width, hops) gets the hop count wrong.
2. Estimates are smoothed (``EdgeMemory.observe``): an exponential average weighted by the seconds a sample
   covers (time constant ``smoothing_s``), so block size does not change how fast the memory follows a change.
   Samples taken in the first ``warmup_s`` after an edge joins the path are not learnt from, and no attempt is
   judged before ``min_attempt_s``: TCP is still opening its window, and the seed's sleep(t) had the same aim.
3. Hysteresis: a path replaces the current one only when predicted ``hysteresis`` faster (an unexplored path is
   infinitely fast and always is), so measurement noise does not flap the transfer between near-equal paths.
4. Starvation guard (left open by the seed): at most ``max_explorations`` attempts may use a path with unknown
   edges. Once they are spent, unknown edges are ignored and the loop settles on the widest path of measured
   edges, the direct path if nothing is measured end to end.
5. Aging as the seed has it (stale weights raised by ``age_percent``, oldest first, ``age_max_per_round`` per
   re-evaluation), but the raise is kept apart from the measured estimate (``EdgeEstimate.boost``) until the
   next measurement, so that a caller can tell a second chance from a measurement (see 8).
   Failures: a failed hop's weight is 0 until aging; aging a failed edge hands back its estimate from before the
   failure, raised by the aging percentage, or makes it unknown again if it had none. A failed depot fails
   every edge through it and yields ``DropDepot``. A failure on the current path is acted on at the next
   ``tick``, not at the next re-evaluation.
6. Wrong memory: a warm start trusts the memory only until this transfer measures a remembered edge off by more
   than ``memory_mismatch``; from then on every remembered estimate this transfer has not itself confirmed
   counts as unknown. So a warm start with wrong memory costs at most one wasted attempt more than a cold start,
   where the seed could need as many attempts as a cold start on top of its mistakes, or age its way out.
7. Shared depots: a measurement is the throughput *this transfer* got on the edge, which is its share when
   other transfers use the same edge. That is what it can expect from the edge while they run, and it makes
   concurrent transfers spread over disjoint chains instead of all piling onto the one with the most raw
   capacity. Depots' ``/v1/status`` links are read the same way: each push's bytes over its seconds, a per-flow
   rate. Aging lets a transfer find the capacity again once others leave.
8. Probes (``probes_per_round``, on by default): the seed explores by moving the whole transfer onto a path with
   unknown edges, so a cold start on V vertices costs at least V attempts at a fraction of the best throughput
   (13 on the seed's 8). lnet keeps the transfer on the best *measured* path and, at each re-evaluation, asks
   the engine to probe a few edges beside it with small copies: the unknown or aged edges on the optimistic
   paths (unknown = infinite, aged = raised) that could beat that path by the hysteresis margin. Probe samples
   in their first ``warmup_s`` are not learnt from, like a path's. In the simulator this reaches 90% of the
   best path in 3 attempts instead of 13 on Abilene, and in 5 (median) on 32 vertices where the seed's way
   never gets there in 600 s (``bench/scheduler.py``). An engine that never answers a probe is noticed after
   ``probe_s`` and the loop falls back to the seed's exploration.
"""

from ._loop import (
    Decision,
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
    SchedulerConfig,
    Switch,
    SwitchReason,
    edges_of,
)
from ._memory import Edge, EdgeEstimate, EdgeMemory
from ._widest import THROUGHPUT, NoPathError, path_throughput, widest_path

__all__ = [
    "THROUGHPUT",
    "Decision",
    "DepotFailure",
    "DropDepot",
    "Edge",
    "EdgeEstimate",
    "EdgeMemory",
    "Event",
    "HopFailure",
    "Keep",
    "Measurement",
    "NoPathError",
    "Path",
    "PathAttempt",
    "PathScheduler",
    "ProbeDone",
    "SchedulerConfig",
    "Switch",
    "SwitchReason",
    "edges_of",
    "path_throughput",
    "widest_path",
]
