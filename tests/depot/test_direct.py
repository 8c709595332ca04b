"""Data bodies received straight into the allocation behind hypercorn (``lnet.depot.direct``), over real sockets:
exact bytes whatever the client's pieces, keep-alive after such a body, clients that stop or stall, and copies
(the push sends views of the allocation uncopied) byte-identical with their ranges."""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from lnet.client.wire.depot_client import Conflict, DepotClient
from lnet.depot import DepotConfig, direct, serve

from .tls import certificate

KiB = 1024
MiB = 1024 * KiB


@asynccontextmanager
async def depot(tmp_path: Path, name: str = "d", **overrides: object) -> AsyncIterator[str]:
    config = DepotConfig(listen="127.0.0.1:0", data_dir=tmp_path / name, name=name, **overrides)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve, config)
        yield url
        nursery.cancel_scope.cancel()


async def connect(url: str) -> trio.SocketStream:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return await trio.open_tcp_stream(host, int(port))


async def read_head(stream: trio.SocketStream, pending: bytearray) -> tuple[int, dict[str, str]]:
    """One response head from ``stream`` (bytes after it stay in ``pending``): its status and headers."""
    while b"\r\n\r\n" not in pending:
        chunk = await stream.receive_some(65536)
        if not chunk:
            raise EOFError("connection closed before a response")
        pending += chunk
    head, _, rest = bytes(pending).partition(b"\r\n\r\n")
    pending[:] = rest
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers


def put_head(cap: str, length: int, *, offset: int | None = None, expect: bool = False) -> bytes:
    target = f"/v1/data/{cap}" + ("" if offset is None else f"?offset={offset}")
    extra = "Expect: 100-continue\r\n" if expect else ""
    return f"PUT {target} HTTP/1.1\r\nHost: d\r\nContent-Length: {length}\r\n{extra}\r\n".encode()


async def test_a_put_in_many_small_pieces_stores_exactly_the_bytes_sent(tmp_path: Path) -> None:
    payload = os.urandom(3 * MiB + 12345)
    pieces = random.Random(16)
    async with depot(tmp_path) as url, DepotClient(url) as client:
        alloc = await client.allocate_one(4 * MiB, 60)
        before = direct.bodies_taken
        stream = await connect(url)
        async with stream:
            await stream.send_all(put_head(alloc.write, len(payload)))
            position = 0
            while position < len(payload):
                size = pieces.choice([1, 7, 1024, 4096, 16 * KiB, 64 * KiB])
                await stream.send_all(payload[position : position + size])
                position += size
                if pieces.random() < 0.05:
                    await trio.sleep(0.001)  # let the depot drain the socket: its reads get small pieces
            status, headers = await read_head(stream, bytearray())
        assert status == 204
        assert headers["x-lnet-length"] == str(len(payload))
        assert direct.bodies_taken == before + 1  # through the direct path, not hypercorn's
        assert await client.read(alloc.read) == payload


async def test_a_client_writing_16_kib_chunks_through_httpx(tmp_path: Path) -> None:
    payload = os.urandom(2 * MiB + 1)

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(payload), 16 * KiB):
            yield payload[start : start + 16 * KiB]

    async with depot(tmp_path) as url, DepotClient(url) as client:
        alloc = await client.allocate_one(len(payload), 60)
        assert await client.write_stream(alloc.write, chunks(), len(payload)) == len(payload)
        assert await client.read(alloc.read) == payload


async def test_expect_100_continue_is_answered_at_once(tmp_path: Path) -> None:
    """curl sends large bodies only after ``100 Continue`` (or after waiting a second for it)."""
    payload = os.urandom(512 * KiB)
    async with depot(tmp_path) as url, DepotClient(url) as client:
        alloc = await client.allocate_one(len(payload), 60)
        stream = await connect(url)
        async with stream:
            await stream.send_all(put_head(alloc.write, len(payload), expect=True))
            pending = bytearray()
            with trio.fail_after(0.5):
                status, _ = await read_head(stream, pending)
            assert status == 100
            await stream.send_all(payload)
            status, _ = await read_head(stream, pending)
        assert status == 204
        assert await client.read(alloc.read) == payload


async def test_keep_alive_after_a_direct_body_and_pipelined_requests(tmp_path: Path) -> None:
    first, second = os.urandom(200 * KiB), os.urandom(300 * KiB)
    async with depot(tmp_path) as url, DepotClient(url) as client:
        alloc = await client.allocate_one(len(first) + len(second), 60)
        stream = await connect(url)
        async with stream:
            # both requests in one go: the second's head arrives with the first's body
            await stream.send_all(
                put_head(alloc.write, len(first)) + first + put_head(alloc.write, len(second), offset=len(first))
                + second + f"GET /v1/data/{alloc.read} HTTP/1.1\r\nHost: d\r\nRange: bytes=0-9\r\n\r\n".encode()
            )
            pending = bytearray()
            assert (await read_head(stream, pending))[0] == 204
            status, headers = await read_head(stream, pending)
            assert status == 204
            assert headers["x-lnet-length"] == str(len(first) + len(second))
            status, headers = await read_head(stream, pending)
            assert status == 206
            while len(pending) < 10:
                pending += await stream.receive_some(100)
            assert bytes(pending) == first[:10]
        assert await client.read(alloc.read) == first + second


