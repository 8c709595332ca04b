"""The overlay's shared memory: entries of edge records, checked strictly; each edge's newest record wins; a
client with no memory of its own starts from the overlay's (against a real etcd, with real depots)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lnet.client.commands import send
from lnet.client.exits import ExitCode
from lnet.directory.entries import EntryError
from lnet.directory.memory import EdgeRecord, encode_memory, memory_key, newest_records, parse_memory
from lnet.scheduler import EdgeEstimate, EdgeMemory

from ..client.loopback import loopback_depots
from .etcd_server import EtcdServer

PREFIX = "/lnet/"


def test_an_entry_survives_encoding_and_is_bounded() -> None:
    records = [EdgeRecord("me", f"d{i}", 1e6 + i, 1000.0 + i, 3) for i in range(400)]
    data = encode_memory("me", records, 2000.0)
    parsed = parse_memory(memory_key(PREFIX, "me"), data, PREFIX)
    assert len(parsed) == 256
    assert parsed[0] == records[-1]  # the most recently measured kept first
    long_names = [EdgeRecord("m" * 64, f"{i:064d}", 1.0, float(i), 1) for i in range(256)]
    assert len(encode_memory("me", long_names, 0.0)) <= 64 * 1024


@pytest.mark.parametrize(
    "value",
    [
        b"nope",
        b'{"kind": "lnet-memory/1", "client": "other", "edges": []}',
        b'{"kind": "lnet-memory/1", "client": "me", "edges": [{"from": "a", "to": "a", "throughput_bps": 1, '
        b'"measured_at": 1, "samples": 1}]}',
        b'{"kind": "lnet-memory/1", "client": "me", "edges": [{"from": "a", "to": "b", "throughput_bps": -1, '
        b'"measured_at": 1, "samples": 1}]}',
        b'{"kind": "lnet-memory/1", "client": "me", "edges": [{"from": "a", "to": "b", "throughput_bps": 1, '
        b'"measured_at": 1, "samples": 1, "path": "/home/me/secret.tar", "boost": 0}]}',
    ],
)
def test_a_bad_entry_is_refused(value: bytes) -> None:
    with pytest.raises(EntryError):
        parse_memory(memory_key(PREFIX, "me"), value, PREFIX)


def test_the_newest_record_of_each_edge_wins_and_none_is_from_the_future() -> None:
    old, new = EdgeRecord("a", "b", 1.0, 10.0, 1), EdgeRecord("a", "b", 2.0, 20.0, 1)
    future = EdgeRecord("b", "c", 3.0, 99.0, 1)
    merged = newest_records([[old], [new, future]], now=50.0)
    assert merged[("a", "b")] == new
    assert merged[("b", "c")].measured_at == 50.0


def test_adopt_takes_a_record_only_when_it_is_newer() -> None:
    memory = EdgeMemory()
    assert memory.adopt("a", "b", EdgeEstimate(5.0, 10.0, 2))
    assert not memory.adopt("a", "b", EdgeEstimate(9.0, 5.0, 2))
    assert memory.estimate("a", "b") == 5.0


@pytest.mark.slow
def test_a_client_with_no_memory_starts_from_the_overlays(
    etcd: EtcdServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    depots = tmp_path / "depots.toml"
    depots.write_text(f'here = "me"\ndirectory = "{etcd.url}"\n')
    payload = tmp_path / "payload.bin"
    payload.write_bytes(os.urandom(2 * 1024 * 1024))
    with loopback_depots(["d1", "d2"], tmp_path, "--directory", etcd.url):
        from .test_directory_client import _listed

        _listed(etcd.url, {"d1", "d2"})
        warm = EdgeMemory()  # what the first client learnt before (a loopback transfer is over before a sample)
        warm.observe("me", "d1", 40_000_000, 1.0, 1_800_000_000.0)
        warm.observe("d1", "d2", 30_000_000, 1.0, 1_800_000_000.0)
        warm.save(tmp_path / "first" / "e.json")
        for n, state in enumerate(("first", "second")):
            argv = [str(payload), "--to", "d2", "--depots", str(depots), "--memory", str(tmp_path / state / "e.json"),
                    "--block-size", "256KiB", "--manifest", str(tmp_path / f"{state}.json"), "--json",
                    "--no-progress"]
            assert send.main(argv) == ExitCode.OK
            err = capsys.readouterr().err
            assert ("starting from the overlay's" in err) == (n == 1), err
    first = EdgeMemory.load(tmp_path / "first" / "e.json")
    second = EdgeMemory.load(tmp_path / "second" / "e.json")
    assert {("me", "d1"), ("d1", "d2")} <= set(first)
    assert set(first) <= set(second)  # the second client began with every edge the first knew
    shared = etcd_entry(etcd)
    assert shared["client"] == "me"
    assert "payload" not in json.dumps(shared)  # no file names


def etcd_entry(etcd: EtcdServer) -> dict[str, object]:
    import trio

    from lnet.directory.etcd import EtcdClient, EtcdSettings

    async def read() -> bytes:
        async with EtcdClient(EtcdSettings((etcd.url,))) as client:
            found = await client.get(memory_key(PREFIX, "me"))
            assert found is not None
            return found.value

    document: dict[str, object] = json.loads(trio.run(read))
    return document
