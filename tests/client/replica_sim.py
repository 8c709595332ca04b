"""Simulated replicas for the chunk planner: deterministic, in fixed time steps, no I/O.

Each replica serves the requests sent on its connection in order at its rate; the first byte of a request sent on
an idle connection arrives one round trip after it was sent (two on a new connection: the handshake), and a
request queued behind another streams the moment that one ends, as HTTP/1.1 pipelining does. A ``Stop`` that is
reached closes the connection; a replica can die (stop sending, as a stalled server) or fail (an error) at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lnet.client.engines.chunks import ChunkPlanner, Drop, Fetch, Stop


@dataclass
class SimReplica:
    rate: float  # bytes/s
    rtt: float = 0.05
    dies_at: float | None = None  # from then on it sends nothing (a stall)
    fails_at: float | None = None  # at that moment its connection errors, once
    rate_after: tuple[float, float] | None = None  # (time, new rate)
    connected: bool = False
    queue: list[list[float]] = field(default_factory=list)  # [request, ready_at, pos, end]
    failed_once: bool = False


@dataclass
class SimResult:
    seconds: float
    fetches: list[Fetch]
    stops: list[Stop]
    drops: list[Drop]
    pieces: list[tuple[int, int, int]]  # (start, end, replica) of every run of bytes written
    received: dict[int, int]  # bytes received per replica

    def overlap(self, size: int) -> int:
        """Bytes written more than once; raises if any byte of ``[0, size)`` was never written."""
        covered, extra = 0, 0
        for start, end, _ in sorted(self.pieces):
            if start > covered:
                raise AssertionError(f"bytes [{covered}, {start}) never written")
            extra += max(0, min(end, covered) - start)
            covered = max(covered, end)
        if covered < size:
            raise AssertionError(f"bytes [{covered}, {size}) never written")
        return extra


def simulate(
    planner: ChunkPlanner, replicas: list[SimReplica], *, dt: float = 0.005, limit_s: float = 600.0
) -> SimResult:
    now = 0.0
    fetches: list[Fetch] = []
    stops: list[Stop] = []
    drops: list[Drop] = []
    pieces: list[tuple[int, int, int]] = []
    received = dict.fromkeys(range(len(replicas)), 0)

    def close(i: int) -> None:
        replicas[i].queue.clear()
        replicas[i].connected = False

    def apply(decisions: list[Fetch | Stop | Drop]) -> None:
        for d in decisions:
            if isinstance(d, Fetch):
                fetches.append(d)
                rep = replicas[d.replica]
                latency = rep.rtt if rep.connected else 2 * rep.rtt
                rep.connected = True
                ready = now + latency
                if rep.queue:
                    ready = max(ready, rep.queue[-1][1])
                rep.queue.append([float(d.request), ready, float(d.start), float(d.end)])
            elif isinstance(d, Stop):
                stops.append(d)
            else:
                drops.append(d)
                close(d.replica)

    apply(planner.poll(now))
    while not planner.done:
        if now > limit_s:
            raise AssertionError(f"not done after {limit_s} s: {planner.free_bytes} free")
        if planner.stuck:
            raise AssertionError("stuck: no usable replica")
        now = round(now + dt, 9)
        for i, rep in enumerate(replicas):
            if rep.rate_after and now >= rep.rate_after[0]:
                rep.rate = rep.rate_after[1]
            if rep.fails_at is not None and now >= rep.fails_at and not rep.failed_once:
                rep.failed_once = True
                close(i)
                planner.failed(i, now, "connection reset")
                continue
            if rep.dies_at is not None and now >= rep.dies_at:
                continue
            budget = rep.rate * dt
            while budget > 0 and rep.queue:
                head = rep.queue[0]
                request, ready, pos, end = int(head[0]), head[1], int(head[2]), int(head[3])
                if now < ready:
                    break
                limit = planner.limit(request)
                if limit is None or pos >= limit:  # void, or stopped where it is: the connection closes
                    close(i)
                    break
                n = int(min(budget, limit - pos))
                if n <= 0:
                    break
                if pieces and pieces[-1][2] == i and pieces[-1][1] == pos:
                    pieces[-1] = (pieces[-1][0], pos + n, i)
                else:
                    pieces.append((pos, pos + n, i))
                received[i] += n
                head[2] = pos + n
                budget -= n
                planner.received(request, n, now)
                if pos + n >= end:
                    rep.queue.pop(0)
                    if rep.queue:
                        rep.queue[0][1] = max(rep.queue[0][1], now)
                elif planner.limit(request) is None:  # stopped short of its end: the rest is never read
                    close(i)
                    break
        apply(planner.poll(now))
    return SimResult(now, fetches, stops, drops, pieces, received)
