"""The depot's operations through the one DepotClient, against in-process depots (httpx.ASGITransport)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import blake3
import httpx
import msgpack
import pytest
import trio
import trio.testing

from lnet.client.wire.depot_client import (
    BadRequest,
    Conflict,
    DepotClient,
    DepotFull,
    NotFound,
    RangeNotSatisfiable,
    TooLarge,
    Unauthorized,
    Upstream,
)
from lnet.depot import Depot, DepotConfig
from lnet.depot.store import prefault
from lnet.protocol import redact

from .conftest import MakeDepot, MiB

TOKEN = "operator-token-0123456789"


async def test_round_trip_write_read_probe_extend_free(open_depot: MakeDepot) -> None:
    async with open_depot() as (depot, client):
        alloc = await client.allocate_one(1 * MiB, 60)
        assert alloc.size == MiB
        assert await client.write(alloc.write, b"hello ") == 6
        assert await client.write(alloc.write, b"world") == 11
        assert await client.read(alloc.read) == b"hello world"
        assert await client.read(alloc.read, 6, 11) == b"world"
        assert await client.write(alloc.write, b"W", offset=6) == 11  # overwrite in place
        assert await client.read(alloc.read) == b"hello World"
        probe = await client.probe(alloc.manage)
        assert (probe.size, probe.length, probe.reliability) == (MiB, 11, "soft")
        expires = await client.extend(alloc.manage, 100)
        assert expires == pytest.approx(alloc.expires + 100)
        await client.free(alloc.manage)
        with pytest.raises(NotFound):
            await client.read(alloc.read)
        assert depot.store.used == 0


async def test_read_into_fills_a_preallocated_buffer(open_depot: MakeDepot) -> None:
    async with open_depot() as (_, client):
        alloc = await client.allocate_one(4 * MiB, 60)
        payload = bytes(range(256)) * (3 * MiB // 256)
        await client.write(alloc.write, memoryview(payload))
        buffer = bytearray(MiB)
        assert await client.read_into(alloc.read, buffer, start=MiB) == MiB
        assert buffer == payload[MiB : 2 * MiB]
        with pytest.raises(RangeNotSatisfiable):
            await client.read_into(alloc.read, bytearray(2 * MiB), start=2 * MiB)


async def test_write_stream_sends_chunks(open_depot: MakeDepot) -> None:
    async with open_depot() as (_, client):
        alloc = await client.allocate_one(MiB, 60)

        async def chunks():  # type: ignore[no-untyped-def]
            for i in range(4):
                yield bytes([i]) * 1000

        assert await client.write_stream(alloc.write, chunks(), 4000) == 4000
        assert await client.read(alloc.read) == b"".join(bytes([i]) * 1000 for i in range(4))


async def test_count_allocates_all_or_none(open_depot: MakeDepot) -> None:
    async with open_depot(capacity=10 * MiB, max_allocation=4 * MiB) as (depot, client):
        allocs = await client.allocate(2 * MiB, 60, count=4)
        assert len({a.read for a in allocs}) == 4
        assert depot.store.used == 8 * MiB
        with pytest.raises(DepotFull) as full:
            await client.allocate(1 * MiB, 60, count=3)
        assert full.value.status == 507
        assert full.value.retry_after is not None
        assert full.value.retry_after >= 1
        assert depot.store.used == 8 * MiB  # none of the three was made
        assert depot.store.allocations == 4


async def test_capabilities_work_only_for_their_own_operations(open_depot: MakeDepot) -> None:
    async with open_depot() as (_, client):
        alloc = await client.allocate_one(MiB, 60)
        await client.write(alloc.write, b"secret")
        with pytest.raises(NotFound):
            await client.read(alloc.write)
        with pytest.raises(NotFound):
            await client.read(alloc.manage)
        with pytest.raises(NotFound):
            await client.write(alloc.read, b"x")
        with pytest.raises(NotFound):
            await client.probe(alloc.read)
        with pytest.raises(NotFound):
            await client.free(alloc.write)
        assert await client.read(alloc.read) == b"secret"


async def test_unknown_freed_and_expired_answer_the_same(open_depot: MakeDepot, autojump_clock: trio.abc.Clock) -> None:
    async with open_depot() as (_, client):
        freed = await client.allocate_one(MiB, 60)
        await client.free(freed.manage)
        expired = await client.allocate_one(MiB, 5)
        await trio.sleep(6)
        messages = set()
        for cap in (freed.read, expired.read, "A" * 32, "not-a-capability"):
            with pytest.raises(NotFound) as err:
                await client.read(cap)
            messages.add((err.value.status, err.value.message))
        assert messages == {(404, "no such allocation")}


async def test_expiry_reclaims_within_a_second_without_any_request(
    open_depot: MakeDepot, autojump_clock: trio.abc.Clock
) -> None:
    async with open_depot() as (depot, client):
        alloc = await client.allocate_one(4 * MiB, 30)
        await client.write(alloc.write, b"x" * 1000)
        await trio.sleep(29.5)
        assert depot.store.used == 4 * MiB
        await trio.sleep(1.5)  # 30 s after allocation plus the promised second
        assert depot.store.used == 0
        assert depot.store.pooled == 0  # and the memory is unmapped, not only unaccounted
        assert depot.store.allocations == 0
        assert "lnet_depot_expired_total 1.0" in (await _metrics(client))


async def test_extend_keeps_an_allocation_alive_and_is_capped(
    open_depot: MakeDepot, autojump_clock: trio.abc.Clock
) -> None:
    async with open_depot(max_duration=100.0) as (depot, client):
        alloc = await client.allocate_one(MiB, 10)
        start = depot.clock()
        await trio.sleep(8)
        new_expiry = await client.extend(alloc.manage, 10_000)
        assert new_expiry == pytest.approx(depot.clock() + 100, abs=0.01)  # at most max_duration from now
        await trio.sleep(50)
        assert (await client.probe(alloc.manage)).size == MiB
        await trio.sleep(51)
        with pytest.raises(NotFound):
            await client.probe(alloc.manage)
        assert depot.clock() - start > 100


async def test_writes_past_the_size_or_leaving_a_hole_change_nothing(open_depot: MakeDepot) -> None:
    async with open_depot() as (_, client):
        alloc = await client.allocate_one(100, 60)
        await client.write(alloc.write, b"a" * 60)
        with pytest.raises(RangeNotSatisfiable, match="do not fit"):
            await client.write(alloc.write, b"b" * 41)
        with pytest.raises(RangeNotSatisfiable, match="hole"):
            await client.write(alloc.write, b"c", offset=61)
        with pytest.raises(RangeNotSatisfiable, match="do not fit"):
            await client.write(alloc.write, b"d" * 50, offset=55)
        assert await client.read(alloc.read) == b"a" * 60
        assert await client.write(alloc.write, b"e" * 40) == 100  # exactly filling it is fine


async def test_ranges_past_the_written_bytes(open_depot: MakeDepot) -> None:
    async with open_depot() as (_, client):
        alloc = await client.allocate_one(100, 60)
        await client.write(alloc.write, b"0123456789")
        with pytest.raises(RangeNotSatisfiable):
            await client.read(alloc.read, 10, 20)
        assert await client.read(alloc.read, 5, 50) == b"56789"  # an end past the data is clamped, as HTTP says
        http = httpx.AsyncClient(transport=client._http._transport, base_url=client.base_url)
        async with http:
            suffix = await http.get(f"/v1/data/{alloc.read}", headers={"Range": "bytes=-3"})
            assert (suffix.status_code, suffix.content) == (206, b"789")
            assert suffix.headers["content-range"] == "bytes 7-9/10"
            multi = await http.get(f"/v1/data/{alloc.read}", headers={"Range": "bytes=0-1,4-5"})
            assert (multi.status_code, multi.content) == (200, b"0123456789")  # not served: ignored (RFC 9110 14.2)
            whole = await http.get(f"/v1/data/{alloc.read}")
            assert (whole.status_code, whole.headers["content-length"], whole.content) == (200, "10", b"0123456789")
            head = await http.head(f"/v1/data/{alloc.read}")
            assert (head.status_code, head.headers["content-length"], head.content) == (200, "10", b"")


async def test_allocation_limits(open_depot: MakeDepot) -> None:
    async with open_depot(capacity=32 * MiB, max_allocation=16 * MiB, max_duration=600.0) as (depot, client):
        with pytest.raises(TooLarge):
            await client.allocate_one(16 * MiB + 1, 60)
        with pytest.raises(BadRequest, match="max_duration of 600"):
            await client.allocate_one(MiB, 601)
        for size, duration in ((0, 60), (-1, 60), (MiB, 0), (MiB, -5), (MiB, 0.5)):
            with pytest.raises(BadRequest):
                await client.allocate_one(size, duration)
        with pytest.raises(TooLarge, match="whole capacity"):
            await client.allocate(16 * MiB, 60, count=3)
        with pytest.raises(BadRequest, match="count"):
            await client.allocate(MiB, 60, count=0)
        await client.allocate(16 * MiB, 60, count=2)
        with pytest.raises(DepotFull):
            await client.allocate_one(1, 60)
        assert depot.store.used == 32 * MiB


@pytest.mark.parametrize(
    ("content_type", "body", "needle"),
    [
        ("application/msgpack", b"\xc1", "malformed"),
        ("application/msgpack", msgpack.packb({"size": 10, "duration": 5}) + b"\x00", "malformed"),
        ("application/json", b"{not json", "malformed"),
        ("application/json", b"[1, 2]", "must be a map"),
        ("application/json", b'{"size": "ten", "duration": 60}', "whole number"),
        ("application/json", b'{"size": true, "duration": 60}', "whole number"),
        ("application/json", b'{"size": 10.5, "duration": 60}', "whole number"),
        ("application/json", b'{"size": 10, "duration": "soon"}', "number"),
        ("application/json", b'{"size": 10, "duration": NaN}', "finite"),
        ("application/json", b'{"size": 10}', "'duration' is required"),
        ("application/json", b'{"size": 10, "duration": 60, "colour": "red"}', "unknown field"),
        ("application/json", b'{"size": 10, "duration": 60, "reliability": "maybe"}', "reliability"),
        ("application/json", b'{"size": 10, "size": 10, "duration": 60}', "'size' twice"),
    ],
)
async def test_malformed_control_bodies(open_depot: MakeDepot, content_type: str, body: bytes, needle: str) -> None:
    async with open_depot() as (depot, client):
        answer = await client._http.post("/v1/allocations", content=body, headers={"Content-Type": content_type})
        assert answer.status_code == 400
        error = msgpack.unpackb(answer.content)
        assert error["error"] == "bad_request"
        assert needle in error["message"]
        assert depot.store.used == 0


async def test_errors_answer_json_unless_msgpack_is_asked_for(open_depot: MakeDepot) -> None:
    async with open_depot() as (depot, _):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=depot.app), base_url="http://d") as http:
            answer = await http.get("/v1/data/" + "x" * 32)
            assert answer.headers["content-type"] == "application/json"
            assert answer.json() == {"error": "not_found", "message": "no such allocation"}
            nowhere = await http.get("/v2/nothing")
            assert (nowhere.status_code, nowhere.json()["error"]) == (404, "not_found")
            wrong_method = await http.patch("/v1/status")
            assert (wrong_method.status_code, wrong_method.json()["error"]) == (405, "bad_request")
            huge = await http.post("/v1/allocations", content=b"{" + b" " * 70_000 + b"}")
            assert (huge.status_code, huge.json()["error"]) == (413, "too_large")


async def test_a_write_needs_a_content_length(open_depot: MakeDepot) -> None:
    async with open_depot() as (_, client):
        alloc = await client.allocate_one(100, 60)

        async def body():  # type: ignore[no-untyped-def]
            yield b"abc"

        answer = await client._http.put(f"/v1/data/{alloc.write}", content=body())
        assert answer.status_code == 411
        assert msgpack.unpackb(answer.content)["error"] == "bad_request"
        bad_offset = await client._http.put(f"/v1/data/{alloc.write}?offset=-1", content=b"abc")
        assert bad_offset.status_code == 400
        assert (await client.probe(alloc.manage)).length == 0


async def test_concurrent_writes_to_one_allocation_conflict(open_depot: MakeDepot) -> None:
    async with open_depot() as (_, client):
        alloc = await client.allocate_one(100, 60)
        first_chunk_sent = trio.Event()
        release = trio.Event()

        async def slow_body():  # type: ignore[no-untyped-def]
            yield b"12345"
            first_chunk_sent.set()
            await release.wait()
            yield b"67890"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.write_stream, alloc.write, slow_body(), 10)
            await first_chunk_sent.wait()
            with pytest.raises(Conflict):
                await client.write(alloc.write, b"x")
            assert (await client.probe(alloc.manage)).length == 0  # the first write has not landed yet
            release.set()
        assert await client.read(alloc.read) == b"1234567890"


async def test_operator_token_guards_allocation(open_depot: MakeDepot) -> None:
    async with open_depot(operator_token=TOKEN) as (depot, anonymous):
        with pytest.raises(Unauthorized):
            await anonymous.allocate_one(100, 60)
        wrong_token = "wrong-token-0000000000"
        wrong = DepotClient(anonymous.base_url, token=wrong_token, transport=httpx.ASGITransport(depot.app))
        async with wrong:
            with pytest.raises(Unauthorized):
                await wrong.allocate_one(100, 60)
        right = DepotClient(anonymous.base_url, token=TOKEN, transport=httpx.ASGITransport(depot.app))
        async with right:
            alloc = await right.allocate_one(100, 60)
            await anonymous.write(alloc.write, b"capabilities need no token")  # only allocating does
        status = await anonymous.status()
        assert status["auth_required"] is True
        assert depot.store.allocations == 1


async def test_copy_between_depots_records_the_link(open_depot: MakeDepot) -> None:
    async with open_depot("d1") as (_, one), open_depot("d2") as (two_depot, two):
        source = await one.allocate_one(4 * MiB, 60)
        payload = bytes(range(256)) * (3 * MiB // 256 + 7)
        await one.write(source.write, payload)
        target = await two.allocate_one(4 * MiB, 60)
        result = await one.copy(source.read, target.write_url)
        assert result.nbytes == len(payload)
        assert await two.read(target.read) == payload
        # a part of it, into an offset of another allocation
        second = await two.allocate_one(4 * MiB, 60)
        await two.write(second.write, b"head:")
        part = await one.copy(source.read, second.write_url, offset=10, length=20, dest_offset=5)
        assert part.nbytes == 20
        assert await two.read(second.read) == b"head:" + payload[10:30]
        assert (result.queued_s, part.queued_s) == (0.0, 0.0)  # no lane, no wait
        links = (await one.status())["links"]
        assert [(link["to"], link["bytes"], link["count"]) for link in links] == [
            ("http://d2.test:6714", len(payload) + 20, 2)
        ]
        [link] = links
        assert link["mbps"] > 0
        assert link["seconds"] == pytest.approx(result.seconds + part.seconds)  # per push: a per-stream rate
        assert (link["source"], link["streams"], link["block_bytes"], link["failures"], link["error"]) == (
            "copy", 1.0, 20, 0, None)  # one at a time; the median of (len(payload), 20) taken low
        assert 0 <= link["age_s"] < 5
        assert (link["rtt_ms"], link["retrans"]) == (None, None)  # no socket in process: nothing made up
        assert two_depot.store.used == 8 * MiB


@pytest.mark.parametrize(
    "target",
    [
        "file:///etc/passwd",
        "http://d2.test:6714/v1/status",
        "http://d2.test:6714/v1/manage/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "gopher://d2.test:6714/v1/data/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "http://user:pw@d2.test:6714/v1/data/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "http://d2.test:6714/v1/data/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA?offset=3",
        "http://d2.test:6714/v1/data/short",
        "/v1/data/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "http://[::1:6714/v1/data/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "http://d2.test:99999/v1/data/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    ],
)
async def test_copy_refuses_anything_but_a_depot_write_url(open_depot: MakeDepot, target: str) -> None:
    async with open_depot() as (_, client):
        alloc = await client.allocate_one(100, 60)
        await client.write(alloc.write, b"data")
        with pytest.raises(BadRequest):
            await client.copy(alloc.read, target)
        assert (await client.status())["links"] == []


async def test_copy_failures_are_upstream_errors(open_depot: MakeDepot) -> None:
    async with open_depot("d1") as (_, one), open_depot("d2") as (_, two):
        source = await one.allocate_one(100, 60)
        await one.write(source.write, b"x" * 50)
        small = await two.allocate_one(10, 60)
        with pytest.raises(Upstream) as too_big:
            await one.copy(source.read, small.write_url)
        assert too_big.value.status == 502
        assert too_big.value.details["target_status"] == 416
        with pytest.raises(Upstream, match="ConnectError"):
            await one.copy(source.read, "http://nowhere.test:1/v1/data/" + "A" * 32)
        with pytest.raises(RangeNotSatisfiable):
            await one.copy(source.read, small.write_url, offset=40, length=20)
        assert await two.read(small.read) == b""
        # the network's failure is weather; the target's refusal (416) is not
        [failed] = (await one.status())["links"]
        assert (failed["to"], failed["source"], failed["count"], failed["failures"]) == (
            "http://nowhere.test:1", "copy", 0, 1)
        assert "no depot at http://nowhere.test:1" in failed["error"]
        assert "A" * 32 not in failed["error"]


async def test_busy_beyond_the_concurrency_limit(open_depot: MakeDepot) -> None:
    async with open_depot(max_concurrent_requests=2, busy_retry_after=3.0) as (depot, client):
        depot.in_flight = 2  # two requests are being served
        answer = await client._http.get("/v1/status")
        assert answer.status_code == 503
        assert answer.headers["retry-after"] == "3"
        assert msgpack.unpackb(answer.content)["error"] == "busy"
        assert (await client._http.get("/healthz")).status_code == 200  # health checks always answer
        depot.in_flight = 0
        assert (await client._http.get("/v1/status")).status_code == 200


async def test_status_and_metrics(open_depot: MakeDepot) -> None:
    async with open_depot(capacity=20 * MiB) as (_, client):
        alloc = await client.allocate_one(2 * MiB, 60)
        await client.write(alloc.write, b"z" * 1000)
        await client.read(alloc.read)
        status = await client.status()
        for key in ("name", "version", "uptime", "capacity", "used", "allocations", "max_allocation",
                    "max_duration", "auth_required", "links"):
            assert key in status
        assert (status["capacity"], status["used"], status["allocations"]) == (20 * MiB, 2 * MiB, 1)
        text = await _metrics(client)
        assert "lnet_depot_used_bytes 2.097152e+06" in text
        assert 'lnet_depot_requests_total{operation="write",status="204"} 1.0' in text
        assert 'lnet_depot_requests_total{operation="allocate",status="201"} 1.0' in text
        assert "lnet_depot_bytes_in_total 1000.0" in text
        assert 'lnet_depot_bytes_out_total{kind="read"} 1000.0' in text
        assert 'lnet_depot_allocations{reliability="soft"} 1.0' in text


async def test_access_log_never_holds_a_whole_capability(
    open_depot: MakeDepot, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    async with open_depot() as (_, client):
        alloc = await client.allocate_one(100, 60)
        await client.write(alloc.write, b"abc")
        await client.read(alloc.read)
        await client.free(alloc.manage)
    text = caplog.text
    assert redact(alloc.write) in text
    for secret in (alloc.read, alloc.write, alloc.manage):
        assert secret not in text
        assert secret not in repr(alloc)


async def _metrics(client: DepotClient) -> str:
    return (await client._http.get("/metrics")).text


BLAKE3_OF_NOTHING = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"  # the BLAKE3 paper's vector


async def test_digest_is_computed_at_the_depot(open_depot: MakeDepot) -> None:
    import hashlib

    async with open_depot() as (_, client):
        assert (await client.status())["digests"] == ["blake3", "sha256", "blake2b"]
        alloc = await client.allocate_one(4 * MiB, 60)
        payload = bytes(range(256)) * (3 * MiB // 256)
        await client.write(alloc.write, payload)
        assert await client.digest(alloc.read) == hashlib.sha256(payload).hexdigest()
        assert await client.digest(alloc.read, "blake2b") == hashlib.blake2b(payload).hexdigest()
        assert await client.digest(alloc.read, "blake3") == blake3.blake3(payload).hexdigest()
        assert await client.digest(alloc.read, "blake3", offset=10, length=0) == BLAKE3_OF_NOTHING
        part = await client.digest(alloc.read, offset=10, length=100)
        assert part == hashlib.sha256(payload[10:110]).hexdigest()
        with pytest.raises(BadRequest, match="algorithm"):
            await client.digest(alloc.read, "md5")
        with pytest.raises(RangeNotSatisfiable):
            await client.digest(alloc.read, offset=len(payload), length=1)
        with pytest.raises(NotFound):
            await client.digest(alloc.write)


@pytest.mark.skipif(sys.platform != "linux", reason="prefaulting is Linux's (MADV_POPULATE_WRITE, 5.14 and later)")
@pytest.mark.parametrize("prefault", [True, False])
async def test_a_fresh_allocation_comes_into_memory_before_any_write_with_prefault_and_not_without(
    open_depot: MakeDepot, prefault: bool
) -> None:
    import psutil

    process = psutil.Process()
    async with open_depot(capacity=64 * MiB, max_allocation=32 * MiB, prefault=prefault) as (_, client):
        before = process.memory_info().rss
        alloc = await client.allocate_one(32 * MiB, 60)
        await trio.testing.wait_all_tasks_blocked()  # the prefault runs beside the answer (inline in these tests)
        grown = process.memory_info().rss - before
        assert grown >= 30 * MiB if prefault else grown < 8 * MiB
        await client.write(alloc.write, b"x" * MiB)
        assert await client.read(alloc.read) == b"x" * MiB


async def test_a_write_that_comes_while_its_buffer_is_prefaulted_waits_for_it_and_lands_whole(
    config_for: Callable[..., DepotConfig],
) -> None:
    released = trio.Event()
    prefaulted: list[int] = []

    async def slow_offload(function: Callable[..., Any], *args: Any) -> Any:
        if function is prefault:  # the worker thread that faults the pages in, held until released
            await released.wait()
            prefaulted.append(len(args[0]))
        return function(*args)

    async with Depot(config_for("d1", capacity=64 * MiB, max_allocation=16 * MiB), offload=slow_offload) as depot:
        async with DepotClient("http://d1.test:6714", transport=httpx.ASGITransport(app=depot.app)) as client:
            alloc = await client.allocate_one(8 * MiB, 60)  # answered at once: the prefault runs beside it
            data = bytes(range(256)) * (8 * MiB // 256)
            written = trio.Event()

            async def write() -> None:
                await client.write(alloc.write, data)
                written.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(write)
                await trio.testing.wait_all_tasks_blocked()
                assert not written.is_set()  # waiting for its buffer's pages, not faulting them beside the thread
                released.set()
            assert prefaulted == [8 * MiB]
            assert await client.read(alloc.read) == data
