"""``./run demo``: the depot protocol end to end, on this machine, narrated.

Starts two ``lnet-depot`` processes on loopback (port 0, throw-away data directories) and walks an allocation
through its life: allocate, write, ranged read, depot-to-depot copy, the links it leaves in the status,
extension, and expiry. Every step checks its outcome; the exit status is 0 only when all of them held.
``./run demo --local`` runs it (the main job, ``./run demo``, is the testbed experiment in ``lnet.testbed.demo``);
it runs the depot program as an operator would, and imports nothing of the server.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
from rich.console import Console
from rich.table import Table

from lnet.client.exits import run_interruptible
from lnet.client.wire.depot_client import DepotClient, NotFound
from lnet.units import format_size, parse_size

__all__ = ["main"]

console = Console(highlight=False)

# How long a depot may take to say it serves (a cold interpreter loads starlette and hypercorn first).
STARTUP_TIMEOUT_S = 30.0
_SERVING = re.compile(rb"serving on (\S+)")


class DemoFailed(Exception):
    pass


def check(condition: bool, what: str) -> None:
    if not condition:
        raise DemoFailed(what)
    console.print(f"  [green]ok[/green]  {what}")


async def demo(block_size: int, expire_s: float) -> None:
    with tempfile.TemporaryDirectory(prefix="lnet-demo-") as tmp:
        async with trio.open_nursery() as nursery:
            urls = [
                await nursery.start(run_depot, name, Path(tmp) / name, block_size) for name in ("ornl", "sunnyvale")
            ]
            console.print(f"[bold]1. two depots[/bold]: ornl at {urls[0]}, sunnyvale at {urls[1]}")
            async with DepotClient(urls[0]) as ornl, DepotClient(urls[1]) as sunnyvale:
                await walk(ornl, sunnyvale, block_size, expire_s)
            nursery.cancel_scope.cancel()


async def run_depot(
    name: str, data_dir: Path, block_size: int, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
) -> None:
    """An ``lnet-depot`` process on 127.0.0.1, port 0, until cancelled; reports its URL once it serves."""
    argv = [sys.executable, "-m", "lnet.depot.cli", "--listen", "127.0.0.1:0", "--name", name, "--data-dir",
            str(data_dir), "--capacity", str(4 * block_size), "--max-allocation", str(2 * block_size),
            "--max-duration", "1h", "--log-level", "warning"]
    process = await trio.lowlevel.open_process(argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert process.stderr is not None
        said, serving = b"", None
        with trio.move_on_after(STARTUP_TIMEOUT_S):
            async for piece in process.stderr:
                said += piece
                if (serving := _SERVING.search(said)) is not None:
                    task_status.started(serving.group(1).decode())
                    break
        if serving is None:
            raise DemoFailed(f"depot {name} did not start: {said.decode(errors='replace').strip()}")
        async for _ in process.stderr:  # drained, so that the depot never blocks on a full pipe
            pass
    finally:
        process.terminate()
        with trio.CancelScope(shield=True):
            await process.wait()


async def walk(ornl: DepotClient, sunnyvale: DepotClient, block_size: int, expire_s: float) -> None:
    console.print(f"[bold]2. allocate[/bold] {format_size(block_size)} at each depot for 10 minutes")
    source = await ornl.allocate_one(block_size, 600)
    target = await sunnyvale.allocate_one(block_size, 600)
    console.print(f"  capabilities (shown cut short, they are secrets): read {source.read[:6]}…, "
                  f"write {source.write[:6]}…, manage {source.manage[:6]}…")
    check((await ornl.status())["used"] == block_size, "ornl counts the allocation against its capacity")

    console.print(f"[bold]3. write[/bold] {format_size(block_size)} of random bytes into ornl")
    payload = os.urandom(block_size)
    digest = hashlib.sha256(payload).hexdigest()
    started = time.perf_counter()
    length = await ornl.write(source.write, payload)
    rate = block_size / (time.perf_counter() - started) / 1e6
    check(length == block_size, f"ornl holds {format_size(length)} ({rate:.0f} MB/s)")

    console.print("[bold]4. read[/bold] the whole block back, and a range of it")
    check(hashlib.sha256(await ornl.read(source.read)).hexdigest() == digest, f"sha256 {digest[:16]}… matches")
    check(await ornl.read(source.read, 1000, 1016) == payload[1000:1016], "bytes 1000..1016 match")
    try:
        await ornl.read(source.write)
        check(False, "a write capability cannot read")
    except NotFound:
        check(True, "a write capability cannot read (404, like an unknown one)")

    console.print("[bold]5. copy[/bold] ornl -> sunnyvale, pushed by the depot itself")
    result = await ornl.copy(source.read, target.write_url)
    check(result.nbytes == block_size, f"{format_size(result.nbytes)} in {result.seconds * 1000:.1f} ms "
          f"({result.nbytes / result.seconds / 1e6:.0f} MB/s)")
    check(hashlib.sha256(await sunnyvale.read(target.read)).hexdigest() == digest, "sunnyvale's copy is identical")
    links = (await ornl.status())["links"]
    check(len(links) == 1 and links[0]["to"] == sunnyvale.base_url,
          f"ornl's status reports the link: {links[0]['mbps']:.0f} Mbit/s to {links[0]['to']}")

    console.print(f"[bold]6. expire[/bold]: an allocation for {expire_s:g} s")
    short = await ornl.allocate_one(block_size, expire_s)
    await ornl.write(short.write, payload[:4096])
    probe = await ornl.probe(short.manage)
    until = time.strftime("%H:%M:%S", time.localtime(probe.expires))
    check(probe.length == 4096, f"it holds {probe.length} bytes until {until}")
    await trio.sleep(expire_s + 1.0)
    try:
        await ornl.read(short.read)
        check(False, "an expired allocation is gone")
    except NotFound:
        check(True, "after expiry it answers 404 not_found")
    check((await ornl.status())["used"] == block_size, "its memory was reclaimed (only the first block is held)")

    console.print("[bold]7. extend and free[/bold]")
    new_expiry = await ornl.extend(source.manage, 600)
    check(new_expiry > source.expires, "extend pushed the expiry further")
    await ornl.free(source.manage)
    await sunnyvale.free(target.manage)
    check((await ornl.status())["used"] == 0 and (await sunnyvale.status())["used"] == 0, "both depots are empty")

    table = Table(title="depot status after the demo")
    for column in ("depot", "capacity", "used", "allocations", "links"):
        table.add_column(column)
    for client in (ornl, sunnyvale):
        status = await client.status()
        table.add_row(status["name"], format_size(status["capacity"]), format_size(status["used"]),
                      str(status["allocations"]), str(len(status["links"])))
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lnet demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--block-size", default="16MiB", help="bytes per block (default 16MiB)")
    parser.add_argument("--expire", type=float, default=2.0, help="lifetime of the expiring allocation, seconds")
    args = parser.parse_args(argv)
    try:
        block_size = parse_size(args.block_size)
    except ValueError as exc:
        parser.error(str(exc))
    if block_size < 64 * 1024 or args.expire < 1:
        parser.error("--block-size must be at least 64KiB and --expire at least 1 second")
    try:
        run_interruptible(demo, block_size, args.expire)
    except DemoFailed as exc:
        console.print(f"[red]FAILED[/red]: {exc}")
        return 1
    console.print("[bold green]the depot round trip worked[/bold green]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
