"""``lnet-get``'s head start: each replica's host dialled, and its first range asked for, before trio loads
(``lnet.client.wire.predial``), and the download taking those connections.

Real loopback sockets: the early dials run in threads with the standard library's blocking connect.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from lnet.client.engines.chunks import ChunkPlanner, Fetch, PlanConfig, first_ranges
from lnet.client.fetching.mirrors import fetch_mirrors
from lnet.client.wire.predial import Predial, _Dial, command_line_urls
from lnet.client.wire.range_connection import RangeConnection, ReplicaError
from lnet.client.wire.range_request import parse_url

from .http_replicas import Replica, replicas
from .test_imports import loaded_after

KiB = 1024
MiB = 1024 * KiB
DATA = os.urandom(3 * MiB + 777)
SHA = hashlib.sha256(DATA).hexdigest()
CONFIG = PlanConfig(initial_chunk=256 * KiB, min_chunk=64 * KiB, stall_s=10.0, backoff_s=0.2, round_min_s=0.2)


def started(urls: list[str], timeout: float, first: list[tuple[int, int]] | None = None) -> Predial:
    """What ``lnet-get`` does: dial, then (once the arguments are parsed) ask for the first ranges, if any."""
    predial = Predial.dial(urls, timeout)
    if first is not None:
        predial.ask(urls, first)
    return predial


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


async def test_the_first_url_of_a_host_is_dialled_and_asked_for_its_first_range_at_once(
    listener: socket.socket,
) -> None:
    port = listener.getsockname()[1]
    urls = [f"http://127.0.0.1:{port}/a.bin", f"http://127.0.0.1:{port}/b.bin"]
    predial = started(urls, timeout=5, first=[(0, 100), (100, 200)])
    assert len(predial) == 1  # one early connection per (host, port)
    early_side = await trio.to_thread.run_sync(accepted, listener)  # before anything asked for a stream
    request = early_side.recv(4096)
    assert request.startswith(b"GET /a.bin HTTP/1.1\r\n")
    assert b"\r\nRange: bytes=0-99\r\n" in request
    assert await predial.take(urls[1]) is None  # the second URL of that host is dialled the usual way
    early = await predial.take(urls[0])
    assert early is not None
    assert early.sent == (0, 100)
    assert 0 < early.handshake_s < 5
    await early.stream.send_all(b"ping")
    assert early_side.recv(4) == b"ping"
    assert await predial.take(urls[0]) is None  # taken once
    await early.stream.aclose()
    early_side.close()
    predial.close()


async def test_https_is_dialled_but_nothing_is_written_before_its_tls_handshake(listener: socket.socket) -> None:
    url = f"https://127.0.0.1:{listener.getsockname()[1]}/f"
    predial = started([url], timeout=5, first=[(0, 100)])
    early_side = await trio.to_thread.run_sync(accepted, listener)
    early = await predial.take(url)
    assert early is not None
    assert early.sent is None
    early_side.settimeout(0.1)
    with pytest.raises(TimeoutError):
        early_side.recv(1)
    await early.stream.aclose()
    early_side.close()


async def test_a_failed_early_dial_leaves_the_connection_to_the_usual_dial() -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{closed.getsockname()[1]}/f"
    closed.close()  # nothing listens there: refused
    predial = started([url], timeout=5, first=[(0, 100)])
    assert await predial.take(url) is None
    predial.close()


def test_close_ends_the_connections_no_download_took(listener: socket.socket) -> None:
    predial = started([f"http://127.0.0.1:{listener.getsockname()[1]}/f"], timeout=5)
    early = accepted(listener)
    for dial in predial._dials.values():
        assert dial.done.wait(5)
    predial.close()
    assert early.recv(1) == b""  # the client closed it, having written nothing
    early.close()


async def test_a_take_cancelled_while_it_waits_for_the_handshake_closes_the_early_connection(
    listener: socket.socket,
) -> None:
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/f"
    predial = started([url], timeout=5)
    (dial,) = predial._dials.values()
    assert dial.done.wait(5)
    dial.done.clear()  # as if the handshake were still on its way
    with trio.move_on_after(0.05):
        await predial.take(url)
    dial.done.set()
    early = await trio.to_thread.run_sync(accepted, listener)
    assert early.recv(1) == b""  # abandoned: closed, not leaked
    early.close()


def test_a_dial_that_lands_after_it_was_abandoned_closes_its_connection(listener: socket.socket) -> None:
    dial = _Dial(parse_url(f"http://127.0.0.1:{listener.getsockname()[1]}/f"))
    dial.ask((0, 10))
    dial.abandon()
    dial.run(5)
    early = accepted(listener)
    assert early.recv(4096) == b""  # closed, with nothing written on it
    assert dial.claim() is None
    early.close()


async def test_a_dial_asks_for_nothing_until_it_is_given_its_first_range(listener: socket.socket) -> None:
    # lnet-get dials before it has parsed its arguments; the first range goes out once they are
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/f"
    began = trio.current_time()
    predial = Predial.dial([url])
    side = await trio.to_thread.run_sync(accepted, listener)
    (dial,) = predial._dials.values()
    assert dial.done.wait(5)
    side.settimeout(0.1)
    with pytest.raises(TimeoutError):
        side.recv(1)
    predial.ask([url], [(100, 200)])
    side.settimeout(5)
    assert b"\r\nRange: bytes=100-199\r\n" in side.recv(4096)
    predial.ask([url], [(0, 100)])  # asked once: a second range is not written
    early = await predial.take(url, timeout_s=5)
    assert early is not None
    assert early.sent == (100, 200)
    assert early.sent_at is not None
    assert began <= early.sent_at <= trio.current_time()  # on trio's clock
    await early.stream.aclose()
    side.close()
    predial.close()


async def test_a_handshake_that_does_not_come_within_the_timeout_fails_the_replica(listener: socket.socket) -> None:
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/f"
    predial = Predial.dial([url])
    (dial,) = predial._dials.values()
    assert dial.done.wait(5)
    dial.done.clear()  # as if the handshake were still on its way
    with pytest.raises(ReplicaError, match="no connection within 0.2 s"):
        await predial.take(url, timeout_s=0.2)
    side = await trio.to_thread.run_sync(accepted, listener)
    assert side.recv(1) == b""  # abandoned: closed, not leaked
    side.close()


def test_the_urls_dialled_before_parsing_are_the_command_lines_http_words() -> None:
    argv = ["http://a.example/f", "-o", "out", "https://b.example:8443/f", "--trace", "t.jsonl", "ftp://c/f"]
    assert command_line_urls(argv) == ["http://a.example/f", "https://b.example:8443/f"]
    assert command_line_urls([*argv, "--help"]) == []
    assert command_line_urls(["-h", "http://a.example/f"]) == []


def test_urls_that_name_no_host_are_left_to_the_command_to_report() -> None:
    predial = started(["ftp://example.org/f", "http:///nohost", "http://127.0.0.1:notaport/f"], timeout=1)
    assert len(predial) == 0
    predial.close()


def test_the_predial_loads_no_event_loop() -> None:
    modules = loaded_after("import lnet.client.wire.predial\nimport lnet.client.fetching.part_names")["modules"]
    assert isinstance(modules, list)
    assert not [m for m in modules if m.split(".")[0] in ("trio", "h11", "httpx")]


def test_lnet_get_dials_before_it_loads_more_than_the_standard_library() -> None:
    # the entry point dials first: nothing of the command, nor dataclasses (and inspect), is loaded before it
    code = ("import sys\nsys.argv = ['lnet-get', '--help']\nimport lnet.client.commands.get_entry as e\n"
            "from lnet.client.wire import predial")
    modules = loaded_after(code)["modules"]
    assert isinstance(modules, list)
    assert "lnet.client.wire.predial" in modules
    assert not [m for m in modules if m in ("dataclasses", "inspect", "argparse", "lnet.client.commands.get")
                or m.split(".")[0] in ("trio", "h11", "httpx", "platformdirs")]


@pytest.mark.parametrize(("initial", "align", "replicas"), [(1 * MiB, 1, 6), (1000, 1, 3), (1000, 4096, 2),
                                                              (5 * MiB, 3 * MiB, 4), (1, 1, 1)])
def test_first_ranges_are_what_the_planner_asks_for_first(initial: int, align: int, replicas: int) -> None:
    config = PlanConfig(initial_chunk=initial, align=align)
    decisions = ChunkPlanner(None, replicas, config).poll(0.0)
    fetches = [d for d in decisions if isinstance(d, Fetch)]
    assert [f.replica for f in fetches] == list(range(replicas))
    assert [(f.start, f.end) for f in fetches] == first_ranges(config, replicas)


def test_a_range_sent_early_measures_no_round_trip_and_the_handshake_does() -> None:
    planner = ChunkPlanner(None, 2, CONFIG)
    first, second = [d for d in planner.poll(0.0) if isinstance(d, Fetch)]
    planner.sent_early(first.request, rtt=0.05)
    planner.sized(len(DATA))
    planner.received(first.request, 1000, 0.001)  # already in the socket's buffer when the loop came up
    planner.received(second.request, 1000, 0.2)
    rtts = [rep.rtt for rep in planner._replicas]
    assert rtts == [0.05, 0.2]


def test_an_https_handshake_gives_the_round_trip_its_first_request_overstates() -> None:
    # HTTPS: nothing was sent early, so the first request waits for TLS and its first byte comes two or three round
    # trips after it was issued; the TCP handshake measured by the predial is the round trip (the least seen)
    planner = ChunkPlanner(None, 2, CONFIG)
    first, second = [d for d in planner.poll(0.0) if isinstance(d, Fetch)]
    planner.round_trip(first.replica, 0.05)
    planner.sized(len(DATA))
    planner.received(first.request, 1000, 0.15)
    planner.received(second.request, 1000, 0.2)
    planner.round_trip(second.replica, 0.3)  # more than its request measured: the least stays
    assert [rep.rtt for rep in planner._replicas] == [0.05, 0.2]


async def test_a_download_takes_the_early_connections_and_asks_for_no_range_twice(tmp_path: Path) -> None:
    out = tmp_path / "file.bin"
    config = dataclasses.replace(CONFIG, tail="none")  # no request stopped short, so no connection closed
    async with replicas(*(Replica(DATA, rate=4e6) for _ in range(3))) as servers:
        urls = [s.url for s in servers]
        predial = started(urls, 5, first_ranges(config, len(urls)))
        result = await fetch_mirrors(urls, out, config=config, sha256=SHA, early=predial)
        predial.close()
    assert out.read_bytes() == DATA
    assert [s.connections for s in servers] == [1, 1, 1]
    for i, server in enumerate(servers):
        assert server.ranges[0] == first_ranges(config, 3)[i]
    assert all(r.bytes > 0 for r in result.replicas)
    assert sum(server.sent for server in servers) == len(DATA)  # nothing fetched twice


async def test_an_early_range_that_is_not_the_planners_first_is_dropped_with_its_connection(tmp_path: Path) -> None:
    out = tmp_path / "file.bin"
    async with replicas(*(Replica(DATA, rate=4e6) for _ in range(2))) as servers:
        urls = [s.url for s in servers]
        predial = started(urls, 5, [(1 * MiB, 2 * MiB), (2 * MiB, 3 * MiB)])  # not what the planner asks
        config = dataclasses.replace(CONFIG, tail="none")  # a tail split would close and open one more by chance
        result = await fetch_mirrors(urls, out, config=config, sha256=SHA, early=predial)
        predial.close()
    assert out.read_bytes() == DATA
    assert [s.connections for s in servers] == [2, 2]  # the early one closed, a new one dialled
    assert all(r.bytes > 0 for r in result.replicas)


async def test_a_connection_refuses_to_send_another_range_before_the_one_already_on_the_wire(
    listener: socket.socket,
) -> None:
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/f"
    predial = started([url], 5, [(0, 10)])
    early = await predial.take(url)
    assert early is not None
    conn = RangeConnection(url, 5)
    await conn.open(early.stream, early.sent)
    with pytest.raises(ValueError, match="first request"):
        await conn.send(10, 20)
    await conn.send(0, 10)  # the one already written: nothing more goes out
    assert conn.sent == 1
    await conn.aclose()
    side = await trio.to_thread.run_sync(accepted, listener)
    assert side.recv(4096).count(b"GET ") == 1
    side.close()
