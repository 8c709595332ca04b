"""The chunk planner: which byte range each replica fetches next (seeds 000 MDTP, 001 TCP-PARIS, 004 co-allocation).

Theory of operation
-------------------
A file of ``size`` bytes sits on several replicas. The planner is a pure engine in the manner of h11: the I/O
shell tells it what happened (``received``, ``failed``, ``refuse``) with the time ``now``, and asks it what to do
(``poll(now)``), which returns decisions: ``Fetch`` (send this range request to this replica), ``Stop`` (this
request now ends at ``at``; once there, close the replica's connection, for everything queued behind it on that
connection has been taken back) and ``Drop`` (close the replica's connection now). It never sleeps, reads a clock
or touches the network.

Bytes not yet given to any request live in ``free``, a sorted list of intervals. Every byte is in exactly one
place: ``free``, or the unreceived part of exactly one request (a hedge, below, is the one deliberate overlap).
A request's received bytes are a prefix ``[start, pos)``, since an HTTP range arrives in order.

**Starting before the length is known.** A planner may be started without the file's size (``size=None``), so
that no replica waits for a probe: the first request to each replica is already a data range. Until the size is
known each usable replica gets one request, a *first range* of ``initial_chunk`` bytes (rounded up to ``align``)
at an offset no other request has: replica after replica, ``[0, P)``, ``[P, 2P)``, ... (a range given back by a
failure is handed out again first). The I/O shell reads the length from the first answer's ``Content-Range`` and
calls ``sized(size)``: first ranges past the end become void (their answer, a 416, has nothing to write), one
across it is cut to it, everything else of ``[0, size)`` is free, and planning goes on as with a known size
(mdtp's uniform first round is then the first ranges themselves). ``brute`` and ``history`` give their one range
each out of what the first ranges left. A resumed download knows its size from its state file and starts with
it.

**Keeping every pipe full.** Each usable replica has up to ``depth`` (2) requests outstanding on its one
persistent connection: the one streaming and the next, already sent, so the server starts the next response the
moment the last ends and no round trip sits idle between rounds (TCP-PARIS keeps each source's assigned volume at
least at its bandwidth-delay product; every chunk here is at least ``rate x rtt`` too).

**Strategies** decide the size of a replica's next chunk:

- ``mdtp`` (the default, the MDTP paper): first a uniform ``initial_chunk`` to every replica; then, each time a chunk is
  sized, the replicas' latest throughputs, their geometric mean to find the fast set, the fastest's download time
  ``T = L / rate_fastest`` for the large chunk ``L``, and ``chunk_i = T x rate_i``: every replica's chunk takes
  about ``T``, so rounds end together. The seed picks ``L`` by hand per file size; here ``L`` defaults to
  ``rate_fastest x round_s``, with the round ``round_s`` a sixteenth of the expected download time, within 1-8 s.
  **The last round**: once a replica's next chunk would be more than its share of what is left, the free bytes
  are shared by water-filling. Replica ``i`` could start streaming new bytes in ``start_i`` seconds (a round
  trip, or what it still has queued if that is longer); it gets ``rate_i x (T - start_i)``, nothing if
  ``start_i >= T``, with ``T`` chosen so that the shares add up to the free bytes. So every replica finishes at
  ``T``, whatever it had queued, and no tail split is needed: on a real network a split costs the owner's
  connection (an HTTP response cannot be cut short otherwise) and a new connection's handshake and slow start.
- ``static`` (Vazhkudai's conservative load balancing, MDTP's static chunking): equal chunks, the next to whoever
  has room.
- ``brute`` (Vazhkudai): ``size / n`` to each replica, once.
- ``history`` (Vazhkudai): one range per replica, sized in proportion to remembered throughputs.
- ``aggressive`` (Vazhkudai): equal chunks to start; a replica whose chunk beat the running maximum rate gets its
  chunk doubled (and the maximum reset), one far below it (under ``drop_ratio``) is no longer used.

**The tail** (``tail``): when a replica has room in its pipe (fewer than ``depth`` requests) and nothing is
free, ``split`` cuts the remainder of the replica with the most work left so both finish at the same moment (the
owner stops at the cut, the other replica takes the rest after what it still has queued: its pipe never runs
dry); ``hedge`` asks it for the same remainder and stops whichever is still going when the other finishes;
``none`` waits (the seed-004 baselines as published). Both act only if the replica with room would finish the
remainder sooner than its owner. A replica whose request has had no byte for ``LIVE_RATE_AFTER_S`` (a far
one that has not answered yet, or one gone silent) counts as rate 0 there: the other takes all of it, however
little. A replica takes a tail only once it has delivered a byte (since its latest failure, if any).

**Failures.** A replica that errors, or stalls (no byte for ``stall_s`` while it has a request; a request
pipelined behind another waits from the moment that one ended), gives its unreceived bytes back to ``free`` and
is retried after a back-off that doubles up to ``backoff_max_s``; after ``max_failures`` failures in a row it is
dead. A refused replica (its file differs) is never used again. The
download fails only when every replica is dead or refused.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "STRATEGIES",
    "TAILS",
    "ChunkPlanner",
    "Decision",
    "Drop",
    "Fetch",
    "PlanConfig",
    "PlanError",
    "ReplicaStats",
    "RequestRecord",
    "Stop",
    "first_ranges",
]

Strategy = Literal["mdtp", "static", "brute", "history", "aggressive"]
Tail = Literal["split", "hedge", "none"]
STRATEGIES: tuple[Strategy, ...] = ("mdtp", "static", "brute", "history", "aggressive")
TAILS: tuple[Tail, ...] = ("split", "hedge", "none")

KiB = 1024
MiB = 1024 * KiB
LIVE_RATE_AFTER_S = 1.0  # a streaming chunk's rate counts once it has run this long (a window, once a chunk is done)
LIVE_WINDOW_S = 0.5  # ... over its latest this many seconds, or 4 round trips if longer
SLOWDOWN = 0.7  # ... and is below this share of the latest chunk's
RECONNECT_S = 1.0  # what a new connection may cost beyond its round trips (a lost handshake: the kernel's retry)


class PlanError(ValueError):
    """A planner was asked for something impossible (a bad configuration, an unknown request)."""


@dataclass(frozen=True)
class PlanConfig:
    strategy: Strategy = "mdtp"
    tail: Tail = "split"
    initial_chunk: int = 1 * MiB  # MDTP's uniform first request (its C)
    large_chunk: int | None = None  # MDTP's L, the fastest replica's chunk; None: rate_fastest x round_s
    round_min_s: float = 1.0
    round_max_s: float = 8.0
    static_chunk: int = 4 * MiB  # static and aggressive: the equal chunk
    min_chunk: int = 256 * KiB
    max_chunk: int = 512 * MiB
    align: int = 1  # chunk boundaries fall on multiples of this (a manifest's block size), or the file's end
    depth: int = 2  # requests outstanding per replica: the one streaming and the next
    stall_s: float = 20.0
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    max_failures: int = 5
    drop_ratio: float = 0.25  # aggressive: a replica below this share of the running maximum is dropped

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise PlanError(f"unknown strategy {self.strategy!r} (one of {', '.join(STRATEGIES)})")
        if self.tail not in TAILS:
            raise PlanError(f"unknown tail rule {self.tail!r} (one of {', '.join(TAILS)})")
        for name in ("initial_chunk", "static_chunk", "min_chunk", "max_chunk", "align", "depth", "max_failures"):
            if getattr(self, name) < 1:
                raise PlanError(f"{name} must be at least 1")
        if self.large_chunk is not None and self.large_chunk < 1:
            raise PlanError("large_chunk must be at least 1")
        if not 0 < self.round_min_s <= self.round_max_s:
            raise PlanError("need 0 < round_min_s <= round_max_s")
        if self.stall_s <= 0 or self.backoff_s <= 0 or self.backoff_max_s < self.backoff_s:
            raise PlanError("stall_s and backoff_s must be positive, backoff_max_s at least backoff_s")
        if not 0 < self.drop_ratio < 1:
            raise PlanError("drop_ratio must be between 0 and 1")


@dataclass(frozen=True)
class Fetch:
    """Send ``GET`` of bytes ``[start, end)`` to ``replica`` on its connection (after the ones already sent)."""

    request: int
    replica: int
    start: int
    end: int
    hedge: bool = False


@dataclass(frozen=True)
class Stop:
    """Request ``request`` of ``replica`` now ends at ``at``: write nothing past it, and close the connection once
    there (at once if it is there already). The requests sent after it on that connection are void."""

    request: int
    replica: int
    at: int


@dataclass(frozen=True)
class Drop:
    """Close ``replica``'s connection now: the planner took its requests back (it stalled, or was dropped)."""

    replica: int
    reason: str


