"""The decision loop's state as one value: what it explores with, whether it trusts the memory, whether a path
tried on ceilings is running or ceilings are spent, whether a cold start's scouts are due, and the news that waits
for the next tick. Pure data and its transitions; the loop (``_loop.py``) holds one ``LoopState`` and replaces it.

Each part is a small state machine; every transition the loop makes is one of the functions below:

=============  ==================================  ============================================  =================
part           from                                on                                            to
=============  ==================================  ============================================  =================
exploration    ``PROBES_UNHEARD``                  a probe reported, failed or ended (``heard``)  ``PROBES``
exploration    ``PROBES_UNHEARD``                  no probe reported in ``3 x probe_s``          ``MOVES``
                                                   (``unheard``: the engine does not probe)
memory         ``TRUSTED``                         a remembered figure measured far off           ``DISCREDITED``
                                                   (``discredit``)
hope           None                                a move to a path on ceilings (``hope_on``)    ``Hope(path, left)``
hope           ``Hope``                            judged or left (``hope_over``)                None; ``ceilings``
                                                                                                 ``SPENT`` unless it
                                                                                                 held, or was left
                                                                                                 on a failure
scouts         ``NONE``                            a cold start with more paths (``scouts_due``) ``DUE``
scouts         ``DUE``                             its first path reported (``scouts_done``)     ``NONE``
news           -                                   a hop of the set failed; a probe ended        ``HOP_FAILED``,
                                                                                                 ``PROBE_ENDED`` in
news           -                                   the tick that acts on it (``without``)        out
=============  ==================================  ============================================  =================

``MOVES``, ``DISCREDITED`` and ``SPENT`` are final for the transfer. The path set's own state (its trial, its
bans) is kept with the set.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

__all__ = ["Ceilings", "Exploration", "Hope", "LoopState", "Memory", "News", "Scouts"]

Path = tuple[str, ...]


class Exploration(Enum):
    """How the loop learns unknown edges."""

    PROBES_UNHEARD = "probes, none heard from yet"
    """Probes beside the transfer, asked of an engine that has not yet shown that it runs them."""
    PROBES = "probes"
    """Probes beside the transfer; the transfer moves on measured ground only."""
    MOVES = "moves"
    """The seed's way: the transfer itself moves onto paths with unknown edges."""


class Memory(Enum):
    """Whether the remembered estimates this transfer has not confirmed are trusted."""

    TRUSTED = "trusted"
    DISCREDITED = "discredited"


class Ceilings(Enum):
    """Whether a path may be tried on ceilings (a probe's floor raised to what it would be on a shared link)."""

    OPEN = "open"
    SPENT = "spent"
    """A path tried on ceilings was left for a better one: this network's probes were not sharing links with the
    transfer, and ceilings are not tried again in this transfer."""


class Scouts(Enum):
    """A cold start's scouts (theory of operation, 14)."""

    NONE = "none"
    DUE = "due"
    """To join once every hop of the first path has reported."""


class News(Enum):
    """What happened since the last tick that the next one acts on."""

    HOP_FAILED = "a hop of the set failed"
    PROBE_ENDED = "a probe ended"


@dataclass(frozen=True, slots=True)
class Hope:
    """The primary was tried on ceilings: ``path``, which must beat ``left``, the path the transfer left for it."""

    path: Path
    left: Path | None


@dataclass(frozen=True, slots=True)
class LoopState:
    exploration: Exploration = Exploration.PROBES_UNHEARD
    memory: Memory = Memory.TRUSTED
    hope: Hope | None = None
    ceilings: Ceilings = Ceilings.OPEN
    scouts: Scouts = Scouts.NONE
    news: frozenset[News] = frozenset()

    @classmethod
    def first(cls, *, probes: bool) -> LoopState:
        """A new transfer's: exploring by probes when the loop asks for any, else by moves."""
        return cls(exploration=Exploration.PROBES_UNHEARD if probes else Exploration.MOVES)

    @property
    def probing(self) -> bool:
        return self.exploration is not Exploration.MOVES

    @property
    def hoping(self) -> Path | None:
        """The path tried on ceilings, while it runs."""
        return None if self.hope is None else self.hope.path

    # -- transitions ------------------------------------------------------------------------------------------

    def heard(self) -> LoopState:
        """A probe reported, failed or ended: the engine runs probes."""
        if self.exploration is Exploration.PROBES_UNHEARD:
            return replace(self, exploration=Exploration.PROBES)
        return self

    def unheard(self) -> LoopState:
        """No probe reported within ``3 x probe_s``: the engine does not probe; explore by moving."""
        return replace(self, exploration=Exploration.MOVES)

    def discredit(self) -> LoopState:
        return replace(self, memory=Memory.DISCREDITED)

    def hope_on(self, path: Path, left: Path | None) -> LoopState:
        return replace(self, hope=Hope(path, left))

    def hope_over(self, *, spent: bool) -> LoopState:
        """The path tried on ceilings is judged, or left; ``spent``: it did not hold, and ceilings are not tried
        again."""
        return replace(self, hope=None, ceilings=Ceilings.SPENT if spent else self.ceilings)

    def scouts_due(self) -> LoopState:
        return replace(self, scouts=Scouts.DUE)

    def scouts_done(self) -> LoopState:
        return replace(self, scouts=Scouts.NONE)

    def with_news(self, news: News) -> LoopState:
        return self if news in self.news else replace(self, news=self.news | {news})

    def without(self, news: News) -> LoopState:
        return replace(self, news=self.news - {news}) if news in self.news else self
