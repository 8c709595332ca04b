"""Small HTTP/1.1 servers holding a replica of a file, for end-to-end tests of ``lnet-get URL ...``.

Each honours ``Range`` (one range per request), keep-alive and pipelined requests, sends ``ETag`` and
``Last-Modified``, and can be throttled, made to stall, or killed mid-download.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import h11
import trio

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
    port: int = 0
    sent: int = 0
    requests: int = 0
    connections: int = 0
    ranges: list[tuple[int, int]] = field(default_factory=list)
    _scope: trio.CancelScope | None = None

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

    async def _connection(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        conn = h11.Connection(h11.SERVER)
        async with stream:
            try:
                while True:
                    request = await self._next(conn, stream)
                    if not isinstance(request, h11.Request):
                        return
                    while not isinstance(await self._next(conn, stream), h11.EndOfMessage):
                        pass
                    self.requests += 1
                    await self._answer(conn, stream, request)
                    if conn.our_state is not h11.DONE:
                        return
                    conn.start_next_cycle()
            except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
                return

    async def _next(self, conn: h11.Connection, stream: trio.SocketStream) -> object:
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            conn.receive_data(await stream.receive_some(65536))

    async def _answer(self, conn: h11.Connection, stream: trio.SocketStream, request: h11.Request) -> None:
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
