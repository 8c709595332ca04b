"""Sending a directory tree: the pieces ``lnet-send DIR`` needs beside ``send`` itself.

``PackedTree`` is the small-file planner's blocks (``engines.smallfiles``) over the tree's files as one
``relay.Stream``, read piece by piece and never through a symlink; ``round_trip`` measures the first hop for
the planner's bandwidth-delay product; ``FileArrivals`` follows which file is complete at the destination from
the relay's ``BlockDelivered`` events (pure), for the progress display and the ``--json`` summary's ``arrivals``.
The command (``commands.send``) walks the tree, plans, and runs the stream through ``send``.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import trio

from lnet.client.engines import smallfiles
from lnet.client.engines.smallfiles import PlannedBlock
from lnet.client.formats import tree
from lnet.client.formats.tree import Entry
from lnet.client.sending.relay import Stream, TransferFailed
from lnet.client.wire.depot_client import DepotClient

__all__ = ["ASSUMED_RATE_BPS", "FileArrivals", "PackedTree", "is_priority", "round_trip"]

ASSUMED_RATE_BPS = 125e6
"""Bytes/s taken for the first hop when the edge memory knows nothing of it (1 Gbit/s). Guessing high only packs
more files together and starts with a deeper window, which the relay shrinks to what it measures."""
RTT_SAMPLES = 5


class FileArrivals:
    """Which files are complete at the destination, from the blocks delivered (pure: fed events)."""

    def __init__(self, entries: list[tree.Entry], blocks: list[smallfiles.PlannedBlock]) -> None:
        self.entries = entries
        self.blocks = blocks
        self.missing = {i: e.size for i, e in enumerate(entries) if e.type == "file" and e.size > 0}
        self.arrived: list[tuple[int, float]] = []
        self.total_files = sum(1 for e in entries if e.type == "file")
        self.empty = [i for i, e in enumerate(entries) if e.type == "file" and e.size == 0]

    def start(self, t: float) -> None:
        """Empty files carry no bytes: they are there as soon as the transfer starts."""
        self.arrived.extend((i, t) for i in self.empty)
        self.empty = []

    def delivered(self, index: int, t: float) -> None:
        for piece in self.blocks[index].pieces:
            self.missing[piece.key] -= piece.length
            if self.missing[piece.key] == 0:
                del self.missing[piece.key]
                self.arrived.append((piece.key, t))


async def round_trip(
    url: str, timeout_s: float, token: str | None = None, transport: httpx.AsyncBaseTransport | None = None,
) -> float:
    """The shortest of a few control round trips to ``url`` (the first opens the connection, so it is not used);
    ``token`` for a depot that requires its operator token for status."""
    async with DepotClient(url, token=token, timeout=timeout_s, transport=transport) as client:
        await client.status()
        best = float("inf")
        for _ in range(RTT_SAMPLES):
            started = trio.current_time()
            await client.status()
            best = min(best, trio.current_time() - started)
    return best


def is_priority(path: str, patterns: list[str]) -> bool:
    name = path.rpartition("/")[2]
    return any(fnmatch.fnmatchcase(path, p) or fnmatch.fnmatchcase(name, p) for p in patterns)


class PackedTree:
    """The planner's blocks over the files of ``root``, as one stream the relay can carry."""

    def __init__(self, root: Path, entries: Sequence[Entry], blocks: Sequence[PlannedBlock]) -> None:
        self.root = root
        self.entries = list(entries)
        self.blocks = list(blocks)
        spans: list[tuple[int, int]] = []
        offset = 0
        for block in self.blocks:
            spans.append((offset, block.length))
            offset += block.length
        self.spans = tuple(spans)
        self._by_offset = {start: i for i, (start, _) in enumerate(spans)}

    @property
    def stream(self) -> Stream:
        return Stream(str(self.root), self.spans, self.read)

    def read(self, offset: int, length: int) -> bytes:
        """The bytes of the block at ``offset``: its pieces read from their files (never through a symlink)."""
        block = self.blocks[self._by_offset[offset]]
        if block.length != length:
            raise ValueError(f"no block of {length} bytes at {offset}")
        parts = []
        for piece in block.pieces:
            entry = self.entries[piece.key]
            path = self.root / entry.path
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                data = os.pread(fd, piece.length, piece.offset)
            finally:
                os.close(fd)
            if len(data) != piece.length:
                raise TransferFailed(f"{path} changed while being sent (shorter than {entry.size} bytes)")
            parts.append(data)
        return b"".join(parts)

    def block_pieces(self) -> list[list[dict[str, Any]]]:
        """The manifest's ``blocks``: each block's pieces by file path."""
        return [
            [{"path": self.entries[p.key].path, "offset": p.offset, "length": p.length} for p in block.pieces]
            for block in self.blocks
        ]
