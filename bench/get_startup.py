"""What `lnet-get URL...` costs outside the download itself: process start to exit, against its own `seconds`.

    .venv/bin/python bench/get_startup.py [--runs 15] [--size 64KiB] [--replicas 2]

Serves a random file from --replicas small HTTP/1.1 servers on loopback (tests/client/http_replicas.py: Range,
keep-alive, validators) and runs the installed `lnet-get URL... -o OUT --json --no-progress` --runs times in a
row, each in a fresh process. Prints the median wall-clock time from spawning the process to its exit, with the
lowest and highest, and the median of lnet-get's own `seconds` (from the start of the download to the file in
place): their difference is the interpreter, the imports and the exit, which every short download pays. No root,
no testbed; run it alone on the machine (the figures are a few hundredths of a second).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "client"))

from http_replicas import Replica, replicas  # noqa: E402

from lnet.units import parse_size  # noqa: E402


async def measure(runs: int, size: int, count: int) -> dict[str, float]:
    data = os.urandom(size)
    lnet_get = Path(sys.executable).parent / "lnet-get"
    walls, owns, firsts, dials = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="lnet-get-startup-") as scratch:
        async with replicas(*(Replica(data) for _ in range(count))) as servers:
            for i in range(runs):
                out = Path(scratch) / f"out-{i}.bin"
                argv = [str(lnet_get), *(s.url for s in servers), "-o", str(out), "--json", "--no-progress"]
                for server in servers:
                    server.first_request_at = server.first_connection_at = None
                started = time.monotonic()
                done = await trio.run_process(argv, capture_stdout=True)
                walls.append(time.monotonic() - started)
                firsts.append(min(s.first_request_at for s in servers if s.first_request_at is not None) - started)
                dials.append(min(s.first_connection_at for s in servers if s.first_connection_at is not None)
                             - started)
                owns.append(json.loads(done.stdout)["seconds"])
                if out.read_bytes() != data:
                    raise SystemExit(f"run {i}: the bytes differ")
                out.unlink()
    return {"wall_median_s": statistics.median(walls), "wall_min_s": min(walls), "wall_max_s": max(walls),
            "own_median_s": statistics.median(owns), "first_request_median_s": statistics.median(firsts),
            "first_request_min_s": min(firsts), "first_request_max_s": max(firsts),
            "first_connection_median_s": statistics.median(dials), "first_connection_min_s": min(dials),
            "first_connection_max_s": max(dials)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--size", type=parse_size, default=parse_size("64KiB"))
    p.add_argument("--replicas", type=int, default=2)
    args = p.parse_args()
    result = trio.run(measure, args.runs, args.size, args.replicas)
    print(f"lnet-get, {args.runs} runs, {args.size} bytes from {args.replicas} loopback replicas: process start to "
          f"exit {result['wall_median_s']:.3f} s median ({result['wall_min_s']:.3f}-{result['wall_max_s']:.3f}), "
          f"its own seconds {result['own_median_s']:.3f}; a replica accepted the first connection "
          f"{result['first_connection_median_s']:.3f} s after the start ({result['first_connection_min_s']:.3f}-"
          f"{result['first_connection_max_s']:.3f}) and read the first request after "
          f"{result['first_request_median_s']:.3f} s ({result['first_request_min_s']:.3f}-"
          f"{result['first_request_max_s']:.3f})")
    print(json.dumps({"bench": "get_startup", "runs": args.runs, **result}))


if __name__ == "__main__":
    main()
