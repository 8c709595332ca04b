"""Fair shares: request places per client address, the pace every body keeps, readiness. The engine alone, then
the depot in process on trio's MockClock (real-sized timeouts, no wall time); real sockets in test_trickle.py."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from lnet.client.wire.depot_client import Upstream
from lnet.depot import Depot
from lnet.depot.fair_share import BodyPace, ClientShares, client_key

from .conftest import MakeDepot, MiB, Routes

KiB = 1024

# -- the engine ---------------------------------------------------------------------------------------------


def test_client_keys_are_addresses_and_ipv6_sixty_fours() -> None:
    assert client_key("192.0.2.7") == "192.0.2.7"
    assert client_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:bbbb::9") == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:3::1") != client_key("2001:db8:1:2::1")
    assert client_key("fe80::1%eth0") == "fe80::/64"
    assert client_key(None) == "-"
    assert client_key("/run/depot.sock") == "/run/depot.sock"


def test_a_client_share_is_bounded_and_given_back() -> None:
    shares = ClientShares(per_client=2)
    assert shares.enter("a")
    assert shares.enter("a")
    assert not shares.enter("a")  # refused, and nothing taken
    assert shares.enter("b")
    assert (shares.held("a"), shares.held("b"), shares.clients) == (2, 1, 2)
    shares.leave("a")
    assert shares.enter("a")
    for key in ("a", "a", "b"):
        shares.leave(key)
    assert shares.clients == 0


def test_the_pace_is_a_grace_then_a_rate_and_a_total_deadline_by_size() -> None:
    pace = BodyPace(min_bytes_per_second=4 * KiB, grace_s=10)
    assert pace.deadline(100.0, 0) == 110.0  # nothing moved: due when the grace ends
    assert pace.deadline(100.0, 40 * KiB) == 120.0  # 40 KiB bought 10 s more
    assert pace.deadline(100.0, 64 * MiB) == 100.0 + 10 + 16384  # a 64 MiB body's total deadline
    with pytest.raises(ValueError, match="positive rate"):
        BodyPace(0, 10)


# -- through the depot, in process --------------------------------------------------------------------------


def _from(depot: Depot, address: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=depot.app, client=(address, 40000)), base_url="http://d.test"
    )


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


async def _held_write(http: httpx.AsyncClient, write: str, release: trio.Event, answers: list[int]) -> None:
    """A write whose body waits for ``release``: it holds its request place until then."""

    async def body() -> AsyncIterator[bytes]:
        yield b"x"
        await release.wait()
        yield b"y"

    answer = await http.put(f"/v1/data/{write}", content=body(), headers={"Content-Length": "2"})
    answers.append(answer.status_code)


async def test_a_client_over_its_share_gets_429_while_others_are_served(
    open_depot: MakeDepot, autojump_clock: trio.abc.Clock
) -> None:
    async with open_depot(max_requests_per_client=3, body_grace=3600.0) as (depot, client):
        allocations = [await client.allocate_one(100, 3600) for _ in range(6)]
        release = trio.Event()
        answers: list[int] = []
        async with (
            _from(depot, "198.51.100.1") as greedy,
            _from(depot, "2001:db8::1") as other,
            _from(depot, "2001:db8::2") as same_64,
            trio.open_nursery() as nursery,
        ):
            for alloc in allocations[:3]:
                nursery.start_soon(_held_write, greedy, alloc.write, release, answers)
            await trio.sleep(1)
            refused = await greedy.post("/v1/allocations", json={"size": 10, "duration": 60})
            assert refused.status_code == 429
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"] == "busy"
            assert "198.51.100.1" in refused.json()["message"]
            assert "max_requests_per_client" in refused.json()["message"]
            assert (await greedy.get("/healthz")).status_code == 200  # liveness: always
            assert (await greedy.get("/readyz")).status_code == 200  # the depot has places for others
            # others are served, and an IPv6 host's /64 is one client
            assert (await other.post("/v1/allocations", json={"size": 10, "duration": 60})).status_code == 201
            for alloc in allocations[3:]:  # one write at a time per allocation: three of them
                nursery.start_soon(_held_write, other, alloc.write, release, [])
            await trio.sleep(1)
            assert (await same_64.get("/v1/status")).status_code == 429
            status = await client.status()  # 127.0.0.1: its own share
            assert status["in_flight"] == 7  # three writes each for two clients, and this status
            assert status["saturated"] is False
            metrics = (await client._http.get("/metrics")).text
            assert _metric(metrics, "lnet_depot_client_refusals_total") == 2
            assert _metric(metrics, "lnet_depot_clients_in_flight") == 3
            release.set()
        assert sorted(answers) == [204, 204, 204]
        async with _from(depot, "198.51.100.1") as greedy:
            assert (await greedy.post("/v1/allocations", json={"size": 10, "duration": 60})).status_code == 201


async def test_readiness_says_when_every_place_is_taken(open_depot: MakeDepot, autojump_clock: trio.abc.Clock) -> None:
    async with open_depot(max_concurrent_requests=2, body_grace=3600.0) as (depot, client):
        one, two = await client.allocate_one(100, 3600), await client.allocate_one(100, 3600)
        release = trio.Event()
        async with (
            _from(depot, "198.51.100.1") as a,
            _from(depot, "198.51.100.2") as b,
            _from(depot, "198.51.100.3") as watcher,
            trio.open_nursery() as nursery,
        ):
            assert (await watcher.get("/readyz")).status_code == 200
            nursery.start_soon(_held_write, a, one.write, release, [])
            nursery.start_soon(_held_write, b, two.write, release, [])
            await trio.sleep(1)
            ready = await watcher.get("/readyz")
            assert (ready.status_code, ready.headers["retry-after"], ready.json()["error"]) == (503, "1", "busy")
            assert "all 2 request places" in ready.json()["message"]
            assert (await watcher.get("/healthz")).status_code == 200
            assert (await watcher.get("/v1/status")).status_code == 503
            metrics = (await watcher.get("/metrics")).status_code
            assert metrics == 503  # /metrics takes a place too; the gauge is read below, once one is free
            release.set()
        async with _from(depot, "198.51.100.3") as watcher:
            assert (await watcher.get("/readyz")).status_code == 200
            status = (await watcher.get("/v1/status")).json()
            assert (status["saturated"], status["max_concurrent_requests"], status["max_requests_per_client"]) == (
                False, 2, 128,
            )
            assert _metric((await watcher.get("/metrics")).text, "lnet_depot_saturated") == 0


async def test_a_trickled_upload_is_cut_when_it_falls_behind_its_pace(
    open_depot: MakeDepot, autojump_clock: trio.abc.Clock
) -> None:
    """The probe's uploads, a byte every 2 s: with the defaults (4 KiB/s after 10 s) cut at the grace's end."""
    async with open_depot() as (depot, client):
        alloc = await client.allocate_one(MiB, 3600)

        async def trickle(size: int) -> AsyncIterator[bytes]:
            for _ in range(size):
                yield b"z"
                await trio.sleep(2)

        started = trio.current_time()
        async with _from(depot, "127.0.0.1") as http:
            answer = await http.put(f"/v1/data/{alloc.write}", content=trickle(1000),
                                    headers={"Content-Length": "1000"})
        assert answer.status_code == 408
        assert trio.current_time() - started == pytest.approx(10, abs=2.1)
        assert "min_bytes_per_second" in answer.json()["message"]
        assert (await client.probe(alloc.manage)).length == 0  # nothing of it became readable
        control = await client._http.post("/v1/allocations", content=trickle(40),
                                          headers={"Content-Type": "application/json", "Content-Length": "40"})
        assert control.status_code == 408
        # a body that keeps the pace is not cut, however long it takes: 8 KiB/s for 60 s
        async def steady() -> AsyncIterator[bytes]:
            for _ in range(60):
                yield b"s" * 8 * KiB
                await trio.sleep(1)

        steady_write = await client._http.put(f"/v1/data/{alloc.write}", content=steady(),
                                              headers={"Content-Length": str(480 * KiB)})
        assert steady_write.status_code == 204
        metrics = depot.metrics.render().decode()
        assert _metric(metrics, 'lnet_depot_slow_bodies_cut_total{direction="in"}') == 2


class _SlowTarget(httpx.AsyncBaseTransport):
    """A host that takes a push a piece per hour: it would hold the copy, and its place, for days."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        async with contextlib.aclosing(request.stream.__aiter__()) as pieces:  # type: ignore[union-attr]
            async for _ in pieces:
                await trio.sleep(3600)
        return httpx.Response(204, headers={"X-Lnet-Length": "0"})


async def test_a_push_a_target_takes_too_slowly_fails_the_copy(
    open_depot: MakeDepot, routes: Routes, autojump_clock: trio.abc.Clock
) -> None:
    routes.apps["http://slow.test:6714"] = _SlowTarget()  # type: ignore[assignment]
    async with open_depot(copy_timeout=7200.0, max_duration=86400.0) as (depot, client):
        source = await client.allocate_one(16 * MiB, 36000)
        await client.write(source.write, bytes(16 * MiB))
        started = trio.current_time()
        with pytest.raises(Upstream, match="fell behind 4096 bytes/s") as failed:
            await client.copy(source.read, "http://slow.test:6714/v1/data/" + "A" * 32, wait_s=36000)
        # the first 8 MiB piece is due 10 s + 8 MiB / 4 KiB/s after the start; the target, which reads a piece an
        # hour, has not asked for the second by then: cut there
        assert trio.current_time() - started == pytest.approx(10 + 2048, abs=1)
        assert failed.value.details["failure"] == "slow"
        metrics = depot.metrics.render().decode()
        assert _metric(metrics, 'lnet_depot_slow_bodies_cut_total{direction="push"}') == 1
        assert _metric(metrics, 'lnet_depot_copies_failed_total{reason="slow"}') == 1
