"""The depot as an ASGI application: the routes of PROTOCOL.md over a ``Store``.

``Depot`` owns what a running depot needs besides the store (the copy client and its lanes, the reaper, the
links log and the weather probes, metrics) and is an async context manager, so that tests run it in process
through ``httpx.ASGITransport`` exactly as ``serve`` runs it behind hypercorn. It must not block the event loop:
every byte moves in bounded chunks between awaits, and every network wait of a copy, and every wait of a copy for
a place in its lane, is bounded by ``copy_timeout``.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import math
import mmap
import re
import socket
import weakref
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, MutableMapping
from importlib.metadata import version
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from lnet.protocol import (
    DIGESTS,
    PROTOCOL_VERSION,
    BadRequest,
    Busy,
    Conflict,
    DepotError,
    Forbidden,
    NotFound,
    RangeNotSatisfiable,
    TooLarge,
    Unauthorized,
    Upstream,
    decode_body,
    describe_error,
    encode_body,
    error_from_body,
    h11_receive,
    hash_bytes,
    is_capability,
    parse_retry_after,
    redact_capabilities,
)
from lnet.protocol.clock import TrioWallClock
from lnet.units.numbers import finite_number

from . import direct
from .config import DepotConfig
from .fair_share import BodyPace, BodyTimer, ClientShares, client_key
from .fast_path import FastPath
from .lanes import LANE_NAME, MAX_LANE_WIDTH, CopyLanes, TooManyLanes
from .metrics import DepotMetrics
from .round_trips import RoundTripLog, RoundTrips
from .store import Allocation, Kind, Reliability, Store, prefault
from .weather import TCP_INFO_LENGTH, LinkLog, PushSample, Source, parse_tcp_info
from .weather_probes import WeatherProbes

__all__ = ["VERSION", "Depot"]

log = logging.getLogger("lnet.depot")
access_log = logging.getLogger("lnet.depot.access")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Bytes handed to the server (or the copy client) per send: big enough that per-chunk Python overhead vanishes
# against the memcpy, small enough that a slow reader holds little of the depot's memory.
STREAM_CHUNK = 1024 * 1024
# A push sends views of the allocation (no copy, no memory held): larger pieces, fewer trips through httpx.
PUSH_CHUNK = 8 * 1024 * 1024
PREFAULT_MIN_SIZE = 1024 * 1024  # smaller fresh allocations are faulted in by their writes: a thread hop costs more
MAX_CONTROL_BODY = 64 * 1024
_WRITE_URL = re.compile(r"/v1/data/([A-Za-z0-9_-]+)")
_RANGE_SPEC = re.compile(r"([0-9]*)-([0-9]*)")
# A number the depot reads from a header or a query: ASCII digits only (``str.isdigit`` also takes "²", which
# ``int`` refuses), and at most 18 of them, so that it is an int64 and far below ``int``'s 4300-digit limit.
_WHOLE = re.compile(r"[0-9]{1,18}")
VERSION = version("lnet")  # the distribution's, which /v1/status reports
_TCP_INFO: int | None = getattr(socket, "TCP_INFO", None)  # Linux only


def operation_of(method: str, path: str) -> str:
    """The protocol operation a request is, for metrics and the access log."""
    if path.startswith("/v1/data/"):
        return {"PUT": "write", "GET": "read", "HEAD": "read"}.get(method, "other")
    if path.startswith("/v1/manage/"):
        return {"GET": "probe", "POST": "extend", "DELETE": "free"}.get(method, "other")
    if path.startswith("/v1/copy/"):
        return "copy"
    if path.startswith("/v1/digest/"):
        return "digest"
    return {
        "/v1/allocations": "allocate", "/v1/status": "status", "/metrics": "metrics", "/healthz": "health",
        "/readyz": "ready",
    }.get(path, "other")


# Answered whatever the load, and taking no request place: a load balancer must always hear from a depot.
_ALWAYS_ANSWERED = frozenset({"health", "ready"})


class Depot:
    """One depot: configuration, store, copy client, reaper and the ASGI app serving them."""

    def __init__(
        self,
        config: DepotConfig,
        *,
        clock: Callable[[], float] | None = None,
        copy_transport: httpx.AsyncBaseTransport | None = None,
        offload: Callable[..., Awaitable[Any]] | None = None,
        fast_path: FastPath | None = None,
    ) -> None:
        # when a depot is made, never at import: the log filter only; ``serve`` adds the fast path if it can
        h11_receive.install_http_patches(speed_ups=False)
        # in process (no ``serve``) no body or reply goes the direct way: the fast path is off
        self.fast_path = fast_path or FastPath(False, "not served by lnet.depot.server (in process)")
        self.config = config
        # CPU-heavy work (hashing a block) goes to a worker thread; tests on MockClock run it inline instead.
        self._offload = offload or trio.to_thread.run_sync
        self.clock = clock or TrioWallClock()
        self.store = Store(
            capacity=config.capacity,
            max_allocation=config.max_allocation,
            max_duration=config.max_duration,
            max_count=config.max_count,
            data_dir=config.data_dir,
        )
        self.lanes = CopyLanes(config.max_lanes)
        self.metrics = DepotMetrics(self.store, self.lanes)
        self.metrics.fast_path.set(1 if self.fast_path.active else 0)
        self.metrics.watch_load(lambda: self.in_flight, lambda: self.saturated, lambda: self.shares.clients)
        self.links = LinkLog(config.links_window)
        self.round_trips = RoundTripLog(config.links_window)
        self.round_trip_peers: tuple[str, ...] = tuple(peer.url for peer in config.weather_peers)
        """Whom the depot times its round trips to: the weather peers, and the directory's depots
        (``lnet.depot.directory_link`` keeps them)."""
        self.copy_allow = config.copy_fence
        self.token_required_for = config.token_required_for
        self.in_flight = 0
        self.shares = ClientShares(config.max_requests_per_client)
        self.pace = BodyPace(config.min_bytes_per_second, config.body_grace)
        self.copy_transport = copy_transport
        # Pushes running to each peer (the ``streams`` of the weather), and each connection's retransmission count
        # when last read (TCP_INFO counts over a connection's life; a push's share is the difference).
        self._pushing: Counter[str] = Counter()
        self._retrans_seen: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._http: httpx.AsyncClient | None = None
        self._exit_stack = contextlib.AsyncExitStack()
        self._started_at = 0.0
        # The directory registration's state for /v1/status (directory_link.py), when one runs
        self.directory_status: Callable[[], dict[str, Any]] | None = None
        self.app: ASGIApp = self._limits(self._router())

    # -- lifecycle ------------------------------------------------------------------------------------------

    async def __aenter__(self) -> Depot:
        self._started_at = self.clock()
        restored = self.store.open(self._started_at)
        if restored:
            log.info("restored %d hard allocations from %s", restored, self.config.data_dir)
        timeout = httpx.Timeout(self.config.copy_timeout)
        self._http = httpx.AsyncClient(
            transport=self.copy_transport,
            timeout=timeout,
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
            follow_redirects=False,
            trust_env=False,
        )
        nursery = await self._exit_stack.enter_async_context(trio.open_nursery())
        nursery.start_soon(self._reap_forever)
        if self.config.weather_enabled:
            nursery.start_soon(WeatherProbes(self).run)
        if (self.config.weather_peers or self.config.directory) and self.config.rtt_interval > 0:
            timer = RoundTrips(lambda: self.round_trip_peers, self.round_trips, self.clock,
                               interval=self.config.rtt_interval, timeout=self.config.copy_timeout,
                               transport=self.copy_transport)
            nursery.start_soon(timer.run)
        self._nursery = nursery
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self._nursery.cancel_scope.cancel()
        try:
            return await self._exit_stack.__aexit__(exc_type, exc, tb)
        finally:
            assert self._http is not None
            with trio.CancelScope(shield=True):
                await self._http.aclose()
            self.store.close()

    async def _reap_forever(self) -> None:
        while True:
            now = self.clock()
            reaped = self.store.reap(now)
            if reaped:
                self.metrics.expired.inc(reaped)
                log.debug("reclaimed %d expired allocations", reaped)
            self.store.trim_pool(now)
            # Wake at the next expiry or pool trim, and at least every second: within a second, as promised.
            upcoming = [t for t in (self.store.next_expiry(), self.store.next_pool_trim()) if t is not None]
            await trio.sleep(min([1.0, *(max(0.0, t - now) for t in upcoming)]))

    # -- the ASGI stack -------------------------------------------------------------------------------------

    def _limits(self, inner: ASGIApp) -> ASGIApp:
        """Bound the requests served at once, count every answer, and log it with capabilities redacted."""

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await inner(scope, receive, send)
                return
            operation = operation_of(scope["method"], scope["path"])
            status = 500

            async def send_counted(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                try:
                    await send(message)
                except trio.BusyResourceError:
                    # hypercorn's reading task saw the client go and is closing the socket (send_eof, its one send
                    # outside its send lock) as this answer goes out: no one is left to answer, as when hypercorn
                    # itself finds the socket closed. Unhandled, it logged "Error in ASGI Framework".
                    return

            if scope.get("http_version", "1.1") not in ("1.0", "1.1"):
                # hypercorn also speaks HTTP/2 (prior knowledge on plain TCP); the depot does not. hypercorn buffers
                # an HTTP/2 response whole whatever the client's flow-control window (its buffer takes any amount
                # while the window is shut), outside the capacity, and a client's pings keep its read_timeout from
                # firing: no bound of the depot's would hold. (Under TLS, ALPN offers HTTP/1.1 only: server.py.)
                unsupported = BadRequest("this depot speaks HTTP/1.1 only", status=505)
                await _error_response(unsupported, _header(scope, b"accept"))(scope, receive, send_counted)
                self.metrics.requests.labels(operation, str(status)).inc()
                return
            if operation in self.token_required_for and not self._bearer_ok(scope):
                # Before anything else: a request without the token costs the depot one small answer.
                refusal = Unauthorized(
                    f"{operation} at this depot needs the operator token: Authorization: Bearer TOKEN"
                )
                await _error_response(refusal, _header(scope, b"accept"))(scope, receive, send_counted)
                self.metrics.requests.labels(operation, str(status)).inc()
                return
            counted = operation not in _ALWAYS_ANSWERED
            client = client_key(_client_host(scope))
            turned_away = self._refusal(client) if counted else None
            if turned_away is not None:
                await _error_response(turned_away, _header(scope, b"accept"))(scope, receive, send_counted)
                self.metrics.requests.labels(operation, str(status)).inc()
                return
            if counted:
                self.shares.enter(client)
                self.in_flight += 1
            started = trio.current_time()
            try:
                await inner(scope, receive, send_counted)
            finally:
                if counted:
                    self.in_flight -= 1
                    self.shares.leave(client)
                self.metrics.requests.labels(operation, str(status)).inc()
                if access_log.isEnabledFor(logging.INFO):
                    access_log.info(
                        "%s %s %s %d %.3fs",
                        _client(scope),
                        scope["method"],
                        redact_capabilities(scope["path"]),
                        status,
                        trio.current_time() - started,
                    )

        return app

    def _too_slow(self, what: str, timer: BodyTimer, moved: int) -> DepotError:
        rate = timer.rate(moved, trio.current_time())
        return BadRequest(
            f"the {what} came at {rate:.0f} bytes/s ({moved} bytes): this depot takes bodies at "
            f"{self.config.min_bytes_per_second} bytes/s at least once {self.config.body_grace:g}s have passed "
            "(min_bytes_per_second, body_grace)",
            status=408,
        )

    def _refusal(self, client: str) -> DepotError | None:
        """Why a request of ``client`` gets no place now (``429`` past its share, ``503`` past all places), or None.
        Its own share first: a client over it is told so, whatever the others do."""
        if self.shares.held(client) >= self.shares.per_client:
            self.metrics.client_refusals.inc()
            return Busy(
                f"{self.shares.per_client} requests from {client} are in progress at this depot, its share "
                "(max_requests_per_client): wait for one to end",
                status=429,
                retry_after=self.config.busy_retry_after,
            )
        if self.in_flight >= self.config.max_concurrent_requests:
            self.metrics.busy.inc()
            return Busy("too many requests at once", retry_after=self.config.busy_retry_after)
        return None

    @property
    def saturated(self) -> bool:
        """Every request place is taken: a request now (but a health or readiness check) would be refused."""
        return self.in_flight >= self.config.max_concurrent_requests

    def _bearer_ok(self, scope: Scope) -> bool:
        token = self.config.operator_token
        scheme, _, value = (_header(scope, b"authorization") or "").partition(" ")
        return (
            token is not None
            and scheme.lower() == "bearer"
            and hmac.compare_digest(value.strip().encode(), token.encode())
        )

    def _router(self) -> Starlette:
        async def depot_error(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, DepotError)
            return _error_response(exc, request.headers.get("accept"))

        async def http_error(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, HTTPException)
            error: DepotError
            if exc.status_code == 404:
                error = NotFound("no such resource")
            else:
                error = BadRequest(exc.detail or "bad request", status=exc.status_code)
            return _error_response(error, request.headers.get("accept"))

        routes = [
            Route("/v1/allocations", self.allocate, methods=["POST"]),
            Route("/v1/data/{cap}", self.write, methods=["PUT"]),
            Route("/v1/data/{cap}", self.read, methods=["GET", "HEAD"]),
            Route("/v1/copy/{cap}", self.copy, methods=["POST"]),
            Route("/v1/digest/{cap}", self.digest, methods=["GET"]),
            Route("/v1/manage/{cap}", self.probe, methods=["GET"]),
            Route("/v1/manage/{cap}", self.extend, methods=["POST"]),
            Route("/v1/manage/{cap}", self.free, methods=["DELETE"]),
            Route("/v1/status", self.status, methods=["GET"]),
            Route("/metrics", self.prometheus, methods=["GET"]),
            Route("/healthz", self.health, methods=["GET", "HEAD"]),
            Route("/readyz", self.ready, methods=["GET", "HEAD"]),
        ]
        return Starlette(
            routes=routes, exception_handlers={DepotError: depot_error, HTTPException: http_error}
        )

    # -- operations -----------------------------------------------------------------------------------------

    def _lookup(self, request: Request, kind: Kind) -> Allocation:
        token = request.path_params["cap"]
        if not is_capability(token):
            raise NotFound("no such allocation")
        return self.store.lookup(kind, token, self.clock())

    async def allocate(self, request: Request) -> Response:
        # The operator token, where required, was checked before the request got here (``_limits``).
        body = await _control_body(request, self.pace, self.metrics)
        _only_keys(body, {"size", "duration", "reliability", "count"})
        size = _integer(body, "size", required=True)
        duration = _number(body, "duration", required=True)
        count = _integer(body, "count", default=1)
        reliability_name = body.get("reliability", "soft")
        if reliability_name not in ("soft", "hard"):
            raise BadRequest("reliability must be 'soft' or 'hard'")
        if size < 1:
            raise BadRequest("size must be at least 1 byte")
        if duration > self.config.max_duration:
            raise BadRequest(f"duration is over this depot's max_duration of {self.config.max_duration:g} seconds")
        try:
            made = self.store.allocate(size, duration, Reliability(reliability_name), count, self.clock())
        except DepotError as exc:
            if exc.status == 507:
                exc.retry_after = self.config.full_retry_after
            raise
        fresh = [a for a, _ in made if a.fresh and a.size >= PREFAULT_MIN_SIZE]
        if fresh and self.config.prefault:
            for alloc in fresh:  # set before the answer: a write may come before the task below starts
                alloc.prefaulting = trio.Event()
            self._nursery.start_soon(self._prefault, fresh)
        allocations = [
            {"read": caps.read, "write": caps.write, "manage": caps.manage, "size": a.size, "expires": a.expires,
             "reliability": str(a.reliability)}
            for a, caps in made
        ]
        log.debug("allocated %d x %d bytes (%s)", count, size, reliability_name)
        return _respond(request, {"allocations": allocations, "depot": self.config.name}, status=201)

    async def _prefault(self, fresh: list[Allocation]) -> None:
        """Fault the pages of allocations just lent in, one after another in a worker thread, while the answer
        goes out: the event loop then only copies bytes into them. A write that comes first waits for its own
        allocation's (``write``): faulting the same pages from two threads at once was slower than either alone
        (the fresh curl PUT fell from 64% to 45% of raw TCP). Each stays mapped until done, even if freed."""
        try:
            for alloc in fresh:
                with self.store.pinned(alloc):
                    await self._offload(prefault, alloc.buffer)
                alloc.prefaulting.set()
        finally:
            for alloc in fresh:  # cancelled (the depot stops): no write waits for what will not come
                alloc.prefaulting.set()

    async def write(self, request: Request) -> Response:
        alloc = self._lookup(request, Kind.WRITE)
        if "content-range" in request.headers:  # RFC 9110 14.5: a server MUST refuse it; ignored, it misplaces bytes
            raise BadRequest("a write places its bytes with ?offset=, not Content-Range")
        offset = _query_int(request, "offset", alloc.length)
        declared = _whole(request.headers.get("content-length"))
        if declared is None:
            raise BadRequest("a write needs a Content-Length header (a whole number, at most 18 digits)", status=411)
        end = offset + declared
        if offset > alloc.length:
            raise RangeNotSatisfiable(f"offset {offset} would leave a hole: {alloc.length} bytes are written")
        if end > alloc.size:
            raise RangeNotSatisfiable(f"bytes {offset}..{end} do not fit in an allocation of {alloc.size}")
        if alloc.writing:
            raise Conflict("another write to this allocation is in progress")
        alloc.writing = True
        try:
            if alloc.prefaulting is not None:  # its pages may be being faulted in: a few ms for 64 MiB (_prefault)
                with trio.move_on_after(self.config.read_timeout):
                    await alloc.prefaulting.wait()
            with self.store.pinned(alloc):
                body = direct.current()
                timer = self.pace.timer(trio.current_time())
                if body is not None and body.length == end - offset:
                    # hypercorn held the body back: straight from the socket into the allocation (direct.py)
                    view = alloc.view(offset, end)
                    try:
                        position = offset + await body.receive_into(view, timer.deadline)
                    finally:
                        view.release()
                    gone = position != end  # the client stopped short, stalled past read_timeout, or too slow
                    too_slow = body.too_slow
                else:
                    if body is not None:
                        body.release()  # hypercorn reads on: the body comes as ASGI messages
                    position, gone, too_slow = await _receive_body(request, alloc.buffer, offset, end, timer)
                if too_slow:
                    self.metrics.slow_bodies.labels("in").inc()
                    raise self._too_slow("write's body", timer, position - offset)
                if gone:
                    log.debug("write to %s cut off after %d bytes", alloc.ident[:8], position - offset)
                    return Response(status_code=400)
                if position != end:
                    raise BadRequest(f"body shorter than its Content-Length ({position - offset} of {end - offset})")
                self.metrics.bytes_in.inc(end - offset)
                self.store.commit_write(alloc, end)
        finally:
            alloc.writing = False
        return Response(status_code=204, headers={"X-Lnet-Length": str(alloc.length)})

    async def read(self, request: Request) -> Response:
        alloc = self._lookup(request, Kind.READ)
        length = alloc.length
        start, end = 0, length
        status = 200
        headers = {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        chosen = _parse_range(request.headers.getlist("range"), length)
        if chosen is not None:
            start, end = chosen
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{length}"
        headers["Content-Length"] = str(end - start)
        return AllocationResponse(
            self, alloc, start, end, status, headers, head_only=request.method == "HEAD", kind="read"
        )

    async def copy(self, request: Request) -> Response:
        alloc = self._lookup(request, Kind.READ)
        body = await _control_body(request, self.pace, self.metrics)
        _only_keys(body, {"to", "offset", "length", "dest_offset", "lane", "lane_width"})
        target = body.get("to")
        if not isinstance(target, str):
            raise BadRequest("'to' must be the URL of another depot's write capability")
        peer = _copy_target(target)
        # The fence comes before anything that could touch the network: a refused copy resolves no name and opens
        # no connection. The host is matched as the URL spells it (copy_allow.py says why names are not resolved).
        host = urlsplit(peer).hostname or ""
        if not self.copy_allow.allows(host):
            self.metrics.copies_refused.inc()
            raise Forbidden(
                f"this depot copies only to the hosts its operator allows (copy_allow), and {host[:100]!r} is not "
                "one of them"
            )
        # What is pushed to is rebuilt from the checked parts, so that the HTTP client cannot read another host
        # out of the text than the check did.
        target = peer + urlsplit(target).path
        offset = _integer(body, "offset", default=0)
        length = _integer(body, "length", default=max(alloc.length - offset, 0))
        dest_offset = body.get("dest_offset")
        if dest_offset is not None:
            dest_offset = _integer(body, "dest_offset")
        if offset < 0 or length < 0 or (dest_offset is not None and dest_offset < 0):
            raise BadRequest("offset, length and dest_offset cannot be negative")
        if dest_offset is not None and _whole(str(dest_offset)) is None:  # a write's offset is 1 to 18 digits
            raise RangeNotSatisfiable(f"dest_offset {str(dest_offset)[:24]} is past any allocation")
        if offset + length > alloc.length:
            raise RangeNotSatisfiable(f"bytes {offset}..{offset + length} are past the {alloc.length} written")
        lane, width = _lane(body)
        url = target if dest_offset is None else f"{target}?offset={dest_offset}"
        async with self._lane_place(request, lane, width) as queued_s:
            if queued_s > 0:  # it waited: the allocation may have been freed or expired meanwhile
                alloc = self._lookup(request, Kind.READ)
            try:
                sample = await self.push(alloc, offset, length, url, peer, dest_offset=dest_offset)
            except Upstream as exc:
                if "target_status" not in exc.details:  # the network failed, not the target's judgement
                    self.links.record_failure(peer, "copy", exc.message, self.clock())
                self.metrics.copies_failed.labels(exc.details.get("failure", "network")).inc()
                raise
        self.links.record(peer, "copy", sample)
        return _respond(request, {"bytes": length, "seconds": sample.seconds, "queued_s": queued_s})

    @contextlib.asynccontextmanager
    async def _lane_place(self, request: Request, lane: str | None, width: int) -> AsyncIterator[float]:
        """Hold a place in the copy's lane (if it names one) while the body runs; yields the seconds it waited.

        The wait is bounded by ``copy_timeout`` (then ``503 busy``) and ends when the client goes away; whatever
        ends it, the ticket leaves the lane, giving back only what it held."""
        if lane is None:
            yield 0.0
            return
        granted = trio.Event()
        try:
            ticket = self.lanes.enter(lane, width, granted.set)
        except TooManyLanes as exc:
            self.metrics.busy.inc()
            raise Busy(f"{exc}: try again later", retry_after=self.config.busy_retry_after) from None
        started = trio.current_time()
        queued_s = 0.0
        try:
            if not ticket.granted:
                gone = False
                with trio.move_on_after(self.config.copy_timeout):
                    gone = not await _granted_unless_gone(granted, request.receive)
                if not granted.is_set():  # set exactly when the ticket is granted, be it at the last moment
                    waited = trio.current_time() - started
                    if gone:
                        raise BadRequest(f"client went away after waiting {waited:.1f}s in its copy lane")
                    self.metrics.lane_timeouts.inc()
                    raise Busy(
                        f"copy waited {self.config.copy_timeout:g}s (copy_timeout) in lane {lane!r} for one of its "
                        f"{self.lanes.width(lane)} places at this depot",
                        retry_after=self.config.busy_retry_after,
                        queued_s=waited,
                    )
                queued_s = trio.current_time() - started
            yield queued_s
        finally:
            self.lanes.leave(ticket)

    async def push(
        self,
        alloc: Allocation,
        offset: int,
        length: int,
        url: str,
        peer: str,
        *,
        http: httpx.AsyncClient | None = None,
        source: Source = "copy",
        dest_offset: int | None = None,
    ) -> PushSample:
        """Push ``length`` bytes of ``alloc`` from ``offset`` to ``url`` (a write URL at ``peer``): the one copy
        path, for clients' copies and the weather probes alike. Returns what the push measured; records nothing.
        Raises ``Upstream``: with ``target_status`` when the target answered an error or not as a depot's write
        does (``_check_push_answer``), without it when the network failed (or stalled past ``copy_timeout``)."""
        client = http or self._http
        assert client is not None

        # The target must take the push at the pace of any body (fair_share.py): a host that reads a byte now and
        # then would otherwise hold this copy's request place, and the allocation, for as long as it liked. Each
        # piece is written whole by httpx, so the pace is checked per piece: the deadline moves as each begins.
        paced = trio.CancelScope()

        async def chunks() -> AsyncGenerator[memoryview, None]:
            position, stop = offset, offset + length
            while position < stop:
                piece_end = min(position + PUSH_CHUNK, stop)
                paced.deadline = timer.deadline(piece_end - offset)
                view = alloc.view(position, piece_end)
                try:
                    yield view
                finally:
                    view.release()
                position += PUSH_CHUNK
            paced.deadline = math.inf  # all sent: the answer's wait is copy_timeout's

        self._pushing[peer] += 1
        streams = self._pushing[peer]
        started = trio.current_time()
        timer = self.pace.timer(started)
        pieces = chunks()
        try:
            with paced, self.store.pinned(alloc):
                request = client.build_request(
                    "PUT",
                    url,
                    content=pieces,  # type: ignore[arg-type]  # httpx writes any buffer; views avoid a copy
                    headers={"Content-Length": str(length), "Content-Type": "application/octet-stream",
                             "Accept": "application/msgpack"},
                )
                answer = await client.send(request, stream=True)
                try:
                    content = await _answer_body(answer, peer)
                finally:
                    await answer.aclose()
        except httpx.TimeoutException:
            raise Upstream(f"copy to {peer} timed out (copy_timeout {self.config.copy_timeout:g}s)") from None
        except httpx.HTTPError as exc:
            raise Upstream(f"copy to {peer} failed: {describe_error(exc)}") from None
        finally:
            self._pushing[peer] -= 1
            if self._pushing[peer] <= 0:
                del self._pushing[peer]
            with trio.CancelScope(shield=True):  # a push cut off mid-piece: its view is let go of now, not at GC
                await pieces.aclose()
        if paced.cancelled_caught:
            self.metrics.slow_bodies.labels("push").inc()
            raise Upstream(
                f"copy to {peer} fell behind {self.config.min_bytes_per_second} bytes/s after "
                f"{self.config.body_grace:g}s (min_bytes_per_second, body_grace): the target took it too slowly",
                failure="slow",
            )
        seconds = trio.current_time() - started
        if answer.status_code >= 300:
            try:
                remote = error_from_body(answer.status_code, decode_body(answer.headers.get("content-type"),
                                                                          content))
            except DepotError:
                remote = DepotError(f"HTTP {answer.status_code}", status=answer.status_code)
            raise Upstream(
                f"target {peer} answered {answer.status_code} {remote.code}: {remote.message}",
                retry_after=parse_retry_after(answer.headers.get("retry-after")),
                target_status=answer.status_code,
                failure="target_error",
            )
        self._check_push_answer(answer, peer, length, dest_offset)
        self.metrics.bytes_out.labels(source).inc(length)
        if source == "copy":
            self.metrics.copy_seconds.observe(seconds)
        rtt_us, retrans = self._tcp_figures(answer)
        return PushSample(self.clock(), length, seconds, streams, rtt_us, retrans)

    def _check_push_answer(self, answer: httpx.Response, peer: str, length: int, dest_offset: int | None) -> None:
        """A push succeeded only if its target answered as a depot's write does: ``204`` with ``X-Lnet-Length``,
        the bytes the allocation now holds, at least the end of what was pushed (``dest_offset + length``, or
        ``length`` for an append). Not equal to it: an overwrite of a longer allocation (a relay's reused block)
        keeps its length, and an append lands after bytes this depot does not know of. Anything else (another
        2xx, a length short of the push) is a target that is no depot, or lost the bytes: ``Upstream``."""
        held = _whole(answer.headers.get("x-lnet-length"))
        end = length + (dest_offset or 0)
        problem = None
        if answer.status_code != 204:
            problem = f"answered {answer.status_code} where a depot's write answers 204"
        elif held is None:
            problem = "answered 204 without a valid X-Lnet-Length"
        elif held < end:
            problem = f"says it holds {held} bytes after {length} were pushed to end at {end}"
        if problem is not None:
            raise Upstream(
                f"target {peer} {problem}: not a depot's write answer, so the copy failed",
                target_status=answer.status_code,
                failure="unverified",
            )

    def _tcp_figures(self, answer: httpx.Response) -> tuple[int | None, int | None]:
        """The connection's smoothed round trip (microseconds) and the segments it retransmitted since this depot
        last looked, from Linux's TCP_INFO on the push's socket; (None, None) where there is no socket to ask
        (another OS, an in-process transport) or the connection is gone."""
        stream = answer.extensions.get("network_stream")
        if stream is None or _TCP_INFO is None:
            return None, None
        try:
            sock = stream.get_extra_info("socket")
            info = parse_tcp_info(sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, TCP_INFO_LENGTH))
            if info is None:
                return None, None
            retrans = max(0, info.total_retrans - self._retrans_seen.get(stream, 0))
            self._retrans_seen[stream] = info.total_retrans
        except Exception as exc:  # instrumentation only: whatever goes wrong here must not fail the push
            log.debug("no TCP_INFO for a push: %s", describe_error(exc))
            return None, None
        return info.rtt_us, retrans

    async def digest(self, request: Request) -> Response:
        """The hash of written bytes, computed here: a client checks a block that reached a far depot without
        pulling it back over the long path (an lnet extension, docs/protocol.md)."""
        alloc = self._lookup(request, Kind.READ)
        algorithm = _query(request, "algorithm") or "sha256"
        if algorithm not in DIGESTS:
            raise BadRequest(f"algorithm must be one of {', '.join(DIGESTS)}")
        offset = _query_int(request, "offset", 0)
        length = _query_int(request, "length", max(alloc.length - offset, 0))
        if offset + length > alloc.length:
            raise RangeNotSatisfiable(f"bytes {offset}..{offset + length} are past the {alloc.length} written")
        with self.store.pinned(alloc):
            view = alloc.view(offset, offset + length)
            try:  # the hash lets go of the GIL for big buffers: the event loop goes on meanwhile
                hexdigest = await self._offload(hash_bytes, algorithm, view)
            finally:
                view.release()
        return _respond(request, {"algorithm": algorithm, "hex": hexdigest, "offset": offset, "length": length})

    async def probe(self, request: Request) -> Response:
        alloc = self._lookup(request, Kind.MANAGE)
        return _respond(
            request,
            {"size": alloc.size, "length": alloc.length, "expires": alloc.expires,
             "reliability": str(alloc.reliability)},
        )

    async def extend(self, request: Request) -> Response:
        alloc = self._lookup(request, Kind.MANAGE)
        body = await _control_body(request, self.pace, self.metrics)
        _only_keys(body, {"extend"})
        seconds = _number(body, "extend", required=True)
        if seconds <= 0:
            raise BadRequest("extend must be a positive number of seconds")
        return _respond(request, {"expires": self.store.extend(alloc, seconds, self.clock())})

    async def free(self, request: Request) -> Response:
        self.store.free(self._lookup(request, Kind.MANAGE))
        return Response(status_code=204)

    async def status(self, request: Request) -> Response:
        now = self.clock()
        return _respond(
            request,
            {
                "name": self.config.name,
                "version": VERSION,
                "protocol": PROTOCOL_VERSION,
                "uptime": now - self._started_at,
                "capacity": self.store.capacity,
                "used": self.store.used,
                "pooled": self.store.pooled,
                "allocations": self.store.allocations,
                "max_allocation": self.config.max_allocation,
                "max_duration": self.config.max_duration,
                "auth_required": "allocate" in self.token_required_for,
                "token_required_for": sorted(self.token_required_for),
                "digests": list(DIGESTS),
                "in_flight": self.in_flight,
                "max_concurrent_requests": self.config.max_concurrent_requests,
                "max_requests_per_client": self.config.max_requests_per_client,
                "saturated": self.saturated,
                "links": self.links.summary(now),
                "round_trips": self.round_trips.summary(now),
                "fast_path": self.fast_path.active,
                **({} if self.fast_path.active else {"fast_path_off": self.fast_path.reason}),
                **({"directory": self.directory_status()} if self.directory_status is not None else {}),
            },
        )

    async def prometheus(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def health(self, request: Request) -> Response:
        return Response(b"ok\n", media_type="text/plain")

    async def ready(self, request: Request) -> Response:
        """Readiness, for load balancers and ``lnet depots``: ``200`` while a request would get a place, ``503``
        with ``Retry-After`` while every place is taken. (``/healthz`` says only that the process answers.)"""
        if self.saturated:
            return _error_response(
                Busy(
                    f"saturated: all {self.config.max_concurrent_requests} request places are taken",
                    retry_after=self.config.busy_retry_after,
                ),
                request.headers.get("accept"),
            )
        return Response(b"ready\n", media_type="text/plain")


class AllocationResponse(Response):
    """Streams bytes straight out of an allocation's buffer, a bounded chunk at a time."""

    def __init__(
        self, depot: Depot, alloc: Allocation, start: int, end: int, status: int, headers: dict[str, str],
        *, head_only: bool, kind: str,
    ) -> None:
        super().__init__(status_code=status, headers=headers)
        self._depot, self._alloc, self._start, self._end = depot, alloc, start, end
        self._head_only, self._kind = head_only, kind

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        alloc = self._alloc
        if alloc.dead or alloc.closed:
            raise NotFound("no such allocation")
        with self._depot.store.pinned(alloc):
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            position = self._start
            if not self._head_only:
                reply = direct.reply()
                timer = self._depot.pace.timer(trio.current_time())

                def due(sent: int) -> float:
                    return timer.deadline(sent)

                if reply is not None and reply.ready(self._end - position):
                    # under hypercorn: from the map to the socket, no copy in Python (direct.py)
                    if not await reply.send(alloc.buffer, position, self._end, due) and reply.too_slow:
                        self._depot.metrics.slow_bodies.labels("out").inc()  # closed; the answer ends as before
                else:
                    # hypercorn sends each piece shielded from cancellation (only TCP_USER_TIMEOUT cuts it): the
                    # pace is checked between pieces here, and within them on the direct path above
                    with trio.CancelScope() as paced:
                        while position < self._end:
                            paced.deadline = due(position - self._start)
                            # ASGI bodies are bytes: slicing the map is the one copy (hypercorn keeps bytes as is)
                            chunk = alloc.buffer[position : min(position + STREAM_CHUNK, self._end)]
                            await send({"type": "http.response.body", "body": chunk, "more_body": True})
                            position += STREAM_CHUNK
                    if paced.cancelled_caught:
                        self._depot.metrics.slow_bodies.labels("out").inc()
                        return  # ending without the body's end: the server closes the connection
                self._depot.metrics.bytes_out.labels(self._kind).inc(self._end - self._start)
            await send({"type": "http.response.body", "body": b"", "more_body": False})


# -- request parsing ----------------------------------------------------------------------------------------


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def _client_host(scope: Scope) -> str | None:
    client = scope.get("client")
    return str(client[0]) if client else None


def _client(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "-"


def _respond(request: Request, obj: Any, status: int = 200) -> Response:
    body, media_type = encode_body(obj, request.headers.get("accept"))
    return Response(body, status_code=status, media_type=media_type)


def _error_response(error: DepotError, accept: str | None) -> Response:
    body, media_type = encode_body(error.body(), accept)
    headers = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(max(1, math.ceil(error.retry_after)))
    if isinstance(error, _Unsatisfiable):
        headers["Content-Range"] = f"bytes */{error.length}"
    return Response(body, status_code=error.status, media_type=media_type, headers=headers)


async def _receive_body(
    request: Request, buffer: mmap.mmap, offset: int, end: int, timer: BodyTimer
) -> tuple[int, bool, bool]:
    """The body through ASGI messages into ``buffer[offset:end]``: where the bytes ended, whether the client
    went away, and whether it fell behind its pace (``timer``)."""
    position = offset
    with trio.CancelScope(deadline=timer.deadline(0)) as paced:
        try:
            async for chunk in request.stream():
                size = len(chunk)
                if position + size > end:  # the server keeps to Content-Length; never trust it blindly
                    raise BadRequest("body longer than its Content-Length")
                buffer[position : position + size] = chunk
                position += size
                paced.deadline = timer.deadline(position - offset)
        except ClientDisconnect:
            return position, True, False
    return position, paced.cancelled_caught, paced.cancelled_caught


async def _answer_body(answer: httpx.Response, peer: str) -> bytes:
    """A push's answer (streamed), read up to ``MAX_CONTROL_BODY``: a depot answers a write with a few hundred
    bytes at most, and a copy's target is whatever host a client named (``Upstream`` past that, unread)."""
    body = bytearray()
    async for chunk in answer.aiter_bytes():
        body += chunk
        if len(body) > MAX_CONTROL_BODY:
            raise Upstream(f"{peer} answered a push with more than {MAX_CONTROL_BODY} bytes: not a depot")
    return bytes(body)


async def _control_body(request: Request, pace: BodyPace, metrics: DepotMetrics) -> dict[str, Any]:
    declared = _whole(request.headers.get("content-length"))  # None for nonsense: the loop below still bounds it
    if declared is not None and declared > MAX_CONTROL_BODY:
        raise TooLarge(f"control bodies are at most {MAX_CONTROL_BODY} bytes")
    data = bytearray()
    timer = pace.timer(trio.current_time())
    with trio.CancelScope(deadline=timer.deadline(0)) as paced:
        try:
            async for chunk in request.stream():
                data += chunk
                if len(data) > MAX_CONTROL_BODY:
                    raise TooLarge(f"control bodies are at most {MAX_CONTROL_BODY} bytes")
                paced.deadline = timer.deadline(len(data))
        except ClientDisconnect:
            raise BadRequest("client went away mid-body") from None
    if paced.cancelled_caught:
        metrics.slow_bodies.labels("in").inc()
        raise BadRequest(
            f"the control body came at {timer.rate(len(data), trio.current_time()):.0f} bytes/s ({len(data)} "
            f"bytes): too slow for this depot (min_bytes_per_second after body_grace)",
            status=408,
        )
    body = decode_body(request.headers.get("content-type"), bytes(data))
    if not isinstance(body, dict):
        raise BadRequest("the body must be a map")
    return body


async def _granted_unless_gone(granted: trio.Event, receive: Receive) -> bool:
    """Wait for ``granted``; False if the client goes away first. (Hypercorn does not cancel a request whose
    client left: it hands the application an ``http.disconnect``, which only a task reading ``receive`` sees.)"""
    gone = False
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            nonlocal gone
            while (await receive())["type"] != "http.disconnect":
                pass  # the body was read whole already; nothing else is expected
            gone = True
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        await granted.wait()
        nursery.cancel_scope.cancel()
    return not gone


def _lane(body: dict[str, Any]) -> tuple[str | None, int]:
    """The copy lane a copy names, and its width; (None, 0) for none."""
    lane = body.get("lane")
    if lane is None:
        if body.get("lane_width") is not None:
            raise BadRequest("'lane_width' goes with 'lane'")
        return None, 0
    if not isinstance(lane, str) or LANE_NAME.fullmatch(lane) is None:
        raise BadRequest("'lane' must be 1 to 128 characters of A-Z, a-z, 0-9, '.', '_', ':' and '-'")
    if body.get("lane_width") is None:
        raise BadRequest("'lane_width' is required with 'lane'")
    width = _integer(body, "lane_width")
    if not 1 <= width <= MAX_LANE_WIDTH:
        raise BadRequest(f"'lane_width' must be from 1 to {MAX_LANE_WIDTH}")
    return lane, width


def _only_keys(body: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(str(key) for key in body if key not in allowed)
    if unknown:
        raise BadRequest(f"unknown field(s): {', '.join(unknown)}; expected some of {', '.join(sorted(allowed))}")


def _integer(body: dict[str, Any], key: str, *, required: bool = False, default: int = 0) -> int:
    if key not in body:
        if required:
            raise BadRequest(f"'{key}' is required")
        return default
    value = body[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"'{key}' must be a whole number")
    # Any magnitude (msgpack stops at 64 bits, JSON at 4300 digits): each caller judges it as the protocol says,
    # e.g. a size past max_allocation is 413 however large, a copy's offset past the written bytes 416.
    return value


def _number(body: dict[str, Any], key: str, *, required: bool = False) -> float:
    if key not in body:
        if required:
            raise BadRequest(f"'{key}' is required")
        return 0.0
    return finite_number(body[key], f"'{key}'", error=BadRequest)


def _whole(text: str | None) -> int | None:
    """``text`` as a number if it is 1 to 18 ASCII digits (``_WHOLE``), else None."""
    return int(text) if text is not None and _WHOLE.fullmatch(text) else None


def _query(request: Request, name: str) -> str | None:
    """The query parameter ``name``; a query naming any parameter twice is refused (``?offset=2&offset=5``: which
    one was meant?)."""
    names = Counter(key for key, _ in request.query_params.multi_items())  # a head of 64 KiB: linear, not square
    repeated = sorted(key for key, times in names.items() if times > 1)
    if repeated:
        raise BadRequest(f"query parameter(s) given more than once: {', '.join(repeated)[:100]}")
    return request.query_params.get(name)


def _query_int(request: Request, name: str, default: int) -> int:
    raw = _query(request, name)
    if raw is None:
        return default
    value = _whole(raw)
    if value is None:
        raise BadRequest(f"{name} must be a whole number of bytes, not negative (at most 18 digits)")
    return value


def _range_number(digits: str) -> int:
    """A number of a ``Range`` header; one past int64 reads as 10**18, beyond any allocation (and ``int`` is
    never given more than 18 digits)."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 18 else 10**18


class _Unsatisfiable(RangeNotSatisfiable):
    """A read's range that names no written byte: its answer says how many there are (``Content-Range: bytes
    */LENGTH``, RFC 9110 15.5.17)."""

    def __init__(self, message: str, length: int) -> None:
        super().__init__(message)
        self.length = length


def _parse_range(values: list[str], length: int) -> tuple[int, int] | None:
    """The ``Range`` header(s) of a read as the half-open ``[start, end)`` to send (``206``), or None to send
    everything (``200``), as RFC 9110 14.2 has it: a range unit other than ``bytes``, a ranges-specifier that
    does not parse or whose last position is before its first, and several ranges (which this depot does not
    serve) are ignored. A valid single range that names no written byte raises ``_Unsatisfiable`` (``416``)."""
    if len(values) != 1:  # several Range lines are one list (RFC 9110 5.3): several ranges, or nonsense
        return None
    unit, equals, range_set = values[0].strip().partition("=")
    if not equals or unit.lower() != "bytes":  # range units are case-insensitive (RFC 9110 14.1)
        return None
    specs = [spec.strip() for spec in range_set.split(",") if spec.strip()]  # empty list elements are allowed
    match = _RANGE_SPEC.fullmatch(specs[0]) if len(specs) == 1 else None
    if match is None or match.group(1) == match.group(2) == "":
        return None
    first, last = match.group(1), match.group(2)
    if first == "":  # a suffix: the last N bytes
        count = _range_number(last)
        if count == 0 or length == 0:  # no bytes to name (and "bytes 0--1/0" is no Content-Range)
            raise _Unsatisfiable("an empty suffix range, or nothing written yet", length)
        return max(length - count, 0), length
    start = _range_number(first)
    if last != "" and _range_number(last) < start:  # invalid (RFC 9110 14.1.1): ignored, not refused
        return None
    if start >= length:
        raise _Unsatisfiable(f"range {values[0][:64]!r} starts at or past the {length} bytes written", length)
    end = length if last == "" else min(_range_number(last) + 1, length)
    return start, end


def _copy_target(url: str) -> str:
    """Check that ``url`` is another depot's write capability URL and return the peer's base URL."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise BadRequest("'to' is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequest("'to' must be an http(s) URL of another depot's write capability")
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        raise BadRequest("'to' must be a plain write capability URL: no credentials, query or fragment")
    match = _WRITE_URL.fullmatch(parts.path)
    if match is None or not is_capability(match.group(1)):
        raise BadRequest("'to' must end in /v1/data/{write capability}: a depot is not an open proxy")
    if len(parts.hostname) > 253:  # no DNS name is longer; the peer is a key of the links log, kept a while
        raise BadRequest("'to' names a host longer than 253 characters")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    peer = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
    try:  # refused here what the push's HTTP client would refuse there (999.1.1.1, a bad IDNA name), as a 400
        httpx.URL(peer)
    except httpx.InvalidURL:
        raise BadRequest("'to' names a host no HTTP client can connect to") from None
    return peer
