"""The overlay's shared memory: what clients' transfers measured, published under the prefix so that a client
with no memory of its own starts from the overlay's.

``PREFIX memory/CLIENT`` holds one client's edge records, as its router keeps them (``lnet.scheduler``'s
``EdgeEstimate``: the per-stream rate, what aging raised it by, when it was measured, how many samples, whether it
failed, a ceiling), between vertex names: no file names, no capabilities, no URLs. At most ``MAX_EDGES`` edges
(the most recently measured) and ``MAX_ENTRY_BYTES``. Readers check every entry strictly; a bad one is skipped.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .entries import MAX_ENTRY_BYTES, EntryError

__all__ = [
    "MAX_EDGES",
    "MEMORY_KIND",
    "EdgeRecord",
    "encode_memory",
    "memory_key",
    "memory_prefix",
    "newest_records",
    "parse_memory",
]

MEMORY_KIND = "lnet-memory/1"
MAX_EDGES = 256
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class EdgeRecord:
    u: str
    v: str
    throughput_bps: float
    measured_at: float
    samples: int
    failed: bool = False
    boost: float = 1.0
    ceiling_bps: float | None = None


def memory_prefix(prefix: str) -> bytes:
    return f"{prefix}memory/".encode()


def memory_key(prefix: str, client: str) -> bytes:
    if not _NAME.match(client):
        raise ValueError(f"bad client name {client!r}")
    return memory_prefix(prefix) + client.encode()


def encode_memory(client: str, records: Iterable[EdgeRecord], updated: float) -> bytes:
    """The entry of ``client``: its most recently measured ``MAX_EDGES`` records."""
    kept = [r for r in sorted(records, key=lambda r: -r.measured_at) if _NAME.match(r.u) and _NAME.match(r.v)]
    kept = kept[:MAX_EDGES]
    while True:
        data = _encode(client, kept, updated)
        if len(data) <= MAX_ENTRY_BYTES:
            return data
        kept = kept[: len(kept) // 2]  # long names: the freshest half, until it fits


def _encode(client: str, kept: list[EdgeRecord], updated: float) -> bytes:
    document = {
        "kind": MEMORY_KIND,
        "client": client,
        "updated": updated,
        "edges": [
            {"from": r.u, "to": r.v, "throughput_bps": r.throughput_bps, "measured_at": r.measured_at,
             "samples": r.samples, "failed": r.failed, "boost": r.boost,
             **({} if r.ceiling_bps is None else {"ceiling_bps": r.ceiling_bps})}
            for r in kept
        ],
    }
    return json.dumps(document, separators=(",", ":"), allow_nan=False).encode()


def parse_memory(key: bytes, value: bytes, prefix: str) -> list[EdgeRecord]:
    base = memory_prefix(prefix)
    if not key.startswith(base):
        raise EntryError("not a memory key")
    client = key[len(base):].decode("ascii", errors="replace")
    if not _NAME.match(client):
        raise EntryError(f"bad client name in the key: {client[:70]!r}")
    if len(value) > MAX_ENTRY_BYTES:
        raise EntryError(f"{client}: more than {MAX_ENTRY_BYTES} bytes")
    try:
        document = json.loads(value, parse_constant=_refuse)
    except (ValueError, RecursionError):
        raise EntryError(f"{client}: not JSON") from None
    if not isinstance(document, dict) or document.get("kind") != MEMORY_KIND or document.get("client") != client:
        raise EntryError(f"{client}: not an {MEMORY_KIND} entry of this client")
    edges = document.get("edges")
    if not isinstance(edges, list) or len(edges) > MAX_EDGES:
        raise EntryError(f"{client}: edges is not a list of at most {MAX_EDGES}")
    return [_record(raw, client) for raw in edges]


def _refuse(name: str) -> float:
    raise ValueError(name)


def _number(raw: Mapping[str, object], key: str, client: str, *, positive: bool = False) -> float:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise EntryError(f"{client}: an edge's {key} is not a number of 0 or more")
    if positive and value <= 0:
        raise EntryError(f"{client}: an edge's {key} must be more than 0")
    return float(value)


def _record(raw: object, client: str) -> EdgeRecord:
    if not isinstance(raw, dict):
        raise EntryError(f"{client}: an edge is not an object")
    u, v, samples, failed = raw.get("from"), raw.get("to"), raw.get("samples"), raw.get("failed", False)
    if not (isinstance(u, str) and isinstance(v, str) and _NAME.match(u) and _NAME.match(v)) or u == v:
        raise EntryError(f"{client}: an edge needs two vertex names")
    if isinstance(samples, bool) or not isinstance(samples, int) or not 0 <= samples < 2**31:
        raise EntryError(f"{client}: an edge's samples is not a count")
    if not isinstance(failed, bool):
        raise EntryError(f"{client}: an edge's failed is not true or false")
    ceiling = None if raw.get("ceiling_bps") is None else _number(raw, "ceiling_bps", client)
    return EdgeRecord(u, v, _number(raw, "throughput_bps", client), _number(raw, "measured_at", client), samples,
                      failed, _number(raw, "boost", client, positive=True) if "boost" in raw else 1.0, ceiling)


def newest_records(entries: Iterable[Iterable[EdgeRecord]], now: float) -> dict[tuple[str, str], EdgeRecord]:
    """Every edge's most recently measured record among the entries (records from the future, beyond ``now``:
    a client's clock ahead of ours, clamped to ``now``)."""
    newest: dict[tuple[str, str], EdgeRecord] = {}
    for records in entries:
        for record in records:
            if record.measured_at > now:
                record = EdgeRecord(record.u, record.v, record.throughput_bps, now, record.samples, record.failed,
                                    record.boost, record.ceiling_bps)
            known = newest.get((record.u, record.v))
            if known is None or record.measured_at > known.measured_at:
                newest[(record.u, record.v)] = record
    return newest
