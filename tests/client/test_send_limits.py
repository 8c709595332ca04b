"""``lnet-send`` against depots' limits (max_duration, max_allocation) and errors that a retry cannot change.

The rules are checked three ways: ``fit_to_limits`` as a pure function; the relay on the emulated network
(tests/client/network.py, MockClock) counting the requests that reach a depot; and ``lnet-send`` as a person runs
it (``send.run`` through its ``ClientIO`` seam), on the same emulated network against depots given limits, for a
file and for a directory tree, counting the allocation requests each depot saw from its own /metrics.
"""

from __future__ import annotations

import collections
import json
import os
import time
from pathlib import Path

import httpx
import pytest
import trio

from lnet.client.commands import send
from lnet.client.commands.clientio import ClientIO
from lnet.client.exits import ExitCode
from lnet.client.formats import manifest as file_manifest
from lnet.client.formats import tree
from lnet.client.sending.relay import DepotRefused, Note, Relay, RelayConfig, RelayEvent
from lnet.client.sending.send import DepotLimits, SendError, fit_to_limits
from lnet.client.wire.depot_client import DepotClient
from lnet.protocol import innermost

from .network import MiB, Network, depots, inline

HOUR = 3600.0

# -- fit_to_limits: pure ------------------------------------------------------------------------------------------


def test_an_unset_duration_takes_the_longest_the_destination_allows() -> None:
    limits = {"a": DepotLimits(16 * MiB, 600.0), "dst": DepotLimits(16 * MiB, HOUR)}
    fitted, excluded = fit_to_limits(RelayConfig(block_size=MiB), limits, "dst", None, longest_duration=True)
    assert fitted.duration_s == HOUR
    assert fitted.hold_s_at == {"a": 600.0}  # a holds a block at most 600 s; the others keep hold_s (3600 s)
    assert excluded == {}
    roomy = {"dst": DepotLimits(16 * MiB, 7 * 24 * HOUR)}
    fitted, _ = fit_to_limits(RelayConfig(duration_s=24 * HOUR), roomy, "dst", None, longest_duration=True)
    assert fitted.duration_s == 24 * HOUR  # at most a day, however long the destination would keep it


def test_an_explicit_duration_over_the_destinations_limit_fails_naming_it() -> None:
    limits = {"dst": DepotLimits(16 * MiB, HOUR)}
    with pytest.raises(SendError) as refused:
        fit_to_limits(RelayConfig(duration_s=2 * HOUR), limits, "dst", None, longest_duration=False)
    assert refused.value.code == ExitCode.USAGE
    assert str(refused.value) == ("--duration 2h is over depot dst's max_duration of 1h: give --duration 1h or "
                                  "less, or leave --duration out to take the longest dst allows")
    fitted, _ = fit_to_limits(RelayConfig(duration_s=HOUR), limits, "dst", None, longest_duration=False)
    assert fitted.duration_s == HOUR  # exactly the limit is allowed


def test_a_block_over_a_depots_max_allocation() -> None:
    limits = {"small": DepotLimits(MiB, HOUR), "big": DepotLimits(8 * MiB, HOUR), "dst": DepotLimits(8 * MiB, HOUR)}
    config = RelayConfig(block_size=4 * MiB)
    with pytest.raises(SendError) as pinned:  # on a pinned path: at once
        fit_to_limits(config, limits, "dst", ["me", "small", "dst"], longest_duration=True)
    assert pinned.value.code == ExitCode.USAGE
    assert "--block-size 4.0 MiB is over depot small's max_allocation of 1.0 MiB" in str(pinned.value)
    fit_to_limits(config, limits, "dst", ["me", "big", "dst"], longest_duration=True)  # a path that avoids it
    _, excluded = fit_to_limits(config, limits, "dst", None, longest_duration=True)  # adaptive: left out
    assert list(excluded) == ["small"]
    assert "max_allocation of 1.0 MiB" in excluded["small"]
    with pytest.raises(SendError, match="depot dst's max_allocation"):  # the destination must take it
        fit_to_limits(config, {**limits, "dst": DepotLimits(MiB, HOUR)}, "dst", None, longest_duration=True)


def test_limits_a_status_does_not_state_are_not_checked() -> None:
    old = frozenset({"sha256", "blake2b"})  # a status without "digests": a depot from before blake3
    assert DepotLimits.from_status({"max_allocation": 1024, "max_duration": 60}) == DepotLimits(1024, 60.0, old)
    assert DepotLimits.from_status({"max_allocation": "big", "max_duration": None}) == DepotLimits(digests=old)
    assert DepotLimits.from_status({"digests": "blake3"}) == DepotLimits()
    fitted, excluded = fit_to_limits(RelayConfig(duration_s=9e9), {"dst": DepotLimits()}, "dst", None,
                                     longest_duration=False)
    assert (fitted.duration_s, excluded) == (9e9, {})