async def test_a_client_that_goes_away_mid_body_changes_nothing_readable(tmp_path: Path) -> None:
    async with depot(tmp_path) as url, DepotClient(url) as client:
        alloc = await client.allocate_one(MiB, 60)
        await client.write(alloc.write, b"kept" * 1000)
        stream = await connect(url)
        # an append (an overwrite below the length changes bytes as they arrive: protocol.md)
        await stream.send_all(put_head(alloc.write, 512 * KiB) + os.urandom(200 * KiB))
        await trio.sleep(0.05)
        await stream.aclose()
        # the depot notices, lets go of the allocation (the next write is taken) and commits none of the cut-off one
        with trio.fail_after(5):
            while True:
                try:
                    await client.write(alloc.write, b"more")
                    break
                except Conflict:
                    await trio.sleep(0.01)
        assert await client.read(alloc.read) == b"kept" * 1000 + b"more"


async def test_a_client_that_stalls_is_cut_off_after_read_timeout(tmp_path: Path) -> None:
    async with depot(tmp_path, read_timeout=1.0) as url, DepotClient(url) as client:
        alloc = await client.allocate_one(MiB, 60)
        stream = await connect(url)
        async with stream:
            await stream.send_all(put_head(alloc.write, 512 * KiB) + os.urandom(100 * KiB))
            with trio.fail_after(5):
                try:
                    status, _ = await read_head(stream, bytearray())
                except (EOFError, trio.BrokenResourceError):
                    status = 0  # closed without an answer: as good
            assert status in (0, 400)
        assert (await client.probe(alloc.manage)).length == 0
        await client.write(alloc.write, b"after")
        assert await client.read(alloc.read) == b"after"


async def test_a_small_body_and_a_wrong_length_take_the_usual_path(tmp_path: Path) -> None:
    async with depot(tmp_path) as url, DepotClient(url) as client:
        alloc = await client.allocate_one(MiB, 60)
        before = direct.bodies_taken
        await client.write(alloc.write, b"tiny")
        assert direct.bodies_taken == before
        stream = await connect(url)
        async with stream:  # more than the allocation holds: refused before a byte is read
            await stream.send_all(put_head(alloc.write, 2 * MiB))
            status, _ = await read_head(stream, bytearray())
        assert status == 416
        assert await client.read(alloc.read) == b"tiny"


@pytest.mark.parametrize("reliability", ["soft", "hard"])
async def test_copies_are_byte_identical_and_honour_ranges(tmp_path: Path, reliability: str) -> None:
    payload = os.urandom(5 * MiB + 333)
    async with (
        depot(tmp_path, "a") as a_url,
        depot(tmp_path, "b") as b_url,
        DepotClient(a_url) as one,
        DepotClient(b_url) as two,
    ):
        source = await one.allocate_one(len(payload), 60, reliability=reliability)  # type: ignore[arg-type]
        await one.write(source.write, payload)
        whole = await two.allocate_one(len(payload), 60)
        assert (await one.copy(source.read, whole.write_url)).nbytes == len(payload)
        assert await two.read(whole.read) == payload
        part = await two.allocate_one(3 * MiB, 60)
        await two.write(part.write, b"head")
        offset, length = 1234567, 2 * MiB + 99
        result = await one.copy(source.read, part.write_url, offset=offset, length=length, dest_offset=4)
        assert result.nbytes == length
        assert await two.read(part.read) == b"head" + payload[offset : offset + length]
        assert await two.read(part.read, 4 + 1000, 4 + 5000) == payload[offset + 1000 : offset + 5000]


async def test_a_large_write_over_tls(tmp_path: Path) -> None:
    """TLS streams have no socket to ``recv_into``: the body is decrypted in large reads and copied in."""
    certfile, keyfile, trusted = certificate(tmp_path)
    payload = os.urandom(MiB + 17)
    async with depot(tmp_path, certfile=certfile, keyfile=keyfile) as url:
        async with DepotClient(url.replace("http://", "https://"), verify=trusted) as client:
            alloc = await client.allocate_one(len(payload), 60)
            before = direct.bodies_taken
            await client.write(alloc.write, memoryview(payload))
            assert direct.bodies_taken == before + 1
            assert await client.read(alloc.read) == payload


async def test_an_idle_connection_past_read_timeout_is_closed_not_left_hanging(tmp_path: Path) -> None:
    """hypercorn stops reading a connection idle for read_timeout; it must close it too, or a client reusing
    it waits for an answer until its own timeout (keep_alive_timeout is longer)."""
    async with depot(tmp_path, read_timeout=1.0) as url, DepotClient(url, timeout=10) as client:
        await client.status()
        await trio.sleep(1.5)
        with trio.fail_after(3):
            await client.status()


# -- answers sent straight from the allocation (DirectReply) --------------------------------------------------


