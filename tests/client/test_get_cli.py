"""``lnet-get`` as people run it: the whole command (parsing, output, exit codes), Ctrl-C and resume.

Where the test is about what the command prints and returns, it runs in the test's loop (``get.run``) against
in-process depots through its ``ClientIO`` seam. Where it is about real sockets (the HTTP stack's timeouts) the
depots are served in the test's trio loop (hypercorn on port 0) and ``main`` runs its own ``trio.run`` in a worker
thread, or as a process where a real SIGINT is needed. ``Gate`` sits in front of a depot to count block reads and
stall them past a given number.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve

from lnet.client.commands import get
from lnet.client.commands.clientio import ClientIO
from lnet.client.commands.get import main
from lnet.client.exits import ExitCode
from lnet.client.fetching.blocks import decode_state, part_path, state_path
from lnet.client.formats.manifest import load
from lnet.client.wire.depot_client import DepotClient
from lnet.depot import Depot, DepotConfig

from ..depot.conftest import MakeDepot, Routes
from .blocks import upload_blocks

KiB = 1024
MiB = 1024 * KiB
BLOCK = 64 * KiB
DATA = os.urandom(8 * BLOCK + 7)  # 9 blocks
BLOCKS = 9


class Gate:
    """Counts block reads (``GET /v1/data/...``) reaching a depot and holds back every read past ``allow``."""

    def __init__(self, allow: float = float("inf")) -> None:
        self.allow = allow
        self.reads = 0
        self.held = trio.Event()  # set when a read is held back
        self.release = trio.Event()

    def wrap(self, app: Any) -> Any:
        async def gated(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["method"] == "GET" and scope["path"].startswith("/v1/data/"):
                self.reads += 1
                if self.reads > self.allow:
                    self.held.set()
                    await self.release.wait()
            await app(scope, receive, send)

        return gated


@asynccontextmanager
async def serving(tmp_path: Path, name: str, gate: Gate | None = None) -> AsyncIterator[str]:
    """A depot on 127.0.0.1, port 0, behind ``gate``; yields its base URL."""
    config = DepotConfig(
        name=name, listen="127.0.0.1:0", data_dir=tmp_path / "depots" / name, capacity=64 * MiB,
        max_allocation=16 * MiB, max_duration=3600,
    )
    hc = HypercornConfig()
    hc.bind = ["127.0.0.1:0"]
    hc.errorlog = None
    async with Depot(config) as depot, trio.open_nursery() as nursery:
        app = gate.wrap(depot.app) if gate else depot.app
        binds = await nursery.start(partial(hypercorn_serve, app, hc, mode="asgi"))
        yield binds[0]
        nursery.cancel_scope.cancel()


async def lnet_get(*argv: str) -> int:
    return await trio.to_thread.run_sync(main, list(argv))


async def test_lnet_get_fetches_over_real_sockets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with serving(tmp_path, "sunnyvale") as url, DepotClient(url) as client:
        manifest = await upload_blocks(DATA, client, block_size=BLOCK, name="data.bin", path=["ornl", "sunnyvale"])
        manifest.save(tmp_path / "data.manifest")
        out = tmp_path / "data.bin"
        started = trio.current_time()  # trio's real clock here: the run's own time bounds what it may report
        code = await lnet_get(str(tmp_path / "data.manifest"), "-o", str(out), "--json", "--parallel", "3")
        elapsed = trio.current_time() - started
    assert code == ExitCode.OK
    assert out.read_bytes() == DATA
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    assert report["path"] == str(out)
    assert (report["bytes"], report["fetched_bytes"], report["blocks"], report["resumed_blocks"]) == (
        len(DATA), len(DATA), BLOCKS, 0,
    )
    assert 0 < report["seconds"] <= elapsed
    assert report["mbps"] == pytest.approx(len(DATA) * 8 / report["seconds"] / 1e6, rel=1e-3)


async def test_the_plain_summary_line(
    open_depot: MakeDepot, routes: Routes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with open_depot("sunnyvale") as (_, client):
        (await upload_blocks(DATA, client, block_size=BLOCK)).save(tmp_path / "m.json")
        code = await get.run([str(tmp_path / "m.json"), "-o", str(tmp_path / "out")], io=ClientIO(transport=routes))
    assert code == ExitCode.OK
    assert (tmp_path / "out").read_bytes() == DATA
    out = capsys.readouterr().out
    assert f"{tmp_path / 'out'}: 512.0 KiB verified, 9 blocks, 512.0 KiB fetched in" in out


async def test_a_stalled_depot_is_bounded_by_the_timeout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stalled = Gate(allow=0)
    async with (
        serving(tmp_path, "stalled", stalled) as stalled_url,
        serving(tmp_path, "healthy") as healthy_url,
        DepotClient(stalled_url) as one,
        DepotClient(healthy_url) as two,
    ):
        only_stalled = await upload_blocks(DATA, one, block_size=BLOCK)
        only_stalled.save(tmp_path / "stalled.json")
        with_fallback = await upload_blocks(DATA, [one, two], block_size=BLOCK)
        with_fallback.save(tmp_path / "fallback.json")
        started = trio.current_time()
        code = await lnet_get(str(tmp_path / "stalled.json"), "-o", str(tmp_path / "a"), "--timeout", "0.3s")
        assert code == ExitCode.UNREACHABLE
        assert "timed out after 0.3s" in capsys.readouterr().err
        code = await lnet_get(
            str(tmp_path / "fallback.json"), "-o", str(tmp_path / "b"), "--timeout", "0.3", "--json"
        )
        assert trio.current_time() - started < 10
        stalled.release.set()
    assert code == ExitCode.OK
    assert (tmp_path / "b").read_bytes() == DATA
    assert json.loads(capsys.readouterr().out)["fallbacks"] >= 1


async def test_a_corrupted_block_exits_integrity_without_out(
    open_depot: MakeDepot, routes: Routes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with open_depot("sunnyvale") as (_, client):
        manifest = await upload_blocks(
            DATA, client, block_size=BLOCK, tamper=lambda i, _, data: data[::-1] if i == 2 else data
        )
        manifest.save(tmp_path / "m.json")
        code = await get.run([str(tmp_path / "m.json"), "-o", str(tmp_path / "out"), "--json"],
                             io=ClientIO(transport=routes))
    assert code == ExitCode.INTEGRITY
    assert not (tmp_path / "out").exists()
    captured = capsys.readouterr()
    failure = json.loads(captured.out)
    assert failure == {"ok": False, "exit": 4, "error": failure["error"], "path": str(tmp_path / "out")}
    assert "block 2" in failure["error"]
    assert f"lnet-get: {failure['error']}" in captured.err  # the message on stderr, the same in the JSON


async def test_ctrl_c_keeps_the_part_and_state_and_a_second_run_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gate = Gate(allow=3)
    out = tmp_path / "out.bin"
    async with serving(tmp_path, "sunnyvale", gate) as url, DepotClient(url) as client:
        manifest = await upload_blocks(DATA, client, block_size=BLOCK)
        manifest.save(tmp_path / "m.json")
        argv = [sys.executable, "-m", "lnet.client.get", str(tmp_path / "m.json"), "-o", str(out), "--parallel", "1"]
        with (tmp_path / "stderr").open("wb") as stderr:
            process = await trio.lowlevel.open_process(argv, stdin=subprocess.DEVNULL, stderr=stderr)
            try:
                with trio.fail_after(20):
                    await gate.held.wait()  # blocks 0-2 are in, block 3 is on its way
                    process.send_signal(signal.SIGINT)
                    code = await process.wait()
            finally:
                if process.returncode is None:
                    process.kill()
        assert code == ExitCode.INTERRUPTED, (tmp_path / "stderr").read_text()
        assert "run the same command to resume" in (tmp_path / "stderr").read_text()
        assert not out.exists()
        assert part_path(out).exists()
        assert decode_state(json.loads(state_path(out).read_text()), load(tmp_path / "m.json")) == {0, 1, 2}

        gate.release.set()
        reads_before = gate.reads
        code = await lnet_get(str(tmp_path / "m.json"), "-o", str(out), "--json")
    assert code == ExitCode.OK
    assert out.read_bytes() == DATA
    assert json.loads(capsys.readouterr().out)["resumed_blocks"] == 3
    assert gate.reads - reads_before == BLOCKS - 3


def test_an_invalid_manifest_is_a_usage_error_that_names_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "m.json").write_text('{"format": "lnet-manifest/1"}')
    assert main([str(tmp_path / "m.json"), "-o", str(tmp_path / "out")]) == ExitCode.USAGE
    assert "invalid manifest" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.json"), "-o", str(tmp_path / "out"), "--json"]) == ExitCode.USAGE
    captured = capsys.readouterr()
    assert "No such file" in captured.err
    assert json.loads(captured.out)["exit"] == ExitCode.USAGE


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["m.json"], "the following arguments are required: -o/--output"),
        (["m.json", "-o", "x", "--parallel", "0"], "must be between 1 and 256"),
        (["m.json", "-o", "x", "--timeout", "soon"], "not a duration"),
        (["m.json", "-o", "x", "--timeout", "0"], "must be more than 0"),
    ],
)
def test_bad_arguments_are_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == ExitCode.USAGE
    assert message in capsys.readouterr().err


def test_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "4    integrity" in out
    assert "130  interrupted" in out
