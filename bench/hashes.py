"""CPU seconds per GiB of each hash lnet knows, on this machine: what a block costs lnet-send and the destination.

    .venv/bin/python bench/hashes.py [--block 8MiB] [--blocks 64] [--runs 7]

Hashes ``--blocks`` buffers of ``--block`` random bytes with each algorithm of ``lnet.protocol.DIGESTS``
(through ``hash_bytes``, as lnet-send and the depot's digest do), one thread; per run, the process's CPU time
(user + system) per GiB hashed. Prints the median over ``--runs`` with the spread, and one JSON line. Run it alone:
the figure is CPU time, but a busy neighbour still moves it through the caches.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lnet.protocol import DIGESTS, hash_bytes  # noqa: E402
from lnet.units import parse_size  # noqa: E402


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--block", default="8MiB", help="bytes per buffer hashed (default 8MiB, a bench block)")
    parser.add_argument("--blocks", type=int, default=64, help="buffers per run (default 64)")
    parser.add_argument("--runs", type=int, default=7, help="runs; the median is reported (default 7)")
    args = parser.parse_args(argv)
    block = os.urandom(parse_size(args.block))
    gib = len(block) * args.blocks / 2**30
    result: dict[str, object] = {"bench": "hashes", "block_bytes": len(block), "blocks": args.blocks,
                                 "runs": args.runs, "cores": os.cpu_count()}
    print(f"CPU-s per GiB, {args.blocks} buffers of {len(block)} bytes, median of {args.runs} runs (min-max):")
    for algorithm in DIGESTS:
        figures = []
        for _ in range(args.runs):
            began = cpu_s()
            for _ in range(args.blocks):
                hash_bytes(algorithm, block)
            figures.append((cpu_s() - began) / gib)
        median = statistics.median(figures)
        print(f"  {algorithm:<8} {median:.2f} ({min(figures):.2f}-{max(figures):.2f})")
        result[f"{algorithm}_cpu_s_per_GiB"] = median
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
