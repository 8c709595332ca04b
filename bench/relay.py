"""The relay against direct transfers on the emulated Abilene testbed, and a three-depot chain on loopback.

    ./run bench relay [--size 32MiB] [--block-size 1MiB] [--max-inflight 2] [--skip-testbed] [--skip-loopback]

On deploy/topologies/abilene.toml (needs root), from ORNL to Sunnyvale, every lnet run with the same block size
and in-flight settings:
  (a) one plain TCP stream straight to the destination: one HTTP PUT of the whole file into a depot there;
  (b) lnet pinned to the direct path;
  (c) lnet cold start (nothing known);            (d) lnet warm start (what (c) learnt);
  (e) as many parallel TCP streams straight to the destination as lnet opens per hop (--max-inflight);
  (f) the oracle: each edge of the best path (ORNL, Atlanta, Indianapolis, Kansas City, Denver, Sunnyvale)
      measured alone with lnet's per-hop concurrency (copies of one block, --max-inflight at once, 15 s each);
      the path's bottleneck is the most any relay over it can move.
Steady state is the throughput over the second half of a run's timeline. Targets: (d) >= 2x (a),
>= 1.3x (b), >= 90% of (f) in steady state; (c) reaches 90% of (f) within 30 s.
On loopback, no emulation: lnet-send through three depots (a chain of four hops) moves >= 200 MB/s.
Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lnet.testbed import Testbed  # noqa: E402
from lnet.testbed.demo import DESTINATION, SOURCE, TOPOLOGY, _start_depot, write_depots_file  # noqa: E402
from lnet.units import parse_size  # noqa: E402
from tests.client.loopback import depots_file, loopback_depots  # noqa: E402

BEST_PATH = ["ornl", "atl", "ind", "kc", "den", "svl"]
PY = sys.executable

# Runs inside a host's namespace: direct PUT streams (a, e) and one edge's copies (f), through DepotClient.
HELPER = r"""
import sys, time, json, os, trio
from lnet.client.wire.depot_client import DepotClient
mode, args = sys.argv[1], sys.argv[2:]
async def streams(url, path, n):
    data = open(path, "rb").read()
    parts = [data[i * len(data) // n:(i + 1) * len(data) // n] for i in range(n)]
    async with DepotClient(url, timeout=120) as depot:
        allocs = await depot.allocate(max(len(p) for p in parts), 3600, count=n)
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for alloc, part in zip(allocs, parts):
                async def put(alloc=alloc, part=part):
                    async with DepotClient(url, timeout=120) as own:  # one connection each
                        await own.write(alloc.write, part)
                nursery.start_soon(put)
        return len(data) / (time.perf_counter() - started)
async def edge(source_url, target_url, block, parallel, seconds):
    async with DepotClient(source_url, timeout=120) as u, DepotClient(target_url, timeout=120) as v:
        targets = await v.allocate(block, 600, count=parallel)
        payload = os.urandom(block)
        moved = 0
        if source_url == "here":
            raise SystemExit("not used")
        src = await u.allocate_one(block, 600)
        await u.write(src.write, payload)
        deadline = time.perf_counter() + seconds
        started = time.perf_counter()
        async def copy(target):
            nonlocal moved
            while time.perf_counter() < deadline:
                await u.copy(src.read, target.write_url, dest_offset=0)
                moved += block
        async with trio.open_nursery() as nursery:
            for target in targets:
                nursery.start_soon(copy, target)
        return moved / (time.perf_counter() - started)
async def first_edge(target_url, block, parallel, seconds):
    async with DepotClient(target_url, timeout=120) as v:
        targets = await v.allocate(block, 600, count=parallel)
        payload = os.urandom(block)
        moved = 0
        deadline = time.perf_counter() + seconds
        started = time.perf_counter()
        async def write(target):
            nonlocal moved
            async with DepotClient(target_url, timeout=120) as own:
                while time.perf_counter() < deadline:
                    await own.write(target.write, payload, offset=0)
                    moved += block
        async with trio.open_nursery() as nursery:
            for target in targets:
                nursery.start_soon(write, target)
        return moved / (time.perf_counter() - started)
if mode == "streams":
    rate = trio.run(streams, args[0], args[1], int(args[2]))
elif mode == "edge":
    rate = trio.run(edge, args[0], args[1], int(args[2]), int(args[3]), float(args[4]))
else:
    rate = trio.run(first_edge, args[0], int(args[1]), int(args[2]), float(args[3]))
print(json.dumps({"bytes_per_s": rate}))
"""


def mbit(bytes_per_s: float) -> float:
    return bytes_per_s * 8 / 1e6


def steady_mbps(summary: dict[str, Any]) -> float:
    """Throughput over the second half of the run's timeline (the pipeline full, the scheduler settled)."""
    timeline = summary["timeline"]
    if len(timeline) < 4:
        return float(summary["mbps"])
    half = timeline[len(timeline) // 2]
    last = timeline[-1]
    return (last["bytes"] - half["bytes"]) * 8 / 1e6 / max(last["t"] - half["t"], 1e-9)


def time_to_fraction(summary: dict[str, Any], target_mbps: float, fraction: float = 0.9, window: int = 4) -> float:
    """Seconds until the throughput over ``window`` timeline samples first reaches ``fraction`` x target."""
    timeline = summary["timeline"]
    for i in range(window, len(timeline)):
        a, b = timeline[i - window], timeline[i]
        rate = (b["bytes"] - a["bytes"]) * 8 / 1e6 / max(b["t"] - a["t"], 1e-9)
        if rate >= fraction * target_mbps:
            return float(b["t"])
    return float("inf")


async def testbed_runs(size: int, block: str, inflight: int, out: Path, say: Any) -> dict[str, Any]:
    payload = out / "payload.bin"
    payload.write_bytes(os.urandom(size))
    memory = out / "edges.json"
    memory.unlink(missing_ok=True)
    results: dict[str, Any] = {}
    async with Testbed(TOPOLOGY, name="lnet-bench") as tb:
        for host in tb.hosts:
            if host != SOURCE:
                await _start_depot(tb, host, out / "depots")
        write_depots_file(tb, out / "depots.toml", SOURCE)
        url = {host: f"http://{tb.address(host)}:6714" for host in tb.hosts}

        async def helper(*args: str) -> float:
            done = await tb.run(SOURCE, [PY, "-c", HELPER, *args])
            return float(json.loads(done.stdout)["bytes_per_s"])

        say("(a) one TCP stream, direct ...")
        results["a"] = {"mbps": mbit(await helper("streams", url[DESTINATION], str(payload), "1"))}
        say(f"    {results['a']['mbps']:.2f} Mbit/s")
        say(f"(e) {inflight} parallel TCP streams, direct ...")
        results["e"] = {"mbps": mbit(await helper("streams", url[DESTINATION], str(payload), str(inflight)))}
        say(f"    {results['e']['mbps']:.2f} Mbit/s")
        runs = {"b": ["--path", DESTINATION], "c": ["--cold"], "d": []}
        for key, extra in runs.items():
            say(f"({key}) lnet-send {' '.join(extra) or '(warm)'} ...")
            argv = [PY, "-m", "lnet.client.send", str(payload), "--to", DESTINATION, "--depots",
                    str(out / "depots.toml"), "--memory", str(memory), "--block-size", block, "--max-inflight",
                    str(inflight), "--json", "--manifest", str(out / f"{key}.manifest.json"),
                    "--report", str(out / f"{key}.report.json"), *extra]
            done = await tb.run(SOURCE, argv)
            summary = json.loads(done.stdout)
            results[key] = {"mbps": summary["mbps"], "steady_mbps": steady_mbps(summary), "path": summary["path"],
                            "seconds": summary["seconds"], "summary": summary}
            shown = " -> ".join(summary["path"])
            say(f"    {summary['mbps']:.2f} Mbit/s (steady {steady_mbps(summary):.2f}) over {shown}")
        say("(f) the best path, edge by edge ...")
        block_bytes = parse_size(block)
        edges = {}
        for u, v in zip(BEST_PATH, BEST_PATH[1:], strict=False):
            if u == SOURCE:
                rate = await helper("first", url[v], str(block_bytes), str(inflight), "15")
            else:
                rate = await helper("edge", url[u], url[v], str(block_bytes), str(inflight), "15")
            edges[f"{u}->{v}"] = mbit(rate)
            say(f"    {u} -> {v}: {mbit(rate):.2f} Mbit/s")
        results["f"] = {"mbps": min(edges.values()), "edges": edges}
    return results


async def loopback_run(size: int, block: str) -> float:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        payload = tmp / "payload.bin"
        payload.write_bytes(os.urandom(size))
        # The destination keeps every run's blocks (a day, the default duration): room for three runs.
        with loopback_depots(["a", "b", "c"], tmp, "--capacity", "4GiB", "--max-allocation", "64MiB") as depots:
            config = depots_file(tmp, depots)
            best = 0.0
            for _ in range(3):
                argv = [PY, "-m", "lnet.client.send", str(payload), "--to", "c", "--depots", str(config),
                        "--path", "a,b", "--block-size", block, "--memory", str(tmp / "edges.json"), "--json",
                        "--manifest", str(tmp / "m.json")]
                done = await trio.run_process(argv, capture_stdout=True)
                summary = json.loads(done.stdout)
                best = max(best, size / summary["seconds"])
    return best


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="32MiB")
    parser.add_argument("--block-size", default="1MiB")
    parser.add_argument("--max-inflight", type=int, default=2)
    parser.add_argument("--loopback-size", default="1GiB")
    parser.add_argument("--loopback-block-size", default="16MiB")
    parser.add_argument("--skip-testbed", action="store_true")
    parser.add_argument("--skip-loopback", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "lnet-bench-relay")
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"bench": "relay"}

    def say(text: str) -> None:
        print(text, flush=True)

    if not args.skip_testbed:
        args.out.mkdir(parents=True, exist_ok=True)
        runs = await testbed_runs(parse_size(args.size), args.block_size, args.max_inflight, args.out, say)
        a, b, d, f = runs["a"]["mbps"], runs["b"]["mbps"], runs["d"]["steady_mbps"], runs["f"]["mbps"]
        reach = time_to_fraction(runs["c"]["summary"], f)
        print()
        print(f"abilene, {args.size} ORNL -> Sunnyvale, {args.block_size} blocks, "
              f"{args.max_inflight} in flight per hop")
        print(f"{'run':<34} {'Mbit/s':>8} {'steady':>8}")
        names = {"a": "(a) one TCP stream, direct", "b": "(b) lnet pinned direct", "c": "(c) lnet cold start",
                 "d": "(d) lnet warm start", "e": f"(e) {args.max_inflight} TCP streams, direct",
                 "f": "(f) oracle: best path bottleneck"}
        for key, name in names.items():
            steady = runs[key].get("steady_mbps")
            print(f"{name:<34} {runs[key]['mbps']:>8.2f} {'' if steady is None else f'{steady:8.2f}':>8}")
        checks = {
            "(d) >= 2x (a)": d >= 2 * a,
            "(d) >= 1.3x (b)": d >= 1.3 * b,
            "(d) steady >= 90% of (f)": d >= 0.9 * f,
            "(c) reaches 90% of (f) within 30 s": reach <= 30,
        }
        print(f"(d)/(a) = {d / a:.2f}, (d)/(b) = {d / b:.2f}, (d)/(f) = {d / f:.2f}, "
              f"(c) at 90% of (f) after {reach:.1f} s")
        for check, ok in checks.items():
            print(f"  {check}: {'met' if ok else 'MISSED'}")
        result["abilene"] = {
            key: {k: v for k, v in value.items() if k != "summary"} for key, value in runs.items()
        }
        result["abilene"]["cold_seconds_to_90pct_oracle"] = reach
        result["abilene"]["checks"] = checks
    if not args.skip_loopback:
        rate = await loopback_run(parse_size(args.loopback_size), args.loopback_block_size)
        ok = rate >= 200e6
        print(f"loopback, three depots (four hops), {args.loopback_size} in {args.loopback_block_size} blocks: "
              f"{rate / 1e6:.0f} MB/s (target >= 200 MB/s: {'met' if ok else 'MISSED'})")
        result["loopback_MBps"] = rate / 1e6
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(trio.run(main))
