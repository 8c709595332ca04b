"""The round trips depots measure to their peers reach lnet-send's scheduler (they rank the depot-to-depot edges
it has not measured): from each depot's /v1/status, on the emulated network under trio's autojump clock."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trio

from lnet.client.commands import send
from lnet.client.exits import ExitCode
from lnet.client.sending.send import peer_round_trips
from lnet.depot.config import WeatherPeer

from .network import MiB, Network, depots
from .test_send_cli import emulated
from .test_send_cli import emulated_depots_file as depots_file

URLS = {"http://a.test:6714": "a", "http://b.test:6714/": "b", "http://c.test:6714": "c"}


def test_the_round_trips_are_read_from_both_places_a_depot_reports_them() -> None:
    statuses = {
        "a": {"round_trips": [{"to": "http://B.test:6714", "rtt_ms": 30.0},  # the host's case, a slash: the same
                              {"to": "http://c.test:6714", "rtt_ms": 12.5},
                              {"to": "http://elsewhere:1", "rtt_ms": 1.0},  # not in the overlay
                              {"to": "http://a.test:6714", "rtt_ms": 0.1}],  # itself
              "links": [{"to": "http://b.test:6714/", "rtt_ms": 25.0},  # TCP's figure on a push: smaller, taken
                        {"to": "http://c.test:6714", "rtt_ms": None}]},
        "b": {"round_trips": [{"to": "http://a.test:6714", "rtt_ms": "fast"}, {"rtt_ms": 3.0}, "x",
                              {"to": "http://c.test:6714", "rtt_ms": -1.0}, {"to": "http://c.test:6714",
                                                                            "rtt_ms": True}],
              "links": "not a list"},
        "c": {},
    }
    assert peer_round_trips(statuses, URLS) == {("a", "b"): pytest.approx(0.025), ("a", "c"): pytest.approx(0.0125)}


async def test_lnet_send_hands_the_depots_round_trips_to_its_scheduler(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network(latency_s=0.01)
    names = ["a", "b", "c"]
    peers = tuple(WeatherPeer(network.url(name)) for name in names)
    source = tmp_path / "f.bin"
    source.write_bytes(os.urandom(2 * MiB))
    trace = tmp_path / "trace.jsonl"
    async with depots(network, names, tmp_path, weather_peers=peers, rtt_interval=30.0):
        await trio.sleep(1)  # the depots' first round
        code = await send.run([str(source), "--to", "c", "--depots", str(depots_file(tmp_path, network, names)),
                               "--block-size", "1MiB", "--json", "--cold", "--trace", str(trace),
                               "--manifest", str(tmp_path / "m.json"), "--memory", str(tmp_path / "edges.json")],
                              io=emulated(network))
    assert code == ExitCode.OK
    capsys.readouterr()
    first = json.loads(trace.read_text().splitlines()[0])
    assert first["reason"] == "start"
    # every ordered pair of depots, timed as the client times its own round trip to each depot (this network
    # charges a small request one latency)
    own = first["rtt_ms"]["c"]
    assert own == pytest.approx(network.latency_s * 1000, rel=0.1)
    assert first["peer_rtt_ms"] == {f"{u}>{v}": pytest.approx(own, rel=0.1) for u in names for v in names if u != v}
