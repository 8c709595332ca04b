"""Measuring a running testbed with plain TCP and UDP (the programs in `probe.py`): goodput of one TCP stream,
round-trip time, one-way loss, and how streams running at once share the links. Used by the accuracy tests, the
abilene check and benchmarks."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import trio

from .netns import TestbedError
from .testbed import Testbed

__all__ = ["LossResult", "RttResult", "one_way_loss", "rtt", "tcp_shares", "tcp_throughput"]

_PROBE = [sys.executable, "-m", "lnet.testbed.probe"]
PROBE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class RttResult:
    sent: int
    received: int
    median_ms: float
    min_ms: float
    max_ms: float
    p95_ms: float = 0.0
    """The 95th percentile: the bulk's upper bound, apart from the odd sample a busy machine delays."""


@dataclass(frozen=True)
class LossResult:
    sent: int
    received: int

    @property
    def loss(self) -> float:
        return 1.0 - self.received / self.sent


class _Lines:
    def __init__(self, proc: trio.Process) -> None:
        assert proc.stdout is not None
        self.stream = proc.stdout
        self.buffer = b""

    async def next(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                raise TestbedError("a probe exited without reporting (see its stderr)")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        result: dict[str, Any] = json.loads(line)
        return result


async def _server(tb: Testbed, host: str, argv: list[str]) -> tuple[trio.Process, _Lines]:
    proc = await tb.spawn(host, [*_PROBE, *argv], stdout=subprocess.PIPE)
    lines = _Lines(proc)
    await lines.next()  # {"listening": port}
    return proc, lines


async def tcp_throughput(tb: Testbed, src: str, dst: str, *, seconds: float = 6.0, skip_s: float = 2.0,
                         port: int = 5201) -> float:
    """Goodput in Mbit/s of one TCP stream from `src` to `dst`, over the last `seconds - skip_s` seconds."""
    with trio.fail_after(PROBE_TIMEOUT_S):
        proc, lines = await _server(tb, dst, ["tcp-sink", str(port), str(skip_s)])
        await tb.run(src, [*_PROBE, "tcp-send", tb.address(dst), str(port), str(seconds)])
        result = await lines.next()
        await proc.wait()
    return float(result["mbit_s"])


async def tcp_shares(tb: Testbed, flows: list[tuple[str, str]], *, streams: int = 1, seconds: float = 20.0,
                     skip_s: float = 4.0, first_port: int = 5301) -> list[float]:
    """Goodput in Mbit/s of each flow (src, dst), all running at once with ``streams`` TCP streams each, over
    the last ``seconds - skip_s`` seconds: what the links give streams that meet on them."""
    with trio.fail_after(PROBE_TIMEOUT_S + seconds):
        sinks: list[tuple[int, trio.Process, _Lines]] = []
        port = first_port
        for i, (_, dst) in enumerate(flows):
            for _ in range(streams):
                proc, lines = await _server(tb, dst, ["tcp-sink", str(port), str(skip_s)])
                sinks.append((i, proc, lines))
                port += 1
        async with trio.open_nursery() as nursery:
            port = first_port
            for src, dst in flows:
                for _ in range(streams):
                    argv = [*_PROBE, "tcp-send", tb.address(dst), str(port), str(seconds)]
                    nursery.start_soon(tb.run, src, argv)
                    port += 1
        rates = [0.0] * len(flows)
        for i, proc, lines in sinks:
            rates[i] += float((await lines.next())["mbit_s"])
            await proc.wait()
    return rates


async def rtt(tb: Testbed, src: str, dst: str, *, count: int = 100, interval_s: float = 0.02,
              port: int = 5202) -> RttResult:
    """Round-trip times from `src` to `dst` of small UDP datagrams on an otherwise idle path."""
    with trio.fail_after(PROBE_TIMEOUT_S):
        proc, _ = await _server(tb, dst, ["udp-echo", str(port)])
        done = await tb.run(src, [*_PROBE, "udp-ping", tb.address(dst), str(port), str(count), str(interval_s)])
        with trio.move_on_after(5):
            await proc.wait()
    return RttResult(**json.loads(done.stdout.splitlines()[-1]))


async def one_way_loss(tb: Testbed, src: str, dst: str, *, count: int = 4000, interval_s: float = 0.001,
                       port: int = 5203) -> LossResult:
    """Send `count` small UDP datagrams from `src` to `dst` and count how many arrive."""
    with trio.fail_after(PROBE_TIMEOUT_S):
        proc, lines = await _server(tb, dst, ["udp-count", str(port), "2.0"])
        await tb.run(src, [*_PROBE, "udp-blast", tb.address(dst), str(port), str(count), str(interval_s)])
        result = await lines.next()
        await proc.wait()
    return LossResult(sent=count, received=int(result["received"]))
