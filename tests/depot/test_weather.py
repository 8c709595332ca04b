"""Network weather: the links log, the probes' byte budget, TCP_INFO, and the background probes on MockClock."""

from __future__ import annotations

import socket
import struct
import sys

import pytest
import trio

from lnet.depot.config import WeatherPeer
from lnet.depot.weather import HourlyBudget, LinkLog, PushSample, parse_tcp_info

from .conftest import MakeDepot, MiB, Routes

TOKEN_D3 = "d3-operator-token-0123456789"
TOKEN_D4 = "d4-operator-token-0123456789"

# -- the pure parts -----------------------------------------------------------------------------------------


def test_the_links_log_sums_per_stream_figures_per_peer_and_source() -> None:
    log = LinkLog(window=3600.0)
    log.record("http://b:6714", "copy", PushSample(at=1000.0, nbytes=4 * MiB, seconds=2.0, streams=1))
    log.record("http://b:6714", "copy", PushSample(at=1010.0, nbytes=MiB, seconds=1.0, streams=3, rtt_us=40_000,
                                                   retrans=2))
    log.record("http://b:6714", "copy", PushSample(at=1020.0, nbytes=2 * MiB, seconds=1.0, streams=2,
                                                   rtt_us=30_000, retrans=0))
    log.record("http://b:6714", "probe", PushSample(at=1030.0, nbytes=MiB, seconds=0.5))
    log.record_failure("http://c:6714", "probe", "ConnectError: refused", now=1040.0)
    copy, probe, failing = log.summary(now=1100.0)
    assert copy == {
        "to": "http://b:6714", "source": "copy", "bytes": 7 * MiB, "seconds": 4.0,
        "mbps": pytest.approx(7 * MiB * 8 / 4.0 / 1e6), "count": 3, "at": 1020.0, "age_s": 80.0,
        "streams": 2.0, "block_bytes": 2 * MiB, "rtt_ms": 30.0, "retrans": 2, "failures": 0, "error": None,
        "error_at": None,
    }
    assert (probe["source"], probe["count"], probe["rtt_ms"], probe["retrans"]) == ("probe", 1, None, None)
    assert failing == {
        "to": "http://c:6714", "source": "probe", "bytes": 0, "seconds": 0, "mbps": 0.0, "count": 0, "at": None,
        "age_s": None, "streams": 0.0, "block_bytes": 0, "rtt_ms": None, "retrans": None, "failures": 1,
        "error": "ConnectError: refused", "error_at": 1040.0,
    }
    # what is older than the window ages out, and an entry with nothing left is dropped
    assert [(e["to"], e["source"]) for e in log.summary(now=4635.0)] == [("http://c:6714", "probe")]
    assert log.summary(now=4700.0) == []


def test_the_links_log_is_bounded() -> None:
    log = LinkLog(window=3600.0, per_link=4, max_links=3)
    for i in range(10):
        log.record(f"http://p{i}:1", "copy", PushSample(at=float(i), nbytes=1, seconds=1.0))
    for i in range(10):
        log.record("http://p9:1", "copy", PushSample(at=10.0 + i, nbytes=1, seconds=1.0))
    entries = log.summary(now=20.0)
    assert [e["to"] for e in entries] == ["http://p7:1", "http://p8:1", "http://p9:1"]  # the latest three
    assert entries[-1]["count"] == 4
    log.record_failure("http://p7:1", "copy", "x" * 10_000, now=21.0)
    assert len(log.summary(now=22.0)[0]["error"]) == 300


def test_the_budget_holds_over_every_hour() -> None:
    budget = HourlyBudget(limit=10)
    assert budget.spend(6, now=0.0)
    assert not budget.spend(5, now=10.0)
    assert budget.spend(4, now=10.0)
    assert not budget.allows(1, now=3600.0)  # the spend at 0 s is still within the hour [0, 3600]
    assert budget.spend(6, now=3600.5)
    assert budget.spent(now=3610.0) == 10
    spends: list[tuple[float, int]] = []
    fresh = HourlyBudget(limit=1000)
    for step in range(5000):  # spend greedily at uneven times, then check every hour-long window
        now = step * 7.3
        if fresh.spend(100 + step % 150, now):
            spends.append((now, 100 + step % 150))
    assert len(spends) > 20
    for start, _ in spends:
        assert sum(n for at, n in spends if start <= at <= start + 3600) <= 1000


def test_tcp_info_offsets() -> None:
    raw = bytearray(104)
    struct.pack_into("=I", raw, 68, 12_345)
    struct.pack_into("=I", raw, 100, 7)
    info = parse_tcp_info(bytes(raw))
    assert info is not None
    assert (info.rtt_us, info.total_retrans) == (12_345, 7)
    assert parse_tcp_info(bytes(60)) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="TCP_INFO's layout is Linux's")
def test_tcp_info_layout_matches_this_kernel() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        with socket.create_connection(server.getsockname()) as client:
            peer, _ = server.accept()
            with peer:
                for _ in range(20):
                    client.sendall(b"x" * 1000)
                    peer.recv(65536)
                raw = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    assert raw[0] == 1  # tcpi_state: TCP_ESTABLISHED
    (snd_mss,) = struct.unpack_from("=I", raw, 16)
    assert 500 < snd_mss <= 65535
    info = parse_tcp_info(raw)
    assert info is not None
    assert 0 < info.rtt_us < 1_000_000  # loopback: microseconds to milliseconds, never zero once acked
    assert info.total_retrans == 0


