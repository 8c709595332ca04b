"""Depot throughput on loopback, each figure beside a plain TCP socket measured in the same run.

    flock /tmp/lnet-testbed.lock ./run bench depot_throughput [--total 256MiB] [--block 8MiB] [--runs 5]
        [--chain-only | --no-chain] [--duration 10m] [--no-fast-path] [--no-prefault]

Every run measures, one after another (so that a noisy neighbour hits them all alike):
  raw TCP       a trio sender and a blocking ``recv_into`` receiver in its own process: the reference;
  client        ``DepotClient`` (the relay's own client): ``write`` of every block, ``read_into`` of every
                block, depot-to-depot ``copy`` of every block;
  curl          ``curl -T`` (PUT) of every block, ``curl`` GET of every block, and the copies posted by curl,
                one curl process for all blocks (one connection), times from curl's own ``-w`` figures, twice:
                on reused allocations (buffers freed a moment before and taken from the depots' pool, a relay's
                steady state) and on fresh ones ("fresh": allocated once the pools are empty, so every page is
                new to the depot); and the same PUTs to a null sink (a server that parses the head by hand and
                drops the body: what curl itself reaches, the reference for curl PUT), and, beside the fresh ones, to a
                null sink that receives every body into a new anonymous map (what curl reaches against a server
                that pays a fresh buffer's page faults and nothing else: the reference for curl PUT fresh);
  httpx         a plain ``httpx.AsyncClient``: PUT of every block streamed in 64 KiB pieces (a client that
                writes small chunks), GET of every block;
  chain         ``lnet-send`` of a ``--total`` file through three depot processes (``--path a,b,c``): the
                client writes into a, a copies to b, b to c, c hashes each block; the rate is bytes over
                lnet-send's own transfer time, and the CPU seconds per GiB of lnet-send and of each depot
                are printed below the table (``--chain-only``: this path alone).
Each path gets its median over the runs with the spread (min-max), and the median of its ratio to the raw
figure of the same run. The machine's cores and load average are printed before and after: a loaded machine
gives low, scattered figures, so compare A/B runs made back to back. Prints a table with the targets, then one
JSON line, and writes everything (commit, command, machine, library versions, whether the depots' fast path was
on, every run's figures and the summary) to bench/results/depot_throughput-<block>-<time>.json.
``--no-fast-path`` runs the depots with their fast path switched off (docs/depot.md), for an A/B of it;
``--no-prefault`` without prefaulting fresh allocations. The time the fresh allocations took to be lent is
printed below the table (with prefault, their pages are faulted in then, in a worker thread).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
import psutil
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lnet.client.wire.depot_client import Allocation, DepotClient  # noqa: E402
from lnet.units import parse_size  # noqa: E402
from tests.depot.processes import DepotProcess, depot_process  # noqa: E402

MiB = 1024 * 1024
SMALL_CHUNK = 64 * 1024
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None  # files in memory: the disk is not what is measured
REPO = Path(__file__).resolve().parent.parent

# (path, target ratio to raw TCP, or None for no target); the chain's target is an absolute rate.
TARGETS: dict[str, float | None] = {
    "client write": 0.60,
    "client read": 0.60,
    "client copy": 0.50,
    "curl PUT": 0.60,
    "curl GET": 0.60,
    "curl copy": 0.60,
    "curl PUT fresh": 0.60,
    "curl GET fresh": 0.60,
    "curl copy fresh": 0.60,
    "curl PUT to null": None,
    "curl PUT to null fresh": None,
    "httpx PUT 64KiB": None,
    "httpx GET": None,
}
CHAIN_TARGET_MBPS = 300.0
CHAIN_REPORTS: list[dict[str, Any]] = []  # lnet-send's --json reports, for the per-edge figures

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

# What curl's PUTs reach against a server that does no work at all: each request's head read and parsed by hand,
# its Content-Length body received into one reused buffer and dropped, a 201 answered (100 Continue first when
# curl expects it). The reference for "curl PUT": the most any server could give curl on this machine (the sink is
# a child of this process: its CPU counts in the client column).
NULL_SINK = r"""
import mmap, socket, sys
fresh = sys.argv[1:] == ["fresh"]
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen(1)
print(listener.getsockname()[1], flush=True)
conn, _ = listener.accept()
view = memoryview(bytearray(8 * 1024 * 1024))
pending = b""
while True:
    while b"\r\n\r\n" not in pending:
        got = conn.recv(65536)
        if not got:
            raise SystemExit(0)
        pending += got
    head, _, pending = pending.partition(b"\r\n\r\n")
    fields = dict(line.split(b":", 1) for line in head.split(b"\r\n")[1:])
    fields = {k.strip().lower(): v.strip() for k, v in fields.items()}
    left = int(fields.get(b"content-length", b"0"))
    if fields.get(b"expect", b"").lower() == b"100-continue" and not pending:
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    taken = min(left, len(pending))
    pending, left = pending[taken:], left - taken
    if fresh:  # every body into a new private anonymous map, as a depot's fresh allocation: its pages fault in here
        store = mmap.mmap(-1, max(left, 1), flags=mmap.MAP_PRIVATE)
        target, at = memoryview(store), 0
        while at < left:
            n = conn.recv_into(target[at:])
            if n == 0:
                raise SystemExit(0)
            at += n
        target.release()
        store.close()
        left = 0
    while left:
        n = conn.recv_into(view, min(left, len(view)))
        if n == 0:
            raise SystemExit(0)
        left -= n
    conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")
