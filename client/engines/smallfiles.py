"""The small-file queue planner: which files travel together, in what order, and how many blocks are in flight.

A pure engine in the h11 manner: it takes the file list (sizes, priorities), the hop's bandwidth-delay product and
its limits, and returns a ``Plan``; it reads no file, opens no socket and knows no clock. ``lnet.client.tree`` walks
the directory, feeds it, and hands the plan's blocks to the relay.

Theory of operation (Wu et al., "End-to-end dynamic pipelining tuning strategy for small files")
---------------------------------------------------------------------------------------------------------------
Bucket Divide (Algorithm 1, FBD). Files are sorted by size against the BDP into five buckets: four below it,
``(0, BDP/4]``, ``(BDP/4, BDP/2]``, ``(BDP/2, 3BDP/4]``, ``(3BDP/4, BDP]``, and one above it (the "big" bucket).
OPTIMALPP then gives ``pp = ceil(3 BDP / MF) - 1`` with MF the mean size of the files below the BDP (a batch of
``pp + 1`` of them carries about three BDPs, what TCP needs to leave slow start), ``times = Nums / (pp + 1)`` the
number of such batches the small files make, and ``N`` the number of big files.

Transmission Queue (Algorithm 2, TQ) builds the queue batch by batch ("one pipelined transmission"):
  * ``times > N`` (too few big files to go with every batch): EQUALTRANSFER. While big files remain, a batch is
    ``pp`` files from the left (smallest non-empty) bucket and one big file; after that, half of ``pp + 1`` from the
    left and half from the right (largest non-empty small) bucket, so that each batch's sizes average out near the
    middle; an odd ``pp + 1`` takes ``pp + 2`` when that stays within ``max_pp``, else one more from the right.
  * otherwise INEQUALTRANSFER with ``newPP = min(pp + floor(N / times), max_pp)``: every batch takes ``pp + 1``
    small files from the left and right buckets (the odd one from the left) and ``newPP - pp`` big files, so the big
    files pad every batch out to the BDP from the first batch to the last.
Priorities (the seed's Fig. 2): a high-priority file of at most BDP/2 goes to the front of bucket 1, one in
``(BDP/2, BDP]`` to the front of bucket 4, a bigger one to the front of bucket 5. Those are the buckets the queue
draws from first (left, right and big), so priority files leave early, still mixed into batches that fill the BDP.

How lnet maps it. The seed's request is one GridFTP file transfer; lnet's request is a block (one write into the
first depot, one copy per hop, one check at the destination). ``pack`` turns each batch into blocks: the batch's
small files are concatenated into one packed block (cut at the block size when they exceed it), and every big file
is cut into blocks as a single file is. The pipelining depth is the number of blocks in flight per hop, from the
same formula over the blocks, with the delay a block ties up (departure 5): ``ceil(3 (BDP + mean block) / mean
block) - 1`` within ``[min_depth, max_depth]``; the relay starts with it and re-derives it from the measured rate
and delay as the transfer runs (``relay.inflight_for``).
``fixed_pp`` (``lnet-send --pipeline-depth N``) replaces OPTIMALPP's pp with N and fixes the window at N blocks:
the seed's DEFAULT baseline, through the same code.

Where lnet departs from the seed, each where its pseudocode leaves a case open:
  1. pp is bounded to ``[1, max_pp - 1]``: the seed caps newPP at maxPP but not pp, so INEQUALTRANSFER could take no
     big file (or a negative number) per batch. Below ``max_pp``, every INEQUAL batch takes at least one.
  2. Empty files go to bucket 1 (the seed's buckets start above 0 bytes) and do not count in MF: they carry no bytes.
  3. The seed's loops end when every bucket is empty; when one side runs dry first they keep taking what is left
     (a batch simply comes out short), so the loop always ends.
  4. No file below the BDP: MF is undefined, so pp = 1 and the big files go two to a batch.
  5. The depth in blocks counts a request's own time on the wire as part of its delay, as the relay does for a
     single file: GridFTP pipelines its commands on one connection, so a request there costs its bytes only; an lnet
     block is one HTTP request, which holds its connection for a round trip and its transfer, and the link idles
     whenever every connection in flight is waiting for its answer at once. With blocks of about the BDP the
     seed's own formula gives 2, which left a 100 Mbit/s, 50 ms link 20% idle on the testbed (bench/small_files.py).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "BUCKETS",
    "Batch",
    "FileItem",
    "Pipelining",
    "Piece",
    "Plan",
    "PlannedBlock",
    "PlannerLimits",
    "divide",
    "equal_transfer",
    "inequal_transfer",
    "optimal_pp",
    "pack",
    "pipeline_depth",
    "plan",
    "transmission_queue",
]

BUCKETS = 5
BIG = 4  # the index of the bucket above the BDP
Buckets = tuple[tuple["FileItem", ...], ...]


@dataclass(frozen=True)
class FileItem:
    """One file to send: ``key`` is the caller's handle on it (an index into its own list)."""

    key: int
    size: int
    priority: bool = False


