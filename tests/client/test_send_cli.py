"""``lnet-send`` and ``lnet-get`` as a person runs them: the whole command (parsing, output, exit codes).

Each command runs in the test's loop (``send.run``, ``get.run``) on the emulated depot network
(tests/client/network.py) through its ``ClientIO`` seam, on trio's autojump clock. The same commands over real
sockets, against real ``lnet-depot`` processes, are run by tests/client/test_tree.py
(``test_a_tree_round_trip_restores_everything``: ``send.main`` and ``get.main`` with their default transport).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import trio

from lnet.client.commands import get, send, send_args
from lnet.client.commands.clientio import ClientIO
from lnet.client.exits import ExitCode

from .network import MiB, Network, depots, inline


@pytest.fixture
def payload(tmp_path: Path) -> Path:
    path = tmp_path / "payload.bin"
    path.write_bytes(os.urandom(9 * MiB + 777))
    return path


def emulated_depots_file(tmp_path: Path, network: Network, names: list[str], here: str = "me") -> Path:
    path = tmp_path / "depots.toml"
    path.write_text(f'here = "{here}"\n' + "".join(f'[depots.{n}]\nurl = "{network.url(n)}"\n' for n in names))
    return path


def emulated(network: Network) -> ClientIO:
    return ClientIO(transport=network.transport("here"), offload=inline)


async def test_send_through_a_pinned_chain_then_get(
    tmp_path: Path, payload: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    io = emulated(network)
    config = emulated_depots_file(tmp_path, network, ["a", "b", "c"])
    async with depots(network, ["a", "b", "c"], tmp_path):
        manifest = tmp_path / "payload.manifest.json"
        memory = tmp_path / "edges.json"
        code = await send.run([str(payload), "--to", "c", "--depots", str(config), "--path", "a,b",
                               "--block-size", "1MiB", "--manifest", str(manifest), "--memory", str(memory),
                               "--json"], io=io)
        assert code == ExitCode.OK
        data = await trio.Path(payload).read_bytes()
        summary = json.loads(capsys.readouterr().out)
        assert summary["path"] == ["me", "a", "b", "c"]
        assert summary["blocks"] == 10
        assert {(e["from"], e["to"]) for e in summary["edges"]} == {("me", "a"), ("a", "b"), ("b", "c")}
        assert manifest.stat().st_mode & 0o777 == 0o600
        document = json.loads(manifest.read_text())
        assert document["size"] == len(data)
        assert {s["depot"] for b in document["blocks"] for s in b["sources"]} == {network.url("c")}
        assert json.loads(memory.read_text())  # the edges were remembered for a warm start
        # the bytes went down the pinned chain, not straight to c
        assert network.bytes_sent[("a", "b")] >= len(data)
        assert network.bytes_sent[("b", "c")] >= len(data)
        assert network.bytes_sent.get(("here", "c"), 0) < MiB
        out = tmp_path / "fetched.bin"
        assert await get.run([str(manifest), "-o", str(out), "--no-progress"], io=io) == ExitCode.OK
        assert out.read_bytes() == data


async def test_warm_start_with_the_scheduler(
    tmp_path: Path, payload: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()  # 10 MiB/s on every link but the direct one: me -> a -> c is the wider path
    network.set_rate("here", "c", MiB)
    io = emulated(network)
    config = emulated_depots_file(tmp_path, network, ["a", "c"])
    async with depots(network, ["a", "c"], tmp_path):
        memory = tmp_path / "edges.json"
        argv = [str(payload), "--to", "c", "--depots", str(config), "--memory", str(memory), "--json",
                "--manifest", str(tmp_path / "m.json"), "--block-size", "1MiB"]
        trace = tmp_path / "cold.trace.jsonl"
        # one path: with a scout beside the slow direct path (from 3 s) the cold run ends before it re-evaluates
        cold_argv = [*argv, "--cold", "--trace", str(trace), "--max-paths", "1"]
        assert await send.run(cold_argv, io=io) == ExitCode.OK
        cold = json.loads(capsys.readouterr().out)
        assert await send.run(argv, io=io) == ExitCode.OK
        warm = json.loads(capsys.readouterr().out)
    assert cold["path"][0] == warm["path"][0] == "me"
    assert warm["path"] == ["me", "a", "c"]  # what the cold run learnt: the wider path, not the direct one
    assert warm["path_attempts"][0]["path"] == warm["path"]  # no exploring: the remembered path at once
    # --trace: what the cold start was told and decided, enough to see why it left the direct path
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    kinds = {line["kind"] for line in lines}
    assert {"measure", "decision", "probe-done", "block"} <= kinds
    arrived = [line for line in lines if line["kind"] == "block"]  # each block once, with the path it counted on
    assert sorted(b["block"] for b in arrived) == list(range(cold["blocks"]))
    assert all(b["path"][0] == "me" and b["path"][-1] == "c" and not b["second"] for b in arrived)
    assert lines[0] == {**lines[0], "kind": "decision", "decision": "Switch", "reason": "start",
                        "paths": [["me", "c"]], "predicted_mbps": None}
    assert {tuple(m["edge"]) for m in lines if m["kind"] == "measure" and m["probe"]} >= {("me", "a"), ("a", "c")}
    assert isinstance(lines[0]["rtt_ms"], dict)  # the round trips that order the first probes
    samples = [m for m in lines if m["kind"] == "measure"]
    # when each sample's first copy began (the warm-up rule's clock), never after the sample was taken
    assert all(m["began"] is None or m["began"] <= m["t"] for m in samples)
    assert any(m["began"] is not None for m in samples)
    decisions = [d for d in lines if d["kind"] == "decision"]
    assert all(edge in d["probes"] for d in decisions for edge in d["deep"])  # deep probes are among the probes
    evaluated = [d for d in decisions if d["t"] > 0 and "weights_mbps" in d]  # re-evaluations, not probe asks
    assert evaluated
    assert set(evaluated[0]["weights_mbps"]) >= {"me>a", "a>c"}  # what the re-evaluation compared
    assert set(evaluated[0]["ceilings_mbps"]) <= set(evaluated[0]["weights_mbps"])  # floors only


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--to", "nowhere"], "no such depot"),
        (["--to", "c", "--path", "a,zz"], "unknown depot"),
        (["--to", "c", "--path", "a,a"], "only once"),
        (["--to", "c", "--block-size", "huge"], "not a size"),
    ],
)
def test_usage_errors(
    tmp_path: Path, payload: Path, argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "depots.toml"
    config.write_text('here = "me"\n[depots.a]\nurl = "http://127.0.0.1:9"\n[depots.c]\nurl = "http://127.0.0.1:9"\n')
    assert send.main([str(payload), "--depots", str(config), *argv]) == ExitCode.USAGE
    assert needle in capsys.readouterr().err


def test_missing_file_and_bad_depots_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "depots.toml"
    config.write_text('here = "me"\n[depots.c]\nurl = "ftp://example.org"\n')
    assert send.main([str(tmp_path / "absent"), "--to", "c", "--depots", str(config)]) == ExitCode.USAGE
    assert "url must be http(s)" in capsys.readouterr().err
    config.write_text('here = "me"\n[depots.c]\nurl = "http://127.0.0.1:9"\n')  # a good file: now the missing one
    assert send.main([str(tmp_path / "absent"), "--to", "c", "--depots", str(config)]) == ExitCode.USAGE
    assert f"{tmp_path / 'absent'}: not a readable file or directory" in " ".join(capsys.readouterr().err.split())


async def test_an_unreachable_destination_exits_3(
    tmp_path: Path, payload: Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.abc.Clock
) -> None:
    network = Network()
    config = emulated_depots_file(tmp_path, network, ["c"])
    async with depots(network, ["c"], tmp_path):
        network.dead.add("c")  # refuses every connection, as a depot killed with -9
        started = trio.current_time()
        code = await send.run([str(payload), "--to", "c", "--depots", str(config), "--timeout", "2s",
                               "--memory", str(tmp_path / "m.json")], io=emulated(network))
    assert code == ExitCode.UNREACHABLE
    assert "does not answer" in capsys.readouterr().err
    assert trio.current_time() - started < 60  # it gives up, it does not wait for a depot that is gone


@pytest.mark.parametrize("where", ["missing/trace.jsonl", "."])
def test_a_trace_file_that_cannot_be_written_is_a_usage_error_before_anything_is_sent(
    tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        send_args.SendArgs.parse(["f", "--to", "c", "--trace", str(tmp_path / where)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--trace" in err
    assert "Traceback" not in err