"""


async def curl_null_sink(total: int, block_size: int, block_file: Path, *, fresh: bool = False) -> float:
    sink, port = await spawn_reporting([sys.executable, "-c", NULL_SINK, *(["fresh"] if fresh else [])])
    try:
        puts = [["-T", str(block_file), f"http://127.0.0.1:{port}/sink"] for _ in range(total // block_size)]
        return await curl(puts, total)
    finally:
        sink.kill()
        await sink.wait()


async def spawn_reporting(argv: list[str]) -> tuple[trio.Process, str]:
    """Start a helper process and read the one line it prints when it is ready (its port)."""
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


async def raw_tcp(total: int, block: bytes) -> float:
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


class Meter:
    """CPU seconds per GiB of each timed path: the depots' (user + system, both processes, so a copy counts its
    source and its target) and the client's (this process, plus curl's when curl ran). Unlike rates, these hardly
    move with the neighbours' load: the figures to compare before and after a change on a shared machine."""

    def __init__(self, depots: list[int], total: int) -> None:
        self.depots = [psutil.Process(pid) for pid in depots]
        self.gib = total / 2**30
        self.cpu: dict[str, tuple[float, float]] = {}

    def _now(self) -> tuple[float, float]:
        depots = sum(sum(p.cpu_times()[:2]) for p in self.depots)
        me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return depots, me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime

    async def __call__(self, name: str, measured: Awaitable[float]) -> float:
        before = self._now()
        rate = await measured
        after = self._now()
        self.cpu[name] = ((after[0] - before[0]) / self.gib, (after[1] - before[1]) / self.gib)
        return rate


async def timed(action: Callable[[], Awaitable[None]], nbytes: int) -> float:
    started = time.perf_counter()
    await action()
    return nbytes / (time.perf_counter() - started)


async def curl(groups: list[list[str]], nbytes: int) -> float:
    """One curl process, one transfer per group (``--next`` between them, one connection); bytes over the summed
    transfer times curl reports (``-w %{time_total}``), so curl's own start is left out."""
    argv = ["curl"]
    for group in groups:
        if len(argv) > 1:
            argv.append("--next")
        argv += ["-sS", "--fail-with-body", "-o", "/dev/null", "-w", "%{time_total}\\n", *group]
    result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True)
    seconds = sum(float(line) for line in result.stdout.decode().split())
    return nbytes / seconds


