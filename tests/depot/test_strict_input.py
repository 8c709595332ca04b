"""Input a depot must not guess at: ranges as RFC 9110 reads them, and control input that could mean two things
(a key or a query parameter given twice, JSON under another content type, a size past any allocation)."""

from __future__ import annotations

import json

import httpx
import msgpack
import pytest

from .conftest import MakeDepot

MiB = 1024 * 1024


def _http(client: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=client._http._transport, base_url=client.base_url)  # type: ignore[attr-defined]


@pytest.mark.parametrize("spec", ["items=0-1", "bytes=abc", "bytes=10-5", "bytes=0-1,4-5", "bytes 0-1", "bytes=--1"])
async def test_an_unsupported_or_invalid_range_is_ignored(open_depot: MakeDepot, spec: str) -> None:
    async with open_depot() as (_, client), _http(client) as http:
        alloc = await client.allocate_one(100, 60)
        await client.write(alloc.write, b"0123456789")
        answer = await http.get(f"/v1/data/{alloc.read}", headers={"Range": spec})
        assert (answer.status_code, answer.content) == (200, b"0123456789")
        assert "content-range" not in answer.headers
        head = await http.head(f"/v1/data/{alloc.read}", headers={"Range": spec})
        assert (head.status_code, head.headers["content-length"]) == (200, "10")


async def test_two_range_lines_are_a_list_and_ignored(open_depot: MakeDepot) -> None:
    async with open_depot() as (_, client), _http(client) as http:
        alloc = await client.allocate_one(100, 60)
        await client.write(alloc.write, b"0123456789")
        answer = await http.get(f"/v1/data/{alloc.read}", headers=[("Range", "bytes=0-1"), ("Range", "bytes=4-5")])
        assert (answer.status_code, answer.content) == (200, b"0123456789")
        unit = await http.get(f"/v1/data/{alloc.read}", headers={"Range": "BYTES=2-3"})  # units ignore case
        assert (unit.status_code, unit.content, unit.headers["content-range"]) == (206, b"23", "bytes 2-3/10")


@pytest.mark.parametrize(
    ("written", "spec"), [(10, "bytes=10-"), (10, "bytes=50-60"), (10, "bytes=-0"), (0, "bytes=-5"), (0, "bytes=0-")]
)
async def test_an_unsatisfiable_range_is_416_with_the_length(open_depot: MakeDepot, written: int, spec: str) -> None:
    async with open_depot() as (_, client), _http(client) as http:
        alloc = await client.allocate_one(100, 60)
        if written:
            await client.write(alloc.write, b"x" * written)
        for method in ("GET", "HEAD"):
            answer = await http.request(method, f"/v1/data/{alloc.read}", headers={"Range": spec})
            assert answer.status_code == 416
            assert answer.headers["content-range"] == f"bytes */{written}"


async def test_a_key_given_twice_is_refused(open_depot: MakeDepot) -> None:
    async with open_depot() as (depot, client), _http(client) as http:
        answer = await http.post("/v1/allocations", content=b'{"size":1,"size":5000,"duration":60}',
                                 headers={"Content-Type": "application/json"})
        assert answer.status_code == 400
        assert answer.json()["message"] == "the body names 'size' twice"
        # msgpack's map {"size": 1, "size": 5000, "duration": 60}, which msgpack.packb cannot even make
        packed = b"\x83\xa4size\x01\xa4size\xcd\x13\x88\xa8duration\x3c"
        answer = await http.post("/v1/allocations", content=packed, headers={"Content-Type": "application/msgpack"})
        assert (answer.status_code, answer.json()["error"]) == (400, "bad_request")
        assert "twice" in answer.json()["message"]
        assert depot.store.used == 0


async def test_a_query_parameter_given_twice_is_refused(open_depot: MakeDepot) -> None:
    async with open_depot() as (_, client), _http(client) as http:
        alloc = await client.allocate_one(100, 60)
        await client.write(alloc.write, b"0123456789")
        answer = await http.put(f"/v1/data/{alloc.write}?offset=2&offset=5", content=b"abc")
        assert answer.status_code == 400
        assert "offset" in answer.json()["message"]
        assert await client.read(alloc.read) == b"0123456789"  # written nowhere
        digest = await http.get(f"/v1/digest/{alloc.read}?algorithm=sha256&algorithm=blake3")
        assert digest.status_code == 400


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "text/html"])
async def test_a_control_body_of_another_type_is_415(open_depot: MakeDepot, content_type: str) -> None:
    async with open_depot() as (depot, client), _http(client) as http:
        answer = await http.post("/v1/allocations", content=json.dumps({"size": 10, "duration": 60}),
                                 headers={"Content-Type": content_type})
        assert (answer.status_code, answer.json()["error"]) == (415, "bad_request")
        assert "application/msgpack or application/json" in answer.json()["message"]
        assert depot.store.used == 0
        untyped = await http.post("/v1/allocations", content=json.dumps({"size": 10, "duration": 60}))
        assert untyped.status_code == 201  # no content type: JSON, as the protocol says


@pytest.mark.parametrize("size", [2**63, 2**64 - 1, 10**30, 16 * MiB + 1])
async def test_a_size_past_any_allocation_is_413(open_depot: MakeDepot, size: int) -> None:
    async with open_depot(max_allocation=16 * MiB) as (depot, client), _http(client) as http:
        answer = await http.post("/v1/allocations", content=json.dumps({"size": size, "duration": 60}),
                                 headers={"Content-Type": "application/json"})
        assert (answer.status_code, answer.json()["error"]) == (413, "too_large")
        if size < 2**64:
            packed = msgpack.packb({"size": size, "duration": 60})
            answer = await http.post("/v1/allocations", content=packed, headers={"Content-Type": "application/msgpack"})
            assert answer.status_code == 413
        negative = await http.post("/v1/allocations", content=json.dumps({"size": -size, "duration": 60}))
        assert negative.status_code == 400
        assert depot.store.used == 0


async def test_copy_positions_past_any_allocation_are_416(open_depot: MakeDepot) -> None:
    async with open_depot("a") as (_, a), open_depot("b") as (_, b), _http(a) as http:
        source = await a.allocate_one(100, 60)
        await a.write(source.write, b"0123456789")
        target = await b.allocate_one(100, 60)
        for fields in ({"offset": 2**64}, {"length": 2**63}, {"offset": 2**63, "length": 2**63},
                       {"dest_offset": 10**18}, {"dest_offset": 2**64 - 1}):
            answer = await http.post(f"/v1/copy/{source.read}", content=json.dumps({"to": target.write_url, **fields}))
            assert (answer.status_code, answer.json()["error"]) == (416, "range"), fields
        assert (await b.probe(target.manage)).length == 0
