"""The black-box probe that found a depot could be taken over by slow clients, over real sockets: 520 GETs of a
64 MiB allocation each taking about 1 KiB every 5 s (receive buffer 4096), and uploads sending a byte every 2 s,
from other addresses (127.0.0.2, 127.0.0.3), while a normal client on 127.0.0.1 allocates, writes and reads.

The depot runs as its own process with its defaults but for a short ``body_grace`` (2 s instead of 10 s), so that
the test takes seconds. Before fair shares every place was taken within a second and the normal client got
``503 busy`` until the tricklers stopped (only the 60 s wait bound cut them, and they came back)."""

from __future__ import annotations

import re
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import trio

from lnet.client.wire.depot_client import DepotClient

from .processes import depot_process

MiB = 1024 * 1024
READERS = 520
WRITERS = 200  # half with a 1 MiB body (the direct path), half with 1000 bytes (through starlette)
ROUNDS_S = 12.0


@dataclass
class Tally:
    answered: int = 0  # requests the depot took (200, or a write's body accepted for a while)
    refused: int = 0  # 429 or 503 at once
    cut: int = 0  # connections the depot ended (a write answered 408, a reset)


async def _connect(address: tuple[str, int], source: str) -> trio.socket.SocketType:
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.bind((source, 0))
    await sock.connect(address)
    return sock


async def _reader(address: tuple[str, int], read: str, stop: trio.Event, tally: Tally) -> None:
    """A GET that takes 1 KiB every 5 s; refused, it comes back after a second."""
    while not stop.is_set():
        sock = await _connect(address, "127.0.0.2")
        try:
            await sock.send(f"GET /v1/data/{read} HTTP/1.1\r\nHost: d\r\n\r\n".encode())
            head = await sock.recv(1024)
            if not head.startswith(b"HTTP/1.1 200"):
                tally.refused += 1
                await trio.sleep(1)
                continue
            tally.answered += 1
            while not stop.is_set():
                with trio.move_on_after(5):
                    await stop.wait()
                if not await sock.recv(1024):
                    tally.cut += 1
                    break
        except OSError:
            tally.cut += 1
        finally:
            sock.close()


async def _writer(address: tuple[str, int], write: str, length: int, stop: trio.Event, tally: Tally) -> None:
    """A PUT whose body comes a byte every 2 s; answered or cut, it comes back after a second."""
    while not stop.is_set():
        sock = await _connect(address, "127.0.0.3")
        try:
            await sock.send(f"PUT /v1/data/{write}?offset=0 HTTP/1.1\r\nHost: d\r\nContent-Length: {length}\r\n\r\n"
                            .encode())
            answer = b""
            while not stop.is_set() and not answer:
                with trio.move_on_after(2):
                    answer = await sock.recv(1024)
                    if not answer:
                        tally.cut += 1
                        break
                if not answer:
                    await sock.send(b"w")
            if answer.startswith((b"HTTP/1.1 429", b"HTTP/1.1 503")):
                tally.refused += 1
            elif answer:
                tally.answered += 1
                tally.cut += answer.startswith(b"HTTP/1.1 408")
        except OSError:
            tally.cut += 1
        finally:
            sock.close()
        await trio.sleep(1)


async def _normal_round(client: DepotClient, payload: bytes) -> float:
    started = trio.current_time()
    alloc = await client.allocate_one(len(payload), 60)
    await client.write(alloc.write, payload)
    assert await client.read(alloc.read) == payload
    await client.free(alloc.manage)
    return trio.current_time() - started


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sources 127.0.0.2 and .3 are Linux's loopback")
async def test_trickling_clients_cannot_take_the_depot_over(tmp_path: Path) -> None:
    async with (
        depot_process("--data-dir", str(tmp_path / "d"), "--capacity", "512MiB", "--max-allocation", "64MiB",
                      "--body-grace", "2s") as depot,
        DepotClient(depot.url, timeout=10) as client,
    ):
        parts = urlsplit(depot.url)
        assert parts.hostname is not None
        assert parts.port is not None
        address = (parts.hostname, parts.port)
        big = await client.allocate_one(64 * MiB, 600)
        await client.write(big.write, bytes(64 * MiB))
        targets = [await client.allocate_one(MiB, 600) for _ in range(WRITERS)]
        payload = bytes(range(256)) * 4096  # 1 MiB
        usual = max([await _normal_round(client, payload) for _ in range(5)])

        readers, writers = Tally(), Tally()
        rounds: list[float] = []
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            for _ in range(READERS):
                nursery.start_soon(_reader, address, big.read, stop, readers)
            for i, target in enumerate(targets):
                nursery.start_soon(_writer, address, target.write, MiB if i % 2 else 1000, stop, writers)
            await trio.sleep(3)  # every trickler has asked by now; before fair shares every place was taken
            async with httpx.AsyncClient(base_url=depot.url) as plain:
                ended = trio.current_time() + ROUNDS_S
                while trio.current_time() < ended:
                    rounds.append(await _normal_round(client, payload))
                    assert (await plain.get("/healthz")).status_code == 200
                ready = await plain.get("/readyz")
                metrics = (await plain.get("/metrics")).text
            stop.set()

        assert len(rounds) >= 10
        # its usual time, give or take a machine shared with the tricklers and other tests
        assert max(rounds) < max(2.0, 20 * usual), (usual, sorted(rounds)[-5:])
        assert ready.status_code == 200  # the tricklers never filled the depot
        assert _metric(metrics, "lnet_depot_client_refusals_total") > 0  # each trickling address got its share
        assert _metric(metrics, 'lnet_depot_slow_bodies_cut_total{direction="out"}') > 0
        assert _metric(metrics, 'lnet_depot_slow_bodies_cut_total{direction="in"}') > 0
        assert _metric(metrics, 'lnet_depot_requests_total{operation="allocate",status="503"}') == 0
        # cut, the readers' places went to others of them: more readers were answered than one share holds
        assert readers.answered > 128
        assert writers.cut > 0
