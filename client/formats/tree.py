"""Directory trees as lnet carries them: walking a tree, the tree manifest, and rebuilding a tree from its stream.

``lnet-send DIR`` walks the tree (``walk``: symlinks recorded, never followed), lets the small-file planner
(``lnet.client.engines.smallfiles``) order and pack its files into blocks, and sends those blocks as one stream
(``lnet.client.sending.tree.PackedTree``). The tree manifest (``"format": "lnet-tree/1"``) holds the entries
(names, types, sizes, modes, modification times, symlink targets), which pieces of which files each block holds,
and the ordinary file manifest of the packed stream (``lnet-manifest/1``: its blocks, hashes and read
capabilities). ``lnet-get`` fetches that stream as it fetches a file (verified, resumable), then ``rebuild`` puts
the tree in place.

A manifest may come from anyone. ``parse`` refuses every entry that could land outside the target directory
(absolute paths, ``..``, ``.``, empty components, NUL), duplicates, an entry whose parent is not a directory listed
before it (so no path goes through a symlink or a file, including one made earlier by the same manifest), and
packing that does not cover each file exactly. ``rebuild`` also opens every directory component relative to its
parent with ``O_NOFOLLOW``, so a symlink already in the target is refused rather than followed; it writes each file
under a temporary name, sets its mode and time after its content, and sets directories' modes and times last.

This module does no network I/O.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from lnet.client.formats import manifest as file_manifest
from lnet.client.formats.documents import check_object, load_document, read_json, write_private_file
from lnet.client.formats.manifest import MAX_FILE_SIZE, Manifest, ManifestError, whole_number
from lnet.units.numbers import kind, show

__all__ = [
    "FORMAT",
    "Entry",
    "RebuildError",
    "StreamRead",
    "TreeManifest",
    "TreePiece",
    "TreeWriter",
    "check_path",
    "extents",
    "is_tree_document",
    "load",
    "parse",
    "parse_entries",
    "parse_pieces",
    "rebuild",
    "walk",
]

FORMAT = "lnet-tree/1"
MAX_PATH = 4096
MAX_ENTRIES = 10_000_000
MAX_MTIME_NS = 2**63 - 1
PART_SUFFIX = ".lnet-part"
EntryType = Literal["dir", "file", "symlink"]
_ENTRY_FIELDS: dict[str, tuple[str, ...]] = {
    "dir": ("path", "type", "mode", "mtime_ns"),
    "file": ("path", "type", "mode", "mtime_ns", "size"),
    "symlink": ("path", "type", "target", "mtime_ns"),
}
_FIELDS = ("format", "name", "created", "entries", "blocks", "stream")
_PIECE_FIELDS = ("path", "offset", "length")


class RebuildError(Exception):
    """The tree cannot be put in place (an entry in the way, a symlink on the path, a disk error)."""


@dataclass(frozen=True)
class Entry:
    """One thing in the tree: ``path`` is relative, ``/``-separated; ``mode`` holds permission bits only."""

    path: str
    type: EntryType
    mode: int
    mtime_ns: int
    size: int = 0
    target: str = ""

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {"path": self.path, "type": self.type}
        if self.type == "symlink":
            document["target"] = self.target
        else:
            document["mode"] = self.mode
        document["mtime_ns"] = self.mtime_ns
        if self.type == "file":
            document["size"] = self.size
        return document


# -- walking ------------------------------------------------------------------------------------------------------


def walk(root: Path) -> list[Entry]:
    """Every directory, regular file and symlink under ``root`` (not ``root`` itself), parents before children,
    names sorted; symlinks are recorded, not followed. Anything else (a socket, a device) is a ``ValueError``."""
    entries: list[Entry] = []

    def visit(directory: Path, prefix: str) -> None:
        with os.scandir(directory) as scan:
            names = sorted(entry.name for entry in scan)
        for name in names:
            relative = f"{prefix}{name}"
            full = directory / name
            info = os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                entries.append(Entry(relative, "symlink", 0, info.st_mtime_ns, target=os.readlink(full)))
            elif stat.S_ISDIR(info.st_mode):
                entries.append(Entry(relative, "dir", stat.S_IMODE(info.st_mode), info.st_mtime_ns))
                visit(full, f"{relative}/")
            elif stat.S_ISREG(info.st_mode):
                entries.append(Entry(relative, "file", stat.S_IMODE(info.st_mode), info.st_mtime_ns, info.st_size))
            else:
                raise ValueError(f"{full}: not a regular file, directory or symlink")

    visit(root, "")
    return entries


# -- the tree manifest -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TreePiece:
    path: str
    offset: int
    length: int


@dataclass(frozen=True, repr=False)
class TreeManifest:
    """A tree as lnet delivered it: its entries, the pieces each stream block holds, and the stream's manifest."""

    name: str
    created: float
    entries: tuple[Entry, ...]
    blocks: tuple[tuple[TreePiece, ...], ...]
    stream: Manifest

    def __repr__(self) -> str:  # without the stream's capabilities
        return f"TreeManifest(name={self.name!r}, entries={len(self.entries)}, stream={self.stream!r})"

    @property
    def size(self) -> int:
        return self.stream.size

    def files(self) -> list[Entry]:
        return [entry for entry in self.entries if entry.type == "file"]

    def extents(self) -> dict[str, list[tuple[int, int, int]]]:
        """For each file path, its pieces as ``(stream offset, file offset, length)``."""
        return extents(self.blocks, [block.offset for block in self.stream.blocks])

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "name": self.name,
            "created": self.created,
            "entries": [entry.to_dict() for entry in self.entries],
            "blocks": [
                [{"path": p.path, "offset": p.offset, "length": p.length} for p in pieces] for pieces in self.blocks
            ],
            "stream": self.stream.to_dict(),
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write atomically, mode 0600 (the stream's read capabilities are secrets); refuses what ``load`` would."""
        text = json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n"
        parse(json.loads(text))
        write_private_file(Path(path), text.encode())


def extents(blocks: Sequence[Sequence[TreePiece]], offsets: Sequence[int]) -> dict[str, list[tuple[int, int, int]]]:
    """For each file path, its pieces as ``(stream offset, file offset, length)``, the stream's blocks starting at
    ``offsets``."""
    found: dict[str, list[tuple[int, int, int]]] = {}
    for position, pieces in zip(offsets, blocks, strict=True):
        for piece in pieces:
            found.setdefault(piece.path, []).append((position, piece.offset, piece.length))
            position += piece.length
    return found


def is_tree_document(path: Path) -> bool:
    """Whether the JSON document at ``path`` says it is a tree manifest (anything unreadable: no)."""
    try:
        document = read_json(path, file_manifest.MAX_MANIFEST_BYTES, ManifestError, "manifest")
    except ManifestError:
        return False
    return isinstance(document, dict) and document.get("format") == FORMAT


def load(path: str | os.PathLike[str]) -> TreeManifest:
    return load_document(Path(path), file_manifest.MAX_MANIFEST_BYTES, ManifestError, "manifest", parse)


def check_path(value: Any, where: str) -> str:
    """A relative path that stays inside the target: ``/``-separated, no empty, ``.`` or ``..`` component, no NUL."""
    if not isinstance(value, str) or not value or len(value) > MAX_PATH:
        raise ManifestError(f"{where} must be a non-empty string of at most {MAX_PATH} characters")
    if "\0" in value:
        raise ManifestError(f"{where} {show(value)} contains NUL")
    if value.startswith("/"):
        raise ManifestError(f"{where} {show(value)} is absolute: it would land outside the target directory")
    parts = value.split("/")
    if ".." in parts:
        raise ManifestError(f"{where} {show(value)} climbs with '..': it would land outside the target directory")
    if "" in parts or "." in parts:
        raise ManifestError(f"{where} {show(value)} has an empty or '.' component")
    return value


def parse(document: Any) -> TreeManifest:
    """Validate a decoded tree manifest and build the ``TreeManifest``; any problem is a ``ManifestError``."""
    top = check_object(document, "the manifest", _FIELDS, ManifestError)
    if top["format"] != FORMAT:
        raise ManifestError(f"format is {show(top['format'])}, expected {FORMAT!r}")
    name = top["name"]
    if not isinstance(name, str) or not name or name in (".", "..") or any(c in name for c in "/\0"):
        raise ManifestError(f"name {show(name)} is not a plain directory name")
    created = top["created"]
    if not isinstance(created, int | float) or isinstance(created, bool) or not 0 <= created < 253402300800:
        raise ManifestError(f"created is {show(created)}, not a time")
    entries = parse_entries(top["entries"])
    try:
        stream = file_manifest.parse(top["stream"])
    except ManifestError as exc:
        raise ManifestError(f"stream: {exc}") from None
    blocks = parse_pieces(top["blocks"], entries, [block.length for block in stream.blocks])
    return TreeManifest(name, float(created), entries, blocks, stream)


def parse_entries(raw_entries: Any) -> tuple[Entry, ...]:
    """A tree's entries, each checked (``check_path``), none listed twice, each one's parent a directory listed
    before it; any problem is a ``ManifestError``."""
    if not isinstance(raw_entries, list) or len(raw_entries) > MAX_ENTRIES:
        raise ManifestError(f"entries must be a list of at most {MAX_ENTRIES}")
    entries: list[Entry] = []
    types: dict[str, EntryType] = {}
    for i, raw in enumerate(raw_entries):
        entry = _entry(raw, f"entries[{i}]")
        if entry.path in types:
            raise ManifestError(f"entries[{i}] {show(entry.path)} is listed twice")
        parent = entry.path.rpartition("/")[0]
        if parent and types.get(parent) != "dir":
            what = "a symlink" if types.get(parent) == "symlink" else "not a directory listed before it"
            raise ManifestError(f"entries[{i}] {show(entry.path)}: its parent {show(parent)} is {what}")
        types[entry.path] = entry.type
        entries.append(entry)
    return tuple(entries)


def parse_pieces(raw_blocks: Any, entries: Sequence[Entry], lengths: Sequence[int] | None
                 ) -> tuple[tuple[TreePiece, ...], ...]:
    """The pieces of files each stream block holds, checked against ``entries``: every file covered exactly, in
    order. With ``lengths`` (the stream's blocks'), one list of pieces per block, holding its length; without, as
    many blocks as listed (their lengths are then the pieces' sums, for the caller to check)."""
    if not isinstance(raw_blocks, list) or (lengths is not None and len(raw_blocks) != len(lengths)):
        wanted = "" if lengths is None else f" with one entry per stream block ({len(lengths)})"
        raise ManifestError(f"blocks must be a list{wanted}")
    sizes = {entry.path: entry.size for entry in entries if entry.type == "file"}
    filled = dict.fromkeys(sizes, 0)
    blocks = []
    for i, raw in enumerate(raw_blocks):
        if not isinstance(raw, list) or not raw:
            raise ManifestError(f"blocks[{i}] must be a non-empty list of pieces")
        pieces = []
        for j, raw_piece in enumerate(raw):
            where = f"blocks[{i}][{j}]"
            fields = check_object(raw_piece, where, _PIECE_FIELDS, ManifestError)
            path = fields["path"]
            if not isinstance(path, str) or path not in sizes:
                raise ManifestError(f"{where}.path {show(path)} is not a file of the tree")
            offset = whole_number(fields["offset"], f"{where}.offset", 0, MAX_FILE_SIZE)
            length = whole_number(fields["length"], f"{where}.length", 1, MAX_FILE_SIZE)
            if offset != filled[path] or offset + length > sizes[path]:
                raise ManifestError(
                    f"{where}: bytes [{offset}, {offset + length}) of {show(path)} do not follow on its "
                    f"first {filled[path]} (of {sizes[path]})"
                )
            filled[path] = offset + length
            pieces.append(TreePiece(path, offset, length))
        if lengths is not None and sum(p.length for p in pieces) != lengths[i]:
            raise ManifestError(f"blocks[{i}]: the pieces hold {sum(p.length for p in pieces)} bytes, "
                                f"the stream's block {lengths[i]}")
        blocks.append(tuple(pieces))
    short = [path for path, size in sizes.items() if filled[path] != size]
    if short:
        raise ManifestError(f"the blocks do not hold all of {show(short[0])} ({len(short)} file(s) short)")
    return tuple(blocks)


def _entry(raw: Any, where: str) -> Entry:
    if not isinstance(raw, dict):
        raise ManifestError(f"{where} must be an object, not {kind(raw)}")
    entry_type = raw.get("type")
    if entry_type not in _ENTRY_FIELDS:
        raise ManifestError(f"{where}.type is {show(entry_type)}, expected dir, file or symlink")
    fields = check_object(raw, where, _ENTRY_FIELDS[entry_type], ManifestError)
    path = check_path(fields["path"], f"{where}.path")
    mtime_ns = whole_number(fields["mtime_ns"], f"{where}.mtime_ns", -MAX_MTIME_NS, MAX_MTIME_NS)
    if entry_type == "symlink":
        target = fields["target"]
        if not isinstance(target, str) or not target or len(target) > MAX_PATH or "\0" in target:
            raise ManifestError(f"{where}.target must be a non-empty string without NUL")
        return Entry(path, "symlink", 0, mtime_ns, target=target)
    mode = whole_number(fields["mode"], f"{where}.mode", 0, 0o7777)
    if entry_type == "dir":
        return Entry(path, "dir", mode, mtime_ns)
    return Entry(path, "file", mode, mtime_ns, whole_number(fields["size"], f"{where}.size", 0, MAX_FILE_SIZE))


# -- rebuilding ---------------------------------------------------------------------------------------------------

RESTORED_MODE_BITS = 0o1777
"""Permission bits and the sticky bit; setuid and setgid are not restored from a manifest anyone may have made."""


class _Directories:
    """Open descriptors of the target's directories, each opened relative to its parent with ``O_NOFOLLOW``."""

    def __init__(self, root_fd: int) -> None:
        self.fds = {"": root_fd}

    def parent_of(self, path: str) -> tuple[int, str]:
        parent, _, name = path.rpartition("/")
        return self.open(parent), name

    def open(self, path: str) -> int:
        if path not in self.fds:
            parent_fd, name = self.parent_of(path)
            try:
                self.fds[path] = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                         dir_fd=parent_fd)
            except OSError as exc:
                raise RebuildError(f"{path}: not a directory one can enter without following a symlink "
                                   f"({exc.strerror})") from None
        return self.fds[path]

    def close(self) -> None:
        for path, fd in self.fds.items():
            if path:
                os.close(fd)


