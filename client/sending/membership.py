"""A transfer follows the depot directory while it runs: a depot that registers becomes a candidate (the
scheduler may probe it and route through it), one whose entry goes (stopped, or its lease expired) is handled as
a relay that failed: its blocks are re-sent from their nearest holder and the paths avoid it.

``follow_directory`` watches the directory's depots from the revision the start-up listing was taken at, so that
nothing that happened in between is missed, and opens the watch again (with backoff) when it breaks; it never
fails the transfer. ``MembershipChange`` handling is in ``Relay.depot_joined`` and ``Relay.depot_left``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from contextlib import aclosing
from typing import TYPE_CHECKING

import trio

from lnet.directory.entries import DepotRecord
from lnet.directory.etcd import EtcdClient, EtcdError, EtcdSettings, EtcdUnavailable
from lnet.directory.listing import list_depots, watch_depots
from lnet.directory.pacing import Backoff

if TYPE_CHECKING:
    from lnet.client.sending.relay import Relay

__all__ = ["follow_directory"]

log = logging.getLogger("lnet.client")

WATCH_IDLE_S = 20.0
"""A watch silent this long is opened again (from the revision reached): a bound on a stream that hangs."""


async def follow_directory(
    relay: Relay,
    settings: EtcdSettings,
    prefix: str,
    start_revision: int,
    *,
    known: set[str],
    joined: Callable[[DepotRecord], bool],
    note: Callable[[str], None],
) -> None:
    """Watch until cancelled. ``known``: the names the transfer started with (from the depots file or the
    directory, used or not); ``joined(record)`` makes and adds a client for a depot that registers (False: it
    cannot serve the transfer)."""
    backoff = Backoff(first_s=1.0, most_s=WATCH_IDLE_S)
    revision = start_revision
    gone: set[str] = set()
    said_down = False
    skipped: list[str] = []
    async with EtcdClient(settings) as client:
        while True:
            try:
                changes = watch_depots(client, prefix, revision + 1, idle_s=WATCH_IDLE_S, skipped=skipped)
                async with aclosing(changes):
                    async for change in changes:
                        revision = max(revision, change.revision)
                        backoff.reset()
                        said_down = False
                        if change.record is None:
                            if change.name in relay.clients and change.name not in relay.dead:
                                note(f"depot {change.name} left the directory: routing around it")
                                relay.depot_left(change.name)
                                gone.add(change.name)
                        elif change.name not in known or change.name in gone:
                            # a new depot, or one that left and came back; a depot the transfer started with (left
                            # out for its limits, or not answering then) is not taken up because its entry changed
                            if joined(change.record):
                                note(f"depot {change.name} joined the directory: a candidate from now on")
                                known.add(change.name)
                                gone.discard(change.name)
                        for line in skipped:
                            note(f"directory entry {line} (skipped)")
                        skipped.clear()
                delay = 0.0  # silent for WATCH_IDLE_S: open it again at once
            except EtcdUnavailable as exc:
                if not said_down:
                    note(f"the directory does not answer ({exc}): going on with the depots known")
                    said_down = True
                delay = backoff.next_delay(random.random())
            except EtcdError as exc:  # history compacted, or refused: take a fresh listing's revision
                log.debug("directory watch: %s", exc)
                delay = backoff.next_delay(random.random())
                try:
                    listing = await list_depots(client, prefix)
                except (EtcdUnavailable, EtcdError):
                    pass
                else:
                    revision = listing.revision  # changes before it are lost: those depots are checked as used
            await trio.sleep(delay)
