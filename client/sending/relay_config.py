"""The relay's settings (``RelayConfig``): block size, windows, holds, timeouts, probes, the end game.

A module of its own so that the relay's parts (``probes``) and the programs that build a relay read the settings
without importing the relay; ``lnet.client.sending.relay`` re-exports ``RelayConfig``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from lnet.client.formats.manifest import HASH_ALGORITHMS

__all__ = ["MiB", "RelayConfig"]

MiB = 1024 * 1024


@dataclass(frozen=True)
class RelayConfig:
    block_size: int = 4 * MiB
    duration_s: float = 24 * 3600.0
    """Lifetime of the blocks at the destination (the manifest's expiry)."""
    hold_s: float = 3600.0
    """Lifetime of a block's allocation at an intermediate depot (freed as soon as the block is further on)."""
    hold_s_at: Mapping[str, float] = field(default_factory=dict)
    """Per depot, a shorter hold than ``hold_s`` where that depot allows no longer (its max_duration)."""
    min_inflight: int = 2
    max_inflight: int = 16
    initial_inflight: int = 4
    timeout_s: float = 30.0
    tick_s: float = 0.5
    retries: int = 8
    hash_algorithm: str = "blake3"
    """The blocks' and the whole file's hash (one of ``HASH_ALGORITHMS``); the destination computes the same."""
    probe_bytes: int | None = None
    """Bytes a probe copies at once: the transfer's block size when None, so that a probe's figure means what
    the transfer's would (small copies are mostly slow start and round trips)."""
    probe_s: float = 4.0
    lane_extra: int = 2
    """Copies asked of a depot beyond the hop's window: the depot queues them in the hop's lane and starts each
    the moment a push ends, so the client's control round trip overlaps the data (docs/protocol.md, lanes)."""
    backoff_s: float = 0.5
    window_block: int | None = None
    """The block size the window formula divides by when most blocks are shorter than ``block_size`` (a packed
    tree's mean block); ``block_size`` when None."""
    path_window_s: float = 5.0
    """With several paths: a path's measured delivery rate halves the weight of what it did every this many
    seconds (``striping.PathMeter``)."""
    trace: bool = False
    """Tell ``on_event`` what the scheduler is told and decides (``Traced``, ``lnet-send --trace``)."""
    end_game: bool = True
    """With several paths, once every block is under way: an idle path takes a second copy of a block a slower
    path would deliver last (``striping.endgame``); the first copy to arrive counts."""
    space_wait_s: float = 300.0
    """How long a depot may answer ``507 depot_full`` to every allocation before the transfer stops
    (``DepotStayedFull``; ``lnet-send --space-wait``). Meanwhile ``SpaceWait`` events say it is waiting."""

    @property
    def adaptive(self) -> bool:
        """Each hop chooses its own depth, from ``min_inflight`` to ``max_inflight`` (the default in-flight rule)."""
        return self.min_inflight < self.max_inflight

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError("block_size must be at least one byte")
        if not 1 <= self.min_inflight <= self.initial_inflight <= self.max_inflight:
            raise ValueError("need 1 <= min_inflight <= initial_inflight <= max_inflight")
        if self.hash_algorithm not in HASH_ALGORITHMS:
            raise ValueError(f"hash_algorithm must be one of {', '.join(HASH_ALGORITHMS)}")
        for name in ("duration_s", "hold_s", "timeout_s", "tick_s", "probe_s", "path_window_s", "space_wait_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be more than 0")
        if not all(hold > 0 for hold in self.hold_s_at.values()):
            raise ValueError("every hold_s_at must be more than 0")
