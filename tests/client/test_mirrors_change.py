"""``lnet-get URL ...`` under change, on the emulated network (autojump clock): a replica that slows to a quarter
halfway, one that stops answering halfway, one that comes back. The download adapts and ends with identical
bytes."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import trio

from lnet.client.engines.chunks import PlanConfig
from lnet.client.fetching.mirrors import MirrorResult, fetch_mirrors

from .http_replicas import Connect, Replica, emulated

MiB = 1024 * 1024
DATA = os.urandom(24 * MiB + 4321)
SHA = hashlib.sha256(DATA).hexdigest()
TIMEOUT_S = 2.0
CONFIG = PlanConfig(initial_chunk=256 * 1024, min_chunk=64 * 1024, stall_s=TIMEOUT_S, backoff_s=0.2,
                    round_min_s=0.5)


async def at(when: float, action: Callable[[], None]) -> None:
    await trio.sleep_until(when)
    action()


async def download(servers: list[Replica], connect: Connect, out: Path,
                   changes: list[tuple[float, Callable[[], None]]]) -> MirrorResult:
    """The download, with each change made ``(seconds after its start, action)``."""
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        for after, action in changes:
            nursery.start_soon(at, start + after, action)
        result = await fetch_mirrors([s.url for s in servers], out, config=CONFIG, timeout_s=TIMEOUT_S, sha256=SHA,
                                     connect=connect)
        nursery.cancel_scope.cancel()
    return result


async def test_a_replica_slowing_to_a_quarter_halfway(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    out = tmp_path / "file.bin"
    rates = [4e6, 3e6, 2e6]
    half = len(DATA) / sum(rates) / 2
    servers = [Replica(DATA, rate=rate) for rate in rates]

    def slow_down() -> None:
        servers[0].rate = rates[0] / 4

    async with emulated(*servers) as (_, connect):
        result = await download(servers, connect, out, [(half, slow_down)])
    assert out.read_bytes() == DATA
    best = half + (len(DATA) - half * sum(rates)) / (rates[0] / 4 + sum(rates[1:]))
    assert result.seconds <= best * 1.25  # had it kept its share, it would hold the others up by far more
    assert [r.state for r in result.replicas] == ["ok"] * 3


async def test_a_replica_that_stops_answering_halfway(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    out = tmp_path / "file.bin"
    rates = [4e6, 3e6, 2e6]
    half = len(DATA) / sum(rates) / 2
    servers = [Replica(DATA, rate=rate) for rate in rates]

    def stop_answering() -> None:
        servers[1].stall_after = servers[1].sent

    async with emulated(*servers) as (_, connect):
        result = await download(servers, connect, out, [(half, stop_answering)])
    assert out.read_bytes() == DATA
    silent = result.replicas[1]
    assert "no byte" in silent.reason  # the configured timeout ended its wait
    best = half + (len(DATA) - half * sum(rates)) / (rates[0] + rates[2])
    assert result.seconds <= best + TIMEOUT_S + 0.5  # what it held went to the others within the timeout
    assert sum(r.bytes for r in result.replicas) == len(DATA)


async def test_a_replica_that_comes_back(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    out = tmp_path / "file.bin"
    rates = [2e6, 2e6, 2e6]
    servers = [Replica(DATA, rate=rate) for rate in rates]
    sent_when_back: list[int] = []

    def stop_answering() -> None:
        servers[1].stall_after = servers[1].sent

    def come_back() -> None:
        servers[1].stall_after = None
        sent_when_back.append(servers[1].sent)

    async with emulated(*servers) as (_, connect):
        result = await download(servers, connect, out, [(1.0, stop_answering), (3.0, come_back)])
    assert out.read_bytes() == DATA
    back = result.replicas[1]
    assert back.state == "ok"
    assert servers[1].sent - sent_when_back[0] >= 1 * MiB  # used again once it answered
    assert result.seconds <= len(DATA) / sum(rates) + 2.0 + TIMEOUT_S
