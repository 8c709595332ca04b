"""End to end, over real sockets: depot processes, restarts, graceful shutdown, TLS, and the client's errors."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest
import trio

from lnet.client.wire.depot_client import (
    BadRequest,
    DepotClient,
    DepotFull,
    DepotTimeout,
    DepotUnreachable,
    NotFound,
    RangeNotSatisfiable,
    TooLarge,
    Unauthorized,
    Upstream,
)
from lnet.depot import DepotConfig, serve

from .processes import depot_process
from .tls import certificate

MiB = 1024 * 1024
TOKEN = "operator-token-0123456789"
COPY_TIMEOUT_S = 6


async def test_two_depot_processes_copy_between_them(tmp_path: Path) -> None:
    async with (
        depot_process("--data-dir", str(tmp_path / "a"), "--name", "a") as a,
        depot_process("--data-dir", str(tmp_path / "b"), "--name", "b") as b,
        DepotClient(a.url) as one,
        DepotClient(b.url) as two,
    ):
        source = await one.allocate_one(8 * MiB, 60)
        payload = bytes(range(251)) * (6 * MiB // 251)
        await one.write(source.write, payload)
        target = await two.allocate_one(8 * MiB, 60)
        result = await one.copy(source.read, target.write_url)
        assert result.nbytes == len(payload)
        assert result.seconds > 0
        assert await two.read(target.read) == payload
        links = (await one.status())["links"]
        assert [link["to"] for link in links] == [b.url]
        assert links[0]["bytes"] == len(payload)
        if sys.platform.startswith("linux"):  # TCP_INFO from the push's own socket
            assert 0 < links[0]["rtt_ms"] < 1000
            # measured: loopback loses nothing, but a timer on a loaded machine can resend a segment spuriously
            assert isinstance(links[0]["retrans"], int)
            assert 0 <= links[0]["retrans"] <= 4
        assert (await two.status())["name"] == "b"
    for line in a.log + b.log:  # the access log and httpx's lines hold no capability whole
        for secret in (source.read, source.write, target.write, target.read):
            assert secret not in line


async def test_hard_allocations_survive_a_restart(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    payload = bytes(range(256)) * (3 * MiB // 256)
    async with depot_process("--data-dir", data_dir) as depot, DepotClient(depot.url) as client:
        hard = await client.allocate_one(4 * MiB, 3600, reliability="hard")
        soft = await client.allocate_one(MiB, 3600)
        await client.write(hard.write, payload)
        await client.write(soft.write, b"gone after restart")
        depot.terminate()
        assert await depot.wait() == 0
    modes = _modes(Path(data_dir))
    assert len(modes) == 3  # the lock, and the hard allocation's data and record; nothing of the soft one
    for name, mode in modes.items():
        assert mode & 0o077 == 0, name  # nobody else may read them
    async with depot_process("--data-dir", data_dir) as depot, DepotClient(depot.url) as client:
        probe = await client.probe(hard.manage)
        assert (probe.size, probe.length, probe.reliability) == (4 * MiB, len(payload), "hard")
        assert probe.expires == pytest.approx(hard.expires)
        assert await client.read(hard.read) == payload
        await client.write(hard.write, b"more")  # the write capability works too
        with pytest.raises(NotFound):
            await client.read(soft.read)
        assert (await client.status())["used"] == 4 * MiB
        await client.free(hard.manage)
    assert list(_modes(Path(data_dir))) == [".lock"]



async def test_a_small_depot_starts_and_lends_all_it_has(tmp_path: Path) -> None:
    """``--capacity 64MiB`` and nothing else: ``max_allocation`` (256 MiB by default) comes down to the capacity,
    instead of the configuration being refused, and the whole capacity can be lent as one allocation."""
    async with (
        depot_process("--capacity", "64MiB", "--data-dir", str(tmp_path / "d")) as depot,
        DepotClient(depot.url) as client,
    ):
        status = await client.status()
        assert (status["capacity"], status["max_allocation"]) == (64 * MiB, 64 * MiB)
        whole = await client.allocate_one(64 * MiB, 60)
        assert await client.write(whole.write, b"small") == 5
        assert await client.read(whole.read) == b"small"
        depot.terminate()
        assert await depot.wait() == 0

def _modes(directory: Path) -> dict[str, int]:
    return {path.name: path.stat().st_mode for path in sorted(directory.iterdir())}


async def test_sigterm_lets_an_in_flight_write_finish(tmp_path: Path) -> None:
    async with depot_process("--data-dir", str(tmp_path / "d"), "--graceful-timeout", "10s") as depot:
        async with DepotClient(depot.url) as client:
            alloc = await client.allocate_one(MiB, 60)
            halfway = trio.Event()
            go_on = trio.Event()

            async def body():  # type: ignore[no-untyped-def]
                yield b"a" * 1000
                halfway.set()
                await go_on.wait()
                yield b"b" * 1000

            async with trio.open_nursery() as nursery:
                results: list[int] = []

                async def upload() -> None:
                    results.append(await client.write_stream(alloc.write, body(), 2000))

                nursery.start_soon(upload)
                await halfway.wait()
                await trio.sleep(0.2)
                depot.terminate()
                with trio.fail_after(10):  # the depot has taken the signal (not merely not got to it yet)...
                    while not any("finishing in-flight requests" in line for line in depot.log):  # noqa: ASYNC110 (another process's log)
                        await trio.sleep(0.02)
                await trio.sleep(0.5)
                assert depot.process.returncode is None  # ...and is still finishing the upload
                go_on.set()
            assert results == [2000]
        assert await depot.wait() == 0


async def test_client_error_mapping_against_a_real_depot(tmp_path: Path) -> None:
    config = DepotConfig(
        listen="127.0.0.1:0", data_dir=tmp_path / "d", capacity=8 * MiB, max_allocation=4 * MiB,
        max_duration=600, operator_token=TOKEN,
    )
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve, config)
        async with DepotClient(url, token=TOKEN) as client, DepotClient(url) as anonymous:
            with pytest.raises(Unauthorized, match="operator token"):
                await anonymous.allocate_one(10, 60)
            with pytest.raises(TooLarge):
                await client.allocate_one(5 * MiB, 60)
            with pytest.raises(BadRequest, match="max_duration"):
                await client.allocate_one(10, 601)
            alloc = await client.allocate_one(4 * MiB, 60)
            await client.allocate_one(4 * MiB, 60)
            with pytest.raises(DepotFull) as full:
                await client.allocate_one(1, 60)
            assert full.value.retry_after == 5
            with pytest.raises(RangeNotSatisfiable):
                await client.read(alloc.read, 0, 10)
            with pytest.raises(NotFound):
                await client.probe(alloc.write)
            with pytest.raises(Upstream):
                await client.copy(alloc.read, "http://127.0.0.1:1/v1/data/" + "A" * 32, length=0)
        nursery.cancel_scope.cancel()
    async with DepotClient(url, timeout=2) as gone:
        with pytest.raises(DepotUnreachable):
            await gone.status()
        assert not await gone.healthy()


async def test_a_stalled_depot_times_out() -> None:
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    async with listener, trio.open_nursery() as nursery:

        async def accept_and_stall() -> None:
            stream = await listener.accept()
            async with stream:
                await trio.sleep_forever()

        nursery.start_soon(accept_and_stall)
        async with DepotClient(f"http://127.0.0.1:{port}", timeout=0.5) as client:
            with trio.fail_after(5), pytest.raises(DepotTimeout, match="timed out"):
                await client.status()
        nursery.cancel_scope.cancel()


async def test_tls(tmp_path: Path) -> None:
    certfile, keyfile, trusted = certificate(tmp_path)
    config = DepotConfig(listen="127.0.0.1:0", data_dir=tmp_path / "d", certfile=certfile, keyfile=keyfile)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve, config)
        assert url.startswith("https://127.0.0.1:")
        async with DepotClient(url, verify=trusted) as client:
            alloc = await client.allocate_one(100, 60)
            await client.write(alloc.write, b"over tls")
            assert await client.read(alloc.read) == b"over tls"
        async with DepotClient(url) as untrusting:
            with pytest.raises(DepotUnreachable, match="CERTIFICATE_VERIFY_FAILED|certificate"):
                await untrusting.status()
        nursery.cancel_scope.cancel()


async def test_a_copy_waiting_in_its_lane_leaves_when_its_client_goes(tmp_path: Path) -> None:
    """Behind hypercorn a departed client is not a cancellation: the depot must notice the disconnect itself."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def stall(stream: trio.SocketStream) -> None:  # takes a push's bytes and never answers
        async with stream:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                while await stream.receive_some(65536):
                    pass

    async def waiting_and_lanes(client: DepotClient) -> tuple[str, str]:
        text = (await client._http.get("/metrics")).text
        values = dict(line.split(" ") for line in text.splitlines() if line.startswith("lnet_depot_cop"))
        return values["lnet_depot_copies_waiting"], values["lnet_depot_copy_lanes"]

    async def until(client: DepotClient, wanted: tuple[str, str]) -> None:  # another process: poll its answers
        while await waiting_and_lanes(client) != wanted:  # noqa: ASYNC110 (another process: poll its answers)
            await trio.sleep(0.05)

    async with trio.open_nursery() as servers:
        servers.start_soon(trio.serve_listeners, stall, listeners)
        async with (
            depot_process("--data-dir", str(tmp_path / "a"), "--copy-timeout", f"{COPY_TIMEOUT_S}s") as a,
            DepotClient(a.url) as one,
            DepotClient(a.url, timeout=1.0) as impatient,
        ):
            source = await one.allocate_one(100, 60)
            await one.write(source.write, b"x" * 100)
            stalled = f"http://127.0.0.1:{port}/v1/data/" + "A" * 32
            async with trio.open_nursery() as copies:

                async def hold_the_lane() -> None:
                    with pytest.raises(Upstream, match="timed out"):
                        await one.copy(source.read, stalled, lane="l", lane_width=1)

                async def wait_and_give_up() -> None:
                    with pytest.raises(DepotTimeout):
                        await impatient.copy(source.read, stalled, lane="l", lane_width=1)

                started = trio.current_time()
                copies.start_soon(hold_the_lane)
                # Everything below must be seen before the first copy's copy_timeout frees the lane's place: a
                # waiter the depot failed to drop would take it then, and the lane would read as below anyway.
                with trio.fail_at(started + COPY_TIMEOUT_S - 1):
                    await until(one, ("0.0", "1.0"))  # the first copy holds the lane's one place
                    copies.start_soon(wait_and_give_up)
                    await until(one, ("1.0", "1.0"))  # the impatient one waits behind it...
                    await until(one, ("0.0", "1.0"))  # ...and once its client is gone, waits no more
            assert await waiting_and_lanes(one) == ("0.0", "0.0")
        servers.cancel_scope.cancel()


async def test_weather_probes_between_depot_processes(tmp_path: Path) -> None:
    async with depot_process("--data-dir", str(tmp_path / "b"), "--operator-token", TOKEN) as b:
        async with (
            depot_process(
                "--data-dir", str(tmp_path / "a"), "--weather-bytes-per-hour", "8MiB", "--weather-block", "1MiB",
                "--weather-interval", "1h", "--log-level", "debug",
                env={"LNET_DEPOT_WEATHER_PEERS": f"{b.url}={TOKEN}"},
            ) as a,
            DepotClient(a.url) as one,
        ):
            with trio.fail_after(10):
                for _ in range(200):  # the first round starts with the depot
                    links = (await one.status())["links"]
                    if links:
                        break
                    await trio.sleep(0.05)
            [probe] = links
            assert (probe["to"], probe["source"], probe["count"], probe["bytes"]) == (b.url, "probe", 1, 1024 * 1024)
            assert probe["failures"] == 0
            if sys.platform.startswith("linux"):
                assert 0 < probe["rtt_ms"] < 1000
            assert (await one.status())["used"] == 0
            async with DepotClient(b.url) as two:
                assert (await two.status())["used"] == 0  # the peer's probe block was freed
    for line in a.log + b.log:
        assert TOKEN not in line
