"""Depots register themselves in a real etcd on loopback: listed with their figures, gone at once when stopped,
gone within the TTL when killed, back after the directory returns; never kept from serving by it."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from lnet.depot import DepotConfig, serve
from lnet.directory.entries import DEFAULT_PREFIX
from lnet.directory.etcd import EtcdClient, EtcdSettings
from lnet.directory.listing import Listing, list_depots

from ..depot.processes import depot_process
from .etcd_server import EtcdServer

pytestmark = pytest.mark.slow

MiB = 1024 * 1024


def _config(tmp_path: Path, name: str, endpoint: str, **overrides: Any) -> DepotConfig:
    values: dict[str, Any] = {
        "name": name, "listen": "127.0.0.1:0", "capacity": 64 * MiB, "max_allocation": 8 * MiB,
        "data_dir": tmp_path / name, "directory": (endpoint,), "directory_ttl": 3.0, "directory_timeout": 2.0,
    }
    return DepotConfig(**{**values, **overrides})


async def _listing(endpoint: str) -> Listing:
    async with EtcdClient(EtcdSettings((endpoint,), timeout_s=2.0)) as client:
        return await list_depots(client, DEFAULT_PREFIX)


async def _until(predicate: Any, endpoint: str, within_s: float) -> Listing:
    """The first listing ``predicate`` accepts, polled every 0.1 s; fails after ``within_s``."""
    with trio.fail_after(within_s):
        while True:
            listing = await _listing(endpoint)
            if predicate(listing):
                return listing
            await trio.sleep(0.1)


@asynccontextmanager
async def _depot(config: DepotConfig) -> AsyncIterator[tuple[str, trio.Event]]:
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve, config, shutdown_trigger=stop.wait))
        yield url, stop
        stop.set()


async def _status(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        answer = await http.get(url + "/v1/status", headers={"Accept": "application/json"})
        result: dict[str, Any] = answer.json()
        return result


async def test_a_depot_registers_and_leaves_at_once_when_stopped(etcd: EtcdServer, tmp_path: Path) -> None:
    config = _config(tmp_path, "atl", etcd.url)
    async with _depot(config) as (url, stop):
        listing = await _until(lambda found: "atl" in found.depots, etcd.url, 5)
        record = listing.depots["atl"]
        assert record.url == url
        assert record.capacity == 64 * MiB
        assert record.free == 64 * MiB
        assert record.max_allocation == 8 * MiB
        assert record.token_required_for == ()
        status = await _status(url)
        assert status["directory"]["state"] == "registered"
        assert status["directory"]["key"] == "/lnet/depots/atl"
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(url + "/metrics")).text
        assert "lnet_depot_directory_registered 1.0" in metrics
        stop.set()
    listing = await _listing(etcd.url)  # revoked on the way out: no wait for the TTL
    assert "atl" not in listing.depots


async def test_a_killed_depot_vanishes_within_its_ttl(etcd: EtcdServer, tmp_path: Path) -> None:
    async with depot_process("--name", "kc", "--directory", etcd.url, "--directory-ttl", "3s",
                             "--data-dir", str(tmp_path / "kc")) as depot:
        await _until(lambda found: "kc" in found.depots, etcd.url, 10)
        depot.process.kill()
        await depot.process.wait()
        killed = trio.current_time()
        await _until(lambda found: "kc" not in found.depots, etcd.url, 3 + 2)
        assert trio.current_time() - killed <= 3 + 2


async def test_a_depot_registers_again_after_the_directory_restarts_empty(
    etcd: EtcdServer, tmp_path: Path
) -> None:
    async with _depot(_config(tmp_path, "chi", etcd.url)) as (url, _):
        await _until(lambda found: "chi" in found.depots, etcd.url, 5)
        etcd.stop()
        shutil.rmtree(etcd.data_dir)  # a new cluster: the lease and the entry are gone with the old one
        status = await _status(url)  # the depot serves on meanwhile
        assert status["name"] == "chi"
        await trio.sleep(1)
        etcd.start()
        await _until(lambda found: "chi" in found.depots, etcd.url, 10)
        assert (await _status(url))["directory"]["state"] == "registered"


async def test_a_depot_started_while_the_directory_is_down_serves_and_registers_when_it_returns(
    etcd: EtcdServer, tmp_path: Path
) -> None:
    etcd.stop()
    async with _depot(_config(tmp_path, "den", etcd.url)) as (url, _):
        status = await _status(url)  # it serves at once
        assert status["name"] == "den"
        await trio.sleep(1.5)
        status = await _status(url)
        assert status["directory"]["state"] == "retrying"
        assert status["directory"]["failures"] >= 1
        etcd.start()
        listing = await _until(lambda found: "den" in found.depots, etcd.url, 10)
        assert listing.depots["den"].url == url


async def test_a_ca_file_that_cannot_be_read_is_said_and_the_depot_serves(tmp_path: Path) -> None:
    config = _config(tmp_path, "ca", "https://127.0.0.1:9", directory_cafile=tmp_path / "missing.pem")
    async with _depot(config) as (url, _):
        status = await _status(url)
    assert status["directory"]["state"] == "off"
    assert "missing.pem" in status["directory"]["last_error"] or "No such file" in status["directory"]["last_error"]


async def test_a_depot_is_registered_again_when_the_directory_comes_back_with_its_data(
    etcd: EtcdServer, tmp_path: Path
) -> None:
    async with _depot(_config(tmp_path, "sea", etcd.url)) as (url, _):
        await _until(lambda found: "sea" in found.depots, etcd.url, 5)
        etcd.stop()  # the same cluster comes back: its lease was kept, and is renewed again
        await trio.sleep(2.5)
        assert (await _status(url))["directory"]["state"] == "retrying"
        etcd.start()
        with trio.fail_after(10):
            while True:
                status = (await _status(url))["directory"]
                if status["state"] == "registered":
                    break
                await trio.sleep(0.1)
        assert status["failures"] >= 1
        assert "sea" in (await _listing(etcd.url)).depots


async def test_depots_in_a_directory_time_their_round_trips_to_each_other(etcd: EtcdServer, tmp_path: Path) -> None:
    # no weather peers configured: each takes the others from the directory (lnet.depot.directory_link.follow_peers)
    async with (
        _depot(_config(tmp_path, "atl", etcd.url, rtt_interval=0.5)) as (atl, _),
        _depot(_config(tmp_path, "kc", etcd.url, rtt_interval=0.5)) as (kc, _),
    ):
        with trio.fail_after(10):
            while True:
                found = {here: {e["to"]: e for e in (await _status(here))["round_trips"]} for here in (atl, kc)}
                if all(entry.get(there, {}).get("rtt_ms") for here, entry in found.items()
                       for there in (atl, kc) if there != here):
                    break
                await trio.sleep(0.2)
        for here in (atl, kc):  # loopback: well under a second, and never itself
            assert here not in found[here]
            assert all(0 < e["rtt_ms"] < 1000 for e in found[here].values())
