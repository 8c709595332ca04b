"""``lnet-send --follow`` and ``lnet-get URL --follow`` together: a file (or a tree) many times the destination's
capacity goes through, each end resumes after being stopped while the other runs, and no depot ever holds more
than its capacity.

The whole commands (``send.run``, ``get.run``) on the emulated network (tests/client/network.py) under trio's
autojump clock; the last test runs the real programs against real ``lnet-depot`` processes on loopback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from lnet.client.commands import get, send
from lnet.client.commands.clientio import ClientIO
from lnet.client.exits import ExitCode
from lnet.client.wire.depot_client import DepotClient

from .http_replicas import Replica
from .http_replicas import emulated as emulated_replicas
from .loopback import depots_file as loopback_depots_file
from .loopback import loopback_depots
from .network import MiB, Network, depots, inline
from .test_send_cli import emulated
from .test_send_cli import emulated_depots_file as depots_file

CAPACITY = 8 * MiB


def payload(tmp_path: Path, size: int) -> tuple[Path, bytes]:
    data = os.urandom(size)
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    return path, data


class Watch:
    """Samples every depot's ``used`` while the test runs: the most each ever held."""

    def __init__(self, network: Network, names: list[str]) -> None:
        self.network, self.names = network, names
        self.most = dict.fromkeys(names, 0)

    async def run(self) -> None:
        clients = [DepotClient(self.network.url(n), transport=self.network.transport("watch")) for n in self.names]
        try:
            while True:
                for name, client in zip(self.names, clients, strict=True):
                    self.most[name] = max(self.most[name], int((await client.status())["used"]))
                await trio.sleep(0.05)
        finally:
            with trio.CancelScope(shield=True):
                for client in clients:
                    await client.aclose()


def send_argv(tmp_path: Path, config: Path, source: Path, *extra: str) -> list[str]:
    return [str(source), "--to", "dst", "--depots", str(config), "--block-size", "1MiB", "--follow", "--json",
            "--no-progress", "--manifest", str(tmp_path / "big.manifest.json"), "--memory",
            str(tmp_path / "edges.json"), *extra]


async def url_from(capsys: pytest.CaptureFixture[str], seen: list[str]) -> str:
    """The receiver's URL, as the sender prints it on stderr (read as it comes)."""
    while True:
        seen.append(capsys.readouterr().err)
        for line in "".join(seen).splitlines():
            if line.startswith("at the far end: lnet-get "):
                return line.split()[5]
        await trio.sleep(0.01)


async def test_a_file_eight_times_the_destination_goes_through_a_chain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network(default_rate=8 * MiB)
    source, data = payload(tmp_path, 8 * CAPACITY + 12345)
    config = depots_file(tmp_path, network, ["a", "dst"])
    out = tmp_path / "received.bin"
    async with depots(network, ["a"], tmp_path, capacity=CAPACITY, max_allocation=4 * MiB), \
            depots(network, ["dst"], tmp_path, capacity=CAPACITY, max_allocation=4 * MiB):
        watch = Watch(network, ["a", "dst"])
        codes: dict[str, int] = {}
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch.run)

            async def sender() -> None:
                codes["send"] = await send.run(send_argv(tmp_path, config, source, "--path", "a"),
                                               io=emulated(network))

            nursery.start_soon(sender)
            url = await url_from(capsys, [])
            codes["get"] = await get.run([url, "-o", str(out), "--follow", "--no-progress"], io=emulated(network))
            while "send" not in codes:  # noqa: ASYNC110 - the sender ends on its own
                await trio.sleep(0.1)
            nursery.cancel_scope.cancel()
    assert codes == {"send": ExitCode.OK, "get": ExitCode.OK}
    assert out.read_bytes() == data
    assert all(most <= CAPACITY for most in watch.most.values()), watch.most
    assert watch.most["dst"] > CAPACITY // 2  # the destination did fill: the receiver made the room
    summary = next(json.loads(line) for line in capsys.readouterr().out.splitlines() if '"receive_url"' in line)
    assert summary["follow"] is True


