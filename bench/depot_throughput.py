"""Depot throughput on loopback, against a plain TCP baseline; and the depot's memory while full.

    ./run bench depot_throughput [--total 512MiB] [--block 8MiB] [--repeat 3]

(a) raw: a plain TCP sender (trio) and receiver (a blocking socket reading into a preallocated buffer, in its
    own process) moving the same bytes; (b) write: DepotClient.write of every block into a depot process;
(c) read: DepotClient.read_into of every block back; (d) copy: depot-to-depot copy of every block between two
depot processes. One connection each, blocks one after another. Each figure is the best of --repeat runs.
Prints a table, then one JSON line. Targets (issue 2): write and read >= 50% of raw, copy >= 40% of raw, the
depot's resident memory under its capacity + 64 MiB while full.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lnet.client.wire.depot_client import DepotClient  # noqa: E402
from lnet.depot.units import parse_size  # noqa: E402
from tests.depot.processes import depot_process  # noqa: E402

MiB = 1024 * 1024

RECEIVER = r"""
import socket, sys
total = int(sys.argv[1])
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)
print(listener.getsockname()[1], flush=True)
conn, _ = listener.accept()
buffer = bytearray(8 * 1024 * 1024)
view = memoryview(buffer)
got = 0
while got < total:
    n = conn.recv_into(view)
    if n == 0:
        break
    got += n
