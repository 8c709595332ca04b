"""``lnet-send`` killed with -9 (or stopped with Ctrl-C) and run again: real processes on loopback.

The destination is a real depot process (``tests/depot/processes.py``) behind a gate (``tests/client/gate.py``)
that holds requests from a chosen point on, so that the first ``lnet-send`` process is stopped exactly there (the
gate says when a request is held; the journal, read until it holds them since another process writes it, says
which blocks arrived) before it is killed. The same command
then runs again with the gate open. It must exit 0 with the manifest a single run writes (fetched with lnet-get:
the same bytes), remove its journal, and write to the depot only the blocks the journal did not hold: the
depot's own count of writes (``/metrics``) says so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

from lnet.client.fetching.blocks import get_file
from lnet.client.fetching.tree import get_directory
from lnet.client.formats import tree
from lnet.client.formats.manifest import load as load_manifest
from lnet.client.sending import journal
from lnet.client.sending.resume import resume_command
from lnet.client.wire.depot_client import DepotClient, NotFound

from ..depot.processes import DepotProcess, depot_process
from .gate import Gate
from .http_replicas import Replica, replicas

MiB = 1024 * 1024
BLOCKS = 10
SIZE = 9 * MiB + 777  # 10 blocks of 1 MiB
WAIT_S = 60  # a bound on every wait for the other process, never a pause


@pytest.fixture
def payload(tmp_path: Path) -> Path:
    path = tmp_path / "payload.bin"
    path.write_bytes(os.urandom(SIZE))
    return path


@asynccontextmanager
async def destination(tmp_path: Path) -> AsyncIterator[tuple[DepotProcess, Gate]]:
    """The depot ``c`` as a process, and the gate the client reaches it through (in the depots file)."""
    async with depot_process("--name", "c", "--data-dir", str(tmp_path / "data-c")) as depot, \
            trio.open_nursery() as nursery:
        gate = Gate(depot.url)
        await nursery.start(gate.serve)
        (tmp_path / "depots.toml").write_text(f'here = "me"\n[depots.c]\nurl = "{gate.url}"\n')
        yield depot, gate
        nursery.cancel_scope.cancel()


def command(tmp_path: Path, source: list[str], manifest: Path, *extra: str) -> list[str]:
    return [*source, "--to", "c", "--depots", str(tmp_path / "depots.toml"), "--path", "c", "--block-size", "1MiB",
            "--manifest", str(manifest), "--memory", str(tmp_path / "edges.json"), "--cold", "--no-progress",
            "--json", "--timeout", "60s", *extra]


async def start(argv: list[str], tmp_path: Path) -> trio.Process:
    log = (tmp_path / "first.log").open("wb")
    try:
        return await trio.lowlevel.open_process([sys.executable, "-m", "lnet.client.send", *argv],
                                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=tmp_path)
    finally:
        log.close()


async def run(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(WAIT_S):
        return await trio.run_process([sys.executable, "-m", "lnet.client.send", *argv], capture_stdout=True,
                                      capture_stderr=True, check=False, cwd=tmp_path)


async def depot_writes(depot: DepotProcess) -> int:
    """The writes the depot has taken (``PUT /v1/data``), by its own /metrics."""
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"{depot.url}/metrics")).text
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("lnet_depot_requests_total{") and 'operation="write"' in line
               and 'status="2' in line)


async def settled_writes(depot: DepotProcess, gate: Gate) -> int:
    """The block writes the depot has taken, once its count holds every write the gate forwarded: its count of
    2xx writes less the publications' (the gate tells a publication from a block by its body).

    The depot counts an answer just after sending it, so a count read the moment a client exits may miss the last
    one: the count is read until it holds as many as went through the gate (bounded by WAIT_S). Only answers
    that were 2xx count on either side: a publication the depot refused, and written again, is not a block.
    """
    forwarded = gate.forwarded["write"] + gate.forwarded["publish"]
    with trio.fail_after(WAIT_S):
        while True:  # the depot's own count, read over HTTP: nothing to wait on but the next read
            writes = await depot_writes(depot)
            if writes >= forwarded:
                return writes - gate.forwarded["publish"]
            await trio.sleep(0.01)


async def blocks_written(depot: DepotProcess, gate: Gate, before: int) -> int:
    """The block writes the depot took since ``before`` (a ``settled_writes``)."""
    return await settled_writes(depot, gate) - before


async def recorded(where: Path, count: int) -> dict[int, object]:
    """The journal's records once it holds ``count`` (the other process writes them; checked until then)."""
    with trio.fail_after(WAIT_S):
        while True:
            decoded = journal.decode(await trio.Path(where).read_bytes()) if await trio.Path(where).exists() else None
            if decoded is not None and decoded.header is not None and len(decoded.records) >= count:
                assert len(decoded.records) == count  # the gate lets no more through
                return dict(decoded.records)
            await trio.sleep(0.01)


