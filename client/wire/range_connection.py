"""One persistent HTTP/1.1 connection to one replica, with range requests pipelined on it.

httpx sends a request only once the previous response has ended, which leaves the link idle for a round trip
between chunks. Here a request is written as soon as the planner decides it, and the server starts its response
the moment the one before ends (HTTP/1.1 pipelining: responses come back in the order of the requests). h11 parses
the responses; it is told of each request just before its response is read, so it follows them one cycle at a
time while the bytes of the next requests are already on the wire.

Every wait for the network is bounded by ``timeout``; a response is checked against what was asked (status,
``Content-Range``, validators) before any of its bytes are handed on.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

import h11
import trio

from lnet.client.wire.range_request import parse_url, range_request, redact_url
from lnet.protocol.h11_receive import install_http_patches

__all__ = ["ConnectionEnded", "Head", "RangeConnection", "ReplicaError", "ReplicaRefused", "parse_url", "redact_url"]

Connector = Callable[[str, int], Awaitable[trio.abc.Stream]]
"""Opens the byte stream to ``(host, port)``: ``trio.open_tcp_stream`` unless a test gives an emulated one."""
RECEIVE_SIZE = 256 * 1024
MAX_HEADER_BYTES = 64 * 1024
# At most 18 ASCII digits a number: an int64, and never near int()'s 4300-digit limit (a ValueError, not a
# ReplicaError, would end the whole download instead of this replica's attempt).
_CONTENT_RANGE = re.compile(r"bytes (?:([0-9]{1,18})-([0-9]{1,18})|\*)/([0-9]{1,18}|\*)")


class ReplicaError(Exception):
    """The replica failed this time (network error, timeout, unexpected answer): retry it later."""


class ConnectionEnded(ReplicaError):
    """The replica closed a connection that had served before, without an error: open a new one and go on."""


class ReplicaRefused(ReplicaError):
    """The replica cannot be used for this file (no ranges, other length or validators): never retry it."""


@dataclass(frozen=True)
class Head:
    """What a response says about the file: its length and validators."""

    status: int
    start: int | None
    end: int | None  # exclusive
    total: int | None
    etag: str | None
    last_modified: str | None
    keep_alive: bool


class RangeConnection:
    """``async with RangeConnection(url, timeout) as conn``: send range requests, read the responses in order."""

    def __init__(
        self, url: str, timeout: float, ssl_context: ssl.SSLContext | None = None, connect: Connector | None = None,
    ) -> None:
        install_http_patches()
        self._connect = connect or trio.open_tcp_stream
        self.url = url
        self._target = parse_url(url)
        self.timeout = timeout
        self._ssl_context = ssl_context
        self._stream: trio.abc.Stream | None = None
        self._h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
        self.in_response = False  # a response's body is being read
        self.sent = 0
        self.answered = 0
        self._on_wire: tuple[int, int] | None = None  # a range request written before this connection took it

    async def __aenter__(self) -> RangeConnection:
        return await self.open()

    async def open(self, tcp: trio.abc.Stream | None = None, sent: tuple[int, int] | None = None) -> RangeConnection:
        """Connect (``async with`` does this), or take ``tcp``, a connection opened already (``predial``) on which
        the request for the range ``sent`` may have been written already: ``send`` of that range is then its
        first, and writes nothing."""
        t = self._target
        if sent is not None and t.scheme == "https":
            raise ValueError("a request cannot have been written before the TLS handshake")
        try:
            with trio.fail_after(self.timeout):
                if tcp is None:
                    tcp = await self._connect(t.host, t.port)
                stream: trio.abc.Stream = tcp
                if t.scheme == "https":
                    context = self._ssl_context or ssl.create_default_context()
                    stream = trio.SSLStream(tcp, context, server_hostname=t.host, https_compatible=True)
                    await stream.do_handshake()
        except trio.TooSlowError:
            raise ReplicaError(f"no connection within {self.timeout:g} s") from None
        except (OSError, trio.BrokenResourceError, ssl.SSLError) as exc:
            raise ReplicaError(f"cannot connect: {exc}") from None
        self._stream = stream
        self._on_wire = sent
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)

    def request_bytes(self, start: int, end: int, method: str = "GET") -> bytes:
        """A ``Range`` request for bytes ``[start, end)`` (``end`` > ``start``)."""
        return range_request(self._target, start, end, method)

    async def send(self, start: int, end: int) -> None:
        """Write one range request; its response comes after those of the requests sent before."""
        assert self._stream is not None
        if self._on_wire is not None:
            if self._on_wire != (start, end):
                raise ValueError(f"the first request on this connection was for {self._on_wire}, not {(start, end)}")
            self._on_wire = None
            self.sent += 1
            return
        data = self.request_bytes(start, end)
        try:
            with trio.fail_after(self.timeout):
                await self._stream.send_all(data)
        except trio.TooSlowError:
            raise ReplicaError(f"could not send a request within {self.timeout:g} s") from None
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise ReplicaError(f"connection lost while sending: {exc}") from None
        self.sent += 1

    async def head(self) -> Head:
        """Read the next response's status and headers."""
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
        # tell h11 of the request this response answers (its bytes went out already, pipelined)
        self._h11.send(h11.Request(method="GET", target=self._target.target,
                                   headers=[("Host", self._target.host_header)]))
        self._h11.send(h11.EndOfMessage())
        event = await self._next_event()
        while isinstance(event, h11.InformationalResponse):
            event = await self._next_event()
        if isinstance(event, h11.ConnectionClosed) and self.answered:
            raise ConnectionEnded("the replica closed its connection")
        if not isinstance(event, h11.Response):
            raise ReplicaError(f"expected a response, got {type(event).__name__}")
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in event.headers}
        start = end = total = None
        content_range = headers.get("content-range")
        if content_range is not None:
            match = _CONTENT_RANGE.fullmatch(content_range.strip())
            if match is None:
                raise ReplicaError(f"unreadable Content-Range: {content_range[:80]!r}")
            if match.group(1) is not None:
                start, end = int(match.group(1)), int(match.group(2)) + 1
            if match.group(3) != "*":
                total = int(match.group(3))
        elif event.status_code == 200 and "content-length" in headers:
            length = headers["content-length"]
            total = int(length) if length.isascii() and length.isdigit() and len(length) <= 18 else None
        keep_alive = headers.get("connection", "").lower() != "close" and event.http_version == b"1.1"
        self.in_response = True
        return Head(event.status_code, start, end, total, headers.get("etag"), headers.get("last-modified"),
                    keep_alive)

    async def next_chunk(self) -> bytes | None:
        """The current response's next piece of body, or None at its end."""
        event = await self._next_event()
        if isinstance(event, h11.Data):
            return event.data
        if isinstance(event, h11.EndOfMessage):
            self.in_response = False
            self.answered += 1
            return None
        raise ReplicaError(f"unexpected {type(event).__name__} in a response body")

    async def skip_body(self) -> None:
        while await self.next_chunk() is not None:
            pass

    @property
    def reusable(self) -> bool:
        """Whether another request may follow on this connection."""
        return self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE

    async def _next_event(self) -> h11.Event:
        assert self._stream is not None
        while True:
            try:
                event = self._h11.next_event()
            except (h11.RemoteProtocolError, ValueError) as exc:  # h11 int()s a 5000-digit Content-Length: ValueError
                raise ReplicaError(f"bad HTTP from the replica: {str(exc)[:200]}") from None
            if event is not h11.NEED_DATA:
                if event is h11.PAUSED:
                    raise ReplicaError("the replica sent more than one response to a request")
                return cast(h11.Event, event)
            try:
                with trio.fail_after(self.timeout):
                    data = await self._stream.receive_some(RECEIVE_SIZE)
            except trio.TooSlowError:
                raise ReplicaError(f"no byte for {self.timeout:g} s") from None
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise ReplicaError(f"connection lost: {exc}") from None
            if not data:
                if self._h11.their_state is h11.SEND_RESPONSE and not self.in_response:
                    raise ReplicaError("the replica closed the connection before answering")
                self._h11.receive_data(b"")
                continue
            self._h11.receive_data(cast(bytes, data))  # h11 takes a bytearray as well