# -- the relay: a refusal is not retried; a lost holder is mended from upstream --------------------------------------


class Counting(httpx.AsyncBaseTransport):
    """Counts the requests that pass, by method and the path's first segment after /v1/."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests[(request.method, request.url.path.split("/")[2])] += 1
        return await self.inner.handle_async_request(request)


def make_file(tmp_path: Path, size: int) -> tuple[Path, bytes]:
    data = os.urandom(size)
    path = tmp_path / "payload.bin"
    path.write_bytes(data)
    return path, data


@pytest.mark.parametrize("where", ["dst", "a"])
async def test_a_permanent_refusal_is_not_retried(
    tmp_path: Path, autojump_clock: trio.abc.Clock, where: str
) -> None:
    # A relay not fitted to its depots' limits (as send() would fit it): the destination refuses the duration, or
    # the intermediate depot the hold (400). Asked once; the old relay asked 1 + 8 retries times.
    network = Network()
    path, _ = make_file(tmp_path, MiB)
    limit = HOUR if where == "dst" else 600.0
    config = RelayConfig(block_size=MiB, duration_s=2 * HOUR if where == "dst" else 600.0, hold_s=HOUR)
    async with depots(network, ["a", "dst"], tmp_path, max_duration=limit) as clients:
        counting = Counting(network.transport("here"))
        async with DepotClient(network.url(where), transport=counting) as watched:
            relay = Relay(path, "here", "dst", {**clients, where: watched}, pinned=["here", "a", "dst"],
                          config=config, offload=inline)
            started = trio.current_time()
            with pytest.raises(ExceptionGroup) as failed:
                await relay.run()
            assert trio.current_time() - started < config.backoff_s  # no back-off: not one retry
    refused = innermost(failed.value)
    assert isinstance(refused, DepotRefused)
    assert refused.depot == where
    assert refused.error.status == 400
    assert "max_duration" in str(refused)
    assert counting.requests[("POST", "allocations")] == 1


async def test_a_fitted_hold_passes_a_depot_with_a_short_max_duration(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    path, data = make_file(tmp_path, 3 * MiB + 5)
    async with depots(network, ["a", "dst"], tmp_path, max_duration=600.0) as clients:
        limits = {name: DepotLimits.from_status(await client.status()) for name, client in clients.items()}
        config, _ = fit_to_limits(RelayConfig(block_size=MiB), limits, "dst", ["here", "a", "dst"],
                                  longest_duration=True)
        assert (config.duration_s, dict(config.hold_s_at)) == (600.0, {"a": 600.0, "dst": 600.0})
        relay = Relay(path, "here", "dst", clients, pinned=["here", "a", "dst"], config=config, offload=inline)
        result = await relay.run()
        assert b"".join([await clients["dst"].read(r.allocation.read) for r in result.blocks]) == data
    assert result.resends == 0


async def test_a_depot_with_room_for_fewer_blocks_than_a_batch_still_relays(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    # The relay asks for 8 allocations at once; a depot lending 6 MiB in all refuses 8 x 1 MiB (413, whatever it
    # holds). Asked for fewer at a time, it passes the blocks on as they go.
    network = Network()
    path, data = make_file(tmp_path, 10 * MiB)
    async with depots(network, ["a"], tmp_path, capacity=6 * MiB, max_allocation=MiB) as small, \
            depots(network, ["dst"], tmp_path) as roomy:
        clients = {**small, **roomy}
        relay = Relay(path, "here", "dst", clients, pinned=["here", "a", "dst"], config=RelayConfig(block_size=MiB),
                      offload=inline)
        result = await relay.run()
        assert b"".join([await clients["dst"].read(r.allocation.read) for r in result.blocks]) == data


async def test_a_block_that_expired_at_an_intermediate_depot_is_resent_from_upstream(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    # a holds a block 1.5 s (its max_duration) and passes one at a time over a 1 MiB/s hop: blocks wait there
    # longer than that and expire. Their copy answers 404, which a retry from the same holder cannot mend; the
    # block goes again from the source.
    network = Network(default_rate=20 * MiB)
    network.set_rate("a", "dst", MiB)
    path, data = make_file(tmp_path, 6 * MiB)
    config = RelayConfig(block_size=MiB, hold_s_at={"a": 1.5}, min_inflight=1, initial_inflight=1, max_inflight=1)
    async with depots(network, ["a", "dst"], tmp_path) as clients:
        events: list[RelayEvent] = []
        relay = Relay(path, "here", "dst", clients, pinned=["here", "a", "dst"], config=config, offload=inline,
                      on_event=events.append)
        result = await relay.run()
        assert b"".join([await clients["dst"].read(r.allocation.read) for r in result.blocks]) == data
    assert result.resends > 0
    notes = [e.text for e in events if isinstance(e, Note)]
    assert any("not_found" in text or "no such allocation" in text for text in notes), notes
    assert all(text.endswith("re-sending from here") for text in notes), notes


# -- lnet-send as a person runs it, against depots started with limits --------------------------------------------

LIMITS = {"max_duration": 600.0, "max_allocation": MiB, "capacity": 64 * MiB}  # lnet-depot --max-duration 10m ...


def emulated_depots_file(tmp_path: Path, network: Network, names: list[str], token: str | None = None) -> Path:
    path = tmp_path / "depots.toml"
    extra = f'token = "{token}"\n' if token else ""
    path.write_text('here = "me"\n' + "".join(f'[depots.{n}]\nurl = "{network.url(n)}"\n{extra}' for n in names))
    return path


def emulated(network: Network) -> ClientIO:
    return ClientIO(transport=network.transport("here"), offload=inline)


async def status(network: Network, name: str) -> dict[str, object]:
    async with httpx.AsyncClient(transport=network.transport("observer")) as client:
        answer: dict[str, object] = (await client.get(f"{network.url(name)}/v1/status")).json()
    return answer


async def allocations_asked(network: Network, name: str) -> dict[str, float]:
    """The depot's count of allocation requests, by HTTP status, from its /metrics."""
    counts: dict[str, float] = {}
    async with httpx.AsyncClient(transport=network.transport("observer")) as client:
        text = (await client.get(f"{network.url(name)}/metrics")).text
    for line in text.splitlines():
        if line.startswith("lnet_depot_requests_total{") and 'operation="allocate"' in line:
            code = line.split('status="')[1].split('"')[0]
            counts[code] = float(line.rsplit(" ", 1)[1])
    return counts


