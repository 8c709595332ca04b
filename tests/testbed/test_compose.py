"""The docker-compose generator, tested by parsing what it writes (services, networks, exact tc and route
commands) and by running a service's start-up script with stand-ins for `ip` and `tc`, with and without netem.
No Docker engine needed; tests/testbed/test_compose_live.py runs the testbed for real."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from lnet.testbed import Topology
from lnet.testbed.cli import main
from lnet.testbed.compose import NO_NETEM_LINE, READY_LINE, compose_yaml, write_compose

from .conftest import REPO, TOPOLOGIES


def parse_yaml(text: str) -> Any:
    """Just enough YAML for what compose.py emits: block maps, block lists, JSON-style quoted scalars, plain
    scalars, comments. Raises on anything else, so an emitter change that a real parser might read differently
    fails here."""
    lines = []
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        lines.append((indent, raw.strip()))

    def scalar(s: str) -> Any:
        if s.startswith('"'):
            return json.loads(s)
        if re.fullmatch(r"[A-Za-z0-9_./:-]+", s):
            return s
        raise ValueError(f"unexpected scalar {s!r}")

    def block(i: int, indent: int) -> tuple[Any, int]:
        if lines[i][1].startswith("- "):
            items = []
            while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
                rest = lines[i][1][2:]
                if re.match(r"^[A-Za-z0-9_.-]+: ", rest):  # "- key: value" opens a map item
                    lines[i] = (indent + 2, rest)
                    value, i = block(i, indent + 2)
                    items.append(value)
                else:
                    items.append(scalar(rest))
                    i += 1
            return items, i
        mapping: dict[str, Any] = {}
        while i < len(lines) and lines[i][0] == indent:
            key, sep, rest = lines[i][1].partition(":")
            if not sep:
                raise ValueError(f"expected key: value, got {lines[i][1]!r}")
            rest = rest.strip()
            if key in mapping:
                raise ValueError(f"duplicate key {key!r}")
            if rest:
                mapping[key] = scalar(rest)
                i += 1
            else:
                mapping[key], i = block(i + 1, lines[i + 1][0])
        return mapping, i

    doc, end = block(0, 0)
    if end != len(lines):
        raise ValueError(f"unparsed from line {end}: {lines[end]}")
    return doc


def unescape(s: str) -> str:
    """What compose hands to the container: `$$` is a literal `$`; a lone `$` would be interpolated."""
    assert not re.search(r"(?<!\$)\$(?!\$)", s.replace("$$", "")), f"unescaped $ in {s!r}"
    return s.replace("$$", "$")


def script(service: dict[str, Any]) -> list[str]:
    entry = service["entrypoint"]
    assert entry[:2] == ["sh", "-c"]
    return [c.strip() for c in unescape(entry[2]).split(";")]


@pytest.fixture
def line3() -> dict[str, Any]:
    return parse_yaml(compose_yaml(Topology.load(TOPOLOGIES / "line3.toml")))


def test_services_networks_and_addresses(line3: dict[str, Any]) -> None:
    assert "name" not in line3  # docker-compose 1.29 refuses it; the project is `-p lnet-line3`
    assert list(line3["services"]) == ["src", "depot", "dst"]
    assert line3["networks"]["link0"]["ipam"]["config"] == [{"subnet": "10.78.0.0/24"}]
    assert line3["networks"]["link1"]["driver_opts"] == {"com.docker.network.driver.mtu": "9000"}
    depot = line3["services"]["depot"]
    assert depot["cap_add"] == ["NET_ADMIN"]
    assert depot["networks"] == {"link0": {"ipv4_address": "10.78.0.3"}, "link1": {"ipv4_address": "10.78.1.2"}}
    assert "build" not in depot  # the image is built by `lnet-testbed image`, with no registry
    assert depot["image"] == "lnet-testbed:latest"
    assert depot["container_name"] == "lnet-line3-depot"
    assert depot["environment"] == {"LNET_DEPOTS": "/etc/lnet/depots.toml"}
    assert depot["sysctls"]["net.ipv4.ip_forward"] == "1"
    assert depot["sysctls"]["net.ipv4.tcp_congestion_control"] == "cubic"
    assert depot["command"] == ["lnet-depot", "--listen", "10.77.0.2:6714", "--name", "depot", "--data-dir",
                                "/var/lib/lnet/depot", "--log-level", "warning"]


def test_exact_tc_and_route_commands(line3: dict[str, Any]) -> None:
    src = script(line3["services"]["src"])
    assert src == [
        "set -e",
        "netem=1",
        "tc qdisc add dev lo root handle 1: netem delay 0ms 2>/dev/null || netem=0",
        "[ $netem = 0 ] || tc qdisc del dev lo root",
        f"[ $netem = 1 ] || echo '{NO_NETEM_LINE}' >&2",
        "ip addr replace 10.77.0.1/32 dev lo",
        "dev0=$(ip -o -4 addr show to 10.78.0.2/32 | awk '{print $2}')",
        "ip link set $dev0 mtu 9000",
        "tc qdisc del dev $dev0 root 2>/dev/null || true",
        "tc qdisc add dev $dev0 root handle 1: tbf rate 50mbit burst 25000 latency 20ms",
        "[ $netem = 0 ] || tc qdisc add dev $dev0 parent 1:1 handle 10: netem delay 10ms limit 100000",
        "ip route replace 10.77.0.2/32 via 10.78.0.3 src 10.77.0.1",
        "ip route replace 10.77.0.3/32 via 10.78.0.3 src 10.77.0.1",  # dst over the depot, which forwards
        "mkdir -p /etc/lnet",
        "printf '%s\\n' 'here = \"src\"' '[depots.depot]' 'url = \"http://10.77.0.2:6714\"' '[depots.dst]' "
        "'url = \"http://10.77.0.3:6714\"' > /etc/lnet/depots.toml",
        f"echo '{READY_LINE}' >&2",
        'exec "$@"',
    ]
    dst = script(line3["services"]["dst"])
    assert "ip route replace 10.77.0.1/32 via 10.78.1.2 src 10.77.0.3" in dst


def test_loss_jitter_and_queue_reach_netem_and_tbf() -> None:
    topo = Topology.parse("""
