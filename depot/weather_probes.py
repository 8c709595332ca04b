"""Background weather probes: every ``weather_interval`` the depot pushes a block to each of its
``weather_peers`` in turn, within a hard byte budget per hour, and records what the link did.

One probe: allocate ``weather_block`` here (it counts against this depot's capacity) and fill it with fresh
random bytes; allocate as much at the peer for a short time; push it twice, back to back, through the one copy
path on a connection of the probes' own (the first push opens the connection and its congestion window, the
second measures the warm link, and only the second is recorded, as source "probe"); free both. Every step is
bounded by ``copy_timeout``. A failure anywhere is logged (no capability, no token), counted in the peer's
weather entry, and the round goes on with the next peer: a probe never takes the depot down.

The budget (``HourlyBudget``) is checked before each probe for both pushes and charged before each push, so the
probes never push more than ``weather_bytes_per_hour`` in any hour of this process's life. Control requests
(allocate, free) are a few hundred bytes and not charged. Peers are taken round-robin from where the budget
last stopped a round, so a budget too small for all peers each round still reaches every peer in turn.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any, Protocol

import httpx
import trio

from lnet.protocol import (
    MSGPACK,
    DepotError,
    Upstream,
    decode_body,
    describe_error,
    encode_body,
    error_from_body,
    redact_capabilities,
)
from lnet.protocol.http_body import with_body

from .config import DepotConfig, WeatherPeer
from .metrics import DepotMetrics
from .round_trips import in_rounds
from .store import Allocation, Reliability, Store
from .weather import HourlyBudget, LinkLog, PushSample, Source

__all__ = ["ProbingDepot", "WeatherProbes"]

log = logging.getLogger("lnet.depot.weather")

# Random bytes are made this much at a time, with a checkpoint between, so that filling a block never holds the
# event loop for long (os.urandom makes about 100 MB/s).
_RANDOM_PIECE = 256 * 1024
_FREE_TIMEOUT = 10.0


class ProbingDepot(Protocol):
    """What the probes use of a depot (``lnet.depot.app.Depot`` has it): its settings, its store and clock for
    the local block, its one copy path and the transport under it, and where outcomes are recorded."""

    @property
    def config(self) -> DepotConfig: ...

    @property
    def store(self) -> Store: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def copy_transport(self) -> httpx.AsyncBaseTransport | None: ...

    @property
    def metrics(self) -> DepotMetrics: ...

    @property
    def links(self) -> LinkLog: ...

    async def push(
        self, alloc: Allocation, offset: int, length: int, url: str, peer: str, *,
        http: httpx.AsyncClient | None = None, source: Source = "copy",
    ) -> PushSample: ...


class WeatherProbes:
    def __init__(self, depot: ProbingDepot) -> None:
        self.depot = depot
        config = depot.config
        self.budget = HourlyBudget(config.weather_bytes_per_hour)
        self.block = config.weather_block
        self.timeout = config.copy_timeout
        # Long enough for the allocations to outlive every bounded step of one probe; they are freed at its end.
        self.duration = min(config.max_duration, max(1.0, 5 * config.copy_timeout))
        self._next = 0  # the peer the next round starts with

    async def run(self) -> None:
        """Probe round after round until cancelled (with the depot)."""
        # One connection: the second push of a probe goes where the first one went.
        await in_rounds(self.round, self.depot.config.weather_interval, connections=1, wait_s=self.timeout,
                        transport=self.depot.copy_transport)

    async def round(self, http: httpx.AsyncClient) -> None:
        """Probe each peer in turn while the budget allows two more pushes."""
        peers = self.depot.config.weather_peers
        for i in range(len(peers)):
            index = (self._next + i) % len(peers)
            if not self.budget.allows(2 * self.block, trio.current_time()):
                self._next = index
                log.debug("weather: the hourly budget is spent; %s waits for a later round", peers[index].url)
                return
            try:
                await self.probe(http, peers[index])
            except Exception as exc:  # a bug in a probe must not stop the depot; say so loudly, go on
                log.exception("weather probe to %s failed unexpectedly", peers[index].url)
                self._failed(peers[index], f"internal error: {describe_error(exc)}")

    async def probe(self, http: httpx.AsyncClient, peer: WeatherPeer) -> None:
        depot = self.depot
        try:
            local = depot.store.allocate(self.block, self.duration, Reliability.SOFT, 1, depot.clock())[0][0]
        except DepotError as exc:
            log.info("weather probe to %s skipped: no room here for its block (%s)", peer.url, exc.message)
            depot.metrics.weather_probes.labels("skipped").inc()
            return
        try:
            await self._fill_random(local)
            await self._push_twice(http, peer, local)
        except (DepotError, httpx.HTTPError, trio.TooSlowError) as exc:
            self._failed(peer, _describe(exc))
        finally:
            depot.store.free(local)

    async def _push_twice(self, http: httpx.AsyncClient, peer: WeatherPeer, local: Allocation) -> None:
        depot = self.depot
        write, manage = await self._allocate_at(http, peer)
        try:
            target = f"{peer.url}/v1/data/{write}"
            for warm, url in ((False, target), (True, target + "?offset=0")):
                if not self.budget.spend(self.block, trio.current_time()):
                    return  # round() saw room for both pushes, and only probes spend: not expected
                with trio.fail_after(self.timeout):
                    sample = await depot.push(local, 0, self.block, url, peer.url, http=http, source="probe")
                if warm:
                    depot.links.record(peer.url, "probe", sample)
            depot.metrics.weather_probes.labels("ok").inc()
        finally:
            # Shielded, so that a probe cut short by shutdown still frees its block; bounded more tightly than the
            # other steps, so that a dead peer does not hold the shutdown long (the block expires anyway).
            with trio.move_on_after(min(self.timeout, _FREE_TIMEOUT), shield=True):
                await self._free_at(http, peer, manage)

    async def _fill_random(self, alloc: Allocation) -> None:
        """Fresh random bytes every probe: nothing on the way can compress or cache them."""
        for start in range(0, self.block, _RANDOM_PIECE):
            end = min(start + _RANDOM_PIECE, self.block)
            alloc.buffer[start:end] = os.urandom(end - start)
            await trio.lowlevel.checkpoint()
        self.depot.store.commit_write(alloc, self.block)

    async def _allocate_at(self, http: httpx.AsyncClient, peer: WeatherPeer) -> tuple[str, str]:
        body, media_type = encode_body({"size": self.block, "duration": self.duration}, MSGPACK)
        headers = {"Content-Type": media_type, "Accept": MSGPACK}
        if peer.token is not None:
            headers["Authorization"] = f"Bearer {peer.token}"
        with trio.fail_after(self.timeout):
            answer = await http.send(with_body(http.build_request("POST", f"{peer.url}/v1/allocations",
                                                                   headers=headers), body))
        if answer.status_code != 201:
            raise _answer_error("allocate", answer)
        made = decode_body(answer.headers.get("content-type"), answer.content)
        try:
            first = made["allocations"][0]
            write, manage = first["write"], first["manage"]
        except (KeyError, IndexError, TypeError):
            raise Upstream(f"{peer.url} answered an allocation without capabilities") from None
        if not isinstance(write, str) or not isinstance(manage, str):
            raise Upstream(f"{peer.url} answered an allocation without capabilities")
        return write, manage

    async def _free_at(self, http: httpx.AsyncClient, peer: WeatherPeer, manage: str) -> None:
        try:
            headers = {"Accept": MSGPACK}
            if peer.token is not None:  # a peer may require its token to free too (require_token_for)
                headers["Authorization"] = f"Bearer {peer.token}"
            answer = await http.delete(f"{peer.url}/v1/manage/{manage}", headers=headers)
            if answer.status_code >= 300:
                log.debug("weather: %s did not free a probe block (%s); it expires soon", peer.url, answer.status_code)
        except httpx.HTTPError as exc:
            log.debug("weather: could not free a probe block at %s (%s); it expires soon", peer.url,
                      describe_error(exc))

    def _failed(self, peer: WeatherPeer, error: str) -> None:
        error = redact_capabilities(error)
        log.warning("weather probe to %s failed: %s", peer.url, error)
        self.depot.metrics.weather_probes.labels("failed").inc()
        self.depot.links.record_failure(peer.url, "probe", error, self.depot.clock())


def _answer_error(step: str, answer: httpx.Response) -> DepotError:
    try:
        body: Any = decode_body(answer.headers.get("content-type"), answer.content)
    except DepotError:
        body = None
    remote = error_from_body(answer.status_code, body)
    return Upstream(f"{step} at the peer: {answer.status_code} {remote.code}: {remote.message}")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, DepotError):
        return exc.message
    if isinstance(exc, trio.TooSlowError):
        return "timed out (copy_timeout)"
    return describe_error(exc)
