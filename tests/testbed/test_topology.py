"""The topology file: parsing, validation (every bad input named), addresses and shortest-delay routes."""

from __future__ import annotations

from pathlib import Path

import pytest

from lnet.testbed import Topology, TopologyError

from .conftest import TOPOLOGIES

GOOD = """
name = "tri"
[defaults]
window = "256KiB"
congestion = "cubic"
[hosts.a]
[hosts.b]
window = "1MiB"
congestion = "bbr"
[hosts.c]
[[links]]
a = "a"
b = "b"
delay_ms = 5.0
rate_mbit = 20.0
loss = 0.01
jitter_ms = 1.0
queue_ms = 30.0
[[links]]
a = "b"
b = "c"
delay_ms = 7
[[links]]
a = "a"
b = "c"
delay_ms = 20
"""


def test_parse_hosts_defaults_and_overrides() -> None:
    t = Topology.parse(GOOD)
    assert t.name == "tri"
    assert t.host_names == ["a", "b", "c"]
    assert [t.host(h).address for h in "abc"] == ["10.77.0.1", "10.77.0.2", "10.77.0.3"]
    assert t.host("a").window_bytes == 256 * 1024
    assert t.host("a").congestion == "cubic"
    assert t.host("b").window_bytes == 1024 * 1024
    assert t.host("b").congestion == "bbr"
    ab = t.link("b", "a")
    assert (ab.delay_ms, ab.rate_mbit, ab.loss, ab.jitter_ms, ab.queue_ms) == (5.0, 20.0, 0.01, 1.0, 30.0)
    bc = t.link("b", "c")
    assert bc.rate_mbit is None
    assert bc.loss == 0.0
    assert bc.effective_queue_ms == 20.0
    assert t.mtu == 9000


def test_shortest_delay_route_goes_through_forwarding_hosts() -> None:
    t = Topology.parse(GOOD)
    assert t.route("a", "c") == ["a", "b", "c"]  # 5 + 7 < 20
    assert t.route_delay_ms("a", "c") == 12.0
    assert t.route("c", "a") == ["c", "b", "a"]
    assert t.next_hop("a", "c") == "b"


def test_default_name_from_file(tmp_path: Path) -> None:
    path = tmp_path / "my-bed.toml"
    path.write_text(GOOD.replace('name = "tri"', ""))
    assert Topology.load(path).name == "my-bed"


def test_round_trip_through_dict() -> None:
    t = Topology.parse(GOOD)
    again = Topology.from_dict(t.to_dict())
    assert again.hosts == t.hosts
    assert again.links == t.links
    assert again.mtu == t.mtu


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD.replace('a = "b"\nb = "c"', 'a = "b"\nb = "zz"'), "'zz' is not a defined host"),
        (GOOD.replace("delay_ms = 7", "delay_ms = -7"), "delay_ms must not be negative"),
        (GOOD.replace("rate_mbit = 20.0", "rate_mbit = -1"), "rate_mbit must be positive"),
        (GOOD.replace("rate_mbit = 20.0", "rate_mbit = 0"), "rate_mbit must be positive"),
        (GOOD.replace("loss = 0.01", "loss = 1.0"), "loss is a fraction in [0, 1)"),
        (GOOD.replace("loss = 0.01", "loss = -0.1"), "loss is a fraction in [0, 1)"),
        (GOOD + '[[links]]\na = "c"\nb = "b"\ndelay_ms = 1\n', "duplicate link between 'c' and 'b'"),
        (GOOD + "[hosts.d]\n", "disconnected: d cannot be reached"),
        (GOOD.replace('a = "a"\nb = "b"', 'a = "a"\nb = "a"'), "a link joins two different hosts"),
        (GOOD.replace('congestion = "bbr"', 'congestion = "vegas"'), "congestion 'vegas'"),
        (GOOD.replace('window = "1MiB"', 'window = "lots"'), "[hosts.b] window"),
        (GOOD.replace('window = "1MiB"', "colour = 1"), "unknown key(s) colour"),
        (GOOD.replace("jitter_ms = 1.0", "jitter_ms = 9.0"), "jitter_ms (9.0) must not exceed delay_ms"),
        (GOOD.replace("queue_ms = 30.0", "queue_ms = 0"), "queue_ms must be positive"),
        (GOOD.replace("delay_ms = 7", 'delay_ms = "7"'), "delay_ms must be a number"),
        (GOOD.replace("delay_ms = 7\n", ""), "missing delay_ms"),
        ("[hosts.a]\n[hosts.b]\n", "no links"),
        ("", "no hosts"),
        ("[hosts.a]\n[[links]]\n", "at least two hosts"),
        ("name = 3\n", "name 3"),
        ("[hosts.A]\n[hosts.b]\n", "host name 'A'"),
        ("[hosts.a]\n", "at least two hosts"),
        ("this is = not toml", "not valid TOML"),
        ("mtu = 100\n[hosts.a]\n", "mtu 100"),
    ],
)
def test_bad_topologies_are_named(text: str, message: str) -> None:
    with pytest.raises(TopologyError) as info:
        Topology.parse(text)
    assert message in str(info.value)


