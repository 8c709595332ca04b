"""Copy lanes against plain copies, one hop driven from afar, on the line3 testbed (needs root).

    flock /tmp/lnet-testbed.lock ./run bench copy_lanes [--block-size 1MiB] [--count 24] [--width 2]

deploy/topologies/line3.toml: src -- depot -- dst, 10 ms one way and 50 Mbit/s per link. Depots run on depot
and dst; the client runs on src, so every copy's control round trip (src to depot) is 20 ms. The client moves
--count blocks depot -> dst by copies, in two ways:
  (a) --width copies in flight, each slot posting its next copy when the last one answers (today's relay);
  (b) --width + 2 copies outstanding in one lane of width --width: exactly --width pushes move at a time, and the
      next copy is already queued at the depot when one finishes.
Prints, for each, the wall time, the hop's rate (bytes over wall time), the per-stream rate the depot measured
(bytes over the sum of push seconds) and the mean time a copy waited in its lane. One JSON line at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from lnet.testbed import Testbed  # noqa: E402
from lnet.testbed.demo import _start_depot  # noqa: E402
from lnet.units import parse_size  # noqa: E402

PORT = 6714

# Runs on src: allocates, writes the blocks once, then copies them depot -> dst both ways, three rounds each.
HELPER = r"""
import json, os, statistics, sys, time, trio
from lnet.client.wire.depot_client import DepotClient
depot_url, dst_url, block, count, width = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])

async def copies(u, v, sources, outstanding, lane):
    targets = await v.allocate(block, 600, count=count)
    send, receive = trio.open_memory_channel(count)
    for i in range(count):
        send.send_nowait(i)
    send.close()
    results = []
    async def slot():
        async for i in receive:
            extra = {"lane": "bench:dst", "lane_width": width} if lane else {}
            results.append(await u.copy(sources[i % len(sources)].read, targets[i].write_url, **extra))
    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(outstanding):
            nursery.start_soon(slot)
    wall = time.perf_counter() - started
    for target in targets:
        await v.free(target.manage)
    return {"wall_s": wall, "mbps": count * block * 8 / wall / 1e6,
            "per_stream_mbps": count * block * 8 / sum(r.seconds for r in results) / 1e6,
            "queued_ms": 1000 * statistics.fmean(r.queued_s for r in results)}

async def main():
    async with DepotClient(depot_url, timeout=120) as u, DepotClient(dst_url, timeout=120) as v:
        sources = await u.allocate(block, 600, count=width + 2)
        for s in sources:
            await u.write(s.write, os.urandom(block))
        out = {"plain": [], "lane": []}
        for _ in range(3):
            out["plain"].append(await copies(u, v, sources, width, False))
            out["lane"].append(await copies(u, v, sources, width + 2, True))
        print(json.dumps(out))
trio.run(main)
"""


async def main(block: int, count: int, width: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="lnet-lanes-") as tmp:
        async with Testbed(REPO / "deploy/topologies/line3.toml", name="lanes") as tb:
            for host in ("depot", "dst"):
                await _start_depot(tb, host, Path(tmp))
            argv = [sys.executable, "-c", HELPER, f"http://{tb.address('depot')}:{PORT}",
                    f"http://{tb.address('dst')}:{PORT}", str(block), str(count), str(width)]
            done = await tb.run("src", argv, check=False)
            if done.returncode != 0:
                raise SystemExit(done.stderr.decode(errors="replace"))
            result: dict[str, object] = json.loads(done.stdout)
            return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--block-size", default="1MiB")
    parser.add_argument("--count", type=int, default=24)
    parser.add_argument("--width", type=int, default=2)
    args = parser.parse_args()
    block = parse_size(args.block_size)
    result = trio.run(main, block, args.count, args.width)
    for mode in ("plain", "lane"):
        for run in result[mode]:  # type: ignore[attr-defined]
            print(f"{mode:6s} wall {run['wall_s']:6.2f} s  hop {run['mbps']:6.1f} Mbit/s  "
                  f"per stream {run['per_stream_mbps']:6.1f} Mbit/s  queued {run['queued_ms']:6.1f} ms")
    print(json.dumps({"block": block, "count": args.count, "width": args.width, **result}))
