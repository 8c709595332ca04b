"""A hop's depth above Wu et al.'s rule, where trying more copies at once shows they carry more (pure).

Wu et al.'s rule (``relay_core.inflight_for``) sizes a hop's window from its measured rate and the time a copy
takes with no queue (the shortest copy). Both come from the depth the hop runs at, so the rule can hold a hop
where it is: on the testbed a direct hop whose copies took 0.5 to 1.0 s however many ran (the link was not full),
and one of which took 0.3 s, fell from its first four copies to two and stayed there for the whole transfer, at
26 Mbit/s where six or seven copies carried 48 pinned (``bench/results/traces/depth-rule-r018-20261128.json``).

So a hop that has carried enough at its depth tries twice the depth, and keeps it as a floor if it carries
``DEPTH_GAIN`` times more: the rule the deep probes use too (``lnet.client.sending.probes``), where twice the copies
on a hop held back by each copy's own window nearly double it, and on a full link add nothing. A level kept is the
bar of the next, tried at once: a lossy hop, whose every copy is held to its loss limit, took 30 s a level when each
level kept was first measured again on its own, and 15-20 s without (docs/decisions/0019; ``CLIMB_COPIES`` in
``lnet.scheduler.simulator`` is this climb). A trial that fails is not tried again for ``COOLDOWN_FLUSHES`` flushes.
Each level is judged on copies that began at it: the first ``depth`` copies after a change are let go by (they began
at the level before), then ``2 x depth`` copies are counted (two a stream, as a deep probe's level is). A hop
starved of work says nothing of its depth, and its counts start again.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COOLDOWN_FLUSHES", "DEPTH_GAIN", "DepthClimb", "Flushed"]

DEPTH_GAIN = 1.25
"""A deeper level is kept when it carries this many times what the level below did: a hop's trial here, and a deep
probe's next level (``EdgeProbes.deep``)."""

COOLDOWN_FLUSHES = 20
"""Flushes (half-seconds by default) after a failed trial before the next."""


@dataclass(frozen=True)
class Flushed:
    """What a hop's meter counted between two flushes: the bytes of the copies that ended, the seconds any copy
    was in flight, the copies that ended and, of those, the ones that began at or after the hop's last change of
    depth; and whether the hop was starved of work."""

    bytes: int
    busy_s: float
    copies: int
    began_since_change: int
    starved: bool


class DepthClimb:
    """One hop's floor on its depth, raised by trials (module docstring); ``depth`` gives the hop's depth each
    flush, from Wu's rule and what the meter counted."""

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high
        self.floor = low
        self.trial: int | None = None
        """The deeper level being tried."""
        self.below_bps = 0.0
        """During a trial, what the hop carried before it (bytes/s)."""
        self.let_by = 0
        """Copies that began since the floor or the trial last changed and ended, up to the depth: until then
        nothing is counted (they began at the level before)."""
        self.nbytes = 0
        self.busy_s = 0.0
        self.copies = 0
        self.cooldown = 0
        self.tried = 0
        """Trials begun."""

    @property
    def imposed(self) -> int:
        """The least depth the climb holds the hop at: its floor, or the level on trial."""
        return max(self.floor, self.trial or 0)

    def depth(self, rule: int, flushed: Flushed | None) -> int:
        """The hop's depth: Wu's ``rule``, or more if the floor or a trial says so, within ``[low, high]``;
        ``flushed`` is what the hop's meter counted since the last call (None if no copy ended)."""
        if flushed is not None:
            self._count(rule, flushed)
        return self._depth(rule)

    def _depth(self, rule: int) -> int:
        return max(self.low, min(self.high, max(rule, self.imposed)))

    def _count(self, rule: int, flushed: Flushed) -> None:
        self.cooldown = max(0, self.cooldown - 1)
        depth = self._depth(rule)
        if flushed.starved:
            self._restart(settled=True)
            return
        if self.let_by < depth:
            self.let_by += flushed.began_since_change
            return
        self.nbytes += flushed.bytes
        self.busy_s += flushed.busy_s
        self.copies += flushed.copies
        if self.copies < 2 * depth or self.busy_s <= 0:
            return
        rate = self.nbytes / self.busy_s
        if self.trial is not None:
            kept = rate >= DEPTH_GAIN * self.below_bps
            if kept:
                self.floor = self.trial
            else:
                self.cooldown = COOLDOWN_FLUSHES
            self.trial = None
            depth = self._depth(rule)
            if kept and depth < self.high:
                self._try(depth, rate)  # what the level just kept carried is the next level's bar: tried at once
            else:
                self._restart(settled=kept)  # kept, the copies in flight began at the depth that goes on
        elif self.cooldown == 0 and depth < self.high:
            self._try(depth, rate)
        else:
            self._restart(settled=True)  # the next judgement compares recent rates

    def _try(self, depth: int, rate: float) -> None:
        """A trial of twice ``depth``, against ``rate``, what the hop carried at it."""
        self.trial = min(2 * depth, self.high)
        self.below_bps = rate
        self.tried += 1
        self._restart(settled=False)

    def _restart(self, *, settled: bool) -> None:
        """Count afresh; ``settled``: the copies in flight began at the depth that goes on."""
        self.let_by = self.high if settled else 0
        self.nbytes = 0
        self.busy_s = 0.0
        self.copies = 0