Decision = Fetch | Stop | Drop


@dataclass(frozen=True)
class RequestRecord:
    """One request, once it is over (``ChunkPlanner(record=True)``, ``take_records``): what it asked for, what
    came, when, and how it ended: ``done``, ``stopped`` (cut short: a split gave its rest to another replica, or
    its hedge twin won), ``taken back`` (its replica failed, stalled or was dropped, or a request before it on the
    connection was stopped) or ``void`` (past the file's end). Times are the planner's ``now``."""

    request: int
    replica: int
    start: int
    end: int  # where it ended up ending (a stop moves it)
    received: int
    issued: float
    first_byte: float | None
    last_byte: float | None
    hedge: bool
    outcome: str


@dataclass
class _Request:
    id: int
    replica: int
    start: int
    end: int
    pos: int
    issued: float
    idle_line: bool  # sent on an idle connection, so its first byte measures a round trip
    first_byte: float | None = None
    last_byte: float | None = None
    flow_from: float | None = None  # sent early: when its bytes began to arrive, long before the loop read them
    marks: deque[tuple[float, int]] = field(default_factory=deque)  # (when, pos): the latest live window's
    hedge_of: int | None = None  # this request duplicates the remainder of that one
    hedged_by: int | None = None
    hedge: bool = False
    stopped: bool = False

    @property
    def partner(self) -> int | None:
        return self.hedge_of if self.hedge_of is not None else self.hedged_by