async def one_run(
    a: DepotProcess, b: DepotProcess, total: int, block: bytes, block_file: Path, use_curl: bool, rss: dict[str, int],
    meter: Meter,
) -> dict[str, float]:
    count = total // len(block)
    rates: dict[str, float] = {"raw TCP": await raw_tcp(total, block)}
    buffer = bytearray(len(block))
    async with DepotClient(a.url, max_connections=1) as one, DepotClient(b.url, max_connections=1) as two:

        async def fresh() -> tuple[list[Allocation], list[Allocation]]:
            return await one.allocate(len(block), 600, count=count), await two.allocate(len(block), 600, count=count)

        async def free(*groups: list[Allocation]) -> None:
            for group in groups:
                for alloc in group:
                    await (one if alloc.depot == one.base_url else two).free(alloc.manage)

        # Steady state: a relaying depot reuses the buffers of blocks it just freed (store.py's pool), so every
        # timed path runs on buffers written and freed a moment before, as curl's and httpx's do below.
        sources, targets = await fresh()
        for source, target in zip(sources, targets, strict=True):
            await one.write(source.write, block)
            await two.write(target.write, block)
        await free(sources, targets)
        sources, targets = await fresh()

        async def write() -> None:
            for alloc in sources:
                await one.write(alloc.write, block)

        async def read() -> None:
            for alloc in sources:
                await one.read_into(alloc.read, buffer)

        async def copy() -> None:
            for source, target in zip(sources, targets, strict=True):
                await one.copy(source.read, target.write_url)

        rates["client write"] = await meter("client write", timed(write, total))
        rss["full"] = max(rss.get("full", 0), psutil.Process(a.process.pid).memory_info().rss)
        rates["client read"] = await meter("client read", timed(read, total))
        if buffer != block:
            raise AssertionError("client read back other bytes than it wrote")
        rates["client copy"] = await meter("client copy", timed(copy, total))
        if await two.digest(targets[-1].read) != await one.digest(sources[-1].read):
            raise AssertionError("a copy differs from its source")
        await free(sources, targets)

        if use_curl:
            # Reused allocations first (the client paths just freed theirs: the pools hold them), then fresh ones.
            for suffix in ("", " fresh"):
                if suffix:
                    await pools_emptied(one, two)
                began = time.perf_counter()
                sources, targets = await fresh()
                if suffix:  # what lending fresh buffers costs (with the depots' prefault, their pages come in here)
                    FRESH_ALLOCATE_S.append(time.perf_counter() - began)
                puts = [["-T", str(block_file), x.write_url] for x in sources]
                rates[f"curl PUT{suffix}"] = await meter(f"curl PUT{suffix}", curl(puts, total))
                rates[f"curl PUT to null{suffix}"] = await meter(
                    f"curl PUT to null{suffix}", curl_null_sink(total, len(block), block_file, fresh=bool(suffix))
                )
                rss["full"] = max(rss["full"], psutil.Process(a.process.pid).memory_info().rss)
                rates[f"curl GET{suffix}"] = await meter(
                    f"curl GET{suffix}", curl([[x.read_url] for x in sources], total)
                )
                posts = [
                    ["-H", "Content-Type: application/json", "-d", json.dumps({"to": target.write_url}),
                     f"{a.url}/v1/copy/{source.read}"]
                    for source, target in zip(sources, targets, strict=True)
                ]
                rates[f"curl copy{suffix}"] = await meter(f"curl copy{suffix}", curl(posts, total))
                if await two.digest(targets[0].read) != await one.digest(sources[0].read):
                    raise AssertionError("a copy differs from its source")
                await free(sources, targets)

        sources, targets = await fresh()
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=1)) as plain:

            async def pieces() -> AsyncIterator[bytes]:
                for start in range(0, len(block), SMALL_CHUNK):
                    yield block[start : start + SMALL_CHUNK]

            async def httpx_put() -> None:
                for alloc in sources:
                    answer = await plain.put(alloc.write_url, content=pieces(),
                                             headers={"Content-Length": str(len(block))})
                    answer.raise_for_status()

            async def httpx_get() -> None:
                for alloc in sources:
                    answer = await plain.get(alloc.read_url)
                    answer.raise_for_status()

            rates["httpx PUT 64KiB"] = await meter("httpx PUT 64KiB", timed(httpx_put, total))
            rates["httpx GET"] = await meter("httpx GET", timed(httpx_get, total))
        if await one.read(sources[-1].read) != block:
            raise AssertionError("a PUT in 64 KiB pieces stored other bytes than were sent")
        await free(sources, targets)
    return rates