@dataclass(frozen=True)
class PlannerLimits:
    block_size: int = 4 * 1024 * 1024
    max_pp: int = 20
    """The seed's maxPP: the most files one pipelined batch may hold (an empirical 20 in the seed)."""
    min_depth: int = 2
    max_depth: int = 16
    """Bounds on blocks in flight per hop (the relay's ``min_inflight`` and ``max_inflight``)."""

    def __post_init__(self) -> None:
        if self.block_size < 1:
            raise ValueError("block_size must be at least 1")
        if self.max_pp < 2:
            raise ValueError("max_pp must be at least 2")
        if not 1 <= self.min_depth <= self.max_depth:
            raise ValueError("need 1 <= min_depth <= max_depth")


@dataclass(frozen=True)
class Pipelining:
    """OPTIMALPP's outputs: the pipelining parameter, how many batches the small files make, the big files' count."""

    pp: int
    times: float
    n_big: int


@dataclass(frozen=True)
class Batch:
    """One pipelined transmission: small files (below the BDP) and big ones, in queue order."""

    small: tuple[FileItem, ...]
    big: tuple[FileItem, ...]

    @property
    def files(self) -> tuple[FileItem, ...]:
        return self.small + self.big

    @property
    def nbytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class Piece:
    """``length`` bytes of file ``key`` from its ``offset``, at the next position in a block."""

    key: int
    offset: int
    length: int


@dataclass(frozen=True)
class PlannedBlock:
    pieces: tuple[Piece, ...]

    @property
    def length(self) -> int:
        return sum(p.length for p in self.pieces)


@dataclass(frozen=True)
class Plan:
    bdp: int
    pp: int
    new_pp: int
    times: float
    n_big: int
    transfer: Literal["equal", "inequal"]
    batches: tuple[Batch, ...]
    blocks: tuple[PlannedBlock, ...]
    depth: int
    """Blocks in flight per hop to start with."""
    fixed: bool
    """The depth is fixed (``--pipeline-depth``) rather than tuned."""

    @property
    def order(self) -> tuple[int, ...]:
        """File keys in queue order."""
        return tuple(f.key for batch in self.batches for f in batch.files)


# -- Algorithm 1: File Bucket Divide ----------------------------------------------------------------------------


def divide(files: Sequence[FileItem], bdp: int) -> Buckets:
    """The five buckets of FBD, each in the input's order, priority files at the front of buckets 1, 4 and 5."""
    if bdp < 1:
        raise ValueError("the BDP must be at least one byte")
    ordinary: list[list[FileItem]] = [[] for _ in range(BUCKETS)]
    urgent: list[list[FileItem]] = [[] for _ in range(BUCKETS)]
    for item in files:
        if item.size < 0:
            raise ValueError(f"file {item.key} has a negative size")
        if item.priority:
            index = 0 if 2 * item.size <= bdp else 3 if item.size <= bdp else BIG
            urgent[index].append(item)
        else:
            # size * 4 <= bdp * k is size <= k * BDP / 4 without rounding
            index = next((k for k in range(4) if 4 * item.size <= (k + 1) * bdp), BIG)
            ordinary[index].append(item)
    return tuple(tuple(urgent[k] + ordinary[k]) for k in range(BUCKETS))


