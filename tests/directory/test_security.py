"""The directory with etcd's authentication and TLS, set up by deploy/directory/etcd-auth.sh as an operator would:
each depot a user that may write only its own key, clients read-only, everything over HTTPS."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from lnet.depot import DepotConfig, serve
from lnet.directory.entries import DEFAULT_PREFIX, DepotRecord, depot_key
from lnet.directory.etcd import EtcdClient, EtcdError, EtcdSettings
from lnet.directory.listing import list_depots

from .etcd_server import ETCD, ETCDCTL, EtcdServer

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).parents[2] / "deploy" / "directory" / "etcd-auth.sh"
MiB = 1024 * 1024
PASSWORDS = {"root": "root-password-0123", "atl": "atl-password-0123", "chi": "chi-password-0123",
             "me": "me-password-01234", "you": "you-password-0123", "pub": "pub-password-0123"}


def _script(server: EtcdServer, tmp: Path, *args: str, password: str) -> str:
    root = tmp / "root-password"
    root.write_text(PASSWORDS["root"])
    root.chmod(0o600)
    done = subprocess.run(["bash", str(SCRIPT), *args], input=password + "\n", capture_output=True, text=True,
                          timeout=60, env={**server.env(), "ROOT_PASSWORD_FILE": str(root)})
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[EtcdServer]:
    if ETCD is None or ETCDCTL is None:
        pytest.skip("no etcd and etcdctl (apt-get install etcd-server etcd-client)")
    with EtcdServer(tmp_path / "etcd", tls=True) as server:
        _script(server, tmp_path, "init", password=PASSWORDS["root"])
        _script(server, tmp_path, "add-depot", "atl", password=PASSWORDS["atl"])
        _script(server, tmp_path, "add-depot", "chi", password=PASSWORDS["chi"])
        _script(server, tmp_path, "add-client", "me", password=PASSWORDS["me"])
        _script(server, tmp_path, "add-client", "you", password=PASSWORDS["you"])
        _script(server, tmp_path, "grant-datasets", "you", password="")
        _script(server, tmp_path, "add-publisher", "pub", password=PASSWORDS["pub"])
        yield server


def _settings(server: EtcdServer, user: str | None) -> EtcdSettings:
    return EtcdSettings((server.url,), user=user, password=PASSWORDS[user.split("-")[-1]] if user else None,
                        cafile=server.cafile, timeout_s=3)


def _record(name: str) -> DepotRecord:
    return DepotRecord(name, "http://127.0.0.1:6714", 1, 1, 1, 1.0, (), "0.1.0", 1, 0.0)


async def test_a_depot_may_write_its_own_key_and_no_other(secured: EtcdServer) -> None:
    async with EtcdClient(_settings(secured, "lnet-depot-atl")) as atl:
        await atl.put(depot_key(DEFAULT_PREFIX, "atl"), _record("atl").encode())
        with pytest.raises(EtcdError) as refused:
            await atl.put(depot_key(DEFAULT_PREFIX, "chi"), _record("chi").encode())
        assert refused.value.denied
    async with EtcdClient(_settings(secured, "lnet-client-me")) as me:
        assert set((await list_depots(me, DEFAULT_PREFIX)).depots) == {"atl"}
        with pytest.raises(EtcdError) as read_only:
            await me.put(depot_key(DEFAULT_PREFIX, "me"), _record("me").encode())
        assert read_only.value.denied
    async with EtcdClient(_settings(secured, None)) as anonymous:
        with pytest.raises(EtcdError) as anonymous_refused:
            await list_depots(anonymous, DEFAULT_PREFIX)
        assert anonymous_refused.value.denied


async def test_a_depot_registers_over_tls_with_its_own_user(secured: EtcdServer, tmp_path: Path) -> None:
    password = tmp_path / "atl-password"
    password.write_text(PASSWORDS["atl"])
    config = DepotConfig(
        name="atl", listen="127.0.0.1:0", capacity=16 * MiB, max_allocation=4 * MiB, data_dir=tmp_path / "atl",
        directory=(secured.url,), directory_ttl=5.0, directory_user="lnet-depot-atl",
        directory_password=PASSWORDS["atl"], directory_cafile=secured.cafile,
    )
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve, config, shutdown_trigger=stop.wait))
        async with EtcdClient(_settings(secured, "lnet-client-me")) as me:
            with trio.fail_after(10):
                while True:
                    listing = await list_depots(me, DEFAULT_PREFIX)
                    if "atl" in listing.depots:
                        break
                    await trio.sleep(0.1)
            assert listing.depots["atl"].url == url
            stop.set()
    async with EtcdClient(_settings(secured, "lnet-client-me")) as me:
        assert "atl" not in (await list_depots(me, DEFAULT_PREFIX)).depots  # its own user could revoke its lease


async def test_a_depot_with_another_depots_credentials_is_refused_and_keeps_serving(
    secured: EtcdServer, tmp_path: Path
) -> None:
    config = DepotConfig(
        name="chi", listen="127.0.0.1:0", capacity=16 * MiB, max_allocation=4 * MiB, data_dir=tmp_path / "chi",
        directory=(secured.url,), directory_ttl=5.0, directory_user="lnet-depot-atl",
        directory_password=PASSWORDS["atl"], directory_cafile=secured.cafile,
    )
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve, config, shutdown_trigger=stop.wait))
        await trio.sleep(1.5)
        async with EtcdClient(_settings(secured, "lnet-client-me")) as me:
            assert "chi" not in (await list_depots(me, DEFAULT_PREFIX)).depots
        async with httpx.AsyncClient() as http:
            status = (await http.get(url + "/v1/status", headers={"Accept": "application/json"})).json()
        assert status["directory"]["state"] == "retrying"
        assert "permission denied" in status["directory"]["last_error"]
        assert PASSWORDS["atl"] not in json.dumps(status)
        stop.set()


async def test_datasets_with_capabilities_are_read_only_by_the_roles_allowed(secured: EtcdServer) -> None:
    from lnet.directory.datasets import Dataset, dataset_key

    entry = Dataset("sent", ("http://127.0.0.1:6714/v1/data/" + "c" * 43,), 1.0, 4e9)
    async with EtcdClient(_settings(secured, "lnet-publisher-pub")) as publisher:
        await publisher.put(dataset_key(DEFAULT_PREFIX, "sent"), entry.encode())
    async with EtcdClient(_settings(secured, "lnet-client-me")) as me:  # a client not granted the datasets
        with pytest.raises(EtcdError) as refused:
            await me.get(dataset_key(DEFAULT_PREFIX, "sent"))
        assert refused.value.denied
    async with EtcdClient(_settings(secured, "lnet-client-you")) as you:
        found = await you.get(dataset_key(DEFAULT_PREFIX, "sent"))
        assert found is not None
        with pytest.raises(EtcdError):  # reading is all it may do
            await you.put(dataset_key(DEFAULT_PREFIX, "sent"), entry.encode())
