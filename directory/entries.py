"""The directory's entries: what a depot (or a client) writes under the prefix, and the strict check of what a
reader finds there.

Keys (``PREFIX`` is ``/lnet/`` unless configured)::

    PREFIX depots/NAME     one depot, bound to its lease: ``DepotRecord``, JSON, kind "lnet-depot/1"
    PREFIX memory/CLIENT   one client's edge observations (``memory.py``), kind "lnet-memory/1"

Everything a reader takes from the directory goes through ``parse_depot_record``: an entry that is too big, not
JSON, of another kind, or with any field of the wrong type or out of range raises ``EntryError`` (the reader
skips it with a warning). Unknown keys inside an entry are ignored (a newer depot may say more), but every known
one is checked. Pure: no I/O, no clock (``updated`` is given).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_PREFIX",
    "DEPOT_KIND",
    "MAX_ENTRY_BYTES",
    "MAX_LINKS",
    "DepotRecord",
    "EntryError",
    "check_prefix",
    "depot_key",
    "depots_prefix",
    "parse_depot_record",
]

DEFAULT_PREFIX = "/lnet/"
DEPOT_KIND = "lnet-depot/1"
MAX_ENTRY_BYTES = 64 * 1024
"""An entry larger than this is refused by readers (and never written): 300 depots list in well under 1 s."""
MAX_LINKS = 64
"""Weather figures an entry carries at most (the freshest)."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""A depot's name: as the depots file's (``lnet.client.formats.overlay``)."""
_OPERATION = re.compile(r"^[a-z]{1,16}$")
_MAX_INT = 2**63 - 1
_LINK_NUMBERS = ("bytes", "seconds", "mbps", "count", "at", "streams", "block_bytes", "rtt_ms", "retrans",
                 "failures")


class EntryError(ValueError):
    """A directory entry that cannot be used; the message says which field and why (never the whole entry)."""


def check_prefix(prefix: str) -> str:
    """A key prefix: starts and ends with ``/``, printable ASCII, at most 128 characters."""
    if not (prefix.startswith("/") and prefix.endswith("/")) or len(prefix) > 128:
        raise ValueError(f"a directory prefix starts and ends with '/' (like {DEFAULT_PREFIX}), not {prefix!r}")
    if not all(33 <= ord(c) < 127 for c in prefix):
        raise ValueError("a directory prefix is printable ASCII without spaces")
    return prefix


def depots_prefix(prefix: str) -> bytes:
    return f"{prefix}depots/".encode()


def depot_key(prefix: str, name: str) -> bytes:
    if not _NAME.match(name):
        raise ValueError(f"a depot in the directory is named with letters, digits, '.', '_', '-' (at most 64), "
                         f"not {name[:70]!r}")
    return depots_prefix(prefix) + name.encode()


@dataclass(frozen=True)
class DepotRecord:
    """One depot as the directory lists it. ``links``: its network weather, as ``/v1/status`` gives it (the
    figures only: no error texts)."""

    name: str
    url: str
    capacity: int
    free: int
    max_allocation: int
    max_duration: float
    token_required_for: tuple[str, ...]
    version: str
    protocol: int
    updated: float
    links: tuple[Mapping[str, Any], ...] = field(default=())

    def __post_init__(self) -> None:
        _check_record(self)

    def encode(self) -> bytes:
        """The entry's JSON; raises ``EntryError`` if it would exceed ``MAX_ENTRY_BYTES`` (with links trimmed
        first, so only a pathological record does)."""
        document = {"kind": DEPOT_KIND, **asdict(self)}
        document["token_required_for"] = list(self.token_required_for)
        document["links"] = [dict(link) for link in self.links]
        data = json.dumps(document, separators=(",", ":"), allow_nan=False).encode()
        if len(data) > MAX_ENTRY_BYTES:
            raise EntryError(f"depot entry of {len(data)} bytes exceeds {MAX_ENTRY_BYTES}")
        return data

    def same_but_time(self, other: DepotRecord | None) -> bool:
        """True when ``other`` says what this does, apart from when it was written."""
        if other is None:
            return False
        return {**asdict(self), "updated": 0} == {**asdict(other), "updated": 0}


