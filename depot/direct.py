"""Large write bodies received straight into the allocation, under hypercorn.

Through hypercorn a body travels socket -> ``bytes`` -> h11's buffer -> an h11 event -> hypercorn's queue -> an
ASGI message -> starlette -> the allocation: per received piece a dozen Python calls and two trips through the
event loop, and the pieces are as small as the client's writes when the depot keeps up with it (curl writes
64 KiB at a time). Here the body of a ``PUT /v1/data/...`` instead goes from the socket into the allocation with
``recv_into``, as much as the kernel has per call, whatever size the client writes in.

How: ``install()`` wraps hypercorn's ``H11Protocol._create_stream`` (the connection's reading task creates the
request's stream and starts the application there). For a data PUT with a Content-Length of at least
``MIN_BODY`` bytes, served by an application wrapped with ``serving``, it hands the application a ``DirectBody``
(through a context variable, which the application's task inherits) and stops reading the connection until the
application is done with it. The application either takes the body (``DirectBody.receive_into``: the bytes h11
already holds, then ``recv_into`` until the Content-Length is in or the client stops, each wait bounded by
hypercorn's ``read_timeout``; then h11 is told the body is complete) or leaves it, and hypercorn reads on as
usual. ``serving`` releases the reading task whatever the application does, so a connection is never left
waiting.

Answers go the other way the same way. Through hypercorn a read's body is sliced out of the allocation into a
``bytes`` per MiB (ASGI bodies are bytes; hypercorn copies anything else with ``bytes()``), then travels as an
ASGI message, a hypercorn event and an h11 event to the socket. For a ``GET /v1/data/...`` the application is
offered a ``DirectReply`` instead: once hypercorn has sent the response's head, the application sends the body
from views of the allocation with the socket's own ``send`` (under hypercorn's send lock, each wait bounded by
``read_timeout``), tells h11 how many bytes went, and ends the response the usual way, so that keep-alive and
the next request are hypercorn's as before. A client that stops taking bytes, or goes, has its connection closed.

Both ways keep the depot's fair shares (fair_share.py): the application passes each a ``due`` (when the body's
next byte is due, given the bytes moved so far), and a body that falls behind it is cut like one that stalls.
A reply counts the bytes its client acknowledged, not those queued in the kernel (``_writable``).

It touches h11 and hypercorn internals (``Connection._reader``, ``_receive_buffer``, ``_writer``, the readers'
and writers' ``_remaining`` and ``_length``, ``H11Protocol._create_stream``, ``TCPServer._read_data``), so
``install`` applies it only to the versions it was checked against (``CHECKED_HYPERCORN``, ``CHECKED_H11``:
constraints.txt pins them) and h11's private modules are imported there, not at import; with other versions
every body goes the usual way, and the depot says so (``lnet.depot.fast_path``).

The keep-alive fix rides on the same wrapper of ``TCPServer._read_data`` but not on the rest:
``install_keep_alive_fix`` applies it whether the fast path is on or off (see its docstring).
"""

from __future__ import annotations

import contextvars
import fcntl
import logging
import os
import struct
import sys
import termios
from collections.abc import Awaitable, Callable, MutableMapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import h11
import trio

__all__ = [
    "CHECKED_H11", "CHECKED_HYPERCORN", "MIN_BODY", "DirectBody", "DirectReply", "check", "current", "install",
    "install_keep_alive_fix", "installed", "keep_alive_fixed", "reply", "serving",
]

log = logging.getLogger("lnet.depot.direct")

CHECKED_HYPERCORN = frozenset({"0.17.3", "0.18.0"})
CHECKED_H11 = frozenset({"0.16.0"})
MIN_BODY = 64 * 1024  # smaller bodies are not worth the hand-over
_DATA_PATH = b"/v1/data/"

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]
Due = Callable[[int], float]
"""When a body's next byte is due (trio time), given the bytes it moved so far: its pace (fair_share.py)."""

bodies_taken = 0  # bodies received this way since the process started (the tests check the path was taken)
replies_sent = 0  # answers' bodies sent this way since the process started



class _NotInstalled:
    """Stands for h11's ``ContentLengthReader`` and ``ContentLengthWriter`` until ``install`` imports them: no
    reader or writer is one, so nothing is taken the direct way."""


_ContentLengthReader: type[Any] = _NotInstalled
_ContentLengthWriter: type[Any] = _NotInstalled

