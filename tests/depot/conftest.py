"""Fixtures for depot tests: in-process depots reached through httpx.ASGITransport, with the one DepotClient."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from lnet.client.wire.depot_client import DepotClient
from lnet.depot import Depot, DepotConfig
from tests.client.network import inline

MiB = 1024 * 1024


class Routes(httpx.AsyncBaseTransport):
    """Sends each request to the in-process depot whose base URL it names: depot-to-depot copies in process.

    It watches the pushes (PUTs) as a target depot's network would: when each began, to which depot, how many
    bytes, and how many ran at once; ``put_delay`` makes each take that long on the (trio) clock."""

    def __init__(self) -> None:
        self.apps: dict[str, httpx.ASGITransport] = {}
        self.put_delay = 0.0
        self.delays: dict[str, float] = {}  # base URL: seconds every other request to it takes on the trio clock
        self.puts: list[tuple[float, str, int]] = []  # (trio time, base URL, Content-Length)
        self.puts_running: Counter[str] = Counter()
        self.most_puts_running: Counter[str] = Counter()

    def add(self, base_url: str, depot: Depot) -> None:
        self.apps[base_url] = httpx.ASGITransport(app=depot.app)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        base = f"{request.url.scheme}://{request.url.netloc.decode()}"
        transport = self.apps.get(base)
        if transport is None:
            raise httpx.ConnectError(f"no depot at {base}", request=request)
        if request.method != "PUT":
            await trio.sleep(self.delays.get(base, 0.0))
            return await transport.handle_async_request(request)
        self.puts.append((trio.current_time(), base, int(request.headers["content-length"])))
        self.puts_running[base] += 1
        self.most_puts_running[base] = max(self.most_puts_running[base], self.puts_running[base])
        try:
            await trio.sleep(self.put_delay)
            return await transport.handle_async_request(request)
        finally:
            self.puts_running[base] -= 1


MakeDepot = Callable[..., Any]


@pytest.fixture
def config_for(tmp_path: Path) -> Callable[..., DepotConfig]:
    def make(name: str = "d1", **overrides: Any) -> DepotConfig:
        values: dict[str, Any] = {
            "name": name,
            "listen": "127.0.0.1:0",
            "capacity": 64 * MiB,
            "max_allocation": 16 * MiB,
            "max_duration": 3600.0,
            "data_dir": tmp_path / name,
        }
        values.update(overrides)
        return DepotConfig(**values)

    return make


@pytest.fixture
def routes() -> Routes:
    return Routes()


@pytest.fixture
def open_depot(config_for: Callable[..., DepotConfig], routes: Routes) -> MakeDepot:
    """``async with open_depot("d1", capacity=...) as (depot, client):`` an in-process depot and its client."""

    @asynccontextmanager
    async def make(name: str = "d1", token: str | None = None, **overrides: Any) -> AsyncIterator[
        tuple[Depot, DepotClient]
    ]:
        config = config_for(name, **overrides)
        base_url = f"http://{name}.test:6714"
        # worker-thread work (prefaulting, hashing) inline: trio's mock clocks jump while the loop waits for a
        # thread, which would expire the allocations of tests that keep time
        async with Depot(config, copy_transport=routes, offload=inline) as depot:
            routes.add(base_url, depot)
            async with DepotClient(base_url, token=token, transport=httpx.ASGITransport(app=depot.app)) as client:
                yield depot, client

    return make
