"""lnet-send pinned to paths of random testbed scenarios, two versions of lnet in turn: an A/B of the relay.

    flock /tmp/lnet-testbed.lock .venv/bin/python bench/pinned_ab.py --a /other/worktree/.venv/bin/python \
        [--b .venv/bin/python] [--size 96MiB] [--runs 3] SEED:INDEX:HOPS [SEED:INDEX:HOPS ...]

Each SEED:INDEX names a scenario of bench/pathchoice.py --random (the same scaled testbed); HOPS is the path after
the source, comma-separated (``dst``: direct). Per scenario one testbed; per run fresh depots, then lnet-send
--path HOPS --cold with each side's python, the sides alternating (A then B, then B then A...) so that a drift
of the machine falls on both. The depots run this python's lnet (a relay change is the client's). Prints a line
a run and each path's median per side, and writes bench/results/pinned-ab-<time>.json (every run, the command,
this repository's commit; say in its ``caveat`` what A and B are). Needs root (the testbed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pathchoice as pc  # noqa: E402  (bench/pathchoice.py: the depots, lnet-send on a host, payloads)
import testbed_scenarios as ts  # noqa: E402  (bench/testbed_scenarios.py: the random scenarios, scaled)

from lnet.testbed import Testbed  # noqa: E402
from lnet.units import parse_size  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", metavar="SEED:INDEX:HOPS")
    parser.add_argument("--a", required=True, help="side A's python (its lnet is what it imports)")
    parser.add_argument("--b", default=sys.executable, help="side B's python (default: this one)")
    parser.add_argument("--size", default="96MiB", help="bytes a transfer (default 96MiB)")
    parser.add_argument("--runs", type=int, default=3, help="runs a side a path (default 3)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "lnet-bench-pinned-ab")
    args = parser.parse_args(argv)
    try:
        args.items = [(int(seed), int(index), hops) for seed, index, hops in (p.split(":") for p in args.paths)]
    except ValueError:
        parser.error("each path is SEED:INDEX:HOPS, e.g. 2948979898:1:d04,d02,dst")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    args.size_bytes = parse_size(args.size)
    return args


def medians(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each path's and side's median Mbit/s, least and most, over its runs that finished."""
    out = []
    for key in dict.fromkeys((r["seed"], r["index"], r["path"], r["side"]) for r in rows):
        done = [r["mbps"] for r in rows if (r["seed"], r["index"], r["path"], r["side"]) == key and r["ok"]]
        out.append({"seed": key[0], "index": key[1], "path": key[2], "side": key[3], "runs": len(done),
                    "median_mbps": statistics.median(done) if done else None,
                    "least_mbps": min(done, default=None), "most_mbps": max(done, default=None)})
    return out


async def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("this benchmark needs root (network namespaces for the testbed)", file=sys.stderr)
        return 1
    sides = {"A": args.a, "B": args.b}
    args.out.mkdir(parents=True, exist_ok=True)
    settings = replace(pc.Settings.from_args(pc.parse_args(["--random", "1", "--runs", "1"])), inflight=None)
    payload = await pc.Payloads(args.out / "payloads").get(args.size_bytes)
    rows: list[dict[str, Any]] = []
    scenarios: dict[tuple[int, int], list[str]] = {}
    for seed, index, hops in args.items:
        scenarios.setdefault((seed, index), []).append(hops)
    for (seed, index), paths in scenarios.items():
        case = pc.case_of(ts.random_case(seed, index))
        root = args.out / f"{seed}-r{index:03d}"
        root.mkdir(exist_ok=True)
        async with Testbed(case.topology, name=f"ab-{case.name}") as tb, trio.open_nursery() as nursery:
            fleet = pc.Fleet(tb, case.depots, root, nursery)
            for run in range(args.runs):
                for side in "AB" if run % 2 == 0 else "BA":
                    for hops in paths:
                        await fleet.start()
                        depots = fleet.depots_file(root / "depots.toml", case.source, case.depots)
                        record = await pc.lnet_send(tb, case.source, depots, payload, case.dest,
                                                    ["--path", hops, "--cold"],
                                                    root / f"{side}-{run}-{hops.replace(',', '_')}",
                                                    root / "scratch-edges.json", settings, 600.0,
                                                    python=sides[side])  # the depots run this python's
                        rows.append({"seed": seed, "index": index, "path": hops, "side": side, "run": run,
                                     "ok": record["ok"], "mbps": record.get("mbps"),
                                     "seconds": record.get("seconds"), "error": record.get("error")})
                        print(f"{seed} r{index:03d} {hops:>16} {side} run {run}: "
                              + (f"{record['mbps']:.2f} Mbit/s in {record['seconds']:.1f} s" if record["ok"]
                                 else str(record["error"])[:200]), flush=True)
            await fleet.stop()
            nursery.cancel_scope.cancel()
    summary = medians(rows)
    for m in summary:
        print(f"{m['seed']} r{m['index']:03d} {m['path']:>16} {m['side']}: median "
              + (f"{m['median_mbps']:.2f} Mbit/s of {m['runs']} ({m['least_mbps']:.2f}-{m['most_mbps']:.2f})"
                 if m["runs"] else "no run finished"))
    out = ts.RESULTS / f"pinned-ab-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}.json"
    document = {"bench": "pinned_ab", "command": " ".join(["bench/pinned_ab.py", *argv]), "commit": pc.commit(),
                "size": args.size_bytes, "sides": sides, "summary": summary, "runs": rows}
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(main))