_current: contextvars.ContextVar[DirectBody | None] = contextvars.ContextVar("lnet_direct_body", default=None)


def current() -> DirectBody | None:
    """The body this request's application task may take, if any (None in process, under ``ASGITransport``)."""
    return _current.get()


def reply() -> DirectReply | None:
    """How this request's application task may send its answer's body, if it may (None in process)."""
    return _reply.get()


class DirectBody:
    """One request's body, held back by hypercorn for the application to receive where it wants it."""

    def __init__(self, protocol: Any, connection: h11.Connection, stream: Any, length: int) -> None:
        self._protocol = protocol
        self._connection = connection
        self._stream = stream
        self.length = length
        self.taken = False
        self.too_slow = False  # the body fell behind its pace (``receive_into``'s ``due``)
        self._released = trio.Event()

    def release(self) -> None:
        """Let hypercorn read the connection again (idempotent)."""
        self._released.set()

    async def wait_released(self) -> None:
        await self._released.wait()

    async def receive_into(self, target: memoryview, due: Due | None = None) -> int:
        """Receive the body into ``target`` (exactly ``length`` bytes long); returns the bytes that arrived, fewer
        than ``length`` when the client went away, stalled past ``read_timeout``, or fell behind ``due`` (then
        ``too_slow`` is set; the connection is closed after the answer). Call at most once."""
        if self.taken or len(target) != self.length:
            raise ValueError("receive_into: once, into exactly the body's length")
        self.taken = True
        global bodies_taken
        bodies_taken += 1
        reader = self._connection._reader
        try:
            if not isinstance(reader, _ContentLengthReader) or reader._remaining != self.length:
                raise RuntimeError("the body was read already")  # cannot happen while hypercorn waits
            held = self._connection._receive_buffer.maybe_extract_at_most(self.length)
            position = 0
            if held:
                position = len(held)
                target[:position] = held
            timeout = self._protocol.config.read_timeout or float("inf")
            position, self.too_slow = await _fill(self._stream, target, position, timeout, due)
            reader._remaining = self.length - position
            if position == self.length:
                event = self._connection.next_event()  # the end of the body: h11's state moves on
                if not isinstance(event, h11.EndOfMessage):
                    raise RuntimeError(f"h11 saw {type(event).__name__} after the body")
            return position
        finally:
            self.release()


async def _fill(
    stream: Any, target: memoryview, position: int, wait_s: float, due: Due | None = None
) -> tuple[int, bool]:
    """Receive into ``target[position:]`` until it is full, the peer stops, a wait passes ``wait_s``, or the time
    passes ``due(position)``; returns the new position, and whether it fell behind ``due``. On a plain socket the
    kernel copies straight into ``target``.

    No SO_RCVLOWAT here, although waking once per 512 KiB instead of once per piece cut a small-piece writer's
    cost to a third on loopback: Linux clamps a TCP socket's receive window to the low-water mark it is given
    (``tcp_set_rcvlowat`` sets ``window_clamp``), and on the emulated Abilene that cut a window-limited long
    transfer by a quarter (``./run demo``: pinned direct 6.94 against 9.00 Mbit/s). Long paths are what lnet is
    for."""
    socket = getattr(stream, "socket", None)  # a plain SocketStream; TLS streams have none
    end = len(target)
    with trio.CancelScope() as scope:
        try:
            while position < end:
                scope.deadline = trio.current_time() + wait_s  # each wait is bounded, not the whole body
                if due is not None:  # ... and so is the body's pace (fair_share.py)
                    scope.deadline = min(scope.deadline, due(position))
                if socket is not None:
                    got = await socket.recv_into(target[position:])
                else:
                    data = await stream.receive_some(end - position)
                    got = len(data)
                    target[position : position + got] = data
                if got == 0:
                    break
                position += got
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.debug("direct body cut off after %d of %d bytes: %r", position, end, exc)
    too_slow = scope.cancelled_caught and due is not None and trio.current_time() >= due(position)
    if scope.cancelled_caught:
        log.debug("direct body %s after %d of %d bytes", "fell behind its pace" if too_slow else
                  f"stalled past {wait_s:g}s", position, end)
    return position, too_slow


