"""What the userspace link emulator adds to a round trip beyond the configured delay, by link delay.

Two hosts joined by one link; for each one-way delay D, many small UDP round trips (the accuracy tests' probe:
`measure.rtt`, a Python echo on the far host) on the otherwise idle link. Reported per D: the median round trip
and the excess over 2 x D, all in ms. A host pinging its own address (the loopback device: no TUN, no emulator)
gives the probes' own share. Needs root; run under the testbed lock:

    flock /tmp/lnet-testbed.lock .venv/bin/python bench/testbed_overhead.py [--delays 0,1,2.5,5,10,30]
        [--count 300] [--interval-ms 10] [--runs 1] [--compensate-us N]

`--compensate-us N` starts the emulator with that per-direction compensation instead of its default (0 turns it
off: the raw overhead). Writes bench/results/testbed_overhead.json as well as printing a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import uuid
from pathlib import Path
from typing import Any

import trio

from lnet.testbed import Testbed, Topology
from lnet.testbed.measure import rtt


def topology(delay_ms: float) -> Topology:
    return Topology.parse(f'name = "overhead"\n[hosts.a]\n[hosts.b]\n[[links]]\na = "a"\nb = "b"\n'
                          f"delay_ms = {delay_ms}\nrate_mbit = 1000.0\n")


async def run(delays: list[float], count: int, interval_s: float, runs: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for delay in delays:
        medians: list[float] = []
        self_medians: list[float] = []
        for _ in range(runs):
            async with Testbed(topology(delay), name=f"ovh-{uuid.uuid4().hex[:6]}") as tb:
                medians.append((await rtt(tb, "a", "b", count=count, interval_s=interval_s)).median_ms)
                if delay == delays[0]:
                    own = await rtt(tb, "a", "a", count=count, interval_s=interval_s, port=5299)
                    self_medians.append(own.median_ms)
        row = {"delay_ms": delay, "rtt_ms": statistics.median(medians), "runs": medians,
               "excess_ms": statistics.median(medians) - 2 * delay}
        if self_medians:
            row["probe_only_ms"] = statistics.median(self_medians)
        rows.append(row)
        print(f"one way {delay:5.1f} ms: round trip {row['rtt_ms']:7.3f} ms, excess {row['excess_ms']:+.3f} ms"
              + (f" (the probes alone, no emulator: {row['probe_only_ms']:.3f} ms)" if self_medians else ""),
              flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--delays", default="0,1,2.5,5,10,30")
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--interval-ms", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--compensate-us", type=float, default=None)
    args = parser.parse_args()
    if args.compensate_us is not None:
        os.environ["LNET_TESTBED_COMPENSATE_US"] = str(args.compensate_us)
    delays = [float(d) for d in args.delays.split(",")]
    rows = trio.run(run, delays, args.count, args.interval_ms / 1000, args.runs)
    out = Path(__file__).parent / "results" / "testbed_overhead.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"compensate_us": args.compensate_us, "count": args.count, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