[hosts.x]
[hosts.y]
[[links]]
a = "x"
b = "y"
delay_ms = 30
jitter_ms = 2.5
loss = 0.015
rate_mbit = 12.5
queue_ms = 80
""")
    doc = parse_yaml(compose_yaml(topo))
    for name in ("x", "y"):
        cmds = script(doc["services"][name])
        assert "tc qdisc add dev $dev0 root handle 1: tbf rate 12.5mbit burst 18000 latency 80ms" in cmds
        assert ("[ $netem = 0 ] || tc qdisc add dev $dev0 parent 1:1 handle 10: netem delay 30ms 2.5ms loss 1.5% "
                "limit 100000") in cmds


def test_unlimited_rate_is_netem_alone() -> None:
    topo = Topology.parse('[hosts.x]\n[hosts.y]\n[[links]]\na = "x"\nb = "y"\ndelay_ms = 4\n')
    cmds = script(parse_yaml(compose_yaml(topo))["services"]["x"])
    assert "[ $netem = 0 ] || tc qdisc add dev $dev0 root handle 1: netem delay 4ms limit 100000" in cmds
    assert not any(c.startswith("tc ") and "tbf" in c for c in cmds)


def test_abilene_routes_follow_shortest_delay() -> None:
    doc = parse_yaml(compose_yaml(Topology.load(TOPOLOGIES / "abilene.toml")))
    assert len(doc["services"]) == 8
    assert len(doc["networks"]) == 8
    ornl = script(doc["services"]["ornl"])
    # ornl (10.77.0.1) reaches svl (10.77.0.6) via atl on link0 (ornl=.2, atl=.3), not via wdc
    assert "ip route replace 10.77.0.6/32 via 10.78.0.3 src 10.77.0.1" in ornl
    assert doc["services"]["nyc"]["sysctls"]["net.ipv4.tcp_rmem"] != doc["services"]["ornl"]["sysctls"][
        "net.ipv4.tcp_rmem"]  # the 12 KiB window host


@pytest.mark.parametrize("name", ["abilene", "replicas", "line3"])
def test_committed_compose_files_are_current(name: str, tmp_path: Path) -> None:
    """deploy/compose/NAME is what the generator writes today (regenerate with `lnet-testbed compose`), and
    nothing else: no Dockerfile, whose registry image no machine here can pull."""
    write_compose(Topology.load(TOPOLOGIES / f"{name}.toml"), tmp_path)
    committed = REPO / "deploy" / "compose" / name
    assert sorted(p.name for p in committed.iterdir()) == ["docker-compose.yml"]
    assert (committed / "docker-compose.yml").read_text() == (tmp_path / "docker-compose.yml").read_text()
    parse_yaml((committed / "docker-compose.yml").read_text())


STAND_INS = {
    # `ip`: logs its arguments; `addr show to ADDR/32` answers like the real one, with the interface eth<K>
    # for 10.78.K.x. `tc`: logs; refuses netem where NETEM=0 (the kernel has no sch_netem).
    "ip": """#!/bin/sh
