"""Copy lanes: named FIFO queues that bound how many pushes of one lane run at once at a depot.

Theory of operation. A client keeps a few more copy requests outstanding per hop than it wants pushes moving
(``lane_width``), so that the control round trip and the request set-up of the next copy overlap the data of the
running ones. Every copy request naming a lane takes a ``LaneTicket``: granted at once while fewer than
``width`` pushes of the lane run and nobody waits before it, otherwise queued first in, first out. Leaving
(the push ended, failed, or the waiting request was cancelled) gives a granted place to the next waiter, or
takes a waiting ticket out of the queue: a ticket frees only what it took. A lane with nothing running and
nobody waiting is forgotten, so lanes never accumulate; at most ``max_lanes`` exist at once. A request that
names a lane with another width changes the lane's width (the newest width wins): a wider lane grants waiters at
once, a narrower one lets running pushes finish and grants nobody until fewer than the new width run.

A pure engine: no trio, no clock. The depot's I/O shell passes ``on_grant`` (it sets a ``trio.Event``) and bounds
the wait itself.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["LANE_NAME", "MAX_LANE_WIDTH", "CopyLanes", "LaneTicket", "TooManyLanes"]

LANE_NAME = re.compile(r"[A-Za-z0-9._:-]{1,128}")
MAX_LANE_WIDTH = 64


class TooManyLanes(Exception):
    """A new lane was asked for while ``max_lanes`` lanes exist."""


@dataclass(eq=False)
class LaneTicket:
    """One copy's claim on a place in its lane."""

    lane: str
    on_grant: Callable[[], None]
    granted: bool = False
    left: bool = False


@dataclass(eq=False)
class _Lane:
    width: int
    running: int = 0
    waiting: deque[LaneTicket] = field(default_factory=deque)


class CopyLanes:
    def __init__(self, max_lanes: int) -> None:
        self.max_lanes = max_lanes
        self._lanes: dict[str, _Lane] = {}
        self._waiting = 0

    @property
    def lanes(self) -> int:
        """Lanes with a push running or a copy waiting."""
        return len(self._lanes)

    @property
    def waiting(self) -> int:
        """Copies waiting for a place, all lanes together."""
        return self._waiting

    @property
    def running(self) -> int:
        """Copies holding a place, all lanes together."""
        return sum(lane.running for lane in self._lanes.values())

    def width(self, name: str) -> int | None:
        lane = self._lanes.get(name)
        return lane.width if lane is not None else None

    def enter(self, name: str, width: int, on_grant: Callable[[], None]) -> LaneTicket:
        """A ticket for a place in lane ``name``; ``on_grant`` is called when it is granted (maybe at once)."""
        if not 1 <= width <= MAX_LANE_WIDTH:
            raise ValueError(f"lane width must be from 1 to {MAX_LANE_WIDTH}")
        lane = self._lanes.get(name)
        if lane is None:
            if len(self._lanes) >= self.max_lanes:
                raise TooManyLanes(f"{len(self._lanes)} copy lanes are in use (max_lanes)")
            lane = self._lanes[name] = _Lane(width)
        lane.width = width
        ticket = LaneTicket(name, on_grant)
        lane.waiting.append(ticket)
        self._waiting += 1
        self._grant(lane)
        return ticket

    def leave(self, ticket: LaneTicket) -> None:
        """Give back what ``ticket`` holds: its place if granted, its spot in the queue if not. Idempotent."""
        if ticket.left:
            return
        ticket.left = True
        lane = self._lanes[ticket.lane]
        if ticket.granted:
            lane.running -= 1
        else:
            lane.waiting.remove(ticket)
            self._waiting -= 1
        self._grant(lane)
        if lane.running == 0 and not lane.waiting:
            del self._lanes[ticket.lane]

    def _grant(self, lane: _Lane) -> None:
        while lane.waiting and lane.running < lane.width:
            ticket = lane.waiting.popleft()
            self._waiting -= 1
            lane.running += 1
            ticket.granted = True
            ticket.on_grant()
