"""The compose testbed with a depot directory (``lnet-testbed compose --directory``): an `etcd` service on link 0,
every host routing to it, every depot registered there, every depots file naming it."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from lnet.testbed import Topology
from lnet.testbed.cli import main
from lnet.testbed.compose import compose_yaml, directory_url, write_compose

from .conftest import REPO, TOPOLOGIES
from .test_compose import STAND_INS, parse_yaml, script, unescape

ETCD = "http://10.78.0.4:2379"


@pytest.fixture
def line3() -> dict[str, Any]:
    return parse_yaml(compose_yaml(Topology.load(TOPOLOGIES / "line3.toml"), directory=True))


def test_the_etcd_service_sits_on_link0_and_routes_through_its_a_host(line3: dict[str, Any]) -> None:
    assert directory_url() == ETCD
    assert list(line3["services"]) == ["src", "depot", "dst", "etcd"]
    etcd = line3["services"]["etcd"]
    assert etcd["networks"] == {"link0": {"ipv4_address": "10.78.0.4"}}
    assert script(etcd) == ["set -e", "ip route replace 10.77.0.0/24 via 10.78.0.2", 'exec "$@"']
    command = etcd["command"]
    assert command[0] == "etcd"
    assert command[command.index("--listen-client-urls") + 1] == ETCD


def test_every_depot_registers_and_every_host_reaches_the_directory(line3: dict[str, Any]) -> None:
    for name in ("src", "depot", "dst"):
        assert line3["services"][name]["command"][-2:] == ["--directory", ETCD]
    # dst is not on link 0: its way to etcd is its way to src (link 0's a host), over the depot
    assert "ip route replace 10.78.0.4/32 via 10.78.1.2 src 10.77.0.3" in script(line3["services"]["dst"])
    assert not any("10.78.0.4/32" in line for line in script(line3["services"]["src"]))  # on link 0 itself


def test_the_depots_file_names_the_directory(line3: dict[str, Any], tmp_path: Path) -> None:
    entry = line3["services"]["depot"]["entrypoint"]
    text = unescape(entry[2]).replace("/etc/lnet", str(tmp_path / "etc"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STAND_INS.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(tmp_path / "log"), "NETEM": "1"}
    done = subprocess.run(["sh", "-c", text, entry[3], "true"], capture_output=True, text=True, env=env, timeout=30,
                          check=False)
    assert done.returncode == 0, done.stderr
    depots = tomllib.loads((tmp_path / "etc" / "depots.toml").read_text())
    assert depots["directory"] == ETCD
    assert set(depots["depots"]) == {"src", "dst"}


@pytest.mark.parametrize("name", ["abilene", "line3"])
def test_committed_directory_compose_files_are_current(name: str, tmp_path: Path) -> None:
    write_compose(Topology.load(TOPOLOGIES / f"{name}.toml"), tmp_path, directory=True)
    committed = REPO / "deploy" / "compose" / f"{name}-directory" / "docker-compose.yml"
    assert committed.read_text() == (tmp_path / "docker-compose.yml").read_text()


def test_cli_compose_directory_writes_its_own_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compose", str(TOPOLOGIES / "line3.toml"), "--directory", "-o", str(tmp_path / "out")]) == 0
    doc = parse_yaml((tmp_path / "out" / "docker-compose.yml").read_text())
    assert "etcd" in doc["services"]