async def pools_emptied(*clients: DepotClient) -> None:
    """Wait until no depot holds a freed buffer for reuse (they go after half a second): the next allocations are
    fresh mappings."""
    with trio.fail_after(30):
        for _ in range(1000):
            if not any([(await client.status())["pooled"] for client in clients]):
                return
            await trio.sleep(0.2)  # noqa: ASYNC110  (another process's state: polled)


FRESH_ALLOCATE_S: list[float] = []  # per run: both depots' allocate requests for the curl paths' fresh buffers
CHAIN_CPU: list[dict[str, float]] = []  # per chain run: CPU seconds per GiB of lnet-send and of each depot


async def chain_run(
    depots: list[DepotProcess], source: Path, block_size: int, work: Path, duration: str = "10m"
) -> float:
    """One ``lnet-send`` through a, b and c; returns its rate and records the CPU per GiB of every process in
    ``CHAIN_CPU`` (lnet-send's whole process, start-up included, from this process's reaped children)."""
    names = ["a", "b", "c"]
    depots_file = work / "depots.toml"
    depots_file.write_text('here = "bench"\n' + "".join(
        f'[depots.{name}]\nurl = "{depot.url}"\n' for name, depot in zip(names, depots, strict=True)
    ))
    argv = [
        sys.executable, "-m", "lnet.client.send", str(source), "--to", "c", "--path", "a,b,c",
        "--depots", str(depots_file), "--memory", str(work / "edges.json"), "--block-size", str(block_size),
        "--manifest", str(work / "chain.manifest.json"), "--duration", duration, "--json", "--no-progress",
    ]
    processes = {name: psutil.Process(depot.process.pid) for name, depot in zip(names, depots, strict=True)}
    before = {name: sum(p.cpu_times()[:2]) for name, p in processes.items()}
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"lnet-send failed ({result.returncode}): {result.stderr.decode()[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = json.loads(result.stdout.decode().strip().splitlines()[-1])
    CHAIN_REPORTS.append(report)
    gib = float(report["bytes"]) / 2**30
    cpu = {"send": (after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime) / gib}
    for name, process in processes.items():
        cpu[name] = (sum(process.cpu_times()[:2]) - before[name]) / gib
    CHAIN_CPU.append(cpu)
    return float(report["bytes"]) / float(report["seconds"])


def spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--total", default="256MiB", help="bytes moved per path and run (default 256MiB)")
    parser.add_argument("--block", default="8MiB", help="block (allocation) size (default 8MiB)")
    parser.add_argument("--runs", type=int, default=5, help="runs; medians are reported (default 5, at least 5 "
                        "for figures to quote)")
    parser.add_argument("--no-chain", action="store_true", help="leave out the three-depot lnet-send chain")
    parser.add_argument("--duration", default="10m", help="the chain's blocks' lifetime at c (default 10m; a "
                        "shorter one lets c forget earlier runs' blocks in a long series)")
    parser.add_argument("--chain-only", action="store_true", help="run only the three-depot lnet-send chain (no "
                        "raw TCP, client, curl or httpx paths)")
    parser.add_argument("--no-fast-path", action="store_true", help="run the depots with their fast path switched "
                        "off (lnet-depot --no-fast-path)")
    parser.add_argument("--no-prefault", action="store_true", help="run the depots without prefaulting fresh "
                        "allocations (lnet-depot --no-prefault)")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results", help="where the JSON record "
                        "goes (default bench/results)")
    args = parser.parse_args(argv)
    command = " ".join([Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)])
    total, block_size = parse_size(args.total), parse_size(args.block)
    total -= total % block_size
    if total < block_size:
        parser.error("--total must be at least one --block")
    if args.chain_only and args.no_chain:
        parser.error("--chain-only and --no-chain leave nothing to run")
    use_curl = shutil.which("curl") is not None
    load_before = os.getloadavg()
    print(f"machine: {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable), load average "
          f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}; python {sys.version.split()[0]}, "
          f"h11 {version('h11')}, hypercorn {version('hypercorn')}, httpx {version('httpx')}, "
          f"httpcore {version('httpcore')}" + ("" if use_curl else "; no curl on PATH: curl rows left out"))
    block = os.urandom(block_size)
    runs: list[dict[str, float]] = []
    capacity = str(2 * total + 64 * MiB)
    common = ["--capacity", capacity, "--max-allocation", str(block_size), "--log-level", "warning",
              *(["--no-fast-path"] if args.no_fast_path else []), *(["--no-prefault"] if args.no_prefault else [])]
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        work = Path(tmp)
        block_file = work / "block"
        block_file.write_bytes(block)
        source = work / "chain.src"
        with source.open("wb") as out:
            for _ in range(total // block_size):
                out.write(os.urandom(block_size))
        async with (
            depot_process("--data-dir", f"{tmp}/a", *common) as a,
            depot_process("--data-dir", f"{tmp}/b", *common) as b,
            # the chain's destination keeps every run's file (until it expires): room for all of them
            depot_process("--data-dir", f"{tmp}/c", *common, "--capacity", str((args.runs + 2) * total)) as c,
        ):
            rss: dict[str, int] = {}
            cpu: list[dict[str, tuple[float, float]]] = []
            async with DepotClient(a.url) as probe:
                fast_path_on = bool((await probe.status()).get("fast_path"))
            print(f"depots' fast path: {'on' if fast_path_on else 'off'}", flush=True)
            for index in range(args.runs):
                rates: dict[str, float] = {}
                if not args.chain_only:
                    meter = Meter([a.process.pid, b.process.pid], total)
                    rates = await one_run(a, b, total, block, block_file, use_curl, rss, meter)
                    cpu.append(meter.cpu)
                if not args.no_chain:
                    rates["chain"] = await chain_run([a, b, c], source, block_size, work, args.duration)
                runs.append(rates)
                print(f"run {index + 1}: " + ", ".join(f"{k} {v / 1e6:.0f}" for k, v in rates.items()) + " MB/s",
                      flush=True)
    load_after = os.getloadavg()
    record: dict[str, Any] = {
        "bench": "depot_throughput", "command": command, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        **await commit(), "machine": machine(load_before, load_after), "fast_path": fast_path_on,
        "total_bytes": total, "block_bytes": block_size, "unit": "bytes/s",
        "prefault": not args.no_prefault,
        "runs": [{"rates": rates, "cpu_s_per_GiB": cpu[index] if index < len(cpu) else {},
                  "fresh_allocate_s": FRESH_ALLOCATE_S[index] if index < len(FRESH_ALLOCATE_S) else None,
                  "chain_cpu_s_per_GiB": CHAIN_CPU[index] if index < len(CHAIN_CPU) else {}}
                 for index, rates in enumerate(runs)],
    }
    if args.chain_only:
        return chain_table(runs, total, block_size, load_before, load_after, record, args.results)
    paths = [p for p in runs[0] if p != "raw TCP"]
    raw = spread([r["raw TCP"] for r in runs])
    print(f"\ndepot throughput on loopback: {total // MiB} MiB per path in {block_size // MiB} MiB blocks, "
          f"median of {args.runs} runs (min-max); load average after "
          f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    print(f"{'path':<16} {'MB/s':>7} {'(min-max)':>13} {'of raw':>7} {'CPU-s/GiB depots':>16} {'client':>6}  target")
    print(f"{'raw TCP':<16} {raw[0] / 1e6:>7.0f} {f'({raw[1] / 1e6:.0f}-{raw[2] / 1e6:.0f})':>13} {1:>7.0%} "
          f"{'':>16} {'':>6}  reference")
    result: dict[str, Any] = {
        "bench": "depot_throughput", "total_bytes": total, "block_bytes": block_size, "runs": args.runs,
        "cores": os.cpu_count(), "load_before": load_before[0], "load_after": load_after[0],
        "raw_MBps": raw[0] / 1e6, "raw_MBps_min": raw[1] / 1e6, "raw_MBps_max": raw[2] / 1e6,
    }
    misses: list[str] = []
    for path in paths:
        median, low, high = spread([r[path] for r in runs])
        ratio = statistics.median(r[path] / r["raw TCP"] for r in runs)
        key = path.replace(" ", "_")
        result[f"{key}_MBps"] = median / 1e6
        result[f"{key}_MBps_min"], result[f"{key}_MBps_max"] = low / 1e6, high / 1e6
        result[f"{key}_ratio_min"] = min(r[path] / r["raw TCP"] for r in runs)
        result[f"{key}_ratio_max"] = max(r[path] / r["raw TCP"] for r in runs)
        result[f"{key}_ratio"] = ratio
        if path == "chain":
            verdict = "met" if median / 1e6 >= CHAIN_TARGET_MBPS else "MISSED"
            note = f">= {CHAIN_TARGET_MBPS:.0f} MB/s: {verdict}"
        elif TARGETS.get(path) is not None:
            target = TARGETS[path]
            assert target is not None
            verdict = "met" if ratio >= target else "MISSED"
            note = f">= {target:.0%} of raw: {verdict}"
        else:
            verdict, note = "", "-"
        if verdict == "MISSED":
            misses.append(path)
        depots_cpu = client_cpu = ""
        if all(path in c for c in cpu):
            depots_cpu = f"{statistics.median(c[path][0] for c in cpu):.2f}"
            client_cpu = f"{statistics.median(c[path][1] for c in cpu):.2f}"
            result[f"{key}_depot_cpu_s_per_GiB"] = float(depots_cpu)
            result[f"{key}_client_cpu_s_per_GiB"] = float(client_cpu)
        print(f"{path:<16} {median / 1e6:>7.0f} {f'({low / 1e6:.0f}-{high / 1e6:.0f})':>13} {ratio:>7.0%} "
              f"{depots_cpu:>16} {client_cpu:>6}  {note}")
    print(f"depot RSS holding {total // MiB} MiB of blocks: {rss['full'] / MiB:.0f} MiB "
          f"(capacity {int(capacity) // MiB} MiB)")
    result["rss_full_bytes"] = rss["full"]
    for put, sink in (("curl PUT", "curl PUT to null"), ("curl PUT fresh", "curl PUT to null fresh")):
        if all(put in r and sink in r for r in runs):  # the depot against the most any server gives curl here
            shares = [r[put] / r[sink] for r in runs]
            result[f"{put.replace(' ', '_')}_of_sink"] = statistics.median(shares)
            print(f"{put} of its null sink, median of the runs' ratios: {statistics.median(shares):.0%} "
                  f"({min(shares):.0%}-{max(shares):.0%})")
    if FRESH_ALLOCATE_S:
        low, high = min(FRESH_ALLOCATE_S), max(FRESH_ALLOCATE_S)
        result["fresh_allocate_ms"] = statistics.median(FRESH_ALLOCATE_S) * 1000
        print(f"lending the fresh buffers ({total // block_size} x {block_size // MiB} MiB at each of a and b, "
              f"prefault {'off' if args.no_prefault else 'on'}): {result['fresh_allocate_ms']:.0f} ms "
              f"({low * 1000:.0f}-{high * 1000:.0f})")
    if CHAIN_CPU:
        print(chain_cpu_line())
    if CHAIN_REPORTS:
        last = CHAIN_REPORTS[-1]
        edges = ", ".join(f"{e['from']}->{e['to']} {e['mbps'] / 8:.0f} MB/s" for e in last.get("edges", []))
        print(f"chain, last run: {last['blocks']} blocks, {last['resends']} re-sends, {last['seconds']:.2f} s; "
              f"per edge (lnet-send's meters): {edges}")
    result["missed"] = misses
    print(json.dumps(result))
    save(record | {"summary": result}, args.results, block_size)
    return 0


async def commit() -> dict[str, Any]:
    """The commit measured, and whether the work tree had changes beside it."""
    head = await trio.run_process(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_stdout=True, check=False)
    dirty = await trio.run_process(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                                   capture_stdout=True, check=False)
    return {"commit": head.stdout.decode().strip() or None, "dirty": bool(dirty.stdout.strip())}


def machine(load_before: tuple[float, float, float], load_after: tuple[float, float, float]) -> dict[str, Any]:
    model = ""
    try:
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    except OSError:
        pass
    return {
        "host": platform.node(), "cpu": model, "cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)),
        "kernel": platform.release(), "python": sys.version.split()[0],
        "load_before": list(load_before), "load_after": list(load_after),
        "versions": {name: version(name) for name in ("hypercorn", "h11", "httpcore", "httpx", "starlette", "trio")},
    }


def save(record: dict[str, Any], directory: Path, block_size: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / f"depot_throughput-{block_size // MiB}MiB-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"results: {out}")


def chain_cpu_line() -> str:
    """The chain's CPU seconds per GiB, each process's median over the runs (min-max)."""
    parts = []
    for name in ("send", "a", "b", "c"):
        median, low, high = spread([c[name] for c in CHAIN_CPU])
        parts.append(f"{'lnet-send' if name == 'send' else name} {median:.2f} ({low:.2f}-{high:.2f})")
    total = spread([sum(c.values()) for c in CHAIN_CPU])
    return (f"chain CPU-s/GiB, median (min-max): {', '.join(parts)}; all four {total[0]:.2f} "
            f"({total[1]:.2f}-{total[2]:.2f}); lnet-send's includes its start-up")


def chain_table(
    runs: list[dict[str, float]], total: int, block_size: int, load_before: tuple[float, float, float],
    load_after: tuple[float, float, float], record: dict[str, Any], results: Path,
) -> int:
    """``--chain-only``: the chain's rate and CPU, and one JSON line."""
    median, low, high = spread([r["chain"] for r in runs])
    verdict = "met" if median / 1e6 >= CHAIN_TARGET_MBPS else "MISSED"
    print(f"\nthree-depot chain through lnet-send on loopback: {total // MiB} MiB in {block_size // MiB} MiB blocks, "
          f"median of {len(runs)} runs; load average after {load_after[0]:.2f} {load_after[1]:.2f} "
          f"{load_after[2]:.2f}")
    print(f"chain {median / 1e6:.0f} MB/s ({low / 1e6:.0f}-{high / 1e6:.0f}); >= {CHAIN_TARGET_MBPS:.0f} MB/s: "
          f"{verdict}")
    print(chain_cpu_line())
    result: dict[str, Any] = {
        "bench": "depot_throughput", "chain_only": True, "total_bytes": total, "block_bytes": block_size,
        "runs": len(runs), "cores": os.cpu_count(), "load_before": load_before[0], "load_after": load_after[0],
        "chain_MBps": median / 1e6, "chain_MBps_min": low / 1e6, "chain_MBps_max": high / 1e6,
        "missed": [] if verdict == "met" else ["chain"],
    }
    for name in ("send", "a", "b", "c"):
        result[f"chain_{name}_cpu_s_per_GiB"] = statistics.median(c[name] for c in CHAIN_CPU)
    print(json.dumps(result))
    save(record | {"summary": result}, results, block_size)
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(main))
