"""The abilene topology against the logistics paper: every edge its Table 1 paths use, measured with one plain TCP
stream each, and each Table 1 path's predicted throughput (its weakest edge), next to the seed's figures.
Needs root; about 3 minutes with the default 6 s per edge.

    python bench/testbed_abilene.py [--seconds 6]
"""

from __future__ import annotations

import argparse
import json
import uuid

import trio

from lnet.testbed import Testbed
from lnet.testbed.measure import tcp_throughput

TOPOLOGY = trio.Path(__file__).parent.parent / "deploy" / "topologies" / "abilene.toml"

# the logistics paper, Table 1: path attempts of a cold start, and Table 2: the best path's edges (Mbit/s)
TABLE1 = [
    (["ornl", "svl"], 2.63),
    (["ornl", "ind", "svl"], 3.58),
    (["ornl", "den", "svl"], 3.75),
    (["ornl", "atl", "svl"], 2.55),
    (["ornl", "kc", "svl"], 3.23),
    (["ornl", "wdc", "svl"], 1.66),
    (["ornl", "nyc", "svl"], 1.74),
    (["ornl", "atl", "den", "svl"], 4.30),
    (["ornl", "atl", "ind", "den", "svl"], 4.94),
    (["ornl", "atl", "kc", "den", "svl"], 4.40),
    (["ornl", "atl", "wdc", "den", "svl"], 2.72),
    (["ornl", "atl", "nyc", "den", "svl"], 2.44),
    (["ornl", "atl", "ind", "kc", "den", "svl"], 5.99),
]
TABLE2 = {("ornl", "atl"): 17.44, ("atl", "ind"): 11.76, ("ind", "kc"): 11.52, ("kc", "den"): 11.01,
          ("den", "svl"): 5.99}


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=6.0)
    args = p.parse_args()
    edges = sorted({(a, b) for path, _ in TABLE1 for a, b in zip(path, path[1:], strict=False)})
    measured: dict[tuple[str, str], float] = {}
    async with Testbed(str(TOPOLOGY), name=f"abilene-{uuid.uuid4().hex[:6]}") as tb:
        for i, (a, b) in enumerate(edges):
            measured[(a, b)] = await tcp_throughput(tb, a, b, seconds=args.seconds, skip_s=2.0, port=5700 + i)
            print(f"edge {a:>4} -> {b:<4} {measured[(a, b)]:6.2f} Mbit/s", flush=True)
    print("\nTable 2 (edges of the best path): measured vs seed")
    for (a, b), seed in TABLE2.items():
        print(f"  {a:>4} -> {b:<4} {measured[(a, b)]:6.2f}  (seed {seed:5.2f})")
    print("\nTable 1 (paths; a pipelined path runs at its weakest edge): predicted from measured edges vs seed")
    rows = []
    for path, seed in TABLE1:
        weakest = min(measured[(a, b)] for a, b in zip(path, path[1:], strict=False))
        rows.append({"path": path, "predicted_mbit_s": round(weakest, 2), "seed_mbit_s": seed})
        print(f"  {' - '.join(path):<34} {weakest:6.2f}  (seed {seed:5.2f})")
    out = trio.Path(__file__).parent / "results"
    await out.mkdir(exist_ok=True)
    await (out / "testbed_abilene.json").write_text(json.dumps(
        {"edges": {f"{a}->{b}": round(v, 2) for (a, b), v in measured.items()}, "paths": rows}, indent=2))


if __name__ == "__main__":
    trio.run(main)
