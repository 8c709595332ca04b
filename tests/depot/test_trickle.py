"""The black-box probe that found a depot could be taken over by slow clients, over real sockets: 520 GETs of a
64 MiB allocation each taking about 1 KiB every 5 s (receive buffer 4096), and uploads sending a byte every 2 s,
from other addresses (127.0.0.2, 127.0.0.3), while a normal client on 127.0.0.1 allocates, writes and reads.

The depot runs as its own process with its defaults but for a short ``body_grace`` (2 s instead of 10 s), so that
the test takes seconds. Before fair shares every place was taken within a second and the normal client got
``503 busy`` until the tricklers stopped (only the 60 s wait bound cut them, and they came back)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import trio

from lnet.client.wire.depot_client import DepotClient

from .processes import depot_process
from .tricklers import Tally, reader, writer

MiB = 1024 * 1024
READERS = 520
WRITERS = 200  # half with a 1 MiB body (the direct path), half with 1000 bytes (through starlette)
ROUNDS_S = 12.0


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
                nursery.start_soon(reader, address, big.read, stop, readers)
            for i, target in enumerate(targets):
                nursery.start_soon(writer, address, target.write, MiB if i % 2 else 1000, stop, writers)
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
