"""What ``lnet-send --trace`` shows of the scheduler: each event it was told and each decision that changes
something, as plain data (``Relay`` wraps it in a ``Traced`` event). Pure: the relay passes the times.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection
from typing import Any

from lnet.scheduler import (
    THROUGHPUT,
    Decision,
    DepotFailure,
    DropDepot,
    HopFailure,
    Keep,
    Measurement,
    PathScheduler,
    ProbeDone,
    Switch,
)

__all__ = ["trace_decision", "trace_event"]


def trace_event(
    event: Measurement | HopFailure | DepotFailure | ProbeDone, since_start: float, *,
    probing: Collection[tuple[str, str]],
) -> tuple[str, dict[str, Any]]:
    """An event told to the scheduler, ``since_start`` seconds into the transfer (``probing``: the edges being
    probed): its kind (``measure``, ``failure``, ``probe-done``) and data."""
    t = round(since_start, 3)
    if isinstance(event, Measurement):
        return "measure", {"t": t, "edge": list(event.edge), "bytes": event.bytes,
                           "seconds": round(event.seconds, 4), "streams": event.streams,
                           "probe": event.edge in probing,
                           "mbps_per_stream": round(event.bytes * 8 / event.seconds / 1e6, 3),
                           "began": None if event.began is None else round(t - (event.at - event.began), 3),
                           "starved": event.starved}
    if isinstance(event, DepotFailure):
        return "failure", {"t": t, "depot": event.depot}
    kind = "probe-done" if isinstance(event, ProbeDone) else "failure"
    return kind, {"t": t, "edge": list(event.edge)}


def trace_decision(
    decision: Decision, scheduler: PathScheduler, now: float, since_start: float
) -> dict[str, Any] | None:
    """A tick's decision, when it changes something or asks for probes, and the weights at every re-evaluation
    (what the scheduler compared); None for a tick that did neither."""
    evaluated = scheduler.last_evaluation == now
    if isinstance(decision, Keep) and not decision.probes and not evaluated:
        return None
    data: dict[str, Any] = {
        "t": round(since_start, 3), "decision": type(decision).__name__,
        "paths": [list(p) for p in decision.all_paths],
        "probes": [] if isinstance(decision, DropDepot) else [list(e) for e in decision.probes],
        "deep": [] if isinstance(decision, DropDepot) else [list(e) for e in decision.deep],
    }
    if scheduler.left_bytes is not None:  # what the fill rule weighed (``Progress``), for bench/replay.py
        data["left_bytes"] = scheduler.left_bytes
    if isinstance(decision, Switch):
        predicted = decision.predicted_bps * 8 / 1e6
        data.update(reason=decision.reason,
                    predicted_mbps=round(predicted, 3) if math.isfinite(predicted) else None)
        if decision.reason == "start":  # what orders the first probes (theory of operation, 10)
            data["rtt_ms"] = {v: round(rtt * 1000, 2) for v, rtt in scheduler.rtt_s.items()}
            data["peer_rtt_ms"] = {f"{u}>{v}": round(rtt * 1000, 2) for (u, v), rtt in scheduler.peer_rtt_s.items()}
            # what bench/replay.py needs to run the same scheduler on the same events: its ends, candidates,
            # settings and memory as it began, and its clock then (a memory's records are dated on it)
            data["src"], data["dst"] = scheduler.src, scheduler.dst
            data["vertices"] = list(scheduler.vertices)
            data["config"] = dataclasses.asdict(scheduler.config)
            data["clock_s"] = round(now - since_start, 3)
            data["remembered_edges"] = len(scheduler.memory.snapshot())
            data["memory"] = scheduler.memory.document()
            data["memory_smoothing_s"] = scheduler.memory.smoothing_s
    if evaluated:
        graph = scheduler.graph(with_aging=False)
        data["weights_mbps"] = {f"{u}>{v}": round(a[THROUGHPUT] * 8 / 1e6, 3)
                                for u, v, a in graph.edges(data=True) if THROUGHPUT in a}
        # Floors with a ceiling: what a path tried on ceilings counts them at (theory of operation, 9).
        streams = scheduler.config.streams
        data["ceilings_mbps"] = {
            f"{u}>{v}": round(entry.ceiling_bps * streams * 8 / 1e6, 3)
            for u, v, a in graph.edges(data=True)
            if THROUGHPUT in a
            and (entry := scheduler.memory.entry(u, v)) is not None and entry.ceiling_bps is not None
        }
    return data
