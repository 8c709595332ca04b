"""A normal client's latency at a depot, alone and beside hundreds of trickling clients.

    .venv/bin/python bench/trickle.py [--readers 300] [--writers 100] [--duration 20s] [--size 1MiB]
        [--depot-arg=--body-grace=10s ...] [--out bench/results/trickle-DATE.json]

Starts one `lnet-depot` (its defaults, plus any --depot-arg) on loopback and a normal client on 127.0.0.1 that
repeats a round: allocate --size, write it, read it back, free it. First the client runs alone for --duration,
then beside --readers GETs of a 64 MiB allocation each taking 1 KiB every 5 s through a 4 KiB receive buffer (from
127.0.0.2) and --writers PUTs whose bodies come a byte every 2 s (from 127.0.0.3, half of 1 MiB, half of 1000
bytes), as the black-box probe that found a depot could be taken over ran them (tests/depot/tricklers.py). Prints
each phase's round latency (median, 90th and 99th percentile, highest) and its refused rounds (429/503), and
what the depot's /metrics counted; writes it all as JSON. Linux (sources on 127.0.0.0/8); no root.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lnet.client.wire.depot_client import Busy, DepotClient  # noqa: E402
from lnet.units import parse_duration, parse_size  # noqa: E402
from tests.depot.processes import depot_process  # noqa: E402
from tests.depot.tricklers import Tally, reader, writer  # noqa: E402

MiB = 1024 * 1024
_METRICS = ("lnet_depot_client_refusals_total", "lnet_depot_busy_refusals_total",
            'lnet_depot_slow_bodies_cut_total{direction="in"}', 'lnet_depot_slow_bodies_cut_total{direction="out"}')


async def rounds(client: DepotClient, payload: bytes, duration: float) -> dict[str, Any]:
    """Rounds for ``duration`` seconds: latencies of the ones that went through, and how many were refused."""
    latencies: list[float] = []
    refused = 0
    ended = trio.current_time() + duration
    while trio.current_time() < ended:
        started = trio.current_time()
        try:
            alloc = await client.allocate_one(len(payload), 60)
            await client.write(alloc.write, payload)
            if await client.read(alloc.read) != payload:
                raise SystemExit("a round read other bytes than it wrote")
            await client.free(alloc.manage)
        except Busy:
            refused += 1
            await trio.sleep(0.1)
            continue
        latencies.append(trio.current_time() - started)
    return summary(latencies, refused)


def summary(latencies: list[float], refused: int) -> dict[str, Any]:
    ordered = sorted(latencies)

    def pct(p: float) -> float | None:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else None

    return {"rounds": len(ordered), "refused": refused,
            "median_s": statistics.median(ordered) if ordered else None, "p90_s": pct(0.90), "p99_s": pct(0.99),
            "max_s": ordered[-1] if ordered else None}


def metrics_of(text: str) -> dict[str, float]:
    found = {}
    for name in _METRICS:
        match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
        found[name] = float(match.group(1)) if match else 0.0
    return found


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    payload = bytes(range(256)) * (args.size // 256)
    with tempfile.TemporaryDirectory(prefix="lnet-trickle-") as scratch:
        async with (
            depot_process("--data-dir", scratch, "--capacity", "1GiB", "--max-allocation", "64MiB",
                          *args.depot_arg) as depot,
            DepotClient(depot.url, timeout=30) as client,
            httpx.AsyncClient(base_url=depot.url, timeout=30) as plain,
        ):
            parts = urlsplit(depot.url)
            assert parts.hostname is not None and parts.port is not None  # noqa: PT018 (not a test)
            address = (parts.hostname, parts.port)
            big = await client.allocate_one(64 * MiB, 3600)
            await client.write(big.write, bytes(64 * MiB))
            targets = [await client.allocate_one(MiB, 3600) for _ in range(args.writers)]
            alone = await rounds(client, payload, args.duration)
            readers, writers = Tally(), Tally()
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                for _ in range(args.readers):
                    nursery.start_soon(reader, address, big.read, stop, readers)
                for i, target in enumerate(targets):
                    nursery.start_soon(writer, address, target.write, MiB if i % 2 else 1000, stop, writers)
                await trio.sleep(2)
                beside = await rounds(client, payload, args.duration)
                ready = (await plain.get("/readyz")).status_code
                metrics = metrics_of((await plain.get("/metrics")).text)
                stop.set()
    return {"alone": alone, "beside_tricklers": beside, "readyz_at_end": ready, "depot_metrics": metrics,
            "tricklers": {"readers": vars(readers), "writers": vars(writers)}}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--readers", type=int, default=300)
    p.add_argument("--writers", type=int, default=100)
    p.add_argument("--duration", type=parse_duration, default=20.0, help="each phase (20s)")
    p.add_argument("--size", type=parse_size, default=MiB, help="a round's allocation and write (1MiB)")
    p.add_argument("--depot-arg", action="append", default=[], help="a flag for lnet-depot (--depot-arg=--x=y)")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    started = time.strftime("%Y%m%d-%H%M%S")
    result = trio.run(measure, args)
    document = {"kind": "lnet-bench-trickle/1", "started": started, "readers": args.readers,
                "writers": args.writers, "duration_s": args.duration, "size": args.size,
                "depot_args": args.depot_arg, **result}
    out = args.out or ROOT / "bench" / "results" / f"trickle-{started}.json"
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"{'phase':<18} {'rounds':>6} {'refused':>7} {'median ms':>9} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for phase in ("alone", "beside_tricklers"):
        r = result[phase]
        print(f"{phase:<18} {r['rounds']:>6} {r['refused']:>7} {_ms(r['median_s']):>9} {_ms(r['p90_s']):>8} "
              f"{_ms(r['p99_s']):>8} {_ms(r['max_s']):>8}")
    print("depot:", ", ".join(f"{k} {v:g}" for k, v in result["depot_metrics"].items()),
          f"; /readyz at the end {result['readyz_at_end']}")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
