"""Bounds that only real sockets show: a client that stops reading a response is cut off after read_timeout, and
HTTP/2 (whose buffering and waits no depot bound reaches) is not spoken."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

import h2.config
import h2.connection
import h2.events
import pytest
import trio

from lnet.client.wire.depot_client import DepotClient
from lnet.depot import DepotConfig, serve

from .tls import certificate

MiB = 1024 * 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="TCP_USER_TIMEOUT is Linux's")
async def test_a_client_that_stops_reading_is_cut_off_after_read_timeout(tmp_path: Path) -> None:
    config = DepotConfig(
        listen="127.0.0.1:0", data_dir=tmp_path / "d", capacity=64 * MiB, max_allocation=32 * MiB, read_timeout=1.0,
    )
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve, config)
        async with DepotClient(url) as client:
            alloc = await client.allocate_one(32 * MiB, 600)
            await client.write(alloc.write, bytes(32 * MiB))  # far more than the socket buffers hold
            stalled = trio.socket.socket()
            stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            parts = urlsplit(url)
            await stalled.connect((parts.hostname, parts.port))
            await stalled.send(f"GET /v1/data/{alloc.read} HTTP/1.1\r\nHost: d\r\n\r\n".encode())
            await trio.sleep(0.5)
            assert (await client.status())["in_flight"] == 2  # the stalled read, and this status request
            with trio.fail_after(20):  # without a bound on the send: for as long as the client keeps still
                while (await client.status())["in_flight"] > 1:  # noqa: ASYNC110 -- polled through its HTTP status
                    await trio.sleep(0.25)
            await client.free(alloc.manage)
            assert (await client.status())["used"] == 0  # the buffer was no longer pinned
            stalled.close()
        nursery.cancel_scope.cancel()


async def test_http2_is_refused_and_tls_offers_http1_only(tmp_path: Path) -> None:
    """hypercorn speaks HTTP/2 too; the depot does not (hypercorn buffers an HTTP/2 response whole however little
    window the client grants, outside the depot's capacity): 505 over prior knowledge, and no h2 in TLS's ALPN."""
    config = DepotConfig(listen="127.0.0.1:0", data_dir=tmp_path / "d")
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve, config)
        parts = urlsplit(url)
        assert parts.hostname is not None
        assert parts.port is not None
        async with await trio.open_tcp_stream(parts.hostname, parts.port) as stream:
            client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            client.initiate_connection()
            client.send_headers(1, [(":method", "GET"), (":path", "/v1/status"), (":scheme", "http"),
                                    (":authority", "d")], end_stream=True)
            await stream.send_all(client.data_to_send())
            status = None
            with trio.fail_after(10):
                while status is None:
                    data = await stream.receive_some(65536)
                    assert data, "the depot closed the connection without an answer"
                    for event in client.receive_data(data):
                        if isinstance(event, h2.events.ResponseReceived):
                            status = dict(event.headers)[b":status"]
                    await stream.send_all(client.data_to_send())
            assert status == b"505"
        nursery.cancel_scope.cancel()

    certfile, keyfile, context = certificate(tmp_path)
    tls = DepotConfig(listen="127.0.0.1:0", data_dir=tmp_path / "t", certfile=certfile, keyfile=keyfile)
    context.set_alpn_protocols(["h2", "http/1.1"])
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve, tls)
        parts = urlsplit(url)
        assert parts.hostname is not None
        assert parts.port is not None
        tcp = await trio.open_tcp_stream(parts.hostname, parts.port)
        async with trio.SSLStream(tcp, context, server_hostname=parts.hostname) as stream:
            with trio.fail_after(10):
                await stream.do_handshake()
            assert stream.selected_alpn_protocol() == "http/1.1"
        nursery.cancel_scope.cancel()


async def test_a_request_head_sent_a_byte_at_a_time_is_cut_at_read_timeout(tmp_path: Path) -> None:
    """Each byte comes well within read_timeout, so no single wait runs out: the head as a whole is bounded."""
    config = DepotConfig(listen="127.0.0.1:0", data_dir=tmp_path / "d", read_timeout=1.0)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve, config)
        parts = urlsplit(url)
        assert parts.hostname is not None
        assert parts.port is not None
        async with await trio.open_tcp_stream(parts.hostname, parts.port) as stream:
            head = b"GET /v1/status HTTP/1.1\r\nHost: d\r\n" + b"X-Slow: " + b"a" * 200
            started = trio.current_time()
            cut = False
            with trio.move_on_after(15):  # hypercorn's keep-alive timer (75 s) was the only bound
                for byte in head:
                    try:
                        await stream.send_all(bytes([byte]))
                    except trio.BrokenResourceError:
                        cut = True
                        break
                    with trio.move_on_after(0.25):  # a byte every quarter second
                        if await stream.receive_some(1024) == b"":
                            cut = True
                            break
            assert cut
            assert trio.current_time() - started < 3  # read_timeout (1 s), and some slack for a busy machine
        nursery.cancel_scope.cancel()