conn.sendall(b"k")
conn.close()
"""


SINK = r"""
import sys, trio
from hypercorn.config import Config
from hypercorn.trio import serve
import lnet.depot.server  # noqa: F401  (the same hypercorn receive size as a depot)
BODY = bytes(int(sys.argv[1]))
async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    if scope["method"] == "PUT":
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    headers = [(b"content-length", str(len(BODY)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": BODY})
async def main():
    config = Config()
    config.bind = ["127.0.0.1:0"]
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(lambda task_status: serve(app, config, task_status=task_status))
        print(binds[0], flush=True)
trio.run(main)
"""


async def spawn_reporting(argv: list[str]) -> tuple[trio.Process, str]:
    """Start a helper process and read the one line it prints when it is ready (its port or URL)."""
    process = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE)
    assert process.stdout is not None
    line = b""
    with trio.fail_after(30):
        while not line.endswith(b"\n"):
            chunk = await process.stdout.receive_some(1)
            if not chunk:
                raise RuntimeError(f"{argv[:3]} exited before it was ready")
            line += chunk
    return process, line.decode().strip()


async def http_ceiling(total: int, block: bytes, repeat: int) -> dict[str, float]:
    """hypercorn + h11 with an app that does nothing with the bytes, through the same DepotClient."""
    sink, url = await spawn_reporting([sys.executable, "-c", SINK, str(len(block))])
    best = {"write": 0.0, "read": 0.0}
    buffer = bytearray(len(block))
    try:
        async with DepotClient(url, max_connections=1) as client:
            for _ in range(repeat):
                started = time.perf_counter()
                for _ in range(total // len(block)):
                    await client.write("A" * 32, block)
                best["write"] = max(best["write"], total / (time.perf_counter() - started))
                started = time.perf_counter()
                for _ in range(total // len(block)):
                    await client.read_into("A" * 32, buffer)
                best["read"] = max(best["read"], total / (time.perf_counter() - started))
    finally:
        sink.kill()
        await sink.wait()
    return best


async def raw_baseline(total: int, block: bytes) -> float:
    receiver, port = await spawn_reporting([sys.executable, "-c", RECEIVER, str(total)])
    stream = await trio.open_tcp_stream("127.0.0.1", int(port))
    started = time.perf_counter()
    sent = 0
    while sent < total:
        await stream.send_all(block)
        sent += len(block)
    await stream.receive_some(1)
    elapsed = time.perf_counter() - started
    await stream.aclose()
    await receiver.wait()
    return total / elapsed


async def depot_runs(total: int, block: bytes, repeat: int) -> dict[str, float]:
    count = total // len(block)
    capacity = str(total + 64 * MiB)
    common = ["--capacity", capacity, "--max-allocation", str(len(block)), "--log-level", "warning"]
    with tempfile.TemporaryDirectory() as tmp:
        async with (
            depot_process("--data-dir", f"{tmp}/a", *common) as a,
            depot_process("--data-dir", f"{tmp}/b", *common) as b,
            DepotClient(a.url, max_connections=1) as one,
            DepotClient(b.url, max_connections=1) as two,
        ):
            best = {"write": 0.0, "read": 0.0, "copy": 0.0}
            rss_full = 0
            buffer = bytearray(len(block))
            for _ in range(repeat):
                sources = await one.allocate(len(block), 600, count=count)
                targets = await two.allocate(len(block), 600, count=count)
                started = time.perf_counter()
                for alloc in sources:
                    await one.write(alloc.write, block)
                best["write"] = max(best["write"], total / (time.perf_counter() - started))
                rss_full = max(rss_full, psutil.Process(a.process.pid).memory_info().rss)
                started = time.perf_counter()
                for alloc in sources:
                    await one.read_into(alloc.read, buffer)
                best["read"] = max(best["read"], total / (time.perf_counter() - started))
                assert buffer == block
                started = time.perf_counter()
                for source, target in zip(sources, targets, strict=True):
                    await one.copy(source.read, target.write_url)
                best["copy"] = max(best["copy"], total / (time.perf_counter() - started))
                for alloc in sources:
                    await one.free(alloc.manage)
                for alloc in targets:
                    await two.free(alloc.manage)
            best["rss_full"] = rss_full
            best["capacity"] = float(capacity)
            await trio.sleep(1.5)  # freed buffers wait half a second in the depot's pool before they are unmapped
            best["rss_after_free"] = psutil.Process(a.process.pid).memory_info().rss
    return best


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total", default="512MiB", help="bytes moved per run (default 512MiB)")
    parser.add_argument("--block", default="8MiB", help="block (allocation) size (default 8MiB)")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best is reported (default 3)")
    args = parser.parse_args(argv)
    total, block_size = parse_size(args.total), parse_size(args.block)
    total -= total % block_size
    block = os.urandom(block_size)
    raw = max([await raw_baseline(total, block) for _ in range(args.repeat)])
    ceiling = await http_ceiling(total, block, args.repeat)
    depot = await depot_runs(total, block, args.repeat)
    rows = [("raw TCP", raw, 1.0, "baseline")]
    note = "hypercorn+h11 and httpx, app ignores the bytes"
    rows += [(f"http {k}", ceiling[k], ceiling[k] / raw, note) for k in ceiling]
    for name, target in (("write", 0.5), ("read", 0.5), ("copy", 0.4)):
        ratio = depot[name] / raw
        verdict = "met" if ratio >= target else "MISSED"
        of_http = depot[name] / ceiling.get(name, ceiling["write"])
        rows.append((f"depot {name}", depot[name], ratio, f"target >= {target:.0%}: {verdict}; {of_http:.0%} of http"))
    print(f"depot throughput on loopback, {total // MiB} MiB in {block_size // MiB} MiB blocks, best of {args.repeat}")
    print(f"{'path':<12} {'MB/s':>9} {'of raw':>8}  note")
    for name, rate, ratio, note in rows:
        print(f"{name:<12} {rate / 1e6:>9.1f} {ratio:>8.0%}  {note}")
    limit = depot["capacity"] + 64 * MiB
    memory_ok = depot["rss_full"] <= limit
    print(
        f"depot RSS while full: {depot['rss_full'] / MiB:.0f} MiB (capacity {depot['capacity'] / MiB:.0f} MiB, "
        f"limit {limit / MiB:.0f} MiB: {'met' if memory_ok else 'MISSED'}); after freeing: "
        f"{depot['rss_after_free'] / MiB:.0f} MiB"
    )
    result = {
        "bench": "depot_throughput",
        "total_bytes": total,
        "block_bytes": block_size,
        "raw_MBps": raw / 1e6,
        **{f"http_{k}_MBps": ceiling[k] / 1e6 for k in ceiling},
        **{f"{k}_MBps": depot[k] / 1e6 for k in ("write", "read", "copy")},
        **{f"{k}_ratio": depot[k] / raw for k in ("write", "read", "copy")},
        "rss_full_bytes": depot["rss_full"],
        "rss_limit_bytes": limit,
        "rss_after_free_bytes": depot["rss_after_free"],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(main))
