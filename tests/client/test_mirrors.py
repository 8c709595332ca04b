"""``lnet-get URL ...`` end to end: several replicas of one file, on loopback sockets where the test is about
connections, and otherwise on an emulated network on trio's autojump clock (``emulated``); the commands too, run
whole (parsing, output, exit code) through their ``ClientIO`` seam."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import pytest
import trio

from lnet.client.commands import get
from lnet.client.commands.clientio import ClientIO
from lnet.client.engines.chunks import PlanConfig, first_ranges
from lnet.client.exits import ExitCode
from lnet.client.fetching.mirrors import MirrorError, MirrorResult, Validators, fetch_mirrors, reference
from lnet.client.fetching.partfile import part_path, state_path
from lnet.units import format_size

from .http_replicas import Connect, Replica, emulated, replicas
from .network import Network, depots, inline

MiB = 1024 * 1024
DATA = os.urandom(6 * MiB + 12345)
SHA = hashlib.sha256(DATA).hexdigest()
# small chunks, so that a few MiB make many rounds; short stalls and back-offs, so that failures are quick
CONFIG = PlanConfig(initial_chunk=256 * 1024, min_chunk=64 * 1024, static_chunk=512 * 1024, stall_s=2.0,
                    backoff_s=0.2, round_min_s=0.2)


def fetch_over(connect: Connect) -> Callable[..., Awaitable[MirrorResult]]:
    """``fetch_mirrors`` reaching the replicas through ``connect`` (an emulated network)."""
    return partial(fetch_mirrors, connect=connect)


def throttled(*rates: float, data: bytes = DATA) -> list[Replica]:
    return [Replica(data, rate=rate) for rate in rates]


async def test_identical_bytes_from_every_replica_over_one_connection_each(tmp_path: Path) -> None:
    out = tmp_path / "file.bin"
    async with replicas(*throttled(4e6, 2e6, 1e6)) as servers:
        result = await fetch_mirrors([s.url for s in servers], out, config=CONFIG, sha256=SHA)
    assert out.read_bytes() == DATA
    assert result.sha256 == SHA
    assert not part_path(out).exists()
    assert not state_path(out).exists()
    assert [r.state for r in result.replicas] == ["ok"] * 3
    assert all(r.bytes > 0 for r in result.replicas)
    assert result.replicas[0].bytes > result.replicas[2].bytes  # the faster, the larger its share
    assert sum(r.bytes for r in result.replicas) == len(DATA)
    for server, report in zip(servers, result.replicas, strict=True):
        # no probe: the first request is already a chunk, and every request is one the planner made (those it took
        # back before they were written, their ranges given to a replica with room, never reach the server: one
        # or two, with depth 2, as the loopback's timing falls; a full suite on two cores saw 7 made, 5 served).
        # A request written behind one a tail split stopped short goes again on the next connection: the server
        # counts it twice (this failed 2-4 times in 10-15 runs before it allowed for that)
        assert server.ranges[0][1] - server.ranges[0][0] == CONFIG.initial_chunk
        resent = (server.connections - 1) * (CONFIG.depth - 1)
        assert report.requests - CONFIG.depth <= server.requests <= report.requests + resent
        assert server.connections < server.requests  # connections are kept and reused


async def test_one_persistent_connection_per_replica_with_requests_pipelined(tmp_path: Path) -> None:
    config = PlanConfig(**{**CONFIG.__dict__, "tail": "none"})  # a tail split closes and reopens one
    async with replicas(*throttled(4e6, 2e6, 1e6)) as servers:
        result = await fetch_mirrors([s.url for s in servers], tmp_path / "f", config=config)
    for server, report in zip(servers, result.replicas, strict=True):
        assert server.connections == 1  # every range on one connection, the first sent as it opened
        assert server.requests == report.requests
        assert report.requests >= 3


async def test_every_strategy_and_tail_rule_gets_the_same_bytes(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    for strategy in ("mdtp", "static", "brute", "history", "aggressive"):
        for tail in ("split", "hedge"):
            out = tmp_path / f"{strategy}-{tail}.bin"
            config = PlanConfig(**{**CONFIG.__dict__, "strategy": strategy, "tail": tail})
            async with emulated(*throttled(16e6, 4e6, 2e6)) as (servers, connect):
                result = await fetch_over(connect)([s.url for s in servers], out, config=config,
                                             history=tmp_path / "history.json")
            assert out.read_bytes() == DATA, (strategy, tail)
            assert result.strategy == strategy
    remembered = json.loads((tmp_path / "history.json").read_text())
    assert len(remembered["rates"]) >= 3  # the history strategy has rates to use


async def test_a_replica_killed_mid_download_leaves_the_rest_to_the_others(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    out = tmp_path / "file.bin"
    servers = throttled(3e6, 3e6, 3e6)
    servers[0].kill_after = 1 * MiB
    async with emulated(*servers) as (_, connect):
        result = await fetch_over(connect)([s.url for s in servers], out, config=CONFIG, sha256=SHA)
    assert out.read_bytes() == DATA
    dead = result.replicas[0]
    assert dead.state in ("backoff", "dead")
    assert "connect" in dead.reason or "lost" in dead.reason or "closed" in dead.reason
    assert dead.bytes <= 1 * MiB
    assert result.replicas[1].bytes + result.replicas[2].bytes >= len(DATA) - 1 * MiB


async def test_a_stalled_replica_is_given_up_on_and_its_ranges_reassigned(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    out = tmp_path / "file.bin"
    servers = throttled(4e6, 4e6)
    servers[1].stall_after = 512 * 1024
    async with emulated(*servers) as (_, connect):
        result = await fetch_over(connect)([s.url for s in servers], out, config=CONFIG, timeout_s=1.0)
    assert out.read_bytes() == DATA
    # given up on after the timeout (it may be on a retry, "ok" again, when the others finish)
    assert "no byte for 1 s" in result.replicas[1].reason
    assert result.replicas[1].bytes <= 512 * 1024


async def test_a_replica_serving_another_file_is_refused_and_none_of_its_bytes_are_used(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    out = tmp_path / "file.bin"
    other = bytes(len(DATA))  # same length, other bytes, another ETag
    servers = [*throttled(4e6, 4e6), Replica(other, etag='"something-else"', rate=8e6)]
    async with emulated(*servers) as (_, connect):
        result = await fetch_over(connect)([s.url for s in servers], out, config=CONFIG)
    assert out.read_bytes() == DATA
    refused = result.replicas[2]
    assert refused.state == "refused"
    assert "ETag" in refused.reason
    assert refused.bytes == 0
    # its first range and nothing else was asked of it (twice if its answer came first and the two others then
    # outvoted it: the download starts over with theirs)
    assert len(servers[2].ranges) in (1, 2)


async def test_a_replica_with_another_length_or_no_ranges_is_refused(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    out = tmp_path / "file.bin"
    servers = [*throttled(4e6, 4e6), Replica(DATA[:-1], rate=8e6), Replica(DATA, honour_range=False)]
    async with emulated(*servers) as (_, connect):
        result = await fetch_over(connect)([s.url for s in servers], out, config=CONFIG)
    assert out.read_bytes() == DATA
    assert result.replicas[2].state == "refused"
    assert "bytes" in result.replicas[2].reason
    assert result.replicas[3].state == "refused"
    assert "Range" in result.replicas[3].reason


def test_the_reference_is_the_largest_agreeing_group() -> None:
    a = Validators(10, '"a"', None)
    b = Validators(10, '"b"', None)
    assert reference([b, a, a]) == a
    assert reference([a, b]) == a  # a tie: the earliest replica's group
    assert reference([None, None]) is None
    assert reference([a, b], check_validators=False) == a
    assert a.differs(b, check_validators=False) is None


async def test_no_replica_answering_is_an_unreachable_error(tmp_path: Path) -> None:
    with trio.socket.socket() as s:  # a port nobody listens on
        await s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(MirrorError, match="no replica answered") as info:
        await fetch_mirrors([f"http://127.0.0.1:{port}/x"], tmp_path / "x", config=CONFIG, timeout_s=2.0)
    assert info.value.exit_code == ExitCode.UNREACHABLE


async def test_a_wrong_sha256_fails_and_leaves_no_output(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    out = tmp_path / "file.bin"
    async with emulated(*throttled(8e6, 8e6)) as (servers, connect):
        with pytest.raises(MirrorError, match="SHA-256") as info:
            await fetch_over(connect)([s.url for s in servers], out, config=CONFIG, sha256="0" * 64)
    assert info.value.exit_code == ExitCode.INTEGRITY
    assert not out.exists()
    assert part_path(out).exists()


async def test_an_interrupted_download_resumes_with_what_it_has(tmp_path: Path, autojump_clock: trio.abc.Clock) -> None:
    out = tmp_path / "file.bin"
    async with emulated(*throttled(2e6, 2e6)) as (servers, connect):
        urls = [s.url for s in servers]
        with trio.move_on_after(1.2):
            await fetch_over(connect)(urls, out, config=CONFIG)
        assert state_path(out).exists()
        result = await fetch_over(connect)(urls, out, config=CONFIG, sha256=SHA)
    assert out.read_bytes() == DATA
    assert 0 < result.resumed_bytes < len(DATA)


async def test_depots_holding_a_copy_are_replicas_too(tmp_path: Path) -> None:
    from lnet.client.wire.depot_client import DepotClient

    from .loopback import loopback_depots

    with loopback_depots(["a", "b"], tmp_path) as depots:
        urls = []
        for depot in depots.values():
            async with DepotClient(depot.url) as client:
                allocation = await client.allocate_one(len(DATA), 3600)
                await client.write(allocation.write, DATA)
                urls.append(allocation.read_url)
        result = await fetch_mirrors(urls, tmp_path / "file.bin", config=CONFIG, sha256=SHA)
    assert (tmp_path / "file.bin").read_bytes() == DATA
    assert all(r.bytes > 0 for r in result.replicas)
    assert all("…" in r.url for r in result.replicas)  # capabilities are not shown whole


async def test_the_command_prints_a_json_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    out = tmp_path / "file.bin"
    async with emulated(*throttled(8e6, 4e6)) as (servers, connect):
        args = [s.url for s in servers] + ["-o", str(out), "--json", "--no-progress", "--sha256", SHA,
                                          "--history", str(tmp_path / "h.json"), "--initial-chunk", "256KiB"]
        code = await get.run(args, io=ClientIO(connect=connect))
    assert code == ExitCode.OK
    assert out.read_bytes() == DATA
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    assert report["size"] == len(DATA)
    assert report["sha256"] == SHA
    assert [r["state"] for r in report["replicas"]] == ["ok", "ok"]
    assert {"bytes", "requests", "chunk_min", "chunk_max", "mbps", "share"} <= set(report["replicas"][0])
    assert [s.requests > 1 for s in servers] == [True, True]  # both replicas served ranges through the seam


async def test_the_trace_holds_every_request_and_the_report_when_each_replica_started_and_ended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    out, trace = tmp_path / "file.bin", tmp_path / "trace.jsonl"
    async with emulated(*throttled(8e6, 4e6)) as (servers, connect):
        args = [s.url for s in servers] + ["-o", str(out), "--json", "--no-progress", "--trace", str(trace),
                                          "--history", str(tmp_path / "h.json"), "--initial-chunk", "256KiB"]
        code = await get.run(args, io=ClientIO(connect=connect))
    assert code == ExitCode.OK
    assert out.read_bytes() == DATA
    report = json.loads(capsys.readouterr().out)
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert lines[0]["event"] == "download"
    assert lines[0]["replicas"] == [r["url"] for r in report["replicas"]]
    assert lines[1]["event"] == "attempt"
    requests = [line for line in lines if line["event"] == "request"]
    assert len(requests) == sum(s.requests for s in servers)  # every request the replicas answered
    kept = sorted((r["start"], r["start"] + r["received"]) for r in requests)
    at = 0
    for start, end in kept:  # what arrived covers the file once (a split cuts a request, it does not copy it)
        assert start == at
        at = end
    assert at == len(DATA)
    for r in requests:
        assert r["outcome"] in ("done", "stopped")
        assert 0 <= r["issued_s"] <= r["first_byte_s"] <= r["last_byte_s"] <= report["seconds"]
    for i, replica in enumerate(report["replicas"]):
        mine = [r for r in requests if r["replica"] == i]
        assert replica["first_byte_s"] == pytest.approx(min(r["first_byte_s"] for r in mine), abs=1e-3)
        assert replica["last_byte_s"] == pytest.approx(max(r["last_byte_s"] for r in mine), abs=1e-3)


async def test_the_command_prints_the_per_replica_table_and_a_closing_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.abc.Clock
) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # the table on one line per replica, as wide as it wants
    out = tmp_path / "file.bin"
    async with emulated(*throttled(8e6, 4e6), Replica(bytes(len(DATA)), etag='"other"')) as (servers, connect):
        args = [s.url for s in servers] + ["-o", str(out), "--no-progress", "--history", str(tmp_path / "h.json")]
        code = await get.run(args, io=ClientIO(connect=connect))
    assert code == ExitCode.OK
    printed = capsys.readouterr().out
    assert f"{out}: per replica" in printed
    assert 'refused: its ETag is "other"' in printed  # the third replica's state, with why
    assert f"{out}: {format_size(len(DATA))} in " in printed
    assert f"from 2 replicas, sha256 {SHA}" in printed


async def test_the_command_fails_with_the_replicas_exit_code_and_the_json_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    out = tmp_path / "file.bin"
    async with emulated(*throttled(8e6)) as (servers, connect):
        args = [servers[0].url, "-o", str(out), "--json", "--no-progress", "--sha256", "0" * 64,
                "--history", str(tmp_path / "h.json")]
        code = await get.run(args, io=ClientIO(connect=connect))
    assert code == ExitCode.INTEGRITY
    captured = capsys.readouterr()
    failure = json.loads(captured.out)
    assert failure == {"ok": False, "exit": 4, "error": failure["error"], "path": str(out)}
    assert "SHA-256" in failure["error"]
    assert f"lnet-get: {failure['error']}" in captured.err  # the message on stderr, the same in the JSON
    assert not out.exists()


def test_the_command_refuses_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "x")
    assert get.main(["http://127.0.0.1:1/x", "-o", out, "--sha256", "abc"]) == ExitCode.USAGE
    assert "64 hex digits" in capsys.readouterr().err
    assert get.main(["m.json", "http://127.0.0.1:1/x", "-o", out]) == ExitCode.USAGE
    assert "one manifest" in capsys.readouterr().err
    assert get.main(["http://127.0.0.1:1/x", "-o", str(tmp_path)]) == ExitCode.USAGE
    assert "directory" in capsys.readouterr().err
    assert get.main(["http://127.0.0.1:1/x", "http://127.0.0.1:1/x", "-o", out]) == ExitCode.USAGE
    assert "a replica URL is given twice" in capsys.readouterr().err
    assert get.main(["http://127.0.0.1:1/x", "-o", out, "--strategy", "fastest"]) == ExitCode.USAGE
    capsys.readouterr()
    assert get.main(["http://127.0.0.1:1/x", "-o", out, "--trace", str(tmp_path / "no" / "t")]) == ExitCode.USAGE
    assert "not a directory" in capsys.readouterr().err
    assert get.main(["m.json", "-o", out, "--trace", str(tmp_path / "t")]) == ExitCode.USAGE
    assert "--trace records the requests to replicas" in capsys.readouterr().err


async def test_send_with_replicas_feeding_the_first_hop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    from lnet.client.commands import send

    network = Network()
    config = tmp_path / "depots.toml"
    config.write_text('here = "here"\n' + "".join(f'[depots.{n}]\nurl = "{network.url(n)}"\n' for n in "ac"))
    manifest = tmp_path / "file.bin.manifest.json"
    async with depots(network, ["a", "c"], tmp_path), emulated(*throttled(8e6, 4e6, 2e6)) as (servers, connect):
        io = ClientIO(transport=network.transport("here"), connect=connect, offload=inline)
        argv = ["--to", "c", "--depots", str(config), "--path", "a", "--block-size", "1MiB", "--json",
                "--manifest", str(manifest), "--memory", str(tmp_path / "edges.json"), "--spool", str(tmp_path),
                "--initial-chunk", "256KiB", "--history", str(tmp_path / "h.json"), "--sha256", SHA]
        for server in servers:
            argv += ["--source", server.url]
        assert await send.run(argv, io=io) == ExitCode.OK
        summary = json.loads(capsys.readouterr().out)
        assert summary["path"] == ["here", "a", "c"]
        assert [r["state"] for r in summary["sources"]] == ["ok"] * 3
        assert all(r["bytes"] > 0 for r in summary["sources"])
        assert sum(r["bytes"] for r in summary["sources"]) == len(DATA)
        assert not any(name.startswith("lnet-send-") for name in os.listdir(tmp_path))  # the spool is gone
        assert json.loads(manifest.read_text())["name"] == "file.bin"
        assert network.bytes_sent[("a", "c")] >= len(DATA)  # every block went through a, as pinned
        out = tmp_path / "fetched.bin"
        code = await get.run([str(manifest), "-o", str(out), "--no-progress"],
                             io=ClientIO(transport=network.transport("here")))
        assert code == ExitCode.OK
    assert out.read_bytes() == DATA


def test_send_wants_a_file_or_sources_not_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lnet.client.commands import send

    config = tmp_path / "depots.toml"
    config.write_text('here = "me"\n[depots.c]\nurl = "http://127.0.0.1:9"\n')
    (tmp_path / "f").write_bytes(b"x")
    base = ["--to", "c", "--depots", str(config)]
    assert send.main(base) == ExitCode.USAGE
    assert send.main([str(tmp_path / "f"), *base, "--source", "http://127.0.0.1:9/f"]) == ExitCode.USAGE
    assert "not both" in capsys.readouterr().err
    assert send.main([*base, "--source", "ftp://x/f"]) == ExitCode.USAGE
    assert "not an http(s) URL" in capsys.readouterr().err


async def test_lnet_get_without_a_progress_bar_never_loads_rich(tmp_path: Path) -> None:
    """The command as a user runs it, in a process of its own: with ``--no-progress --json`` it loads no terminal
    UI (rich cost about a tenth of a second of every download's start before the bar was made only when shown)."""
    out = tmp_path / "out.bin"
    async with replicas(Replica(DATA), Replica(DATA)) as servers:
        argv = [*(server.url for server in servers), "-o", str(out), "--no-progress", "--json"]
        code = (
            "import json, sys\n"
            "from lnet.client.commands.get import main\n"
            f"code = main({argv!r})\n"
            "print(json.dumps({'exit': code, 'rich': sorted(m for m in sys.modules if m.split('.')[0] == 'rich')}))\n"
        )
        done = await trio.run_process([sys.executable, "-c", code], capture_stdout=True, capture_stderr=True)
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    assert json.loads(lines[0])["ok"] is True  # --json's outcome
    assert json.loads(lines[-1]) == {"exit": 0, "rich": []}
    assert out.read_bytes() == DATA


async def test_lnet_get_as_a_process_uses_the_connections_it_dialled_before_parsing(tmp_path: Path) -> None:
    """``python -m lnet.client.get`` (what the ``lnet-get`` script runs): every replica's host is dialled before the
    arguments are parsed, and the download reads its first range on that connection: one connection each."""
    out = tmp_path / "out.bin"
    async with replicas(Replica(DATA), Replica(DATA)) as servers:
        argv = [sys.executable, "-m", "lnet.client.get", *(server.url for server in servers), "-o", str(out),
                "--no-progress", "--json", "--tail", "none", "--history", str(tmp_path / "history.json")]
        done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True)
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout)["ok"] is True
    assert out.read_bytes() == DATA
    assert [server.connections for server in servers] == [1, 1]
    first = first_ranges(PlanConfig(), 2)
    assert [server.ranges[0] for server in servers] == [(start, min(end, len(DATA))) for start, end in first]
