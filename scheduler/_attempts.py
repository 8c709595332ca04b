"""A path attempt: a period during which the transfer used one path, why it began, and what it carried.

Shared by the decision loop (``_loop``, the primary's attempts and the history) and the path set (``_pathset``, the
extras'), and importing neither; ``_loop`` and ``lnet.scheduler`` re-export ``PathAttempt`` and ``SwitchReason``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from ._memory import Edge
from ._paths import Path

__all__ = ["PathAttempt", "SwitchReason"]

SwitchReason = Literal["start", "explore", "better", "settle", "failure", "join", "drop"]
"""Why the set changed. ``"join"``: a path was added beside the primary; ``"drop"``: a path other than the primary
was removed because it stopped adding rate or shared a bottleneck with the set (a failed one is ``"failure"``)."""


@dataclass(frozen=True, slots=True)
class PathAttempt:
    """A period during which the transfer used one path: a row of the seed's Table 1. With several paths at once
    (``max_paths``), each has its own, and they overlap in time."""

    path: Path
    start: float
    end: float | None
    """None while the attempt is still going on."""
    throughput_bps: float
    """Achieved, predicted the way paths are: ``streams`` times the slowest hop's per-stream rate during the
    attempt; 0.0 if a hop never reported."""
    reason: SwitchReason


@dataclass(slots=True)
class _Flow:
    bytes: int = 0
    seconds: float = 0.0

    def rate(self, streams: int) -> float | None:
        """What the hop carried at ``streams``, predicted the way edges are; None before a copy has ended."""
        return streams * self.bytes / self.seconds if self.seconds > 0 else None


@dataclass(slots=True)
class _Attempt:
    path: Path
    start: float
    reason: SwitchReason
    predicted: float = math.inf
    """What the path was predicted to carry when it was chosen."""
    flows: dict[Edge, _Flow] = field(default_factory=dict)

    @property
    def silent(self) -> bool:
        """A hop of the path has not reported since the path began (no copy of it has ended)."""
        return any(edge not in self.flows for edge in zip(self.path, self.path[1:], strict=False))

    def throughput(self, streams: int) -> float:
        rates = []
        for edge in zip(self.path, self.path[1:], strict=False):
            flow = self.flows.get(edge)
            rate = None if flow is None else flow.rate(streams)
            if rate is None:
                return 0.0
            rates.append(rate)
        return min(rates, default=0.0)

    def freeze(self, end: float | None, streams: int) -> PathAttempt:
        return PathAttempt(self.path, self.start, end, self.throughput(streams), self.reason)