@pytest.fixture
def payload(tmp_path: Path) -> Path:
    path = tmp_path / "payload.bin"
    path.write_bytes(os.urandom(3 * MiB + 77))
    return path


@pytest.fixture
def source_tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    (root / "sub").mkdir(parents=True)
    for i in range(12):
        (root / f"small-{i}.txt").write_bytes(os.urandom(3000 + i))
    (root / "sub" / "big.bin").write_bytes(os.urandom(2 * MiB + 1))
    return root


def expiries(manifest: Path) -> list[float]:
    document = json.loads(manifest.read_text())
    if "stream" in document:
        return [s.expires for b in tree.load(manifest).stream.blocks for s in b.sources]
    return [s.expires for b in file_manifest.load(manifest).blocks for s in b.sources]


@pytest.mark.parametrize("kind", ["file", "tree"])
async def test_send_takes_the_depots_limits_when_duration_is_not_given(
    tmp_path: Path, payload: Path, source_tree: Path, kind: str, capsys: pytest.CaptureFixture[str],
    autojump_clock: trio.abc.Clock,
) -> None:
    # every depot allows 10 minutes and 1 MiB: the destination keeps the blocks 10 minutes (not a day), the
    # intermediate depot holds them at most 10 minutes (not an hour)
    subject = payload if kind == "file" else source_tree
    network = Network()
    config = emulated_depots_file(tmp_path, network, ["a", "c"])
    manifest = tmp_path / "out.manifest.json"
    before, started = time.time(), trio.current_time()  # the depots' expiry follows trio's clock from wall time
    async with depots(network, ["a", "c"], tmp_path, **LIMITS):
        code = await send.run([str(subject), "--to", "c", "--path", "a", "--depots", str(config),
                               "--block-size", "1MiB", "--manifest", str(manifest),
                               "--memory", str(tmp_path / "m.json"), "--json",
                               *(["--bdp", "64KiB"] if kind == "tree" else [])], io=emulated(network))
        assert code == ExitCode.OK, capsys.readouterr().err
        assert json.loads(capsys.readouterr().out)["path"] == ["me", "a", "c"]
        assert (await allocations_asked(network, "a")).keys() == {"201"}  # not one refused request on the way
        assert (await allocations_asked(network, "c")).keys() == {"201"}
        after = time.time() + (trio.current_time() - started)
    expires = expiries(manifest)
    assert expires
    assert all(before + 600 - 60 < at <= after + 600 for at in expires)


