"""The overlay's shared memory, from a client's side: publish what this client's transfers measured, and start
from the overlay's when this client remembers nothing (``lnet.directory.memory``; docs/directory.md).

Publishing is bounded: at most once per ``PUBLISH_EVERY_S`` per client (the time of the last one is kept in the
state directory), one entry per client (``PREFIX memory/HERE``) under a lease of ``MEMORY_TTL_S``, so that a
client that stopped publishing is forgotten a day later. Neither step ever fails a transfer: a directory that
cannot be used is a note.
"""

from __future__ import annotations

import time
from pathlib import Path

from lnet.client.formats.overlay import DirectoryRef
from lnet.directory.entries import EntryError
from lnet.directory.etcd import EtcdClient, EtcdError, EtcdSettings, EtcdUnavailable
from lnet.directory.memory import EdgeRecord, encode_memory, memory_key, memory_prefix, newest_records, parse_memory
from lnet.scheduler import EdgeEstimate, EdgeMemory

__all__ = ["MEMORY_TTL_S", "PUBLISH_EVERY_S", "adopt_overlay_memory", "publish_memory"]

PUBLISH_EVERY_S = 60.0
MEMORY_TTL_S = 86400


def _records(memory: EdgeMemory) -> list[EdgeRecord]:
    return [
        EdgeRecord(u, v, entry.throughput_bps, entry.measured_at, entry.samples, entry.failed, entry.boost,
                   entry.ceiling_bps)
        for (u, v), entry in memory.snapshot().items()
    ]


async def publish_memory(
    settings: EtcdSettings, ref: DirectoryRef, client: str, memory: EdgeMemory, state_dir: Path,
    *, now: float | None = None,
) -> str | None:
    """Publish ``memory`` as ``client``'s entry; returns a note when it could not (None: published or not due)."""
    now = time.time() if now is None else now
    stamp = state_dir / f"directory-memory-{client}.published"
    if not _due(stamp, now):
        return None
    records = _records(memory)
    if not records:
        return None
    try:
        async with EtcdClient(settings) as etcd:
            lease, _ = await etcd.grant(MEMORY_TTL_S)
            await etcd.put(memory_key(ref.prefix, client), encode_memory(client, records, now), lease=lease)
    except (EtcdUnavailable, EtcdError, ValueError) as exc:
        return f"could not share this transfer's measurements in the directory: {exc}"
    _published(stamp)
    return None


def _due(stamp: Path, now: float) -> bool:
    try:
        return now - stamp.stat().st_mtime >= PUBLISH_EVERY_S
    except OSError:
        return True


def _published(stamp: Path) -> None:
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.touch()


async def adopt_overlay_memory(
    settings: EtcdSettings, ref: DirectoryRef, memory: EdgeMemory, *, now: float | None = None
) -> tuple[int, list[str]]:
    """Fold the overlay's shared memory into ``memory`` (each edge's newest record, where ``memory`` has none as
    new); returns how many edges were taken and notes for entries skipped or a directory that failed."""
    now = time.time() if now is None else now
    notes: list[str] = []
    entries: list[list[EdgeRecord]] = []
    try:
        async with EtcdClient(settings) as etcd:
            _, found = await etcd.range_prefix(memory_prefix(ref.prefix))
    except (EtcdUnavailable, EtcdError) as exc:
        return 0, [f"could not read the overlay's memory from the directory: {exc}"]
    for kv in found:
        try:
            entries.append(parse_memory(kv.key, kv.value, ref.prefix))
        except EntryError as exc:
            notes.append(f"directory memory entry skipped: {exc}")
    taken = 0
    for (u, v), record in newest_records(entries, now).items():
        estimate = EdgeEstimate(record.throughput_bps, record.measured_at, record.samples, record.failed,
                                record.boost, record.ceiling_bps)
        try:
            taken += memory.adopt(u, v, estimate)
        except ValueError:
            continue
    return taken, notes
