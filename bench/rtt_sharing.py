"""How TCP streams of different round trips share a full link on the testbed, against the simulator's model of it.

The simulator shares a full link by weighted max-min: each stream's weight is its round trip to the power
``-rtt_bias`` (``SimNetwork.rtt_bias``; 0 is plain max-min, every stream alike). This benchmark measures what the
testbed's links do, so that the bias is a measurement and not a guess. For each random scenario (the small
class of ``lnet.scheduler.scenarios``, as bench/pathchoice.py --random runs them), it finds the physical link
that the most overlay edges cross, takes up to three of those edges with round trips far apart, and runs plain
TCP over them at once (``streams`` each, ``lnet.testbed.measure.tcp_shares``). It sets each edge's part of what
they got together beside the simulator's part for several biases, and prints the mean distance for each. Needs
root; run it alone on the machine.

    flock /tmp/lnet-testbed.lock .venv/bin/python bench/rtt_sharing.py [--seed S] [--scenarios 8] [--streams 2]

Saved in bench/results/rtt-sharing-<seed>-<time>.json with the commit and the command.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pathchoice as pc  # noqa: E402
import testbed_scenarios as ts  # noqa: E402

from lnet.scheduler._memory import Edge  # noqa: E402
from lnet.scheduler.simulator import SimNetwork  # noqa: E402
from lnet.testbed import Testbed, Topology  # noqa: E402
from lnet.testbed.measure import tcp_shares  # noqa: E402

BIASES = (0.0, 0.5, 1.0, 1.5, 2.0)
MIN_RTT_RATIO = 1.5
"""Edges whose round trips are closer than this are not worth setting side by side: any bias shares them alike."""


def contest(network: SimNetwork, streams: int) -> tuple[str, list[Edge]] | None:
    """The physical link the most overlay edges cross where ``streams`` streams on each would fill it, and up to
    three of those edges with round trips far apart (shortest, longest, and the one nearest their geometric mean);
    None if no link has two such edges."""
    best: tuple[str, list[Edge]] | None = None
    crossing: dict[str, list[Edge]] = {}
    for edge, route in sorted(network.routes.items()):
        if network.capacity(edge, 0.0) > 0:
            for link in route:
                crossing.setdefault(link, []).append(edge)
    for link, edges in sorted(crossing.items()):
        edges = sorted(edges, key=lambda e: network.rtts[e])
        short, long = edges[0], edges[-1]
        if network.rtts[long] < MIN_RTT_RATIO * network.rtts[short]:
            continue
        middle = (network.rtts[short] * network.rtts[long]) ** 0.5
        rest = [e for e in edges[1:-1] if e[0] not in (short[0], long[0])]
        chosen = [short, long] + ([min(rest, key=lambda e: abs(network.rtts[e] - middle))] if rest else [])
        if sum(network.capacity(e, 0.0) for e in chosen) * streams < network.links[link] * 1.2:
            continue
        if best is None or len(chosen) > len(best[1]):
            best = (link, chosen)
    return best


def simulated_parts(network: SimNetwork, edges: list[Edge], streams: int, bias: float) -> list[float]:
    rates = replace(network, rtt_bias=bias).share({edge: streams for edge in edges}, 0.0)
    total = sum(rates[edge] for edge in edges)
    return [rates[edge] / total for edge in edges]


async def measure(rc: ts.RandomCase, link: str, edges: list[Edge], args: argparse.Namespace) -> dict[str, Any]:
    network = rc.network
    topology = Topology.parse(rc.toml, default_name=rc.name)
    async with Testbed(topology, name=f"rs-{rc.name}") as tb:
        got = await tcp_shares(tb, list(edges), streams=args.streams, seconds=args.seconds, skip_s=args.skip_s)
    total = sum(got)
    parts = [rate / total for rate in got] if total > 0 else [0.0] * len(got)
    sims = {str(bias): simulated_parts(network, edges, args.streams, bias) for bias in BIASES}
    return {"scenario": rc.name, "seed": rc.scenario.seed, "index": rc.scenario.index, "kind": rc.scenario.kind,
            "link": link, "link_mbit": network.links[link] * 8e-6,
            "edges": [{"edge": list(edge), "rtt_ms": network.rtts[edge] * 1e3,
                       "alone_mbit": network.capacity(edge, 0.0) * 8e-6, "mbit": rate, "part": part}
                      for edge, rate, part in zip(edges, got, parts, strict=True)],
            "simulated_parts": sims,
            "distance": {bias: statistics.fmean(abs(a - b) for a, b in zip(parts, sim, strict=True))
                         for bias, sim in sims.items()}}


async def run(args: argparse.Namespace) -> int:
    rows = []
    index = 0
    candidates = ts.small_indices(args.scenarios * 6)
    while len(rows) < args.scenarios and index < len(candidates):
        rc = ts.random_case(args.seed, candidates[index])
        index += 1
        found = contest(rc.network, args.streams)
        if found is None:
            continue
        link, edges = found
        row = await measure(rc, link, edges, args)
        rows.append(row)
        print(f"{rc.name} ({row['kind']}) {link} {row['link_mbit']:.1f} Mbit/s: "
              + ", ".join(f"{'>'.join(e['edge'])} {e['rtt_ms']:.0f} ms {e['mbit']:.2f} ({e['part']:.2f})"
                          for e in row["edges"])
              + "; simulated parts: "
              + "  ".join(f"bias {b} " + "/".join(f"{p:.2f}" for p in parts)
                          for b, parts in row["simulated_parts"].items()), flush=True)
    if not rows:
        print(f"no scenario of seed {args.seed} has a link that edges of different round trips would fill",
              file=sys.stderr)
        return 1
    summary = {str(bias): statistics.fmean(row["distance"][str(bias)] for row in rows) for bias in BIASES}
    best = min(summary, key=summary.__getitem__)
    print("mean distance between the testbed's parts and the simulator's, by bias: "
          + "  ".join(f"{bias} {d:.3f}" for bias, d in summary.items()) + f"; nearest: {best}")
    ts.RESULTS.mkdir(exist_ok=True)
    out = ts.RESULTS / f"rtt-sharing-{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    document = {"bench": "rtt_sharing", "command": " ".join(["bench/rtt_sharing.py", *sys.argv[1:]]),
                "commit": pc.commit(), "seed": args.seed, "streams": args.streams, "seconds": args.seconds,
                "skip_s": args.skip_s, "scenarios": rows, "mean_distance": summary, "nearest_bias": float(best)}
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"saved {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, help="the scenarios' seed (default: a fresh one, printed)")
    parser.add_argument("--scenarios", type=int, default=8, help="how many scenarios with a shared link to run")
    parser.add_argument("--streams", type=int, default=2, help="TCP streams on each edge (lnet's copies a hop)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each set runs")
    parser.add_argument("--skip-s", type=float, default=4.0, help="left out at the start of each stream")
    args = parser.parse_args(argv)
    if args.seed is None:
        args.seed = ts.fresh_seed()
    print(f"seed {args.seed}", flush=True)
    return trio.run(run, args)


if __name__ == "__main__":
    raise SystemExit(main())
