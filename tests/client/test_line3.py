"""lnet-send and lnet-get end to end on the emulated line3 testbed (src, depot, dst; 10 ms, 50 Mbit/s hops),
and on a triangle (line3 plus a direct link) where a degraded hop has somewhere better to go.

Needs root and network namespaces; elsewhere every test here skips and says so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from lnet.client.formats.manifest import hash_bytes
from lnet.scheduler import EdgeMemory
from lnet.testbed import Testbed, Topology

TOPOLOGY = Path(__file__).resolve().parents[2] / "deploy" / "topologies" / "line3.toml"
MiB = 1024 * 1024
pytestmark = pytest.mark.root


@dataclass
class Line3:
    tb: Testbed
    tmp: Path
    depots_file: Path
    depots: dict[str, trio.Process]

    def send_argv(self, payload: Path, *extra: str) -> list[str]:
        return [sys.executable, "-m", "lnet.client.send", str(payload), "--to", "dst", "--depots",
                str(self.depots_file), "--memory", str(self.tmp / "edges.json"), "--block-size", "1MiB",
                "--manifest", str(self.tmp / "manifest.json"), "--json", *extra]


# On line3 every path crosses every link, so no degraded link can make another path better. The path-switch
# test uses this triangle instead: the same two hops, plus a direct link of its own. It is shorter than the two
# hops together (so the direct route takes it) but longer than either, so one window-limited stream is faster
# on each hop than direct (128 KiB / 20 ms = 52 Mbit/s against 128 KiB / 30 ms = 35 Mbit/s).
TRIANGLE = Topology.parse(
    """