async def opened(gate: Gate, depot: DepotProcess) -> int:
    """Open the gate for the next run once what the killed one sent has landed; the depot's writes until then."""
    gate.next_run()
    with trio.fail_after(WAIT_S):
        await gate.quiet()
    gate.passed.clear()
    return await settled_writes(depot, gate)


def digests_after(n: int) -> Callable[[str, Counter[str]], bool]:
    return lambda operation, passed: operation == "digest" and passed["digest"] >= n


KILL_POINTS = {
    # every block write is held: the journal has its header and no block
    "before the first block": (lambda operation, passed: operation == "write", 0),
    # four blocks verified at the destination; the others' digests are held
    "mid-transfer": (digests_after(4), 4),
    # the last block written and its digest held: every byte is at the destination, nine blocks are recorded, the
    # last one is not and is sent again. (Between the last block's record and the manifest lnet-send now asks the
    # depot nothing, since it allocates only what its blocks take, so no request marks that point for a kill;
    # test_send_resume.py resumes from a journal holding every block, in process.)
    "at the last block": (digests_after(BLOCKS - 1), BLOCKS - 1),
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
async def test_killed_then_the_same_command_resumes(tmp_path: Path, payload: Path, point: str) -> None:
    hold, count = KILL_POINTS[point]
    manifest = tmp_path / "payload.manifest.json"
    where = tmp_path / "payload.manifest.json.journal"
    argv = command(tmp_path, [str(payload)], manifest)
    async with destination(tmp_path) as (depot, gate):
        gate.hold = hold
        first = await start(argv, tmp_path)
        with trio.fail_after(WAIT_S):
            await gate.held.wait()
        await recorded(where, count)
        first.kill()
        assert await first.wait() == -signal.SIGKILL
        assert not manifest.exists()
        assert where.stat().st_mode & 0o777 == 0o600
        before = await opened(gate, depot)
        again = await run(argv, tmp_path)
        assert again.returncode == 0, again.stderr.decode()
        summary = json.loads(again.stdout)
        assert summary["resumed_blocks"] == count
        # no block the destination held is sent again: by the depot's count, and by the gate's
        assert await blocks_written(depot, gate, before) == BLOCKS - count
        assert gate.passed["write"] == BLOCKS - count
        assert gate.passed["digest"] == BLOCKS  # the held ones checked, the others verified
        assert not where.exists()
        document = load_manifest(manifest)
        assert len(document.blocks) == BLOCKS
        out = tmp_path / "fetched.bin"
        await get_file(document, out)
        assert out.read_bytes() == await trio.Path(payload).read_bytes()


async def test_ctrl_c_says_how_to_resume(tmp_path: Path, payload: Path) -> None:
    manifest = tmp_path / "payload.manifest.json"
    where = tmp_path / "payload.manifest.json.journal"
    argv = command(tmp_path, [str(payload)], manifest, "--restart")
    async with destination(tmp_path) as (depot, gate):
        gate.hold = digests_after(3)
        first = await start(argv, tmp_path)
        with trio.fail_after(WAIT_S):
            await gate.held.wait()
        await recorded(where, 3)
        first.send_signal(signal.SIGINT)
        with trio.move_on_after(WAIT_S):
            await first.wait()
        stopped = first.returncode is not None
        if not stopped:
            first.kill()  # not left running into the next test
            await first.wait()
        said = (tmp_path / "first.log").read_text()
        assert stopped, said
        assert first.returncode == 130, said
        assert f"to resume, run the same command again: {resume_command(argv)}" in said
        assert "--restart" not in resume_command(argv)
        before = await opened(gate, depot)
        again = await run(argv[:-1], tmp_path)  # the command it printed
        assert again.returncode == 0, again.stderr.decode()
        assert await blocks_written(depot, gate, before) == BLOCKS - 3
        out = tmp_path / "fetched.bin"
        await get_file(load_manifest(manifest), out)
        assert out.read_bytes() == await trio.Path(payload).read_bytes()


async def test_a_file_changed_between_runs_is_refused_until_restart(tmp_path: Path, payload: Path) -> None:
    manifest = tmp_path / "payload.manifest.json"
    where = tmp_path / "payload.manifest.json.journal"
    argv = command(tmp_path, [str(payload)], manifest)
    async with destination(tmp_path) as (depot, gate):
        gate.hold = digests_after(4)
        first = await start(argv, tmp_path)
        with trio.fail_after(WAIT_S):
            await gate.held.wait()
        old = await recorded(where, 4)
        first.kill()
        await first.wait()
        await opened(gate, depot)
        data = bytearray(await trio.Path(payload).read_bytes())
        data[5] ^= 0xFF  # block 0 was sent; now it is something else
        await trio.Path(payload).write_bytes(bytes(data))
        refused = await run(argv, tmp_path)
        assert refused.returncode == 2
        message = refused.stderr.decode()
        assert "changed since" in message, message
        assert "--restart" in message, message
        assert not manifest.exists()
        assert await trio.Path(where).exists()  # nothing lost: the choice is still the user's
        before = await settled_writes(depot, gate)
        gate.passed.clear()
        again = await run([*argv, "--restart"], tmp_path)
        assert again.returncode == 0, again.stderr.decode()
        assert json.loads(again.stdout)["resumed_blocks"] == 0
        assert await blocks_written(depot, gate, before) == BLOCKS
        async with DepotClient(depot.url) as direct:
            for block in old.values():  # the blocks of the old content were freed
                with pytest.raises(NotFound):
                    await direct.digest(block.allocation.read)  # type: ignore[attr-defined]
        out = tmp_path / "fetched.bin"
        await get_file(load_manifest(manifest), out)
        assert out.read_bytes() == bytes(data)


async def test_a_tree_resumes(tmp_path: Path) -> None:
    root = tmp_path / "photos"
    (root / "sub").mkdir(parents=True)
    contents = {f"big{i}.bin": os.urandom(MiB + 1000 * i) for i in range(4)}
    contents.update({f"sub/small{i}.txt": os.urandom(3000 + i) for i in range(30)})
    for relative, data in contents.items():
        (root / relative).write_bytes(data)
    manifest = tmp_path / "photos.manifest.json"
    where = tmp_path / "photos.manifest.json.journal"
    argv = command(tmp_path, [str(root)], manifest)
    async with destination(tmp_path) as (depot, gate):
        gate.hold = digests_after(2)
        first = await start(argv, tmp_path)
        with trio.fail_after(WAIT_S):
            await gate.held.wait()
        await recorded(where, 2)
        first.kill()
        await first.wait()
        before = await opened(gate, depot)
        again = await run(argv, tmp_path)  # plans for the BDP the journal recorded: the same blocks
        assert again.returncode == 0, again.stderr.decode()
        assert json.loads(again.stdout)["resumed_blocks"] == 2
        document = tree.load(manifest)
        assert await blocks_written(depot, gate, before) == len(document.stream.blocks) - 2
        out = tmp_path / "rebuilt"
        await get_directory(document, out)
        for relative, data in contents.items():
            assert (out / relative).read_bytes() == data


async def test_a_send_from_replicas_resumes_from_its_spool(tmp_path: Path) -> None:
    data = os.urandom(SIZE)
    manifest = tmp_path / "file.manifest.json"
    where = tmp_path / "file.manifest.json.journal"
    spool = tmp_path / "spool"
    async with replicas(Replica(data)) as (replica,), destination(tmp_path) as (depot, gate):
        argv = command(tmp_path, ["--source", replica.url, "--spool", str(spool)], manifest)
        gate.hold = digests_after(4)
        first = await start(argv, tmp_path)
        with trio.fail_after(WAIT_S):
            await gate.held.wait()
        await recorded(where, 4)
        first.kill()
        await first.wait()
        assert any(spool.iterdir())  # kept for the resume
        before = await opened(gate, depot)
        again = await run(argv, tmp_path)
        assert again.returncode == 0, again.stderr.decode()
        assert json.loads(again.stdout)["resumed_blocks"] == 4
        assert await blocks_written(depot, gate, before) == BLOCKS - 4
        assert not any(spool.iterdir())  # removed with the journal
        out = tmp_path / "fetched.bin"
        await get_file(load_manifest(manifest), out)
        assert out.read_bytes() == data
