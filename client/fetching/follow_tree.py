"""``lnet-get URL --follow`` for a tree: each file put in place as soon as the stream blocks that hold it are on
disk, and each block's bytes given back from the spool once every file it holds is in place.

The sender publishes the tree's shape (its entries, and the pieces of files each stream block holds) beside the
publication (``formats.published``). ``follow`` reads it once, checks it (``shape``: ``formats.tree``'s checks,
so that nothing lands outside ``OUT``) and receives the packed stream into its spool ``OUT.lnet-stream.lnet-part``
block by block, as it receives a file. Here:

- ``Extraction`` (pure: block and entry indices in, decisions out) says which files have every block holding a
  piece of them on disk (to be written into place), and which blocks have every file they hold in place (their
  bytes may go);
- ``TreeSpool`` (the disk side) makes the directories and symlinks first, writes each file with
  ``formats.tree.TreeWriter`` (durably: the file and its directory fsynced), sets the directories' modes and
  times last, punches spent blocks out of the spool (``punch_hole``), and reads the stream back (``read``): from
  the spool, except punched blocks, whose bytes are their pieces read back from the files in place. A resumed run
  re-hashes what it holds through ``read``, so a punched block is checked against the files that hold it.

The receiver (``fetching.follow``) punches a block only once the whole stream's hash has covered it, its place in
the state is durable, and the state says, durably, that its files are in place and that it is punched: a crash
between the state and the punch only means reading the block back from the files.

What this module must not do: write outside ``OUT`` or through a symlink, punch a block whose files are not all
in place and durable, or hold a whole file in memory.
"""

from __future__ import annotations

import bisect
import errno
import functools
import itertools
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lnet.client.formats import tree
from lnet.client.formats.manifest import ManifestError
from lnet.client.formats.tree import Entry, TreePiece, TreeWriter

__all__ = ["BATCH_FILES", "Extraction", "Shape", "ShapeError", "TreeSpool", "punch_hole", "shape"]

BATCH_FILES = 256
"""Files written in one hop off the event loop (a cancellation is heard in between)."""
_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02


class ShapeError(ValueError):
    """The tree's shape is not valid, or does not fit the stream the publication describes."""


@dataclass(frozen=True)
class Shape:
    """A tree's entries and the pieces each stream block holds, with the stream's layout: block ``i`` is
    ``lengths[i]`` bytes at ``offsets[i]``, its pieces back to back."""

    entries: tuple[Entry, ...]
    blocks: tuple[tuple[TreePiece, ...], ...]
    offsets: tuple[int, ...]
    lengths: tuple[int, ...]


def shape(raw_entries: Any, raw_blocks: Any, *, size: int, block_size: int, blocks_total: int) -> Shape:
    """The shape the sender published, checked as a tree manifest is (``tree.parse_entries``, ``parse_pieces``) and
    against the publication's stream: ``blocks_total`` blocks of at most ``block_size`` bytes, ``size`` in all."""
    try:
        entries = tree.parse_entries(raw_entries)
        blocks = tree.parse_pieces(raw_blocks, entries, None)
    except ManifestError as exc:
        raise ShapeError(str(exc)) from None
    lengths = tuple(sum(piece.length for piece in pieces) for pieces in blocks)
    if len(lengths) != blocks_total or sum(lengths) != size or any(n > block_size for n in lengths):
        raise ShapeError(f"its {len(lengths)} blocks of {sum(lengths)} bytes are not the stream's {blocks_total} "
                         f"blocks of at most {block_size} bytes, {size} in all")
    return Shape(entries, blocks, tuple(itertools.accumulate(lengths, initial=0))[:-1], lengths)


@functools.cache
def _fallocate() -> Callable[[int, int, int, int], int] | None:
    import ctypes

    try:
        function = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    function.restype = ctypes.c_int

    def call(fd: int, mode: int, offset: int, length: int) -> int:
        if function(fd, mode, offset, length) == 0:
            return 0
        return ctypes.get_errno()

    return call


def punch_hole(fd: int, offset: int, length: int) -> bool:
    """Give back the disk space of ``length`` bytes at ``offset`` of ``fd``'s file, which then read as zeros (the
    size unchanged): Linux's ``fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)``, through the C library with
    ctypes, since Python's ``os`` has no ``fallocate`` with flags. False where the system or the file system cannot
    (not Linux, a file system without holes): the space then stays used until the spool is removed at the end.
    Any other failure is an ``OSError``."""
    call = _fallocate()
    if call is None:
        return False
    error = call(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, offset, length)
    if error in (errno.EOPNOTSUPP, errno.ENOSYS):
        return False
    if error:
        raise OSError(error, os.strerror(error))
    return True


