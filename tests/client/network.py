"""An emulated network in process: depots as ASGI apps, links as FIFO queues with a rate, on trio's clock.

Every request carries the name of the vertex that sends it; a bulk request to a depot waits its turn on the
link from sender to depot and then the bytes' time on it (``bytes / rate``), so parallel copies share the link
as on a real one; small control messages only pay the latency, as on their own connections. A link may also cap
each request (``set_stream_rate``: a TCP stream held back by its window), so that parallel copies add up. Under
``MockClock(autojump_threshold=0)`` a transfer of many simulated seconds takes milliseconds, and the relay's
measurements, windows and the scheduler's decisions see a real-looking network.
A dead vertex refuses every connection to and from it, like a process killed with -9.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

from lnet.client.wire.depot_client import DepotClient
from lnet.depot import Depot, DepotConfig

MiB = 1024 * 1024


class Network:
    def __init__(self, default_rate: float = 10 * MiB, latency_s: float = 0.01) -> None:
        self.rates: dict[tuple[str, str], float] = {}
        self.stream_rates: dict[tuple[str, str], float] = {}
        """Per-connection caps (a window over a round trip): each request at most this fast, many side by side up to
        the link's rate."""
        self.default_rate = default_rate
        self.latency_s = latency_s
        self.dead: set[str] = set()
        self.apps: dict[str, httpx.ASGITransport] = {}
        self._free_at: dict[tuple[str, str], float] = {}
        self.bytes_sent: dict[tuple[str, str], int] = {}

    def url(self, name: str) -> str:
        return f"http://{name}.test:6714"

    def set_rate(self, a: str, b: str, rate: float, *, both: bool = True) -> None:
        self.rates[(a, b)] = rate
        if both:
            self.rates[(b, a)] = rate

    def set_stream_rate(self, a: str, b: str, rate: float) -> None:
        """Each request from ``a`` to ``b`` at most ``rate``, as a TCP stream held back by its window."""
        self.stream_rates[(a, b)] = rate

    def transport(self, sender: str) -> httpx.AsyncBaseTransport:
        return _Link(self, sender)

    async def carry(self, sender: str, receiver: str, nbytes: int) -> None:
        if sender in self.dead or receiver in self.dead:
            raise httpx.ConnectError(f"{receiver} is down")
        edge = (sender, receiver)
        self.bytes_sent[edge] = self.bytes_sent.get(edge, 0) + nbytes
        if nbytes < 64 * 1024:  # control messages: their own connection, not queued behind bulk data
            await trio.sleep(self.latency_s)
            return
        rate = self.rates.get(edge, self.default_rate)
        now = trio.current_time()
        start = max(now, self._free_at.get(edge, now))
        self._free_at[edge] = start + nbytes / rate
        done = self._free_at[edge]
        if edge in self.stream_rates:
            # The link's bytes are booked in turn; one stream can take no more than its own cap of them.
            done = max(done, now + nbytes / self.stream_rates[edge])
        await trio.sleep_until(done + self.latency_s)
        if sender in self.dead or receiver in self.dead:
            raise httpx.ReadError(f"{receiver} went down")


class _Link(httpx.AsyncBaseTransport):
    def __init__(self, network: Network, sender: str) -> None:
        self.network, self.sender = network, sender

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        receiver = request.url.host.removesuffix(".test")
        app = self.network.apps.get(receiver)
        if app is None:
            raise httpx.ConnectError(f"no host {receiver}", request=request)
        upload = int(request.headers.get("content-length", "0"))
        await self.network.carry(self.sender, receiver, upload)
        response = await app.handle_async_request(request)
        body = await response.aread()
        if request.method == "GET" and len(body) > 4096:
            await self.network.carry(receiver, self.sender, len(body))
        return httpx.Response(response.status_code, headers=response.headers, stream=httpx.ByteStream(body),
                              request=request)


async def inline(function: Any, *args: Any) -> Any:
    """Run CPU work (reads, hashes) in the event loop: a worker thread would let MockClock jump meanwhile."""
    return function(*args)


@asynccontextmanager
async def depots(
    network: Network, names: list[str], tmp: Path, **config: Any
) -> AsyncIterator[dict[str, DepotClient]]:
    """Depots named ``names`` on ``network``; yields the client's ``DepotClient`` for each (sender "here")."""
    async with AsyncExitStack() as stack:
        clients: dict[str, DepotClient] = {}
        for name in names:
            values: dict[str, Any] = {"name": name, "listen": "127.0.0.1:0", "data_dir": tmp / name,
                                      "capacity": 256 * MiB, "max_allocation": 16 * MiB}
            values.update(config)
            depot = Depot(DepotConfig(**values), copy_transport=network.transport(name), offload=inline)
            await stack.enter_async_context(depot)
            network.apps[name] = httpx.ASGITransport(app=depot.app)
            clients[name] = await stack.enter_async_context(
                DepotClient(network.url(name), transport=network.transport("here"))
            )
        yield clients
