"""Small HTTP/1.1 servers holding a replica of a file, for end-to-end tests of ``lnet-get URL ...``.

Each honours ``Range`` (one range per request), keep-alive and pipelined requests, sends ``ETag`` and
``Last-Modified``, and can be throttled, made to stall, slow to answer (``first_answer_delay``), or killed
mid-download; a test may change ``rate`` or ``stall_after`` while it runs. ``replicas`` serves them on
loopback sockets; ``emulated`` serves the same servers over in-memory streams, reached through the ``connect``
it yields (``fetch_mirrors(..., connect=connect)``), so that a test runs on trio's ``autojump_clock``: a
throttled replica's seconds pass in no wall time.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import h11
import trio
import trio.testing

LAST_MODIFIED = "Sat, 21 Nov 2026 10:00:00 GMT"
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")
SEND_SIZE = 64 * 1024


@dataclass
class Replica:
    data: bytes
    etag: str | None = '"lnet-test-1"'
    last_modified: str | None = LAST_MODIFIED
    rate: float | None = None  # bytes/s, None: as fast as it goes
    honour_range: bool = True
    kill_after: int | None = None  # body bytes sent, then every connection closes and the server is gone
    stall_after: int | None = None  # body bytes sent, then it sends nothing more (connections stay open)
    first_answer_delay: float = 0.0  # seconds before the first answer on each connection (a far replica)
    port: int = 0
    sent: int = 0
    requests: int = 0
    connections: int = 0
    ranges: list[tuple[int, int]] = field(default_factory=list)
    first_connection_at: float | None = None  # time.monotonic() when the first connection was accepted
    first_request_at: float | None = None  # time.monotonic() when the first request's head arrived
    _scope: trio.CancelScope | None = None
    _connections: trio.Nursery = field(init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/file.bin"

    def kill(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as self._scope:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            self.port = listeners[0].socket.getsockname()[1]
            task_status.started(self.port)
            await trio.serve_listeners(self._connection, listeners)

    async def serve_emulated(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Accept in-memory connections (``accept``) until cancelled or ``kill``ed."""
        with trio.CancelScope() as self._scope:
            async with trio.open_nursery() as self._connections:
                task_status.started()
                await trio.sleep_forever()

    async def accept(self) -> trio.abc.Stream:
        """A new in-memory connection to this replica (refused once it is killed)."""
        if self._scope is None or self._scope.cancel_called:
            raise OSError(f"connection to port {self.port} refused")
        client, server = trio.testing.memory_stream_pair()
        self._connections.start_soon(self._connection, server)
        return client

    async def _connection(self, stream: trio.abc.Stream) -> None:
        self.connections += 1
        if self.first_connection_at is None:
            self.first_connection_at = time.monotonic()
        conn = h11.Connection(h11.SERVER)
        answered = 0
        async with stream:
            try:
                while True:
                    request = await self._next(conn, stream)
                    if not isinstance(request, h11.Request):
                        return
                    if self.first_request_at is None:
                        self.first_request_at = time.monotonic()
                    while not isinstance(await self._next(conn, stream), h11.EndOfMessage):
                        pass
                    self.requests += 1
                    if not answered and self.first_answer_delay:
                        await trio.sleep(self.first_answer_delay)
                    answered += 1
                    await self._answer(conn, stream, request)
                    if conn.our_state is not h11.DONE:
                        return
                    conn.start_next_cycle()
            except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
                return

    async def _next(self, conn: h11.Connection, stream: trio.abc.Stream) -> object:
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            conn.receive_data(await stream.receive_some(65536))

    async def _answer(self, conn: h11.Connection, stream: trio.abc.Stream, request: h11.Request) -> None:
        headers = {k.decode().lower(): v.decode() for k, v in request.headers}
        size = len(self.data)
        common = [("Accept-Ranges", "bytes")]
        if self.etag is not None:
            common.append(("ETag", self.etag))
        if self.last_modified is not None:
            common.append(("Last-Modified", self.last_modified))
        match = _RANGE.fullmatch(headers.get("range", "")) if self.honour_range else None
        if match is None:
            start, end, status = 0, size, 200
            head = [*common, ("Content-Length", str(size))]
        else:
            start = int(match.group(1))
            end = min(size, int(match.group(2)) + 1) if match.group(2) else size
            if start >= size or end <= start:
                await stream.send_all(conn.send(h11.Response(
                    status_code=416, headers=[*common, ("Content-Range", f"bytes */{size}"), ("Content-Length", "0")],
                )))
                await stream.send_all(conn.send(h11.EndOfMessage()))
                return
            status = 206
            head = [*common, ("Content-Range", f"bytes {start}-{end - 1}/{size}"), ("Content-Length", str(end - start))]
        self.ranges.append((start, end))
        await stream.send_all(conn.send(h11.Response(status_code=status, headers=head)))
        pos = start
        while pos < end:
            n = min(SEND_SIZE, end - pos)
            if self.kill_after is not None and self.sent + n > self.kill_after:
                self.kill()
                await trio.sleep_forever()
            if self.stall_after is not None and self.sent + n > self.stall_after:
                await trio.sleep_forever()
            await stream.send_all(conn.send(h11.Data(data=self.data[pos:pos + n])))
            pos += n
            self.sent += n
            if self.rate:
                await trio.sleep(n / self.rate)
        await stream.send_all(conn.send(h11.EndOfMessage()))


@asynccontextmanager
async def replicas(*servers: Replica) -> AsyncIterator[list[Replica]]:
    async with trio.open_nursery() as nursery:
        for server in servers:
            await nursery.start(server.serve)
        yield list(servers)
        nursery.cancel_scope.cancel()


Connect = Callable[[str, int], Awaitable[trio.abc.Stream]]


@asynccontextmanager
async def emulated(*servers: Replica) -> AsyncIterator[tuple[list[Replica], Connect]]:
    """The replicas on an in-memory network: each gets a port of its own (its URL names it) and ``connect`` opens
    a connection to it, as ``trio.open_tcp_stream`` would; a port nobody serves is refused."""
    async with trio.open_nursery() as nursery:
        for port, server in enumerate(servers, start=1):
            server.port = port
            await nursery.start(server.serve_emulated)
        by_port = {server.port: server for server in servers}

        async def connect(host: str, port: int) -> trio.abc.Stream:
            if port not in by_port:
                raise OSError(f"connection to port {port} refused")
            return await by_port[port].accept()

        yield list(servers), connect
        nursery.cancel_scope.cancel()