async def test_a_sender_with_no_receiver_yet_waits_and_says_so_then_completes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network(default_rate=8 * MiB)
    source, data = payload(tmp_path, 3 * CAPACITY)
    config = depots_file(tmp_path, network, ["dst"])
    out = tmp_path / "received.bin"
    async with depots(network, ["dst"], tmp_path, capacity=CAPACITY, max_allocation=4 * MiB):
        codes: dict[str, int] = {}
        seen: list[str] = []
        async with trio.open_nursery() as nursery:

            async def sender() -> None:
                codes["send"] = await send.run(send_argv(tmp_path, config, source), io=emulated(network))

            nursery.start_soon(sender)
            url = await url_from(capsys, seen)
            await trio.sleep(120)  # the depot fills, and nobody drains it
            assert "send" not in codes
            seen.append(capsys.readouterr().err)
            assert "waiting for the receiver at dst" in "".join(seen)
            codes["get"] = await get.run([url, "-o", str(out), "--follow", "--no-progress"], io=emulated(network))
    assert codes == {"send": ExitCode.OK, "get": ExitCode.OK}
    assert out.read_bytes() == data


async def test_each_end_resumes_after_it_was_stopped_while_the_other_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network(default_rate=4 * MiB)
    source, data = payload(tmp_path, 6 * CAPACITY)
    config = depots_file(tmp_path, network, ["a", "dst"])
    out = tmp_path / "received.bin"
    argv = send_argv(tmp_path, config, source, "--path", "a")
    async with depots(network, ["a", "dst"], tmp_path, capacity=CAPACITY, max_allocation=4 * MiB):
        codes: dict[str, int] = {}
        seen: list[str] = []
        async with trio.open_nursery() as nursery:
            sender_scope = trio.CancelScope()

            async def first_sender() -> None:
                with sender_scope:
                    await send.run(argv, io=emulated(network))

            nursery.start_soon(first_sender)
            url = await url_from(capsys, seen)
            receiver_scope = trio.CancelScope()

            async def first_receiver() -> None:
                with receiver_scope:
                    await get.run([url, "-o", str(out), "--follow", "--no-progress"], io=emulated(network))

            nursery.start_soon(first_receiver)
            await trio.sleep(4)  # both under way: the receiver stops first, the sender waits for room
            receiver_scope.cancel()
            await trio.sleep(2)
            sender_scope.cancel()  # now the sender stops too, with blocks at the destination
            await trio.sleep(1)
            assert (tmp_path / "big.manifest.json.journal").exists()
            assert out.with_name("received.bin.lnet-part").exists()

            async def receiver() -> None:  # the same command, again: it resumes from its part file
                codes["get"] = await get.run([url, "-o", str(out), "--follow", "--no-progress"],
                                             io=emulated(network))

            nursery.start_soon(receiver)
            await trio.sleep(3)
            # the same send command resumes while the receiver runs, at the same URL
            codes["send"] = await send.run(argv, io=emulated(network))
    assert codes == {"send": ExitCode.OK, "get": ExitCode.OK}
    assert out.read_bytes() == data
    captured = capsys.readouterr()
    assert f"at the far end: lnet-get {url} " in captured.err  # the resumed sender publishes at the same URL
    summary = next(json.loads(line) for line in captured.out.splitlines() if '"receive_url"' in line)
    assert summary["receive_url"] == url
    assert summary["resumed_blocks"] > 0


