"""The compose testbed for real, on a Docker engine: build the image with no registry, bring line3 up with
compose, check its addresses, routes, windows and a shaped link's rate with plain TCP, send a file through the
depot with lnet-send and fetch it at the far end with lnet-get, then take it all down and check that nothing
but the cached base image is left.

Needs root. Installs Debian's docker.io, docker-compose, mmdebstrap and debootstrap with apt-get where they are
missing and starts dockerd where none runs (and stops it again); skips with the reason where Docker cannot run.
The first run on a machine makes the base image (about a minute with mmdebstrap); later runs reuse it.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lnet.client.formats.manifest import hash_bytes
from lnet.testbed import Topology
from lnet.testbed.cli import main
from lnet.testbed.compose import IMAGE, NO_NETEM_LINE, container_name, project_name
from lnet.testbed.composebed import leftovers
from lnet.testbed.engine import EngineError, docker, ensure_engine, stop_dockerd
from lnet.testbed.image import BASE_REPOSITORY

from .conftest import TOPOLOGIES

pytestmark = [pytest.mark.root, pytest.mark.slow]
MiB = 1024 * 1024
LINE3 = Topology.load(TOPOLOGIES / "line3.toml")


@pytest.fixture(scope="module")
def docker_engine() -> Iterator[None]:
    if os.geteuid() != 0:
        pytest.skip(f"needs root (the Docker engine, debootstrap); running as uid {os.geteuid()}")
    try:
        state = ensure_engine(install=True, log=lambda line: print(f"docker_engine: {line}"))
    except EngineError as exc:
        pytest.skip(f"Docker cannot run here: {exc}")
    yield
    if state.started_pid is not None:
        stop_dockerd(state.started_pid)


def sh(host: str, *argv: str, input_bytes: bytes | None = None, timeout_s: float = 120) -> bytes:
    """Run a command in line3's container for `host`; its stdout."""
    args = ["exec", *(["-i"] if input_bytes is not None else []), container_name(LINE3, host), *argv]
    return docker(args, input_bytes=input_bytes, timeout_s=timeout_s).stdout