def test_unknown_host_in_queries() -> None:
    t = Topology.parse(GOOD)
    with pytest.raises(TopologyError, match="unknown host 'x'; the hosts are a, b, c"):
        t.host("x")
    with pytest.raises(TopologyError, match="unknown host"):
        t.route("a", "x")


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="cannot read the topology file"):
        Topology.load(tmp_path / "nope.toml")


def _with_window(window: object) -> dict[str, object]:
    return {"defaults": {"window": window}, "hosts": {"a": {}, "b": {}}, "links": [{"a": "a", "b": "b", "delay_ms": 1}]}


@pytest.mark.parametrize(
    ("window", "expected"),
    [("256KiB", 262144), ("4MiB", 4 * 1024 * 1024), ("64kB", 64000), ("64KB", 64000), ("1.5KiB", 1536),
     ("512B", 512), ("512", 512), (1000, 1000)],
)
def test_windows_are_sizes_as_lnet_units_reads_them(window: object, expected: int) -> None:
    assert Topology.from_dict(_with_window(window)).host("a").window_bytes == expected


@pytest.mark.parametrize("window", ["0KiB", 0, -5, "many", True, 4096.0, "0.3KiB"])
def test_a_window_that_is_no_positive_whole_size_is_refused(window: object) -> None:
    with pytest.raises(TopologyError, match=r"\[defaults\] window"):
        Topology.from_dict(_with_window(window))


@pytest.mark.parametrize("name", ["abilene", "replicas", "line3"])
def test_example_topologies_load(name: str) -> None:
    t = Topology.load(TOPOLOGIES / f"{name}.toml")
    assert t.name == name
    assert all(h.congestion == "cubic" for h in t.hosts)


def test_abilene_shape_on_paper() -> None:
    """The designed numbers (window / RTT where the window binds, else the link rate) have the seed's shape."""
    t = Topology.load(TOPOLOGIES / "abilene.toml")
    assert t.route("ornl", "svl") == ["ornl", "atl", "ind", "kc", "den", "svl"]
    assert set(t.host_names) == {"ornl", "svl", "atl", "ind", "kc", "den", "nyc", "wdc"}

    def predicted(src: str, dst: str) -> float:
        path = t.route(src, dst)
        rtt_s = 2 * t.route_delay_ms(src, dst) / 1000
        window = t.host(dst).window_bytes  # the receiver's window is the cap
        rates = [t.link(a, b).rate_mbit or 1e9 for a, b in zip(path, path[1:], strict=False)]
        return min(window * 8 / rtt_s / 1e6, *rates)

    direct = predicted("ornl", "svl")
    chain = [predicted(a, b) for a, b in [("ornl", "atl"), ("atl", "ind"), ("ind", "kc"), ("kc", "den"),
                                          ("den", "svl")]]
    assert all(edge > direct for edge in chain)
    assert 1.8 <= min(chain) / direct <= 2.8
    assert min(chain) == chain[-1]  # Denver -> Sunnyvale is the bottleneck, as in Table 2
    for via in ("nyc", "wdc"):
        assert min(predicted("ornl", via), predicted(via, "svl")) < direct

    # the four-depot chain is the one widest path: every other chain through the depots is narrower
    depots = ["atl", "ind", "kc", "den", "nyc", "wdc"]
    best = min(chain)

    def widest_other(here: str, seen: tuple[str, ...], floor: float) -> float:
        top = predicted(here, "svl") if seen != ("atl", "ind", "kc", "den") else 0.0
        top = min(floor, top)
        for d in depots:
            if d not in seen:
                top = max(top, widest_other(d, (*seen, d), min(floor, predicted(here, d))))
        return top

    assert widest_other("ornl", (), float("inf")) < 0.95 * best


def test_replicas_client_ingress_above_sum() -> None:
    t = Topology.load(TOPOLOGIES / "replicas.toml")
    replicas = [h for h in t.host_names if h.startswith("r")]
    assert len(replicas) == 6
    rates = [t.link("isp", r).rate_mbit or 0.0 for r in replicas]
    rtts = [2 * t.route_delay_ms("client", r) for r in replicas]
    assert len(set(rates)) == 6
    assert len(set(rtts)) == 6
    assert (t.link("client", "isp").rate_mbit or 0.0) > sum(rates)