class Extraction:
    """Which files to write and which blocks to give back as a tree's stream blocks arrive (pure).

    Files are named by their index in ``entries``, blocks by theirs in the stream. A file is *ready* once every
    block holding a piece of it is held and it is not yet placed (one without pieces, an empty file, at once); a
    block is *spent* once every file with a piece in it is placed."""

    def __init__(self, entries: Sequence[Entry], blocks: Sequence[Sequence[TreePiece]]) -> None:
        index = {entry.path: i for i, entry in enumerate(entries) if entry.type == "file"}
        self.files_in = [tuple(dict.fromkeys(index[piece.path] for piece in pieces)) for pieces in blocks]
        self.blocks_of: dict[int, list[int]] = {i: [] for i in index.values()}
        for block, files in enumerate(self.files_in):
            for file in files:
                self.blocks_of[file].append(block)
        self.held: set[int] = set()
        self.placed: set[int] = set()
        self.punched: set[int] = set()
        self._missing = {file: len(held_by) for file, held_by in self.blocks_of.items()}
        self._unplaced = [len(files) for files in self.files_in]
        self.ready = {file for file, missing in self._missing.items() if missing == 0}
        self._spent: set[int] = set()

    @property
    def done(self) -> bool:
        """Every file is placed."""
        return len(self.placed) == len(self.blocks_of)

    def block_held(self, block: int) -> None:
        if block in self.held:
            return
        self.held.add(block)
        for file in self.files_in[block]:
            self._missing[file] -= 1
            if self._missing[file] == 0 and file not in self.placed:
                self.ready.add(file)

    def file_placed(self, file: int) -> None:
        if file in self.placed:
            return
        self.placed.add(file)
        self.ready.discard(file)
        for block in self.blocks_of[file]:
            self._unplaced[block] -= 1
            if self._unplaced[block] == 0 and block not in self.punched:
                self._spent.add(block)

    def punchable(self, may: Callable[[int], bool]) -> list[int]:
        """The held, spent blocks not yet punched that ``may`` allows, by index."""
        return sorted(block for block in self._spent if block in self.held and may(block))

    def block_punched(self, block: int) -> None:
        self.punched.add(block)
        self._spent.discard(block)

    def resumed_punched(self, blocks: Iterable[int]) -> None:
        """Blocks an earlier run punched: read back from their files from now on."""
        for block in blocks:
            self.block_punched(block)

    def punched_lost(self, block: int) -> None:
        """A punched block whose files did not read back as its bytes: it is fetched again, and every file it
        holds written again (one of them changed)."""
        self.punched.discard(block)
        for file in self.files_in[block]:
            if file in self.placed:
                self.placed.remove(file)
                for other in self.blocks_of[file]:
                    self._unplaced[other] += 1
                    self._spent.discard(other)
                if self._missing[file] == 0:
                    self.ready.add(file)


class TreeSpool:
    """The disk side of a tree received through its stream's spool (``fd``, open for reading and writing): the
    tree under ``out``, the spool's blocks punched once spent, and the stream read back from both."""

    def __init__(self, out: Path, fd: int, tree_shape: Shape) -> None:
        self.shape = tree_shape
        self.fd = fd
        self.extraction = Extraction(tree_shape.entries, tree_shape.blocks)
        self.pieces = tree.extents(tree_shape.blocks, tree_shape.offsets)
        self.writer = TreeWriter(out, durable=True)
        self.can_punch = True
        """False once the file system refused a punch: the spool then keeps its bytes until the end."""

    def make_skeleton(self) -> None:
        """The directories and symlinks, first (again on a resume: what is in the way is replaced)."""
        for entry in self.shape.entries:
            if entry.type != "file":
                self.writer.place(entry)

    def in_place(self, files: Iterable[int]) -> list[int]:
        """Of ``files`` (placed by an earlier run), those still in place at their size."""
        return [file for file in files if self.writer.holds(self.shape.entries[file])]

    def fits(self, index: int, offset: int, length: int) -> bool:
        """Whether a block's place in the stream is the one the shape gives it."""
        return 0 <= index < len(self.shape.offsets) and (self.shape.offsets[index], self.shape.lengths[index]) == (
            offset, length)

    def write_files(self, files: Sequence[int]) -> None:
        """``files`` written into place from the stream, then their directories synced: all durable."""
        for file in files:
            entry = self.shape.entries[file]
            self.writer.place(entry, self.read, self.pieces.get(entry.path, ()))
        self.writer.sync()

    def punch(self, blocks: Sequence[int]) -> None:
        """``blocks``' bytes given back from the spool (the state and ``extraction`` already say they are punched:
        they are read back from the files from then on)."""
        for block in blocks:
            if self.can_punch and not punch_hole(self.fd, self.shape.offsets[block], self.shape.lengths[block]):
                self.can_punch = False

    def read(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of the stream at ``offset``: a punched block's from the files that hold it, the
        rest from the spool. ``OSError`` when a file cannot be read back."""
        offsets, lengths = self.shape.offsets, self.shape.lengths
        end = min(offset + length, offsets[-1] + lengths[-1] if offsets else 0)
        parts: list[bytes] = []
        while offset < end:
            block = bisect.bisect_right(offsets, offset) - 1
            stop = min(end, offsets[block] + lengths[block])
            if block in self.extraction.punched:
                parts.append(self._from_files(block, offset, stop))
            else:
                data = os.pread(self.fd, stop - offset, offset)
                parts.append(data)
                if len(data) < stop - offset:
                    break
            offset = stop
        return b"".join(parts)

    def _from_files(self, block: int, start: int, stop: int) -> bytes:
        parts = []
        position = self.shape.offsets[block]
        for piece in self.shape.blocks[block]:
            low, high = max(start, position), min(stop, position + piece.length)
            if low < high:
                parts.append(self.writer.read_file(piece.path, piece.offset + low - position, high - low))
            position += piece.length
        return b"".join(parts)

    def finish(self) -> None:
        """The directories' modes and times, last, deepest first."""
        self.writer.finish(self.shape.entries)

    def close(self) -> None:
        self.writer.close()