def tcp_mbit_s(src: str, dst: str, seconds: float = 6, skip_s: float = 2) -> float:
    """Goodput of one plain TCP stream from `src` to `dst` (the receiver's count after `skip_s`)."""
    sink = subprocess.Popen(["docker", "exec", container_name(LINE3, dst), "timeout", "60", "python3", "-m",
                             "lnet.testbed.probe", "tcp-sink", "5201", str(skip_s)], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        assert sink.stdout is not None
        assert json.loads(sink.stdout.readline()) == {"listening": 5201}
        sh(src, "python3", "-m", "lnet.testbed.probe", "tcp-send", LINE3.host(dst).address, "5201", str(seconds))
        result = json.loads(sink.stdout.readline())
        sink.wait(timeout=30)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
        assert sink.stdout is not None
        sink.stdout.close()
    return float(result["mbit_s"])


def udp_rtt_ms(src: str, dst: str) -> float:
    echo = subprocess.Popen(["docker", "exec", container_name(LINE3, dst), "timeout", "60", "python3", "-m",
                             "lnet.testbed.probe", "udp-echo", "5202"], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        assert echo.stdout is not None
        assert json.loads(echo.stdout.readline()) == {"listening": 5202}
        out = sh(src, "python3", "-m", "lnet.testbed.probe", "udp-ping", LINE3.host(dst).address, "5202", "30",
                 "0.02")
        echo.wait(timeout=30)
    finally:
        if echo.poll() is None:
            echo.kill()
            echo.wait()
        assert echo.stdout is not None
        echo.stdout.close()
    return float(json.loads(out.splitlines()[-1])["median_ms"])


def test_line3_on_compose_shaped_and_carrying_a_transfer(docker_engine: None, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    timings: dict[str, float] = {}
    started = time.monotonic()
    assert main(["image"]) == 0, capsys.readouterr().err
    timings["image"] = time.monotonic() - started
    out = tmp_path / "line3"
    topology = str(TOPOLOGIES / "line3.toml")
    started = time.monotonic()
    up = main(["compose", topology, "-o", str(out), "--up"])
    printed = capsys.readouterr()
    timings["up"] = time.monotonic() - started
    try:
        assert up == 0, printed.err
        assert "testbed lnet-line3 is up" in printed.out
        logs = docker(["logs", container_name(LINE3, "src")]).stderr.decode()
        netem = NO_NETEM_LINE not in logs
        # where the kernel has no netem, the testbed says so once, and runs rate-only
        assert printed.out.count(NO_NETEM_LINE) == (0 if netem else 1)

        # addresses, routes through the depot, windows and congestion control, shaping
        assert "inet 10.77.0.1/32" in sh("src", "ip", "-4", "addr", "show", "dev", "lo").decode()
        assert "via 10.78.0.3" in sh("src", "ip", "route", "get", "10.77.0.3").decode()
        assert sh("depot", "cat", "/proc/sys/net/ipv4/ip_forward").strip() == b"1"
        assert sh("dst", "cat", "/proc/sys/net/ipv4/tcp_congestion_control").strip() == b"cubic"
        assert sh("dst", "cat", "/proc/sys/net/ipv4/tcp_moderate_rcvbuf").strip() == b"0"
        qdiscs = sh("src", "tc", "qdisc", "show").decode()
        assert "tbf" in qdiscs, qdiscs
        assert "rate 50Mbit" in qdiscs, qdiscs
        assert ("netem" in qdiscs) == netem, qdiscs

        # one shaped hop with plain TCP: 50 Mbit/s (unshaped, the veths would carry several Gbit/s)
        started = time.monotonic()
        rate = tcp_mbit_s("src", "depot")
        timings["tcp"] = time.monotonic() - started
        with capsys.disabled():
            print(f"\nsrc -> depot, one TCP stream: {rate:.2f} Mbit/s over a 50 Mbit/s link")
        assert abs(rate - 50) <= 0.15 * 50, rate
        rtt = udp_rtt_ms("src", "dst")
        with capsys.disabled():
            print(f"src -> dst round trip: {rtt:.2f} ms ({'netem: 40 ms configured' if netem else 'rate-only'})")
        assert abs(rtt - 40) <= 4 if netem else rtt < 5, rtt

        # lnet-send from src through the depot to dst's depot; lnet-get at dst
        payload = os.urandom(4 * MiB + 5)
        sh("src", "sh", "-c", "cat > /tmp/payload.bin", input_bytes=payload)
        started = time.monotonic()
        sent = json.loads(sh("src", "lnet-send", "/tmp/payload.bin", "--to", "dst", "--path", "depot",
                             "--block-size", "1MiB", "--cold", "--memory", "/tmp/edges.json", "--manifest",
                             "/tmp/manifest.json", "--json", "--no-progress"))
        timings["send"] = time.monotonic() - started
        assert sent["path"] == ["src", "depot", "dst"]
        manifest = sh("src", "cat", "/tmp/manifest.json")
        assert json.loads(manifest)["file_hash"] == hash_bytes("blake3", payload)
        sh("dst", "sh", "-c", "umask 077 && cat > /tmp/manifest.json", input_bytes=manifest)
        started = time.monotonic()
        sh("dst", "lnet-get", "/tmp/manifest.json", "-o", "/tmp/received.bin", "--no-progress")
        timings["get"] = time.monotonic() - started
        received = sh("dst", "cat", "/tmp/received.bin")
        assert received == payload
    finally:
        started = time.monotonic()
        down = main(["compose", topology, "-o", str(out), "--down"])
        timings["down"] = time.monotonic() - started
        with capsys.disabled():
            print(f"timings (s): {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
    assert down == 0, capsys.readouterr().err
    assert leftovers(project_name(LINE3)) == {"containers": [], "networks": []}
    images = docker(["images", "--format", "{{.Repository}}:{{.Tag}}"]).stdout.decode().split()
    assert IMAGE not in images
    assert any(i.startswith(f"{BASE_REPOSITORY}:") for i in images), images  # the cached base stays
    assert not docker(["ps", "-aq", "--filter", "name=lnet-testbed-build-"]).stdout.strip()
