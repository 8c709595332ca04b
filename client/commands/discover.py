"""The overlay a command uses when a depot directory is named: the depots file's depots, then every depot
registered in the directory (docs/directory.md), with the last list seen kept for when the directory is down.

``merge`` (pure) joins the two: the file's entries come first and keep their tokens; a registered depot is added
under its name unless the file already names that depot or that URL (the file wins, and a note says so), or it is
the client's own vertex, or requires an operator token (directory depots carry none: a depot that needs its token
is used through the depots file, which gives it). ``DirectoryCache`` keeps the last listing in the client's state
directory (beside its edge memory; 0600). ``discover`` does it all: a listing from the directory, else the cached
one with its age (one note), else ``DirectoryUnavailable``.

Every entry read, from the directory or from the cache, is checked (``lnet.directory.entries``): one that is
malformed or hostile is left out with a note and never stops the command. Directory depots carry no tokens.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lnet.client.formats.overlay import DepotEntry, DirectoryRef, Overlay, OverlayError, depots_path
from lnet.directory.entries import DepotRecord, EntryError, depot_key, parse_depot_record
from lnet.directory.etcd import EtcdSettings, parse_endpoints

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_HERE",
    "DirectoryCache",
    "DirectoryUnavailable",
    "Discovered",
    "directory_ref",
    "discover",
    "etcd_settings",
    "merge",
]

DEFAULT_HERE = "client"
"""The client's vertex when no depots file says (``here``): only a directory names the depots."""
_CACHE_KIND = "lnet-directory-cache/1"


class DirectoryUnavailable(Exception):
    """The directory does not answer and no list of it was ever kept here."""


def directory_ref(flag: str | None, overlay: Overlay | None, environ: Mapping[str, str]) -> DirectoryRef | None:
    """``--directory URL`` wins (with the file's credentials if it names the same endpoints... or none), then the
    depots file's ``directory``, then ``$LNET_DIRECTORY``."""
    file_ref = overlay.directory if overlay is not None else None
    raw = flag if flag is not None else environ.get("LNET_DIRECTORY") if file_ref is None else None
    if raw is None:
        return file_ref
    try:
        endpoints = parse_endpoints(raw)
    except ValueError as exc:
        raise OverlayError(f"--directory: {exc}") from None
    if file_ref is not None:
        return replace(file_ref, endpoints=endpoints)  # the file's prefix and credentials still apply
    return DirectoryRef(endpoints)


def etcd_settings(ref: DirectoryRef, timeout_s: float) -> EtcdSettings:
    password = None
    if ref.password_file is not None:
        try:
            password = ref.password_file.read_text().strip()
        except OSError as exc:
            raise OverlayError(f"directory password_file {ref.password_file}: {exc.strerror}") from None
    try:
        return EtcdSettings(ref.endpoints, ref.user, password, ref.cafile, timeout_s=timeout_s)
    except ValueError as exc:
        raise OverlayError(f"directory: {exc}") from None


def merge(overlay: Overlay, records: Mapping[str, DepotRecord]) -> tuple[Overlay, list[str]]:
    """The file's depots, then the directory's (see the module's docstring); notes for what was left out."""
    depots: dict[str, DepotEntry] = dict(overlay.depots)
    urls = {entry.url.rstrip("/") for entry in depots.values()}
    notes: list[str] = []
    for name, record in sorted(records.items()):
        url = record.url.rstrip("/")
        if name in overlay.depots:
            if overlay.depots[name].url.rstrip("/") != url:
                notes.append(f"directory depot {name} ({url}) is named in {overlay.source} with another URL: "
                             "using the file's")
            continue
        if name == overlay.here:  # a depot on the client's own host, under its vertex name: the client's vertex
            continue
        if url in urls:
            continue  # the file names it under another name (with its token): one vertex, the file's
        if record.token_required_for:
            notes.append(f"directory depot {name} requires its operator token for "
                         f"{', '.join(record.token_required_for)}: left out (name it in the depots file with its "
                         "token to use it)")
            continue
        depots[name] = DepotEntry(name, url)
        urls.add(url)
    return replace(overlay, depots=depots), notes