def optimal_pp(buckets: Buckets, bdp: int, max_pp: int) -> Pipelining:
    """OPTIMALPP: ``pp = ceil(3 BDP / MF) - 1`` within ``[1, max_pp - 1]``, ``times = Nums / (pp + 1)``, ``N``."""
    small = [f for bucket in buckets[:BIG] for f in bucket]
    carrying = [f.size for f in small if f.size > 0]
    if carrying:
        mean = sum(carrying) / len(carrying)
        pp = max(1, min(max_pp - 1, math.ceil(3 * bdp / mean) - 1))
    else:
        pp = 1
    return Pipelining(pp, len(small) / (pp + 1), len(buckets[BIG]))


# -- Algorithm 2: Transmission Queue ----------------------------------------------------------------------------


class _Drawer:
    """Takes files from the buckets as TQ does: ``left`` is the smallest non-empty small bucket, ``right`` the
    largest (the seed's ``left++`` / ``right--`` over empty ones), ``big`` the bucket above the BDP."""

    def __init__(self, buckets: Buckets) -> None:
        self.queues = [deque(bucket) for bucket in buckets]

    def small_left(self) -> int:
        return sum(len(q) for q in self.queues[:BIG])

    def big_left(self) -> int:
        return len(self.queues[BIG])

    def empty(self) -> bool:
        return not any(self.queues)

    def left(self, count: int) -> list[FileItem]:
        return self._take(count, range(BIG))

    def right(self, count: int) -> list[FileItem]:
        return self._take(count, range(BIG - 1, -1, -1))

    def big(self, count: int) -> list[FileItem]:
        return self._take(count, (BIG,))

    def _take(self, count: int, order: Sequence[int] | range) -> list[FileItem]:
        taken: list[FileItem] = []
        for index in order:
            queue = self.queues[index]
            while queue and len(taken) < count:
                taken.append(queue.popleft())
            if len(taken) == count:
                break
        return taken


