"""``lnet-get``'s head start: each replica's host dialled before trio loads (``lnet.client.wire.predial``).

Real loopback sockets: the early dials run in threads with the standard library's blocking connect.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
import trio

from lnet.client.wire.predial import Predial, _Dial

from .test_imports import loaded_after


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(5)
    yield sock
    sock.close()


def accepted(listener: socket.socket) -> socket.socket:
    conn, _ = listener.accept()
    conn.settimeout(5)
    return conn


async def test_the_first_connection_to_a_host_is_the_one_dialled_early(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    predial = Predial.start([f"http://127.0.0.1:{port}/a.bin", f"http://127.0.0.1:{port}/b.bin"], timeout=5)
    assert len(predial) == 1  # one early connection per (host, port)
    early = await trio.to_thread.run_sync(accepted, listener)  # accepted before anything asked for a stream
    stream = await predial.connect("127.0.0.1", port)
    await stream.send_all(b"ping")
    assert early.recv(4) == b"ping"
    again = await predial.connect("127.0.0.1", port)  # the second one is dialled the usual way
    second = await trio.to_thread.run_sync(accepted, listener)
    await again.send_all(b"pong")
    assert second.recv(4) == b"pong"
    for s in (stream, again):
        await s.aclose()
    early.close()
    second.close()
    predial.close()


async def test_a_failed_early_dial_falls_back_to_the_usual_one_and_its_error() -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: refused
    predial = Predial.start([f"http://127.0.0.1:{port}/f"], timeout=5)
    with pytest.raises(OSError, match="connect"):
        await predial.connect("127.0.0.1", port)
    predial.close()


def test_close_ends_the_connections_no_download_took(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    predial = Predial.start([f"https://127.0.0.1:{port}/f"], timeout=5)
    early = accepted(listener)
    for dial in predial._dials.values():
        assert dial.done.wait(5)
    predial.close()
    assert early.recv(1) == b""  # the client closed it
    early.close()


async def test_a_connect_cancelled_while_it_waits_for_the_handshake_closes_the_early_connection(
    listener: socket.socket,
) -> None:
    port = listener.getsockname()[1]
    predial = Predial.start([f"http://127.0.0.1:{port}/f"], timeout=5)
    (dial,) = predial._dials.values()
    assert dial.done.wait(5)
    dial.done.clear()  # as if the handshake were still on its way
    with trio.move_on_after(0.05):
        await predial.connect("127.0.0.1", port)
    dial.done.set()
    early = await trio.to_thread.run_sync(accepted, listener)
    assert early.recv(1) == b""  # abandoned: closed, not leaked
    early.close()


def test_a_dial_that_lands_after_it_was_abandoned_closes_its_connection(listener: socket.socket) -> None:
    dial = _Dial()
    dial.abandon()
    dial.run("127.0.0.1", listener.getsockname()[1], 5)
    early = accepted(listener)
    assert early.recv(1) == b""
    assert dial.claim() is None
    early.close()


def test_urls_that_name_no_host_are_left_to_the_command_to_report() -> None:
    predial = Predial.start(["ftp://example.org/f", "http:///nohost", "http://127.0.0.1:notaport/f"], timeout=1)
    assert len(predial) == 0
    predial.close()


def test_the_predial_loads_no_event_loop() -> None:
    modules = loaded_after("import lnet.client.wire.predial")["modules"]
    assert isinstance(modules, list)
    assert not [m for m in modules if m.split(".")[0] in ("trio", "h11", "httpx")]
