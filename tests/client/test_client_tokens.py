"""The depots file's token goes with every request to its depot (a depot may require it beyond allocating:
``require_token_for``), and nowhere else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import msgpack
import pytest

from lnet.client.sending.tree import round_trip
from lnet.client.wire.depot_client import DepotClient, Unauthorized
from lnet.depot import Depot

from .test_overlay_status import TOKEN, config, serving

CAP = "A" * 32


class _Bytes(httpx.AsyncByteStream):
    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b"abc"


async def test_the_token_goes_with_every_request() -> None:
    seen: list[tuple[str, str, str | None]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path, request.headers.get("authorization")))
        if request.url.path == "/v1/allocations":
            caps = {"read": CAP, "write": CAP, "manage": CAP, "size": 10, "expires": 1e10, "reliability": "soft"}
            body = {"allocations": [caps], "depot": "d"}
            return httpx.Response(201, content=msgpack.packb(body), headers={"content-type": "application/msgpack"})
        if request.method == "PUT":
            return httpx.Response(204, headers={"x-lnet-length": "3"})
        if request.url.path.startswith("/v1/data/"):
            return httpx.Response(200, stream=_Bytes(), headers={"content-length": "3"})
        body = {"bytes": 3, "seconds": 0.1, "hex": "00", "name": "d", "expires": 1e10}
        return httpx.Response(200, content=msgpack.packb(body), headers={"content-type": "application/msgpack"})

    async with DepotClient("http://d.test:6714", token=TOKEN, transport=httpx.MockTransport(answer)) as client:
        alloc = await client.allocate_one(10, 60)
        await client.write(alloc.write, b"abc")
        assert await client.read(alloc.read) == b"abc"
        await client.digest(alloc.read)
        await client.copy(alloc.read, f"http://e.test:6714/v1/data/{CAP}")
        await client.extend(alloc.manage, 10)
        await client.status()
    assert [method for method, _, _ in seen] == ["POST", "PUT", "GET", "GET", "POST", "POST", "GET"]
    assert {header for _, _, header in seen} == {f"Bearer {TOKEN}"}
    async with DepotClient("http://d.test:6714", transport=httpx.MockTransport(answer)) as anonymous:
        await anonymous.status()
    assert seen[-1][2] is None  # no token given, none sent


async def test_a_directory_send_times_its_first_hop_with_the_token(tmp_path: Path) -> None:
    """``lnet-send DIR`` times a few status requests to its first hop: a depot that wants its token for status
    gets it (and refuses without it)."""
    gated = config(tmp_path, "atl", operator_token=TOKEN, require_token_for=("allocate", "status"))
    async with Depot(gated) as depot, serving(depot.app) as url:
        assert 0 < await round_trip(url, 5.0, TOKEN) < 5.0
        with pytest.raises(Unauthorized):
            await round_trip(url, 5.0)