# -- the probes, in process, on MockClock -------------------------------------------------------------------


async def test_probes_keep_the_budget_and_survive_dead_and_refusing_peers(
    open_depot: MakeDepot, routes: Routes, autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    peers = (
        WeatherPeer("http://d2.test:6714"),
        WeatherPeer("http://dead.test:6714"),  # nothing listens there
        WeatherPeer("http://d3.test:6714", token=TOKEN_D3),
        WeatherPeer("http://d4.test:6714"),  # d4 wants a token and is given none: 401 each time
    )
    async with (
        open_depot("d2") as (d2, _),
        open_depot("d3", operator_token=TOKEN_D3) as (d3, _),
        open_depot("d4", operator_token=TOKEN_D4) as (d4, _),
        open_depot(
            "d1", weather_peers=peers, weather_bytes_per_hour=5 * MiB, weather_block=MiB, weather_interval=60.0,
            links_window=3 * 3600.0,
        ) as (d1, one),
    ):
        await trio.sleep(2 * 3600)
        pushes = [(at, n) for at, _, n in routes.puts]
        for start, _ in pushes:  # over every hour, closed at both ends, at most the budget
            assert sum(n for at, n in pushes if start <= at <= start + 3600) <= 5 * MiB
        # A round finds room for two probes (4 MiB) once the last round's spends are over an hour old: rounds at
        # 0 s and 3660 s (the spends at 0 s count until 3600 s inclusive), so 8 MiB in two hours.
        assert sum(n for _, n in pushes) == 8 * MiB
        assert {base for _, base, _ in routes.puts} == {"http://d2.test:6714", "http://d3.test:6714"}
        links = {(e["to"], e["source"]): e for e in (await one.status())["links"]}
        assert set(links) == {(p.url, "probe") for p in peers}
        for url in ("http://d2.test:6714", "http://d3.test:6714"):
            entry = links[(url, "probe")]
            assert entry["count"] == 2  # one warm push recorded per probe; the cold first push is not
            assert (entry["bytes"], entry["block_bytes"], entry["failures"], entry["error"]) == (2 * MiB, MiB, 0,
                                                                                                None)
        dead = links[("http://dead.test:6714", "probe")]
        assert (dead["count"], dead["failures"]) == (0, 2)
        assert "no depot at http://dead.test:6714" in dead["error"]
        refused = links[("http://d4.test:6714", "probe")]
        assert refused["count"] == 0
        assert refused["failures"] == 1  # the first round's budget ran out before d4; the next starts with it
        assert "401 unauthorized" in refused["error"]
        metrics = (await one._http.get("/metrics")).text
        assert 'lnet_depot_weather_probes_total{outcome="ok"} 4.0' in metrics
        assert 'lnet_depot_weather_probes_total{outcome="failed"} 3.0' in metrics
        assert 'lnet_depot_bytes_out_total{kind="probe"} 8.388608e+06' in metrics
        for depot in (d1, d2, d3, d4):  # every probe block was freed, here and there
            assert depot.store.used == 0
    assert TOKEN_D3 not in caplog.text
    assert "weather probe to http://dead.test:6714 failed" in caplog.text


async def test_a_stalled_probe_is_bounded_and_recorded(
    open_depot: MakeDepot, routes: Routes, autojump_clock: trio.abc.Clock
) -> None:
    routes.put_delay = 1000.0  # the peer takes every push and never answers in time
    async with (
        open_depot("d2") as (d2, _),
        open_depot(
            "d1", weather_peers=(WeatherPeer("http://d2.test:6714"),), weather_bytes_per_hour=100 * MiB,
            weather_block=MiB, weather_interval=300.0, copy_timeout=20.0,
        ) as (d1, one),
    ):
        await trio.sleep(250)
        [entry] = (await one.status())["links"]
        assert (entry["source"], entry["count"], entry["failures"]) == ("probe", 0, 1)
        assert "timed out" in entry["error"]
        assert d1.store.used == 0
        assert d2.store.used == 0  # the free after the failed push went through
        copy_source = await one.allocate_one(100, 60)  # and the depot serves on
        await one.write(copy_source.write, b"still here")
        assert await one.read(copy_source.read) == b"still here"


async def test_probes_are_off_by_default(
    open_depot: MakeDepot, routes: Routes, autojump_clock: trio.abc.Clock
) -> None:
    async with open_depot("d2"), open_depot("d1", weather_peers=(WeatherPeer("http://d2.test:6714"),)) as (_, one):
        await trio.sleep(600)
        assert routes.puts == []
        assert (await one.status())["links"] == []


async def test_probes_free_at_a_peer_that_wants_its_token_for_that_too(
    open_depot: MakeDepot, routes: Routes, autojump_clock: trio.abc.Clock
) -> None:
    async with (
        open_depot("d3", operator_token=TOKEN_D3, require_token_for=("allocate", "free")) as (d3, _),
        open_depot(
            "d1", weather_peers=(WeatherPeer("http://d3.test:6714", token=TOKEN_D3),), weather_bytes_per_hour=4 * MiB,
            weather_block=MiB, weather_interval=300.0, copy_allow=("d3.test",),
        ) as (_, one),
    ):
        await trio.sleep(60)
        [entry] = (await one.status())["links"]
        assert (entry["source"], entry["count"], entry["failures"]) == ("probe", 1, 0)
        assert d3.store.used == 0  # freed with the token, not left to expire
