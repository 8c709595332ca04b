"""Datasets by name, the directory's information service: ``PREFIX datasets/NAME`` lists where a dataset's
replicas are (HTTP mirrors, or the receive URL of a finished lnet-send) until an expiry.

A replica URL may carry a capability (a depot data URL is one): such entries are readable only by the etcd roles
allowed to read ``PREFIX datasets/`` (docs/directory.md, "Roles"), and this module never logs a source whole.
Pure: the entry schema and its strict check.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from .entries import MAX_ENTRY_BYTES, EntryError

__all__ = ["DATASET_KIND", "MAX_SOURCES", "Dataset", "dataset_key", "datasets_prefix", "parse_dataset"]

DATASET_KIND = "lnet-dataset/1"
MAX_SOURCES = 64
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def datasets_prefix(prefix: str) -> bytes:
    return f"{prefix}datasets/".encode()


def dataset_key(prefix: str, name: str) -> bytes:
    if not _NAME.match(name):
        raise ValueError(f"a dataset name is letters, digits, '.', '_', '-' (at most 128), not {name[:80]!r}")
    return datasets_prefix(prefix) + name.encode()


@dataclass(frozen=True)
class Dataset:
    name: str
    sources: tuple[str, ...]
    published: float
    expires: float
    sha256: str | None = None

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise EntryError("bad dataset name")
        if not 1 <= len(self.sources) <= MAX_SOURCES or len(set(self.sources)) != len(self.sources):
            raise EntryError(f"a dataset has 1 to {MAX_SOURCES} different sources")
        for source in self.sources:
            _check_source(source)
        for value in (self.published, self.expires):
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise EntryError("published and expires are times")
        if self.expires <= self.published:
            raise EntryError("expires before it was published")
        if self.sha256 is not None and not _SHA256.match(self.sha256):
            raise EntryError("sha256 is 64 lower-case hex digits")

    def encode(self) -> bytes:
        document = {"kind": DATASET_KIND, "name": self.name, "sources": list(self.sources),
                    "published": self.published, "expires": self.expires,
                    **({} if self.sha256 is None else {"sha256": self.sha256})}
        data = json.dumps(document, separators=(",", ":"), allow_nan=False).encode()
        if len(data) > MAX_ENTRY_BYTES:
            raise EntryError("the dataset entry is too big")
        return data


def _check_source(source: object) -> None:
    if not isinstance(source, str) or len(source) > 2048:
        raise EntryError("a source is a URL of at most 2048 characters")
    try:
        parts = urlsplit(source)
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError:
        raise EntryError("a source is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        raise EntryError("a source is an http(s) URL without credentials")


def parse_dataset(key: bytes, value: bytes, prefix: str, *, now: float) -> Dataset:
    """The entry under ``key``, checked; ``EntryError`` if anything is wrong with it, or it has expired."""
    base = datasets_prefix(prefix)
    name = key[len(base):].decode("ascii", errors="replace") if key.startswith(base) else ""
    if not _NAME.match(name):
        raise EntryError("not a dataset's key")
    if len(value) > MAX_ENTRY_BYTES:
        raise EntryError(f"{name}: too big")
    try:
        document = json.loads(value, parse_constant=_refuse)
    except (ValueError, RecursionError):
        raise EntryError(f"{name}: not JSON") from None
    if not isinstance(document, dict) or document.get("kind") != DATASET_KIND or document.get("name") != name:
        raise EntryError(f"{name}: not an {DATASET_KIND} entry of this name")
    sources, sha256 = document.get("sources"), document.get("sha256")
    if not isinstance(sources, list) or (sha256 is not None and not isinstance(sha256, str)):
        raise EntryError(f"{name}: sources is not a list")
    try:
        dataset = Dataset(name, tuple(sources), document.get("published"), document.get("expires"),  # type: ignore[arg-type]
                          sha256)
    except EntryError as exc:
        raise EntryError(f"{name}: {exc}") from None
    if dataset.expires <= now:
        raise EntryError(f"{name}: expired")
    return dataset


def _refuse(name: str) -> float:
    raise ValueError(name)