def get_head(cap: str, range_spec: str | None = None) -> bytes:
    extra = f"Range: bytes={range_spec}\r\n" if range_spec else ""
    return f"GET /v1/data/{cap} HTTP/1.1\r\nHost: d\r\n{extra}\r\n".encode()


async def read_body(stream: trio.SocketStream, pending: bytearray, length: int) -> bytes:
    while len(pending) < length:
        chunk = await stream.receive_some(MiB)
        if not chunk:
            raise EOFError(f"connection closed after {len(pending)} of {length} body bytes")
        pending += chunk
    body = bytes(pending[:length])
    del pending[:length]
    return body


@pytest.mark.parametrize("reliability", ["soft", "hard"])
async def test_reads_are_sent_from_the_allocation_exactly_with_ranges_and_keep_alive(
    tmp_path: Path, reliability: str
) -> None:
    payload = os.urandom(5 * MiB + 4321)
    async with depot(tmp_path) as url, DepotClient(url) as client:
        alloc = await client.allocate_one(len(payload), 60, reliability=reliability)  # type: ignore[arg-type]
        await client.write(alloc.write, payload)
        before = direct.replies_sent
        stream = await connect(url)
        async with stream:
            # three requests in one go on one connection: whole, a range, a suffix; then HEAD, which has no body
            await stream.send_all(
                get_head(alloc.read) + get_head(alloc.read, "1000-2999999") + get_head(alloc.read, "-5")
                + f"HEAD /v1/data/{alloc.read} HTTP/1.1\r\nHost: d\r\n\r\n".encode()
            )
            pending = bytearray()
            status, headers = await read_head(stream, pending)
            assert (status, headers["content-length"]) == (200, str(len(payload)))
            assert await read_body(stream, pending, len(payload)) == payload
            status, headers = await read_head(stream, pending)
            assert (status, headers["content-range"]) == (206, f"bytes 1000-2999999/{len(payload)}")
            assert await read_body(stream, pending, 2999000) == payload[1000:3000000]
            status, _ = await read_head(stream, pending)
            assert status == 206
            assert await read_body(stream, pending, 5) == payload[-5:]
            status, headers = await read_head(stream, pending)
            assert (status, headers["content-length"]) == (200, str(len(payload)))
            assert not pending  # HEAD: no body bytes, the connection in step
        assert direct.replies_sent == before + 3  # every body went the direct way
        assert await client.read(alloc.read, 7, 77) == payload[7:77]  # and DepotClient reads it so too


async def test_a_reader_that_goes_away_mid_body_leaves_the_depot_serving(tmp_path: Path) -> None:
    payload = os.urandom(8 * MiB)
    async with depot(tmp_path) as url, DepotClient(url) as client:
        alloc = await client.allocate_one(len(payload), 60)
        await client.write(alloc.write, payload)
        for _ in range(3):
            stream = await connect(url)
            await stream.send_all(get_head(alloc.read))
            pending = bytearray()
            assert (await read_head(stream, pending))[0] == 200
            await read_body(stream, pending, 100 * KiB)
            await stream.aclose()  # gone with megabytes still to send
        with trio.fail_after(5):
            assert await client.read(alloc.read) == payload
        await client.free(alloc.manage)  # its pin was let go: the free goes through and the bytes are gone
        assert (await client.status())["allocations"] == 0


async def test_a_reader_that_stops_taking_bytes_is_cut_off_after_read_timeout(tmp_path: Path) -> None:
    payload = os.urandom(32 * MiB)  # more than loopback's socket buffers hold
    async with depot(tmp_path, read_timeout=1.0) as url, DepotClient(url, timeout=10) as client:
        alloc = await client.allocate_one(len(payload), 60)
        await client.write(alloc.write, payload)
        stream = await connect(url)
        async with stream:
            await stream.send_all(get_head(alloc.read))
            pending = bytearray()
            assert (await read_head(stream, pending))[0] == 200
            await trio.sleep(2.5)  # takes nothing for longer than read_timeout
            received = len(pending)
            with trio.fail_after(5):
                try:
                    while chunk := await stream.receive_some(MiB):
                        received += len(chunk)
                except trio.BrokenResourceError:
                    pass  # reset: as good as closed
            assert received < len(payload)  # the depot closed it: the body never completed
        with trio.fail_after(5):
            assert await client.read(alloc.read, 0, 10) == payload[:10]  # and it serves others meanwhile


async def test_a_large_read_over_tls(tmp_path: Path) -> None:
    certfile, keyfile, trusted = certificate(tmp_path)
    payload = os.urandom(3 * MiB + 5)
    async with depot(tmp_path, certfile=certfile, keyfile=keyfile) as url:
        async with DepotClient(url.replace("http://", "https://"), verify=trusted) as client:
            alloc = await client.allocate_one(len(payload), 60)
            await client.write(alloc.write, payload)
            before = direct.replies_sent
            assert await client.read(alloc.read) == payload
            assert await client.read(alloc.read, MiB - 3, 2 * MiB + 3) == payload[MiB - 3 : 2 * MiB + 3]
            assert direct.replies_sent == before + 2
