"""An HTTP/1.1 proxy in front of one depot that holds the requests a test tells it to: a gate.

A test of a program in another process (``lnet-send`` killed with -9) needs that program stopped at a known
point, with no timing guesses: the gate forwards each request to the depot, counts what passed by operation
(``write``, ``digest``, ``free``, ...; ``publish`` for a write of lnet-send's publication; ``passed`` since the
test last cleared it, ``forwarded``: answered 2xx by the depot since the gate opened), and holds for good
any request ``hold(operation, passed)`` says to hold, setting ``held`` when the first one arrives. The program
then waits on its answer while the test looks.
``quiet()`` returns once no request the gate forwarded is still waiting for the depot's answer: after the program
is killed, what it had sent has landed, and what comes next is the next run's. ``next_run()`` opens the gate for
a new run: every request on a connection opened before it is held for good, since its program is dead and the
bytes it left in the socket, read after the kill, are not the next run's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from urllib.parse import urlsplit

import h11
import trio

from lnet.depot.app import operation_of

PUBLISHED = (b"lnet-published/1 ", b"lnet-drained/1 ")

Hold = Callable[[str, Counter[str]], bool]


def never(operation: str, passed: Counter[str]) -> bool:
    return False


class Gate:
    def __init__(self, upstream: str, hold: Hold = never) -> None:
        parts = urlsplit(upstream)
        assert parts.hostname is not None
        assert parts.port is not None
        self.host, self.upstream_port = parts.hostname, parts.port
        self.hold = hold
        self.passed: Counter[str] = Counter()  # since the test last cleared it
        self.forwarded: Counter[str] = Counter()  # answered 2xx, since the gate opened
        self.held = trio.Event()
        self.port = 0
        self.forwarding = 0
        self._quiet = trio.Event()
        self._quiet.set()
        self._run = 0

    def next_run(self) -> None:
        """Hold for good whatever arrives on the connections open now; let through everything on new ones."""
        self._run += 1
        self.hold = never

    async def quiet(self) -> None:
        await self._quiet.wait()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self.port)
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, client: trio.SocketStream) -> None:
        run = self._run
        try:
            async with client, await trio.open_tcp_stream(self.host, self.upstream_port) as depot:
                await self._relay(client, depot, run)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError, OSError):
            return

    async def _relay(self, client: trio.SocketStream, depot: trio.SocketStream, run: int) -> None:
        server, upstream = h11.Connection(h11.SERVER), h11.Connection(h11.CLIENT)
        while True:
            request = await _next(server, client)
            if not isinstance(request, h11.Request):
                return
            body = await _body(server, client)
            operation = operation_of(request.method.decode(), request.target.decode().split("?")[0])
            if operation == "write" and body.startswith(PUBLISHED):
                operation = "publish"  # the transfer's publication or drain record, not a block
            if run != self._run or self.hold(operation, self.passed):
                self.held.set()
                await trio.sleep_forever()
            self.passed[operation] += 1
            self.forwarding += 1
            self._quiet = trio.Event()
            try:
                await depot.send_all(upstream.send(h11.Request(method=request.method, target=request.target,
                                                               headers=request.headers)))
                await depot.send_all(upstream.send(h11.Data(data=body)) if body else b"")
                await depot.send_all(upstream.send(h11.EndOfMessage()))
                response = await _next(upstream, depot)
                assert isinstance(response, h11.Response)
                answer = await _body(upstream, depot)
                if 200 <= response.status_code < 300:
                    self.forwarded[operation] += 1
            finally:
                self.forwarding -= 1
                if self.forwarding == 0:
                    self._quiet.set()
            await client.send_all(server.send(h11.Response(status_code=response.status_code,
                                                           headers=response.headers, reason=response.reason)))
            if answer:
                await client.send_all(server.send(h11.Data(data=answer)))
            await client.send_all(server.send(h11.EndOfMessage()))
            if server.our_state is not h11.DONE or upstream.our_state is not h11.DONE:
                return
            server.start_next_cycle()
            upstream.start_next_cycle()


async def _next(conn: h11.Connection, stream: trio.SocketStream) -> object:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await stream.receive_some(1 << 16))


async def _body(conn: h11.Connection, stream: trio.SocketStream) -> bytes:
    data = bytearray()
    while True:
        event = await _next(conn, stream)
        if isinstance(event, h11.Data):
            data += event.data
        elif isinstance(event, h11.EndOfMessage):
            return bytes(data)
        else:
            raise h11.RemoteProtocolError(f"unexpected {event!r}")