async def test_a_tree_follows_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network(default_rate=8 * MiB)
    root = tmp_path / "photos"
    (root / "raw").mkdir(parents=True)
    files = {f"raw/{i}.dat": os.urandom(300_000 + i * 1000) for i in range(40)}
    files["notes.txt"] = b"hello\n"
    for name, content in files.items():
        (root / name).write_bytes(content)
    (root / "empty").mkdir()
    config = depots_file(tmp_path, network, ["dst"])
    out = tmp_path / "received"
    async with depots(network, ["dst"], tmp_path, capacity=4 * MiB, max_allocation=2 * MiB):
        codes: dict[str, int] = {}
        async with trio.open_nursery() as nursery:

            async def sender() -> None:
                codes["send"] = await send.run(
                    [str(root), "--to", "dst", "--depots", str(config), "--block-size", "1MiB", "--follow",
                     "--json", "--no-progress", "--manifest", str(tmp_path / "photos.manifest.json"),
                     "--memory", str(tmp_path / "edges.json")], io=emulated(network))

            nursery.start_soon(sender)
            url = await url_from(capsys, [])
            codes["get"] = await get.run([url, "-o", str(out), "--follow", "--no-progress"], io=emulated(network))
    assert codes == {"send": ExitCode.OK, "get": ExitCode.OK}
    for name, content in files.items():
        assert (out / name).read_bytes() == content
    assert (out / "empty").is_dir()


async def test_replicas_feed_a_follow_send(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    # lnet-send --source: the file arrives from two HTTP replicas while it is relayed, and is drained at the far end
    network = Network(default_rate=8 * MiB)
    data = os.urandom(3 * CAPACITY + 999)
    config = depots_file(tmp_path, network, ["dst"])
    out = tmp_path / "received.bin"
    async with depots(network, ["dst"], tmp_path, capacity=CAPACITY, max_allocation=4 * MiB), \
            emulated_replicas(Replica(data, rate=4 * MiB), Replica(data, rate=2 * MiB)) as (replicas, connect):
        io = ClientIO(transport=network.transport("here"), offload=inline, connect=connect)
        codes: dict[str, int] = {}
        async with trio.open_nursery() as nursery:

            async def sender() -> None:
                codes["send"] = await send.run(
                    ["--source", replicas[0].url, "--source", replicas[1].url, "--to", "dst", "--depots", str(config),
                     "--block-size", "1MiB", "--follow", "--json", "--no-progress", "--spool", str(tmp_path),
                     "--manifest", str(tmp_path / "f.manifest.json"), "--memory", str(tmp_path / "edges.json")],
                    io=io)

            nursery.start_soon(sender)
            url = await url_from(capsys, [])
            codes["get"] = await get.run([url, "-o", str(out), "--follow", "--no-progress"], io=emulated(network))
    assert codes == {"send": ExitCode.OK, "get": ExitCode.OK}
    assert out.read_bytes() == data
    assert all(replica.sent > 0 for replica in replicas)  # both fed it


def test_real_processes_on_loopback_move_a_file_several_times_a_depot(tmp_path: Path) -> None:
    size = 48 * MiB  # through relay a (16 MiB) to dst (16 MiB): three times each
    source = tmp_path / "big.bin"
    data = os.urandom(size)
    source.write_bytes(data)
    out = tmp_path / "received.bin"
    with loopback_depots(["a", "dst"], tmp_path, "--capacity", "16MiB", "--max-allocation", "4MiB") as started:
        config = loopback_depots_file(tmp_path, started)
        sender = subprocess.Popen(
            [sys.executable, "-m", "lnet.client.send", str(source), "--to", "dst", "--depots", str(config),
             "--path", "a", "--block-size", "1MiB", "--follow", "--json", "--no-progress",
             "--manifest", str(tmp_path / "big.manifest.json"), "--memory", str(tmp_path / "edges.json")],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        assert sender.stderr is not None
        line = ""
        while not line.startswith("at the far end: lnet-get "):
            line = sender.stderr.readline().decode()
            assert line or sender.poll() is None, "lnet-send ended before printing the receiver's command"
        url = line.split()[5]
        got = subprocess.run([sys.executable, "-m", "lnet.client.get", url, "-o", str(out), "--follow",
                              "--no-progress", "--json"], stdin=subprocess.DEVNULL, capture_output=True,
                             timeout=150, check=False)
        sent_out, sent_err = sender.communicate(timeout=150)
        assert sender.returncode == 0, sent_err.decode()
        assert got.returncode == 0, got.stderr.decode()
        assert out.read_bytes() == data
        assert json.loads(sent_out)["follow"] is True
        for depot in started.values():  # whatever they held, it was never more than they have
            assert depot.process.poll() is None
