"""Simulated replicas for the chunk planner: deterministic, in fixed time steps, no I/O.

Each replica serves the requests sent on its connection in order at its rate; the first byte of a request sent on
an idle connection arrives one round trip after it was sent (two on a new connection: the handshake), and a
request queued behind another streams the moment that one ends, as HTTP/1.1 pipelining does. A ``Stop`` that is
reached closes the connection, and what was sent after it and is still wanted goes again on a new one. A
replica can die (stop sending, as a stalled server; ``back_at``: until then), fail (an error) at a time, or
change its rate. A planner started without the file's size learns it (``sized``)
when the first byte of any answer arrives, as the I/O shell reads it from the first ``Content-Range``; a request
that then lies past the end is answered with nothing (a 416) and its connection goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lnet.client.engines.chunks import ChunkPlanner, Drop, Fetch, Stop


@dataclass
class SimReplica:
    rate: float  # bytes/s
    rtt: float = 0.05
    dies_at: float | None = None  # from then on it sends nothing (a stall)
    back_at: float | None = None  # ... until then (None: for good)
    fails_at: float | None = None  # at that moment its connection errors, once
    rate_after: tuple[float, float] | None = None  # (time, new rate)
    connected: bool = False
    queue: list[list[float]] = field(default_factory=list)  # [request, ready_at, pos, end]
    failed_once: bool = False

    def silent(self, now: float) -> bool:
        return self.dies_at is not None and now >= self.dies_at and (self.back_at is None or now < self.back_at)


@dataclass
class SimResult:
    seconds: float
    fetches: list[Fetch]
    stops: list[Stop]
    drops: list[Drop]
    pieces: list[tuple[int, int, int]]  # (start, end, replica) of every run of bytes written
    received: dict[int, int]  # bytes received per replica
    fetched_at: list[float] = field(default_factory=list)  # when each of ``fetches`` was decided
    dropped_at: list[float] = field(default_factory=list)  # when each of ``drops`` was decided

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
    planner: ChunkPlanner, replicas: list[SimReplica], *, dt: float = 0.005, limit_s: float = 600.0,
    size: int | None = None,
) -> SimResult:
    """Run ``planner`` against ``replicas`` until the download is done. ``size``: the file's, for a planner
    started without it."""
    file_size = planner.size if planner.size is not None else size
    if file_size is None:
        raise ValueError("a planner started without the file's size needs size=")
    now = 0.0
    result = SimResult(0.0, [], [], [], [], dict.fromkeys(range(len(replicas)), 0))
    pieces, received = result.pieces, result.received

    def close(i: int) -> None:
        replicas[i].queue.clear()
        replicas[i].connected = False

    def reconnect(i: int) -> None:
        """Closed on purpose (a request stopped short): what the planner still wants, sent after the stop, goes
        again on a new connection, as the I/O shell does."""
        rep = replicas[i]
        live = [q for q in rep.queue[1:] if planner.limit(int(q[0])) is not None]
        close(i)
        ready = now + 2 * rep.rtt
        for q in live:
            rep.queue.append([q[0], ready, q[2], q[3]])
        rep.connected = bool(live)

    def apply(decisions: list[Fetch | Stop | Drop]) -> None:
        for d in decisions:
            if isinstance(d, Fetch):
                result.fetches.append(d)
                result.fetched_at.append(now)
                rep = replicas[d.replica]
                latency = rep.rtt if rep.connected else 2 * rep.rtt
                rep.connected = True
                ready = now + latency
                if rep.queue:
                    ready = max(ready, rep.queue[-1][1])
                rep.queue.append([float(d.request), ready, float(d.start), float(d.end)])
            elif isinstance(d, Stop):
                result.stops.append(d)
            else:
                result.drops.append(d)
                result.dropped_at.append(now)
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
            if rep.silent(now):
                continue
            budget = rep.rate * dt
            while budget > 0 and rep.queue:
                head = rep.queue[0]
                request, ready, pos, end = int(head[0]), head[1], int(head[2]), min(int(head[3]), file_size)
                if now < ready:
                    break
                if planner.size is None:
                    planner.sized(file_size)  # the first answer's Content-Range
                limit = planner.limit(request)
                if limit is None and pos >= file_size:  # past the end: a 416, and the next answer follows
                    rep.queue.pop(0)
                    if rep.queue:
                        rep.queue[0][1] = max(rep.queue[0][1], now)
                    continue
                if limit is None or pos >= limit:  # void, or stopped where it is: the connection closes
                    reconnect(i)
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
                    reconnect(i)
                    break
        apply(planner.poll(now))
    result.seconds = now
    return result