_YIELD_EVERY = 4 * 1024 * 1024
"""Bytes ``_drain`` sends without waiting before it lets the connection's other tasks run."""
_TLS_PIECE = 1024 * 1024
"""What ``_drain`` hands a TLS stream at a time (each its own bounded wait)."""


class DirectReply:
    """One answer's body, sent by the application from its own buffer straight to the connection's socket."""

    def __init__(self, server: Any, connection: h11.Connection) -> None:
        self._server = server
        self._connection = connection
        self.too_slow = False  # the client fell behind the answer's pace (``send``'s ``due``)

    def ready(self, length: int) -> bool:
        """Whether hypercorn has sent a head announcing exactly ``length`` body bytes, none of them sent yet: only
        then may ``send`` be used (else the application sends the body the usual way)."""
        writer = self._connection._writer
        return isinstance(writer, _ContentLengthWriter) and writer._length == length

    async def send(self, buffer: Any, start: int, end: int, due: Due | None = None) -> bool:
        """Send ``buffer[start:end]`` (after ``ready``) and account it to h11; False when the client went away,
        took no byte for ``read_timeout``, or fell behind ``due`` (then ``too_slow`` is set): its connection is
        then closed, and the application ends as usual."""
        global replies_sent
        replies_sent += 1
        writer = self._connection._writer
        if not isinstance(writer, _ContentLengthWriter):
            raise RuntimeError("send: only after ready()")
        server = self._server
        wait_s = server.config.read_timeout or float("inf")
        with memoryview(buffer) as whole, whole[start:end] as view:
            async with server.send_lock:
                sent, self.too_slow = await _drain(server.stream, view, wait_s, due)
        writer._length -= sent
        if sent == end - start:
            return True
        writer._length = 0  # h11 may end the message; nothing more reaches the closed connection
        log.debug("direct reply cut off after %d of %d bytes", sent, end - start)
        with trio.CancelScope(shield=True):
            await server.stream.aclose()  # the reading task sees it closed and tells hypercorn
        return False


async def _drain(stream: Any, view: memoryview, wait_s: float, due: Due | None = None) -> tuple[int, bool]:
    """Send ``view`` on ``stream``; returns the bytes sent, fewer when the peer went, a wait passed ``wait_s`` or
    the time passed ``due(sent)``, and whether it fell behind ``due``.

    On a plain socket each ``write`` takes as much as the kernel will, from the view itself (no copy in Python),
    and the loop waits for the socket only when it is full: trio's ``socket.send`` passes through the scheduler
    twice per call even when the socket has room, and going around it cut the depot's CPU per GiB read from
    0.48-0.52 to 0.38-0.40 (8 MiB reads on loopback, medians of 6 rounds, two A/B pairs). Every ``_YIELD_EVERY``
    bytes it checkpoints, so that a fast reader starves no other task. (The same loop for receiving, with
    ``readv``, changed nothing measurable for a writer in 64 KiB pieces: its cost is the wait per piece.)"""
    socket = getattr(stream, "socket", None)  # TLS streams have none: they encrypt a piece at a time
    position, end = 0, len(view)
    too_slow = False
    with trio.CancelScope() as scope:
        try:
            if socket is not None:
                fd = socket.fileno()
                unyielded = 0
                while position < end:  # the scheduler only when the socket is full
                    try:
                        sent = os.write(fd, view[position:])
                    except BlockingIOError:
                        cut = await _writable(socket, fd, position, wait_s, due)  # each wait is bounded
                        if cut is not None:
                            too_slow = cut == "slow"
                            log.debug("direct reply %s after %d of %d bytes", cut, position, end)
                            break
                        continue
                    position += sent
                    unyielded += sent
                    if unyielded >= _YIELD_EVERY:
                        unyielded = 0
                        await trio.lowlevel.checkpoint()
            while position < end:
                scope.deadline = trio.current_time() + wait_s  # each wait is bounded, not the whole body
                if due is not None:
                    scope.deadline = min(scope.deadline, due(position))
                piece = min(end, position + _TLS_PIECE)
                await stream.send_all(view[position:piece])
                position = piece
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.debug("direct reply: the connection failed: %r", exc)
    too_slow = too_slow or (scope.cancelled_caught and due is not None and trio.current_time() >= due(position))
    return position, too_slow


_PACE_CHECK_S = 1.0
"""How often a reply waiting for room in its socket looks again at what its client took (``_writable``)."""


