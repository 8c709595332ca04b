"""``lnet-send --hash``: the blocks' and the whole file's hash, blake3 unless asked otherwise.

``lnet-send`` as a person runs it (``send.run`` on the emulated network of tests/client/network.py, MockClock):
the default and an explicit ``--hash`` end in a manifest of that hash that ``lnet-get`` checks; a destination that
does not list the hash in its status (a depot from before blake3) fails before any block moves, naming the
remedy; an interrupted run resumes with the hash it began with.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trio

from lnet.client.commands import send, send_args
from lnet.client.commands.clientio import ClientIO
from lnet.client.exits import ExitCode
from lnet.client.fetching.blocks import get_file
from lnet.client.formats.manifest import HASH_ALGORITHMS, hash_bytes, load
from lnet.client.sending import resume
from lnet.client.sending.relay import BlockDelivered, Relay, RelayConfig, RelayEvent
from lnet.client.sending.resume import SendJournal
from lnet.depot import app

from .network import MiB, Network, depots, inline


def depots_file(tmp_path: Path, network: Network, names: list[str]) -> Path:
    path = tmp_path / "depots.toml"
    path.write_text('here = "me"\n' + "".join(f'[depots.{n}]\nurl = "{network.url(n)}"\n' for n in names))
    return path


def argv(tmp_path: Path, payload: Path, config: Path, *extra: str) -> list[str]:
    return [str(payload), "--to", "c", "--path", "a", "--depots", str(config), "--block-size", "1MiB",
            "--manifest", str(tmp_path / "payload.manifest.json"), "--memory", str(tmp_path / "m.json"), "--json",
            *extra]


def emulated(network: Network) -> ClientIO:
    return ClientIO(transport=network.transport("here"), offload=inline)


DATA = os.urandom(5 * MiB + 333)


@pytest.fixture
def payload(tmp_path: Path) -> Path:
    path = tmp_path / "payload.bin"
    path.write_bytes(DATA)
    return path


def test_the_choices_are_the_manifests_hashes() -> None:
    assert set(send_args.HASH_CHOICES) == set(HASH_ALGORITHMS)
    assert send_args.DEFAULT_HASH == RelayConfig().hash_algorithm == "blake3"


@pytest.mark.parametrize("chosen", [None, "sha256", "blake2b", "blake3"])
async def test_the_manifest_carries_the_hash_and_lnet_get_checks_it(
    tmp_path: Path, payload: Path, chosen: str | None, capsys: pytest.CaptureFixture[str],
    autojump_clock: trio.abc.Clock,
) -> None:
    network = Network()
    config = depots_file(tmp_path, network, ["a", "c"])
    extra = ["--hash", chosen] if chosen else []
    async with depots(network, ["a", "c"], tmp_path):
        code = await send.run(argv(tmp_path, payload, config, *extra), io=emulated(network))
        assert code == ExitCode.OK, capsys.readouterr().err
        manifest = load(tmp_path / "payload.manifest.json")
        algorithm = chosen or "blake3"
        data = DATA
        assert manifest.hash_algorithm == algorithm
        assert manifest.file_hash == hash_bytes(algorithm, data)
        assert [b.hash for b in manifest.blocks] == [hash_bytes(algorithm, data[b.offset:b.offset + b.length])
                                                     for b in manifest.blocks]
        out = tmp_path / "fetched.bin"
        await get_file(manifest, out, transport=network.transport("here"))
        assert await trio.Path(out).read_bytes() == data


@pytest.mark.parametrize("chosen", [None, "blake3"])
async def test_a_destination_without_the_hash_fails_before_any_block_moves(
    tmp_path: Path, payload: Path, chosen: str | None, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.abc.Clock,
) -> None:
    monkeypatch.setattr(app, "DIGESTS", {"sha256": 64, "blake2b": 128})  # what a depot before blake3 lists
    network = Network()
    config = depots_file(tmp_path, network, ["a", "c"])
    extra = ["--hash", chosen] if chosen else []
    async with depots(network, ["a", "c"], tmp_path):
        code = await send.run(argv(tmp_path, payload, config, *extra), io=emulated(network))
        err = " ".join(capsys.readouterr().err.split())
        assert code == ExitCode.USAGE, err
        assert "depot c cannot check blocks with blake3 (its digests: blake2b, sha256" in err
        assert "give --hash sha256" in err
        assert network.bytes_sent.get(("here", "a"), 0) < 64 * 1024  # not one block's bytes on the wire
        # and as told: the same depots take the transfer with sha256
        code = await send.run(argv(tmp_path, payload, config, "--hash", "sha256"), io=emulated(network))
        assert code == ExitCode.OK, capsys.readouterr().err
    assert load(tmp_path / "payload.manifest.json").hash_algorithm == "sha256"


async def test_a_resume_keeps_the_hash_the_interrupted_run_began_with(
    tmp_path: Path, payload: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock,
) -> None:
    """A run journaled with sha256 (say, by an lnet-send from before blake3 was the default), then the same
    command without --hash: it resumes, with sha256, and sends only what is missing; --hash blake3 is refused."""
    network = Network()
    config = depots_file(tmp_path, network, ["a", "c"])
    old = RelayConfig(block_size=MiB, hash_algorithm="sha256")
    where = tmp_path / "payload.manifest.json.journal"
    async with depots(network, ["a", "c"], tmp_path) as clients:
        sent = SendJournal.open(where)
        sent.begin(resume.file_header(payload, network.url("c"), old))
        with trio.CancelScope() as scope:
            def stop(event: RelayEvent) -> None:
                if isinstance(event, BlockDelivered) and len(sent.records) >= 2:
                    scope.cancel()

            relay = Relay(payload, "me", "c", {"c": clients["c"]}, pinned=["me", "c"], config=old,
                          on_event=sent.recording(stop), offload=inline)
            await relay.run()
        sent.close()
        code = await send.run(argv(tmp_path, payload, config, "--hash", "blake3"), io=emulated(network))
        err = " ".join(capsys.readouterr().err.split())
        assert code == ExitCode.USAGE, err
        assert "it hashed with sha256, not blake3" in err
        code = await send.run(argv(tmp_path, payload, config), io=emulated(network))
        out = capsys.readouterr()
        assert code == ExitCode.OK, out.err
        assert json.loads(out.out)["resumed_blocks"] >= 2
        manifest = load(tmp_path / "payload.manifest.json")
        assert manifest.hash_algorithm == "sha256"
        assert manifest.file_hash == hash_bytes("sha256", DATA)
        fetched = tmp_path / "fetched.bin"
        await get_file(manifest, fetched, transport=network.transport("here"))
        assert await trio.Path(fetched).read_bytes() == DATA