@dataclass(frozen=True)
class DirectoryCache:
    """The last listing of one directory (endpoints and prefix), in a file of its own."""

    path: Path

    @classmethod
    def beside(cls, state_dir: Path, ref: DirectoryRef) -> DirectoryCache:
        ident = hashlib.sha256(f"{','.join(ref.endpoints)}|{ref.prefix}".encode()).hexdigest()[:16]
        return cls(state_dir / f"directory-{ident}.json")

    def save(self, records: Mapping[str, DepotRecord], revision: int, now: float) -> None:
        document = {
            "kind": _CACHE_KIND,
            "saved": now,
            "revision": revision,
            "entries": {name: record.encode().decode() for name, record in records.items()},
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".directory-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(document, out)
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def load(self, prefix: str) -> tuple[dict[str, DepotRecord], float, list[str]] | None:
        """The records kept (each checked again), when they were saved, and notes for those left out; None when
        there is no usable cache."""
        try:
            document = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(document, dict) or document.get("kind") != _CACHE_KIND:
            return None
        saved, entries = document.get("saved"), document.get("entries")
        if not isinstance(saved, int | float) or not isinstance(entries, dict):
            return None
        records: dict[str, DepotRecord] = {}
        notes: list[str] = []
        for name, text in entries.items():
            try:
                if not isinstance(text, str):
                    raise EntryError("not a string")
                records[name] = parse_depot_record(depot_key(prefix, name), text.encode(), prefix)
            except (EntryError, ValueError) as exc:
                notes.append(f"cached directory entry {str(name)[:70]!r} skipped: {exc}")
        return records, float(saved), notes


@dataclass
class Discovered:
    """The overlay to use, and where its directory depots came from."""

    overlay: Overlay
    ref: DirectoryRef | None = None
    records: dict[str, DepotRecord] = field(default_factory=dict)
    revision: int | None = None
    """The directory's revision the listing is as of (None: from the cache, or no directory)."""
    cache_age_s: float | None = None
    notes: list[str] = field(default_factory=list)


async def discover(
    depots: Path | None,
    directory: str | None,
    *,
    state_dir: Path,
    timeout_s: float = 5.0,
    environ: Mapping[str, str] | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
    wall: float | None = None,
) -> Discovered:
    """The overlay of the depots file and the directory. Raises ``OverlayError`` for a depots file or directory
    setting that cannot be used, ``DirectoryUnavailable`` when the directory is needed, does not answer, and no
    list of it is kept."""
    from lnet.directory.etcd import EtcdClient, EtcdError, EtcdUnavailable
    from lnet.directory.listing import list_depots

    env = os.environ if environ is None else environ
    now = time.time() if wall is None else wall
    chosen = depots_path(depots, env)
    overlay: Overlay | None = None
    if depots is not None or chosen.exists() or (directory is None and not env.get("LNET_DIRECTORY")):
        overlay = Overlay.load(depots, env)
    ref = directory_ref(directory, overlay, env)
    if ref is None:
        assert overlay is not None
        return Discovered(overlay)
    if overlay is None:
        overlay = Overlay(DEFAULT_HERE, {}, None, ref)
    cache = DirectoryCache.beside(state_dir, ref)
    settings = etcd_settings(ref, timeout_s)
    try:
        async with EtcdClient(settings, transport=transport) as client:
            listing = await list_depots(client, ref.prefix)
    except (EtcdUnavailable, EtcdError) as exc:
        kept = cache.load(ref.prefix)
        if kept is None:
            if overlay.depots:
                return Discovered(overlay, ref, notes=[f"the directory cannot be used ({exc}), and no list of it is "
                                                       f"kept here: using the depots file's depots alone"])
            raise DirectoryUnavailable(f"the directory cannot be used ({exc}), no list of it is kept here, and no "
                                       "depots file names a depot") from None
        records, saved, notes = kept
        age = max(0.0, now - saved)
        merged, more = merge(overlay, records)
        notes = [f"the directory cannot be used ({exc}); using the list it gave {_age(age)} ago "
                 f"({len(records)} depots)", *notes, *more]
        return Discovered(merged, ref, records, None, age, notes)
    notes = [f"directory entry {line} (skipped)" for line in listing.skipped]
    try:
        cache.save(listing.depots, listing.revision, now)
    except OSError as exc:
        notes.append(f"cannot keep the directory's list in {cache.path}: {exc.strerror}")
    merged, more = merge(overlay, listing.depots)
    return Discovered(merged, ref, dict(listing.depots), listing.revision, None, [*notes, *more])


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def record_fields(record: DepotRecord) -> dict[str, Any]:
    """A record as ``lnet depots --json`` shows it."""
    return {
        "url": record.url, "capacity": record.capacity, "free": record.free, "max_allocation": record.max_allocation,
        "max_duration": record.max_duration, "token_required_for": list(record.token_required_for),
        "version": record.version, "protocol": record.protocol, "updated": record.updated,
    }