@dataclass
class ReplicaStats:
    """What one replica did, for the per-replica table (the MDTP paper's Figure 5)."""

    bytes: int = 0  # bytes received into the file
    requests: int = 0
    chunks: list[int] = field(default_factory=list)  # sizes requested, in order
    busy_s: float = 0.0  # time with bytes flowing
    failures: int = 0
    state: str = "ok"  # ok, backoff, dead, refused, dropped
    reason: str = ""
    first_byte: float | None = None  # when its first byte arrived (the planner's now)
    last_byte: float | None = None  # ... and its last

    @property
    def rate(self) -> float:
        return self.bytes / self.busy_s if self.busy_s > 0 else 0.0


@dataclass
class _ReplicaPlan:
    """What the planner knows and has asked of one replica (the I/O side is ``fetching.mirrors``'s worker)."""

    index: int
    rate: float | None = None  # bytes/s over its latest completed chunk
    rtt: float | None = None  # request sent on an idle connection to its first byte, the least seen
    last_byte: float | None = None  # when its latest byte arrived
    failed_at: float | None = None  # when it last failed
    queue: list[int] = field(default_factory=list)  # its outstanding request ids, in the order sent
    chunk: int = 0  # aggressive: its current chunk
    failures_in_row: int = 0
    retry_at: float = 0.0
    new_line_after: int | None = None  # requests after this one go on a new connection (a stop closes it, or a failure)
    state: str = "ok"
    stats: ReplicaStats = field(default_factory=ReplicaStats)

    @property
    def usable(self) -> bool:
        return self.state in ("ok", "backoff")

    def set_state(self, state: str, reason: str = "") -> None:
        self.state = self.stats.state = state
        if reason:
            self.stats.reason = reason


def first_ranges(config: PlanConfig, replicas: int) -> list[tuple[int, int]]:
    """The range each replica is asked for first in a download whose size is unknown (not a resumed one), in the
    order of the replicas: what ``ChunkPlanner.poll`` issues first, so that ``wire.predial`` can request them
    before the planner exists."""
    length = _first_length(config)
    return [(i * length, (i + 1) * length) for i in range(replicas)]


