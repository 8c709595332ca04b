"""Round trips to the peer depots (lnet.depot.round_trips): the log, and the timer in process on MockClock."""

from __future__ import annotations

import pytest
import trio

from lnet.depot.cli import _parser, load_config
from lnet.depot.config import ConfigError, DepotConfig, WeatherPeer
from lnet.depot.round_trips import MAX_PEERS, PER_PEER, RoundTripLog

from .conftest import MakeDepot, Routes


def test_the_log_keeps_the_smallest_round_trip_of_its_window_and_the_failures() -> None:
    log = RoundTripLog(window=100.0)
    log.record("http://b:1", 0.030, now=10.0)
    log.record("http://b:1", 0.020, now=20.0)
    log.record("http://b:1", 0.045, now=30.0)  # a queue on the way: never smaller than the link's round trip
    log.failed("http://c:1", "no depot at http://c:1", now=25.0)
    assert log.summary(now=40.0) == [
        {"to": "http://b:1", "rtt_ms": pytest.approx(20.0), "count": 3, "age_s": 10.0, "failures": 0, "error": None},
        {"to": "http://c:1", "rtt_ms": None, "count": 0, "age_s": None, "failures": 1,
         "error": "no depot at http://c:1"},
    ]
    # past the window: the old figures go, and with them a peer not heard from since
    [b] = log.summary(now=126.0)
    assert (b["to"], b["rtt_ms"], b["count"]) == ("http://b:1", pytest.approx(45.0), 1)
    assert log.summary(now=200.0) == []


def test_the_log_is_bounded() -> None:
    log = RoundTripLog(window=1e9)
    for i in range(3 * PER_PEER):
        log.record("http://b:1", 1.0 + i, now=float(i))  # the smallest are the oldest, and go first
        log.failed("http://b:1", "x" * 1000, now=float(i))
    [entry] = log.summary(now=1000.0)
    assert (entry["count"], entry["failures"], len(entry["error"])) == (PER_PEER, PER_PEER, 300)
    assert entry["rtt_ms"] == (1.0 + 2 * PER_PEER) * 1000
    for i in range(MAX_PEERS + 10):
        log.record(f"http://p{i}:1", 0.01, now=2000.0)
    peers = [e["to"] for e in log.summary(now=2000.0)]
    assert len(peers) == MAX_PEERS
    assert "http://b:1" not in peers  # the least recently heard went first
    assert "http://p0:1" not in peers


async def test_a_depot_times_the_round_trip_to_each_peer_and_reports_it(
    open_depot: MakeDepot, routes: Routes, autojump_clock: trio.abc.Clock
) -> None:
    routes.delays["http://d2.test:6714"] = 0.040  # every request to d2 takes 40 ms
    peers = (WeatherPeer("http://d2.test:6714"), WeatherPeer("http://dead.test:6714"))  # nothing at dead
    async with (
        open_depot("d2"),
        open_depot("d1", weather_peers=peers, rtt_interval=30.0) as (_, one),  # no weather budget: no probes
    ):
        await trio.sleep(65)  # rounds at 0, 30 and 60 s
        entries = {e["to"]: e for e in (await one.status())["round_trips"]}
        assert entries["http://d2.test:6714"]["rtt_ms"] == pytest.approx(40.0)
        assert entries["http://d2.test:6714"]["count"] == 3
        dead = entries["http://dead.test:6714"]
        assert (dead["rtt_ms"], dead["count"], dead["failures"]) == (None, 0, 3)
        assert "no depot at http://dead.test:6714" in dead["error"]
        assert routes.puts == []  # round trips push nothing
        assert (await one.status())["links"] == []


async def test_a_peer_that_does_not_answer_costs_a_round_at_most_its_timeout(
    open_depot: MakeDepot, routes: Routes, autojump_clock: trio.abc.Clock
) -> None:
    routes.delays["http://d2.test:6714"] = 1000.0
    async with (
        open_depot("d2"),
        open_depot("d1", weather_peers=(WeatherPeer("http://d2.test:6714"),), rtt_interval=30.0,
                   copy_timeout=5.0) as (_, one),
    ):
        await trio.sleep(12)
        [entry] = (await one.status())["round_trips"]
        assert (entry["count"], entry["failures"], entry["error"]) == (0, 1, "timed out")


async def test_round_trips_can_be_switched_off(
    open_depot: MakeDepot, routes: Routes, autojump_clock: trio.abc.Clock
) -> None:
    async with (
        open_depot("d2"),
        open_depot("d1", weather_peers=(WeatherPeer("http://d2.test:6714"),), rtt_interval=0.0) as (_, one),
    ):
        await trio.sleep(120)
        assert (await one.status())["round_trips"] == []


def test_the_interval_is_checked_and_set_from_a_flag_or_the_environment() -> None:
    with pytest.raises(ConfigError, match="rtt_interval must be 0"):
        DepotConfig(rtt_interval=-1.0)
    assert load_config(_parser().parse_args([]), {}).rtt_interval == 30.0
    assert load_config(_parser().parse_args(["--rtt-interval", "0"]), {}).rtt_interval == 0.0
    assert load_config(_parser().parse_args([]), {"LNET_DEPOT_RTT_INTERVAL": "2m"}).rtt_interval == 120.0