def equal_transfer(buckets: Buckets, pp: int, max_pp: int) -> list[Batch]:
    """EQUALTRANSFER: big files consume ``pp`` small ones each while they last, then left/right pairs."""
    drawer = _Drawer(buckets)
    batches: list[Batch] = []
    while not drawer.empty():
        if drawer.big_left():
            small = drawer.left(pp)
            big = drawer.big(1)
        elif (pp + 1) % 2 == 0:
            small = drawer.left((pp + 1) // 2) + drawer.right((pp + 1) // 2)
            big = []
        elif pp + 2 <= max_pp:
            small = drawer.left((pp + 2) // 2) + drawer.right((pp + 2) // 2)
            big = []
        else:
            small = drawer.left((pp + 1) // 2) + drawer.right((pp + 1) // 2 + 1)
            big = []
        batches.append(Batch(tuple(small), tuple(big)))
    return batches


def inequal_transfer(buckets: Buckets, new_pp: int, pp: int) -> list[Batch]:
    """INEQUALTRANSFER: ``pp + 1`` small files from left and right, and ``newPP - pp`` big ones, every batch."""
    if new_pp <= pp:
        raise ValueError("INEQUALTRANSFER needs newPP > pp (at least one big file per batch)")
    drawer = _Drawer(buckets)
    batches: list[Batch] = []
    while not drawer.empty():
        if (pp + 1) % 2 == 0:
            small = drawer.left((pp + 1) // 2) + drawer.right((pp + 1) // 2)
        else:
            small = drawer.left((pp + 1) // 2 + 1) + drawer.right((pp + 1) // 2)
        big = drawer.big(new_pp - pp)
        batches.append(Batch(tuple(small), tuple(big)))
    return batches


def transmission_queue(buckets: Buckets, params: Pipelining, max_pp: int) -> tuple[str, int, list[Batch]]:
    """TQ: which transfer, newPP (pp for EQUALTRANSFER), and the batches."""
    if params.times > params.n_big or params.times == 0 and params.n_big == 0:
        return "equal", params.pp, equal_transfer(buckets, params.pp, max_pp)
    if params.times == 0:  # no small file: nothing to pad; the big files go pp + 1 to a batch
        return "inequal", params.pp + 1, inequal_transfer(buckets, params.pp + 1, params.pp)
    new_pp = min(params.pp + math.floor(params.n_big / params.times), max_pp)
    return "inequal", new_pp, inequal_transfer(buckets, new_pp, params.pp)


# -- lnet: batches into blocks, and the depth ---------------------------------------------------------------------


def pack(batches: Sequence[Batch], block_size: int) -> list[PlannedBlock]:
    """Blocks in queue order: each batch's small files packed together (cut at ``block_size``), then its big files,
    each cut into blocks of its own. Empty files take no room and appear in no block."""
    blocks: list[PlannedBlock] = []
    for batch in batches:
        current: list[Piece] = []
        room = block_size
        for item in batch.small:
            offset = 0
            while offset < item.size:
                length = min(room, item.size - offset)
                current.append(Piece(item.key, offset, length))
                offset += length
                room -= length
                if room == 0:
                    blocks.append(PlannedBlock(tuple(current)))
                    current, room = [], block_size
        if current:
            blocks.append(PlannedBlock(tuple(current)))
        for item in batch.big:
            for offset in range(0, item.size, block_size):
                blocks.append(PlannedBlock((Piece(item.key, offset, min(block_size, item.size - offset)),)))
    return blocks


def pipeline_depth(bdp: int, blocks: Sequence[PlannedBlock], low: int, high: int) -> int:
    """Wu et al.'s formula over lnet's requests, ``ceil(3 x (BDP + mean block) / mean block) - 1`` within ``[low,
    high]``: the bandwidth-delay product of one request's whole cycle, a round trip and the block's own time on the
    wire (departure 5 above)."""
    if not blocks:
        return low
    mean = sum(b.length for b in blocks) / len(blocks)
    return max(low, min(high, math.ceil(3 * (bdp + mean) / mean) - 1))


def plan(
    files: Sequence[FileItem], bdp: int, limits: PlannerLimits | None = None, *, fixed_pp: int | None = None
) -> Plan:
    """The whole plan: buckets, pp, the queue, its blocks, and the depth to start with.

    ``fixed_pp`` replaces OPTIMALPP's pp (and fixes the depth at that many blocks): the baseline the seed calls
    DEFAULT, through the same queue and packing."""
    limits = limits or PlannerLimits()
    buckets = divide(files, bdp)
    params = optimal_pp(buckets, bdp, limits.max_pp)
    if fixed_pp is not None:
        if fixed_pp < 1:
            raise ValueError("a fixed pipelining depth must be at least 1")
        pp = min(fixed_pp, limits.max_pp - 1)
        params = Pipelining(pp, sum(len(b) for b in buckets[:BIG]) / (pp + 1), params.n_big)
    transfer, new_pp, batches = transmission_queue(buckets, params, limits.max_pp)
    blocks = pack(batches, limits.block_size)
    if fixed_pp is not None:
        depth = fixed_pp
    else:
        depth = pipeline_depth(bdp, blocks, limits.min_depth, limits.max_depth)
    return Plan(
        bdp=bdp, pp=params.pp, new_pp=new_pp, times=params.times, n_big=params.n_big,
        transfer="equal" if transfer == "equal" else "inequal", batches=tuple(batches), blocks=tuple(blocks),
        depth=depth, fixed=fixed_pp is not None,
    )