echo "ip $*" >> "$LOG"
if [ "$2" = "-4" ] && [ "$3" = "addr" ]; then
    k=$(echo "$6" | cut -d. -f3)
    echo "7: eth$k    inet $6 brd 10.78.$k.255 scope global eth$k"
fi
""",
    "tc": """#!/bin/sh
case "$*" in *netem*) [ "$NETEM" = 1 ] || { echo "Error: Specified qdisc kind is unknown." >&2; exit 2; } ;; esac
echo "tc $*" >> "$LOG"
""",
}


@pytest.mark.parametrize("netem", [True, False])
def test_start_up_script_shapes_routes_and_falls_back_to_rate_only(netem: bool, tmp_path: Path) -> None:
    """The depot's entrypoint, run by sh with stand-ins for ip and tc: with netem, tbf with netem under it;
    without, one line saying so, tbf alone, and everything else the same; then its depots file and its command."""
    doc = parse_yaml(compose_yaml(Topology.load(TOPOLOGIES / "line3.toml")))
    entry = doc["services"]["depot"]["entrypoint"]
    text = unescape(entry[2]).replace("/etc/lnet", str(tmp_path / "etc"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STAND_INS.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(tmp_path / "log"),
           "NETEM": "1" if netem else "0"}
    done = subprocess.run(["sh", "-c", text, entry[3], "echo", "the command ran"], capture_output=True, text=True,
                          env=env, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "the command ran\n"
    assert done.stderr.splitlines() == ([] if netem else [NO_NETEM_LINE]) + [READY_LINE]
    log = (tmp_path / "log").read_text().splitlines()
    assert "ip addr replace 10.77.0.2/32 dev lo" in log
    for dev in ("eth0", "eth1"):
        assert f"tc qdisc add dev {dev} root handle 1: tbf rate 50mbit burst 25000 latency 20ms" in log
        assert (f"tc qdisc add dev {dev} parent 1:1 handle 10: netem delay 10ms limit 100000" in log) == netem
    assert "ip route replace 10.77.0.1/32 via 10.78.0.2 src 10.77.0.2" in log
    assert "ip route replace 10.77.0.3/32 via 10.78.1.3 src 10.77.0.2" in log
    depots = tomllib.loads((tmp_path / "etc" / "depots.toml").read_text())
    assert depots == {"here": "depot", "depots": {"src": {"url": "http://10.77.0.1:6714"},
                                                  "dst": {"url": "http://10.77.0.3:6714"}}}


def test_a_failing_tc_stops_the_start_up(tmp_path: Path) -> None:
    """Only the netem probe may fail: a tc that fails for real (here: tbf refused) stops the host, before its
    command runs."""
    doc = parse_yaml(compose_yaml(Topology.load(TOPOLOGIES / "line3.toml")))
    entry = doc["services"]["src"]["entrypoint"]
    text = unescape(entry[2]).replace("/etc/lnet", str(tmp_path / "etc"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ip").write_text(STAND_INS["ip"])
    (bin_dir / "tc").write_text('#!/bin/sh\ncase "$*" in *tbf*) exit 1 ;; esac\necho "tc $*" >> "$LOG"\n')
    for name in ("ip", "tc"):
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(tmp_path / "log"), "NETEM": "1"}
    done = subprocess.run(["sh", "-c", text, entry[3], "echo", "the command ran"], capture_output=True, text=True,
                          env=env, timeout=30, check=False)
    assert done.returncode != 0
    assert "the command ran" not in done.stdout
    assert READY_LINE not in done.stderr


def test_cli_compose_writes_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compose", str(TOPOLOGIES / "line3.toml"), "-o", str(tmp_path / "out")]) == 0
    doc = parse_yaml((tmp_path / "out" / "docker-compose.yml").read_text())
    assert list(doc["services"]) == ["src", "depot", "dst"]
    assert "wrote" in capsys.readouterr().out


def test_cli_compose_bad_topology_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[hosts.a]\n[hosts.b]\n[[links]]\na = "a"\nb = "c"\ndelay_ms = 1\n')
    assert main(["compose", str(bad), "-o", str(tmp_path / "out")]) == 2
    assert "'c' is not a defined host" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
