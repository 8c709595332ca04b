"""The one client of the depot protocol: every part of lnet (relay, lnet-get, tests) talks to depots through it.

``DepotClient`` wraps one ``httpx.AsyncClient`` per depot, so connections are reused; control bodies travel as
msgpack; every protocol error comes back as its own exception from ``lnet.protocol`` carrying the
depot's message; a depot that cannot be reached, or that stalls past the configured timeout, raises
``DepotUnreachable``. Data moves without extra copies where httpx lets it: writes send the caller's buffer
(or stream of buffers) as it is, and ``read_into`` fills a caller's preallocated buffer as bytes arrive.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal
from urllib.parse import urlencode

import httpx

from lnet.protocol import (
    MSGPACK,
    BadRequest,
    Busy,
    Conflict,
    DepotError,
    DepotFull,
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
    parse_retry_after,
)
from lnet.protocol.h11_receive import install_http_patches
from lnet.protocol.http_body import with_body

__all__ = [
    "Allocation",
    "BadRequest",
    "Busy",
    "Conflict",
    "CopyResult",
    "DepotClient",
    "DepotError",
    "DepotFull",
    "DepotTimeout",
    "DepotUnreachable",
    "Forbidden",
    "NotFound",
    "Probe",
    "RangeNotSatisfiable",
    "TooLarge",
    "Unauthorized",
    "Upstream",
]



DEFAULT_TIMEOUT = 30.0
# A depot's answers other than data are small (``/v1/status`` with its 512 links is a few hundred KiB at most):
# a longer one is no depot's, and is not read on.
MAX_ANSWER_BYTES = 4 * 1024 * 1024
Reliability = Literal["soft", "hard"]


class DepotUnreachable(ConnectionError):
    """The depot could not be reached, or the connection failed mid-request."""

    def __init__(self, depot: str, message: str) -> None:
        super().__init__(f"{depot}: {message}")
        self.depot = depot


class DepotTimeout(DepotUnreachable):
    """A network wait on the depot ran past the configured timeout."""


@dataclass(frozen=True)
class Allocation:
    """An allocation at a depot, as its capabilities name it. ``depot`` is the depot's base URL."""

    depot: str
    read: str
    write: str
    manage: str
    size: int
    expires: float
    reliability: str = "soft"

    @property
    def read_url(self) -> str:
        return f"{self.depot}/v1/data/{self.read}"

    @property
    def write_url(self) -> str:
        return f"{self.depot}/v1/data/{self.write}"

    def __repr__(self) -> str:  # capabilities are secrets: never print them whole
        return f"Allocation(depot={self.depot!r}, read={self.read[:6]}…, size={self.size}, expires={self.expires})"


@dataclass(frozen=True)
class CopyResult:
    """A finished copy: ``seconds`` is the depot's own push time (per-stream: it leaves out ``queued_s``, the
    time the copy waited in its lane for a place)."""

    nbytes: int
    seconds: float
    queued_s: float = 0.0


@dataclass(frozen=True)
class Probe:
    size: int
    length: int
    expires: float
    reliability: str


@functools.cache
def _default_tls() -> ssl.SSLContext:
    """One verifying TLS context for every client of the process: loading the system's certificates takes about
    16 ms, and a transfer over a directory opens a client to each of hundreds of depots. A context is safe to
    share (it holds settings and certificates, not connections)."""
    return httpx.create_ssl_context(trust_env=False)  # as the transport made its own: no SSL_CERT_FILE