async def _writable(socket: Any, fd: int, position: int, wait_s: float, due: Due | None) -> str | None:
    """Wait until the socket takes more bytes; None then, or why the reply is cut: "stalled" (no room for
    ``wait_s``) or "slow" (the bytes the client has taken fell behind ``due``).

    The pace counts the bytes the client took (acknowledged), not those written: the kernel queues megabytes per
    connection (on loopback a reader with a 4 KiB receive buffer had 2.8 MB queued for it), which would give a
    reader that takes a KiB every few seconds many minutes of credit. As the client takes bytes while the socket
    stays full, the wait looks again every ``_PACE_CHECK_S``."""
    stalled_at = trio.current_time() + wait_s
    while True:
        limit = stalled_at
        if due is not None:
            limit = min(limit, due(position - _unacknowledged(fd)))
        now = trio.current_time()
        if now >= limit:
            return "stalled" if now >= stalled_at else "slow"
        with trio.move_on_at(min(limit, now + _PACE_CHECK_S)) as waited:
            await trio.lowlevel.wait_writable(socket)
        if not waited.cancelled_caught:
            return None


def _unacknowledged(fd: int) -> int:
    """Bytes written to the socket that its peer has not acknowledged yet (Linux's ``SIOCOUTQ``); 0 where that
    cannot be asked (then the pace counts bytes written)."""
    if _SIOCOUTQ is None:
        return 0
    try:
        answer = fcntl.ioctl(fd, _SIOCOUTQ, b"\0\0\0\0")
    except OSError:
        return 0
    return max(0, int(struct.unpack("i", answer)[0]))


_SIOCOUTQ: int | None = getattr(termios, "TIOCOUTQ", None) if sys.platform.startswith("linux") else None


def serving(app: ASGIApp) -> ASGIApp:
    """``app`` as hypercorn should run it: it may take data bodies, and whatever it does (answering, failing,
    being cancelled) the connection's reading task goes on once it returns."""

    async def direct_app(scope: Scope, receive: Any, send: Any) -> None:
        try:
            await app(scope, receive, send)
        finally:
            body = _current.get()
            if body is not None:
                body.release()

    direct_app.lnet_direct = True  # type: ignore[attr-defined]
    return direct_app


def _direct_server(protocol: Any, request: h11.Request, method: bytes) -> Any:
    """The connection's ``TCPServer`` if ``request`` is a ``method`` on a data capability, to an application
    that takes direct bodies and replies over h11; else None."""
    if request.method != method or not request.target.startswith(_DATA_PATH):
        return None
    if not getattr(getattr(protocol.app, "app", None), "lnet_direct", False):
        return None
    if not isinstance(protocol.connection, h11.Connection):
        return None
    return _server.get()


def _offered(protocol: Any, request: h11.Request) -> DirectBody | None:
    """A ``DirectBody`` for ``request`` if it is a large enough data PUT to an application that takes them."""
    server = _direct_server(protocol, request, b"PUT")
    if server is None:
        return None
    connection = protocol.connection
    reader = connection._reader
    if not isinstance(reader, _ContentLengthReader) or reader._remaining < MIN_BODY:
        return None
    return DirectBody(protocol, connection, server.stream, reader._remaining)


def _reply_offered(protocol: Any, request: h11.Request) -> DirectReply | None:
    """A ``DirectReply`` for ``request`` if it reads data from an application that takes them."""
    server = _direct_server(protocol, request, b"GET")
    return None if server is None else DirectReply(server, protocol.connection)


# This connection's TCPServer, set in its reading task (H11Protocol runs there) and inherited by the requests'
# application tasks.
_server: contextvars.ContextVar[Any] = contextvars.ContextVar("lnet_direct_server", default=None)
_reply: contextvars.ContextVar[DirectReply | None] = contextvars.ContextVar("lnet_direct_reply", default=None)
_installed = False
_keep_alive_fixed = False


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _check_hypercorn() -> str | None:
    found = _version("hypercorn")
    if found not in CHECKED_HYPERCORN:
        return f"hypercorn {found} is not a version it was checked against ({', '.join(sorted(CHECKED_HYPERCORN))})"
    try:
        from hypercorn.protocol.h11 import H11Protocol
        from hypercorn.trio.tcp_server import TCPServer
    except ImportError as exc:
        return f"cannot import what it wraps: {exc}"
    missing = [f"TCPServer.{name}" for name in ("_read_data",) if not hasattr(TCPServer, name)]
    missing += [
        f"H11Protocol.{name}" for name in ("_create_stream", "_send_h11_event") if not hasattr(H11Protocol, name)
    ]
    return f"missing in this hypercorn: {', '.join(missing)}" if missing else None


