"""A copy succeeds only when its target answers as a depot's write does: 204 with an X-Lnet-Length that covers the
pushed bytes. A target answering anything else (another 2xx, a short length) is no depot, or lost the bytes."""

from __future__ import annotations

import re

import httpx
import pytest

from lnet.client.wire.depot_client import DepotClient, Upstream

from .conftest import MakeDepot, Routes

FAKE = "http://fake.test:6714"
CAP = "A" * 32


class _FakeTarget(httpx.AsyncBaseTransport):
    """A host that takes a push whole and answers it with ``status`` and ``headers``: no depot."""

    def __init__(self, status: int, headers: dict[str, str], pushed: list[int]) -> None:
        self.status, self.headers, self.pushed = status, headers, pushed

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        received = 0
        async for chunk in request.stream:  # type: ignore[union-attr]  # views of the allocation: not joined
            received += len(chunk)
        self.pushed.append(received)
        return httpx.Response(self.status, headers=self.headers)


def _fake_target(status: int, headers: dict[str, str], pushed: list[int]) -> _FakeTarget:
    return _FakeTarget(status, headers, pushed)


def _failed(metrics: str, reason: str) -> float:
    match = re.search(rf'^lnet_depot_copies_failed_total{{reason="{reason}"}} (\S+)$', metrics, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


@pytest.mark.parametrize(
    ("status", "headers"),
    [
        (200, {}),
        (201, {}),
        (202, {}),
        (299, {}),
        (200, {"X-Lnet-Length": "1000"}),  # the right length, but not a write's status
        (204, {"X-Lnet-Length": "5"}),  # a length short of what was pushed
        (204, {"X-Lnet-Length": "999"}),
        (204, {}),
        (204, {"X-Lnet-Length": "lots"}),
    ],
)
async def test_a_target_that_does_not_answer_as_a_depot_write_fails_the_copy(
    open_depot: MakeDepot, routes: Routes, status: int, headers: dict[str, str]
) -> None:
    pushed: list[int] = []
    routes.apps[FAKE] = _fake_target(status, headers, pushed)  # type: ignore[assignment]
    async with open_depot() as (depot, client):
        source = await client.allocate_one(4096, 60)
        await client.write(source.write, bytes(range(250)) * 4)
        with pytest.raises(Upstream) as failed:
            await client.copy(source.read, f"{FAKE}/v1/data/{CAP}")
        assert pushed == [1000]  # the push went; its answer is what is refused
        assert failed.value.status == 502
        assert failed.value.details["target_status"] == status
        assert failed.value.details["failure"] == "unverified"
        assert "not a depot's write answer" in failed.value.message
        assert _failed(depot.metrics.render().decode(), "unverified") == 1
        assert depot.links.summary(depot.clock()) == []  # the target answered: no network weather


async def test_a_write_answer_covering_the_push_is_a_copy(open_depot: MakeDepot, routes: Routes) -> None:
    pushed: list[int] = []
    # at dest_offset 100 of an allocation that holds more already: a longer length is fine
    routes.apps[FAKE] = _fake_target(204, {"X-Lnet-Length": "5000"}, pushed)  # type: ignore[assignment]
    async with open_depot() as (depot, client):
        source = await client.allocate_one(4096, 60)
        await client.write(source.write, b"x" * 1000)
        done = await client.copy(source.read, f"{FAKE}/v1/data/{CAP}", dest_offset=100)
        assert (done.nbytes, pushed) == (1000, [1000])
        routes.apps[FAKE] = _fake_target(204, {"X-Lnet-Length": "1099"}, pushed)  # type: ignore[assignment]
        with pytest.raises(Upstream, match="1099 bytes after 1000 were pushed to end at 1100"):
            await client.copy(source.read, f"{FAKE}/v1/data/{CAP}", dest_offset=100)
        routes.apps[FAKE] = _fake_target(409, {"Content-Type": "application/json"}, pushed)  # type: ignore[assignment]
        with pytest.raises(Upstream):
            await client.copy(source.read, f"{FAKE}/v1/data/{CAP}")
        metrics = depot.metrics.render().decode()
        assert (_failed(metrics, "unverified"), _failed(metrics, "target_error")) == (1, 1)


async def test_the_client_refuses_a_copy_answer_of_other_bytes_than_asked() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"bytes": 1000, "seconds": 0.1, "queued_s": 0.0})

    async with DepotClient("http://d.test", transport=httpx.MockTransport(handler)) as client:
        assert (await client.copy(CAP, f"{FAKE}/v1/data/{CAP}", length=1000)).nbytes == 1000
        with pytest.raises(Upstream, match="copy of 4096 bytes with 1000 bytes copied"):
            await client.copy(CAP, f"{FAKE}/v1/data/{CAP}", length=4096)