def weather_links(links: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """A depot's ``/v1/status`` ``links`` as an entry carries them: the freshest ``MAX_LINKS``, figures only."""
    kept = []
    for link in links:
        to, source = link.get("to"), link.get("source")
        if not isinstance(to, str) or not isinstance(source, str):
            continue
        figures: dict[str, Any] = {"to": to[:300], "source": source[:16]}
        for key in _LINK_NUMBERS:
            value = link.get(key)
            if _is_number(value):
                figures[key] = value
        kept.append(figures)
    kept.sort(key=lambda figures: -float(figures.get("at") or 0.0))
    return tuple(kept[:MAX_LINKS])


def parse_depot_record(key: bytes, value: bytes, prefix: str) -> DepotRecord:
    """The record under ``key``, checked; ``EntryError`` when anything is wrong with it."""
    base = depots_prefix(prefix)
    if not key.startswith(base):
        raise EntryError("not a depot's key")
    try:
        key_name = key[len(base):].decode("ascii")
    except UnicodeDecodeError:
        raise EntryError("a key that is not ASCII") from None
    if not _NAME.match(key_name):
        raise EntryError(f"bad depot name in the key: {key_name[:70]!r}")
    if len(value) > MAX_ENTRY_BYTES:
        raise EntryError(f"{key_name}: {len(value)} bytes, more than {MAX_ENTRY_BYTES}")
    try:
        document = json.loads(value, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise EntryError(f"{key_name}: not JSON") from None
    if not isinstance(document, dict):
        raise EntryError(f"{key_name}: not a JSON object")
    if document.get("kind") != DEPOT_KIND:
        raise EntryError(f"{key_name}: kind is not {DEPOT_KIND!r}")
    if document.get("name") != key_name:
        raise EntryError(f"{key_name}: the entry's name differs from its key's")
    required = document.get("token_required_for")
    if not isinstance(required, list):
        raise EntryError(f"{key_name}: token_required_for is not a list")
    links = document.get("links", [])
    if not isinstance(links, list) or len(links) > MAX_LINKS:
        raise EntryError(f"{key_name}: links is not a list of at most {MAX_LINKS}")
    try:
        return DepotRecord(
            name=key_name,
            url=_typed(document, "url", str),
            capacity=_typed(document, "capacity", int),
            free=_typed(document, "free", int),
            max_allocation=_typed(document, "max_allocation", int),
            max_duration=float(_typed(document, "max_duration", float)),
            token_required_for=tuple(required),
            version=_typed(document, "version", str),
            protocol=_typed(document, "protocol", int),
            updated=float(_typed(document, "updated", float)),
            links=tuple(_link(raw) for raw in links),
        )
    except EntryError as exc:
        raise EntryError(f"{key_name}: {exc}") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def _typed(document: Mapping[str, Any], key: str, kind: type) -> Any:
    value = document.get(key)
    if kind is str:
        ok = isinstance(value, str)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = _is_number(value)
    if not ok:
        raise EntryError(f"{key} is missing or not a {'number' if kind is float else kind.__name__}")
    return value


def _link(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise EntryError("a link is not an object")
    to, source = raw.get("to"), raw.get("source")
    if not isinstance(to, str) or len(to) > 300 or not isinstance(source, str) or len(source) > 16:
        raise EntryError("a link needs 'to' and 'source' (short strings)")
    figures: dict[str, Any] = {"to": to, "source": source}
    for key in _LINK_NUMBERS:
        value = raw.get(key)
        if value is None:
            continue
        if not _is_number(value) or value < 0:
            raise EntryError(f"a link's {key} is not a number of 0 or more")
        figures[key] = value
    return figures


def _check_record(record: DepotRecord) -> None:
    """Every field in range; the URL an http(s) base URL with no user, path or query."""
    if not _NAME.match(record.name):
        raise EntryError(f"bad depot name {record.name[:70]!r}")
    if len(record.url) > 300:
        raise EntryError("url is longer than 300 characters")
    try:
        parts = urlsplit(record.url)
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError:
        raise EntryError("url is not a URL") from None
    if (parts.scheme not in ("http", "https") or not parts.hostname or parts.username is not None
            or parts.password is not None or parts.path not in ("", "/") or parts.query or parts.fragment):
        raise EntryError("url must be http(s)://HOST[:PORT]")
    for name in ("capacity", "free", "max_allocation", "protocol"):
        value = getattr(record, name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_INT:
            raise EntryError(f"{name} must be a whole number of 0 or more")
    if record.capacity < 1 or record.max_allocation < 1:
        raise EntryError("capacity and max_allocation must be at least 1")
    if record.free > record.capacity:
        raise EntryError("free exceeds capacity")
    if not _is_number(record.max_duration) or record.max_duration <= 0:
        raise EntryError("max_duration must be more than 0")
    if not _is_number(record.updated) or record.updated < 0:
        raise EntryError("updated must be a time")
    if len(record.token_required_for) > 16 or not all(
        isinstance(op, str) and _OPERATION.match(op) for op in record.token_required_for
    ):
        raise EntryError("token_required_for must be a short list of operation names")
    if not isinstance(record.version, str) or not 0 < len(record.version) <= 32:
        raise EntryError("version must be 1 to 32 characters")
    if len(record.links) > MAX_LINKS:
        raise EntryError(f"more than {MAX_LINKS} links")
