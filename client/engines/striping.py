"""Blocks shared among several paths at once: which path a new block takes, and each path's rate.

MDTP (the MDTP paper) shares a file among replicas of different speed so that all of them finish together: each gets
work in proportion to what it delivers. ``lnet.client.sending.relay`` does the same for the paths of one transfer, at
block granularity (a block is one allocation at every depot it crosses, verified by its own hash, so it is never
split): a block admitted goes to the path that would deliver it soonest,

    argmin_p (outstanding_bytes_p + block_len) / rate_p

where ``outstanding_bytes_p`` is what the path already carries and ``rate_p`` its rate: the rate it delivered
lately once it has delivered enough to say (``PathMeter``), else the scheduler's prediction. Handed out that way,
every path holds about its rate times the same number of seconds of work, so they drain together; a block given
to the wrong path costs at most one block's time on it. A path that runs faster than its rate says drains first,
takes the next blocks, and shows a higher rate: the rule corrects itself as long as the blocks admitted at once
cover each path's round trip (the relay admits more blocks the more paths it runs).

The end of a transfer is the exception (``endgame``). Once every block has been handed out, a path that runs
slower than its rate said, or one that holds a pipeline's worth of blocks on many hops, may still be carrying
seconds of work while the others have none: the transfer waits on its slowest path's backlog, and a path that
joined the set costs more than it added (measured on the testbed: direct had finished its blocks after 12 s, a
joined four-hop path delivered its last 10 MiB alone until 17 s). So an idle path takes a second copy of a block
another path will deliver last, when it would deliver it sooner, as BitTorrent's and aria2's end games do; the
first copy verified at the destination counts and the other is cut off and freed. At the end a path with no
work is free, so the copy costs nothing the transfer needed.

Pure: no I/O, no clock; the relay passes ``now``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Travelling", "PathMeter", "endgame", "soonest"]


def soonest(outstanding: Sequence[float], rates: Sequence[float], length: int) -> int:
    """The index of the path that would deliver one more block of ``length`` bytes soonest, given the bytes each
    path has outstanding and its rate in bytes/s (the MDTP rule). A rate that is unknown (0, negative, not finite)
    counts as the mean of the known ones, so a new path is neither starved nor flooded; with none known, the least
    loaded path wins. Ties go to the lowest index (the primary path comes first)."""
    if len(outstanding) != len(rates) or not rates:
        raise ValueError("need one rate for each path, and at least one path")
    mean = _mean_known(rates)
    fill = mean if mean is not None else 1.0
    best, best_s = 0, math.inf
    for index, (load, rate) in enumerate(zip(outstanding, rates, strict=True)):
        seconds = (load + length) / (rate if rate > 0 and math.isfinite(rate) else fill)
        if seconds < best_s:
            best, best_s = index, seconds
    return best


def _mean_known(rates: Sequence[float]) -> float | None:
    """The mean of the rates that are known (more than 0 and finite); None when none is."""
    known = [rate for rate in rates if rate > 0 and math.isfinite(rate)]
    return sum(known) / len(known) if known else None


@dataclass(frozen=True, slots=True)
class Travelling:
    """A block under way on ``path`` (an index into the paths given to ``endgame``), ``hops`` of its hops done."""

    index: int
    path: int
    hops: int
    length: int


def endgame(
    outstanding: Sequence[float], rates: Sequence[float], travelling: Sequence[Travelling], *, min_gain_s: float,
    usable: Sequence[bool] | None = None, silent_s: Sequence[float] | None = None,
) -> list[tuple[int, int]]:
    """Second copies to start at the end of a transfer, once no block is left to hand out: ``(block, path)`` pairs.

    Each path's backlog drains in ``outstanding / rate`` seconds (a path with no rate measured or predicted, 0,
    never takes a copy, and its own blocks count as never arriving; one predicted infinitely fast, a hop not
    measured yet, counts at the mean of the known rates, as ``soonest`` counts it: copies are for the blocks of a
    path known to be slow, not of one nobody knows). The block a path delivers last is taken to be its
    least advanced one (fewest hops done, then the latest in the file); it gets a second copy on the path that
    would deliver it soonest, ``(outstanding + length) / rate`` (the MDTP rule), when that is at least
    ``min_gain_s`` sooner than its own path's backlog drains. Copies go on while that holds, each one counted on
    its new path and taken off its old path's backlog for the next. ``travelling`` holds only blocks with no
    second copy yet. ``usable``: paths that may take copies (all by default).

    ``silent_s``: how long each path has held blocks without delivering one (0 for none). A path silent for
    longer than its rate says its whole backlog takes has shown that rate wrong (a prediction, or an average of
    the past): it drains no sooner than it has been silent. (On the testbed a cold start's scout held three
    blocks on a first hop that took 14 s a copy; counted at the mean of the known rates, it was to deliver them
    in half a second, and the direct path sat idle for 7 s of a 22-s transfer until they came.) A silence its
    rate accounts for changes nothing: a path streaming many blocks at once delivers the first late and the
    rest together (on the testbed, taking such a path's silence as its floor sent half as many copies again
    onto a path over the same bottleneck, and the transfer took 7% longer)."""
    n = len(outstanding)
    if len(rates) != n or (usable is not None and len(usable) != n) or (silent_s is not None and len(silent_s) != n):
        raise ValueError("need one rate (and one usable flag, one silence) for each path")
    load = list(outstanding)
    ok = list(usable) if usable is not None else [True] * n
    mean = _mean_known(rates)
    if mean is not None:
        rates = [mean if rate == math.inf else rate for rate in rates]

    def by_rate(path: int, extra: float = 0.0) -> float:
        rate = rates[path]
        return (load[path] + extra) / rate if rate > 0 and math.isfinite(rate) else math.inf

    # the silences that refute their path's rate, as the backlogs stand before any copy
    quiet = [s if s > by_rate(p) else 0.0 for p, s in enumerate(silent_s)] if silent_s is not None else [0.0] * n

    def drain(path: int, extra: float = 0.0) -> float:
        return max(by_rate(path, extra), quiet[path])

    waiting = sorted(travelling, key=lambda block: (block.hops, -block.index))
    copies: list[tuple[int, int]] = []
    while waiting:
        # the path whose backlog drains last, and its least advanced block
        slowest = max({block.path for block in waiting}, key=drain)
        block = next(block for block in waiting if block.path == slowest)
        helpers = [p for p in range(n) if p != slowest and ok[p] and rates[p] > 0 and math.isfinite(rates[p])]
        if not helpers:
            break
        helper = min(helpers, key=lambda p: (drain(p, block.length), p))
        if drain(helper, block.length) + min_gain_s > drain(slowest):
            break
        copies.append((block.index, helper))
        load[helper] += block.length
        load[slowest] = max(0.0, load[slowest] - block.length)
        waiting.remove(block)
    return copies


class PathMeter:
    """What one path delivered lately: bytes over the time it had blocks out (busy time), the older seconds weighing
    less (halved every ``window_s``); pure, fed ``now`` by the caller.

    Busy time, not wall time: a path that is given few blocks (because it looked slow) is not measured slower for
    it. The bytes and the time up to a path's first delivery are left out: that is the pipeline filling (a block's
    trip through every hop), not its rate. ``rate_bps`` is None until ``min_deliveries`` blocks have arrived."""

    def __init__(self, window_s: float = 5.0, min_deliveries: int = 3) -> None:
        if not window_s > 0 or min_deliveries < 2:
            raise ValueError("window_s must be more than 0 and min_deliveries at least 2")
        self.window_s, self.min_deliveries = window_s, min_deliveries
        self.outstanding = 0
        self.deliveries = 0
        self.delivered_bytes = 0
        self._mark = 0.0
        self._busy = 0.0
        self._bytes = 0
        self._flushed_at: float | None = None
        self._decayed_bytes = 0.0
        self._decayed_seconds = 0.0
        self._quiet_since = 0.0

    def silent_s(self, now: float) -> float:
        """How long the path has held blocks without delivering one: since its last delivery, or since it was
        given a block with none outstanding if that came later; 0 while it holds none."""
        return max(0.0, now - self._quiet_since) if self.outstanding > 0 else 0.0

    def admitted(self, now: float) -> None:
        """A block was given to the path."""
        if self.outstanding == 0:
            self._mark = now
            self._quiet_since = now
        self.outstanding += 1

    def left(self, now: float) -> None:
        """A block given to the path went elsewhere (its path left the set) or failed for good."""
        self._settle(now)

    def delivered(self, nbytes: int, now: float) -> None:
        """A block of the path arrived, verified, at the destination."""
        self.deliveries += 1
        self.delivered_bytes += nbytes
        self._quiet_since = now
        if self.deliveries == 1:
            # the pipeline was filling: from here on it is the path's rate
            self._busy, self._bytes, self._decayed_bytes, self._decayed_seconds = 0.0, 0, 0.0, 0.0
            self._mark = now
        else:
            self._bytes += nbytes
        self._settle(now)

    def flush(self, now: float) -> None:
        """Fold the time since the last flush into the rate (the relay calls it at every tick)."""
        if self.outstanding > 0:
            self._busy += now - self._mark
            self._mark = now
        previous = self._flushed_at if self._flushed_at is not None else now
        decay = 0.5 ** ((now - previous) / self.window_s)
        self._decayed_bytes = decay * self._decayed_bytes + self._bytes
        self._decayed_seconds = decay * self._decayed_seconds + self._busy
        self._bytes, self._busy, self._flushed_at = 0, 0.0, now

    @property
    def rate_bps(self) -> float | None:
        """The path's recent delivery rate (bytes/s) as of the last flush; None until it has delivered enough."""
        if self.deliveries < self.min_deliveries or self._decayed_seconds <= 0:
            return None
        return self._decayed_bytes / self._decayed_seconds

    def _settle(self, now: float) -> None:
        self.outstanding = max(0, self.outstanding - 1)
        if self.outstanding == 0:
            self._busy += now - self._mark
            self._mark = now
