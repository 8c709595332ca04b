"""Reading the directory: every registered depot under a prefix, each entry checked (``entries``), and the
changes to them as they happen.

A malformed or hostile entry never stops a reader: it is left out, and its key and why are in ``skipped`` (the
caller warns). Keys under the prefix that are not depots' (clients' memory, datasets) are not looked at here.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, field

from .entries import DepotRecord, EntryError, depots_prefix, parse_depot_record
from .etcd import EtcdClient

__all__ = ["DepotChange", "Listing", "list_depots", "watch_depots"]


@dataclass(frozen=True)
class Listing:
    """The depots registered as of ``revision``, by name; ``skipped``: one line per entry left out."""

    depots: dict[str, DepotRecord]
    revision: int
    skipped: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DepotChange:
    """A depot that joined or changed (``record``), or left (``record`` None: revoked, or its lease expired)."""

    name: str
    record: DepotRecord | None
    revision: int


def _name(key: bytes, prefix: str) -> str:
    return key[len(depots_prefix(prefix)):].decode("ascii", errors="replace")[:70]


async def list_depots(client: EtcdClient, prefix: str) -> Listing:
    revision, found = await client.range_prefix(depots_prefix(prefix))
    depots: dict[str, DepotRecord] = {}
    skipped: list[str] = []
    for kv in found:
        try:
            record = parse_depot_record(kv.key, kv.value, prefix)
        except EntryError as exc:
            skipped.append(f"{_name(kv.key, prefix)!r}: {exc}")
            continue
        depots[record.name] = record
    return Listing(depots, revision, skipped)


async def watch_depots(
    client: EtcdClient, prefix: str, start_revision: int, *, idle_s: float, skipped: list[str] | None = None
) -> AsyncGenerator[DepotChange, None]:
    """The depots' changes from ``start_revision`` on, until the watch ends (``EtcdClient.watch_prefix``: silence
    for ``idle_s``, or a broken stream); a malformed entry that appears is reported in ``skipped``, not yielded."""
    async with aclosing(client.watch_prefix(depots_prefix(prefix), start_revision, idle_s=idle_s)) as batches:
        async for batch in batches:
            for event in batch:
                name = _name(event.key, prefix)
                if event.value is None:
                    yield DepotChange(name, None, event.revision)
                    continue
                try:
                    record = parse_depot_record(event.key, event.value, prefix)
                except EntryError as exc:
                    if skipped is not None:
                        skipped.append(f"{name!r}: {exc}")
                    continue
                yield DepotChange(record.name, record, event.revision)