@pytest.mark.parametrize("kind", ["file", "tree"])
@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["--duration", "1h", "--block-size", "1MiB"],
         ["--duration 1h is over depot c's max_duration of 10m", "give --duration 10m or less"]),
        ([], ["--block-size 4.0 MiB is over depot a's max_allocation of 1.0 MiB", "--block-size 1048576 or less"]),
    ],
    ids=["duration", "block-size"],
)
async def test_send_over_a_depots_limit_fails_before_any_block_moves(
    tmp_path: Path, payload: Path, source_tree: Path, kind: str, argv: list[str], needles: list[str],
    capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock,
) -> None:
    subject = payload if kind == "file" else source_tree
    network = Network()
    config = emulated_depots_file(tmp_path, network, ["a", "c"])
    async with depots(network, ["a", "c"], tmp_path, **LIMITS):
        code = await send.run([str(subject), "--to", "c", "--path", "a", "--depots", str(config),
                               "--memory", str(tmp_path / "m.json"), "--bdp", "64KiB", *argv], io=emulated(network))
        err = capsys.readouterr().err
        assert code == ExitCode.USAGE, err
        for needle in needles:
            assert needle in " ".join(err.split()), err
        for name in ("a", "c"):  # nothing was asked for, let alone moved
            assert await allocations_asked(network, name) == {}
            assert (await status(network, name))["used"] == 0
    assert network.bytes_sent.get(("here", "a"), 0) < 64 * 1024  # not one block's bytes on the wire


async def test_an_adaptive_send_leaves_out_a_depot_whose_blocks_are_too_small(
    tmp_path: Path, payload: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    config = emulated_depots_file(tmp_path, network, ["a", "c"])
    io = emulated(network)
    async with depots(network, ["a"], tmp_path, **LIMITS), depots(network, ["c"], tmp_path):
        argv = [str(payload), "--to", "c", "--depots", str(config), "--memory", str(tmp_path / "m.json"), "--cold",
                "--manifest", str(tmp_path / "p.manifest.json"), "--no-progress"]
        assert await send.run(argv, io=io) == ExitCode.OK  # 4 MiB blocks: a (1 MiB at most) cannot be on the path
        err = " ".join(capsys.readouterr().err.split())
        assert "depot a left out: its max_allocation of 1.0 MiB is under --block-size 4.0 MiB" in err
        assert "over me -> c;" in err
        assert await allocations_asked(network, "a") == {}  # not even probed
        assert await send.run([*argv, "--to", "a"], io=io) == ExitCode.USAGE  # the destination cannot take them
        assert "over depot a's max_allocation" in " ".join(capsys.readouterr().err.split())


async def test_a_wrong_token_fails_at_once_instead_of_retrying(
    tmp_path: Path, payload: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    config = emulated_depots_file(tmp_path, network, ["c"], token="a-wrong-token-0123456789")
    async with depots(network, ["c"], tmp_path, operator_token="the-right-token-0123456789"):
        started = trio.current_time()
        code = await send.run([str(payload), "--to", "c", "--depots", str(config), "--memory", str(tmp_path / "m.json"),
                               "--block-size", "1MiB", "--no-progress"], io=emulated(network))
        elapsed = trio.current_time() - started  # on the mock clock: a retry's back-off would show in full
        err = " ".join(capsys.readouterr().err.split())
        assert code == ExitCode.USAGE, err
        assert "c refused:" in err
        assert "retries" not in err
        # one request per block under way at most, never a retry: 4 blocks, 8 tries each before
        assert 1 <= (await allocations_asked(network, "c")).get("401", 0) <= 4
    assert elapsed < 10


def test_the_help_says_what_an_unset_duration_means(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        send.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--duration TIME how long the destination keeps the file (default: the longest the destination allows, " \
        "at most 1d" in text
    assert "max_allocation" in text


def test_the_destination_must_compute_the_transfers_hash() -> None:
    """The destination hashes every block for the client: a hash it does not list fails at once, naming the
    remedy; a depot from before blake3 (no "digests" in its status) is taken to know sha256 and blake2b."""
    old = DepotLimits.from_status({"max_allocation": 8 * MiB})
    with pytest.raises(SendError) as refused:
        fit_to_limits(RelayConfig(), {"dst": old}, "dst", None, longest_duration=True)
    assert refused.value.code == ExitCode.USAGE
    assert "depot dst cannot check blocks with blake3 (its digests: blake2b, sha256" in str(refused.value)
    assert "give --hash sha256" in str(refused.value)
    fit_to_limits(RelayConfig(hash_algorithm="sha256"), {"dst": old}, "dst", None, longest_duration=True)
    current = DepotLimits.from_status({"digests": ["blake3", "sha256", "blake2b"]})
    fit_to_limits(RelayConfig(), {"dst": current}, "dst", None, longest_duration=True)
    # only the destination hashes: a depot on the way needs no digest at all
    fit_to_limits(RelayConfig(), {"mid": old, "dst": current}, "dst", ["me", "mid", "dst"], longest_duration=True)
