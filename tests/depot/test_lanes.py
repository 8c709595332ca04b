"""Copy lanes: the pure engine, then the depot's copies through it (in process, on trio's MockClock)."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest
import trio

from lnet.client.wire.depot_client import Allocation, BadRequest, Busy, CopyResult, DepotClient, NotFound
from lnet.depot import Depot
from lnet.depot.lanes import CopyLanes, LaneTicket, TooManyLanes

from .conftest import MakeDepot, MiB, Routes

# -- the engine ---------------------------------------------------------------------------------------------


def test_a_lane_grants_width_places_then_queues_first_in_first_out() -> None:
    lanes = CopyLanes(max_lanes=8)
    granted: list[int] = []
    tickets = [lanes.enter("t:d2", 2, lambda i=i: granted.append(i)) for i in range(5)]  # type: ignore[misc]
    assert granted == [0, 1]
    assert (lanes.running, lanes.waiting, lanes.lanes) == (2, 3, 1)
    lanes.leave(tickets[1])
    assert granted == [0, 1, 2]
    lanes.leave(tickets[3])  # a waiter gives up: it held no place, so nobody new is granted
    assert granted == [0, 1, 2]
    assert (lanes.running, lanes.waiting) == (2, 1)
    lanes.leave(tickets[0])
    assert granted == [0, 1, 2, 4]
    for ticket in tickets:
        lanes.leave(ticket)
        lanes.leave(ticket)  # idempotent
    assert (lanes.running, lanes.waiting, lanes.lanes) == (0, 0, 0)  # nothing left behind


def test_the_newest_width_wins() -> None:
    lanes = CopyLanes(max_lanes=8)
    first = lanes.enter("a", 1, lambda: None)
    second = lanes.enter("a", 1, lambda: None)
    assert not second.granted
    third = lanes.enter("a", 3, lambda: None)  # widening grants the waiters at once, in order
    assert second.granted
    assert third.granted
    assert lanes.width("a") == 3
    fourth = lanes.enter("a", 1, lambda: None)  # narrowing lets the three finish, then grants one at a time
    assert not fourth.granted
    lanes.leave(first)
    lanes.leave(second)
    assert not fourth.granted
    lanes.leave(third)
    assert fourth.granted


def test_lanes_are_bounded_and_forgotten_when_idle() -> None:
    lanes = CopyLanes(max_lanes=2)
    lanes.enter("a", 1, lambda: None)
    b = lanes.enter("b", 1, lambda: None)
    with pytest.raises(TooManyLanes):
        lanes.enter("c", 1, lambda: None)
    assert lanes.enter("a", 1, lambda: None).granted is False  # an existing lane still takes copies
    lanes.leave(b)
    c: LaneTicket = lanes.enter("c", 1, lambda: None)
    assert c.granted
    assert lanes.lanes == 2
    with pytest.raises(ValueError, match="width"):
        lanes.enter("d", 0, lambda: None)


# -- through the depot --------------------------------------------------------------------------------------


async def _blocks(one: DepotClient, two: DepotClient, n: int, size: int = MiB) -> list[tuple[Allocation, Allocation]]:
    pairs = []
    for i in range(n):
        source = await one.allocate_one(size, 600)
        await one.write(source.write, bytes([i]) * size)
        pairs.append((source, await two.allocate_one(size, 600)))
    return pairs


async def test_a_lane_of_width_two_moves_two_blocks_at_once(
    open_depot: MakeDepot, routes: Routes, autojump_clock: trio.abc.Clock
) -> None:
    routes.put_delay = 10.0  # each push takes 10 s on the way to d2
    async with open_depot("d1") as (d1, one), open_depot("d2") as (_, two):
        pairs = await _blocks(one, two, 4)
        results: list[CopyResult] = []
        started = trio.current_time()

        async def copy(source: Allocation, target: Allocation) -> None:
            results.append(await one.copy(source.read, target.write_url, lane="xfer-1:d2", lane_width=2))

        async with trio.open_nursery() as nursery:
            for source, target in pairs:
                nursery.start_soon(copy, source, target)
            await trio.sleep(1)
            assert (d1.lanes.running, d1.lanes.waiting) == (2, 2)
            assert "lnet_depot_copies_waiting 2.0" in (await one._http.get("/metrics")).text
        assert trio.current_time() - started == pytest.approx(20.0, abs=0.01)  # two rounds of two, no idling
        assert routes.most_puts_running["http://d2.test:6714"] == 2
        assert len(results) == 4
        assert sorted(r.queued_s for r in results) == pytest.approx([0, 0, 10, 10], abs=0.01)
        assert [r.seconds for r in results] == pytest.approx([10] * 4, abs=0.01)  # the push alone, not the wait
        for i, (_, target) in enumerate(pairs):
            assert await two.read(target.read) == bytes([i]) * MiB
        assert d1.lanes.lanes == 0  # the lane is gone with its last copy
        [link] = (await one.status())["links"]
        assert (link["count"], link["bytes"], link["block_bytes"]) == (4, 4 * MiB, MiB)
        assert link["mbps"] == pytest.approx(MiB * 8 / 10 / 1e6, rel=0.01)  # per stream, not per lane
        assert 1.5 <= link["streams"] <= 2  # two ran at once; the first of the four started alone


async def test_without_a_lane_every_copy_pushes_at_once(
    open_depot: MakeDepot, routes: Routes, autojump_clock: trio.abc.Clock
) -> None:
    routes.put_delay = 10.0
    async with open_depot("d1") as (_, one), open_depot("d2") as (_, two):
        pairs = await _blocks(one, two, 4)
        async with trio.open_nursery() as nursery:
            for source, target in pairs:
                nursery.start_soon(lambda s=source, t=target: one.copy(s.read, t.write_url))
        assert routes.most_puts_running["http://d2.test:6714"] == 4
        [link] = (await one.status())["links"]
        assert link["streams"] == pytest.approx((1 + 2 + 3 + 4) / 4)


async def test_a_copy_waiting_past_copy_timeout_is_busy(
    open_depot: MakeDepot, routes: Routes, autojump_clock: trio.abc.Clock
) -> None:
    routes.put_delay = 100.0
    async with open_depot("d1", copy_timeout=30.0, busy_retry_after=2.0) as (d1, one), open_depot("d2") as (_, two):
        (first, t1), (second, t2) = await _blocks(one, two, 2)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: one.copy(first.read, t1.write_url, lane="l", lane_width=1))
            await trio.sleep(1)
            started = trio.current_time()
            with pytest.raises(Busy, match="copy_timeout") as busy:
                await one.copy(second.read, t2.write_url, lane="l", lane_width=1)
            assert trio.current_time() - started == pytest.approx(30.0, abs=0.01)
            assert busy.value.status == 503
            assert busy.value.retry_after == 2
            assert busy.value.details["queued_s"] == pytest.approx(30.0, abs=0.01)
            assert (d1.lanes.running, d1.lanes.waiting) == (1, 0)
        assert d1.lanes.lanes == 0
        assert await two.read(t1.read) == bytes([0]) * MiB
        assert await two.read(t2.read) == b""  # the refused copy pushed nothing
        assert "lnet_depot_lane_timeouts_total 1.0" in (await one._http.get("/metrics")).text


async def test_a_cancelled_wait_frees_nothing_it_did_not_take(
    open_depot: MakeDepot, routes: Routes, autojump_clock: trio.abc.Clock
) -> None:
    routes.put_delay = 10.0
    async with open_depot("d1") as (d1, one), open_depot("d2") as (_, two):
        (first, t1), (second, t2), (third, t3) = await _blocks(one, two, 3)
        results: dict[str, CopyResult] = {}

        async def copy(name: str, source: Allocation, target: Allocation) -> None:
            results[name] = await one.copy(source.read, target.write_url, lane="l", lane_width=1)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(copy, "first", first, t1)
            await trio.sleep(1)
            with trio.move_on_after(2):  # the in-process transport runs the depot in this task: this cancels it
                await copy("second", second, t2)
            assert (d1.lanes.running, d1.lanes.waiting) == (1, 0)  # the first still holds the lane's one place
            nursery.start_soon(copy, "third", third, t3)
            await trio.sleep(1)
            assert (d1.lanes.running, d1.lanes.waiting) == (1, 1)  # and the third waits for it
        assert set(results) == {"first", "third"}
        assert results["third"].queued_s == pytest.approx(7.0, abs=0.01)  # posted at 3 s, the first ended at 10 s
        assert routes.most_puts_running["http://d2.test:6714"] == 1
        assert await two.read(t2.read) == b""
        assert await two.read(t3.read) == bytes([2]) * MiB
        assert d1.lanes.lanes == 0


async def test_a_client_that_goes_away_leaves_the_queue(
    open_depot: MakeDepot, routes: Routes, autojump_clock: trio.abc.Clock
) -> None:
    """Behind hypercorn a departed client is an ``http.disconnect`` message, not a cancellation."""
    routes.put_delay = 10.0
    async with open_depot("d1") as (d1, one), open_depot("d2") as (_, two):
        (first, t1), (second, t2) = await _blocks(one, two, 2)
        gone = trio.Event()
        answer: list[int] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: one.copy(first.read, t1.write_url, lane="l", lane_width=1))
            await trio.sleep(1)
            body = json.dumps({"to": t2.write_url, "lane": "l", "lane_width": 1}).encode()
            nursery.start_soon(_raw_request, d1, f"/v1/copy/{second.read}", body, gone, answer)
            await trio.sleep(1)
            assert d1.lanes.waiting == 1
            gone.set()
            await trio.sleep(0.5)
            assert (d1.lanes.running, d1.lanes.waiting) == (1, 0)
        assert answer == [400]
        assert await two.read(t2.read) == b""
        assert d1.lanes.lanes == 0


async def _raw_request(depot: Depot, path: str, body: bytes, gone: trio.Event, answer: list[int]) -> None:
    """One request straight into the ASGI app, whose client disconnects when ``gone`` is set."""
    sent_body = False

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            answer.append(message["status"])

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 5000), "server": ("d1.test", 6714),
    }
    await depot.app(scope, receive, send)


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"lane": "", "lane_width": 2}, "'lane' must be"),
        ({"lane": "x" * 129, "lane_width": 2}, "'lane' must be"),
        ({"lane": "has space", "lane_width": 2}, "'lane' must be"),
        ({"lane": "a/b", "lane_width": 2}, "'lane' must be"),
        ({"lane": 7, "lane_width": 2}, "'lane' must be"),
        ({"lane": "ok"}, "'lane_width' is required"),
        ({"lane": "ok", "lane_width": 0}, "from 1 to 64"),
        ({"lane": "ok", "lane_width": 65}, "from 1 to 64"),
        ({"lane": "ok", "lane_width": "2"}, "whole number"),
        ({"lane": "ok", "lane_width": True}, "whole number"),
        ({"lane": "ok", "lane_width": 2.5}, "whole number"),
        ({"lane_width": 2}, "goes with 'lane'"),
        ({"lane": "ok", "lane_width": 2, "lane_mode": "fifo"}, "unknown field"),
    ],
)
async def test_bad_lane_fields_are_refused(open_depot: MakeDepot, fields: dict[str, Any], needle: str) -> None:
    async with open_depot("d1") as (d1, one), open_depot("d2") as (_, two):
        [(source, target)] = await _blocks(one, two, 1, size=100)
        answer = await one._http.post(
            f"/v1/copy/{source.read}", json={"to": target.write_url, **fields}
        )
        assert answer.status_code == 400
        error = msgpack.unpackb(answer.content)
        assert error["error"] == "bad_request"
        assert needle in error["message"]
        assert await two.read(target.read) == b""
        assert d1.lanes.lanes == 0


async def test_lanes_do_not_accumulate_and_are_bounded(
    open_depot: MakeDepot, routes: Routes, autojump_clock: trio.abc.Clock
) -> None:
    async with open_depot("d1", max_lanes=2, busy_retry_after=1.0) as (d1, one), open_depot("d2") as (_, two):
        pairs = await _blocks(one, two, 8, size=100)
        for i, (source, target) in enumerate(pairs[:5]):  # one after another, each on a lane of its own
            result = await one.copy(source.read, target.write_url, lane=f"transfer-{i}:d2", lane_width=3)
            assert (result.nbytes, result.queued_s) == (100, 0.0)
        assert d1.lanes.lanes == 0
        routes.put_delay = 10.0
        async with trio.open_nursery() as nursery:
            for i in range(2):
                source, target = pairs[5 + i]
                nursery.start_soon(lambda s=source, t=target, i=i: one.copy(s.read, t.write_url, lane=f"x{i}",
                                                                           lane_width=1))
            await trio.sleep(1)
            with pytest.raises(Busy, match="max_lanes"):
                await one.copy(pairs[7][0].read, pairs[7][1].write_url, lane="x2", lane_width=1)
        assert d1.lanes.lanes == 0


async def test_a_source_freed_while_its_copy_waited_is_not_found(
    open_depot: MakeDepot, routes: Routes, autojump_clock: trio.abc.Clock
) -> None:
    routes.put_delay = 10.0
    async with open_depot("d1") as (d1, one), open_depot("d2") as (_, two):
        (first, t1), (second, t2) = await _blocks(one, two, 2)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: one.copy(first.read, t1.write_url, lane="l", lane_width=1))
            await trio.sleep(1)

            async def freed_meanwhile() -> None:
                await trio.sleep(2)
                await one.free(second.manage)

            nursery.start_soon(freed_meanwhile)
            with pytest.raises(NotFound, match="no such allocation"):
                await one.copy(second.read, t2.write_url, lane="l", lane_width=1)
        assert d1.lanes.lanes == 0
        assert await two.read(t1.read) == bytes([0]) * MiB
        assert await two.read(t2.read) == b""  # nothing of the freed source was pushed
        with pytest.raises(BadRequest):
            await one.copy(first.read, t1.write_url, lane="l", lane_width=1, length=-1)
