"""Datasets by name: ``lnet publish NAME SOURCE...`` records the replicas in a real etcd, ``lnet-get NAME
--directory URL`` fetches from them as from its URL list; entries are checked strictly and expire."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import trio

from lnet.client.commands import cli, get
from lnet.client.exits import ExitCode
from lnet.directory.datasets import Dataset, dataset_key, parse_dataset
from lnet.directory.entries import EntryError

from ..client.http_replicas import Replica, replicas
from .etcd_server import EtcdServer

DATA = os.urandom(3 * 1024 * 1024 + 11)


async def test_a_published_dataset_is_fetched_by_name(
    etcd: EtcdServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.bin"
    async with replicas(Replica(DATA), Replica(DATA)) as servers:
        sources = [server.url for server in servers]
        digest = hashlib.sha256(DATA).hexdigest()
        code = await trio.to_thread.run_sync(
            cli.main, ["publish", "climate-2026", *sources, "--directory", etcd.url, "--sha256", digest,
                       "--expires", "1h"])
        assert code == ExitCode.OK
        code = await get.run(["climate-2026", "--directory", etcd.url, "-o", str(out), "--no-progress", "--json"])
        assert code == ExitCode.OK, capsys.readouterr()
        assert json.loads(capsys.readouterr().out.splitlines()[-1])["ok"] is True
    assert out.read_bytes() == DATA
    assert await get.run(["no-such-set", "--directory", etcd.url, "-o", str(tmp_path / "x")]) == ExitCode.USAGE
    assert "no dataset no-such-set" in capsys.readouterr().err


async def test_publish_never_prints_a_capability(etcd: EtcdServer, capsys: pytest.CaptureFixture[str]) -> None:
    secret = "http://127.0.0.1:6714/v1/data/" + "c" * 43
    assert await trio.to_thread.run_sync(cli.main, ["publish", "sent", secret, "--directory", etcd.url]) == 0
    err = capsys.readouterr().err
    assert "c" * 10 not in err
    assert "http://127.0.0.1:6714" in err


@pytest.mark.parametrize(
    ("document", "why"),
    [
        ({"sources": ["file:///etc/passwd"]}, "http"),
        ({"sources": ["http://user:pw@host/x"]}, "credentials"),
        ({"sources": []}, "1 to 64"),
        ({"expires": 5.0}, "expired|before"),
        ({"sha256": "XYZ"}, "sha256"),
        ({"name": "other"}, "of this name"),
    ],
)
def test_a_bad_or_expired_dataset_entry_is_refused(document: dict[str, object], why: str) -> None:
    good = json.loads(Dataset("set", ("http://a.example/x",), 10.0, 100.0).encode())
    value = json.dumps({**good, **document}).encode()
    with pytest.raises(EntryError, match=why):
        parse_dataset(dataset_key("/lnet/", "set"), value, "/lnet/", now=50.0)
    assert parse_dataset(dataset_key("/lnet/", "set"), json.dumps(good).encode(), "/lnet/", now=50.0).sources
