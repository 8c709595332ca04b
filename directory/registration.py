"""Keeps one entry in the directory, bound to a lease, for as long as its owner runs: the depot's registration.

The loop grants a lease (``ttl_s``, at most ``MAX_TTL_S``), writes the entry, renews the lease every third of
its TTL, and writes the entry again when what it says changed (at most once per ``min_interval_s``, and at least
every ``refresh_s``: ``pacing.RewritePacer``). When the directory cannot be reached or refuses, it says so
(``status``, a warning in the log) and tries again with backoff; a lease that expired meanwhile is granted anew
and the entry written again. ``run`` returns once ``stopping`` is set, after revoking the lease (the entry goes at
once), each step bounded by the client's timeout. It never stops its owner: every failure stays in here.

What the entry says comes from ``describe(now)``, a callable of the owner's; this module knows nothing of depots.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import trio

from .entries import DepotRecord, EntryError
from .etcd import EtcdClient, EtcdError, EtcdUnavailable
from .pacing import Backoff, RewritePacer

__all__ = ["DEFAULT_TTL_S", "MAX_TTL_S", "Registration", "RegistrationStatus"]

log = logging.getLogger("lnet.directory")

DEFAULT_TTL_S = 15
"""A killed depot leaves the directory within this many seconds."""
MAX_TTL_S = 30
_POLL_S = 1.0
"""How often the loop looks whether the entry's content changed (writing it is paced apart from this)."""

State = Literal["starting", "registered", "retrying", "stopped"]


@dataclass
class RegistrationStatus:
    """What ``/v1/status`` and ``/metrics`` show of the registration."""

    state: State = "starting"
    key: str = ""
    endpoint: str | None = None
    lease: int | None = None
    ttl_s: int = DEFAULT_TTL_S
    registered_since: float | None = None
    last_write: float | None = None
    writes: int = 0
    failures: int = 0
    last_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "key": self.key,
            "endpoint": self.endpoint,
            "lease": f"{self.lease:x}" if self.lease else None,
            "ttl_s": self.ttl_s,
            "registered_since": self.registered_since,
            "last_write": self.last_write,
            "writes": self.writes,
            "failures": self.failures,
            "last_error": self.last_error,
        }


class Registration:
    def __init__(
        self,
        client: EtcdClient,
        key: bytes,
        describe: Callable[[float], DepotRecord],
        *,
        ttl_s: int = DEFAULT_TTL_S,
        min_interval_s: float = 10.0,
        refresh_s: float = 300.0,
        wall: Callable[[], float] = time.time,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        if not 1 <= ttl_s <= MAX_TTL_S:
            raise ValueError(f"the directory TTL is 1 to {MAX_TTL_S} seconds")
        self.client = client
        self.key = key
        self.describe = describe
        self.ttl_s = ttl_s
        self.pacer = RewritePacer(min_interval_s, refresh_s)
        self.backoff = Backoff(first_s=1.0, most_s=float(ttl_s))
        self.status = RegistrationStatus(key=key.decode(errors="replace"), ttl_s=ttl_s)
        self._wall = wall
        self._jitter = jitter
        self._lease: int | None = None
        self._written: DepotRecord | None = None
        self._renew_at = 0.0
        self._registered = trio.Event()

    async def run(self, stopping: trio.Event) -> None:
        """Keep the entry until ``stopping`` is set (or this task is cancelled); then revoke the lease."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._keep)
                await stopping.wait()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                await self._revoke()

    async def registered(self) -> None:
        """Return once the entry has been written (for tests and the bench)."""
        await self._registered.wait()

    async def _keep(self) -> None:
        while True:
            try:
                await self._step()
                self.backoff.reset()
                delay = min(_POLL_S, max(0.0, self._renew_at - trio.current_time()))
            except (EtcdUnavailable, EtcdError, EntryError) as exc:
                delay = self._failed(exc)
            except Exception as exc:  # noqa: BLE001 - never the owner's failure: said, counted, retried
                log.error("directory: unexpected %s while registering %s", type(exc).__name__, self.status.key)
                delay = self._failed(EtcdError(f"{type(exc).__name__}: {exc}"))
            await trio.sleep(delay)

    async def _step(self) -> None:
        now = trio.current_time()
        if self._lease is None:
            self._lease, granted = await self.client.grant(self.ttl_s)
            self.status.lease = self._lease
            self._renew_at = now + max(1.0, granted / 3)
            self.pacer.forget()
        elif now >= self._renew_at:
            ttl = await self.client.keepalive(self._lease)
            if ttl <= 0:  # it expired while the directory was out of reach: the entry went with it
                log.warning("directory: the lease of %s had expired; registering again", self.status.key)
                self._lease = None
                self.status.lease = None
                self.status.state = "retrying"
                await self._step()
                return
            self._renew_at = now + max(1.0, ttl / 3)
        record = self.describe(self._wall())
        changed = not record.same_but_time(self._written)
        if self.pacer.due(now, changed):
            await self.client.put(self.key, record.encode(), lease=self._lease)
            self.pacer.wrote(now)
            self._written = record
            self.status.writes = self.pacer.writes
            self.status.last_write = record.updated
        if self.status.state != "registered":
            log.info("directory: registered %s at %s (lease ttl %ds)", self.status.key, self.client.endpoint,
                     self.ttl_s)
            self.status.registered_since = self._wall()
        self.status.state = "registered"
        self.status.endpoint = self.client.endpoint
        self.status.last_error = None
        self._registered.set()

    def _failed(self, exc: Exception) -> float:
        delay = self.backoff.next_delay(self._jitter())
        self.status.failures += 1
        self.status.last_error = str(exc)[:300]
        if self.status.state != "retrying" or self.backoff.failures <= 1:
            log.warning("directory: cannot register %s: %s; trying again in %.1fs (the depot serves meanwhile)",
                        self.status.key, self.status.last_error, delay)
        else:
            log.debug("directory: still cannot register %s: %s", self.status.key, self.status.last_error)
        self.status.state = "retrying"
        self.status.registered_since = None
        if isinstance(exc, EtcdError) and exc.code == 5:  # lease not found
            self._lease = None
        return delay

    async def _revoke(self) -> None:
        lease, self._lease = self._lease, None
        self.status.state = "stopped"
        self.status.lease = None
        if lease is None:
            return
        try:
            with trio.fail_after(self.client.settings.timeout_s):
                await self.client.revoke(lease)
            log.info("directory: left (lease of %s revoked)", self.status.key)
        except (EtcdUnavailable, EtcdError, trio.TooSlowError) as exc:
            log.warning("directory: could not revoke the lease of %s (%s): the entry goes when it expires, "
                        "within %ds", self.status.key, str(exc)[:200], self.ttl_s)