name = "triangle"
[defaults]
window = "128KiB"
[hosts.src]
[hosts.depot]
[hosts.dst]
[[links]]
a = "src"
b = "depot"
delay_ms = 10.0
rate_mbit = 50.0
[[links]]
a = "depot"
b = "dst"
delay_ms = 10.0
rate_mbit = 50.0
[[links]]
a = "src"
b = "dst"
delay_ms = 15.0
rate_mbit = 50.0
"""
)


@asynccontextmanager
async def line3(tmp: Path, name: str, topology: Topology | Path = TOPOLOGY) -> AsyncIterator[Line3]:
    async with Testbed(topology, name=name) as tb:
        processes = {}
        lines = ['here = "src"']
        for host in ("depot", "dst"):
            argv = [sys.executable, "-m", "lnet.depot.cli", "--listen", f"{tb.address(host)}:6714", "--name", host,
                    "--data-dir", str(tmp / host), "--log-level", "warning"]
            process = await tb.spawn(host, argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
            assert process.stderr is not None
            seen = b""
            with trio.fail_after(30):
                while b"serving on" not in seen:
                    chunk = await process.stderr.receive_some(4096)
                    assert chunk, seen
                    seen += chunk
            processes[host] = process
            lines += [f"[depots.{host}]", f'url = "http://{tb.address(host)}:6714"']
        depots_file = tmp / "depots.toml"
        depots_file.write_text("\n".join(lines) + "\n")
        yield Line3(tb, tmp, depots_file, processes)


async def link_bytes(tb: Testbed, a: str, b: str, *, at_least: int, timeout_s: float) -> int:
    """Wait until the emulated link from ``a`` to ``b`` has delivered ``at_least`` bytes; returns how many."""
    with trio.fail_after(timeout_s):
        while True:
            for link in (await tb.status())["links"]:
                delivered = link.get(f"{a}->{b}", {}).get("bytes", 0)
                if delivered >= at_least:
                    return int(delivered)
            await trio.sleep(0.05)


def make_payload(tmp: Path, size: int) -> tuple[Path, str]:
    path = tmp / "payload.bin"
    data = os.urandom(size)
    path.write_bytes(data)
    return path, hash_bytes("blake3", data)


async def test_send_then_get_and_a_warm_start(requires_root: None, bed_name: str, tmp_path: Path) -> None:
    payload, digest = make_payload(tmp_path, 6 * MiB + 5)
    async with line3(tmp_path, bed_name) as bed:
        sent = await bed.tb.run("src", bed.send_argv(payload, "--cold", "--path", "depot"), check=False)
        assert sent.returncode == 0, sent.stderr.decode()
        first = json.loads(sent.stdout)
        assert first["path"] == ["src", "depot", "dst"]
        manifest = json.loads((tmp_path / "manifest.json").read_text())
        assert manifest["file_hash"] == digest
        assert manifest["size"] == payload.stat().st_size
        assert len(manifest["blocks"]) == 7
        out = tmp_path / "received.bin"
        got = await bed.tb.run("dst", [sys.executable, "-m", "lnet.client.get", str(tmp_path / "manifest.json"),
                                       "-o", str(out), "--no-progress"], check=False)
        assert got.returncode == 0, got.stderr.decode()
        assert hash_bytes("blake3", out.read_bytes()) == digest
        # The pinned run taught the memory its edges; a warm start takes the remembered path from the start.
        warm = await bed.tb.run("src", bed.send_argv(payload), check=False)
        assert warm.returncode == 0, warm.stderr.decode()
        attempts = json.loads(warm.stdout)["path_attempts"]
        remembered = EdgeMemory.load(tmp_path / "edges.json")
        assert remembered.estimate("src", "depot") is not None
        assert remembered.estimate("depot", "dst") is not None
        assert attempts[0]["path"] == ["src", "depot", "dst"]


async def test_a_depot_killed_mid_transfer(requires_root: None, bed_name: str, tmp_path: Path) -> None:
    payload, digest = make_payload(tmp_path, 24 * MiB)
    async with line3(tmp_path, bed_name) as bed:
        with (tmp_path / "send.log").open("wb") as log:  # read after: a pipe nobody drains would stall it
            sender = await bed.tb.spawn("src", bed.send_argv(payload, "--path", "depot", "--timeout", "5s"),
                                        stdout=subprocess.PIPE, stderr=log)
        # Mid transfer for real: past lnet-send's start-up (its check of the pinned path would otherwise be what
        # fails) and with blocks going through the depot, seen on the emulated link from it to dst.
        forwarded = await link_bytes(bed.tb, "depot", "dst", at_least=2 * MiB, timeout_s=60)
        assert sender.returncode is None, "the transfer ended before the depot could be killed"
        assert forwarded < 20 * MiB, f"{forwarded} bytes already forwarded: the transfer was nearly over"
        bed.depots["depot"].kill()  # kill -9
        output = b""
        assert sender.stdout is not None
        with trio.fail_after(120):
            async for chunk in sender.stdout:
                output += chunk
            await sender.wait()
        assert sender.returncode == 0, (tmp_path / "send.log").read_text()
        result = json.loads(output)
        assert result["resends"] > 0
        manifest = json.loads((tmp_path / "manifest.json").read_text())
        assert manifest["file_hash"] == digest
        out = tmp_path / "received.bin"
        got = await bed.tb.run("dst", [sys.executable, "-m", "lnet.client.get", str(tmp_path / "manifest.json"),
                                       "-o", str(out), "--no-progress"], check=False)
        assert got.returncode == 0, got.stderr.decode()
        assert hash_bytes("blake3", out.read_bytes()) == digest


async def test_a_degraded_link_moves_the_transfer(requires_root: None, bed_name: str, tmp_path: Path) -> None:
    payload, digest = make_payload(tmp_path, 48 * MiB)
    memory = EdgeMemory()  # what an earlier transfer would have left: the depot path is the better one
    now = time.time()  # the memory is in Unix time, as lnet-send's clock
    for (u, v), mbps in {("src", "depot"): 45, ("depot", "dst"): 45, ("src", "dst"): 20}.items():
        memory.observe(u, v, int(mbps * 1e6 / 8 * 5), 5.0, now)
    memory.save(tmp_path / "edges.json")
    async with line3(tmp_path, bed_name, TRIANGLE) as bed:
        with (tmp_path / "send.log").open("wb") as log:
            sender = await bed.tb.spawn("src", bed.send_argv(payload), stdout=subprocess.PIPE, stderr=log)
        await trio.sleep(3)
        await bed.tb.set_link("src", "depot", rate_mbit=4.0, queue_ms=200.0)
        output = b""
        assert sender.stdout is not None
        with trio.fail_after(180):
            async for chunk in sender.stdout:
                output += chunk
            await sender.wait()
        assert sender.returncode == 0, (tmp_path / "send.log").read_text()
        attempts = json.loads(output)["path_attempts"]
        assert attempts[0]["path"] == ["src", "depot", "dst"]
        assert attempts[-1]["path"] == ["src", "dst"], attempts
        assert json.loads((tmp_path / "manifest.json").read_text())["file_hash"] == digest


async def test_lnet_get_resumes_after_an_interruption(requires_root: None, bed_name: str, tmp_path: Path) -> None:
    payload, digest = make_payload(tmp_path, 24 * MiB)
    async with line3(tmp_path, bed_name) as bed:
        sent = await bed.tb.run("src", bed.send_argv(payload, "--path", "depot"), check=False)
        assert sent.returncode == 0, sent.stderr.decode()
        await bed.tb.set_link("src", "depot", rate_mbit=20.0)  # slow the fetch down enough to interrupt it
        out = tmp_path / "received.bin"
        argv = [sys.executable, "-m", "lnet.client.get", str(tmp_path / "manifest.json"), "-o", str(out),
                "--no-progress", "--json", "--parallel", "2"]
        first = await bed.tb.spawn("src", argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await trio.sleep(3)
        assert first.returncode is None, "the fetch ended before it could be interrupted"
        first.send_signal(signal.SIGINT)
        with trio.fail_after(30):
            assert await first.wait() == 130
        assert not out.exists()
        again = await bed.tb.run("src", argv, check=False)
        assert again.returncode == 0, again.stderr.decode()
        assert json.loads(again.stdout)["resumed_blocks"] > 0
        assert hash_bytes("blake3", out.read_bytes()) == digest
