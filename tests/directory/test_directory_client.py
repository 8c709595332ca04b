"""Clients find depots in a real etcd on loopback: lnet-send and lnet depots with a depots file that names only
the directory, the cached list when etcd is down (and a clear error with none), a hostile entry skipped, and the
watch that tells a transfer of depots joining and leaving."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
import trio

from lnet.client.commands import cli, get, send
from lnet.client.exits import ExitCode
from lnet.client.sending.membership import follow_directory
from lnet.client.sending.relay import Relay
from lnet.client.wire.depot_client import DepotClient
from lnet.depot import DepotConfig, serve
from lnet.directory.entries import DEFAULT_PREFIX
from lnet.directory.etcd import EtcdClient, EtcdSettings
from lnet.directory.listing import list_depots
from lnet.scheduler import EdgeMemory, PathScheduler

from ..client.loopback import loopback_depots
from .etcd_server import EtcdServer

pytestmark = pytest.mark.slow
MiB = 1024 * 1024


def _listed(endpoint: str, names: set[str], within_s: float = 10) -> None:
    async def poll() -> None:
        async with EtcdClient(EtcdSettings((endpoint,), timeout_s=2)) as client:
            with trio.fail_after(within_s):
                while True:
                    if names <= set((await list_depots(client, DEFAULT_PREFIX)).depots):
                        return
                    await trio.sleep(0.1)

    trio.run(poll)


async def _until(condition: Callable[[], bool]) -> None:
    while True:
        if condition():
            return
        await trio.sleep(0.05)


def _put(endpoint: str, key: str, value: bytes) -> None:
    async def put() -> None:
        async with EtcdClient(EtcdSettings((endpoint,), timeout_s=2)) as client:
            await client.put(key.encode(), value)

    trio.run(put)


def test_lnet_send_finds_its_depots_in_the_directory_and_falls_back_to_its_list(
    etcd: EtcdServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    memory = state / "edges.json"
    depots = tmp_path / "depots.toml"
    depots.write_text(f'here = "me"\ndirectory = "{etcd.url}"\n')  # names no depot: the directory does
    payload = tmp_path / "payload.bin"
    payload.write_bytes(os.urandom(3 * MiB + 5))
    with loopback_depots(["d1", "d2"], tmp_path, "--directory", etcd.url, "--directory-ttl", "5s"):
        _listed(etcd.url, {"d1", "d2"})
        _put(etcd.url, "/lnet/depots/evil", b'{"kind": "lnet-depot/1", "name": "evil", "url": "file:///etc"}')
        manifest = tmp_path / "m.json"
        argv = [str(payload), "--to", "d2", "--depots", str(depots), "--memory", str(memory), "--block-size", "1MiB",
                "--manifest", str(manifest), "--json", "--no-progress"]
        assert send.main(argv) == ExitCode.OK
        captured = capsys.readouterr()
        assert json.loads(captured.out)["path"] == ["me", "d2"] or "d2" in captured.out
        assert "directory entry 'evil'" in captured.err  # a hostile entry: skipped with a warning, no harm done
        cache = list(state.glob("directory-*.json"))
        assert len(cache) == 1
        assert cache[0].stat().st_mode & 0o777 == 0o600

        assert cli.main(["depots", "--depots", str(depots), "--json"]) == ExitCode.OK
        listed = json.loads(capsys.readouterr().out)
        assert {d["name"]: d["state"] for d in listed["depots"]} == {"d1": "registered", "d2": "registered"}
        assert listed["directory"]["registered"] == 2

        etcd.stop()  # the directory goes down: the last list is used, and said so in one line
        argv[argv.index(str(manifest))] = str(tmp_path / "m2.json")
        assert send.main(argv) == ExitCode.OK
        err = capsys.readouterr().err
        assert "the directory cannot be used" in err
        assert "using the list it gave" in err
        out = tmp_path / "out.bin"
        assert get.main([str(manifest), "-o", str(out), "--no-progress", "--json"]) == ExitCode.OK
        assert out.read_bytes() == payload.read_bytes()

        cache[0].unlink()  # and with no list at all, a clear error
        assert send.main(argv) == ExitCode.UNREACHABLE
        assert "no list of it is kept here" in capsys.readouterr().err


async def test_a_transfer_hears_of_depots_joining_and_leaving(etcd: EtcdServer, tmp_path: Path) -> None:
    settings = EtcdSettings((etcd.url,), timeout_s=2)
    async with EtcdClient(settings) as client:
        revision = (await list_depots(client, DEFAULT_PREFIX)).revision
    payload = tmp_path / "payload.bin"
    payload.write_bytes(b"x" * 1000)
    dest = DepotClient("http://127.0.0.1:9")
    scheduler = PathScheduler(["me", "dst"], "me", "dst", EdgeMemory())
    relay = Relay(payload, "me", "dst", {"dst": dest}, scheduler=scheduler)
    notes: list[str] = []
    opened: list[DepotClient] = []

    def joined(record: object) -> bool:
        name, url = record.name, record.url  # type: ignore[attr-defined]
        client = DepotClient(url)
        opened.append(client)
        relay.depot_joined(name, client)
        return True

    config = DepotConfig(name="late", listen="127.0.0.1:0", capacity=16 * MiB, max_allocation=4 * MiB,
                         data_dir=tmp_path / "late", directory=(etcd.url,), directory_ttl=5.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(follow_directory, relay, settings, DEFAULT_PREFIX, revision, known={"dst"},
                                   joined=joined, note=notes.append))
        stop = trio.Event()
        async with trio.open_nursery() as depot:
            url = await depot.start(partial(serve, config, shutdown_trigger=stop.wait))
            with trio.fail_after(10):
                await _until(lambda: "late" in relay.clients)
            assert relay.clients["late"].base_url.rstrip("/") == url
            assert "late" in scheduler.vertices
            stop.set()
        with trio.fail_after(10):
            await _until(lambda: "late" in relay.dead)
        nursery.cancel_scope.cancel()
    for client in (*opened, dest):
        await client.aclose()
    assert any("joined" in note for note in notes)
    assert any("left" in note for note in notes)


async def test_lnet_send_uses_a_depot_that_joins_and_routes_around_one_that_leaves(
    etcd: EtcdServer, tmp_path: Path
) -> None:
    """The whole command on real depots: the file comes from a throttled replica (``--source``), so the transfer
    lasts seconds; d3 registers after 2 s and is used (probed, carrying bytes), d1 stops after 4 s (its lease
    revoked at once) and is routed around; the file arrives whole."""
    import re
    import signal
    import subprocess
    import sys

    import httpx

    from ..client.http_replicas import Replica, replicas

    data = os.urandom(12 * MiB)
    depots = tmp_path / "depots.toml"
    depots.write_text(f'here = "me"\ndirectory = "{etcd.url}"\n')
    manifest = tmp_path / "sent.json"
    with loopback_depots(["d1", "d2"], tmp_path, "--directory", etcd.url) as running:
        await trio.to_thread.run_sync(_listed, etcd.url, {"d1", "d2"})
        async with replicas(Replica(data, rate=2e6)) as servers:
            argv = [sys.executable, "-m", "lnet.client.send", "--source", servers[0].url, "--to", "d2", "--depots",
                    str(depots), "--memory", str(tmp_path / "m.json"), "--block-size", "256KiB", "--manifest",
                    str(manifest), "--json", "--no-progress"]
            late_log = tmp_path / "d3.log"
            done: list[subprocess.CompletedProcess[bytes]] = []
            async with trio.open_nursery() as nursery:

                async def send() -> None:
                    done.append(await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False))

                nursery.start_soon(send)
                await trio.sleep(2)
                with late_log.open("wb") as log:
                    late = await trio.lowlevel.open_process(
                        [sys.executable, "-m", "lnet.depot.cli", "--listen", "127.0.0.1:0", "--name", "d3",
                         "--data-dir", str(tmp_path / "d3"), "--directory", etcd.url, "--log-level", "warning"],
                        stdin=subprocess.DEVNULL, stderr=log)
                await trio.sleep(2)
                running["d1"].process.send_signal(signal.SIGTERM)
            try:
                match = re.search(r"serving on (\S+)", late_log.read_text())
                assert match is not None
                async with httpx.AsyncClient() as http:
                    metrics = (await http.get(match.group(1) + "/metrics")).text
            finally:
                late.terminate()
                with trio.fail_after(20):
                    await late.wait()
        out = tmp_path / "out.bin"  # fetched while the destination still runs
        fetched = await get.run([str(manifest), "-o", str(out), "--no-progress"])
    sent = done[0]
    err = sent.stderr.decode()
    assert sent.returncode == ExitCode.OK, err
    assert "depot d3 joined the directory" in err
    # whichever the transfer heard first: the directory's word, or its own copies failing
    assert "depot d1 left the directory" in err or "depot d1 does not answer" in err
    received = re.search(r"^lnet_depot_bytes_in_total (\S+)$", metrics, re.MULTILINE)
    assert received is not None
    assert float(received.group(1)) > 0  # d3 carried bytes of this transfer (its probes' at least)
    assert fetched == ExitCode.OK
    assert out.read_bytes() == data