StreamRead = Callable[[int, int], bytes]
"""``read(offset, length)``: up to ``length`` bytes of the packed stream from ``offset``."""


class TreeWriter:
    """Puts a tree's entries in place under ``out`` one at a time, parents first: the whole tree at once
    (``rebuild``), or each file as the stream's blocks that hold it arrive (``lnet-get URL --follow``).

    ``out`` is made if missing; what is already there under an entry's name is replaced (a re-run finishes the job),
    except a directory in a file's place or a symlink on any path, which is refused (``RebuildError``). Every
    directory is opened relative to its parent with ``O_NOFOLLOW``, so nothing is written outside ``out``; a file
    is written under a temporary name, its mode and time set after its content, then renamed; directories stay
    0700 until ``finish`` sets their modes and times, deepest first (a read-only directory must not stop its
    children, nor a child's arrival its time). With ``durable``, each file is fsynced before its rename and
    ``sync`` fsyncs the directories written into since: for a caller that then drops the only other copy."""

    def __init__(self, out: Path, *, durable: bool = False) -> None:
        out.mkdir(exist_ok=True)
        self.out = out
        self.durable = durable
        self._root = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._directories = _Directories(self._root)
        self._touched: set[str] = set()

    def __enter__(self) -> TreeWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def place(self, entry: Entry, read: StreamRead | None = None,
              pieces: Sequence[tuple[int, int, int]] = ()) -> None:
        """``entry`` in place; a file's bytes read with ``read`` from its ``pieces``, each ``(stream offset, file
        offset, length)`` (``TreeManifest.extents``)."""
        parent_fd, name = self._directories.parent_of(entry.path)
        try:
            if entry.type == "dir":
                _make_directory(parent_fd, name, entry)
                self._directories.open(entry.path)
            elif entry.type == "file":
                _write_file(parent_fd, name, entry, read, pieces, self.durable)
            else:
                _make_symlink(parent_fd, name, entry)
        except OSError as exc:
            raise RebuildError(f"{self.out / entry.path}: {exc.strerror or exc}") from None
        self._touched.add(entry.path.rpartition("/")[0])

    def sync(self) -> None:
        """The renames since the last ``sync`` on disk: each directory written into, fsynced."""
        for path in sorted(self._touched):
            os.fsync(self._directories.open(path))
        self._touched.clear()

    def holds(self, entry: Entry) -> bool:
        """Whether a regular file of ``entry``'s size is in place at its path (no symlink followed)."""
        try:
            parent_fd, name = self._directories.parent_of(entry.path)
            info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except (RebuildError, OSError):
            return False
        return stat.S_ISREG(info.st_mode) and info.st_size == entry.size

    def read_file(self, path: str, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` of the file in place at ``path`` (no symlink followed); ``OSError`` when it
        cannot be read or is shorter."""
        try:
            parent_fd, name = self._directories.parent_of(path)
        except RebuildError as exc:
            raise OSError(str(exc)) from None
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
        try:
            return b"".join(chunk for _, chunk in _chunks(lambda at, n: os.pread(fd, n, at), offset, length))
        except RebuildError as exc:
            raise OSError(f"{path}: {exc}") from None
        finally:
            os.close(fd)

    def finish(self, entries: Sequence[Entry]) -> None:
        """The directories' modes and times, last, deepest first."""
        for entry in reversed(entries):
            if entry.type == "dir":
                fd = self._directories.open(entry.path)
                os.chmod(fd, entry.mode & RESTORED_MODE_BITS)
                os.utime(fd, ns=(entry.mtime_ns, entry.mtime_ns))

    def close(self) -> None:
        if self._root >= 0:
            self._directories.close()
            os.close(self._root)
            self._root = -1


def rebuild(tree: TreeManifest, stream_path: Path, out: Path, on_file: Callable[[Entry], None] | None = None) -> None:
    """Put ``tree`` in place under ``out`` from the verified stream at ``stream_path`` (as ``TreeWriter`` says:
    what is in the way is replaced, a symlink on a path refused, nothing written outside ``out``)."""
    pieces = tree.extents()
    with TreeWriter(out) as writer:
        source = os.open(stream_path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            for entry in tree.entries:
                writer.place(entry, lambda offset, length: os.pread(source, length, offset),
                             pieces.get(entry.path, ()))
                if on_file is not None:
                    on_file(entry)
            writer.finish(tree.entries)
        finally:
            os.close(source)


def _make_directory(parent_fd: int, name: str, entry: Entry) -> None:
    try:
        os.mkdir(name, 0o700, dir_fd=parent_fd)
    except FileExistsError:
        info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):
            raise RebuildError(f"{entry.path}: something that is not a directory is in the way") from None


def _write_file(parent_fd: int, name: str, entry: Entry, read: StreamRead | None,
                pieces: Sequence[tuple[int, int, int]], durable: bool) -> None:
    part = f".{name}{PART_SUFFIX}"[:255]
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent_fd)
    try:
        for stream_offset, file_offset, length in pieces:
            assert read is not None, "a file with pieces needs the stream"
            for chunk_offset, chunk in _chunks(read, stream_offset, length):
                os.pwrite(fd, chunk, file_offset + chunk_offset)
        os.ftruncate(fd, entry.size)
        os.chmod(fd, entry.mode & RESTORED_MODE_BITS)
        os.utime(fd, ns=(entry.mtime_ns, entry.mtime_ns))
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(part, dir_fd=parent_fd)
        raise
    os.close(fd)
    try:
        os.rename(part, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
    except IsADirectoryError:
        os.unlink(part, dir_fd=parent_fd)
        raise RebuildError(f"{entry.path}: a directory is in the way") from None


def _make_symlink(parent_fd: int, name: str, entry: Entry) -> None:
    temporary = f".{name}{PART_SUFFIX}"[:255]
    try:
        os.unlink(temporary, dir_fd=parent_fd)
    except FileNotFoundError:
        pass
    os.symlink(entry.target, temporary, dir_fd=parent_fd)
    os.utime(temporary, ns=(entry.mtime_ns, entry.mtime_ns), dir_fd=parent_fd, follow_symlinks=False)
    try:
        os.rename(temporary, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
    except IsADirectoryError:
        os.unlink(temporary, dir_fd=parent_fd)
        raise RebuildError(f"{entry.path}: a directory is in the way") from None


def _chunks(read: StreamRead, offset: int, length: int, size: int = 4 * 1024 * 1024) -> Iterator[tuple[int, bytes]]:
    done = 0
    while done < length:
        data = read(offset + done, min(size, length - done))
        if not data:
            raise RebuildError("the stream file is shorter than its manifest")
        yield done, data
        done += len(data)