def check() -> str | None:
    """Why direct bodies and replies cannot be installed with the hypercorn and h11 here, or None if they can."""
    problem = _check_hypercorn()
    if problem is not None:
        return problem
    found = _version("h11")
    if found not in CHECKED_H11:
        return f"h11 {found} is not a version it was checked against ({', '.join(sorted(CHECKED_H11))})"
    try:
        from h11._readers import ContentLengthReader
        from h11._writers import ContentLengthWriter
    except ImportError as exc:
        return f"cannot import what it uses: {exc}"
    connection = h11.Connection(h11.SERVER)
    missing = [f"Connection.{name}" for name in ("_reader", "_receive_buffer", "_writer")
               if not hasattr(connection, name)]
    missing += [f"ContentLengthReader.{name}" for name in ("_remaining",) if not hasattr(ContentLengthReader(1), name)]
    missing += [f"ContentLengthWriter.{name}" for name in ("_length",) if not hasattr(ContentLengthWriter(1), name)]
    return f"missing in this h11: {', '.join(missing)}" if missing else None


def install_keep_alive_fix() -> bool:
    """Have hypercorn close a connection once it stops reading it; returns whether that is in place. Idempotent.

    hypercorn stops reading a connection idle for ``read_timeout`` (or at the end of its stream) but its keep-alive
    timer holds the connection open, unread, until ``keep_alive_timeout``: a client that reuses it in between
    waits for an answer until its own timeout. The wrapper of ``TCPServer._read_data`` stops that timer when
    reading stops (and notes the connection's server for ``install``, which needs it). Applied for the hypercorn
    versions checked, whether or not the fast path is on; with others ``lnet.depot.server`` lowers hypercorn's
    ``keep_alive_timeout`` to ``read_timeout`` instead (public configuration, not as tight) and says so."""
    global _keep_alive_fixed
    if _keep_alive_fixed:
        return True
    if _check_hypercorn() is not None:
        return False
    from hypercorn.trio.tcp_server import TCPServer

    original_read_data = TCPServer._read_data

    async def _read_data(self: Any) -> None:
        _server.set(self)  # this connection's reading task: H11Protocol runs in it
        await original_read_data(self)
        await self.idle_task.stop()  # reading stopped: let the connection close now, not at keep_alive_timeout

    TCPServer._read_data = _read_data  # type: ignore[method-assign]
    _keep_alive_fixed = True
    return True


def keep_alive_fixed() -> bool:
    return _keep_alive_fixed


def install() -> bool:
    """Wrap hypercorn's h11 protocol (and, through ``install_keep_alive_fix``, its trio TCP server) if ``check``
    finds nothing against it; returns whether direct bodies and replies are in place. Idempotent."""
    global _installed, _ContentLengthReader, _ContentLengthWriter
    if _installed:
        return True
    if check() is not None or not install_keep_alive_fix():
        return False
    from h11._readers import ContentLengthReader
    from h11._writers import ContentLengthWriter
    from hypercorn.protocol.h11 import H11Protocol

    _ContentLengthReader, _ContentLengthWriter = ContentLengthReader, ContentLengthWriter
    original_create_stream = H11Protocol._create_stream

    async def _create_stream(self: Any, request: h11.Request) -> None:
        body = _offered(self, request)
        token = _current.set(body)
        reply_token = _reply.set(_reply_offered(self, request))
        try:
            await original_create_stream(self, request)
        finally:
            _reply.reset(reply_token)
            _current.reset(token)
        if body is None:
            return
        if getattr(self.stream, "app_put", None) is None:  # no application was started (a bad Host)
            return
        if self.connection.they_are_waiting_for_100_continue:  # the client waits for it before the body
            await self._send_h11_event(
                h11.InformationalResponse(status_code=100, headers=self.config.response_headers("h11"))
            )
        await body.wait_released()

    H11Protocol._create_stream = _create_stream  # type: ignore[method-assign]
    _installed = True
    return True


def installed() -> bool:
    return _installed