def _first_length(config: PlanConfig) -> int:
    return -(-config.initial_chunk // config.align) * config.align


class ChunkPlanner:
    """Decide, as bytes arrive, the next byte range for each replica; see the module's theory of operation."""

    def __init__(
        self,
        size: int | None,
        replicas: int,
        config: PlanConfig | None = None,
        *,
        history: Sequence[float | None] | None = None,
        have: Sequence[tuple[int, int]] = (),
        record: bool = False,
    ) -> None:
        """``size``: the file's length, or None until the first answer gives it (``sized``); ``history``:
        remembered rates (bytes/s) per replica, for ``history``; ``have``: byte ranges already in place (a resumed
        download, whose size is known), which are never asked for; ``record``: keep a ``RequestRecord`` of every
        request that ends, for ``take_records``."""
        if size is not None and size < 0:
            raise PlanError("size must not be negative")
        if size is None and have:
            raise PlanError("bytes in place need the file's size")
        if replicas < 1:
            raise PlanError("need at least one replica")
        self.config = config or PlanConfig()
        self.size = size
        self._free: list[tuple[int, int]] = [(0, size)] if size else []
        self._first_end = 0  # size unknown: where the next first range starts (every byte before it is handed out)
        self._requests: dict[int, _Request] = {}
        self._next_id = 0
        self._replicas = [_ReplicaPlan(i, chunk=self.config.static_chunk) for i in range(replicas)]
        self._history = list(history) if history is not None else [None] * replicas
        if len(self._history) != replicas:
            raise PlanError("history needs one entry per replica")
        self._running_max = 0.0  # aggressive
        self._ranges_given = False  # brute and history give their one range each once
        self._outbox: list[Decision] = []
        self._records: list[RequestRecord] | None = [] if record else None
        self._now = 0.0
        for start, end in have:  # (have needs a size: checked above)
            self._remove(max(0, start), min(size or 0, end))

    # -- what the I/O shell tells the planner ------------------------------------------------------------------

    def received(self, request: int, nbytes: int, now: float) -> None:
        """``nbytes`` more bytes of ``request``, in order, are in their place in the file."""
        req = self._requests.get(request)
        if req is None:
            raise PlanError(f"unknown request {request}")
        if self.size is None:
            raise PlanError("bytes received before the file's size is known (call sized first)")
        if nbytes < 0 or req.pos + nbytes > req.end:
            raise PlanError(f"request {request} got {nbytes} bytes at {req.pos}, past its end {req.end}")
        if nbytes == 0:
            return
        rep = self._replicas[req.replica]
        if req.first_byte is None:
            req.first_byte = now
            if req.idle_line and (rep.rtt is None or now - req.issued < rep.rtt):
                rep.rtt = now - req.issued
            if rep.new_line_after is not None and req.id > rep.new_line_after:
                rep.new_line_after = None  # the new connection is up
        req.pos += nbytes
        req.last_byte = rep.last_byte = rep.stats.last_byte = now
        req.marks.append((now, req.pos))
        while len(req.marks) > 2 and req.marks[1][0] <= now - self._window(rep):
            req.marks.popleft()  # the oldest kept is the latest at least a window old
        if rep.stats.first_byte is None:
            rep.stats.first_byte = now
        rep.stats.bytes += nbytes
        rep.stats.state = rep.state
        rep.failures_in_row = 0
        if req.pos >= req.end:
            self._complete(req)

    def sent_early(self, request: int, rtt: float | None = None, sent_at: float | None = None) -> None:
        """``request`` went out before it was issued here (``wire.predial`` writes the first ranges on connections
        dialled before the event loop runs): its first byte measures no round trip. ``rtt``: one measured on its
        connection instead (its TCP handshake). ``sent_at``: when it was written (the planner's clock, before the
        loop began): its bytes began to arrive a round trip later, and its rate counts from then, not from the
        loop's first read, which found a socket buffer's worth waiting and once measured 83 Mbit/s on a 40 Mbit/s
        link (a first chunk twice too large followed)."""
        req = self._requests.get(request)
        if req is None:
            raise PlanError(f"unknown request {request}")
        req.idle_line = False
        if rtt is not None:
            self.round_trip(req.replica, rtt)
        if sent_at is not None:
            req.issued = min(req.issued, sent_at)
            req.flow_from = sent_at + (rtt or 0.0)

    def round_trip(self, replica: int, rtt: float) -> None:
        """A round trip to ``replica`` measured outside any request (a TCP handshake): its ``rtt`` is the least
        seen. A first request's own first byte measures more than one round trip when it waited for the
        connection's handshakes (TCP, and TLS for HTTPS)."""
        rep = self._replicas[replica]
        if rtt > 0 and (rep.rtt is None or rtt < rep.rtt):
            rep.rtt = rtt

    def failed(self, replica: int, now: float, reason: str) -> None:
        """The replica's connection failed (error, timeout, closed): its unreceived bytes go back to ``free``."""
        rep = self._replicas[replica]
        if not rep.usable:
            return
        self._release_all(rep)
        rep.failed_at = now
        rep.new_line_after = self._next_id - 1
        rep.failures_in_row += 1
        rep.stats.failures += 1
        if rep.failures_in_row >= self.config.max_failures:
            rep.set_state("dead", f"{reason} ({rep.failures_in_row} failures in a row)")
        else:
            backoff = self.config.backoff_s * 2 ** (rep.failures_in_row - 1)
            rep.retry_at = now + min(self.config.backoff_max_s, backoff)
            rep.set_state("backoff", reason)

    def refuse(self, replica: int, reason: str) -> None:
        """The replica serves another file (its length or a validator differs): never use it again."""
        rep = self._replicas[replica]
        self._release_all(rep)
        rep.set_state("refused", reason)

    def sized(self, size: int) -> None:
        """The file has ``size`` bytes (the first answer's ``Content-Range``): first ranges past the end are void,
        one across it ends there, and the rest of the file is free. Once known, the size cannot change."""
        if self.size is not None:
            if size != self.size:
                raise PlanError(f"the file has {self.size} bytes, not {size}")
            return
        if size < 0:
            raise PlanError("size must not be negative")
        self.size = size
        given_back, self._free = self._free, []
        for start, end in given_back:
            self._give_back(start, min(end, size))
        self._give_back(min(self._first_end, size), size)
        for req in list(self._requests.values()):
            if req.start >= size:
                self._forget(req, "void")  # past the end: its answer (416) has nothing to write
            elif req.end > size:
                req.end = size  # its answer ends at the file's end

    # -- what the I/O shell asks ------------------------------------------------------------------------------

    def limit(self, request: int) -> int | None:
        """Where ``request`` ends now, or None once it is finished or void."""
        req = self._requests.get(request)
        return None if req is None else req.end

    @property
    def done(self) -> bool:
        return self.size is not None and not self._free and not self._requests

    @property
    def stuck(self) -> bool:
        """Nothing can finish the download: every replica is dead or refused (a dropped one comes back when no
        other is left: ``poll``)."""
        return not self.done and not any(rep.usable or rep.state == "dropped" for rep in self._replicas)

    @property
    def free_bytes(self) -> int:
        return sum(end - start for start, end in self._free)

    def next_wakeup(self) -> float | None:
        """The next moment ``poll`` has something to do without a new event: a retry, a stall deadline, or (in
        the tail) the moment a replica whose request has had no byte yet counts as silent."""
        times: list[float] = []
        for rep in self._replicas:
            if rep.state == "backoff":
                times.append(rep.retry_at)
            if rep.state == "ok" and rep.queue:
                times.append(self._last_activity(rep) + self.config.stall_s)
                silent_at = self._last_activity(rep) + LIVE_RATE_AFTER_S
                if not self._free and self._requests[rep.queue[0]].first_byte is None and silent_at > self._now:
                    times.append(silent_at)
        return min(times) if times else None

    def stats(self) -> list[ReplicaStats]:
        return [rep.stats for rep in self._replicas]

    def take_records(self) -> list[RequestRecord]:
        """The records of the requests that ended since the last call (none unless made with ``record=True``)."""
        if not self._records:
            return []
        records, self._records = self._records, []
        return records

    def outstanding(self, replica: int) -> list[tuple[int, int, int]]:
        """The replica's requests as ``(id, pos, end)``, in the order sent."""
        return [(r, self._requests[r].pos, self._requests[r].end) for r in self._replicas[replica].queue]

    def poll(self, now: float) -> list[Decision]:
        """Decisions for now: stalls become failures, retries come due, every usable replica's pipe is filled."""
        self._now = now
        for rep in self._replicas:
            if rep.state == "ok" and rep.queue and now - self._last_activity(rep) >= self.config.stall_s:
                self.failed(rep.index, now, f"stalled: no byte for {self.config.stall_s:g} s")
                self._outbox.append(Drop(rep.index, rep.stats.reason))
            if rep.state == "backoff" and now >= rep.retry_at:
                rep.state = "ok"  # usable again; its report says backoff until a byte comes
        if not any(rep.usable for rep in self._replicas):
            # Replicas dropped for being slow beside a faster one that has since failed: slow beats nothing.
            for rep in self._replicas:
                if rep.state == "dropped":
                    rep.set_state("ok", "taken back: every faster replica failed")
            self._running_max = 0.0
        ready = [rep for rep in self._replicas if rep.state == "ok"]
        if self.size is None:  # a first range each, at offsets of their own, until the first answer sizes the file
            for rep in ready:
                if not rep.queue:
                    self._issue(rep, self._first_range(), now)
            decisions, self._outbox = self._outbox, []
            return decisions
        if self.config.strategy in ("brute", "history") and not self._ranges_given:
            self._one_range_each(now)
        round_s = self._round_s()  # from the rates alone, which issuing requests does not change
        depth = {rep.index: self._depth_of(rep, round_s) for rep in ready}
        progress = True
        while progress and self._free:
            progress = False
            for rep in ready:
                if len(rep.queue) < depth[rep.index] and self._free and (chunk := self._chunk_for(rep)) > 0:
                    self._issue(rep, self._take(chunk), now)
                    progress = True
        if not self._free and self.config.tail != "none":
            for rep in ready:
                # a cut may end a request and give its replica a new rate: the round is taken again each time
                if len(rep.queue) < self._depth_of(rep, self._round_s()) and rep.state == "ok":
                    self._tail(rep, now)
        decisions, self._outbox = self._outbox, []
        return decisions

    # -- sizing ---------------------------------------------------------------------------------------------

    def _chunk_for(self, rep: _ReplicaPlan) -> int:
        """The size of ``rep``'s next request; 0: none now (mdtp's last round leaves the rest to the others)."""
        cfg = self.config
        if cfg.strategy == "mdtp":
            chunk = self._mdtp_chunk(rep)
        elif cfg.strategy == "aggressive":
            chunk = rep.chunk
        else:  # static; brute and history once their first ranges are out (only failures put bytes back)
            chunk = cfg.static_chunk
        rate = self._current_rate(rep)
        if rate is not None and rep.rtt is not None:
            chunk = max(chunk, int(rate * rep.rtt))  # never less than the pipe holds (TCP-PARIS)
        chunk = max(cfg.min_chunk, min(cfg.max_chunk, chunk))
        if cfg.strategy == "mdtp" and rate:
            share = self._last_round_share(rep, rate)
            if share < chunk:
                return max(share, cfg.min_chunk // 4) if share > 0 else 0
        return chunk

    def _start_s(self, rep: _ReplicaPlan) -> float:
        """Seconds from now until a request sent to ``rep`` now could start streaming: its first byte takes a
        round trip, and a pipelined request waits for everything queued before it; after a stop (or a failure)
        its connection closes, and a new one costs a handshake first, and may cost ``RECONNECT_S`` more: on the
        replicas testbed a connection opened while the old one's answer still filled the bottleneck queue lost its
        handshake there, and the kernel retries after 1 s (a replica given the tail on a new connection then held
        the last range a second)."""
        work = self._work_s(rep) if rep.queue else 0.0
        rtt = rep.rtt or 0.0
        if rep.new_line_after is not None:
            return work + 2 * rtt + RECONNECT_S
        return max(rtt, work)

    def _last_round_share(self, rep: _ReplicaPlan, rate: float) -> int:
        """mdtp's last round: the free bytes shared by water-filling, each usable replica ``i`` taking
        ``rate_i x (T - start_i)`` (none if it starts after ``T``), with ``T`` the moment at which they are all
        done; so every replica, whatever it already has queued, finishes at ``T``. ``rep``'s share, at ``rate``
        (its current rate)."""
        lanes = sorted(
            (self._start_s(r), r_rate) for r in self._replicas
            if r.state == "ok" and (r_rate := self._rate_of(r)) > 0
        )
        left, rates, starts = float(self.free_bytes), 0.0, 0.0
        finish = math.inf
        for i, (start, r_rate) in enumerate(lanes):
            rates += r_rate
            starts += r_rate * start  # with lanes[:i+1] taking part: T = (left + sum(rate x start)) / sum(rate)
            finish = (left + starts) / rates
            if i + 1 == len(lanes) or finish <= lanes[i + 1][0]:
                break
        return max(0, int(rate * (finish - self._start_s(rep))))

    def _current_rate(self, rep: _ReplicaPlan) -> float | None:
        """Its latest chunk's rate, or the streaming chunk's once that is clearly lower (or nothing else is known
        yet): a replica that slows down is seen before its chunk ends. The streaming chunk's rate counts once it
        has streamed ``LIVE_RATE_AFTER_S`` (a new connection's slow start is no slowdown), or a window
        (``_window``) if the replica has finished a chunk; it is taken over the latest window once the chunk has
        streamed that long, else since its first byte. (Since its first byte alone, it still read 25 Mbit/s half a
        second after a 40 Mbit/s replica fell to 10.) One whose request has had no byte for ``LIVE_RATE_AFTER_S``
        (a far or silent replica) counts as 0 until it answers."""
        live = None
        if rep.queue:
            head = self._requests[rep.queue[0]]
            streamed = self._now - head.first_byte if head.first_byte is not None else 0.0
            window = self._window(rep)
            if head.first_byte is not None and (
                    streamed >= LIVE_RATE_AFTER_S or (rep.rate is not None and streamed >= window)):
                since, pos = head.marks[0]  # every byte received leaves a mark
                if self._now - since < window:  # the chunk's first bytes: from its start
                    since, pos = head.first_byte, head.start
                live = (head.pos - pos) / max(self._now - since, 1e-6)
            elif head.first_byte is None and self._now - self._last_activity(rep) >= LIVE_RATE_AFTER_S:
                live = 0.0
        if rep.rate is None or (live is not None and live < SLOWDOWN * rep.rate):
            return live
        return rep.rate

    def _window(self, rep: _ReplicaPlan) -> float:
        """How far back a streaming chunk's live rate looks: ``LIVE_WINDOW_S``, or four round trips if longer (a far
        replica's bytes come in bursts a round trip apart)."""
        return max(LIVE_WINDOW_S, 4 * rep.rtt) if rep.rtt is not None else LIVE_WINDOW_S

    def _mdtp_chunk(self, rep: _ReplicaPlan) -> int:
        rate = self._current_rate(rep)
        round_s = self._round_s()
        if rate is None or rate <= 0 or round_s is None:
            return self.config.initial_chunk
        return int(round_s * rate)

    def _round_s(self) -> float | None:
        """mdtp's round ``T``: the fastest replica's time for the large chunk ``L`` (the fastest of the fast set
        the geometric mean picks is the fastest of all); None before any rate is known."""
        known = [r for r in (self._current_rate(r) for r in self._replicas if r.usable) if r is not None and r > 0]
        if not known:
            return None
        if self.config.large_chunk is not None:
            return self.config.large_chunk / max(known)
        # the seed picks L by hand per file size; here the round is a sixteenth of the expected time
        expected = (self.size or 0) / sum(known)
        return min(self.config.round_max_s, max(self.config.round_min_s, expected / 16))

    def _depth_of(self, rep: _ReplicaPlan, round_s: float | None) -> int:
        """Requests ``rep`` may have outstanding: ``depth``, and with mdtp one more where the round trip is over
        a third of a round. The request sent when one ends reaches the server a round trip after the server
        began the one queued behind it, so with ``depth`` 2 a far replica's server has only ``T - rtt`` of work
        in hand when the next request arrives; at +500 ms to the fastest replica on the replicas testbed (rounds
        of 1 s) its link then ran at 18-46 Mbit/s by turns instead of its 40 (docs/client.md, "Measured")."""
        depth = self.config.depth
        if self.config.strategy == "mdtp" and rep.rtt is not None and round_s is not None and 3 * rep.rtt > round_s:
            return depth + 1
        return depth

    def _one_range_each(self, now: float) -> None:
        """brute (size / n) and history (shares by remembered rate): the whole file at once, a range each."""
        self._ranges_given = True
        ready = [rep for rep in self._replicas if rep.state == "ok"]
        if not ready or not self._free:
            return
        weights = [1.0] * len(ready)
        if self.config.strategy == "history":
            known = [self._history[rep.index] for rep in ready]
            rates = [h for h in known if h is not None and h > 0]
            fallback = sum(rates) / len(rates) if rates else 1.0  # a replica never seen counts as an average one
            weights = [h if h is not None and h > 0 else fallback for h in known]
        total_bytes, total_weight = self.free_bytes, sum(weights)
        # Each share ends at the boundary nearest its cumulative ideal end, so that rounding errors do not add
        # up (rounded share by share, three 3 MiB-rounded shares took the whole file from a fourth replica).
        share_end = 0.0
        for i, rep in enumerate(ready):
            if not self._free:
                break
            share_end += total_bytes * weights[i] / total_weight
            handed = total_bytes - self.free_bytes
            want = self.free_bytes if i == len(ready) - 1 else int(share_end) - handed
            if want > 0:
                self._issue(rep, self._take(want), now)

    # -- issuing and completing --------------------------------------------------------------------------------

    def _first_range(self) -> tuple[int, int]:
        """Size unknown: ``initial_chunk`` bytes (rounded up to ``align``) at an offset of its own; a range given
        back by a failure goes out again first, else the next one after every range handed out so far."""
        length = _first_length(self.config)
        if self._free:
            start, end = self._free[0]
            stop = min(end, start + length)
            if stop >= end:
                self._free.pop(0)
            else:
                self._free[0] = (stop, end)
            return start, stop
        start, self._first_end = self._first_end, self._first_end + length
        return start, self._first_end

    def _take(self, want: int) -> tuple[int, int]:
        """The next ``want`` bytes of the lowest free interval (all of it if little would be left); ends aligned,
        to the nearest boundary past ``start``: rounding every share up gave a few replicas the whole file in
        large blocks and left the last with nothing."""
        start, end = self._free[0]
        a = self.config.align
        stop = self._align_up(max(start + 1, start + max(1, want) - a // 2))
        if stop >= end or end - stop < self.config.min_chunk // 4:
            stop = end
        if stop >= end:
            self._free.pop(0)
        else:
            self._free[0] = (stop, end)
        return start, stop

    def _issue(self, rep: _ReplicaPlan, span: tuple[int, int], now: float, *, hedge_of: int | None = None) -> None:
        start, end = span
        req = _Request(self._next_id, rep.index, start, end, start, now, idle_line=not rep.queue, hedge_of=hedge_of,
                       hedge=hedge_of is not None)
        self._next_id += 1
        self._requests[req.id] = req
        rep.queue.append(req.id)
        rep.stats.requests += 1
        rep.stats.chunks.append(end - start)
        self._outbox.append(Fetch(req.id, rep.index, start, end, hedge=hedge_of is not None))

    def _complete(self, req: _Request) -> None:
        rep = self._replicas[req.replica]
        self._forget(req, "stopped" if req.stopped else "done")
        if req.first_byte is not None and req.last_byte is not None:
            began = req.first_byte if req.flow_from is None else min(req.first_byte, req.flow_from)
            busy = max(req.last_byte - began, 1e-6)
            rep.stats.busy_s += busy
            length = req.pos - req.start
            if length >= self.config.min_chunk // 2:  # a small remainder says little about the rate
                rep.rate = length / busy
                self._aggressive(rep, rep.rate)
        partner = self._requests.get(req.partner) if req.partner is not None else None
        if partner is not None:  # a hedged pair: the other one loses and stops where it is
            partner.hedge_of = partner.hedged_by = None
            self._stop(partner, partner.pos, give_back=False)

    def _aggressive(self, rep: _ReplicaPlan, rate: float) -> None:
        if self.config.strategy != "aggressive":
            return
        if rate > self._running_max:
            if self._running_max > 0:
                rep.chunk = min(self.config.max_chunk, rep.chunk * 2)
            self._running_max = rate
        elif rate < self.config.drop_ratio * self._running_max:
            if any(r is not rep and r.state == "ok" for r in self._replicas):  # never drop the last one
                self._release_all(rep)
                rep.set_state("dropped", f"{rate / self._running_max:.0%} of the fastest rate")
                self._outbox.append(Drop(rep.index, rep.stats.reason))

    def _stop(self, req: _Request, at: int, *, give_back: bool = True) -> None:
        """End ``req`` at ``at``; the requests sent after it on the same connection go back to ``free``."""
        rep = self._replicas[req.replica]
        for rid in rep.queue[rep.queue.index(req.id) + 1:]:
            self._release(self._requests[rid])
        if give_back:
            self._give_back(at, req.end)
        req.end, req.stopped = at, True
        rep.new_line_after = max(req.id, rep.new_line_after or -1)
        self._outbox.append(Stop(req.id, rep.index, at))
        if req.pos >= req.end:
            self._complete(req)

    def _forget(self, req: _Request, outcome: str) -> None:
        del self._requests[req.id]
        self._replicas[req.replica].queue.remove(req.id)
        if self._records is not None:
            self._records.append(RequestRecord(req.id, req.replica, req.start, req.end, req.pos - req.start,
                                               req.issued, req.first_byte, req.last_byte, req.hedge, outcome))

    def _release(self, req: _Request) -> None:
        """Take ``req`` back: its unreceived bytes return to ``free``, unless its hedge twin still covers them."""
        self._forget(req, "taken back")
        partner = self._requests.get(req.partner) if req.partner is not None else None
        if partner is None:
            self._give_back(req.pos, req.end)
            return
        partner.hedge_of = partner.hedged_by = None
        if req.hedged_by is not None:  # the original goes: the hedge covers [its start, end)
            self._give_back(req.pos, partner.start)

    def _release_all(self, rep: _ReplicaPlan) -> None:
        for rid in list(rep.queue):
            if rid in self._requests:
                self._release(self._requests[rid])

    def _give_back(self, start: int, end: int) -> None:
        if start >= end:
            return
        merged: list[tuple[int, int]] = []
        for a, b in sorted([*self._free, (start, end)]):
            if merged and a < merged[-1][1]:
                raise PlanError(f"bytes [{a}, {min(b, merged[-1][1])}) would be free twice")
            if merged and a == merged[-1][1]:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        self._free = merged

    def _remove(self, start: int, end: int) -> None:
        kept: list[tuple[int, int]] = []
        for a, b in self._free:
            if a < start:
                kept.append((a, min(b, start)))
            if b > end:
                kept.append((max(a, end), b))
        self._free = [(a, b) for a, b in kept if a < b]

    def _last_activity(self, rep: _ReplicaPlan) -> float:
        """When its streaming request last got a byte; for one not started, when it could have (sent, or the one
        before it ended: a request pipelined long ago behind a slow one has not been waiting all that time)."""
        head = self._requests[rep.queue[0]]
        if head.last_byte is not None:
            return head.last_byte
        return max(head.issued, rep.last_byte if rep.last_byte is not None else head.issued)

    # -- the tail -------------------------------------------------------------------------------------------

    def _rate_of(self, rep: _ReplicaPlan) -> float:
        rate = self._current_rate(rep)
        if rate is not None:
            return rate
        rates = [r for r in (self._current_rate(r) for r in self._replicas) if r]
        return sum(rates) / len(rates) if rates else 0.0

    def _work_s(self, rep: _ReplicaPlan) -> float:
        """Seconds ``rep`` needs for everything it still has to receive."""
        rate = self._rate_of(rep)
        left = sum(self._requests[rid].end - self._requests[rid].pos for rid in rep.queue)
        return left / rate if rate > 0 else math.inf

    def _tail(self, idle: _ReplicaPlan, now: float) -> None:
        if idle.last_byte is None or (idle.failed_at is not None and idle.last_byte < idle.failed_at):
            return  # it has not shown it is there (no byte yet, or none since it failed): it takes no one's tail
        busy = [rep for rep in self._replicas if rep is not idle and rep.usable and rep.queue]
        if not busy:
            return
        owner = max(busy, key=self._work_s)
        owner_rate, idle_rate = self._rate_of(owner), self._rate_of(idle)
        silent = owner_rate <= 0  # nothing from the owner for a while (far, or gone): the idle one takes it all
        req = self._requests[owner.queue[-1]]  # a silent owner's others go too, one by one, whatever their size
        if req.partner is not None:
            return
        remaining = req.end - req.pos
        small = max(1, self.config.min_chunk // 4)  # not worth a request, unless its owner is silent
        if idle_rate <= 0 or remaining < (1 if silent else small):
            return
        ahead = 0.0 if silent else self._work_s(owner) - remaining / owner_rate  # the owner's work before it
        begin = self._start_s(idle)  # a round trip, or (its pipe not yet empty) the work it still has
        if self.config.tail == "hedge":
            if not silent and begin + remaining / idle_rate >= ahead + remaining / owner_rate:
                return
            start = max(req.start, self._align_down(req.pos))
            self._issue(idle, (start, req.end), now, hedge_of=req.id)
            req.hedged_by = self._next_id - 1
            return
        # split: the owner keeps x bytes and the idle replica takes the rest, so both finish at the same moment
        x = 0.0 if silent else (begin + remaining / idle_rate - ahead) / (1 / owner_rate + 1 / idle_rate)
        cut = self._align_up(req.pos + max(0, min(remaining, int(x))))
        if req.end - cut < (1 if silent else small):
            return
        end = req.end
        self._stop(req, cut)
        self._issue(idle, self._take(end - cut), now)

    def _align_up(self, n: int) -> int:
        a = self.config.align
        up = -(-n // a) * a
        return up if self.size is None else min(self.size, up)

    def _align_down(self, n: int) -> int:
        return n // self.config.align * self.config.align