class DepotClient:
    """Talks to one depot. Use as ``async with DepotClient(url) as depot:`` (or call ``aclose``)."""

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int = 64,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        install_http_patches()
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        headers = {"Accept": MSGPACK, "User-Agent": "lnet"}
        if token:  # sent with every request: a depot may require it for more than allocating (require_token_for)
            headers["Authorization"] = f"Bearer {token}"
        self._headers = headers
        self._timeouts = httpx.Timeout(timeout).as_dict()
        # Requests go straight to the transport (``_send``): httpx's client adds per request a merge with the base
        # URL, a cookie jar's pass over the answer and an auth and redirect flow, none of which a depot uses, and
        # on this project's machine that was about half of what a control request cost the client in CPU
        # (docs/depot.md, "The data path"). The client object is kept for its conveniences elsewhere.
        self._transport: httpx.AsyncBaseTransport = transport or httpx.AsyncHTTPTransport(
            verify=_default_tls() if verify is True else verify,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            trust_env=False,
        )
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            transport=self._transport,
            timeout=httpx.Timeout(timeout),
            headers=headers,
            follow_redirects=False,
            trust_env=False,
        )

    async def __aenter__(self) -> DepotClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def __repr__(self) -> str:
        return f"DepotClient({self.base_url!r})"

    # -- allocations ----------------------------------------------------------------------------------------

    async def allocate(
        self, size: int, duration: float, *, reliability: Reliability = "soft", count: int = 1
    ) -> list[Allocation]:
        """``count`` allocations of ``size`` bytes for ``duration`` seconds (all of them, or an error)."""
        body: dict[str, Any] = {"size": size, "duration": duration, "reliability": reliability}
        if count != 1:
            body["count"] = count
        answer = await self._control("POST", "/v1/allocations", body)
        return [
            Allocation(
                depot=self.base_url,
                read=a["read"],
                write=a["write"],
                manage=a["manage"],
                size=int(a["size"]),
                expires=float(a["expires"]),
                reliability=str(a.get("reliability", reliability)),
            )
            for a in answer["allocations"]
        ]

    async def allocate_one(self, size: int, duration: float, *, reliability: Reliability = "soft") -> Allocation:
        return (await self.allocate(size, duration, reliability=reliability))[0]

    async def probe(self, manage: str) -> Probe:
        a = await self._control("GET", f"/v1/manage/{manage}")
        return Probe(int(a["size"]), int(a["length"]), float(a["expires"]), str(a["reliability"]))

    async def extend(self, manage: str, seconds: float) -> float:
        """Push the allocation's expiry ``seconds`` further; returns the new expiry (Unix time)."""
        return float((await self._control("POST", f"/v1/manage/{manage}", {"extend": seconds}))["expires"])

    async def free(self, manage: str) -> None:
        await self._control("DELETE", f"/v1/manage/{manage}")

    async def status(self) -> dict[str, Any]:
        answer: dict[str, Any] = await self._control("GET", "/v1/status")
        return answer

    async def healthy(self) -> bool:
        """Does the depot answer its health check? Never raises."""
        try:
            async with self._http.stream("GET", "/healthz") as answer:  # the status says it; the body is not read
                return answer.status_code == 200
        except httpx.HTTPError:
            return False

    # -- data -----------------------------------------------------------------------------------------------

    async def write(self, write: str, data: bytes | bytearray | memoryview, *, offset: int | None = None) -> int:
        """Write ``data`` (appended, or at ``offset``); returns the bytes the allocation now holds."""
        return await self._put(write, data, len(data), offset)

    async def write_stream(
        self, write: str, chunks: AsyncIterable[bytes], length: int, *, offset: int | None = None
    ) -> int:
        """Write ``length`` bytes that arrive as ``chunks`` (never joined in memory); returns the new length.
        ``chunks`` is the caller's: a write cut off mid-body leaves it where it was, for the caller to close."""
        return await self._put(write, chunks, length, offset)

    async def read(self, read: str, start: int = 0, end: int | None = None) -> bytes:
        """The bytes ``[start, end)`` of the allocation (``end`` None: everything written from ``start``)."""
        out = bytearray()
        async with self.stream(read, start, end) as chunks:
            async for chunk in chunks:
                out += chunk
        return bytes(out)

    async def read_into(self, read: str, buffer: memoryview | bytearray, start: int = 0) -> int:
        """Fill ``buffer`` with the allocation's bytes from ``start`` as they arrive; returns the bytes read.

        Asks for exactly ``len(buffer)`` bytes; a depot holding fewer answers ``RangeNotSatisfiable`` or a short
        body, which raises ``RangeNotSatisfiable`` too."""
        view = memoryview(buffer).cast("B")
        want = len(view)
        filled = 0
        async with self.stream(read, start, start + want) as chunks:
            async for chunk in chunks:
                size = len(chunk)
                if filled + size > want:
                    raise BadRequest(f"{self.base_url} sent more bytes than asked for")
                view[filled : filled + size] = chunk
                filled += size
        if filled != want:
            raise RangeNotSatisfiable(f"{self.base_url} sent {filled} of {want} bytes")
        return filled

    @asynccontextmanager
    async def stream(self, read: str, start: int = 0, end: int | None = None) -> AsyncIterator[AsyncIterator[bytes]]:
        """``async with client.stream(cap, a, b) as chunks: async for chunk in chunks: ...``"""
        if start < 0 or (end is not None and end < start):
            raise ValueError(f"bad range [{start}, {end})")
        headers = {}
        if start or end is not None:
            headers["Range"] = f"bytes={start}-" + ("" if end is None else str(end - 1))
        if end is not None and end == start:
            yield _empty()
            return
        request = self._request("GET", f"/v1/data/{read}", headers=headers)
        response = await self._send(request)
        try:
            if response.status_code >= 300:
                raise self._error(response, await self._body(response))
            yield self._guarded(response.aiter_raw())
        finally:
            await response.aclose()

    async def copy(
        self,
        read: str,
        to: str,
        *,
        offset: int | None = None,
        length: int | None = None,
        dest_offset: int | None = None,
        lane: str | None = None,
        lane_width: int | None = None,
        wait_s: float = 0.0,
    ) -> CopyResult:
        """Have the depot push its bytes to ``to``, another depot's write URL (``Allocation.write_url``).

        With ``lane`` (a name the caller picks, e.g. a transfer id and the target) and ``lane_width``, the depot
        runs at most ``lane_width`` pushes of that lane at once and queues the others in order, so a caller may
        keep a few more copies outstanding than it wants pushes moving. A queued copy waits at most the depot's
        ``copy_timeout`` (then ``Busy``): this client's own timeout must cover the wait and the push. The answer
        comes only once the push is done, so a caller that expects the lane's wait and the push to take a while
        gives ``wait_s``, how much longer than the client's timeout the answer may take."""
        body: dict[str, Any] = {"to": to}
        for key, value in (
            ("offset", offset), ("length", length), ("dest_offset", dest_offset), ("lane", lane),
            ("lane_width", lane_width),
        ):
            if value is not None:
                body[key] = value
        answer = await self._control("POST", f"/v1/copy/{read}", body, wait_s=wait_s)
        copied = CopyResult(int(answer["bytes"]), float(answer["seconds"]), float(answer.get("queued_s", 0.0)))
        if length is not None and copied.nbytes != length:  # a depot that pushed other than asked did not copy
            raise Upstream(f"{self.base_url} answered a copy of {length} bytes with {copied.nbytes} bytes copied")
        return copied

    async def digest(
        self, read: str, algorithm: str = "sha256", *, offset: int | None = None, length: int | None = None
    ) -> str:
        """The hex digest of the allocation's written bytes (or a part of them), computed at the depot."""
        params = {"algorithm": algorithm}
        if offset is not None:
            params["offset"] = str(offset)
        if length is not None:
            params["length"] = str(length)
        answer = await self._control("GET", f"/v1/digest/{read}", params=params)
        return str(answer["hex"])

    # -- plumbing -------------------------------------------------------------------------------------------

    async def _put(
        self, write: str, content: bytes | bytearray | memoryview | AsyncIterable[bytes], length: int,
        offset: int | None,
    ) -> int:
        params = {"offset": str(offset)} if offset is not None else None
        headers = {"Content-Length": str(length), "Content-Type": "application/octet-stream"}
        request = self._request("PUT", f"/v1/data/{write}", params=params, headers=headers, content=content)
        response, answer = await self._exchange(request)
        if response.status_code >= 300:
            raise self._error(response, answer)
        return int(response.headers.get("x-lnet-length", "0"))

    async def _control(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        wait_s: float = 0.0,
    ) -> Any:
        content = None
        all_headers = dict(headers or {})
        if body is not None:
            content, media_type = encode_body(body, MSGPACK)
            all_headers["Content-Type"] = media_type
        # the answer may wait for work at the depot (``wait_s``): only the read is given longer
        request = self._request(method, path, content=content, headers=all_headers, params=params, longer_read_s=wait_s)
        response, answer = await self._exchange(request)
        if response.status_code >= 300:
            raise self._error(response, answer)
        if response.status_code == 204 or not answer:
            return {}
        return decode_body(response.headers.get("content-type"), answer)

    async def _exchange(self, request: httpx.Request) -> tuple[httpx.Response, bytes]:
        """Send ``request``; its answer and the answer's body, read up to ``MAX_ANSWER_BYTES``."""
        response = await self._send(request)
        try:
            return response, await self._body(response)
        finally:
            await response.aclose()

    async def _body(self, response: httpx.Response) -> bytes:
        """A (streamed) answer's body, at most ``MAX_ANSWER_BYTES``: past that ``DepotUnreachable``, unread."""
        body = bytearray()
        try:
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_ANSWER_BYTES:
                    raise DepotUnreachable(self.base_url, f"answered more than {MAX_ANSWER_BYTES} bytes: not a depot")
        except httpx.TimeoutException:
            raise DepotTimeout(self.base_url, f"read stalled past {self.timeout:g}s") from None
        except httpx.HTTPError as exc:
            raise DepotUnreachable(self.base_url, describe_error(exc)) from None
        return bytes(body)

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        content: bytes | bytearray | memoryview | AsyncIterable[bytes] | None = None,
        longer_read_s: float = 0.0,
    ) -> httpx.Request:
        url = self.base_url + path
        if params:
            url += "?" + urlencode(params)
        timeouts = self._timeouts
        if longer_read_s > 0:
            timeouts = {**timeouts, "read": self.timeout + longer_read_s}
        all_headers = {**self._headers, **headers} if headers else self._headers
        if isinstance(content, bytes | bytearray | memoryview):  # sent as it is, and nothing left to finalize
            return with_body(httpx.Request(method, url, headers=all_headers, extensions={"timeout": timeouts}),
                             content)
        return httpx.Request(method, url, headers=all_headers, content=content, extensions={"timeout": timeouts})

    async def _send(self, request: httpx.Request) -> httpx.Response:
        """``request`` to the transport; the answer's body is streamed (read it, then ``aclose`` the answer)."""
        try:
            response = await self._transport.handle_async_request(request)
        except httpx.TimeoutException as exc:
            bound = request.extensions.get("timeout", {}).get("read") or self.timeout
            raise DepotTimeout(self.base_url, f"timed out after {bound:g}s ({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            raise DepotUnreachable(self.base_url, describe_error(exc)) from None
        response.request = request
        return response

    async def _guarded(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        try:
            async for chunk in chunks:
                yield chunk
        except httpx.TimeoutException:
            raise DepotTimeout(self.base_url, f"read stalled past {self.timeout:g}s") from None
        except httpx.HTTPError as exc:
            raise DepotUnreachable(self.base_url, describe_error(exc)) from None

    def _error(self, response: httpx.Response, answer: bytes) -> DepotError:
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        try:
            body = decode_body(response.headers.get("content-type"), answer)
        except DepotError:
            body = None
        return error_from_body(response.status_code, body, retry_after)


async def _empty() -> AsyncIterator[bytes]:
    nothing: tuple[bytes, ...] = ()
    for chunk in nothing:
        yield chunk

