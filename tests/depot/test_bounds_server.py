"""Bounds that only real sockets show: a client that stops reading a response is cut off after read_timeout."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import trio

from lnet.client.wire.depot_client import DepotClient
from lnet.depot import DepotConfig, serve

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
