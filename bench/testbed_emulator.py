"""How much traffic one userspace link emulator carries on this machine.

Brings up PAIRS pairs of hosts, each pair joined by its own fast link (5 ms one way, RATE Mbit/s, windows large
enough not to bind), runs one plain TCP stream per pair at once for SECONDS, and reports the aggregate goodput
and the emulator's CPU use. The emulator is the limit when its CPU use nears 100% of a core and the aggregate
stops growing with more pairs. Needs root.

    python bench/testbed_emulator.py [--pairs 1,2,4] [--rate-mbit 2000] [--seconds 8] [--mtu 9000]

Writes bench/results/testbed_emulator_mtuMTU.json as well as printing a table.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import uuid
from typing import Any

import trio

from lnet.testbed import Testbed, Topology
from lnet.testbed.measure import RttResult, rtt, tcp_throughput


def topology(pairs: int, rate_mbit: float, mtu: int) -> Topology:
    lines = [f'name = "emubench"\nmtu = {mtu}\n[defaults]\nwindow = "16MiB"\n']
    for i in range(pairs):
        lines.append(f"[hosts.s{i}]\n[hosts.d{i}]\n")
    # an idle pair whose round trip is measured while the streams run: is the timing still right under load?
    lines.append('[hosts.pa]\n[hosts.pb]\n[[links]]\na = "pa"\nb = "pb"\ndelay_ms = 20.0\nrate_mbit = 100.0\n'
                 '[[links]]\na = "pa"\nb = "s0"\ndelay_ms = 50.0\nrate_mbit = 1.0\n')
    for i in range(pairs):
        lines.append(f'[[links]]\na = "s{i}"\nb = "d{i}"\ndelay_ms = 5.0\nrate_mbit = {rate_mbit}\n')
    # a topology must be connected: chain the senders with slow links no stream uses
    for i in range(1, pairs):
        lines.append(f'[[links]]\na = "s{i - 1}"\nb = "s{i}"\ndelay_ms = 50.0\nrate_mbit = 1.0\n')
    return Topology.parse("\n".join(lines))


async def run_one(pairs: int, rate_mbit: float, seconds: float, mtu: int) -> dict[str, Any]:
    name = f"emubench-{uuid.uuid4().hex[:6]}"
    async with Testbed(topology(pairs, rate_mbit, mtu), name=name) as tb:
        results: list[float] = []

        async def stream(i: int) -> None:
            results.append(await tcp_throughput(tb, f"s{i}", f"d{i}", seconds=seconds, skip_s=2.0, port=5600 + i))

        before = await tb.status()
        cpu0, t0 = before["load"]["cpu_seconds"], time.monotonic()
        pings: list[RttResult] = []

        async def ping() -> None:
            await trio.sleep(3.0)  # into the streams' steady state
            pings.append(await rtt(tb, "pa", "pb", count=max(10, int((seconds - 4) / 0.045)), interval_s=0.005))

        async with trio.open_nursery() as nursery:
            for i in range(pairs):
                nursery.start_soon(stream, i)
            nursery.start_soon(ping)
        after = await tb.status()
        cpu1, t1 = after["load"]["cpu_seconds"], time.monotonic()
        drops = sum(link[k]["tail_drops"] for link in after["links"] for k in link if "->" in k)
    row: dict[str, Any] = {
        "pairs": pairs,
        "link_rate_mbit": rate_mbit,
        "mtu": mtu,
        "aggregate_mbit_s": round(sum(results), 1),
        "per_stream_mbit_s": [round(r, 1) for r in sorted(results)],
        # includes the probes' start-up around the streams, so it slightly understates the busy share
        "emulator_cpu_percent": round(100 * (cpu1 - cpu0) / (t1 - t0), 1),
        "tail_drops": drops,
        "idle_pair_rtt_ms": {"configured": 40.0, "median": round(pings[0].median_ms, 2),
                             "max": round(pings[0].max_ms, 2)},
    }
    return row


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", default="1,2,4")
    p.add_argument("--rate-mbit", type=float, default=2000.0)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--mtu", type=int, default=9000)
    args = p.parse_args()
    rows = []
    for pairs in [int(x) for x in args.pairs.split(",")]:
        row = await run_one(pairs, args.rate_mbit, args.seconds, args.mtu)
        rows.append(row)
        print(f"{row['pairs']} stream(s) on {row['link_rate_mbit']:g} Mbit/s links, MTU {row['mtu']}: "
              f"{row['aggregate_mbit_s']:.0f} Mbit/s aggregate {row['per_stream_mbit_s']}, "
              f"emulator {row['emulator_cpu_percent']:.0f}% of a core, {row['tail_drops']} tail drops; "
              f"meanwhile a 40 ms RTT measured {row['idle_pair_rtt_ms']['median']} ms (median)", flush=True)
    out = trio.Path(__file__).parent / "results"
    await out.mkdir(exist_ok=True)
    await (out / f"testbed_emulator_mtu{args.mtu}.json").write_text(
        json.dumps({"cpus": os.cpu_count(), "runs": rows}, indent=2))


if __name__ == "__main__":
    trio.run(main)
