"""Depots on a testbed, for end-to-end tests of lnet-send on topologies of their own: a depot on every host but
the source (and any routers), a depots file whose ``here`` is the source, lnet-send's and lnet-get's command
lines, and the emulated links' byte counters (what really crossed each link, whatever lnet-send reports).

Root only, like every testbed test: callers take the ``requires_root`` fixture.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import trio

from lnet.client.formats.manifest import block_hasher, hash_bytes
from lnet.testbed import Testbed, Topology

PORT = 6714
STARTUP_TIMEOUT_S = 30.0


@dataclass
class DepotBed:
    tb: Testbed
    tmp: Path
    source: str
    depots_file: Path
    depots: dict[str, trio.Process]

    def send_argv(self, payload: Path, dest: str, memory: Path, *extra: str) -> list[str]:
        """lnet-send with 1 MiB blocks, its --json summary on stdout, its manifest in tmp/manifest.json."""
        return [sys.executable, "-m", "lnet.client.send", str(payload), "--to", dest, "--depots",
                str(self.depots_file), "--memory", str(memory), "--block-size", "1MiB", "--no-progress",
                "--manifest", str(self.tmp / "manifest.json"), "--json", *extra]

    async def fetch(self, dest: str) -> str:
        """lnet-get, run at ``dest``, of what tmp/manifest.json names: the blake3 (lnet-send's default hash) of
        the file it rebuilt."""
        out = self.tmp / "received.bin"
        got = await self.tb.run(dest, [sys.executable, "-m", "lnet.client.get", str(self.tmp / "manifest.json"),
                                       "-o", str(out), "--no-progress"], check=False)
        assert got.returncode == 0, got.stderr.decode()
        return hash_of(out)

    async def link_bytes(self) -> dict[tuple[str, str], int]:
        """Bytes each direction of each emulated link has delivered so far (IP packets, headers included)."""
        counters: dict[tuple[str, str], int] = {}
        for link in (await self.tb.status())["links"]:
            for key, direction in link.items():
                if isinstance(direction, dict) and "->" in key and "bytes" in direction:
                    a, b = key.split("->")
                    counters[(a, b)] = int(direction["bytes"])
        return counters

    async def wait_for_link(self, a: str, b: str, *, at_least: int, timeout_s: float) -> int:
        """Wait until the link from ``a`` to ``b`` has delivered ``at_least`` bytes; returns how many."""
        with trio.fail_after(timeout_s):
            while True:
                delivered = (await self.link_bytes()).get((a, b), 0)
                if delivered >= at_least:
                    return delivered
                await trio.sleep(0.05)


@asynccontextmanager
async def depots_on(topology: Topology | Path, name: str, tmp: Path, source: str,
                    routers: Sequence[str] = ()) -> AsyncIterator[DepotBed]:
    """The testbed up, with a fresh depot (empty data directory, so no links log: no weather) on every host but
    ``source`` and ``routers``; everything is taken down on exit."""
    async with Testbed(topology, name=name) as tb:
        processes: dict[str, trio.Process] = {}
        lines = [f'here = "{source}"']
        for host in tb.hosts:
            if host == source or host in routers:
                continue
            log = tmp / f"depot-{host}.log"
            argv = [sys.executable, "-m", "lnet.depot.cli", "--listen", f"{tb.address(host)}:{PORT}", "--name",
                    host, "--data-dir", str(tmp / "depots" / host), "--log-level", "warning"]
            with log.open("wb") as err:  # a file, not a pipe: nobody has to drain it
                processes[host] = await tb.spawn(host, argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                 stderr=err)
            lines += [f"[depots.{host}]", f'url = "http://{tb.address(host)}:{PORT}"']
        with trio.fail_after(STARTUP_TIMEOUT_S):
            for host, process in processes.items():
                log = tmp / f"depot-{host}.log"
                while b"serving on" not in log.read_bytes():
                    assert process.returncode is None, f"the depot on {host} exited: {log.read_text()}"
                    await trio.sleep(0.05)
        depots_file = tmp / "depots.toml"
        depots_file.write_text("\n".join(lines) + "\n")
        yield DepotBed(tb, tmp, source, depots_file, processes)


def make_payload(tmp: Path, size: int) -> tuple[Path, str]:
    path = tmp / "payload.bin"
    data = os.urandom(size)
    path.write_bytes(data)
    return path, hash_bytes("blake3", data)


def keep(path: Path, data: bytes) -> None:
    """Keep what a test saw (a summary) beside its other files, for whoever reads a failure."""
    path.write_bytes(data)


def tail(log: Path, chars: int = 3000) -> str:
    """The end of a log file, for a failure's message."""
    return log.read_text(errors="replace")[-chars:]


def hash_of(path: Path) -> str:
    digest = block_hasher("blake3")
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
